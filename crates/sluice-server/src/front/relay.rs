//! `sluice condition --relay`: a pass-through process of a chain of filters.

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use sluicecc::proto;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

/// `sluice condition --relay`: one pass-through process of a chain. It asks the
/// stage before it for a connection whenever the stage after it asks, hands each
/// one on unchanged, and passes KEEP and CLOSE back; it holds no connection
/// itself. Exits when the stage before it goes away. `user`: started as root, the
/// user to serve as once its socket is bound (given to that user, so the next stage,
/// serving as that user too, may connect); the front passes its own.
pub fn relay(from: &Path, to: &Path, user: Option<&str>) -> Result<(), String> {
    // A relay has no settings and no log file. A SIGHUP, SIGUSR1 or SIGUSR2 meant for
    // the front (sent to the process group, or by name) must not end it, as their
    // default action would, and with it every request passing through.
    for sig in [libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2] {
        // SAFETY: setting a signal's disposition to "ignore" in this process.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    // The stage before may still be starting (the front starts its relays first):
    // try for a few seconds.
    let mut tries = 0;
    let up = loop {
        match proto::connect_nonblocking(from) {
            Ok(fd) => break fd,
            Err(_) if tries < 500 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let down_l = proto::listen(to).map_err(|e| e.to_string())?;
    if let Some(u) = user {
        let acct = crate::privileges::lookup(u)?;
        crate::privileges::give_socket_and_switch(to, &acct)?;
    }
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    poll.registry()
        .register(&mut SourceFd(&up.as_raw_fd()), Token(0), Interest::READABLE)
        .map_err(|e| e.to_string())?;
    poll.registry()
        .register(
            &mut SourceFd(&down_l.as_raw_fd()),
            Token(1),
            Interest::READABLE,
        )
        .map_err(|e| e.to_string())?;
    let mut downs: Slab<OwnedFd> = Slab::new();
    // Who asked, in order: the next handoff from upstream goes to the first.
    let mut askers: VecDeque<usize> = VecDeque::new();
    let mut owner: HashMap<u64, usize> = HashMap::new();
    let mut events = Events::with_capacity(256);
    let mut buf = Vec::new();
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.to_string());
        }
        for ev in events.iter() {
            match ev.token() {
                Token(0) => loop {
                    match proto::recv_handoff(up.as_raw_fd(), &mut buf) {
                        Ok(Some(h)) => {
                            // Hand it to the first downstream process still there.
                            let mut sent = false;
                            while let Some(d) = askers.pop_front() {
                                if let Some(dfd) = downs.get(d) {
                                    if proto::send_handoff(
                                        dfd.as_raw_fd(),
                                        h.fd.as_raw_fd(),
                                        h.id,
                                        h.peer,
                                        &h.request,
                                    )
                                    .is_ok()
                                    {
                                        owner.insert(h.id, d);
                                        sent = true;
                                        break;
                                    }
                                }
                            }
                            if !sent {
                                let _ = proto::send_ctl(up.as_raw_fd(), proto::CLOSE, h.id);
                            }
                        }
                        Ok(None) => return Ok(()),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e.to_string()),
                    }
                },
                Token(1) => {
                    while let Ok(fd) = proto::accept(down_l.as_raw_fd()) {
                        let e = downs.vacant_entry();
                        let k = e.key();
                        if poll
                            .registry()
                            .register(
                                &mut SourceFd(&fd.as_raw_fd()),
                                Token(2 + k),
                                Interest::READABLE,
                            )
                            .is_ok()
                        {
                            e.insert(fd);
                        }
                    }
                }
                Token(t) => {
                    let d = t - 2;
                    while let Some(dfd) = downs.get(d) {
                        match proto::recv_ctl(dfd.as_raw_fd()) {
                            Ok(Some((proto::ASK, _))) => {
                                askers.push_back(d);
                                proto::send_ctl(up.as_raw_fd(), proto::ASK, 0)
                                    .map_err(|e| e.to_string())?;
                            }
                            Ok(Some((kind, id))) => {
                                owner.remove(&id);
                                proto::send_ctl(up.as_raw_fd(), kind, id)
                                    .map_err(|e| e.to_string())?;
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                            Ok(None) | Err(_) => {
                                // Gone: what it held is closed for everyone.
                                let lost: Vec<u64> = owner
                                    .iter()
                                    .filter(|(_, &o)| o == d)
                                    .map(|(&id, _)| id)
                                    .collect();
                                for id in lost {
                                    owner.remove(&id);
                                    let _ = proto::send_ctl(up.as_raw_fd(), proto::CLOSE, id);
                                }
                                let fd = downs.remove(d);
                                let _ = poll.registry().deregister(&mut SourceFd(&fd.as_raw_fd()));
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
}
