//! systemd integration: socket activation (`LISTEN_FDS`) and readiness
//! notification (`NOTIFY_SOCKET`, for `Type=notify`).
//!
//! Owns reading the two protocols' environment variables and speaking them; the
//! server decides what to do with the sockets. Both are tiny, stable protocols
//! (sd_listen_fds(3), sd_notify(3)): written by hand on std's Unix sockets rather than
//! linking libsystemd or pulling a crate for forty lines. Outside systemd both are
//! no-ops. Unit files: `dist/systemd/`.

use std::os::fd::{FromRawFd, OwnedFd};

/// The first passed descriptor (sd_listen_fds(3)).
const LISTEN_FDS_START: i32 = 3;

/// Listening sockets passed by the service manager, if they are meant for this
/// process (`LISTEN_PID` is ours). The variables are removed so that nothing this
/// process starts inherits them. Call before any other thread exists.
pub fn listen_fds() -> Result<Vec<OwnedFd>, String> {
    let pid = std::env::var("LISTEN_PID").ok();
    let n = std::env::var("LISTEN_FDS").ok();
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    let (Some(pid), Some(n)) = (pid, n) else {
        return Ok(Vec::new());
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(Vec::new());
    }
    let n: i32 = n
        .trim()
        .parse()
        .map_err(|_| format!("LISTEN_FDS={n:?} is not a number"))?;
    (LISTEN_FDS_START..LISTEN_FDS_START + n)
        .map(|fd| listening(fd, "LISTEN_FDS"))
        .collect()
}

/// Take ownership of descriptor `fd`, passed to this process under `var`, after
/// checking that it is a listening stream socket; it is made close-on-exec (whoever
/// passed it left it open across exec). Each number must be taken once.
pub(crate) fn listening(fd: i32, var: &str) -> Result<OwnedFd, String> {
    // SAFETY: fcntl/getsockopt on a descriptor number; ownership is taken only after
    // they succeed, and the caller takes each number once.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 {
            return Err(format!("{var}: descriptor {fd} is not open"));
        }
        libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        let mut listening: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let rc = libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut listening as *mut libc::c_int).cast(),
            &mut len,
        );
        if rc != 0 || listening == 0 {
            return Err(format!(
                "{var}: descriptor {fd} is not a listening socket (use ListenStream= in the socket unit)"
            ));
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Send one sd_notify(3) message (`READY=1`, `RELOADING=1`, `STOPPING=1`,
/// `STATUS=...`) if the service manager asked for them. Errors are ignored: the
/// server works the same whether or not anyone listens.
pub fn notify(msg: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        // An abstract socket (systemd's default).
        use std::os::linux::net::SocketAddrExt;
        if let Ok(addr) = std::os::unix::net::SocketAddr::from_abstract_name(name) {
            let _ = sock.send_to_addr(msg.as_bytes(), &addr);
        }
    } else {
        let _ = sock.send_to(msg.as_bytes(), path);
    }
}

/// `RELOADING=1` needs the time of the reload (`Type=notify-reload`, systemd ≥ 253).
pub fn reloading() {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the stack struct.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let usec = ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
}
