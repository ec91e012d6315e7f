//! HTTP/1.x behaviour over real TCP: keep-alive, pipelining, methods, limits,
//! smuggling shapes, bodies, timeouts.

use sluice_testkit::*;
use std::io::Write;
use std::time::{Duration, Instant};

#[test]
fn pipelined_requests_are_answered_in_order() {
    let srv = Server::start(&[]);
    let mut c = srv.client();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\nHEAD /big.bin HTTP/1.1\r\nHost: a\r\n\r\nGET /nope HTTP/1.1\r\nHost: a\r\n\r\nGET /sub/ HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    let r1 = c.response(false).unwrap();
    assert_eq!((r1.status, r1.text().as_str()), (200, "hello world\n"));
    let r2 = c.response(true).unwrap();
    assert_eq!(r2.status, 200);
    assert_eq!(r2.header("content-length"), Some("300000"));
    let r3 = c.response(false).unwrap();
    assert_eq!(r3.status, 404);
    let r4 = c.response(false).unwrap();
    assert_eq!((r4.status, r4.text().as_str()), (200, "<h1>sub</h1>\n"));
    assert_eq!(r4.header("connection"), Some("close"));
    assert!(closed_within(&mut c.s, Duration::from_secs(2)));
}

/// A client that says `Connection: close` gets its whole answer and an orderly
/// close, also when it sends more anyway (those bytes are drained, not left unread
/// to turn the close into a reset that would drop the answer's tail).
#[test]
fn bytes_after_a_close_request_do_not_cut_its_answer() {
    let srv = Server::start(&[]);
    for trailing in [&b""[..], b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n"] {
        let mut c = srv.client();
        let mut req = b"GET /big.bin HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".to_vec();
        req.extend_from_slice(trailing);
        c.send(&req);
        // Read slowly at first, so the response is still going out when the
        // server reaches the close.
        std::thread::sleep(Duration::from_millis(200));
        let r = c.response(false).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), 300000, "trailing {} bytes", trailing.len());
        assert!(closed_within(&mut c.s, Duration::from_secs(2)));
    }
}

/// The FIN of a connection the server closes after its answer leaves in the
/// answer's last segment, not in a packet of its own (one packet and one client
/// wake-up fewer per `Connection: close` request). Counted with the client's
/// `TCP_INFO`: segments that carried no data, against a keep-alive answer on
/// another connection (the same handshake and answer, and no FIN).
#[test]
fn the_fin_rides_in_the_last_segment_of_a_closing_answer() {
    let srv = Server::start(&[]);
    let non_data_segments_in = |close: bool| {
        let mut s = srv.connect();
        let conn = if close { "Connection: close\r\n" } else { "" };
        s.write_all(format!("GET /hello.txt HTTP/1.1\r\nHost: a\r\n{conn}\r\n").as_bytes())
            .unwrap();
        assert_eq!(read_response(&mut s, false).unwrap().status, 200);
        if close {
            assert!(closed_within(&mut s, Duration::from_secs(2)));
        }
        // Anything else the server sends has arrived by now.
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: getsockopt into a tcp_info of the size passed.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = unsafe {
            libc::getsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0);
        info.tcpi_segs_in - info.tcpi_data_segs_in
    };
    let keep_alive = non_data_segments_in(false);
    let closing = non_data_segments_in(true);
    assert_eq!(
        closing, keep_alive,
        "segments without data: {closing} for the closing answer, {keep_alive} for the keep-alive one (a FIN of its own adds one)"
    );
}

