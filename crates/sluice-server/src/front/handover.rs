//! `sluice condition`'s in-place upgrade (SIGUSR2, as `sluice serve`'s): a new
//! binary without refusing a connection or dropping one the front holds.
//!
//! The running front starts the program file it was started from on its two
//! listening sockets, the public port and the backends' Unix socket
//! (`upgrade::start`, the same hand-over `sluice serve` makes), plus one end of a
//! socket pair. Once the new front says it serves, the old one stops accepting,
//! closes its backend connections (`serve --from` and the C library connect to
//! the new front; what they are sending finishes, and those clients close after
//! their response, as after a restart), and hands the new front every connection
//! it still holds: idle keep-alives, heads half read, complete requests waiting
//! for a backend. Each goes as one message of the handoff protocol
//! (`sluice-cc`'s `send_handoff`: the socket by `SCM_RIGHTS`, its buffered bytes
//! as the request), the id carrying its state and its age, so its deadline stays
//! where it was. Then the old front exits, leaving the socket file to the new one.
//!
//! A new front that cannot start (a config with errors, a broken binary) exits,
//! and this one goes on as if no signal had come. Not with `pass` relays: each
//! relay's own sockets would need the same (a chain is for measuring; restart it).
//!
//! Owns both ends of the connections' hand-over. Must not: hand over a connection
//! a backend holds (its bytes are the backend's), or block the old front before
//! the new one serves. Cost: nothing until the signal, then one `sendmsg` per held
//! connection (a bounded wait each: the new front reads them as it serves).

use super::*;
use mio::unix::SourceFd;
use sluice_condition::RangeKey;
use std::os::fd::FromRawFd;

/// In a handed-over connection's id: it was kept between requests (`persist`).
const IDLE: u64 = 1 << 63;
/// The rest of the id: how long ago its phase began, in ms.
const AGE: u64 = IDLE - 1;
/// How long the old front waits for the new one to take one connection.
const SEND_WAIT: Duration = Duration::from_secs(5);

