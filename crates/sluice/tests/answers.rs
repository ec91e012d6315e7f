//! Kept answers (`files.answer_cache`): the same request bytes for a hot small file
//! answered from the worker's kept answer. Each test tells the kept answer from the
//! full path by the status page's `answers_reused_total`, and checks that the kept
//! answer is the one the full path gives: the same head lines and body, the log
//! line, the keep-alive count, a changed file seen after `cache_validity`, and no
//! reuse where the answer depends on more than the request and the file (on a site
//! with rules: where a rule reads the client's address, a count or the disk).

use sluice_testkit::*;
use std::time::Duration;

const HELLO: &[u8] = b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n";

fn reused(srv: &Server) -> u64 {
    srv.status_json()["answers_reused_total"].as_u64().unwrap()
}

/// A response's head lines without `Date`, and its body.
fn shape(r: &Resp) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let lines = r
        .headers
        .iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case("date"))
        .cloned()
        .collect();
    (r.status, lines, r.body.clone())
}

#[test]
fn a_kept_answer_is_the_full_paths_answer_and_is_logged() {
    let log = log_path("answers");
    let srv = Server::start(&["--workers", "1", "--access-log", log.to_str().unwrap()]);
    let mut c = srv.client();
    let mut seen = Vec::new();
    for _ in 0..6 {
        c.send(HELLO);
        seen.push(shape(&c.response(false).unwrap()));
    }
    assert_eq!(seen[0].0, 200);
    assert_eq!(seen[0].2, b"hello world\n");
    assert!(seen.iter().all(|s| *s == seen[0]), "{seen:?}");
    // Offered on the first two, kept from the second: the last four reused.
    assert_eq!(reused(&srv), 4);
    // Pipelined: five in one write, each answered in order from the kept answer.
    c.send(&HELLO.repeat(5));
    for _ in 0..5 {
        assert_eq!(shape(&c.response(false).unwrap()), seen[0]);
    }
    assert_eq!(reused(&srv), 9);
    // curl asking four times on one connection: its third and fourth are reused.
    let url = srv.url("/hello.txt");
    let out = curl(&["-sS", &url, &url, &url, &url]);
    assert_eq!(out.stdout, b"hello world\n".repeat(4));
    assert_eq!(reused(&srv), 11);
    // Every request has its log line, with the bytes sent.
    wait_for_lines(&log, 15, Duration::from_secs(5), |l| {
        l.contains("\"GET /hello.txt HTTP/1.1\" 200 12")
    });
    let _ = std::fs::remove_file(&log);
}

#[test]
fn a_changed_file_is_answered_anew_after_cache_validity() {
    let dir = docroot();
    std::fs::write(dir.path().join("v.txt"), b"one").unwrap();
    let root = dir.path().to_path_buf();
    let srv = Server::start_with_config(
        dir,
        "[files]\ncache_validity = \"300ms\"\n",
        &["--workers", "1"],
    );
    let get = b"GET /v.txt HTTP/1.1\r\nHost: a\r\n\r\n";
    let mut c = srv.client();
    for _ in 0..4 {
        c.send(get);
        assert_eq!(c.response(false).unwrap().body, b"one");
    }
    assert!(reused(&srv) >= 1);
    std::fs::write(root.join("v.txt"), b"second").unwrap();
    std::thread::sleep(Duration::from_millis(400));
    for _ in 0..4 {
        c.send(get);
        let r = c.response(false).unwrap();
        assert_eq!(
            (r.body.as_slice(), r.header("content-length")),
            (&b"second"[..], Some("6"))
        );
    }
}

