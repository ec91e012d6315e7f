//! `sluice condition` in front of other servers: examples/ccserver.c built with the
//! C library (as a user would: `cc -Iinclude examples/ccserver.c
//! -Ltarget/release -lsluicecc`), a backend written with the Rust API, and
//! `sluice serve --from`; checked with curl and raw sockets.

use sluice_testkit::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
}

/// Build libsluicecc (release, as the C example's instructions say) and ccserver,
/// once per test process.
fn ccserver() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let o = Command::new(cargo)
            .args(["build", "--release", "-p", "sluice-cc"])
            .current_dir(workspace())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // Beside the library it links, not in /tmp: every test run left one there.
        let lib = target_dir().join("release");
        let out = lib.join("ccserver");
        let o = Command::new("cc")
            .arg("-Iinclude")
            .arg("examples/ccserver.c")
            .arg(format!("-L{}", lib.display()))
            .arg("-lsluicecc")
            .arg("-o")
            .arg(&out)
            .current_dir(workspace())
            .output()
            .expect("cc");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        out
    })
}

/// A front process and its socket path; killed on drop. Its config file and its
/// log (stderr) are in `dir`.
struct FrontProc {
    child: KillOnDrop,
    addr: String,
    sock: String,
    cfg: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl FrontProc {
    fn pid(&self) -> i32 {
        self.child.0.id() as i32
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stop this front (SIGTERM, as a restart does) and start another on the same
    /// address and socket path.
    fn restart(self, filters: &str) -> FrontProc {
        let FrontProc {
            mut child,
            addr,
            cfg,
            _dir: dir,
            ..
        } = self;
        // SAFETY: a signal to the front this test started.
        unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
        child.0.wait().unwrap();
        let config = std::fs::read_to_string(&cfg).unwrap();
        front_in(dir, addr, filters, &config)
    }
}

fn front(filters: &str, config: &str) -> FrontProc {
    let addr = format!("127.0.0.1:{}", free_port());
    front_in(tempfile::tempdir().unwrap(), addr, filters, config)
}

/// A front on `addr` with its socket, config and log in `dir`.
fn front_in(dir: tempfile::TempDir, addr: String, filters: &str, config: &str) -> FrontProc {
    let sock = dir.path().join("cc.sock").to_str().unwrap().to_string();
    let cfg = dir.path().join("c.toml");
    // Started as root (the tests are), a front becomes `nobody` unless told not to;
    // these fronts re-read their config and start new binaries from a directory only
    // root may read. (`a_root_started_front_serves_as_nobody_with_backends_as_nobody`
    // runs one as the default has it.)
    let config = match config.contains("allow_root") {
        true => config.to_string(),
        false => format!("[server]\nallow_root = true\n{config}"),
    };
    std::fs::write(&cfg, config).unwrap();
    let log = dir.path().join("front.log");
    let child = Command::new(bin())
        .args([
            "condition",
            "--listen",
            &addr,
            "--to",
            &format!("unix:{sock}"),
        ])
        .args(["--filters", filters, "--config", cfg.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_within(
        Duration::from_secs(10),
        || TcpStream::connect(&addr).is_ok() && Path::new(&sock).exists(),
        || "front did not start".into(),
    );
    FrontProc {
        child: KillOnDrop(child),
        addr,
        sock,
        cfg,
        log,
        _dir: dir,
    }
}

fn start_ccserver(root: &Path, sock: &str) -> Child {
    let lib = target_dir().join("release");
    Command::new(ccserver())
        .arg(root)
        .arg(format!("unix:{sock}"))
        .env("LD_LIBRARY_PATH", lib)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn get(addr: &str, path: &str) -> std::process::Output {
    curl(&[&format!("http://{addr}{path}")])
}

/// Raw request(s) on one connection; everything until the server closes.
fn raw(addr: &str, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    let (out, _) = read_to_end(&mut s);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn ccserver_behind_the_front_serves_files_keep_alive_and_pipelined() {
    let root = docroot();
    let f = front("packaging,persist,fair,slowread,sanity", "");
    let _cc = KillOnDrop(start_ccserver(root.path(), &f.sock));
    let o = get(&f.addr, "/hello.txt");
    assert_eq!(
        o.stdout,
        b"hello world\n",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(get(&f.addr, "/big.bin").stdout, big_bytes());
    assert_eq!(get(&f.addr, "/sub/").stdout, b"<h1>sub</h1>\n");
    // Keep-alive: curl reuses the connection; the front keeps it between requests.
    let url = format!("http://{}/hello.txt", f.addr);
    let o = curl(&["-v", &url, &url, &url]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.stdout, b"hello world\nhello world\nhello world\n");
    assert_eq!(
        err.matches("Re-using existing connection").count(),
        2,
        "{err}"
    );
    // Three pipelined requests in one write: split, answered in order.
    let text = raw(
        &f.addr,
        b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\nGET /sub/ HTTP/1.1\r\nHost: a\r\n\r\nGET /nope HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    let statuses: Vec<&str> = text.matches("HTTP/1.1 ").map(|_| "").collect();
    assert_eq!(statuses.len(), 3, "{text}");
    let a = text.find("hello world").unwrap();
    let b = text.find("<h1>sub</h1>").unwrap();
    let c = text.find("404").unwrap();
    assert!(a < b && b < c, "out of order: {text}");
}

#[test]
fn malformed_requests_are_answered_by_the_front_and_never_passed_on() {
    let f = front("packaging,persist,sanity", "");
    // A backend written with the Rust API, recording every request it is given.
    let sock = f.sock.clone();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut front = sluicecc::Front::connect(&sock).unwrap();
        while let Ok(mut conn) = front.accept() {
            let req = conn.request().to_vec();
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
            let _ = tx.send(req);
            let _ = conn.keep();
        }
    });
    for bad in [
        &b"GET /a HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n"[..],
        b"GET /a HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"GARBAGE\r\n\r\n",
        b"GET /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ] {
        let text = raw(&f.addr, bad);
        assert!(
            text.starts_with("HTTP/1.1 4"),
            "{:?}: {text}",
            String::from_utf8_lossy(bad)
        );
    }
    let good = raw(
        &f.addr,
        b"GET /fine HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(good.contains("ok"), "{good}");
    let got = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        got.starts_with(b"GET /fine "),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "a malformed request reached the backend"
    );
}

#[test]
fn a_backend_killed_mid_response_loses_only_its_connection() {
    let root = docroot();
    std::fs::write(root.path().join("huge.bin"), vec![1u8; 64 << 20]).unwrap();
    let f = front("packaging,persist,fair,slowread,sanity", "");
    let mut cc = KillOnDrop(start_ccserver(root.path(), &f.sock));
    // A kept connection: one request answered, now idle at the front.
    let mut kept = TcpStream::connect(&f.addr).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    kept.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let r = read_response(&mut kept, false).unwrap();
    assert_eq!(r.status, 200);
    // A download the client does not read: ccserver is stuck sending it.
    let mut stuck = TcpStream::connect(&f.addr).unwrap();
    stuck
        .write_all(b"GET /huge.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let _ = cc.0.kill();
    let _ = cc.0.wait();
    // Its connection ends (after the bytes already queued)...
    let t = Instant::now();
    stuck
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (got, _) = read_to_end(&mut stuck);
    assert!(got.len() < 64 << 20, "the whole file went out");
    assert!(t.elapsed() < Duration::from_secs(10));
    // ...the front keeps accepting, and a new backend serves the kept connection.
    let _cc2 = KillOnDrop(start_ccserver(root.path(), &f.sock));
    kept.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let r = read_response(&mut kept, false).unwrap();
    assert_eq!((r.status, r.text()), (200, "hello world\n".to_string()));
    assert_eq!(get(&f.addr, "/hello.txt").stdout, b"hello world\n");
}

#[test]
fn sluice_serve_from_the_front_and_a_chain_of_relays() {
    let root = docroot();
    let log = log_path("front-backend");
    let f = front("packaging,persist,fair,slowread,sanity,pass,pass", "");
    let mut backend = Command::new(bin())
        .arg("serve")
        .arg(root.path())
        .args([
            "--from",
            &format!("unix:{}", f.sock),
            "--allow-root",
            "--workers",
            "2",
        ])
        .args(["--access-log", log.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let line = first_stdout_line(&mut backend);
    let _b = KillOnDrop(backend);
    assert!(
        line.contains("serving") && line.contains("from unix:"),
        "{line}"
    );
    let url = format!("http://{}/hello.txt", f.addr);
    let o = curl(&["-v", &url, &url]);
    assert_eq!(o.stdout, b"hello world\nhello world\n");
    assert!(String::from_utf8_lossy(&o.stderr).contains("Re-using existing connection"));
    assert_eq!(get(&f.addr, "/big.bin").stdout, big_bytes());
    let o = curl(&["-r", "10-19", &format!("http://{}/big.bin", f.addr)]);
    assert_eq!(o.stdout, &big_bytes()[10..20]);
    // The backend logged the client's address, not the front's socket.
    let text = wait_for_lines(&log, 4, Duration::from_secs(5), |l| l.contains("GET /"));
    assert!(text.lines().all(|l| l.starts_with("127.0.0.1 ")), "{text}");
    drop(f);
}

#[test]
fn idle_keep_alive_connections_stay_at_the_front() {
    let root = docroot();
    let f = front("packaging,persist", "");
    let _cc = KillOnDrop(start_ccserver(root.path(), &f.sock));
    // 200 connections, one request each, then idle: ccserver (one request at a
    // time) is free for a new client at once.
    let mut idle = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(&f.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut s, false).unwrap().status, 200);
        idle.push(s);
    }
    let t = Instant::now();
    assert_eq!(get(&f.addr, "/hello.txt").stdout, b"hello world\n");
    assert!(t.elapsed() < Duration::from_secs(2));
    // And each idle one is served again when it speaks.
    for s in idle.iter_mut().step_by(20) {
        s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(s, false).unwrap().status, 200);
    }
    let mut buf = [0u8; 1];
    let _ = idle[0].set_read_timeout(Some(Duration::from_millis(50)));
    assert!(
        idle[0].read(&mut buf).is_err(),
        "nothing unexpected arrives"
    );
}

#[test]
fn a_flood_of_silent_connections_gives_way_to_real_clients() {
    let root = docroot();
    // A small limit, and no deferred accept: every silent connection reaches the
    // front and takes a slot, as in the paper.
    let f = front(
        "packaging,persist,fair,slowread,sanity",
        "[condition]\nmax_connections = 64\ndefer_accept = \"0\"\n",
    );
    let _cc = KillOnDrop(start_ccserver(root.path(), &f.sock));
    let mut flood = Vec::new();
    for _ in 0..300 {
        if let Ok(s) = TcpStream::connect(&f.addr) {
            flood.push(s);
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..5 {
        let o = curl(&["--max-time", "5", &format!("http://{}/hello.txt", f.addr)]);
        assert_eq!(
            o.stdout,
            b"hello world\n",
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // The oldest silent connections were closed to make room.
    let closed = flood
        .iter_mut()
        .take(50)
        .map(|s| closed_within(s, Duration::from_millis(200)))
        .filter(|&c| c)
        .count();
    assert!(closed >= 40, "only {closed} of the oldest 50 were closed");
}

/// SIGHUP reads the front's config again: a file with an error is refused with its
/// line and the front goes on as it was; a good one applies at once (a shorter
/// `header_timeout` closes a half-sent head within it). SIGUSR1, whose default
/// action would end the process and every connection it holds, is logged and
/// ignored; so is SIGUSR2 (an upgrade) with a chain of relays, which it does not
/// support; and a relay of the chain ignores a stray SIGHUP.
#[test]
fn the_front_reloads_on_sighup_and_outlives_the_other_signals() {
    let root = docroot();
    let f = front(
        "packaging,persist,pass",
        "[http]\nheader_timeout = \"20s\"\n",
    );
    let _cc = KillOnDrop(start_ccserver(root.path(), &f.sock));
    let relay: i32 = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", f.pid()))
        .unwrap()
        .split_whitespace()
        .next()
        .expect("the pass relay runs as the front's child")
        .parse()
        .unwrap();
    let signal = |pid: i32, sig: i32| {
        // SAFETY: a signal to a process this test started (or its child).
        unsafe { libc::kill(pid, sig) };
    };
    std::fs::write(&f.cfg, "[http]\nheader_timeout = \"forever\"\n").unwrap();
    signal(f.pid(), libc::SIGHUP);
    wait_for_text(
        || f.log(),
        "reload failed, still serving the previous configuration",
    );
    assert!(f.log().contains("c.toml:2: "), "{}", f.log());
    std::fs::write(&f.cfg, "[http]\nheader_timeout = \"1s\"\n").unwrap();
    signal(f.pid(), libc::SIGHUP);
    wait_for_text(|| f.log(), "reloaded configuration");
    let mut half = TcpStream::connect(&f.addr).unwrap();
    half.write_all(b"GET /hello.txt HTTP/1.1\r\nHo").unwrap();
    assert!(
        closed_within(&mut half, Duration::from_secs(5)),
        "a half head outlived the reloaded 1 s header_timeout"
    );
    signal(f.pid(), libc::SIGUSR1);
    signal(f.pid(), libc::SIGUSR2);
    signal(relay, libc::SIGHUP);
    wait_for_text(|| f.log(), "ignored");
    wait_for_text(|| f.log(), "not with pass relays");
    std::thread::sleep(Duration::from_millis(200));
    assert!(running(f.pid()) && running(relay), "{}", f.log());
    assert_eq!(get(&f.addr, "/hello.txt").stdout, b"hello world\n");
}

/// `sluice serve --from` does not depend on its front's lifetime: started before
/// any front, it serves once one is up; when the front stops and another starts on
/// the same socket (a restart, a new binary), its serving processes connect to the
/// new one, and a download the old front handed over runs to its end (before, the
/// backend's workers stopped with the first front and its processes served
/// nothing again, alive).
#[test]
fn sluice_serve_from_waits_for_its_front_and_follows_a_restart() {
    let root = docroot();
    let big: Vec<u8> = (0..16u32 << 20).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(root.path().join("large.bin"), &big).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("cc.sock");
    let mut backend = Command::new(bin())
        .arg("serve")
        .arg(root.path())
        .args([
            "--from",
            &format!("unix:{}", sock.display()),
            "--allow-root",
        ])
        .args(["--workers", "2", "--access-log", "off"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let line = first_stdout_line(&mut backend);
    let backend = KillOnDrop(backend);
    assert!(line.contains("serving"), "{line}");
    let served = |addr: &str| {
        wait_within(
            Duration::from_secs(10),
            || {
                curl(&["--max-time", "3", &format!("http://{addr}/hello.txt")]).stdout
                    == b"hello world\n"
            },
            || format!("not served through {addr}"),
        )
    };
    let f = front_in(
        dir,
        format!("127.0.0.1:{}", free_port()),
        "packaging,persist",
        "",
    );
    served(&f.addr);
    // A download in flight across the restart: a reader with a small buffer that
    // has not read yet.
    let dl = slow_download(&f.addr);
    let f = f.restart("packaging,persist");
    served(&f.addr);
    dl.arrives_whole(&big, "the download across the restart");
    let pid = backend.0.id();
    let serving = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    assert_eq!(
        serving.split_whitespace().count(),
        2,
        "both serving processes are there"
    );
}

/// The ids a front gives its handoffs are not the ids the front before it gave. A
/// backend that reconnects after a restart may still send KEEP or CLOSE for a
/// connection of the old front (the C library's `cc_close` on a descriptor it
/// accepted before), and such a message must not name a connection of the new
/// front, or that client would lose its keep-alive, or its connection.
#[test]
fn a_restarted_front_never_gives_the_ids_of_the_one_before() {
    use std::os::fd::AsRawFd;
    let ids_of = |f: &FrontProc| {
        let clients: Vec<TcpStream> = (0..5)
            .map(|_| {
                let mut c = TcpStream::connect(&f.addr).unwrap();
                c.write_all(b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
                c
            })
            .collect();
        let back = sluicecc::proto::connect(Path::new(&f.sock)).unwrap();
        let mut buf = Vec::new();
        let ids: Vec<u64> = (0..clients.len())
            .map(|_| {
                sluicecc::proto::send_ctl(back.as_raw_fd(), sluicecc::proto::ASK, 0).unwrap();
                let h = sluicecc::proto::recv_handoff(back.as_raw_fd(), &mut buf)
                    .unwrap()
                    .expect("a handoff");
                h.id
            })
            .collect();
        ids
    };
    let f = front("packaging", "");
    let before = ids_of(&f);
    let f = f.restart("packaging");
    let after = ids_of(&f);
    assert!(
        before.iter().all(|id| !after.contains(id)),
        "the same ids from two fronts: {before:x?} and {after:x?}"
    );
}

/// A C server built on the library (examples/ccserver.c) outlives a restart of its
/// front: `cc_accept` fails with `ECONNABORTED`, the server connects to the next
/// front with `cc_createlsock`, and clients are served through it.
#[test]
fn ccserver_connects_to_the_next_front_after_a_restart() {
    let root = docroot();
    let f = front("packaging,persist", "");
    let mut cc = KillOnDrop(start_ccserver(root.path(), &f.sock));
    assert_eq!(get(&f.addr, "/hello.txt").stdout, b"hello world\n");
    let f = f.restart("packaging,persist");
    wait_within(
        Duration::from_secs(10),
        || {
            assert!(
                cc.0.try_wait().unwrap().is_none(),
                "ccserver exited when its front went away"
            );
            let o = curl(&["--max-time", "3", &format!("http://{}/hello.txt", f.addr)]);
            o.stdout == b"hello world\n"
        },
        || "not served after the restart".into(),
    );
}

/// A complete request no backend takes (none is there, or all are busy) is
/// answered 503 with `Retry-After` once `header_timeout` has passed since its first
/// byte, and closed: the front holds no connection without a deadline. Before, it
/// waited for a backend for as long as the client would.
#[test]
fn a_request_no_backend_takes_gets_503_within_the_header_timeout() {
    let f = front(
        "packaging,persist,fair",
        "[http]\nheader_timeout = \"1s\"\n",
    );
    let mut s = TcpStream::connect(&f.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let t = Instant::now();
    let r = read_response(&mut s, false).expect("an answer, not a wait without end");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert!(closed_within(&mut s, Duration::from_secs(2)));
}

/// `kill -USR2` to the front (a new binary): the new front serves on the same
/// sockets and takes every connection the old one held, in the state it was in (a
/// kept keep-alive, a half-sent head); no new connection is refused on the way; a
/// download the backend was sending arrives whole; the old front exits. Before
/// that, a new binary that cannot start (its config has an error) leaves the old
/// front serving, its connections untouched.
#[test]
fn the_front_upgrades_in_place_and_hands_over_every_connection_it_holds() {
    let root = docroot();
    let big: Vec<u8> = (0..16u32 << 20).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(root.path().join("large.bin"), &big).unwrap();
    let f = front(
        "packaging,persist,fair,slowread,sanity",
        "[http]\nheader_timeout = \"20s\"\n",
    );
    let _backend = serve_from(root.path(), &f.sock, "2");
    wait_served(&f.addr);
    // What the front holds: a connection kept after its request, a head half sent.
    let (mut kept, mut half) = kept_and_half(&f.addr);
    // And one a backend holds: a download with a small buffer, not read yet.
    let dl = slow_download(&f.addr);

    let old = f.pid();
    let mut f = f;
    let usr2 = || {
        // SAFETY: a signal to the front this test started.
        unsafe { libc::kill(old, libc::SIGUSR2) };
    };
    let log_path = f.log.clone();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let wait_log = |what: &str| {
        wait_within(
            Duration::from_secs(10),
            || log().contains(what),
            || format!("the front's log never said {what:?}:\n{}", log()),
        )
    };
    // A new binary that cannot start: the old front goes on.
    let good = std::fs::read_to_string(&f.cfg).unwrap();
    std::fs::write(&f.cfg, format!("{good}bogus = 1\n")).unwrap();
    usr2();
    wait_log("did not start");
    assert!(
        f.child.0.try_wait().unwrap().is_none(),
        "the old front exited"
    );
    assert!(ask(&f.addr).unwrap().starts_with("HTTP/1.1 200"));

    // The upgrade, with clients connecting all the while.
    std::fs::write(&f.cfg, &good).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hammer = {
        let (stop, addr) = (stop.clone(), f.addr.clone());
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0u32, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match ask(&addr) {
                    Ok(r) if r.starts_with("HTTP/1.1 200") => ok += 1,
                    other => failed.push(format!("{other:?}")),
                }
            }
            (ok, failed)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    usr2();
    wait_within(
        Duration::from_secs(10),
        || f.child.0.try_wait().unwrap().is_some(),
        || format!("the old front did not exit:\n{}", log()),
    );
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = hammer.join().unwrap();
    let _new = PidOnDrop(new_front_pid(&log()));
    assert!(
        failed.is_empty() && ok > 0,
        "{ok} answered, {} not, around the upgrade: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    // The held connections are the new front's, and served through it.
    kept.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let r = hello(&mut kept);
    assert!(r.starts_with("HTTP/1.1 200"), "the kept connection: {r:?}");
    half.write_all(b"st: a\r\n\r\n").unwrap();
    let r = hello(&mut half);
    assert!(r.starts_with("HTTP/1.1 200"), "the half-sent head: {r:?}");
    // The two held here, and any of the connecting client's caught mid-request.
    wait_log("took the old front's connections adopted=");
    let adopted: u32 = log()
        .split("took the old front's connections adopted=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(adopted >= 2, "adopted {adopted}");
    dl.arrives_whole(&big, "the download across the upgrade");
    assert!(ask(&f.addr).unwrap().starts_with("HTTP/1.1 200"));
}

/// The pid of the new front an upgrade started, from the old front's `log`.
fn new_front_pid(log: &str) -> i32 {
    log.lines()
        .find(|l| l.contains("the new server serves"))
        .and_then(|l| l.split("pid=").nth(1))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no new front's pid in the log:\n{log}"))
}

/// `sluice serve ROOT --from unix:SOCK` with `workers` workers, staying root
/// (`--allow-root`), killed on drop.
fn serve_from(root: &Path, sock: &str, workers: &str) -> KillOnDrop {
    KillOnDrop(
        Command::new(bin())
            .arg("serve")
            .arg(root)
            .args(["--from", &format!("unix:{sock}"), "--allow-root"])
            .args(["--workers", workers, "--access-log", "off"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// Wait (up to 10 s) until `GET /hello.txt` through `addr` is answered 200.
fn wait_served(addr: &str) {
    wait_within(
        Duration::from_secs(10),
        || ask(addr).is_ok_and(|r| r.starts_with("HTTP/1.1 200")),
        || "not served".into(),
    );
}

/// What a front holds: a connection kept after one answered request, and one
/// that has sent half a head.
fn kept_and_half(addr: &str) -> (TcpStream, TcpStream) {
    let mut kept = TcpStream::connect(addr).unwrap();
    kept.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert!(hello(&mut kept).starts_with("HTTP/1.1 200"));
    let mut half = TcpStream::connect(addr).unwrap();
    half.write_all(b"GET /hello.txt HTTP/1.1\r\nHo").unwrap();
    (kept, half)
}

/// A download of `/large.bin` by a reader with a 16 KiB receive buffer that has
/// read its first bytes (the head) and then stops, so the server is still sending.
struct SlowDownload {
    sock: TcpStream,
    first: Vec<u8>,
}

fn slow_download(addr: &str) -> SlowDownload {
    let mut sock = TcpStream::connect(addr).unwrap();
    socket2::SockRef::from(&sock)
        .set_recv_buffer_size(16 << 10)
        .unwrap();
    sock.write_all(b"GET /large.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut first = vec![0u8; 4096];
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let n = sock.read(&mut first).unwrap();
    first.truncate(n);
    assert!(
        first.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&first)
    );
    SlowDownload { sock, first }
}

impl SlowDownload {
    /// Read the rest: the body must be `big`, byte for byte.
    fn arrives_whole(mut self, big: &[u8], what: &str) {
        let (rest, _) = read_to_end(&mut self.sock);
        let mut whole = self.first;
        whole.extend_from_slice(&rest);
        let body = whole.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(
            whole[body..] == big[..],
            "{what}: {} of {} bytes",
            whole.len() - body,
            big.len()
        );
    }
}

/// Read one answer to `GET /hello.txt` (up to its body) from `s`.
fn hello(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    while !got.ends_with(b"hello world\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&b[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// `GET /hello.txt` on a new connection to `addr`.
fn ask(addr: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")?;
    Ok(hello(&mut s))
}

/// The front answers for itself at `/server-status/front` (JSON) and
/// `/server-status/front/metrics` (Prometheus): what it holds and every close by
/// its reason. The backends' own page (`/server-status`) passes through to them,
/// and an address outside `[status] allow` (after a reload) is handed on too.
#[test]
fn the_front_answers_for_itself_at_server_status_front() {
    let root = docroot();
    let f = front(
        "packaging,persist,fair,slowread,sanity",
        "[http]\nheader_timeout = \"1s\"\n",
    );
    let _backend = serve_from(root.path(), &f.sock, "1");
    wait_served(&f.addr);
    // One connection kept at the front after its request, one head never finished.
    let (_kept, mut half) = kept_and_half(&f.addr);
    let (out, closed) = read_to_end(&mut half);
    assert!(closed && String::from_utf8_lossy(&out).contains("408"));

    let body = |path: &str| {
        let o = curl(&[&format!("http://{}{path}", f.addr)]);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let json: serde_json::Value = serde_json::from_str(&body("/server-status/front")).unwrap();
    assert_eq!(json["closes_total"]["header_timeout"], 1, "{json}");
    assert_eq!(json["connections"]["idle"], 1, "{json}");
    assert_eq!(json["connections"]["reading"], 0, "{json}");
    assert_eq!(json["backends"], 1, "{json}");
    assert!(json["handed_total"].as_u64().unwrap() >= 2, "{json}");
    let metrics = body("/server-status/front/metrics");
    assert!(
        metrics.contains("sluice_front_closes_total{reason=\"header_timeout\"} 1\n")
            && metrics.contains("sluice_front_connections{state=\"idle\"} 1\n"),
        "{metrics}"
    );
    let backends: serde_json::Value =
        serde_json::from_str(&body("/server-status?format=json")).unwrap();
    assert!(backends.get("bytes_sent_total").is_some(), "{backends}");
    assert_eq!(backends["front_attached_workers"], 1, "{backends}");

    std::fs::write(
        &f.cfg,
        "[http]\nheader_timeout = \"1s\"\n[status]\nallow = [\"10.0.0.0/8\"]\n",
    )
    .unwrap();
    // SAFETY: a signal to the front this test started.
    unsafe { libc::kill(f.pid(), libc::SIGHUP) };
    wait_for_text(|| f.log(), "reloaded configuration");
    let o = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("http://{}/server-status/front", f.addr),
    ]);
    assert_eq!(
        o.stdout, b"404",
        "handed to the backend, which has no such page"
    );
}

/// Started as root with no `allow_root`, the front becomes `nobody` (as `sluice
/// serve` does: no client byte is parsed as root) and gives the backends' socket
/// to that user, so a `sluice serve --from` started as root, which serves as
/// `nobody` by default, can connect to it. Before, the front stayed root and its
/// socket refused such a backend (`Permission denied`): the default deployment
/// served nothing.
#[test]
fn a_root_started_front_serves_as_nobody_with_backends_as_nobody() {
    root_started_chain_serves_as_nobody("packaging,persist,fair,slowread,sanity");
}

/// The same with two `pass` relays between the front and the backend: each relay
/// becomes `nobody` too, and gives its socket to that user (before, the relays
/// stayed root, and the last one's socket, the one backends connect to, refused a
/// backend serving as `nobody`; nor could the front, once `nobody`, stop them).
#[test]
fn a_root_started_chain_of_relays_serves_as_nobody() {
    root_started_chain_serves_as_nobody("packaging,persist,fair,slowread,sanity,pass,pass");
}

fn root_started_chain_serves_as_nobody(filters: &str) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: nothing to drop; the test runs as root in CI");
        return;
    }
    let root = docroot();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = front_in(
        dir,
        format!("127.0.0.1:{}", free_port()),
        filters,
        "# allow_root is left out: the default\n",
    );
    let uid_of = |pid: u32| -> u32 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    wait_until(
        || uid_of(f.pid() as u32) != 0,
        || "the front stayed root".into(),
    );
    let nobody = uid_of(f.pid() as u32);
    let relays: Vec<u32> = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", f.pid()))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(
        relays.len(),
        filters.matches("pass").count(),
        "the front's relays"
    );
    for &r in &relays {
        wait_until(|| uid_of(r) == nobody, || format!("relay {r} stayed root"));
    }
    // The socket backends connect to (the last relay's, with relays) is the user's.
    wait_until(
        || std::fs::metadata(&f.sock).map(|m| m.uid()).ok() == Some(nobody),
        || format!("{} is not the user's", f.sock),
    );
    let backend = KillOnDrop(
        Command::new(bin())
            .arg("serve")
            .arg(root.path())
            .args(["--from", &format!("unix:{}", f.sock)])
            .args(["--workers", "1", "--access-log", "off"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_within(
        Duration::from_secs(10),
        || ask(&f.addr).is_ok_and(|r| r.starts_with("HTTP/1.1 200")),
        || {
            format!(
                "a backend serving as nobody is not served through the front:\n{}",
                f.log()
            )
        },
    );
    let pid = backend.0.id();
    assert_eq!(uid_of(pid), nobody, "the backend serves as nobody too");
}

/// The front listens on `server.listen_sockets` `SO_REUSEPORT` sockets (each its
/// own SYN and accept queues, as a worker of `sluice serve` has; with one socket, a
/// flood of 32,000 silent connections overflowed its queue, `defer_accept = "auto"`
/// switched deferral off, and the flood reached the front: bench/front_compare.py's
/// silent row fell to 0.37), and an upgrade hands every one of them to the new
/// front.
#[test]
fn the_front_listens_on_several_sockets_and_an_upgrade_takes_them_all() {
    let f = front(
        "packaging,persist",
        "[server]\nallow_root = true\nlisten_sockets = 3\n",
    );
    let port: u16 = f.addr.rsplit(':').next().unwrap().parse().unwrap();
    let listening = || {
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
        table
            .lines()
            .skip(1)
            .filter(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols[1].ends_with(&format!(":{port:04X}")) && cols[3] == "0A"
            })
            .count()
    };
    // The front binds its sockets one after another, and answers on the first
    // before the others exist: wait (bounded) for all three, then hold them to it.
    wait_within(
        Duration::from_secs(10),
        || listening() == 3,
        || format!("{} sockets listening, not 3", listening()),
    );
    assert_eq!(listening(), 3);
    let old = f.pid();
    let mut f = f;
    // SAFETY: a signal to the front this test started.
    unsafe { libc::kill(old, libc::SIGUSR2) };
    let log_path = f.log.clone();
    let child = &mut f.child.0;
    wait_within(
        Duration::from_secs(10),
        || child.try_wait().unwrap().is_some(),
        || {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            format!("no upgrade:\n{log}")
        },
    );
    let _new = PidOnDrop(new_front_pid(&f.log()));
    assert_eq!(listening(), 3, "the new front holds the same sockets");
    assert!(TcpStream::connect(&f.addr).is_ok());
}

/// An idle front sleeps: with no connection held it sweeps once a second (not ten
/// times), and its backend's worker, with no connection either, wakes once a second
/// too. A stop still ends it at once.
#[test]
fn an_idle_front_and_its_backend_sleep_and_stop_at_once() {
    let root = docroot();
    let mut f = front("packaging,persist,fair", "");
    let backend = serve_from(root.path(), &f.sock, "1");
    wait_served(&f.addr);
    // The connection is closed; within a second both sides sleep their idle sleep.
    std::thread::sleep(Duration::from_millis(1500));
    let pids = [f.pid() as u32, backend.0.id()];
    let secs = 3;
    let woke = wakeups_during(&pids, Duration::from_secs(secs));
    for (t, &n) in &woke {
        assert!(
            n <= 2 * secs,
            "{t} woke {n} times in {secs} s of idleness:\n{woke:#?}"
        );
    }
    // The front still answers at once, and stops at once.
    assert_eq!(get(&f.addr, "/hello.txt").stdout, b"hello world\n");
    // SAFETY: a signal to the front this test started.
    unsafe { libc::kill(f.pid(), libc::SIGTERM) };
    let t = Instant::now();
    while f.child.0.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < Duration::from_millis(600),
            "an idle front took over 600 ms to stop:\n{}",
            f.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
