//! A new binary without dropping a download (`kill -USR2` to the master, as nginx's
//! binary upgrade): the running server starts the program file it was started from,
//! handing it its listening sockets; once the new server reports that every worker
//! serves, the old one stops taking connections and lets its responses in flight
//! finish for `server.upgrade_grace` (default an hour), then exits. A new server that
//! cannot start (a bad config, a broken build) exits, and the old one goes on
//! serving as if nothing had happened, with the reason in its log.
//!
//! Owns both ends of the hand-over and nothing else: which descriptors go across
//! (`SLUICE_LISTEN_FDS`, the listening sockets' numbers, left open across `exec`) and
//! how the new server says it is up (`SLUICE_UPGRADE_READY`, the write end of a pipe:
//! one byte `R`, or end-of-file if it dies first), and any other descriptor a
//! caller names in a variable of its own (`inherited_fd`: the conditioning front's
//! socket pair for its held connections, `front/handover.rs`). The supervisors and
//! the front decide when to start one and how to stop after it;
//! `supervisor::serve` serves on the sockets.
//!
//! No connection is refused or reset on the way: the sockets are the same kernel
//! objects in both servers, so a connection waiting in a backlog is accepted by
//! whichever server polls it next, and the old server only closes its own
//! descriptors. Cost: nothing until the signal; written by hand because it is the
//! product's own protocol between two of its processes (a few system calls).

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::Mutex;

const FDS_VAR: &str = "SLUICE_LISTEN_FDS";
const READY_VAR: &str = "SLUICE_UPGRADE_READY";
/// What a server that hands over its listeners does until its grace runs out.
pub(crate) const FINISHING: &str =
    "this one takes no more connections and finishes its responses in flight (upgrade_grace)";

/// How this process was started, read once at start-up: the program file's path
/// (read later it would name a replaced binary "(deleted)") and the arguments.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    pub exe: PathBuf,
    pub args: Vec<OsString>,
}

impl Program {
    pub fn this() -> Option<Program> {
        Some(Program {
            exe: std::env::current_exe().ok()?,
            args: std::env::args_os().skip(1).collect(),
        })
    }
}

/// The write end of the pipe to the server that started this one, until the workers
/// serve ([`announce_ready`]).
static READY: Mutex<Option<OwnedFd>> = Mutex::new(None);

/// Listening sockets handed over by the server that started this one (empty when
/// started otherwise). The variables are removed so that nothing this process
/// starts inherits them. Call before any other thread exists.
pub(crate) fn inherited() -> Result<Vec<OwnedFd>, String> {
    let fds = std::env::var(FDS_VAR).ok();
    let ready = std::env::var(READY_VAR).ok();
    std::env::remove_var(FDS_VAR);
    std::env::remove_var(READY_VAR);
    if let Some(r) = ready {
        let fd: RawFd = r
            .trim()
            .parse()
            .map_err(|_| format!("{READY_VAR}={r:?} is not a descriptor"))?;
        // SAFETY: fcntl on a number; ownership is taken only if it is open.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            return Err(format!("{READY_VAR}: descriptor {fd} is not open"));
        }
        // SAFETY: open (checked above), passed to us, and taken once.
        *READY.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    let Some(list) = fds else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for s in list.split(',').filter(|s| !s.is_empty()) {
        let fd: RawFd = s
            .trim()
            .parse()
            .map_err(|_| format!("{FDS_VAR}: {s:?} is not a descriptor"))?;
        if out.iter().any(|o: &OwnedFd| o.as_raw_fd() == fd) {
            return Err(format!("{FDS_VAR}: descriptor {fd} is named twice"));
        }
        out.push(crate::systemd::listening(fd, FDS_VAR)?);
    }
    Ok(out)
}

/// A descriptor other than a listening socket handed over by the server that
/// started this one, named in `var` (`None` when started otherwise). The variable
/// is removed, and the descriptor is closed on `exec` from here on. Call before any
/// other thread exists.
pub(crate) fn inherited_fd(var: &str) -> Result<Option<OwnedFd>, String> {
    let Some(v) = std::env::var_os(var) else {
        return Ok(None);
    };
    std::env::remove_var(var);
    let fd: RawFd = v
        .to_str()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| format!("{var}={v:?} is not a descriptor"))?;
    // SAFETY: fcntl on a number; ownership is taken only if it is open.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(format!("{var}: descriptor {fd} is not open"));
    }
    // SAFETY: open (checked above), passed to us, and taken once.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Every worker serves: tell the server that started this one (if one did), which
