//! Static files over real TCP: paths, ranges, conditionals, listings, symlinks,
//! I/O modes, large files, and real clients (curl).

use sluice_testkit::*;
use std::io::Write;
use std::os::unix::fs::symlink;

fn get(srv: &Server, path: &str, extra: &str) -> Resp {
    srv.get(&format!("GET {path} HTTP/1.1\r\nHost: a\r\n{extra}\r\n"))
}

#[test]
fn traversal_and_hidden_files_are_refused() {
    let srv = Server::start(&[]);
    for p in [
        "/../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/sub/../../x",
        "/a%00b",
        "/a%5c..%5cb",
        "/..%2fetc",
    ] {
        let r = get(&srv, p, "");
        assert!(r.status == 400 || r.status == 404, "{p}: {}", r.status);
        assert!(!r.text().contains("root:"), "{p}");
    }
    assert_eq!(get(&srv, "/.secret", "").status, 404);
    assert_eq!(get(&srv, "/list/b%20b.txt", "").text(), "bb");
    assert_eq!(get(&srv, "/sub/../hello.txt", "").status, 200);
}

#[test]
fn symlinks_only_inside_the_root() {
    let dir = docroot();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("out.txt"), b"outside").unwrap();
    symlink(
        outside.path().join("out.txt"),
        dir.path().join("escape.txt"),
    )
    .unwrap();
    symlink(outside.path(), dir.path().join("escdir")).unwrap();
    symlink("hello.txt", dir.path().join("inside.txt")).unwrap();
    let srv = Server::start_in(dir, &[]);
    assert_eq!(get(&srv, "/inside.txt", "").text(), "hello world\n");
    for p in ["/escape.txt", "/escdir/out.txt"] {
        let r = get(&srv, p, "");
        assert!(r.status == 403 || r.status == 404, "{p}: {}", r.status);
        assert!(!r.text().contains("outside"));
    }
    // The listing does not show the escaping links either.
    let l = get(&srv, "/?format=json", "").text();
    assert!(l.contains("inside.txt") && !l.contains("escape.txt"), "{l}");
}

#[test]
fn content_type_validators_and_conditionals() {
    let srv = Server::start(&[]);
    let r = get(&srv, "/hello.txt", "");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    let etag = r.header("etag").unwrap().to_string();
    let lm = r.header("last-modified").unwrap().to_string();
    assert!(etag.starts_with('"') && etag.ends_with('"'));
    assert_eq!(
        get(&srv, "/hello.txt", &format!("If-None-Match: {etag}\r\n")).status,
        304
    );
    assert_eq!(
        get(&srv, "/hello.txt", "If-None-Match: \"other\"\r\n").status,
        200
    );
    // A list in two lines is one list, whichever line holds the tag.
    for lines in [
        format!("If-None-Match: {etag}\r\nIf-None-Match: \"other\"\r\n"),
        format!("If-None-Match: \"other\"\r\nIf-None-Match: {etag}\r\n"),
    ] {
        assert_eq!(get(&srv, "/hello.txt", &lines).status, 304, "{lines}");
    }
    let lines = format!("If-Match: {etag}\r\nIf-Match: \"other\"\r\n");
    assert_eq!(get(&srv, "/hello.txt", &lines).status, 200);
    assert_eq!(
        get(&srv, "/hello.txt", &format!("If-Modified-Since: {lm}\r\n")).status,
        304
    );
    assert_eq!(
        get(
            &srv,
            "/hello.txt",
            "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        )
        .status,
        200
    );
    let r = get(&srv, "/hello.txt", &format!("If-None-Match: {etag}\r\n"));
    assert!(r.body.is_empty());
    assert_eq!(r.header("etag"), Some(etag.as_str()));
}

#[test]
fn ranges() {
    let srv = Server::start(&[]);
    let big = big_bytes();
    let r = get(&srv, "/big.bin", "Range: bytes=100-199\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 100-199/300000"));
    assert_eq!(r.body, &big[100..200]);
    let r = get(&srv, "/big.bin", "Range: bytes=-10\r\n");
    assert_eq!(r.body, &big[big.len() - 10..]);
    let r = get(&srv, "/big.bin", "Range: bytes=299990-\r\n");
    assert_eq!(r.body, &big[299_990..]);
    let r = get(&srv, "/big.bin", "Range: bytes=300000-\r\n");
    assert_eq!(r.status, 416);
    // An empty file is answered whole (200, empty), as nginx and Apache do: the
    // `bytes=0-` media elements and download managers start with is no error.
    std::fs::write(srv.root().join("empty.txt"), b"").unwrap();
    for range in ["bytes=0-", "bytes=-1", "bytes=0-0"] {
        let r = get(&srv, "/empty.txt", &format!("Range: {range}\r\n"));
        assert_eq!(
            (r.status, r.header("content-length"), r.body.len()),
            (200, Some("0"), 0),
            "{range}"
        );
    }
    assert_eq!(r.header("content-range"), Some("bytes */300000"));
    // If-Range with a stale validator: the whole file.
    let r = get(
        &srv,
        "/big.bin",
        "Range: bytes=0-9\r\nIf-Range: \"stale\"\r\n",
    );
    assert_eq!((r.status, r.body.len()), (200, 300_000));
    let etag = get(&srv, "/big.bin", "")
        .header("etag")
        .unwrap()
        .to_string();
    let r = get(
        &srv,
        "/big.bin",
        &format!("Range: bytes=0-9\r\nIf-Range: {etag}\r\n"),
    );
    assert_eq!((r.status, r.body.len()), (206, 10));
    // Two Range lines (not a list field): the whole file, as Apache answers.
    let r = get(
        &srv,
        "/big.bin",
        "Range: bytes=0-9\r\nRange: bytes=10-19\r\n",
    );
    assert_eq!((r.status, r.body.len()), (200, 300_000));
    // A small (cached in memory) file serves ranges too.
    assert_eq!(
        get(&srv, "/hello.txt", "Range: bytes=6-10\r\n").text(),
        "world"
    );
}