#[test]
fn http10_keep_alive_is_announced_and_the_last_request_closes() {
    let srv = Server::start_with_config(
        docroot(),
        "[http]\nkeepalive_requests = 5\n",
        &["--workers", "1"],
    );
    let mut c = srv.client();
    let get = b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    for i in 1..=5 {
        c.send(get);
        let r = c.response(false).unwrap();
        assert_eq!(r.body, b"hello world\n");
        let want = if i < 5 { "keep-alive" } else { "close" };
        assert_eq!(r.header("connection"), Some(want), "response {i}");
    }
    assert!(closed_within(&mut c.s, Duration::from_secs(2)));
    // The third and fourth came from the kept answer; the fifth, the last the
    // connection may ask, took the full path to say `close`.
    assert_eq!(reused(&srv), 2);
}

#[test]
fn kept_only_when_the_answer_reads_nothing_but_the_request_and_the_file() {
    let srv = Server::start(&["--workers", "1"]);
    let mut c = srv.client();
    let asks: [&[u8]; 1] = [
        // A range: not the whole file.
        b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nRange: bytes=0-3\r\n\r\n",
    ];
    for ask in asks {
        for _ in 0..4 {
            c.send(ask);
            let r = c.response(false).unwrap();
            assert!(r.status == 200 || r.status == 206, "{}", r.status);
        }
    }
    assert_eq!(reused(&srv), 0);
    // The same server does keep a plain GET's answer.
    for _ in 0..4 {
        c.send(HELLO);
        c.response(false).unwrap();
    }
    assert_eq!(reused(&srv), 2);
}

#[test]
fn accept_encoding_answers_are_kept_and_follow_the_siblings_on_disk() {
    let dir = docroot();
    let root = dir.path().to_path_buf();
    std::fs::write(root.join("hello.txt.gz"), b"not really gzip").unwrap();
    let srv = Server::start_with_config(
        dir,
        "[files]\ncache_validity = \"300ms\"\n",
        &["--workers", "1"],
    );
    let ask = |ae: &str| {
        format!("GET /hello.txt HTTP/1.1\r\nHost: a\r\nAccept-Encoding: {ae}\r\n\r\n").into_bytes()
    };
    let vary = ("Vary".to_string(), "Accept-Encoding".to_string());
    // The sibling a browser's header chooses, kept (four of six reused).
    let before = reused(&srv);
    let gz = six(&srv, &ask("gzip, deflate, br, zstd"));
    assert_eq!((gz.0, gz.2.as_slice()), (200, &b"not really gzip"[..]));
    assert!(
        gz.1.contains(&("Content-Encoding".into(), "gzip".into())),
        "{gz:?}"
    );
    assert!(gz.1.contains(&vary), "{gz:?}");
    assert_eq!(reused(&srv) - before, 4);
    // No coding the client takes (wget's `identity`): the file, named as varying.
    let plain = six(&srv, &ask("identity"));
    assert_eq!(plain.2, b"hello world\n");
    assert!(plain.1.contains(&vary), "{plain:?}");
    assert_eq!(reused(&srv) - before, 8);
    // A file with no sibling: its own answer, kept, without `Vary`.
    let none = six(
        &srv,
        b"GET /sub/index.html HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip, br\r\n\r\n",
    );
    assert_eq!(none.0, 200);
    assert!(!none.1.iter().any(|(n, _)| n == "Vary"), "{none:?}");
    assert_eq!(reused(&srv) - before, 12);
    // A sibling added, one removed: seen once the cache's entries expire, kept
    // answers included.
    std::fs::write(root.join("hello.txt.br"), b"brotli bytes").unwrap();
    std::fs::remove_file(root.join("hello.txt.gz")).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let br = six(&srv, &ask("gzip, deflate, br, zstd"));
    assert_eq!(br.2, b"brotli bytes");
    assert!(
        br.1.contains(&("Content-Encoding".into(), "br".into())),
        "{br:?}"
    );
    let plain = six(&srv, &ask("gzip"));
    assert_eq!(plain.2, b"hello world\n");
    assert!(plain.1.contains(&vary), "{plain:?}");
}