impl Front {
    /// SIGUSR2: start the new front on this one's sockets.
    pub(super) fn start_upgrade(&mut self) {
        if self.upgrading.is_some() {
            tracing::warn!("upgrade: one is already starting");
            return;
        }
        if self.predecessor.is_some() {
            tracing::warn!("upgrade: this front is still taking its predecessor's connections; send SIGUSR2 again in a moment");
            return;
        }
        if self.filters.relays > 0 {
            tracing::error!(
                "upgrade: not with pass relays in the chain (restart it instead); still serving"
            );
            return;
        }
        let Some(program) = &self.program else {
            tracing::error!("upgrade: the program file this front started from is unknown");
            return;
        };
        let mut pair = [0 as libc::c_int; 2];
        // SAFETY: socketpair fills the array; both ends are owned right after.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )
        };
        if rc != 0 {
            tracing::error!(error = %io::Error::last_os_error(), "upgrade: socketpair; still serving");
            return;
        }
        // SAFETY: both ends were just created and are owned once each.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        let listeners: Vec<_> = (self.listeners.iter().map(|l| l.as_raw_fd()))
            .chain([self.unix.as_raw_fd()])
            .collect();
        match crate::upgrade::start(program, &listeners, &[(HANDOVER_VAR, theirs.as_raw_fd())]) {
            Ok(p) => {
                tracing::info!(program = %program.exe.display(), "upgrade: starting the new front on this one's sockets");
                self.upgrading = Some(p);
                self.handover = Some(ours);
            }
            Err(e) => tracing::error!("upgrade: {e}; still serving"),
        }
    }

    /// Once a turn while an upgrade is pending: `true` once the new front serves
    /// and has this one's connections; the loop then ends.
    pub(super) fn upgrade_done(&mut self) -> bool {
        if self.upgrading.is_none() {
            return false;
        }
        let then = "this one hands it the connections it holds and exits";
        if !crate::upgrade::served(&mut self.upgrading, then) {
            if self.upgrading.is_none() {
                self.handover = None; // it failed: nothing goes across
            }
            return false;
        }
        self.hand_over();
        true
    }

    /// The old front's last act: stop accepting, let the backends go, and give
    /// every connection it holds to the new front.
    fn hand_over(&mut self) {
        let Some(out) = self.handover.take() else {
            return;
        };
        let reg = self.poll.registry();
        for l in &mut self.listeners {
            let _ = reg.deregister(l);
        }
        let _ = reg.deregister(&mut SourceFd(&self.unix.as_raw_fd()));
        for b in self.backends.drain() {
            let _ = reg.deregister(&mut SourceFd(&b.sock.as_raw_fd()));
        }
        // Blocking, each send bounded: the new front takes them between its events.
        let sock = socket2::SockRef::from(&out);
        let _ = sock.set_nonblocking(false);
        let _ = sock.set_write_timeout(Some(SEND_WAIT));
        let (mut moved, mut lost) = (0u64, 0u64);
        // Once the new front has let one wait out `SEND_WAIT` (it is stuck), the
        // rest are closed rather than waited for one by one.
        let mut stuck = false;
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            let c = &self.conns[key];
            if stuck && !matches!(c.st, St::Backend(_)) {
                lost += 1;
            } else if !matches!(c.st, St::Backend(_)) {
                // (A backend's connection stays with the backend: our copy closes.)
                let mut bytes = c.ready.clone();
                bytes.extend_from_slice(&c.rbuf);
                let age = self.now.saturating_sub(c.since).min(AGE);
                let id = age | if c.st == St::Idle { IDLE } else { 0 };
                match proto::send_handoff(out.as_raw_fd(), c.sock.as_raw_fd(), id, c.peer, &bytes) {
                    Ok(()) => moved += 1,
                    Err(e) => {
                        if lost == 0 {
                            tracing::warn!(error = %e, "upgrade: a connection could not be handed over; closing it");
                        }
                        stuck = matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        );
                        lost += 1;
                    }
                }
            }
            self.close(key, CloseReason::Done);
        }
        tracing::info!(
            moved,
            lost,
            "upgrade: the connections held here are the new front's; exiting"
        );
    }

    /// The new front: take the connections the old one handed over, each in the
    /// state it was in, as if it had been accepted here.
    pub(super) fn adopt_handed(&mut self) {
        let Some(fd) = &self.predecessor else {
            return;
        };
        let fd = fd.as_raw_fd();
        let mut buf = Vec::new();
        loop {
            match proto::recv_handoff(fd, &mut buf) {
                Ok(Some(h)) => self.adopt(h),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    // Its descriptor (if any) is closed already; the next may be fine.
                    tracing::warn!(error = %e, "upgrade: a bad message from the old front");
                }
                Ok(None) | Err(_) => {
                    tracing::info!(
                        adopted = self.adopted,
                        "upgrade: took the old front's connections"
                    );
                    let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
                    self.predecessor = None;
                    return;
                }
            }
        }
    }

    fn adopt(&mut self, h: proto::Handoff) {
        let std_sock = std::net::TcpStream::from(h.fd);
        if std_sock.set_nonblocking(true).is_err() {
            return;
        }
        let sock = TcpStream::from_std(std_sock);
        let peer = h.peer;
        let exempt = self.set.cap_exempt.iter().any(|c| c.contains(peer.ip()));
        let capped = self.filters.slowread && !exempt;
        if capped {
            // Admitted by the old front under the same caps: counted, never refused.
            let _ = self.caps.acquire(&RangeKey::of(peer.ip()));
        }
        let st = match h.id & IDLE {
            0 => St::Reading,
            _ => St::Idle,
        };
        let since = self.now - (h.id & AGE).min(CLOCK_BASE);
        if self.admit(sock, peer, st, since, h.request, capped) {
            self.adopted += 1;
        }
    }

    /// A new front's inherited listening sockets: the public TCP port's and the
    /// backends' Unix socket, told apart by their address family.
    pub(super) fn listeners_of(fds: Vec<OwnedFd>) -> Result<(Vec<TcpListener>, OwnedFd), String> {
        let (mut tcp, mut unix) = (Vec::new(), None);
        for fd in fds {
            let family = socket2::SockRef::from(&fd)
                .local_addr()
                .map_err(|e| format!("an inherited socket: {e}"))?
                .family();
            if family == libc::AF_UNIX as libc::sa_family_t {
                unix = Some(fd);
            } else {
                let l = std::net::TcpListener::from(fd);
                l.set_nonblocking(true).map_err(|e| e.to_string())?;
                tcp.push(TcpListener::from_std(l));
            }
        }
        match (tcp, unix) {
            (t, Some(u)) if !t.is_empty() => Ok((t, u)),
            _ => Err("an upgrade handed over no TCP listener or no Unix socket".into()),
        }
    }
}
