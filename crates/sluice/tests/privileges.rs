//! Dropping root (issue 14): bind as root, serve as the named user, every thread.

use sluice_testkit::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

/// Run a server that is expected to refuse to start; never wait more than 20 s.
fn bounded(cmd: &mut Command) -> std::process::Output {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let t = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the server started when it should have refused to");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Start `serve` on a config of `[server]`, a listen line and `lines` (so the first
/// of them is line 3); it must refuse to start. Its stderr.
fn refused_config(lines: &str) -> String {
    let d = docroot();
    let cfg = d.path().join("bad.toml");
    std::fs::write(&cfg, format!("[server]\nlisten = \"127.0.0.1:1\"\n{lines}")).unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--config", cfg.to_str().unwrap()])
        .stdout(Stdio::null());
    let out = bounded(&mut cmd);
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

fn nobody() -> (u32, u32) {
    let out = Command::new("id").args(["-u", "nobody"]).output().unwrap();
    let uid = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let out = Command::new("id").args(["-g", "nobody"]).output().unwrap();
    let gid = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    (uid, gid)
}

/// A docroot the unprivileged user can read, plus one file only root can.
fn shared_root() -> tempfile::TempDir {
    let d = docroot();
    std::fs::set_permissions(d.path(), PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(d.path().join("root-only.txt"), b"secret").unwrap();
    std::fs::set_permissions(
        d.path().join("root-only.txt"),
        PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    // A directory others may read but not search: its names, but not what they are.
    let unsearchable = d.path().join("unsearchable");
    std::fs::create_dir(&unsearchable).unwrap();
    std::fs::write(unsearchable.join("inside.txt"), b"x").unwrap();
    std::fs::set_permissions(&unsearchable, PermissionsExt::from_mode(0o744)).unwrap();
    d
}

/// `Uid:` and `Gid:` lines (real, effective, saved, fs) of every thread.
fn thread_ids(pid: u32) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
        let field = |k: &str| {
            status
                .lines()
                .find(|l| l.starts_with(k))
                .map(|l| {
                    l[k.len()..]
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap()
        };
        out.push((field("Uid:"), field("Gid:")));
    }
    out
}

/// Every thread of every process in `pids`; `threads` at least, in all.
fn assert_all_threads_are(pids: &[u32], uid: u32, gid: u32, threads: usize) {
    let ids: Vec<_> = pids.iter().flat_map(|p| thread_ids(*p)).collect();
    assert!(
        ids.len() >= threads,
        "main, log and worker threads: {ids:?}"
    );
    for (u, g) in &ids {
        assert_eq!(u, &format!("{uid} {uid} {uid} {uid}"), "{ids:?}");
        assert_eq!(g, &format!("{gid} {gid} {gid} {gid}"), "{ids:?}");
    }
}

#[test]
fn user_flag_drops_every_thread_and_root_only_files_are_refused() {
    if euid() != 0 {
        // Not root: switching users is impossible, and must be said, not ignored.
        let mut cmd = Command::new(bin());
        cmd.args(["serve", ".", "--listen", "127.0.0.1:1", "--user", "root"]);
        let out = bounded(&mut cmd);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("not started as root"));
        return;
    }
    let (uid, gid) = nobody();
    let log = log_path("privileges");
    let srv = Server::start_in(
        shared_root(),
        &["--user", "nobody", "--access-log", log.to_str().unwrap()],
    );
    // The master (with two workers, two serving processes by default) and in the
    // serving processes main, the log writer and two workers.
    let mut pids = srv.serving_pids();
    pids.push(srv.pid());
    assert_all_threads_are(&pids, uid, gid, 4);
    assert_eq!(
        srv.get("GET /hello.txt HTTP/1.0\r\n\r\n").text(),
        "hello world\n"
    );
    assert_eq!(srv.get("GET /root-only.txt HTTP/1.0\r\n\r\n").status, 403);
    // Listed as nginx and Apache do it: 403, not an empty page.
    assert_eq!(srv.get("GET /unsearchable/ HTTP/1.0\r\n\r\n").status, 403);
    // The log, opened as root before the switch, is still written.
    let text = wait_for_lines(&log, 2, std::time::Duration::from_secs(5), |_| true);
    assert!(
        text.contains("\"GET /root-only.txt HTTP/1.0\" 403"),
        "{text}"
    );
    // The status page counts the descriptors of every serving process, not only
    // those of the one answering: after the switch another process's `/proc/PID/fd`
    // cannot be listed (it is not dumpable), so they were counted as none.
    let held: Vec<_> = (0..200)
        .map(|_| {
            let mut s = srv.connect();
            s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    for s in &held {
        let mut got = [0u8; 512];
        assert!(std::io::Read::read(&mut &*s, &mut got).unwrap() > 0);
    }
    let st = srv.status_json();
    let (fds, open) = (
        st["open_fds"].as_u64().unwrap(),
        st["open_connections"].as_u64().unwrap(),
    );
    assert!(
        open >= 200 && fds >= open,
        "open_fds {fds}, open_connections {open}"
    );
    drop(held);
    let _ = std::fs::remove_file(&log);
}

#[test]
fn root_without_a_user_serves_as_nobody_and_root_user_needs_allow_root() {
    if euid() != 0 {
        return user_flag_drops_every_thread_and_root_only_files_are_refused();
    }
    let (uid, gid) = nobody();
    let d = shared_root();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(bin())
        .arg("serve")
        .arg(d.path())
        .args(["--listen", &format!("127.0.0.1:{port}"), "--workers", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("serving"), "{line:?}");
    assert_all_threads_are(&[child.id()], uid, gid, 2);
    let _ = child.kill();
    let _ = child.wait();

    // Naming root is refused unless allowed in so many words.
    let mut out = Command::new(bin());
    out.arg("serve")
        .arg(d.path())
        .args(["--listen", "127.0.0.1:1", "--user", "root"])
        .stdout(Stdio::null());
    let out = bounded(&mut out);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("allow_root"));
    // A tree the user cannot read is a start-up error, not a server answering 403.
    let private = docroot();
    std::fs::set_permissions(private.path(), PermissionsExt::from_mode(0o700)).unwrap();
    let mut out = Command::new(bin());
    out.arg("serve")
        .arg(private.path())
        .args(["--listen", "127.0.0.1:1", "--user", "nobody"])
        .stdout(Stdio::null());
    let out = bounded(&mut out);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("as user nobody"), "{err}");
}

/// The nice value of every thread of `pids` (field 19 of `/proc/PID/task/TID/stat`)
/// but the listing threads, which run ten steps lower than the process
/// (`files.listing_threads`): asserted to, and left out.
fn thread_nice(pids: &[u32]) -> Vec<i32> {
    let mut v = Vec::new();
    let mut lists = Vec::new();
    for pid in pids {
        for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let stat = std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap();
            // Fields after the command name (which may hold spaces) start at field 3.
            let close = stat.rfind(')').unwrap();
            let nice: i32 = stat[close + 2..]
                .split_whitespace()
                .nth(16)
                .unwrap()
                .parse()
                .unwrap();
            match stat[..close].contains("(sluice-list") {
                true => lists.push(nice),
                false => v.push(nice),
            }
        }
    }
    assert!(
        lists
            .iter()
            .all(|&l| v.iter().all(|&n| l == (n + 10).min(19))),
        "listing threads {lists:?}, the others {v:?}"
    );
    v
}

#[test]
fn server_priority_reaches_every_thread_of_every_serving_process() {
    // Lowering the priority needs no privilege; raising it needs root.
    let (prio, user): (i32, &[&str]) = if euid() == 0 {
        (-4, &["--user", "nobody"])
    } else {
        (6, &[])
    };
    let srv = Server::start_with_config(
        shared_root(),
        &format!("[server]\npriority = {prio}\n"),
        user,
    );
    let mut pids = srv.serving_pids();
    pids.push(srv.pid());
    let nice = thread_nice(&pids);
    // Two serving processes (main thread, log writer, worker, disk threads) and the master.
    assert!(nice.len() >= 6, "{nice:?}");
    assert!(nice.iter().all(|&n| n == prio), "{nice:?}");
    assert_eq!(
        srv.get("GET /hello.txt HTTP/1.0\r\n\r\n").text(),
        "hello world\n"
    );

    // Out of range: a config error with its line, before anything starts.
    let err = refused_config("priority = 20\n");
    assert!(
        err.contains("bad.toml:3") && err.contains("out of range"),
        "{err}"
    );
    if euid() != 0 {
        // Not root: a raised priority is refused at start, and says why.
        assert!(refused_config("priority = -1\n").contains("CAP_SYS_NICE"));
    }
}

/// Each thread's scheduler slice (ns), from its `sched` file.
fn thread_slices(pids: &[u32]) -> Vec<u64> {
    let mut v = Vec::new();
    for pid in pids {
        for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let sched = std::fs::read_to_string(t.unwrap().path().join("sched")).unwrap();
            let line = sched.lines().find(|l| l.starts_with("se.slice")).unwrap();
            v.push(line.rsplit(':').next().unwrap().trim().parse().unwrap());
        }
    }
    v
}

#[test]
fn sched_slice_reaches_every_thread_of_every_serving_process() {
    // Needs Linux 6.12's EEVDF (se.slice in the sched file); this machine's kernel has it.
    let before = thread_slices(&[std::process::id()]);
    let srv = Server::start_with_config(shared_root(), "[server]\nsched_slice = \"0.3ms\"\n", &[]);
    let mut pids = srv.serving_pids();
    pids.push(srv.pid());
    let slices = thread_slices(&pids);
    assert!(slices.len() >= 6, "{slices:?}");
    assert!(
        slices.iter().all(|&s| s == 300_000),
        "{slices:?} (test's own: {before:?})"
    );
    assert_ne!(before[0], 300_000);
    assert_eq!(
        srv.get("GET /hello.txt HTTP/1.0\r\n\r\n").text(),
        "hello world\n"
    );
    // The slice travels with the nice value: setting one must not reset the other.
    let both = Server::start_with_config(
        shared_root(),
        "[server]\nsched_slice = \"0.5ms\"\npriority = 3\n",
        &[],
    );
    let mut pids = both.serving_pids();
    pids.push(both.pid());
    assert!(thread_slices(&pids).iter().all(|&s| s == 500_000));
    assert!(
        thread_nice(&pids).iter().all(|&n| n == 3),
        "{:?}",
        thread_nice(&pids)
    );

    // Out of the kernel's range: a config error with its line, before anything starts.
    let err = refused_config("sched_slice = \"0.05ms\"\n");
    assert!(
        err.contains("bad.toml:3") && err.contains("out of range"),
        "{err}"
    );
}