/// then stops taking connections.
pub(crate) fn announce_ready() {
    if let Some(fd) = READY.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let mut f = std::fs::File::from(fd);
        let _ = std::io::Write::write_all(&mut f, b"R");
    }
}

/// A new server started by [`start`], until it serves or fails.
pub(crate) struct Pending {
    child: std::process::Child,
    ready: std::fs::File,
}

/// What a pending upgrade has come to.
enum Outcome {
    Waiting,
    /// The new server (this pid) serves on the sockets.
    Serving(u32),
    Failed(String),
}

/// Start `program` on `listeners` (their descriptors stay ours too), and with
/// `extra` descriptors, each named in an environment variable of its own (the
/// conditioning front hands its held connections over through one, see
/// [`inherited_fd`]).
pub(crate) fn start(
    program: &Program,
    listeners: &[RawFd],
    extra: &[(&str, RawFd)],
) -> Result<Pending, String> {
    if listeners.is_empty() {
        return Err("no listening sockets to hand over (a backend of `--from`)".into());
    }
    let mut pipe = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills the array; both ends are owned right after.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both ends were just created and are owned once each.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
    let list: Vec<String> = listeners.iter().map(|f| f.to_string()).collect();
    let keep: Vec<RawFd> = listeners
        .iter()
        .copied()
        .chain([write_end.as_raw_fd()])
        .chain(extra.iter().map(|&(_, fd)| fd))
        .collect();
    let mut cmd = std::process::Command::new(&program.exe);
    cmd.args(&program.args)
        .env(FDS_VAR, list.join(","))
        .env(READY_VAR, write_end.as_raw_fd().to_string());
    for (var, fd) in extra {
        cmd.env(var, fd.to_string());
    }
    // SAFETY: only fcntl (async-signal-safe) between fork and exec: the descriptors
    // the new server takes stay open across exec; the child's blocked signals (the
    // master blocks the ones it handles) are unblocked so it starts as from a shell.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &keep {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.exe.display()))?;
    // Ours closes here: end-of-file then means the new server is gone.
    drop(write_end);
    Ok(Pending {
        child,
        ready: std::fs::File::from(read_end),
    })
}

impl Pending {
    /// Stop the new server before it serves (the old one is stopping): SIGTERM,
    /// then wait for it. Only while it is still our unreaped child: a master reaps
    /// any child (`processes::reap`), and a reaped pid may name another process.
    pub(crate) fn cancel(mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: a signal to our child, running and not reaped (just checked).
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
            let _ = self.child.wait();
        }
    }

    /// Look (without waiting) whether the new server serves, or has failed.
    fn poll(&mut self) -> Outcome {
        let mut b = [0u8; 1];
        match self.ready.read(&mut b) {
            Ok(1) if b[0] == b'R' => Outcome::Serving(self.child.id()),
            Ok(_) => {
                // End-of-file: it exited (or closed the pipe) before serving.
                // (A master may have reaped it already: then only that it ended.)
                let how = match self.child.wait() {
                    Ok(s) => s.to_string(),
                    Err(_) => "it exited".to_string(),
                };
                Outcome::Failed(format!(
                    "the new server (pid {}) did not start: {how}; its log says why",
                    self.child.id()
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Outcome::Waiting,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Outcome::Waiting,
            Err(e) => Outcome::Failed(format!("waiting for the new server: {e}")),
        }
    }
}

/// A supervisor's look at its pending upgrade, once a turn: `true` once the new
/// server serves (logged with `then`, what this process does now, and made the
/// service's main process for systemd: sent by the current main process, which
/// systemd accepts with its default `NotifyAccess=main`); the caller then quits. A
/// failed one is logged and forgotten, and the server goes on.
pub(crate) fn served(upgrading: &mut Option<Pending>, then: &str) -> bool {
    let Some(p) = upgrading else {
        return false;
    };
    match p.poll() {
        Outcome::Waiting => false,
        Outcome::Serving(pid) => {
            tracing::info!(pid, "upgrade: the new server serves; {then}");
            crate::systemd::notify(&format!("MAINPID={pid}"));
            true
        }
        Outcome::Failed(e) => {
            tracing::error!("upgrade: {e}; still serving");
            *upgrading = None;
            false
        }
    }
}
