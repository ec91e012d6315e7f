//! `server.processes`: the workers split over several serving processes forked from
//! one master. Each process has its own descriptor limit, so the server holds more
//! connections than one process can; the status page and the caps are the whole
//! server's; a process that dies is replaced; SIGHUP and SIGTERM reach every one.

use sluice_testkit::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Range caps off: every test connection comes from 127.0.0.0/8, and these tests
/// are about descriptors, not ranges.
const CAPS_OFF: &str = "[condition]\ncap_8 = 1.0\ncap_16 = 1.0\ncap_24 = 1.0\n";

fn config_in(dir: &tempfile::TempDir, toml: &str) -> String {
    let p = dir.path().join(".test-config.toml");
    std::fs::write(&p, toml).unwrap();
    p.to_str().unwrap().to_string()
}

/// Where `/a` redirects, asked on 20 fresh connections (spread over the
/// processes).
fn locations(srv: &Server) -> Vec<String> {
    (0..20)
        .map(|_| {
            srv.get("GET /a HTTP/1.0\r\n\r\n")
                .header("location")
                .unwrap_or("-")
                .to_string()
        })
        .collect()
}

/// `n` keep-alive connections, each idle after one answered request. The
/// connections are made one at a time, so a full server evicts the least recently
/// used instead of refusing.
fn hold_idle(srv: &Server, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|i| {
            let mut s = srv.connect();
            assert_eq!(
                keepalive_get(&mut s, "/hello.txt"),
                Some(200),
                "connection {i}"
            );
            s
        })
        .collect()
}

/// The reason sluice has processes: with a descriptor limit of 400 per process
/// (room for 205 connections each), one process must evict idle connections to hold
/// 300, two hold all 300 and both take a share.
#[test]
fn two_processes_hold_what_one_processes_descriptors_cannot() {
    let mut evicted = Vec::new();
    for processes in ["1", "2"] {
        let dir = docroot();
        let cfg = config_in(&dir, CAPS_OFF);
        let srv =
            Server::start_with_nofile(dir, 400, &["--config", &cfg, "--processes", processes]);
        let base: Vec<(u32, usize)> = srv
            .children()
            .into_iter()
            .map(|p| (p, open_fds_of(p)))
            .collect();
        let held = hold_idle(&srv, 300);
        std::thread::sleep(Duration::from_millis(300));
        let j = srv.status_json();
        let ev = j["closes_by_reason"]["evicted_idle"].as_u64().unwrap();
        evicted.push(ev);
        if processes == "2" {
            assert_eq!(j["processes"], 2);
            assert!(
                j["open_connections"].as_u64().unwrap() >= 300,
                "the status page sums both processes: {}",
                j["open_connections"]
            );
            // Per process: 400 less 64, 64 per worker (two in the server), and the
            // listeners (`listen_sockets`, 4 by default, per worker: both workers'
            // originals, its own copies).
            assert_eq!(
                j["max_connections"].as_u64().unwrap(),
                2 * (400 - 64 - 64 * 2 - (2 * 4 + 4))
            );
            // Both serving processes hold a good share (SO_REUSEPORT hashes each
            // connection to one of the two workers' sockets).
            assert_eq!(base.len(), 2, "two serving processes");
            for (pid, before) in base {
                let now = open_fds_of(pid);
                assert!(
                    now >= before + 75,
                    "process {pid} holds {} connections of 300",
                    now - before
                );
            }
        }
        drop(held);
        assert_eq!(srv.stop(), Some(0));
    }
    assert!(
        evicted[0] >= 50,
        "one process evicts past its room: {evicted:?}"
    );
    assert_eq!(evicted[1], 0, "two processes evict none: {evicted:?}");
}