#[test]
fn multipart_byteranges() {
    let srv = Server::start(&[]);
    let big = big_bytes();
    let r = get(&srv, "/big.bin", "Range: bytes=0-4,1000-1009,-3\r\n");
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .expect(ct);
    let body = r.body.clone();
    let sep = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut rest = &body[..];
    while let Some(i) = find(rest, sep.as_bytes()) {
        rest = &rest[i + sep.len()..];
        if rest.starts_with(b"--") {
            break;
        }
        let head_end = find(rest, b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&rest[..head_end]).to_string();
        let data_start = head_end + 4;
        let next = find(&rest[data_start..], sep.as_bytes()).unwrap();
        parts.push((head, rest[data_start..data_start + next - 2].to_vec()));
    }
    assert_eq!(parts.len(), 3, "{}", String::from_utf8_lossy(&body));
    assert!(parts[0].0.contains("Content-Range: bytes 0-4/300000"));
    assert_eq!(parts[0].1, &big[0..5]);
    assert_eq!(parts[1].1, &big[1000..1010]);
    assert_eq!(parts[2].1, &big[299_997..]);
    // Too many ranges: the whole file instead.
    let many: Vec<String> = (0..40).map(|i| format!("{}-{}", i * 10, i * 10)).collect();
    let r = get(
        &srv,
        "/big.bin",
        &format!("Range: bytes={}\r\n", many.join(",")),
    );
    assert_eq!((r.status, r.body.len()), (200, 300_000));
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

#[test]
fn directories() {
    let srv = Server::start(&[]);
    let r = get(&srv, "/sub?x=1", "");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/sub/?x=1"));
    assert_eq!(get(&srv, "/sub/", "").text(), "<h1>sub</h1>\n");
    let html = get(&srv, "/list/", "").text();
    assert!(
        html.contains("<a href=\"./a.txt\">a.txt</a>") && html.contains("./b%20b.txt"),
        "{html}"
    );
    assert!(html.contains("?sort=size"), "sortable");
    let json = get(&srv, "/list/", "Accept: application/json\r\n").text();
    assert!(
        json.contains("\"name\": \"b b.txt\"") && json.contains("\"size\": 2"),
        "{json}"
    );
    let by_size = get(&srv, "/list/?format=json&sort=size&order=desc", "").text();
    assert!(by_size.find("b b.txt").unwrap() < by_size.find("a.txt").unwrap());
    // Apache mod_autoindex's form of the same orders gives the same pages.
    assert_eq!(get(&srv, "/list/?C=S;O=D&format=json", "").text(), by_size);
    for (apache, own) in [
        ("C=M;O=D", "sort=date&order=desc"),
        ("C=N;O=D", "sort=name&order=desc"),
        ("C=S;O=A", "sort=size&order=asc"),
    ] {
        let a = get(&srv, &format!("/list/?{apache}"), "").text();
        assert_eq!(
            a,
            get(&srv, &format!("/list/?{own}"), "").text(),
            "{apache}"
        );
    }
    assert_ne!(
        get(&srv, "/list/?C=N;O=D", "").text(),
        get(&srv, "/list/?C=N;O=A", "").text()
    );
    assert_eq!(get(&srv, "/hello.txt/", "").status, 404);
    // A last dot segment leaves the directory form (RFC 3986 §5.2.4): a file
    // under it is not there, as under its trailing slash; a directory is sent to
    // its canonical URL, where the listing's relative links resolve.
    assert_eq!(get(&srv, "/hello.txt/.", "").status, 404);
    for p in ["/list/x/..", "/list/.", "/list%2f"] {
        let r = get(&srv, p, "");
        assert_eq!(
            (r.status, r.header("location")),
            (301, Some("/list/")),
            "{p}"
        );
    }
    assert_eq!(get(&srv, "/list/x/../", "").text(), html);
}

#[test]
fn offsets_above_four_gib() {
    let dir = docroot();
    let path = dir.path().join("huge.iso");
    let f = std::fs::File::create(&path).unwrap();
    let len: u64 = (5 << 30) + 123;
    f.set_len(len).unwrap();
    let marker_at: u64 = (4 << 30) + 1_000_000;
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"MARKER-BEYOND-4GIB", marker_at).unwrap();
    drop(f);
    let srv = Server::start_in(dir, &[]);
    let r = srv.get("HEAD /huge.iso HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.header("content-length"), Some(len.to_string().as_str()));
    let r = get(
        &srv,
        "/huge.iso",
        &format!("Range: bytes={}-{}\r\n", marker_at, marker_at + 17),
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.text(), "MARKER-BEYOND-4GIB");
    let r = get(&srv, "/huge.iso", "Range: bytes=-3\r\n");
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes {}-{}/{}", len - 3, len - 1, len).as_str())
    );
}

