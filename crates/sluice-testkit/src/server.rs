//! Start the real `sluice` binary on a free loopback port with a temporary document
//! root, wait for its "serving" line, and stop it with SIGTERM. Every server (and
//! every [`KillOnDrop`] child) is killed and reaped when its guard drops, also when
//! the test panics.
//!
//! The binary is the one cargo built for this test run (see [`bin`]).

use crate::client::{read_response, Client, Resp};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub addr: String,
    pub dir: tempfile::TempDir,
    pub stderr_path: PathBuf,
}

/// The `sluice` binary under test: `$SLUICE_BIN` if set, else the one cargo built
/// beside this test executable (`target/<profile>/sluice`; cargo builds a package's
/// binaries before its integration tests).
pub fn bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("SLUICE_BIN") {
            return p;
        }
        let exe = std::env::current_exe().expect("the test executable's path");
        // target/<profile>/deps/<test>-<hash> -> target/<profile>/sluice
        let profile = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let p = profile.join("sluice");
        assert!(
            p.exists(),
            "no sluice binary at {}; set SLUICE_BIN",
            p.display()
        );
        p.to_string_lossy().into_owned()
    })
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A temporary document root with a few known files.
pub fn docroot() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::write(p.join("hello.txt"), b"hello world\n").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(p.join("big.bin"), &big).unwrap();
    std::fs::create_dir(p.join("sub")).unwrap();
    std::fs::write(p.join("sub/index.html"), b"<h1>sub</h1>\n").unwrap();
    std::fs::create_dir(p.join("list")).unwrap();
    std::fs::write(p.join("list/a.txt"), b"a").unwrap();
    std::fs::write(p.join("list/b b.txt"), b"bb").unwrap();
    std::fs::write(p.join(".secret"), b"no").unwrap();
    d
}