/// Counters are in memory the processes share: requests answered by either show up
/// on the status page whichever process answers it.
#[test]
fn the_status_page_counts_every_processes_requests() {
    let srv = Server::start(&["--processes", "2"]);
    for _ in 0..40 {
        let r = srv.get("GET /hello.txt HTTP/1.0\r\n\r\n");
        assert_eq!(r.status, 200);
    }
    for _ in 0..5 {
        let j = srv.status_json();
        assert_eq!(j["processes"], 2);
        let n = j["requests_total"].as_u64().unwrap();
        let by200 = j["responses_by_status"]["200"].as_u64().unwrap();
        // Earlier status requests count too (a status request is counted once
        // answered).
        assert!((40..=44).contains(&n), "requests_total {n}");
        assert!(by200 >= 40, "200s {by200}");
    }
    let m = srv
        .get("GET /server-status/metrics HTTP/1.0\r\n\r\n")
        .text();
    assert!(
        m.lines().any(|l| l == "sluice_processes 2"),
        "{}",
        m.lines()
            .filter(|l| l.contains("processes"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Top lists are published into memory the processes share: a URL fetched over
/// connections that both processes answered shows its whole count, whichever
/// process serves the status page.
#[test]
fn the_top_lists_count_every_processes_requests() {
    let srv = Server::start(&["--processes", "2"]);
    // New connections each: the kernel spreads them over both processes'
    // listeners (all 60 on one of two would be a 2^-59 chance).
    for _ in 0..60 {
        assert_eq!(srv.get("GET /hello.txt HTTP/1.0\r\n\r\n").status, 200);
    }
    let count = |j: &serde_json::Value| {
        j["top_urls_by_requests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["path"] == "/hello.txt")
            .and_then(|u| u["requests"].as_u64())
    };
    // Each worker publishes once a second.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let n = count(&srv.status_json());
        seen.push(n);
        if seen
            .iter()
            .rev()
            .take(6)
            .filter(|n| **n == Some(60))
            .count()
            == 6
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("/hello.txt on the status page, reading by reading: {seen:?}");
}

/// A serving process killed outright is forked again; the server keeps answering;
/// the restart is counted; SIGTERM to the master stops every process and exits 0.
#[test]
fn a_killed_serving_process_is_replaced_and_sigterm_stops_them_all() {
    let srv = Server::start(&["--processes", "2"]);
    let first = srv.children();
    assert_eq!(first.len(), 2, "{first:?}");
    // SAFETY: a process of the server this test started.
    unsafe { libc::kill(first[0] as i32, libc::SIGKILL) };
    let t = Instant::now();
    let second = loop {
        let now = srv.children();
        if now.len() == 2 && !now.contains(&first[0]) {
            break now;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "not replaced: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(second.contains(&first[1]), "the other process kept serving");
    wait_for_stderr(&srv, "starting another");
    for _ in 0..30 {
        assert_eq!(srv.get("GET /hello.txt HTTP/1.0\r\n\r\n").status, 200);
    }
    assert_eq!(srv.status_json()["worker_restarts_total"], 1);
    assert_eq!(srv.stop(), Some(0));
    for pid in second {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "serving process {pid} outlived the master"
        );
    }
}

/// SIGHUP to the master reaches every process: each fresh connection (spread over
/// both processes) sees the new rules; a broken file leaves all of them on the old.
#[test]
fn sighup_reloads_every_process() {
    let dir = docroot();
    let rules = dir.path().join(".rules.conf");
    std::fs::write(&rules, "Redirect 301 /a /first\n").unwrap();
    let cfg = config_in(
        &dir,
        &format!("[rules]\nfiles = [{:?}]\n", rules.to_str().unwrap()),
    );
    let srv = Server::start_in(dir, &["--config", &cfg, "--processes", "2"]);
    assert!(locations(&srv).iter().all(|l| l == "/first"));
    std::fs::write(&rules, "Redirect 301 /a /second\n").unwrap();
    srv.signal(libc::SIGHUP);
    let t = Instant::now();
    loop {
        let l = locations(&srv);
        if l.iter().all(|l| l == "/second") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{l:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(&rules, "Redirect 301 /a /third\nRewriteRule ^/a /x [P]\n").unwrap();
    srv.signal(libc::SIGHUP);
    wait_for_stderr(&srv, "reload failed");
    std::thread::sleep(Duration::from_millis(200));
    assert!(locations(&srv).iter().all(|l| l == "/second"));
    assert_eq!(srv.stop(), Some(0));
}

/// A reload that compiles at least `server.reload_fork_rules` rules forks new
/// serving processes, which share the master's compile, and the old ones quit: a
/// download begun before the reload arrives whole from its old process, which
/// exits once it is sent, while new connections see the new rules. A reload that
/// compiles fewer, or none, keeps the processes (each compiles for itself).
#[test]
fn a_reload_that_compiles_many_rules_forks_new_processes_and_the_old_finish() {
    let dir = docroot();
    // Larger than the socket buffers on both sides hold: the download stays in
    // flight until this test reads it.
    let big: Vec<u8> = (0..32u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("big.bin"), &big).unwrap();
    let rules = dir.path().join(".rules.conf");
    std::fs::write(&rules, "Redirect 301 /a /first\n").unwrap();
    let cfg = config_in(
        &dir,
        &format!(
            "[server]\nreload_fork_rules = 2\n[rules]\nfiles = [{:?}]\n",
            rules.to_str().unwrap()
        ),
    );
    let srv = Server::start_in(dir, &["--config", &cfg, "--processes", "2"]);
    let first = srv.children();
    assert_eq!(first.len(), 2, "{first:?}");
    // The same rules: nothing compiled, the processes stay.
    srv.reload();
    // One rule compiled, fewer than 2: each process compiles it.
    std::fs::write(&rules, "Redirect 301 /a /second\n").unwrap();
    srv.reload();
    assert!(locations(&srv).iter().all(|l| l == "/second"));
    assert_eq!(srv.children(), first, "no reload so far forked");
    assert!(!srv.stderr().contains("new serving processes forked"));

    // A download in flight, then two rules: the reload forks.
    let mut dl = srv.connect();
    dl.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let head = String::from_utf8(read_head(&mut dl)).unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut got = vec![0u8; 1 << 20];
    dl.read_exact(&mut got).unwrap();
    std::fs::write(&rules, "Redirect 301 /a /third\nRedirect 301 /b /fourth\n").unwrap();
    srv.signal(libc::SIGHUP);
    wait_for_stderr(&srv, "new serving processes forked");
    let now = srv.children();
    let fresh: Vec<u32> = now.iter().copied().filter(|p| !first.contains(p)).collect();
    assert_eq!(fresh.len(), 2, "two new processes: {first:?} then {now:?}");
    assert!(locations(&srv).iter().all(|l| l == "/third"));
    // The old process sending the download is still there, counted on the
    // status page beside the new ones.
    let old: Vec<u32> = now.iter().copied().filter(|p| first.contains(p)).collect();
    assert!(
        !old.is_empty(),
        "the download's process quit early: {now:?}"
    );
    assert!(srv.status_json()["processes"].as_u64().unwrap() >= 3);
    // Another such reload while the old ones finish: their slots are taken, so
    // each new process compiles the rules itself.
    std::fs::write(
        &rules,
        "Redirect 301 /a /fifth\nRedirect 301 /b /fourth\nRedirect 301 /c /sixth\n",
    )
    .unwrap();
    srv.signal(libc::SIGHUP);
    wait_for_stderr(
        &srv,
        "each serving process compiles the rules itself instead",
    );
    wait_until(
        || locations(&srv).iter().all(|l| l == "/fifth"),
        || format!("{:?}", locations(&srv)),
    );
    assert!(srv
        .children()
        .iter()
        .all(|p| fresh.contains(p) || old.contains(p)));

    // The rest of the download, whole, then the old processes are gone.
    let mut rest = Vec::new();
    dl.read_to_end(&mut rest).unwrap_or(0);
    got.extend_from_slice(&rest);
    assert_eq!(got.len(), big.len(), "the download was cut");
    assert!(got == big, "the download's bytes differ");
    wait_until(
        || srv.children() == fresh,
        || format!("old processes left: {:?} (new {fresh:?})", srv.children()),
    );
    wait_for_stderr(&srv, "a serving process a reload replaced has finished");
    assert_eq!(srv.status_json()["processes"], 2);
    assert_eq!(srv.stop(), Some(0));
}

/// A serving process forked after a log rotation (here, the replacement of one
/// killed) writes to the file now at the log's path, not to the one rotated away:
/// the master reopens its own copy on SIGUSR1 too.
#[test]
fn a_process_forked_after_a_log_rotation_logs_to_the_new_file() {
    let log = log_path("processes-rotate");
    let srv = Server::start(&["--processes", "2", "--access-log", log.to_str().unwrap()]);
    assert_eq!(
        srv.get("GET /hello.txt?before HTTP/1.0\r\n\r\n").status,
        200
    );
    wait_for_lines(&log, 1, Duration::from_secs(5), |l| l.contains("?before"));
    let rotated = log.with_extension("log.1");
    std::fs::rename(&*log, &rotated).unwrap();
    let reopened = srv.stderr().matches("access log reopened").count();
    srv.signal(libc::SIGUSR1);
    wait_until(
        || srv.stderr().matches("access log reopened").count() >= reopened + 2,
        || srv.stderr(),
    );
    let first = srv.children();
    // SAFETY: a process of the server this test started.
    unsafe { libc::kill(first[0] as i32, libc::SIGKILL) };
    wait_until(
        || {
            let now = srv.children();
            now.len() == 2 && !now.contains(&first[0])
        },
        || format!("not replaced: {:?}", srv.children()),
    );
    // Fresh connections, spread over both processes: every line in the new file.
    for i in 0..40 {
        let r = srv.get(&format!("GET /hello.txt?after={i} HTTP/1.0\r\n\r\n"));
        assert_eq!(r.status, 200);
    }
    wait_for_lines(&log, 40, Duration::from_secs(5), |l| l.contains("?after="));
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert!(
        !old.contains("?after="),
        "lines went to the rotated file:\n{old}"
    );
    assert_eq!(srv.stop(), Some(0));
}

/// More processes than workers is refused at start with a clear message.
#[test]
fn more_processes_than_workers_is_refused() {
    let out = std::process::Command::new(bin())
        .args(["serve", ".", "--listen", "127.0.0.1:1", "--workers", "2"])
        .args(["--processes", "3", "--allow-root"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("server.processes: 3 processes for 2 workers"),
        "{err}"
    );
}

/// A rate condition counts a client's requests whichever process answers them:
/// `rate=5/10s` lets exactly five of twenty fresh connections (spread over both
/// processes) through, not five per process.
#[test]
fn a_rate_limit_holds_across_processes() {
    let dir = docroot();
    std::fs::write(dir.path().join("api"), b"api answer\n").unwrap();
    std::fs::write(
        dir.path().join(".limit.rules"),
        "prefix /api limit rate=5/10s\n",
    )
    .unwrap();
    let cfg = config_in(&dir, "[rules]\nfiles = [\".limit.rules\"]\n");
    let srv = Server::start_in(dir, &["--config", &cfg, "--processes", "2"]);
    let codes: Vec<u16> = (0..20)
        .map(|_| srv.get("GET /api HTTP/1.0\r\n\r\n").status)
        .collect();
    let passed = codes.iter().filter(|&&c| c == 200).count();
    assert_eq!(passed, 5, "{codes:?}");
    assert!(codes[5..].iter().all(|&c| c == 429), "{codes:?}");
}

/// The incomplete-connection budget is each process's own (a fraction of its own
/// descriptors, shared by its workers): 300 half-sent heads fit two processes of
/// 205 connections each without one being evicted.
#[test]
fn half_heads_count_against_their_own_processes_budget() {
    let dir = docroot();
    let cfg = config_in(&dir, CAPS_OFF);
    let srv = Server::start_with_nofile(dir, 400, &["--config", &cfg, "--processes", "2"]);
    let held: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut s = srv.connect();
            std::io::Write::write_all(&mut s, b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let j = srv.status_json();
    assert_eq!(
        j["closes_by_reason"]["evicted_incomplete"], 0,
        "{}",
        j["closes_by_reason"]
    );
    assert!(
        j["open_connections"].as_u64().unwrap() >= 300,
        "{}",
        j["open_connections"]
    );
    drop(held);
}

/// A master killed outright (SIGKILL: no chance to pass anything on) does not leave
/// serving processes behind: each gets SIGTERM from the kernel (`PR_SET_PDEATHSIG`)
/// and drains.
#[test]
fn serving_processes_stop_when_the_master_is_killed() {
    let srv = Server::start(&["--processes", "2"]);
    let kids = srv.children();
    assert_eq!(kids.len(), 2, "{kids:?}");
    srv.signal(libc::SIGKILL);
    let t = Instant::now();
    for pid in kids {
        while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        }) {
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "serving process {pid} outlived its master"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