#[test]
fn curl_resume_range_head_and_conditional() {
    assert!(
        curl_available(),
        "curl is needed (scripts/test.sh installs it)"
    );
    let srv = Server::start(&[]);
    let big = big_bytes();
    let out = tempfile::tempdir().unwrap();
    let part = out.path().join("big.part");
    // A download cut at 100,000 bytes, resumed with -C -.
    std::fs::write(&part, &big[..100_000]).unwrap();
    let o = curl(&[
        "-C",
        "-",
        "-o",
        part.to_str().unwrap(),
        &srv.url("/big.bin"),
    ]);
    assert!(o.status.success(), "{o:?}");
    assert!(std::fs::read(&part).unwrap() == big, "resumed file differs");
    // Resuming a complete file is not an error for curl (416 handled).
    let o = curl(&[
        "-C",
        "-",
        "-o",
        part.to_str().unwrap(),
        &srv.url("/big.bin"),
    ]);
    assert!(o.status.success(), "{o:?}");

    let o = curl(&["--range", "10-19", &srv.url("/big.bin")]);
    assert_eq!(o.stdout, &big[10..20]);
    let o = curl(&["-I", &srv.url("/big.bin")]);
    let head = String::from_utf8_lossy(&o.stdout);
    assert!(
        head.starts_with("HTTP/1.1 200") && head.contains("Content-Length: 300000"),
        "{head}"
    );
    // -z: If-Modified-Since from a date in the future → 304, nothing written.
    let o = curl(&[
        "-z",
        "Sat, 01 Jan 2050 00:00:00 GMT",
        "-w",
        "%{http_code}",
        "-o",
        "/dev/null",
        &srv.url("/big.bin"),
    ]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "304");
    // --path-as-is traversal attempt.
    let o = curl(&[
        "--path-as-is",
        "-w",
        "%{http_code}",
        "-o",
        "/dev/null",
        &srv.url("/../../etc/passwd"),
    ]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "400");
    // Keep-alive across several URLs on one curl invocation.
    let o = curl(&["-v", &srv.url("/hello.txt"), &srv.url("/hello.txt")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Re-using existing connection") || err.contains("Reusing existing"),
        "{err}"
    );
}

/// A file whose modification time is in the future (an upstream's clock) is
/// sent with `Last-Modified` no later than `Date` (RFC 9110 §8.8.2.1, as Apache),
/// so a client that keeps the date (`curl -R`, then `-z`, as apt and `wget -N` do)
/// still gets the file's next real change; sent as it is (nginx, and sluice
/// before), the future date answered every later `If-Modified-Since` with a 304.
#[test]
fn a_future_modification_time_is_sent_as_now() {
    let dir = docroot();
    let path = dir.path().join("skewed.txt");
    std::fs::write(&path, b"first\n").unwrap();
    let in_2030 = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_893_456_000);
    let touch = |t| {
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(t)
            .unwrap()
    };
    touch(in_2030);
    let srv = Server::start_in(dir, &[]);
    let r = get(&srv, "/skewed.txt", "");
    let lm = r.header("last-modified").unwrap().to_string();
    assert_ne!(lm, "Tue, 01 Jan 2030 00:00:00 GMT");
    assert!(
        sluice_http::date::parse(&lm).unwrap()
            <= sluice_http::date::parse(r.header("date").unwrap()).unwrap()
    );
    // Unchanged: the date it was given still answers 304.
    let r = get(&srv, "/skewed.txt", &format!("If-Modified-Since: {lm}\r\n"));
    assert_eq!(r.status, 304);
    // curl keeps the date on its copy and asks with it, as apt and wget -N do.
    let local = srv.root().join(".copy");
    let url = srv.url("/skewed.txt");
    let fetch = || {
        curl(&[
            "-R",
            "-z",
            local.to_str().unwrap(),
            "-o",
            local.to_str().unwrap(),
            &url,
        ])
    };
    fetch();
    assert_eq!(std::fs::read(&local).unwrap(), b"first\n");
    // The file changes a moment later, with a true time.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(&path, b"second\n").unwrap();
    touch(std::time::SystemTime::now());
    wait_until(
        || {
            fetch();
            std::fs::read(&local).unwrap() == b"second\n"
        },
        || "the change was answered 304".into(),
    );
}

