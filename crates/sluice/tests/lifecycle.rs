//! A connection's and the server's life, timed: deadlines (header, keep-alive,
//! send), request limits, aborted downloads in the log, SIGTERM grace, reload, and
//! the file policies (symlinks, hidden files, cache caps).

use sluice_testkit::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Seconds until the server closes `s` (EOF or reset), at most `max`.
fn time_to_close(s: &mut std::net::TcpStream, max: Duration) -> Duration {
    let t = Instant::now();
    assert!(closed_within(s, max), "not closed within {max:?}");
    t.elapsed()
}

#[test]
fn aborted_downloads_are_logged_with_the_bytes_sent() {
    let dir = docroot();
    std::fs::write(dir.path().join("eight.bin"), vec![1u8; 8 << 20]).unwrap();
    let log = log_path("aborted");
    let srv = Server::start_with_config(
        dir,
        "[http]\nsend_timeout = \"1s\"\n",
        &["--access-log", log.to_str().unwrap()],
    );
    // 1. The client reads a little and disconnects.
    let mut s = srv.connect();
    s.write_all(b"GET /eight.bin?gone HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut b = vec![0u8; 100_000];
    s.read_exact(&mut b).unwrap();
    drop(s);
    // 2. The client stops reading: send_timeout cuts it.
    let mut stalled = srv.connect();
    stalled
        .write_all(b"GET /eight.bin?stalled HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    stalled.read_exact(&mut b[..1000]).unwrap();
    let t = Instant::now();
    let text = wait_for_lines(&log, 2, Duration::from_secs(8), |l| {
        l.contains("/eight.bin?")
    });
    assert!(
        t.elapsed() >= Duration::from_millis(800),
        "stalled reader cut before send_timeout: {:?}",
        t.elapsed()
    );
    for tag in ["gone", "stalled"] {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("?{tag} ")))
            .unwrap();
        let bytes: u64 = line
            .split("\" 200 ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no 200 with a byte count: {line}"));
        assert!(
            bytes > 0 && bytes < 8 << 20,
            "{tag}: logged {bytes} bytes: {line}"
        );
    }
    assert!(closed_within(&mut stalled, Duration::from_secs(1)));
    let _ = std::fs::remove_file(&log);
}

#[test]
fn header_deadline_runs_from_accept_then_from_the_first_byte() {
    let srv = Server::start_with_config(
        docroot(),
        // Deferred accept off: this is about the deadline of an accepted connection.
        "[http]\nheader_timeout = \"1s\"\nkeepalive_timeout = \"4s\"\n[condition]\ndefer_accept = \"0\"\n",
        &[],
    );
    // A connection that never sends a byte: closed one header_timeout after accept.
    let mut silent = srv.connect();
    let d = time_to_close(&mut silent, Duration::from_secs(4));
    assert!(
        d >= Duration::from_millis(800) && d < Duration::from_millis(2500),
        "silent connection closed after {d:?}"
    );
    // On a keep-alive connection the next head's deadline starts at its first byte,
    // not at the previous response: idle 1.5 s (longer than header_timeout), then
    // half a head; it still gets its full second.
    let mut c = srv.client();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 200);
    std::thread::sleep(Duration::from_millis(1500));
    c.send(b"GET /hello.txt HTTP/1.1\r\nHo");
    let d = time_to_close(&mut c.s, Duration::from_secs(4));
    assert!(
        d >= Duration::from_millis(800) && d < Duration::from_millis(2500),
        "second head cut after {d:?}"
    );
}

#[test]
fn keepalive_requests_caps_a_connection() {
    let srv = Server::start_with_config(docroot(), "[http]\nkeepalive_requests = 3\n", &[]);
    let mut c = srv.client();
    for i in 1..=3 {
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
        let r = c.response(false).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("connection"),
            (i == 3).then_some("close"),
            "request {i}"
        );
    }
    assert!(closed_within(&mut c.s, Duration::from_secs(2)));
}