#[test]
fn indexes_listings_redirects_and_misses_are_kept_until_what_they_read_expires() {
    let dir = docroot();
    let root = dir.path().to_path_buf();
    let srv = Server::start_with_config(
        dir,
        "[files]\ncache_validity = \"2s\"\nindex = [\"index.htm\", \"index.html\"]\n",
        &["--workers", "1"],
    );
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").into_bytes();
    let start = std::time::Instant::now();
    // The first index name's miss, read now: it bounds the index answer below.
    assert_eq!(six(&srv, &get("/sub/index.htm")).0, 404);
    let list = six(&srv, &get("/list/"));
    assert_eq!(list.0, 200);
    assert!(!String::from_utf8_lossy(&list.2).contains("new.txt"));
    assert_eq!(reused(&srv), 8);
    std::thread::sleep(Duration::from_millis(1200));
    let sub = six(&srv, &get("/sub/"));
    assert_eq!((sub.0, sub.2.as_slice()), (200, &b"<h1>sub</h1>\n"[..]));
    assert_eq!(six(&srv, &get("/sub")).0, 301);
    assert_eq!(reused(&srv), 16);
    // Changed on disk: each answer is given anew once an entry it read expires.
    std::fs::write(root.join("sub/index.htm"), b"first index\n").unwrap();
    std::fs::write(root.join("list/new.txt"), b"n").unwrap();
    std::thread::sleep(Duration::from_millis(2600).saturating_sub(start.elapsed()));
    assert_eq!(six(&srv, &get("/sub/")).2, b"first index\n");
    assert_eq!(six(&srv, &get("/sub/index.htm")).0, 200);
    let list = six(&srv, &get("/list/"));
    assert!(String::from_utf8_lossy(&list.2).contains("new.txt"));
}

#[test]
fn every_kept_answer_is_the_full_paths_answer() {
    // Two servers on two identical trees, one with kept answers and one without.
    // Each head is asked six times on its own connection of the first (the third to
    // sixth from a kept answer wherever one is kept) and once of the second: all
    // seven must be the same, for every kind of answer, with validators and ranges.
    let trees = [docroot(), docroot()];
    for t in &trees {
        let p = t.path();
        std::fs::write(p.join("page.html"), b"<p>page</p>\n").unwrap();
        std::fs::write(p.join("page.html.gz"), b"GZ-BYTES").unwrap();
        std::fs::write(p.join("page.html.br"), b"BR-BYTES").unwrap();
        std::fs::write(p.join("pkg.tar.gz"), b"\x1f\x8b archive").unwrap();
        std::fs::write(p.join("list/c.txt.gz"), b"gz of c").unwrap();
        same_times(p);
    }
    let [a, b] = trees;
    let kept = Server::start_in(a, &["--workers", "1"]);
    let full = Server::start_with_config(b, "[files]\nanswer_cache = 0\n", &["--workers", "1"]);
    let paths = [
        "/hello.txt",
        "/page.html",
        "/pkg.tar.gz",
        "/sub/",
        "/sub",
        "/list/",
        "/list/?sort=size&order=desc",
        "/list/c.txt",
        "/nope",
        "/hello.txt/",
        "/.secret",
    ];
    let codings = [
        "",
        "gzip",
        "gzip, deflate, br, zstd",
        "identity",
        "br;q=0, gzip;q=0.5",
    ];
    let extras = [
        "",
        "If-None-Match: *\r\n",
        "If-None-Match: \"other\"\r\n",
        "If-Modified-Since: Thu, 31 Dec 2099 23:59:59 GMT\r\n",
        "Range: bytes=0-3\r\n",
    ];
    let mut kinds = std::collections::BTreeSet::new();
    for method in ["GET", "HEAD"] {
        for ae in codings {
            for extra in extras {
                for path in paths {
                    let ae = if ae.is_empty() {
                        String::new()
                    } else {
                        format!("Accept-Encoding: {ae}\r\n")
                    };
                    let ask = format!("{method} {path} HTTP/1.1\r\nHost: a\r\n{ae}{extra}\r\n");
                    let before = reused(&kept);
                    let seen = six(&kept, ask.as_bytes());
                    let mut c = full.client();
                    c.send(ask.as_bytes());
                    let want = shape(&c.response(method == "HEAD").unwrap());
                    assert_eq!(seen, want, "{ask}");
                    kinds.insert((seen.0, reused(&kept) - before));
                }
            }
        }
    }
    assert_eq!(reused(&full), 0);
    // Every kind of answer was kept (200s, the redirect, 304s, 404s), each its last
    // four; a range's never (a 206 reads a part of the file).
    assert!(kinds.iter().all(|&(s, n)| s != 206 || n == 0), "{kinds:?}");
    for status in [200, 301, 304, 404] {
        assert!(kinds.contains(&(status, 4)), "{kinds:?}");
    }
}