#[test]
fn many_concurrent_downloads_complete() {
    let srv = Server::start(&[]);
    let big = std::sync::Arc::new(big_bytes());
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let addr = srv.addr.clone();
            let big = big.clone();
            std::thread::spawn(move || {
                let mut c = Client::new(std::net::TcpStream::connect(addr).unwrap());
                for _ in 0..5 {
                    c.send(b"GET /big.bin HTTP/1.1\r\nHost: a\r\n\r\n");
                    let r = c.response(false).unwrap();
                    assert!(r.body == *big);
                }
                c.s.flush().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// A mirror's names are bytes: a Latin-1 name (not UTF-8), a name with a literal
/// `%` that looks like an escape, and the UTF-8 name they resemble are three files,
/// each served by its own escaped URL and each linked from the listing.
#[test]
fn names_in_any_bytes_are_served_and_linked() {
    use std::os::unix::ffi::OsStrExt;
    let dir = docroot();
    let d = dir.path().join("names");
    std::fs::create_dir(&d).unwrap();
    let files: [(&[u8], &str); 4] = [
        (b"caf\xe9.txt", "/names/caf%E9.txt"),
        (b"caf%E9.txt", "/names/caf%25E9.txt"),
        ("café.txt".as_bytes(), "/names/caf%C3%A9.txt"),
        (b"x\x80y", "/names/x%80y"),
    ];
    for (i, (name, _)) in files.iter().enumerate() {
        std::fs::write(
            d.join(std::ffi::OsStr::from_bytes(name)),
            format!("file {i}"),
        )
        .unwrap();
    }
    // A directory whose name holds a `%`: its page is titled with the name itself,
    // and the operator's per-path headers name it as it is.
    std::fs::create_dir(d.join("dir%41")).unwrap();
    std::fs::write(d.join("dir%41/in.txt"), "inside").unwrap();
    let toml = "[[files.cache_control]]\nprefix = \"/names/dir%41/\"\nvalue = \"max-age=7\"\n";
    let srv = Server::start_with_config(dir, toml, &[]);
    let page = get(&srv, "/names/dir%2541/", "").text();
    assert!(
        page.contains("<title>Index of /names/dir%41/</title>"),
        "{page}"
    );
    let r = get(&srv, "/names/dir%2541/in.txt", "");
    assert_eq!(
        (r.text().as_str(), r.header("cache-control")),
        ("inside", Some("max-age=7"))
    );
    for (i, (_, url)) in files.iter().enumerate() {
        let r = get(&srv, url, "");
        assert_eq!((r.status, r.text()), (200, format!("file {i}")), "{url}");
    }
    // Every link the listing gives answers with its own file.
    let page = get(&srv, "/names/", "").text();
    let links: Vec<&str> = page
        .split("href=\"./")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
        .filter(|l| !l.ends_with('/'))
        .collect();
    let mut served: Vec<String> = links
        .iter()
        .map(|l| get(&srv, &format!("/names/{l}"), "").text())
        .collect();
    served.sort();
    assert_eq!(
        served,
        ["file 0", "file 1", "file 2", "file 3"],
        "{links:?}"
    );
}
