//! systemd integration (issue 14): socket activation with Debian's
//! `systemd-socket-activate`, and sd_notify readiness over a real datagram socket.

use sluice_testkit::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn socket_activation_serves_on_the_passed_descriptor() {
    assert!(
        Command::new("systemd-socket-activate")
            .arg("--version")
            .output()
            .is_ok(),
        "systemd-socket-activate is needed (Debian's systemd package; scripts/test.sh installs it)"
    );
    let dir = docroot();
    let port = free_port();
    // A different address in server.listen: it must not be bound.
    let unused = free_port();
    let mut child = Command::new("systemd-socket-activate")
        .args(["-l", &format!("127.0.0.1:{port}")])
        .arg(bin())
        .arg("serve")
        .arg(dir.path())
        .args([
            "--listen",
            &format!("127.0.0.1:{unused}"),
            "--workers",
            "2",
            "--allow-root",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let child = KillOnDrop(child);
    // The activator listens first and starts sluice on the first connection.
    let t = Instant::now();
    let mut s = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if t.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("activator never listened: {e}"),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).expect("a response on the activated socket");
    assert_eq!(r.text(), "hello world\n");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert!(
        line.contains(&format!("http://127.0.0.1:{port}/")),
        "{line:?}"
    );
    // Same process (the activator execs it): more connections, both workers' turn.
    for _ in 0..20 {
        let r = get_once(port);
        assert_eq!(r.status, 200);
    }
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", unused)).is_err(),
        "server.listen must not be bound under socket activation"
    );
    drop(child);
}

fn get_once(port: u16) -> Resp {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /sub/ HTTP/1.0\r\n\r\n").unwrap();
    read_response(&mut s, false).unwrap()
}

/// The `MAINPID=` a new server (or front) sent after an upgrade.
fn main_pid(sock: &UnixDatagram) -> i32 {
    let main = recv_until(sock, "MAINPID=");
    main.lines()
        .find_map(|l| l.strip_prefix("MAINPID="))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("{main:?}"))
}

fn recv_until(sock: &UnixDatagram, want: &str) -> String {
    let mut buf = [0u8; 4096];
    let t = Instant::now();
    loop {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if t.elapsed() < Duration::from_secs(15) => {
                let _ = e;
                continue;
            }
            Err(e) => panic!("no {want:?} from the server: {e}"),
        };
        let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
        if msg.lines().any(|l| l.starts_with(want)) {
            return msg;
        }
    }
}

/// A server on `root` (with `extra` arguments) started with `NOTIFY_SOCKET` naming a
/// datagram socket the test reads (each read waits at most 500 ms); the directory
/// holds the socket.
fn notified_server(
    root: tempfile::TempDir,
    extra: &[&str],
) -> (tempfile::TempDir, UnixDatagram, Server) {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let srv = Server::start_in_env(root, &[("NOTIFY_SOCKET", path.to_str().unwrap())], extra);
    (d, sock, srv)
}

#[test]
fn sd_notify_ready_reloading_stopping() {
    let (_d, sock, srv) = notified_server(docroot(), &[]);
    let ready = recv_until(&sock, "READY=1");
    assert!(ready.contains("STATUS=serving"), "{ready:?}");
    srv.signal(libc::SIGHUP);
    let reloading = recv_until(&sock, "RELOADING=1");
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading:?}");
    recv_until(&sock, "READY=1");
    srv.signal(libc::SIGTERM);
    recv_until(&sock, "STOPPING=1");
    // Abstract addresses (systemd's own form, "@name") work too.
    let name = format!("sluice-test-{}", std::process::id());
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let sock = UnixDatagram::bind_addr(&addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let _srv = Server::start_in_env(docroot(), &[("NOTIFY_SOCKET", &format!("@{name}"))], &[]);
    recv_until(&sock, "READY=1");
}

/// With several serving processes (two workers run two by default) the master's
/// `READY=1` after a reload waits until each of them serves the new configuration,
/// so `systemctl reload` returns then: each one's "reloaded configuration" line is
/// in the log when it arrives. 50,000 rules keep every process compiling for a
/// while after the master has checked the configuration (before, `READY=1` came
/// as the master passed the signal on).
#[test]
fn ready_after_a_reload_waits_for_every_serving_process() {
    let root = docroot();
    let rules = root.path().join(".rules.conf");
    let text: String = (0..50_000)
        .map(|i| format!("Redirect 301 /old/{i}/ /new/{i}/\n"))
        .collect();
    std::fs::write(&rules, text).unwrap();
    let (_d, sock, srv) = notified_server(root, &["--rules", rules.to_str().unwrap()]);
    recv_until(&sock, "READY=1");
    let processes = srv.serving_pids().len();
    assert!(processes >= 2, "two workers run as two serving processes");
    const LINE: &str = "reloaded configuration";
    for round in 1..=2 {
        srv.signal(libc::SIGHUP);
        recv_until(&sock, "RELOADING=1");
        recv_until(&sock, "READY=1");
        let log = srv.stderr();
        assert_eq!(log.matches(LINE).count(), round * processes, "{log}");
    }
    let r = srv.get("GET /old/7/x HTTP/1.0\r\n\r\n");
    assert_eq!(r.status, 301, "{}", r.text());
}