pub fn big_bytes() -> Vec<u8> {
    (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect()
}

impl Server {
    /// Start `sluice serve ROOT --listen ... extra...`.
    pub fn start(extra: &[&str]) -> Server {
        Self::start_in(docroot(), extra)
    }

    pub fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Server {
        Self::start_in_env(dir, &[], extra)
    }

    /// Start with extra environment variables (test hooks, log filters).
    pub fn start_in_env(dir: tempfile::TempDir, env: &[(&str, &str)], extra: &[&str]) -> Server {
        Self::launch(dir, env, None, extra)
    }

    /// Start with the server's descriptor limit (soft and hard) set to `nofile`, as
    /// an operator's `LimitNOFILE=` would.
    pub fn start_with_nofile(dir: tempfile::TempDir, nofile: u64, extra: &[&str]) -> Server {
        Self::launch(dir, &[], Some(nofile), extra)
    }

    fn launch(
        dir: tempfile::TempDir,
        env: &[(&str, &str)],
        nofile: Option<u64>,
        extra: &[&str],
    ) -> Server {
        // A free port found by binding :0 can be taken by another test before the
        // server binds it: retry with a new port when that is why start-up failed.
        let mut dir = Some(dir);
        for attempt in 0.. {
            match Self::try_start(dir.take().unwrap(), env, nofile, extra) {
                Ok(s) => return s,
                Err((d, why)) if attempt < 5 && why.contains("cannot listen") => dir = Some(d),
                Err((_, why)) => panic!("server did not start: {why}"),
            }
        }
        unreachable!()
    }

    fn try_start(
        dir: tempfile::TempDir,
        env: &[(&str, &str)],
        nofile: Option<u64>,
        extra: &[&str],
    ) -> Result<Server, (tempfile::TempDir, String)> {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let stderr_path = dir
            .path()
            .parent()
            .unwrap()
            .join(format!("sluice-stderr-{port}.log"));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut cmd = Command::new(bin());
        // Two workers unless the test asks for another number.
        let workers: &[&str] = if extra.contains(&"--workers") {
            &[]
        } else {
            &["--workers", "2"]
        };
        cmd.arg("serve")
            .arg(dir.path())
            .args(["--listen", &addr])
            .args(workers)
            // The suite may run as root (CI does); these tests are about serving, and
            // their temporary trees are private to root. tests/operations.rs covers
            // dropping privileges. A no-op when not root.
            .arg("--allow-root")
            .args(extra)
            .envs(env.iter().copied());
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork
            // and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.stdout(Stdio::piped()).stderr(stderr).spawn().unwrap();
        let mut s = Server {
            child,
            addr,
            dir,
            stderr_path,
        };
        match s.wait_ready() {
            Ok(()) => Ok(s),
            Err(why) => {
                let _ = s.child.kill();
                let _ = s.child.wait();
                // Move the directory out; the guard's Drop only kills and cleans up.
                let dir = std::mem::replace(&mut s.dir, tempfile::tempdir().unwrap());
                Err((dir, why))
            }
        }
    }

    /// Start with a config file (TOML text) kept inside the document root under a
    /// hidden name (hidden files are not served by default).
    pub fn start_with_config(dir: tempfile::TempDir, toml: &str, extra: &[&str]) -> Server {
        let cfg = dir.path().join(".test-config.toml");
        std::fs::write(&cfg, toml).unwrap();
        let cfg = cfg.to_str().unwrap().to_string();
        let mut args = vec!["--config", cfg.as_str()];
        args.extend_from_slice(extra);
        Self::start_in(dir, &args)
    }

    /// Wait (at most 20 s, never forever) for the "serving" line on stdout.
    fn wait_ready(&mut self) -> Result<(), String> {
        let out = self.child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
        if line.contains("serving") {
            return Ok(());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Err(format!("{line:?} {}", self.stderr()))
    }

    /// The server's pid (with `server.processes > 1`, the master's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's child processes (its serving processes), by pid.
    pub fn children(&self) -> Vec<u32> {
        let pid = self.child.id();
        let mut v: Vec<u32> = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        v.sort();
        v
    }

    /// The processes that serve: the children of a master (`server.processes > 1`,
    /// the default with more than one worker), or the server itself.
    pub fn serving_pids(&self) -> Vec<u32> {
        match self.children() {
            v if v.is_empty() => vec![self.child.id()],
            v => v,
        }
    }

    /// Descriptors open in the serving processes, summed.
    pub fn open_fds(&self) -> usize {
        self.serving_pids().into_iter().map(open_fds_of).sum()
    }

    /// Names of the server's worker threads (`sluice-w0`, …) alive right now, in
    /// every serving process (worker ids are global).
    pub fn worker_threads(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for pid in self.serving_pids() {
            let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            v.extend(d.filter_map(|e| {
                let e = e.ok()?;
                let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
                let comm = comm.trim().to_string();
                comm.starts_with("sluice-w").then_some(comm)
            }));
        }
        v.sort();
        v
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn client(&self) -> Client {
        Client::new(self.connect())
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// SIGHUP, then wait until every serving process has said it reloaded. Each
    /// serving process reloads on its own and logs its own line, so with
    /// `server.processes > 1` (two workers, by default) the first line does not mean
    /// the other process serves the new configuration yet.
    pub fn reload(&self) {
        const LINE: &str = "reloaded configuration";
        let want = self.stderr().matches(LINE).count() + self.serving_pids().len();
        self.signal(libc::SIGHUP);
        let t = Instant::now();
        while self.stderr().matches(LINE).count() < want {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "not every serving process said {LINE:?}: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM and wait; returns the exit code.
    pub fn stop(mut self) -> Option<i32> {
        self.signal(libc::SIGTERM);
        match self.exited_within(Duration::from_secs(20)) {
            Some(st) => st.code(),
            None => {
                let _ = self.child.kill();
                None
            }
        }
    }

    /// Wait for the server to exit on its own (after a signal already sent): its
    /// status, or `None` if it still runs after `within`.
    pub fn exited_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            if t.elapsed() > within {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One request on a fresh connection.
    pub fn get(&self, raw: &str) -> Resp {
        let mut s = self.connect();
        s.write_all(raw.as_bytes()).unwrap();
        let head_only = raw.starts_with("HEAD ");
        read_response(&mut s, head_only).expect("no response")
    }

    /// The status page as JSON (`/server-status?format=json`, answered 200).
    pub fn status_json(&self) -> serde_json::Value {
        let r = self.get("GET /server-status?format=json HTTP/1.0\r\n\r\n");
        assert_eq!(r.status, 200, "status page: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        serde_json::from_slice(&r.body).expect("status JSON")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.stderr_path);
    }
}

/// The first line a child prints on stdout (its "serving" line), waiting for it.
pub fn first_stdout_line(child: &mut Child) -> String {
    let mut line = String::new();
    let _ = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
    line
}

/// Wait (up to 5 s) until the server's stderr contains `what`.
pub fn wait_for_stderr(srv: &Server, what: &str) {
    wait_for_text(|| srv.stderr(), what);
}

/// Wait (up to 5 s, looking every 20 ms) until `text()` (a log, read again each
/// time) contains `what`.
pub fn wait_for_text(text: impl Fn() -> String, what: &str) {
    wait_until(
        || text().contains(what),
        || format!("no {what:?} in: {}", text()),
    );
}

/// Wait (up to 5 s, looking every 20 ms) until `done()`; past that, fail with
/// `failure()`.
pub fn wait_until(done: impl FnMut() -> bool, failure: impl Fn() -> String) {
    wait_within(Duration::from_secs(5), done, failure);
}

/// Wait (up to `limit`, looking every 20 ms) until `done()`; past that, fail with
/// `failure()`. For what takes longer than [`wait_until`]'s 5 s on a busy
/// machine (a process starting, an upgrade), or must happen sooner.
pub fn wait_within(limit: Duration, mut done: impl FnMut() -> bool, failure: impl Fn() -> String) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < limit, "{}", failure());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Voluntary context switches (wake-ups: each time the thread went to sleep) of
/// every thread of `pids`, by "pid/tid name": how an idle process is seen to sleep.
pub fn wakeups(pids: &[u32]) -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            let n = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let name = format!("{pid}/{} {}", t.file_name().to_string_lossy(), comm.trim());
            m.insert(name, n);
        }
    }
    m
}

/// How many times each thread of `pids` woke during the next `window` (by
/// "pid/tid name", as [`wakeups`]): how idle processes are seen to sleep.
pub fn wakeups_during(pids: &[u32], window: Duration) -> std::collections::BTreeMap<String, u64> {
    let before = wakeups(pids);
    std::thread::sleep(window);
    let mut after = wakeups(pids);
    for (t, n) in after.iter_mut() {
        *n -= before.get(t).copied().unwrap_or(*n);
    }
    after
}

/// A fresh access-log path in the temp directory, unique to this test process,
/// removed with the files rotated from it when the test ends (kept if it
/// panicked, for the reader of the failure). Outside the test's docroot, where
/// the server would serve it.
pub fn log_path(tag: &str) -> TempLog {
    let p = std::env::temp_dir().join(format!("sluice-{tag}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&p);
    TempLog(p)
}

/// A log file's path that [`log_path`] made: a `Path` to read and name.
#[derive(Debug)]
pub struct TempLog(PathBuf);

impl std::ops::Deref for TempLog {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempLog {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempLog {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let _ = std::fs::remove_file(&self.0);
        // What a test rotated it to (`x.log.1`, `x.log.old`).
        if let (Some(dir), Some(name)) = (self.0.parent(), self.0.file_name()) {
            let name = name.to_string_lossy().into_owned();
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{name}."))
                {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

/// A child process (haproxy, an activator) killed and reaped when the guard drops,
/// also when the test panics.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process the test did not start itself (the new server an upgrade starts):
/// SIGTERM when the guard drops, also when the test panics, then SIGKILL if it is
/// still there after 15 s.
pub struct PidOnDrop(pub i32);

impl Drop for PidOnDrop {
    fn drop(&mut self) {
        // SAFETY: signals to a process the test's server started.
        unsafe { libc::kill(self.0, libc::SIGTERM) };
        let t = Instant::now();
        while running(self.0) && t.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// Whether process `pid` exists and is not a zombie (its threads are gone).
pub fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.split(") ").nth(1).unwrap_or("").starts_with('Z'))
        .unwrap_or(false)
}

/// Descriptors process `pid` has open (0 once it is gone).
pub fn open_fds_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}