#[test]
fn sigterm_grace_closes_idle_finishes_in_flight_and_cuts_the_stalled() {
    let dir = docroot();
    std::fs::write(dir.path().join("eight.bin"), vec![2u8; 8 << 20]).unwrap();
    let srv = Server::start_with_config(dir, "[server]\nshutdown_grace = \"2s\"\n", &[]);
    // Idle keep-alive.
    let mut idle = srv.client();
    idle.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(idle.response(false).unwrap().status, 200);
    // In flight, read steadily.
    let mut busy = srv.connect();
    busy.write_all(b"GET /eight.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    // In flight, never read again.
    let mut stalled = srv.connect();
    stalled
        .write_all(b"GET /eight.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut b = [0u8; 1000];
    busy.read_exact(&mut b).unwrap();
    stalled.read_exact(&mut b).unwrap();

    let t = Instant::now();
    srv.signal(libc::SIGTERM);
    let reader = std::thread::spawn(move || {
        let (got, clean) = read_to_end(&mut busy);
        (got.len(), clean)
    });
    let d = time_to_close(&mut idle.s, Duration::from_secs(2));
    assert!(d < Duration::from_millis(1000), "idle closed after {d:?}");
    let (got, clean) = reader.join().unwrap();
    assert!(clean, "in-flight download was cut");
    let head_len = 400; // well above any head sluice sends for this file
    assert!(
        got + 1000 >= (8 << 20) && got + 1000 < (8 << 20) + head_len,
        "in-flight download got {got} bytes"
    );
    let mut srv = srv;
    let code = loop {
        if let Some(st) = srv.child.try_wait().unwrap() {
            break st.code();
        }
        assert!(t.elapsed() < Duration::from_secs(8), "did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = t.elapsed();
    assert_eq!(code, Some(0));
    assert!(
        took >= Duration::from_millis(1800),
        "exited before the grace period with a stalled download: {took:?}"
    );
    assert!(!srv.stderr().contains("panicked"), "{}", srv.stderr());
}

#[test]
fn reload_edge_cases() {
    let dir = docroot();
    let cfg = dir.path().join(".reload.toml");
    std::fs::write(&cfg, "[files]\nlisting = true\n").unwrap();
    let log = log_path("reload");
    // The root, the listen address and the access log come from the command line:
    // they must survive every reload.
    let srv = Server::start_in(
        dir,
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--access-log",
            log.to_str().unwrap(),
        ],
    );
    let status = |p: &str| {
        srv.get(&format!(
            "GET {p} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        ))
        .status
    };
    let failures = || srv.stderr().matches("reload failed").count();
    // 1. A root that does not exist: refused, old config keeps serving.
    std::fs::write(&cfg, "[server]\nroot = \"/nonexistent/sluice\"\n").unwrap();
    srv.signal(libc::SIGHUP);
    // The command-line root wins over the file's, so this reload is good.
    wait_for_stderr(&srv, "reloaded");
    assert_eq!(status("/hello.txt"), 200);
    // 2. A broken file, then a good one: the good one applies.
    std::fs::write(&cfg, "[files]\nlisting = nope\n").unwrap();
    srv.signal(libc::SIGHUP);
    wait_until(|| failures() == 1, || "failed reload logged".into());
    assert_eq!(status("/list/"), 200);
    std::fs::write(&cfg, "[files]\nlisting = false\n").unwrap();
    srv.signal(libc::SIGHUP);
    wait_until(
        || status("/list/") == 403,
        || "reload after a failed one".into(),
    );
    // 3. Overrides survived: same address (we are talking to it), same root, and
    //    the access log still receives lines.
    assert_eq!(status("/hello.txt"), 200);
    wait_for_lines(&log, 1, Duration::from_secs(5), |l| {
        l.contains("\"GET /list/ HTTP/1.1\" 403")
    });
    let _ = std::fs::remove_file(&log);
}

#[test]
fn reload_with_a_missing_root_keeps_the_old_one() {
    let dir = docroot();
    let root = dir.path().to_str().unwrap().to_string();
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = cfg_dir.path().join("root.toml");
    let listen = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    std::fs::write(
        &cfg,
        format!("[server]\nroot = \"{root}\"\nlisten = [\"{listen}\"]\nworkers = 1\n"),
    )
    .unwrap();
    let mut child = std::process::Command::new(bin())
        .args(["serve", "--allow-root", "--config", cfg.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("serving"), "{line}");
    std::fs::write(
        &cfg,
        format!("[server]\nroot = \"/nonexistent/x\"\nlisten = [\"{listen}\"]\nworkers = 1\n"),
    )
    .unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(400));
    let mut s = std::net::TcpStream::connect(&listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "hello world\n"));
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("reload failed") && err.contains("/nonexistent/x"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn symlink_policies_and_hidden_files() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "outside\n").unwrap();
    for (policy, inside_ok, outside_ok) in [
        ("never", false, false),
        ("inside-root", true, false),
        ("any", true, true),
    ] {
        let dir = docroot();
        std::os::unix::fs::symlink("hello.txt", dir.path().join("in-link")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.txt"),
            dir.path().join("out-link"),
        )
        .unwrap();
        let srv =
            Server::start_with_config(dir, &format!("[files]\nsymlinks = \"{policy}\"\n"), &[]);
        let get = |p: &str| srv.get(&format!("GET {p} HTTP/1.1\r\nHost: a\r\n\r\n"));
        let r = get("/in-link");
        assert_eq!(r.status == 200, inside_ok, "{policy}: in-link {}", r.status);
        if inside_ok {
            assert_eq!(r.text(), "hello world\n");
        }
        let r = get("/out-link");
        assert_eq!(
            r.status == 200,
            outside_ok,
            "{policy}: out-link {}",
            r.status
        );
        if outside_ok {
            assert_eq!(r.text(), "outside\n");
        }
    }
    // Hidden files: 404 by default, served with hidden = true.
    let srv = Server::start(&[]);
    assert_eq!(
        srv.get("GET /.secret HTTP/1.1\r\nHost: a\r\n\r\n").status,
        404
    );
    let srv = Server::start_with_config(docroot(), "[files]\nhidden = true\n", &[]);
    let r = srv.get("GET /.secret HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "no"));
    let list = srv.get("GET / HTTP/1.1\r\nHost: a\r\n\r\n").text();
    assert!(list.contains("./.secret"), "{list}");
}

#[test]
fn the_open_file_cache_respects_its_cap() {
    let dir = docroot();
    for i in 0..200 {
        std::fs::write(dir.path().join(format!("f{i}.bin")), vec![0u8; 100_000]).unwrap();
    }
    let srv = Server::start_with_config(
        dir,
        // One connection: every request lands on the same worker and its cache.
        "[files]\ncache_entries = 8\nsmall_file_max = 0\ncache_validity = \"60s\"\n",
        &[],
    );
    let fds = || srv.open_fds();
    let before = fds();
    let mut c = srv.client();
    for i in 0..200 {
        c.send(format!("GET /f{i}.bin HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
        assert_eq!(c.response(false).unwrap().status, 200);
    }
    let after = fds();
    // 8 cached files at most (plus slack for the client connection and timing).
    assert!(
        after <= before + 8 + 3,
        "cache holds {} descriptors with cache_entries = 8",
        after - before
    );
}

#[test]
fn a_connection_accepted_just_before_a_stop_is_still_answered() {
    let dir = docroot();
    // Accepted before its request arrives (no deferral), so the stop finds it empty.
    let srv = Server::start_with_config(
        dir,
        "[server]\nshutdown_grace = \"5s\"\n[condition]\ndefer_accept = \"0\"\n",
        &[],
    );
    let mut old = srv.connect();
    std::thread::sleep(Duration::from_millis(1300));
    let mut fresh = srv.connect();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    srv.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    // Silent since its accept over a second ago: closed at the stop.
    let d = time_to_close(&mut old, Duration::from_secs(2));
    assert!(
        d < Duration::from_millis(500),
        "the silent connection lived {d:?} more"
    );
    // Accepted just before the stop: its request is answered, and it is closed after.
    fresh
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let (got, _) = read_to_end(&mut fresh);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    // A fresh connection that never asks holds the stop for at most a second.
    let mut srv = srv;
    assert!(
        srv.exited_within(Duration::from_secs(3)).is_some(),
        "did not exit"
    );
    assert!(t.elapsed() < Duration::from_secs(3), "did not exit in time");
}

#[test]
fn an_idle_server_sleeps_and_still_answers_and_stops_at_once() {
    // Two workers in two serving processes under a master (the default layout).
    let mut srv = Server::start(&["--workers", "2"]);
    let ok = "GET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    assert_eq!(srv.get(ok).status, 200);
    // The connection is gone; within a second every worker's sleep is the idle one.
    std::thread::sleep(Duration::from_millis(1500));
    let mut pids = vec![srv.pid()];
    pids.extend(srv.children());
    let secs = 3;
    let woke = wakeups_during(&pids, Duration::from_secs(secs));
    // Each thread that keeps time wakes once a second (workers: housekeeping;
    // processes' main threads: the status page's sample), the rest never. Ten a
    // second was the old 100 ms poll.
    for (t, &n) in &woke {
        assert!(
            n <= 2 * secs,
            "{t} woke {n} times in {secs} s of idleness:\n{woke:#?}"
        );
    }
    // A sleeping worker still answers a new client at once.
    let t = Instant::now();
    assert_eq!(srv.get(ok).status, 200);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    // And a stop does not wait for a worker's sleep to end (the supervisor wakes
    // the workers). Sent just after a worker's housekeeping wake-up, when every
    // worker (they started together, so they keep time together) has a whole
    // second of sleep ahead: a worker left asleep would hold the exit that long.
    let worker = woke
        .keys()
        .find(|t| t.ends_with(" sluice-w0") || t.ends_with(" sluice-w1"))
        .expect("a worker thread")
        .clone();
    let count = |m: &std::collections::BTreeMap<String, u64>| m.get(&worker).copied();
    // (After the wake-ups that answering and closing took.)
    std::thread::sleep(Duration::from_millis(300));
    let last = count(&wakeups(&pids));
    let t = Instant::now();
    while count(&wakeups(&pids)) == last {
        assert!(t.elapsed() < Duration::from_secs(3), "{worker} never woke");
        std::thread::sleep(Duration::from_millis(2));
    }
    srv.signal(libc::SIGTERM);
    let t = Instant::now();
    let st = srv.exited_within(Duration::from_secs(5));
    assert_eq!(st.and_then(|s| s.code()), Some(0), "{}", srv.stderr());
    assert!(
        t.elapsed() < Duration::from_millis(600),
        "an idle server took {:?} to stop",
        t.elapsed()
    );
}

#[test]
fn a_worker_holding_only_idle_keepalives_sleeps_until_their_deadline() {
    // One worker, ten keep-alive connections idle after one request each, opened
    // over a second (their deadlines spread over the worker's housekeeping second).
    let srv = Server::start_with_config(
        docroot(),
        "[server]\nworkers = 1\n[http]\nkeepalive_timeout = \"5s\"\n",
        &[],
    );
    let held = hold_keepalives(&srv.addr, 10, Duration::from_millis(100));
    std::thread::sleep(Duration::from_millis(200));
    let mut pids = vec![srv.pid()];
    pids.extend(srv.children());
    let secs = 3;
    let woke = wakeups_during(&pids, Duration::from_secs(secs));
    // Their deadlines are seconds away: the worker wakes for its once-a-second
    // housekeeping only. It woke every 100 ms tick (30 times here) before.
    let workers: Vec<_> = woke
        .iter()
        .filter(|(t, _)| t.contains(" sluice-w"))
        .collect();
    assert!(!workers.is_empty(), "no worker thread in {woke:#?}");
    for (t, &n) in workers {
        assert!(
            n <= 2 * secs,
            "{t} woke {n} times in {secs} s holding idle keep-alives:\n{woke:#?}"
        );
    }
    // And each sleep ends in time for a deadline, not at the next housekeeping.
    assert_closed_on_time(held, Duration::from_secs(5), Duration::from_millis(500));
}