#[test]
fn an_upgrade_makes_the_new_server_the_main_process() {
    let (_d, sock, srv) = notified_server(docroot(), &[]);
    recv_until(&sock, "READY=1");
    srv.signal(libc::SIGUSR2);
    let pid = main_pid(&sock);
    let _new = PidOnDrop(pid);
    assert_ne!(pid as u32, srv.pid());
    assert!(
        srv.stderr().contains(&format!("pid={pid}")),
        "MAINPID is not the new server: {}",
        srv.stderr()
    );
    // The old server quits without telling systemd the service stops.
    let mut srv = srv;
    let quit = srv.exited_within(Duration::from_secs(10));
    assert!(quit.is_some(), "the old server did not quit");
    let mut buf = [0u8; 4096];
    while let Ok(n) = sock.recv(&mut buf) {
        let msg = String::from_utf8_lossy(&buf[..n]);
        assert!(
            !msg.contains("STOPPING=1"),
            "the old server said STOPPING: {msg:?}"
        );
    }
    // The new one answers on the same port.
    assert_eq!(srv.get("GET /hello.txt HTTP/1.0\r\n\r\n").status, 200);
}

/// The unit's `ExecReload=` lines (`dist/systemd/sluice.service`), run as systemd
/// runs them: in order, the first that fails ending the reload and failing it. With
/// a config that has an error, the reload fails with the file and line and the
/// server is never signalled (on Debian 12's systemd 252 a bare `kill -HUP` made
/// `systemctl reload` succeed whatever the config said); with a good one, every
/// line succeeds, and by then the server has reloaded (`sluice reload` waits for it).
#[test]
fn the_units_reload_checks_the_config_before_it_signals() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/systemd/sluice.service"
    ))
    .unwrap();
    let lines: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("ExecReload="))
        .collect();
    let srv = Server::start_with_config(docroot(), "[server]\nworkers = 1\n", &[]);
    let cfg = srv.root().join(".test-config.toml");
    let reload = || -> Result<(), String> {
        for line in &lines {
            let line = line
                .replace("/usr/local/bin/sluice", bin())
                .replace("/etc/sluice/sluice.toml", cfg.to_str().unwrap())
                .replace("$MAINPID", &srv.pid().to_string());
            let mut words = line.split_whitespace();
            let out = Command::new(words.next().unwrap())
                .args(words)
                .output()
                .unwrap();
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).into_owned());
            }
        }
        Ok(())
    };
    std::fs::write(
        &cfg,
        "[server]\nworkers = 1\n[http]\nkeepalive_timeout = \"forever\"\n",
    )
    .unwrap();
    let err = reload().expect_err("the reload of a config with an error failed");
    assert!(err.contains(".test-config.toml:4: "), "{err}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !srv.stderr().contains("reload"),
        "the server was signalled: {}",
        srv.stderr()
    );
    std::fs::write(&cfg, "[server]\nworkers = 1\n").unwrap();
    reload().expect("the reload of a good config succeeds");
    wait_for_stderr(&srv, "reloaded configuration");
}

/// `dist/systemd/sluice-condition.service`: the front says `READY=1` once it
/// listens; the unit's `ExecReload=` line (`sluice reload`) fails with the file and
/// line on a config with an error without signalling, and on a good one returns
/// once the front has reloaded (`RELOADING=1`, then `READY=1`); an upgrade
/// (`SIGUSR2`) makes the new front the main process, and the old one exits without
/// `STOPPING=1`.
#[test]
fn the_fronts_unit_is_told_ready_reloading_and_its_new_main_process() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../dist/systemd/sluice-condition.service"
    ))
    .unwrap();
    let reload_line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecReload="))
        .expect("an ExecReload= line");
    let d = tempfile::tempdir().unwrap();
    let notify = d.path().join("notify.sock");
    let sock = UnixDatagram::bind(&notify).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let cfg = d.path().join("condition.toml");
    let good = "[server]\nallow_root = true\n";
    std::fs::write(&cfg, good).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let log = d.path().join("front.log");
    let mut front = KillOnDrop(
        Command::new(bin())
            .args(["condition", "--listen", &addr, "--to"])
            .arg(format!("unix:{}", d.path().join("cc.sock").display()))
            .arg("--config")
            .arg(&cfg)
            .env("NOTIFY_SOCKET", &notify)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    recv_until(&sock, "READY=1");
    let pid = front.0.id();
    let reload = || {
        let line = reload_line
            .replace("/usr/local/bin/sluice", bin())
            .replace("/etc/sluice/condition.toml", cfg.to_str().unwrap())
            .replace("$MAINPID", &pid.to_string());
        let mut words = line.split_whitespace();
        Command::new(words.next().unwrap())
            .args(words)
            .output()
            .unwrap()
    };
    std::fs::write(&cfg, format!("{good}bogus = 1\n")).unwrap();
    let o = reload();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("condition.toml:3"),
        "{o:?}"
    );
    std::fs::write(&cfg, format!("{good}[http]\nheader_timeout = \"5s\"\n")).unwrap();
    let o = reload();
    assert!(o.status.success(), "{o:?}");
    recv_until(&sock, "RELOADING=1");
    recv_until(&sock, "READY=1");
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("reloaded configuration").count(), 1, "{text}");
    assert!(
        !text.contains("reload failed"),
        "the bad config was sent: {text}"
    );

    // SAFETY: a signal to the front this test started.
    unsafe { libc::kill(pid as i32, libc::SIGUSR2) };
    let new = main_pid(&sock);
    let _new = PidOnDrop(new);
    assert_ne!(new as u32, pid);
    let t = Instant::now();
    while front.0.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the old front stayed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut buf = [0u8; 4096];
    while let Ok(n) = sock.recv(&mut buf) {
        let msg = String::from_utf8_lossy(&buf[..n]);
        assert!(
            !msg.contains("STOPPING=1"),
            "the old front said STOPPING: {msg:?}"
        );
    }
    assert!(std::net::TcpStream::connect(&addr).is_ok());
}
