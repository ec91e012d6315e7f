//! A request whose answer needs the disk before anything can be sent (a path the
//! kernel has no directory entry for, a small file's bytes or a medium file's
//! pages not in the page cache) waits while a disk thread reads them, and the
//! worker answers it afterwards, from the caches: the status page counts these as
//! `disk_lookups_total`. With `disk_threads = 0` the worker reads for itself.

use sluice_testkit::*;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32 * 13 % 251) as u8 ^ seed)
        .collect()
}

fn lookups(srv: &Server) -> u64 {
    srv.status_json()["disk_lookups_total"]
        .as_u64()
        .expect("disk_lookups_total")
}

fn get(srv: &Server, path: &str) -> Resp {
    srv.get(&format!(
        "GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    ))
}

/// With `disk_lookup_max = "0s"` every lookup the kernel cannot make from its
/// caches goes to the disk threads; by default (1 ms) the worker makes those
/// itself while they are fast, as a name never asked for in a cached directory is.
#[test]
fn cold_lookups_and_small_files_are_made_off_the_worker() {
    let small = pattern(9_000, 1); // in memory (small_file_max 16 KiB)
    let medium = pattern(70_000, 2); // sent from disk in one turn
    let index = pattern(3_000, 3);
    for (threads, lookup_max) in [(2, "0s"), (2, "1ms"), (0, "0s")] {
        let dir = docroot();
        let root = dir.path().to_path_buf();
        std::fs::create_dir(root.join("d")).unwrap();
        // The absent names are asked in a directory of their own, written to the
        // disk now: a lookup in the root, whose blocks the files' creation below
        // keeps busy with writeback, can wait for them (a real wait: it counts).
        std::fs::create_dir(root.join("n")).unwrap();
        std::fs::File::open(root.join("n"))
            .unwrap()
            .sync_all()
            .unwrap();
        std::fs::File::open(&root).unwrap().sync_all().unwrap();
        let srv = Server::start_with_config(
            dir,
            &format!("[files]\ndisk_threads = {threads}\ndisk_lookup_max = \"{lookup_max}\"\n"),
            &[],
        );
        let mut counted = Vec::new();
        for (path, file, data) in [
            ("/small.bin", "small.bin", &small),
            ("/medium.bin", "medium.bin", &medium),
            ("/d/", "d/index.html", &index),
        ] {
            write_evicted(&root.join(file), data);
            let before = lookups(&srv);
            let r = get(&srv, path);
            assert_eq!(r.status, 200, "{path} with {threads} disk threads");
            assert!(r.body == *data, "{path}: the cold body differs");
            counted.push(lookups(&srv) - before);
            // Now cached (the entry, the pages): nothing more to wait for.
            let before = lookups(&srv);
            assert!(get(&srv, path).body == *data);
            assert_eq!(lookups(&srv), before, "{path} waited again, warm");
        }
        // Names never asked for: the kernel has no entry for them. With "0s" the
        // disk threads look each up; by default the worker does, while its own
        // lookups do not wait (on this machine's disk, unless one waited behind
        // writeback: then some go to the disk threads).
        let before = lookups(&srv);
        for i in 0..40 {
            let absent = format!("/n/never-asked-{}-{i}", std::process::id());
            assert_eq!(get(&srv, &absent).status, 404);
        }
        counted.push(lookups(&srv) - before);
        // A browser's request for a file whose precompressed siblings were never
        // looked up: while lookups go to the disk threads ("0s"), so do those.
        std::fs::write(root.join("n/page.html"), b"<p>hi</p>").unwrap();
        let before = lookups(&srv);
        let r = srv.get(
            "GET /n/page.html HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip, br\r\n\
             Connection: close\r\n\r\n",
        );
        assert_eq!((r.status, r.text()), (200, "<p>hi</p>".into()));
        counted.push(lookups(&srv) - before);
        if threads > 0 && lookup_max == "0s" {
            assert_eq!(
                counted,
                [1, 1, 1, 40, 1],
                "each cold answer (small, medium, index, absent names, siblings) \
                 waits for the pool once"
            );
        } else if threads > 0 {
            assert!(
                counted[..3] == [1, 1, 1] && counted[3] < 40 && counted[4] <= 1,
                "cold bytes wait for the pool; absent names and siblings not all: {counted:?}"
            );
        } else {
            assert_eq!(
                counted,
                [0, 0, 0, 0, 0],
                "no disk threads, yet lookups were counted"
            );
        }
    }
}

/// A request that waits for the disk keeps its place: what the client pipelined
/// behind it is answered after it, in order, on the same connection.
#[test]
fn a_request_waiting_for_the_disk_keeps_the_requests_behind_it_in_order() {
    let dir = docroot();
    let root = dir.path().to_path_buf();
    let cold = pattern(12_000, 9);
    let srv = Server::start_with_config(dir, "[files]\ndisk_threads = 1\n", &[]);
    write_evicted(&root.join("cold.bin"), &cold);
    let before = lookups(&srv);
    let mut c = srv.client();
    c.send(
        b"GET /cold.bin HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /cold.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=100-199\r\n\r\n",
    );
    let first = c.response(false).expect("first answer");
    assert_eq!(first.status, 200);
    assert!(first.body == cold);
    let second = c.response(false).expect("second answer");
    assert_eq!(
        (second.status, second.text()),
        (200, "hello world\n".into())
    );
    let third = c.response(false).expect("third answer");
    assert_eq!(third.status, 206);
    assert!(third.body == cold[100..200]);
    assert_eq!(lookups(&srv), before + 1);
    // The connection is usable afterwards, as any kept-alive one.
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(c.response(false).expect("fourth answer").status, 200);
}

/// The rules' `-f`/`-d` ask the file cache, which stops short of the disk like an
/// answer does: the request waits for a disk thread and is asked again, and a rate
/// condition counts it once, not once per time it is asked.
#[test]
fn rules_file_tests_and_rates_wait_for_the_disk_threads() {
    let dir = docroot();
    let root = dir.path().to_path_buf();
    std::fs::create_dir(root.join("n")).unwrap();
    std::fs::File::open(root.join("n"))
        .unwrap()
        .sync_all()
        .unwrap();
    let rewrite = root.join(".rules-f.conf");
    std::fs::write(
        &rewrite,
        "RewriteEngine On\n\
         RewriteCond %{REQUEST_FILENAME} !-f\n\
         RewriteRule ^/n/(.*)$ /hello.txt?missing=$1 [R=302]\n",
    )
    .unwrap();
    let limit = root.join(".rules-rate.rules");
    std::fs::write(&limit, "prefix /c/ limit rate=4/60s\n").unwrap();
    std::fs::create_dir(root.join("c")).unwrap();
    let srv = Server::start_with_config(
        dir,
        "[files]\ndisk_threads = 2\ndisk_lookup_max = \"0s\"\n",
        &[
            "--rules",
            rewrite.to_str().unwrap(),
            "--rules",
            limit.to_str().unwrap(),
        ],
    );
    // Names never asked for: each `-f` waits for the pool once.
    let before = lookups(&srv);
    for i in 0..5 {
        let r = get(&srv, &format!("/n/never-{i}"));
        assert_eq!(
            (r.status, r.header("location")),
            (302, Some(format!("/hello.txt?missing=never-{i}").as_str()))
        );
    }
    assert_eq!(
        lookups(&srv) - before,
        5,
        "each cold -f waited for the pool"
    );
    // Two cold files under a rate of four a minute, the first with a request
    // pipelined behind it: all served, though each cold one was asked of the rules
    // twice, and the pipelined one is counted as the new request it is; the fifth
    // request is over the rate.
    std::fs::write(root.join("c/hot.txt"), b"hot").unwrap();
    let mut waited = Vec::new();
    for i in 0..2 {
        let data = pattern(9_000, i as u8);
        write_evicted(&root.join(format!("c/f{i}.bin")), &data);
        let before = lookups(&srv);
        let mut c = srv.client();
        c.send(format!("GET /c/f{i}.bin HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
        if i == 0 {
            c.send(b"GET /c/hot.txt HTTP/1.1\r\nHost: a\r\n\r\n");
        }
        let r = c.response(false).expect("the cold file's answer");
        assert_eq!(r.status, 200, "cold file {i} was limited");
        assert!(r.body == data);
        if i == 0 {
            let r = c.response(false).expect("the pipelined answer");
            assert_eq!((r.status, r.text()), (200, "hot".into()));
        }
        waited.push(lookups(&srv) - before);
    }
    assert_eq!(waited, [1, 1], "each cold file waited for the pool once");
    assert_eq!(get(&srv, "/c/hot.txt").status, 200, "the fourth request");
    assert_eq!(get(&srv, "/c/f0.bin").status, 429, "the fifth request");
}

/// A listing's directory read is made by a disk thread whenever there are disk
/// threads (a cold directory of 120 entries is ~120 reads of the disk), which
/// also builds the page (and its gzipped form if asked), so that a big
/// directory's page does not hold up the worker; the worker takes it when the
/// request is asked again, and the page is then kept as usual. With
/// `disk_threads = 0` the worker reads and builds it. Either way the pages are the
/// same bytes, and the gzipped one is the plain one compressed.
#[test]
fn a_listing_is_read_by_the_disk_threads_while_lookups_go_there() {
    let mut pages = Vec::new();
    for (threads, lookup_max) in [(2, "0s"), (0, "0s"), (2, "1s")] {
        // Each server has its own root: the listed times are made the same.
        let dir = docroot();
        for e in std::fs::read_dir(dir.path().join("list")).unwrap() {
            let f = std::fs::File::open(e.unwrap().path()).unwrap();
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
            f.set_modified(t).unwrap();
        }
        let srv = Server::start_with_config(
            dir,
            &format!(
                "[files]\nlisting = true\ndisk_threads = {threads}\n\
                 disk_lookup_max = \"{lookup_max}\"\n"
            ),
            // One worker: each has its own pages.
            &["--workers", "1"],
        );
        let listed = |path: &str| {
            let before = lookups(&srv);
            let r = get(&srv, path);
            assert_eq!(r.status, 200, "{path}");
            let body = r.text();
            assert!(
                body.contains("./a.txt") && body.contains("./b%20b.txt"),
                "{path}: {body}"
            );
            lookups(&srv) - before
        };
        let counted = [
            listed("/list/"),
            listed("/list/"),
            listed("/list/?sort=size"),
        ];
        let want = match (threads, lookup_max) {
            // The index name's lookup, then the directory's read; then the page
            // kept; then another form's read.
            (2, "0s") => [2, 0, 1],
            // The index name is looked up on the worker (lookups are fast).
            (2, _) => [1, 0, 1],
            _ => [0, 0, 0],
        };
        assert_eq!(counted, want, "{threads} disk threads, {lookup_max}");
        // A form not built yet, asked gzipped first (built so by a disk thread
        // where there are some), then plain (the page kept).
        let gz = srv.get(
            "GET /list/?sort=date HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\
             Connection: close\r\n\r\n",
        );
        assert_eq!(gz.header("content-encoding"), Some("gzip"));
        let plain = get(&srv, "/list/?sort=date");
        assert_eq!(gunzip(&gz.body), plain.body, "{threads} disk threads");
        pages.push((get(&srv, "/list/").body, plain.body));
    }
    assert!(
        pages.windows(2).all(|w| w[0] == w[1]),
        "the same pages from the disk threads and the worker"
    );
}

/// `gzip -dc` of `gz`.
fn gunzip(gz: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = std::process::Command::new("gzip")
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(gz).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "not gzip");
    out.stdout
}