/// A deferred listener (`defer_accept`, on by default) hands a connection over with
/// its request, and the worker answers it before registering it with epoll
/// (`Worker::answer_at_accept`); whatever still needs an event afterwards must get
/// it: a keep-alive connection's next request, a body larger than the socket takes
/// at once, the rest of a head that came in two pieces, and a close that waits for
/// nothing.
#[test]
fn connections_answered_at_accept_still_get_their_later_events() {
    let srv = Server::start(&[]);
    // Keep-alive: the second request needs a readable event.
    let mut s = srv.connect();
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(
        read_response(&mut s, false).unwrap().text(),
        "hello world\n"
    );
    std::thread::sleep(Duration::from_millis(50));
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
    // A body the socket cannot take at once, read only after a pause: writable events.
    let mut s = srv.connect();
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let r = read_response(&mut s, false).unwrap();
    assert_eq!((r.status, r.body.len()), (200, 300_000));
    // A head in two pieces, the first handed over by the kernel alone.
    let mut s = srv.connect();
    s.set_nodelay(true).unwrap();
    s.write_all(b"GET /hello.txt HTTP/1.1\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    s.write_all(b"Host: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
    assert!(closed_within(&mut s, Duration::from_secs(2)));
    // Answered and closed at accept, each connection still counts as accepted on the
    // status page (the status reads' own connections count too: at least 20).
    let before = srv.status_json()["connections_accepted_total"]
        .as_u64()
        .unwrap();
    for _ in 0..20 {
        let mut s = srv.connect();
        s.write_all(b"GET /hello.txt HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut s, false).unwrap().status, 200);
        assert!(closed_within(&mut s, Duration::from_secs(2)));
    }
    let after = srv.status_json()["connections_accepted_total"]
        .as_u64()
        .unwrap();
    assert!(after - before >= 20, "{before} -> {after}");
}

#[test]
fn request_split_byte_by_byte() {
    let srv = Server::start(&[]);
    let mut s = srv.connect();
    s.set_nodelay(true).unwrap();
    for b in b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n" {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let r = read_response(&mut s, false).unwrap();
    assert_eq!(r.status, 200);
}

#[test]
fn http10_closes_unless_keep_alive() {
    let srv = Server::start(&[]);
    let mut s = srv.connect();
    s.write_all(b"GET /hello.txt HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
    assert!(closed_within(&mut s, Duration::from_secs(2)));

    let mut c = srv.client();
    c.send(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = c.response(false).unwrap();
    assert_eq!(r.header("connection"), Some("keep-alive"));
    c.send(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 200);
}

#[test]
fn methods_other_than_get_and_head() {
    let srv = Server::start(&[]);
    for (m, code) in [("POST", 405), ("PUT", 405), ("DELETE", 405), ("BREW", 501)] {
        let r = srv.get(&format!(
            "{m} /hello.txt HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"
        ));
        assert_eq!(r.status, code, "{m}");
        assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"), "{m}");
    }
}

/// OPTIONS, for a path or `*`: 204 with `Allow` and no body, on a connection that
/// stays open; a CORS preflight also gets the methods, the header names it asked
/// for (only a plain list of names), and a day to keep the answer.
#[test]
fn options_and_cors_preflights() {
    let srv = Server::start(&[]);
    let mut c = srv.client();
    for target in ["/hello.txt", "*", "/no/such/file"] {
        c.send(format!("OPTIONS {target} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
        let r = c.response(false).unwrap();
        assert_eq!(r.status, 204, "{target}");
        assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
        assert_eq!(r.header("content-length"), None);
        assert_eq!(r.header("access-control-allow-methods"), None);
        assert!(r.body.is_empty());
    }
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(c.response(false).unwrap().body, b"hello world\n");
    let pre = |names: &str| {
        srv.get(&format!(
            "OPTIONS /hello.txt HTTP/1.1\r\nHost: a\r\nOrigin: http://app.example\r\n\
             Access-Control-Request-Method: GET\r\n{names}\r\n"
        ))
    };
    let r = pre("Access-Control-Request-Headers: range, x-client\r\n");
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET, HEAD, OPTIONS")
    );
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("range, x-client")
    );
    assert_eq!(r.header("access-control-max-age"), Some("86400"));
    // Anything but a list of names is not given back.
    let r = pre("Access-Control-Request-Headers: x<script>\r\n");
    assert_eq!(r.header("access-control-allow-headers"), None);
}

#[test]
fn absolute_form_and_host() {
    let srv = Server::start(&[]);
    let r = srv.get("GET http://example.org/hello.txt HTTP/1.1\r\nHost: example.org\r\n\r\n");
    assert_eq!(r.status, 200);
    let r = srv.get("GET /hello.txt HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 400, "HTTP/1.1 without Host");
    // An empty one names no host an `http` URI may (RFC 9110 §4.2.1), as nginx
    // and Apache answer.
    for host in ["", ":8080"] {
        let r = srv.get(&format!("GET /hello.txt HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert_eq!(r.status, 400, "Host: {host:?}");
    }
}

#[test]
fn smuggling_shapes_get_400_and_a_closed_connection() {
    let srv = Server::start(&[]);
    for req in [
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcd",
        "GET / HTTP/1.1\r\nHost: a\r\nX-Folded: a\r\n b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n",
    ] {
        let mut s = srv.connect();
        s.write_all(req.as_bytes()).unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.status, 400, "{req:?}");
        assert!(closed_within(&mut s, Duration::from_secs(2)), "{req:?} left the connection open");
    }
}

#[test]
fn small_body_is_skipped_not_parsed_as_a_request() {
    let srv = Server::start(&[]);
    let mut c = srv.client();
    // The body looks like a request; it must be discarded, not answered.
    let body = "GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n";
    c.send(
        format!(
            "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    c.send(b"GET /sub/ HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 405);
    let r = c.response(false).unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "<h1>sub</h1>\n"));
}

#[test]
fn chunked_or_large_body_closes_after_the_answer() {
    let srv = Server::start(&[]);
    let mut c = srv.client();
    c.send(
        b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nGET /\r\n0\r\n\r\n",
    );
    let r = c.response(false).unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(closed_within(&mut c.s, Duration::from_secs(2)));
    let mut c = srv.client();
    c.send(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 405);
    assert!(closed_within(&mut c.s, Duration::from_secs(2)));
}

#[test]
fn size_limits() {
    let srv = Server::start(&[]);
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(10_000));
    assert_eq!(srv.get(&long).status, 414);
    let many: String = (0..100).map(|i| format!("X-H{i}: v\r\n")).collect();
    assert_eq!(
        srv.get(&format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n"))
            .status,
        431
    );
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
        "v".repeat(20_000)
    );
    assert_eq!(srv.get(&big).status, 431);
}

#[test]
fn garbage_never_kills_the_server() {
    let srv = Server::start(&[]);
    assert_eq!(srv.worker_threads(), ["sluice-w0", "sluice-w1"]);
    // Each piece of junk gets an error status (or, for bytes that are not a request
    // at all, at least a closed connection) — never a hang, never a dead worker.
    let junk: Vec<(Vec<u8>, u16)> = vec![
        (vec![0u8; 1000], 400),
        (b"\xff\xfe\r\n\r\n".to_vec(), 400),
        (b"GET \x00 HTTP/1.1\r\n\r\n".to_vec(), 400),
        (b"GET / HTTP/1.1\r\nHost: \xff\r\n\r\n".to_vec(), 400),
        (b"\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n".to_vec(), 400),
        (b"GET / HTTP/9.9\r\nHost: a\r\n\r\n".to_vec(), 505),
        (b"GET /%%%% HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".to_vec(), 400),
        (b"GET * HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".to_vec(), 400),
        (
            b"GET /big.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=99999999999999999999999-\r\nConnection: close\r\n\r\n"
                .to_vec(),
            416,
        ),
    ];
    for (j, want) in junk {
        let mut s = srv.connect();
        let _ = s.write_all(&j);
        let r = read_response(&mut s, false);
        assert_eq!(
            r.map(|r| r.status),
            Some(want),
            "{:?}",
            String::from_utf8_lossy(&j)
        );
        assert!(
            closed_within(&mut s, Duration::from_secs(3)),
            "left open after {:?}",
            String::from_utf8_lossy(&j[..j.len().min(40)])
        );
    }
    assert_eq!(
        srv.get("GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n").status,
        200
    );
    assert_eq!(srv.worker_threads(), ["sluice-w0", "sluice-w1"]);
    assert!(!srv.stderr().contains("panicked"), "{}", srv.stderr());
}

#[test]
fn a_panicking_worker_is_logged_and_replaced() {
    let srv = Server::start_in_env(docroot(), &[("SLUICE_TEST_PANIC_PATH", "/__panic__")], &[]);
    assert_eq!(srv.worker_threads(), ["sluice-w0", "sluice-w1"]);
    let mut s = srv.connect();
    s.write_all(b"GET /__panic__ HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert!(
        read_response(&mut s, false).is_none(),
        "the panicking request got an answer"
    );
    let t = Instant::now();
    while !srv.stderr().contains("restarting it") {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "no restart logged: {}",
            srv.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let err = srv.stderr();
    assert!(err.contains("worker died (panicked: test hook"), "{err}");
    // Back to full strength: both workers exist and every connection is answered.
    let t = Instant::now();
    while srv.worker_threads() != ["sluice-w0", "sluice-w1"] {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{:?}",
            srv.worker_threads()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for _ in 0..40 {
        assert_eq!(
            srv.get("GET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                .status,
            200
        );
    }
    // The dead worker's connections were given back: the server counts only the
    // status request's own connection.
    let t = Instant::now();
    loop {
        let j = srv.status_json();
        if j["open_connections"] == 1 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "connections leaked: {j}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A worker that keeps dying takes the process down, non-zero, for systemd.
    let mut srv = srv;
    let t = Instant::now();
    let code = loop {
        if let Some(st) = srv.child.try_wait().unwrap() {
            break st.code();
        }
        assert!(t.elapsed() < Duration::from_secs(20), "never gave up");
        if let Ok(mut s) = std::net::TcpStream::connect(&srv.addr) {
            let _ = s.write_all(b"GET /__panic__ HTTP/1.1\r\nHost: a\r\n\r\n");
            let _ = read_response(&mut s, false);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(1), "{}", srv.stderr());
    assert!(srv.stderr().contains("within a minute"), "{}", srv.stderr());
}

#[test]
fn header_deadline_is_total_not_per_read() {
    let dir = docroot();
    let cfg = dir.path().join(".t-header.toml");
    std::fs::write(
        &cfg,
        "[http]\nheader_timeout = \"1s\"\nkeepalive_timeout = \"1s\"\n",
    )
    .unwrap();
    let srv = Server::start_in(dir, &["--config", cfg.to_str().unwrap()]);
    let mut s = srv.connect();
    s.write_all(b"GET /hello.txt HTTP/1.1\r\n").unwrap();
    let t = Instant::now();
    // A slowloris: one header line every 200 ms, never finishing.
    let cut = trickle(
        &mut s,
        Duration::from_millis(200),
        Duration::from_secs(3),
        |i| format!("X-{i}: y\r\n").into_bytes(),
    );
    let closed = cut.is_some() || closed_within(&mut s, Duration::from_millis(500));
    assert!(closed, "slow head was not cut off");
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "took {:?}",
        t.elapsed()
    );

    // Idle keep-alive connections are closed after keepalive_timeout.
    let mut c = srv.client();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 200);
    let t = Instant::now();
    assert!(closed_within(&mut c.s, Duration::from_secs(4)));
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "closed too early: {:?}",
        t.elapsed()
    );
    let _ = std::fs::remove_file(cfg);
}

/// Send `req` on a new connection, then EOF: the answer's status, after checking
/// that the server closed the connection within 2 s of it.
fn status_then_closed(req: &[u8]) -> u16 {
    let srv = Server::start(&[]);
    let mut s = srv.connect();
    s.write_all(req).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(2)));
    r.status
}

#[test]
fn half_closed_client_still_gets_its_answer() {
    let status = status_then_closed(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(status, 200);
}

#[test]
fn a_client_that_ends_its_body_short_is_closed_at_its_eof() {
    // The head and part of a body, then EOF: the answer goes out, and the body's
    // remainder can never come, so the connection ends at once rather than at the
    // head's deadline (20 s) while the server waits to skip it.
    let status = status_then_closed(
        b"POST /hello.txt HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789",
    );
    assert_eq!(status, 405);
}

#[test]
fn aborted_and_stalled_clients_leak_no_descriptors() {
    let dir = docroot();
    std::fs::write(dir.path().join("eight.bin"), vec![3u8; 8 << 20]).unwrap();
    let cfg = dir
        .path()
        .parent()
        .unwrap()
        .join(format!("leak-{}.toml", std::process::id()));
    std::fs::write(
        &cfg,
        "[http]\nheader_timeout = \"1s\"\nkeepalive_timeout = \"1s\"\n",
    )
    .unwrap();
    let srv = Server::start_in(dir, &["--config", cfg.to_str().unwrap()]);
    // Let the server settle, then take its baseline.
    assert_eq!(
        srv.get("GET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .status,
        200
    );
    // Baseline once the count is steady (the close of that request may lag).
    let mut baseline = srv.open_fds();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let now = srv.open_fds();
        if now == baseline {
            break;
        }
        baseline = now;
    }

    let mut held = Vec::new();
    for i in 0..60 {
        let mut s = srv.connect();
        match i % 3 {
            // Start an 8 MiB download, read a little, then vanish (RST on close).
            0 => {
                s.write_all(b"GET /eight.bin HTTP/1.1\r\nHost: a\r\n\r\n")
                    .unwrap();
                let mut b = [0u8; 1024];
                let _ = std::io::Read::read(&mut s, &mut b);
                drop(s);
            }
            // Half a request head, then silence (held until the header deadline).
            1 => {
                s.write_all(b"GET /hello.txt HTTP/1.1\r\nHo").unwrap();
                held.push(s);
            }
            // A finished request, then idle keep-alive (held until keepalive_timeout).
            _ => {
                s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
                    .unwrap();
                held.push(s);
            }
        }
    }
    assert!(
        srv.open_fds() > baseline,
        "the held connections should be open now"
    );
    let t = Instant::now();
    while srv.open_fds() > baseline {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "descriptors leaked: {} open, baseline {baseline}",
            srv.open_fds()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(held);
    let _ = std::fs::remove_file(cfg);
}
