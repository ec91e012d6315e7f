//! The handler's answers that need no server: what the file cache keeps.

use super::*;
use sluice_http::{parse_head, Limits, Parsed};

/// The handler's answer to a GET for `path` with the header lines `extra`.
fn ask(h: &mut StaticHandler, path: &str, extra: &str, now: Instant) -> Response {
    let raw = format!("GET {path} HTTP/1.1\r\nHost: a\r\n{extra}\r\n");
    let Ok(Parsed::Complete(head)) = parse_head(raw.as_bytes(), &Limits::default()) else {
        panic!("not a request: {raw}");
    };
    h.serve(&head, head.path, head.query, now)
}

fn get(h: &mut StaticHandler, path: &str, now: Instant) -> Response {
    ask(h, path, "Accept-Encoding: gzip, br\r\n", now)
}

#[test]
fn absent_siblings_take_no_room_in_the_file_cache() {
    // A browser asking for 40 files, of which one has a gzip sibling: the cache
    // holds the 40 files and that sibling, not three misses for every file (with
    // them, 161 entries would overflow 64 and empty the cache again and again).
    let dir = tempfile::tempdir().unwrap();
    for i in 0..40 {
        std::fs::write(dir.path().join(format!("f{i}.txt")), b"x").unwrap();
    }
    std::fs::write(dir.path().join("f7.txt.gz"), b"gz").unwrap();
    let root = Root::new(dir.path(), sluice_config::SymlinkPolicy::InsideRoot).unwrap();
    let cfg = FilesSection {
        cache_entries: 64,
        ..FilesSection::default()
    };
    let mut h = StaticHandler::new(root, cfg, 4);
    let now = Instant::now();
    for i in 0..40 {
        let r = get(&mut h, &format!("/f{i}.txt"), now);
        assert_eq!(r.status, 200);
        let vary = r.headers.as_bytes().windows(5).any(|w| w == b"Vary:");
        assert_eq!(vary, i == 7, "f{i}.txt");
    }
    assert_eq!(h.cached_entries(), 41);
}

#[test]
fn one_listing_page_for_every_spelling_of_its_directory() {
    // `/d/x/../` and `//d/` name `/d/`: one page, built once per validity, not one
    // build (and a slot in the page cache) for every spelling a client invents.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("d/first.txt"), b"x").unwrap();
    let root = Root::new(dir.path(), sluice_config::SymlinkPolicy::InsideRoot).unwrap();
    let cfg = FilesSection {
        listing: true,
        ..FilesSection::default()
    };
    let mut h = StaticHandler::new(root, cfg, 4);
    let now = Instant::now();
    let mut page = |path: &str| {
        let r = ask(&mut h, path, "", now);
        match r.body.first() {
            Some(Chunk::Shared(b, ..)) if r.status == 200 => {
                String::from_utf8_lossy(b).into_owned()
            }
            _ => panic!("{path}: not a listing: {}", r.status),
        }
    };
    let first = page("/d/");
    assert!(first.contains("<title>Index of /d/</title>"), "{first}");
    // Within the validity a new file does not show: the page is the one built.
    std::fs::write(dir.path().join("d/second.txt"), b"y").unwrap();
    for p in ["/d/x/../", "//d/", "/d/./", "/%64/"] {
        assert_eq!(page(p), first, "{p}");
    }
}

#[test]
fn aliases_take_whole_segments_and_the_longest_prefix() {
    let main = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(main.path().join("pub/ubuntu-cd")).unwrap();
    std::fs::write(main.path().join("pub/ubuntu-cd/f"), b"main").unwrap();
    std::fs::write(a.path().join("f"), b"a").unwrap();
    std::fs::create_dir(a.path().join("ports")).unwrap();
    std::fs::write(b.path().join("f"), b"b").unwrap();
    let mut root = Root::new(main.path(), sluice_config::SymlinkPolicy::InsideRoot).unwrap();
    // Mounted shorter first: the longer prefix must still win.
    root.mount("pub/ubuntu", a.path()).unwrap();
    root.mount("pub/ubuntu/ports", b.path()).unwrap();
    let read = |rel: &str| std::io::read_to_string(root.open(rel).unwrap()).unwrap();
    assert_eq!(read("pub/ubuntu/f"), "a");
    assert_eq!(read("pub/ubuntu/ports/f"), "b");
    assert_eq!(read("pub/ubuntu-cd/f"), "main");
    // The prefix itself is the alias's directory, opened and stamped as such.
    let d = root.open("pub/ubuntu").unwrap();
    assert!(d.metadata().unwrap().is_dir());
    assert_eq!(
        root.stamp("pub/ubuntu").unwrap(),
        open::Stamp::of(&std::fs::metadata(a.path()).unwrap())
    );
    assert_eq!(
        root.stamp("pub/ubuntu/f").unwrap(),
        open::Stamp::of(&std::fs::metadata(a.path().join("f")).unwrap())
    );
    // `..` cannot climb out of an alias's directory into the main root.
    assert!(root.open("pub/ubuntu/../ubuntu-cd/f").is_err());
}
