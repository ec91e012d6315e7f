//! The backend side of the front: backends connecting on the Unix socket, their
//! ASK / KEEP / CLOSE messages, a backend that goes away (only its in-flight
//! connections are lost), a kept connection coming back to wait here, and who
//! may connect (`become_user`: the socket is given to the user the front serves as).

use super::*;
use mio::unix::SourceFd;
use mio::{Interest, Token};
use sluice_condition::CloseReason;
use sluicecc::proto;
use std::io;
use std::os::fd::AsRawFd;

impl Front {
    pub(super) fn accept_backends(&mut self) {
        loop {
            match proto::accept(self.unix.as_raw_fd()) {
                Ok(fd) => {
                    let entry = self.backends.vacant_entry();
                    let key = entry.key();
                    if self
                        .poll
                        .registry()
                        .register(
                            &mut SourceFd(&fd.as_raw_fd()),
                            Token(BACKEND_BASE + key),
                            Interest::READABLE,
                        )
                        .is_ok()
                    {
                        entry.insert(Back {
                            sock: fd,
                            credit: 0,
                        });
                        self.backend_says(key);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "backend accept failed");
                    return;
                }
            }
        }
    }

    /// Control messages from backend `b`: ASK, KEEP id, CLOSE id; EOF = it died.
    pub(super) fn backend_says(&mut self, b: usize) {
        loop {
            let Some(back) = self.backends.get(b) else {
                return;
            };
            match proto::recv_ctl(back.sock.as_raw_fd()) {
                Ok(Some((proto::ASK, _))) => self.backends[b].credit += 1,
                Ok(Some((kind, id))) => {
                    let (key, gen) = ((id & 0xffff_ffff) as usize, (id >> 32) as u32);
                    let ours = self
                        .conns
                        .get(key)
                        .is_some_and(|c| c.gen == gen && c.st == St::Backend(b));
                    if !ours {
                        continue;
                    }
                    if kind == proto::KEEP && self.filters.persist {
                        self.kept(key);
                    } else {
                        self.close(key, CloseReason::Done);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(None) | Err(_) => {
                    self.backend_gone(b);
                    return;
                }
            }
        }
    }

    /// A backend died or left: only its in-flight connections are lost.
    pub(super) fn backend_gone(&mut self, b: usize) {
        let lost: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.st == St::Backend(b))
            .map(|(k, _)| k)
            .collect();
        tracing::info!(backend = b, lost = lost.len(), "backend went away");
        for k in lost {
            self.close(k, CloseReason::ClientGone);
        }
        let back = self.backends.remove(b);
        let _ = self
            .poll
            .registry()
            .deregister(&mut SourceFd(&back.sock.as_raw_fd()));
    }

    /// A backend is done with a request and the client stays: back to waiting here.
    pub(super) fn kept(&mut self, key: usize) {
        let now = self.now;
        let c = &mut self.conns[key];
        c.st = St::Idle;
        c.since = now;
        // Bytes may have arrived (and their edge passed) while the backend held it.
        self.client(key);
    }

    /// Started as root, `user` is `server.user` (default `nobody`, as for `sluice
    /// serve`; `privileges::plan`): give the backends' socket file to that user, so
    /// backends that serve as that user can connect (a root-owned socket refused
    /// them), then become that user: no client byte is parsed as root. `None`
    /// (`allow_root = true`, or not started as root): nothing changes. (`pass`
    /// relays do the same with their own sockets: [`super::relay()`]'s `user`.)
    pub(super) fn become_user(
        &self,
        user: Option<&crate::privileges::Account>,
    ) -> Result<(), String> {
        let Some(acct) = user else {
            return Ok(());
        };
        crate::privileges::give_socket_and_switch(&self.unix_path, acct)?;
        tracing::info!(user = %acct.name, uid = acct.uid, gid = acct.gid, "conditioning as an unprivileged user; the backends' socket is the user's");
        Ok(())
    }
}