/// Give every file and directory under `root` the same modification time, so two
/// trees written apart have the same validators and listings.
fn same_times(root: &std::path::Path) {
    let t = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for e in std::fs::read_dir(root).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            same_times(&path);
        }
        std::fs::File::open(&path).unwrap().set_modified(t).unwrap();
    }
    std::fs::File::open(root).unwrap().set_modified(t).unwrap();
}

/// Six asks of `ask` on one connection: every response's shape, all equal.
fn six(srv: &Server, ask: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut c = srv.client();
    let head_only = ask.starts_with(b"HEAD ");
    let seen: Vec<_> = (0..6)
        .map(|_| {
            c.send(ask);
            shape(&c.response(head_only).unwrap())
        })
        .collect();
    assert!(seen.iter().all(|s| *s == seen[0]), "{seen:?}");
    seen[0].clone()
}

#[test]
fn on_a_site_with_rules_kept_where_the_rules_read_the_request_alone() {
    let dir = docroot();
    let rules = dir.path().join(".rules.conf");
    std::fs::write(
        &rules,
        "Redirect 301 /old /hello.txt\n\
         RewriteEngine On\n\
         RewriteCond %{HTTP_HOST} ^a$\n\
         RewriteRule ^/by-host$ /hello.txt [R=302]\n\
         RewriteCond %{REMOTE_ADDR} ^127\\.\n\
         RewriteRule ^/local$ /hello.txt [R=302]\n\
         RewriteCond %{REQUEST_FILENAME} -f\n\
         RewriteRule ^/(sub/.*)$ /hello.txt [R=302]\n",
    )
    .unwrap();
    let srv = Server::start_in(dir, &["--workers", "1", "--rules", rules.to_str().unwrap()]);
    // Passed by rules that read only the request: the file's answer is kept.
    let (status, _, body) = six(&srv, HELLO);
    assert_eq!((status, body.as_slice()), (200, &b"hello world\n"[..]));
    assert_eq!(reused(&srv), 4);
    // Redirects decided on the path and on `Host`: kept too, the same answer.
    let (status, lines, _) = six(&srv, b"GET /old HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status, 301);
    assert!(
        lines.contains(&("Location".into(), "/hello.txt".into())),
        "{lines:?}"
    );
    assert_eq!(
        six(&srv, b"GET /by-host HTTP/1.1\r\nHost: a\r\n\r\n").0,
        302
    );
    assert_eq!(reused(&srv), 12);
    // Decided on the client's address: never kept.
    assert_eq!(six(&srv, b"GET /local HTTP/1.1\r\nHost: a\r\n\r\n").0, 302);
    assert_eq!(reused(&srv), 12);
    // Decided on the disk (`-f`, through the file cache): kept while the cache
    // trusts its entry.
    assert_eq!(six(&srv, b"GET /sub/x HTTP/1.1\r\nHost: a\r\n\r\n").0, 404);
    assert_eq!(reused(&srv), 16);
    // Every redirect answered, kept or not, is counted for its rule.
    let j = srv.status_json();
    assert_eq!(j["rule_actions"]["redirect"], 18, "{j}");
    let t = std::time::Instant::now();
    loop {
        let j = srv.status_json();
        let top = j["top_rules"].as_array().unwrap().clone();
        let of = |line: &str| {
            top.iter()
                .find(|r| r["rule"].as_str().unwrap().ends_with(line))
                .map(|r| r["matches"].as_u64().unwrap())
        };
        if top.len() == 3 {
            assert_eq!(
                (of(":1"), of(":4"), of(":6")),
                (Some(6), Some(6), Some(6)),
                "{j}"
            );
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{j}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_rate_limit_is_never_passed_by_a_kept_answer() {
    let dir = docroot();
    let rules = dir.path().join("limit.rules");
    std::fs::write(&rules, "exact /hello.txt limit rate=3/1m\n").unwrap();
    let srv = Server::start_in(dir, &["--workers", "1", "--rules", rules.to_str().unwrap()]);
    let mut c = srv.client();
    let statuses: Vec<u16> = (0..8)
        .map(|_| {
            c.send(HELLO);
            c.response(false).unwrap().status
        })
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429, 429, 429]);
    assert_eq!(reused(&srv), 0);
}

#[test]
fn not_modified_and_head_answers_are_kept_until_the_file_changes() {
    let dir = docroot();
    std::fs::write(dir.path().join("v.txt"), b"one").unwrap();
    // A file past `small_file_max` (16 KiB): its GET is never kept, its HEAD is.
    std::fs::write(dir.path().join("big.bin"), vec![1u8; 100_000]).unwrap();
    let root = dir.path().to_path_buf();
    let srv = Server::start_with_config(
        dir,
        "[files]\ncache_validity = \"2s\"\n",
        &["--workers", "1"],
    );
    let mut c = srv.client();
    c.send(b"GET /v.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    let etag = c
        .response(false)
        .unwrap()
        .header("etag")
        .unwrap()
        .to_string();
    let inm = format!("GET /v.txt HTTP/1.1\r\nHost: a\r\nIf-None-Match: {etag}\r\n\r\n");
    let head = b"HEAD /big.bin HTTP/1.1\r\nHost: a\r\n\r\n";
    let mut seen = Vec::new();
    for _ in 0..4 {
        c.send(inm.as_bytes());
        let r = c.response(false).unwrap();
        assert_eq!((r.status, r.body.len()), (304, 0));
        seen.push(shape(&r));
        c.send(head);
        let r = c.response(true).unwrap();
        assert_eq!(
            (r.status, r.header("content-length")),
            (200, Some("100000"))
        );
        seen.push(shape(&r));
    }
    // The kept answers are the full path's: the same lines, no body.
    assert_eq!(
        (seen[4..6].to_vec(), seen[6..8].to_vec()),
        (seen[0..2].to_vec(), seen[0..2].to_vec())
    );
    assert_eq!(reused(&srv), 4);
    // And the big file's GET is still sent whole, never kept.
    for _ in 0..3 {
        c.send(b"GET /big.bin HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(c.response(false).unwrap().body.len(), 100_000);
    }
    assert_eq!(reused(&srv), 4);
    // The file changes: once its entry is looked at again, the same bytes get a 200.
    std::fs::write(root.join("v.txt"), b"second").unwrap();
    std::thread::sleep(Duration::from_millis(2200));
    c.send(inm.as_bytes());
    let r = c.response(false).unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"second"[..]));
}

#[test]
fn a_close_requests_answer_is_kept_and_the_connection_still_closes() {
    // (A long validity: every count below assumes the kept answers do not expire.)
    let srv = Server::start_with_config(
        docroot(),
        "[files]\ncache_validity = \"10s\"\n",
        &["--workers", "1"],
    );
    let ask = b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    let mut seen = Vec::new();
    for _ in 0..4 {
        let mut c = srv.client();
        c.send(ask);
        let r = c.response(false).unwrap();
        assert_eq!((r.status, r.header("connection")), (200, Some("close")));
        seen.push(shape(&r));
        assert!(closed_within(&mut c.s, Duration::from_secs(2)));
    }
    assert!(seen.iter().all(|s| *s == seen[0]), "{seen:?}");
    assert_eq!(reused(&srv), 2);
    // A request pipelined behind it is never answered: one answer, then the close
    // (lingering, so the answer is not lost to a reset).
    let mut c = srv.client();
    c.send(&[&ask[..], HELLO].concat());
    let (bytes, clean) = read_to_end(&mut c.s);
    let text = String::from_utf8_lossy(&bytes);
    assert_eq!(
        (text.matches("HTTP/1.1 200").count(), clean),
        (1, true),
        "{text}"
    );
    assert!(text.ends_with("hello world\n"), "{text}");
    assert_eq!(reused(&srv), 3);
    // ab asks with HTTP/1.0 and no keep-alive, the same bytes every time.
    let out = std::process::Command::new("ab")
        .args(["-q", "-n", "20", "-c", "1", &srv.url("/hello.txt")])
        .output()
        .expect("ab (apache2-utils)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Complete requests:      20") && text.contains("Failed requests:        0"),
        "{text}"
    );
    assert_eq!(reused(&srv), 3 + 18);
}

#[test]
fn never_with_the_cache_off() {
    let off = Server::start_with_config(
        docroot(),
        "[files]\nanswer_cache = 0\n",
        &["--workers", "1"],
    );
    let mut c = off.client();
    for _ in 0..6 {
        c.send(HELLO);
        assert_eq!(c.response(false).unwrap().body, b"hello world\n");
    }
    assert_eq!(reused(&off), 0);
}

#[test]
fn answers_the_socket_does_not_take_at_once_arrive_whole_and_in_order() {
    // 16,000 bytes: a body sent beside the kept head; 3,000: one kept inside it.
    for (size, n) in [(16_000u32, 600), (3_000, 2_000)] {
        let dir = docroot();
        let body: Vec<u8> = (0..size).map(|i| (i * 13 % 251) as u8).collect();
        std::fs::write(dir.path().join("k.bin"), &body).unwrap();
        let log = log_path("answers-full");
        let srv = Server::start_in(
            dir,
            &["--workers", "1", "--access-log", log.to_str().unwrap()],
        );
        let get = b"GET /k.bin HTTP/1.1\r\nHost: a\r\n\r\n";
        let mut c = srv.client();
        for _ in 0..2 {
            c.send(get);
            assert_eq!(c.response(false).unwrap().body, body);
        }
        // Answers asked at once and not read for a while: far more than the
        // sockets hold, so sends stop part-way and the rest waits its turn.
        c.send(&get.repeat(n));
        std::thread::sleep(Duration::from_millis(300));
        for i in 0..n {
            let r = c.response(false).unwrap();
            assert_eq!(
                (r.status, r.body.len()),
                (200, body.len()),
                "answer {i} of {size} B"
            );
            assert!(r.body == body, "answer {i} of {size} B differs");
        }
        assert_eq!(reused(&srv), n as u64);
        let line = format!("\"GET /k.bin HTTP/1.1\" 200 {size} ");
        wait_for_lines(&log, n + 2, Duration::from_secs(5), |l| l.contains(&line));
        let _ = std::fs::remove_file(&log);
    }
}

#[test]
fn a_kept_answer_carries_the_clocks_date() {
    let srv = Server::start_with_config(
        docroot(),
        "[files]\ncache_validity = \"10s\"\n",
        &["--workers", "1"],
    );
    let mut c = srv.client();
    let mut date = || {
        c.send(HELLO);
        let r = c.response(false).unwrap();
        r.header("date").unwrap().to_string()
    };
    let first: Vec<String> = (0..3).map(|_| date()).collect();
    assert_eq!(reused(&srv), 1);
    std::thread::sleep(Duration::from_millis(2100));
    let later = date();
    assert_eq!(reused(&srv), 2, "the same kept answer");
    let secs = |d: &str| sluice_http::date::parse(d).unwrap();
    assert!(
        secs(&later) >= secs(&first[2]) + 2,
        "{first:?} then {later}"
    );
}
