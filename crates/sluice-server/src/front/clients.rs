//! The client side of the front: accept (with the caps and eviction at the limit),
//! read until a request is complete (`package`), refuse what `sanity` rejects,
//! hand ready requests to backends in per-range round robin (`dispatch`), and the
//! 100 ms sweep that closes whatever passed its deadline.

use super::*;
use crate::io::{read_into, recycle, ReadOutcome};
use mio::net::TcpStream;
use mio::{Interest, Token};
use sluice_condition::{Class, CloseReason, RangeKey};
use sluice_http::{parse_head, BodyFraming, Parsed};
use sluicecc::proto;
use std::io;
use std::os::fd::AsRawFd;

impl Front {
    /// Accept what listening socket `which` has (until it has none, or the
    /// connection limit stops it: `accept_paused`, resumed at the next sweep).
    pub(super) fn accept(&mut self, which: usize) {
        loop {
            if self.conns.len() >= self.max_conns {
                // At the limit: the oldest idle, else incomplete, connection of the
                // heaviest range makes room; with everyone busy, the backlog waits.
                match self.cond.victim() {
                    Some((v, why)) if self.evictions < EVICTIONS_PER_SWEEP => {
                        self.evictions += 1;
                        self.close(v as usize, why)
                    }
                    _ => {
                        self.accept_paused = true;
                        return;
                    }
                }
            }
            let (sock, peer) = match self.listeners[which].accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    self.accept_paused = true;
                    return;
                }
            };
            let _ = sock.set_nodelay(true);
            let exempt = self.set.cap_exempt.iter().any(|c| c.contains(peer.ip()));
            let capped = self.filters.slowread && !exempt;
            if capped && self.caps.acquire(&RangeKey::of(peer.ip())).is_some() {
                // Over its range's share: say so, and when to retry.
                self.caps.release(&RangeKey::of(peer.ip()));
                send_best_effort(
                    &sock,
                    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 10\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                self.closes[CloseReason::RangeCap.index()] += 1;
                continue;
            }
            self.admit(sock, peer, St::Reading, self.now, Vec::new(), capped);
        }
    }

    /// Take a client connection into the table, accepted here or adopted from an
    /// older front (`handover`): in state `st` since `since`, with the bytes `rbuf`
    /// already read, counted in its range's cap if `capped` (the caller acquired
    /// it). It is registered, parked in its class, and read at once. `false` if it
    /// could not be registered (then it is closed and its cap released).
    pub(super) fn admit(
        &mut self,
        sock: TcpStream,
        peer: std::net::SocketAddr,
        st: St,
        since: u64,
        rbuf: Vec<u8>,
        capped: bool,
    ) -> bool {
        // Never 0: a handoff id of 0 (generation 0, key 0) means "not handed
        // over" to a backend (`sluice serve --from`'s `front_id`).
        self.gen = self.gen.wrapping_add(1).max(1);
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        let mut c = FConn {
            sock,
            peer,
            gen: self.gen,
            st,
            since,
            rbuf,
            ready: Vec::new(),
            capped,
        };
        if self
            .poll
            .registry()
            .register(&mut c.sock, Token(key), Interest::READABLE)
            .is_err()
        {
            if capped {
                self.caps.release(&RangeKey::of(peer.ip()));
            }
            return false;
        }
        entry.insert(c);
        let class = match st {
            St::Idle => Class::Idle,
            _ => Class::Incomplete,
        };
        self.cond.park(key as u32, peer.ip(), class);
        // Its bytes may make a whole request already, and more may be waiting.
        self.client(key);
        true
    }

    /// Read what a client sent and see whether a whole request is here.
    pub(super) fn client(&mut self, key: usize) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if !matches!(c.st, St::Reading | St::Idle) {
            return; // a backend's, or already waiting in the queue
        }
        // The worker's read (pooled buffer, into spare capacity): until EAGAIN, since
        // this loop does not track RDHUP.
        let max = self.set.limits.max_head + MAX_BODY;
        let eof = !matches!(
            read_into(&mut c.sock, &mut c.rbuf, &mut self.pool, max, true),
            Ok(ReadOutcome::Blocked | ReadOutcome::Full)
        );
        if c.st == St::Idle && !c.rbuf.is_empty() {
            c.st = St::Reading;
            c.since = self.now;
        }
        match self.package(key) {
            Some(true) => {}
            Some(false) if eof => self.close(key, CloseReason::ClientGone),
            Some(false) => {
                let c = &mut self.conns[key];
                if c.rbuf.is_empty() {
                    recycle(&mut self.pool, std::mem::take(&mut c.rbuf));
                }
                let class = if c.st == St::Idle {
                    Class::Idle
                } else {
                    Class::Incomplete
                };
                let ip = c.peer.ip();
                self.cond.park(key as u32, ip, class);
            }
            None => {}
        }
    }

    /// Request packaging: `Some(true)` when a whole request moved to the ready
    /// queue, `Some(false)` when more bytes are needed, `None` when the connection
    /// was answered and closed here.
    pub(super) fn package(&mut self, key: usize) -> Option<bool> {
        let c = &mut self.conns[key];
        if c.rbuf.is_empty() {
            return Some(false);
        }
        let mut status = None;
        let len = match parse_head(&c.rbuf, &self.set.limits) {
            Ok(Parsed::Partial) => return Some(false),
            Ok(Parsed::Complete(head)) => match head.framing() {
                // The front's own status (`status`): answered here, not handed on.
                _ if self.set.status.as_ref().is_some_and(|s| {
                    status = s.form(&head, c.peer.ip());
                    status.is_some()
                }) =>
                {
                    0
                }
                BodyFraming::None => head.head_len,
                BodyFraming::Length(n) if n as usize <= MAX_BODY => {
                    if c.rbuf.len() < head.head_len + n as usize {
                        return Some(false);
                    }
                    head.head_len + n as usize
                }
                BodyFraming::Length(_) if self.filters.sanity => {
                    self.refuse(
                        key,
                        413,
                        "request body too large for the conditioning front",
                    );
                    return None;
                }
                BodyFraming::Chunked if self.filters.sanity => {
                    self.refuse(key, 411, "a request body needs Content-Length here");
                    return None;
                }
                _ => c.rbuf.len(),
            },
            Err(e) if self.filters.sanity => {
                self.refuse(key, e.status(), e.as_str());
                return None;
            }
            // Without the sanity filter the backend sees what the client sent.
            Err(_) => c.rbuf.len(),
        };
        if let Some(form) = status {
            self.answer_status(key, form);
            return None;
        }
        c.ready = c.rbuf.drain(..len).collect();
        c.st = St::Ready;
        let ip = c.peer.ip();
        let gen = c.gen;
        self.wait_for_backend(key, ip, gen);
        Some(true)
    }

    /// A request that could not be handed over waits again: first in the FIFO, or
    /// in the tree as its address's youngest (its range just had its turn).
    fn requeue(&mut self, key: usize, gen: u32) {
        if self.filters.fair {
            let ip = self.conns[key].peer.ip();
            self.cond.park(key as u32, ip, Class::Waiting);
        } else {
            self.fifo.push_front((key, gen));
        }
    }

    /// Answer a refused request here and close: it never reaches a backend.
    pub(super) fn refuse(&mut self, key: usize, status: u16, why: &str) {
        send_best_effort(&self.conns[key].sock, answer(status, "", why).as_bytes());
        self.close(key, CloseReason::BadRequest);
    }

    /// A complete request waits for a backend: with `fair`, in the conditioner's
    /// waiting tree (the paper's recency-based choice: least recently served range
    /// first, at every level); without it, in one FIFO.
    fn wait_for_backend(&mut self, key: usize, ip: std::net::IpAddr, gen: u32) {
        if self.filters.fair {
            self.cond.park(key as u32, ip, Class::Waiting);
        } else {
            self.cond.park(key as u32, ip, Class::Active);
            self.fifo.push_back((key, gen));
        }
    }

    /// Hand ready requests to backends that asked, the least recently served range
    /// first (`fair`) or in arrival order.
    pub(super) fn dispatch(&mut self) {
        while self.cond.waiting() > 0 || !self.fifo.is_empty() {
            let Some(b) = self
                .backends
                .iter()
                .filter(|(_, bk)| bk.credit > 0)
                .max_by_key(|(_, bk)| bk.credit)
                .map(|(k, _)| k)
            else {
                return;
            };
            // The tree never holds a closed connection (`close` forgets it); the
            // FIFO may, so its entries carry the generation.
            let (key, gen) = match self.cond.next_waiting() {
                Some(id) => {
                    let key = id as usize;
                    (key, self.conns.get(key).map_or(0, |c| c.gen))
                }
                None => match self.fifo.pop_front() {
                    Some(e) => e,
                    None => return,
                },
            };
            let Some(c) = self.conns.get_mut(key) else {
                continue;
            };
            if c.gen != gen || c.st != St::Ready {
                continue;
            }
            let id = (u64::from(gen) << 32) | key as u64;
            let back = &mut self.backends[b];
            match proto::send_handoff(
                back.sock.as_raw_fd(),
                c.sock.as_raw_fd(),
                id,
                c.peer,
                &c.ready,
            ) {
                Ok(()) => {
                    back.credit -= 1;
                    self.handed += 1;
                    c.ready = Vec::new();
                    c.st = St::Backend(b);
                    if c.rbuf.is_empty() {
                        recycle(&mut self.pool, std::mem::take(&mut c.rbuf));
                    }
                    if !self.filters.persist {
                        // Not kept here: the backend's copy is the connection now.
                        self.close(key, CloseReason::Done);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Its socket is full: try again after the next events.
                    self.requeue(key, gen);
                    return;
                }
                Err(_) => {
                    self.requeue(key, gen);
                    self.backend_gone(b);
                }
            }
        }
    }

    /// Deadlines: a request must be whole `header_timeout` after its first byte
    /// (after accept for the first one), and handed to a backend by then too: one
    /// still waiting for a backend (none asks: they are down, or all busy) is
    /// answered 503 with `Retry-After` (`CloseReason::Busy`, as `sluice serve`
    /// answers a request that waited too long behind `max_active`). A kept
    /// connection waits `keepalive_timeout`.
    pub(super) fn sweep(&mut self) {
        let now = self.now;
        let expired: Vec<(usize, CloseReason)> = self
            .conns
            .iter()
            .filter_map(|(k, c)| match c.st {
                St::Reading if now >= c.since + self.set.header_ms => {
                    Some((k, CloseReason::HeaderTimeout))
                }
                St::Ready if now >= c.since + self.set.header_ms => Some((k, CloseReason::Busy)),
                St::Idle if now >= c.since + self.set.idle_ms => {
                    Some((k, CloseReason::IdleTimeout))
                }
                _ => None,
            })
            .collect();
        for (k, why) in expired {
            let sock = &self.conns[k].sock;
            match why {
                CloseReason::HeaderTimeout if !self.conns[k].rbuf.is_empty() => send_best_effort(
                    sock,
                    b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                ),
                CloseReason::Busy => send_best_effort(
                    sock,
                    answer(503, "Retry-After: 1\r\n", "no backend took the request in time")
                        .as_bytes(),
                ),
                _ => {}
            }
            self.close(k, why);
        }
    }

    pub(super) fn close(&mut self, key: usize, why: CloseReason) {
        if let Some(mut c) = self.conns.try_remove(key) {
            self.cond.forget(key as u32, c.peer.ip());
            if c.capped {
                self.caps.release(&RangeKey::of(c.peer.ip()));
            }
            recycle(&mut self.pool, std::mem::take(&mut c.rbuf));
            self.closes[why.index()] += 1;
            // Our copy only: a backend holding the socket keeps the connection open
            // (`persist` off), and is the one to close it.
            let _ = self.poll.registry().deregister(&mut c.sock);
        }
    }
}

/// A short plain-text answer the front gives itself and then closes: `status`,
/// the `extra` header lines (each ending in CRLF), and `why` as the body.
fn answer(status: u16, extra: &str, why: &str) -> String {
    format!(
        "HTTP/1.1 {status} {}\r\n{extra}Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{why}\n",
        sluice_http::response::reason(status),
        why.len() + 1
    )
}

pub(super) fn send_best_effort(sock: &TcpStream, msg: &[u8]) {
    // SAFETY: one non-blocking send from a valid slice on our own socket.
    unsafe {
        libc::send(
            sock.as_raw_fd(),
            msg.as_ptr().cast(),
            msg.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
}
