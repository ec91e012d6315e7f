//! `sluice reload`: a reload that returns when the server has made it, with its
//! outcome (for systemd's `ExecReload=` before version 253, which has no
//! `Type=notify-reload`, and for an operator's script that goes on to use the new
//! configuration).
//!
//! The command binds a Unix datagram socket in the abstract namespace named after
//! the server's pid (`sluice-reloaded-PID`: no file, so nothing to clean up and no
//! directory permissions between a root command and a server that serves as
//! `nobody`), notes the monotonic clock, and sends the server SIGHUP. A server
//! sends one datagram to that name after every reload, if anyone is bound there
//! (else the send fails and nothing waits): when the new configuration serves in
//! every serving process (a master, once they all said so; the moment it tells
//! systemd `READY=1`), or why not. The datagram carries the monotonic time at
//! which the reload began, so an answer for a reload that began before the
//! command's signal (a SIGHUP from elsewhere, just before) is passed over and the
//! next is awaited. The command takes an answer only from the pid it signalled,
//! checked by the kernel (`SCM_CREDENTIALS`), so another local process cannot
//! answer for the server.
//!
//! Owns both ends and nothing else. Cost: one failed `sendto` per reload when
//! nothing waits. Written by hand: the product's own two-line protocol between
//! two of its processes; the credentials are read with rustix's `recvmsg` (std
//! cannot read them yet).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

fn name(pid: u32) -> String {
    format!("sluice-reloaded-{pid}")
}

/// Now on the monotonic clock, in ns (the same clock in every process).
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A reload about to read the configuration: when it began, for [`Began::tell`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Began(u64);

impl Began {
    pub fn now() -> Began {
        Began(mono_ns())
    }

    /// Tell a waiting `sluice reload` (if any) how this reload ended. Never
    /// blocks; nothing happens if no one waits.
    pub fn tell(self, outcome: &Result<(), String>) {
        let Ok(addr) = SocketAddr::from_abstract_name(name(std::process::id())) else {
            return;
        };
        let Ok(sock) = UnixDatagram::unbound() else {
            return;
        };
        let _ = sock.set_nonblocking(true);
        let msg = match outcome {
            Ok(()) => format!("{} ok", self.0),
            Err(e) => format!("{} error {e}", self.0),
        };
        let _ = sock.send_to_addr(msg.as_bytes(), &addr);
    }
}

/// Send SIGHUP to `pid` and wait up to `within` for its answer: `Ok` once the
/// new configuration serves, `Err` with the server's reason, or with why there
/// was no answer.
pub fn ask(pid: u32, within: Duration) -> Result<(), String> {
    // A wrong pid must not signal another program (SIGHUP ends most).
    let comm = |p: &str| {
        std::fs::read_to_string(format!("/proc/{p}/comm")).map(|c| c.trim_end().to_string())
    };
    let theirs = comm(&pid.to_string()).map_err(|e| format!("pid {pid}: {e}"))?;
    let ours = comm("self").unwrap_or_default();
    if !theirs.starts_with("sluice") && theirs != ours {
        return Err(format!(
            "pid {pid} is {theirs:?}, not a sluice server; nothing was sent"
        ));
    }
    let addr = SocketAddr::from_abstract_name(name(pid)).map_err(|e| e.to_string())?;
    let sock = UnixDatagram::bind_addr(&addr).map_err(|e| match e.kind() {
        io::ErrorKind::AddrInUse => format!("another `sluice reload` is waiting for pid {pid}"),
        _ => format!("cannot wait for an answer: {e}"),
    })?;
    rustix::net::sockopt::set_socket_passcred(&sock, true)
        .map_err(|e| format!("SO_PASSCRED: {e}"))?;
    let sent_at = mono_ns();
    // SAFETY: a signal to the process the operator named.
    if unsafe { libc::kill(pid as libc::pid_t, libc::SIGHUP) } != 0 {
        return Err(format!("pid {pid}: {}", io::Error::last_os_error()));
    }
    let until = Instant::now() + within;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no answer from pid {pid} within {within:?} (not a sluice server of this version, or a serving process is stuck: see its log)"
            ));
        }
        sock.set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let (text, from) = match recv_with_pid(&sock) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("waiting for the answer: {e}")),
        };
        if from != pid as libc::pid_t {
            continue; // not the server's
        }
        let mut parts = text.splitn(3, ' ');
        let began: u64 = parts.next().and_then(|t| t.parse().ok()).unwrap_or(0);
        if began < sent_at {
            continue; // a reload that read its configuration before our signal
        }
        return match (parts.next(), parts.next()) {
            (Some("ok"), _) => Ok(()),
            (Some("error"), why) => Err(why.unwrap_or("the reload failed").to_string()),
            _ => Err(format!("a bad answer from pid {pid}: {text:?}")),
        };
    }
}

/// One datagram and its sender's pid, as the kernel vouches for it (0 if the
/// datagram came without credentials).
fn recv_with_pid(sock: &UnixDatagram) -> io::Result<(String, libc::pid_t)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut buf = [0u8; 4096];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = rustix::net::recvmsg(
        sock,
        &mut [io::IoSliceMut::new(&mut buf)],
        &mut control,
        RecvFlags::empty(),
    )?;
    let mut pid = 0;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmCredentials(cred) = m {
            pid = cred.pid.as_raw_nonzero().get();
        }
    }
    let text = String::from_utf8_lossy(&buf[..msg.bytes.min(buf.len())]).into_owned();
    Ok((text, pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer's format, end to end within one process: `ask` signals itself
    /// (SIGHUP ignored here) and takes only an answer that began after that.
    #[test]
    fn an_answer_for_an_earlier_reload_is_passed_over() {
        // SAFETY: ignoring SIGHUP in this test process.
        unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
        let earlier = Began::now();
        let waiter = std::thread::spawn(|| ask(std::process::id(), Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(200));
        earlier.tell(&Ok(()));
        std::thread::sleep(Duration::from_millis(100));
        Began::now().tell(&Err("sluice.toml:3: bad".into()));
        assert_eq!(waiter.join().unwrap(), Err("sluice.toml:3: bad".into()));
    }
}
