//! One connection's state machine, run on each readiness event: read, parse the
//! head, answer, send, linger, and the class change conditioning is told about at
//! the end of every `drive` (incomplete, idle or busy). `drive_inner` assembles its
//! steps in order; each is a function of its own below it.
//!
//! Must not: decide an answer (`answer.rs`, `kept.rs`) or whose turn is next
//! (`timers.rs`, `sluice-condition`); it moves one connection as far as it can.
//! Costs: per keep-alive request one `recv`, one `send`, and no `epoll_ctl`; the
//! steps that do not apply to a plain connection with no response in flight are
//! skipped from the record in hand (BENCHMARKS.md, eighth session).

use super::answer::release;
use super::conn::*;
use super::*;
use crate::disk::Refused;
use crate::io::{drain_input, read_into, recycle, unread_bytes_waiting, ReadOutcome};
use crate::send::{Flush, PaceStep, PaceTurn, Plain};
use crate::tls;
use sluice_condition::slowread::UNSENT_PROVEN;
use sluice_condition::{Class, CloseReason};
use sluice_status::Counters;
use std::io;
use std::os::fd::AsRawFd;

/// What one step of [`Worker::drive_inner`] leaves the connection to.
enum Go {
    /// The next step of this pass.
    On,
    /// The pass again from its first step: more became possible (a response
    /// ended, or the socket may hold more bytes).
    Again,
    /// Nothing more for now: an event or a timer moves it next, or it is gone.
    Stop,
}

impl Worker {
    /// Advance one connection as far as it can go, then tell conditioning where it
    /// is parked (incomplete, idle or busy): the one place classes change.
    pub(super) fn drive(&mut self, key: usize) {
        self.drive_inner(key);
        if let Some(c) = self.conns.get(key) {
            let class = match c.phase {
                Phase::Head { .. } if c.out.is_none() => Class::Incomplete,
                Phase::Idle { .. } => Class::Idle,
                // A complete request waiting for its turn (`run_ready`).
                Phase::Ready { .. } => Class::Ready,
                // Errant clients being answered slowly are outside conditioning's
                // accounting: never evicted for room, never counted in a range.
                Phase::Drip { .. } => {
                    self.cond.forget(key as u32, c.peer);
                    return;
                }
                // Queued for a send turn (`Class::Waiting`, set where it was
                // queued) or parked on the disk pool (`Class::Active`): as is.
                Phase::Send { .. } if c.flags.has(Flags::QUEUED) => return,
                _ => Class::Active,
            };
            self.cond.park(key as u32, c.peer, class);
        }
    }

    /// A response stops sending for now, its progress counted from now: waiting
    /// for its next send turn (`Class::Waiting`) or parked on the disk pool
    /// (`Class::Active`). See [`Worker::hold_send`].
    fn pause_send(&mut self, key: usize, class: Class) {
        self.conns[key].phase = Phase::Send { last: self.now_ms };
        self.hold_send(key, class);
    }

    /// A response in `Send` stops sending (`QUEUED`: no writable edge or send
    /// turn takes it) and is parked as `class`; its slow-read deadline is armed,
    /// or it is closed if it already read too slowly.
    pub(super) fn hold_send(&mut self, key: usize, class: Class) {
        let c = &mut self.conns[key];
        c.flags.set(Flags::QUEUED, true);
        let peer = c.peer;
        self.cond.park(key as u32, peer, class);
        match self.check_rate(key) {
            Some(d) => self.set_deadline(key, d),
            None => self.close(key, CloseReason::SlowRead),
        }
    }

    /// Advance one connection as far as it can go without blocking: the
    /// connection's steps, in order, each taken as far as it goes. A step either
    /// hands on to the next (`Go::On`), starts the pass again because more became
    /// possible (`Go::Again`: a response finished, bytes may still be readable),
    /// or leaves the connection waiting for an event or a timer (`Go::Stop`).
    pub(super) fn drive_inner(&mut self, key: usize) {
        macro_rules! step {
            ($e:expr) => {
                match $e {
                    Go::On => {}
                    Go::Again => continue,
                    Go::Stop => return,
                }
            };
        }
        loop {
            let Some(c) = self.conns.get_mut(key) else {
                return;
            };
            match c.phase {
                // Closing: what the client still sends is read and thrown away.
                Phase::Linger { .. } => return self.drain_lingering(key),
                // An errant client answered slowly: the same, and its EOF ends it.
                Phase::Drip { .. } => {
                    if !drain_input(&c.sock) {
                        self.close(key, CloseReason::ClientGone);
                    }
                    return;
                }
                _ => {}
            }
            // (Most connections are plain, and most passes have no response in
            // flight: those steps are skipped here.)
            let (tls, sending) = (c.via.is_some(), c.out.is_some());
            // 0. TLS records rustls queued outside a response (handshake flights,
            //    session tickets) go first; until they are out, nothing else moves.
            if tls {
                step!(self.push_tls_records(key));
            }
            // 1. Finish the response in flight (in turns: see `run_sendq`).
            if sending {
                step!(self.send_response(key));
            }
            // 2. Read what the client sent.
            step!(self.read_request_bytes(key));
            // 3. Throw away a request body we are skipping.
            step!(self.skip_body(key));
            // 3½. Behind a load balancer: its PROXY header comes first, within the
            //     same total head deadline; then the connection is the real client's.
            step!(self.read_proxy_header(key));
            // 4. Parse and answer the next request, if a whole head is here.
            step!(self.answer_next(key));
        }
    }

    /// Step 0: TLS records waiting outside a response.
    fn push_tls_records(&mut self, key: usize) -> Go {
        let c = &mut self.conns[key];
        let Some(t) = tls_of(&mut c.via) else {
            return Go::On;
        };
        if !t.wants_write() {
            return Go::On;
        }
        if c.flags.has(Flags::WRITE_BLOCKED) {
            return Go::Stop;
        }
        match tls::push(&c.sock, t) {
            Ok(true) => Go::On,
            Ok(false) => {
                c.flags.set(Flags::WRITE_BLOCKED, true);
                Go::Stop
            }
            Err(_) => {
                self.close(key, CloseReason::ClientGone);
                Go::Stop
            }
        }
    }

    /// Step 1: one send turn of the response in flight, if there is one and its
    /// socket can take bytes. It yields (queued for its next turn), blocks (waits
    /// for a writable edge, its rate checked), waits for the disk pool, or ends:
    /// then the connection goes on with whatever the client sent next.
    fn send_response(&mut self, key: usize) -> Go {
        let cfg_io = self.snap.config.files.io;
        let buffer_size = self.snap.config.files.buffer_size;
        let c = &mut self.conns[key];
        let Some(out) = c.out.as_mut() else {
            return Go::On;
        };
        if c.flags.has(Flags::WRITE_BLOCKED) || c.flags.has(Flags::QUEUED) {
            return Go::Stop;
        }
        let check_cold = self.shared.disk.is_some();
        let flushed = match tls_of(&mut c.via) {
            Some(t) => out.flush(
                &mut tls::TlsWire {
                    sock: &c.sock,
                    tls: t,
                },
                cfg_io,
                buffer_size,
                SEND_TURN,
                check_cold,
            ),
            None => out.flush(
                &mut Plain(c.sock.as_raw_fd()),
                cfg_io,
                buffer_size,
                SEND_TURN,
                check_cold,
            ),
        };
        // A response that goes on gives its head's buffer back once the head
        // is out, unless body bytes are copied through it (`read`, TLS).
        if !matches!(flushed, Ok(Flush::Done) | Err(_)) {
            let copies_body = cfg_io == sluice_config::IoMode::Read || tls_of(&mut c.via).is_some();
            if let Some(b) = out.spare_buffer(copies_body) {
                recycle(&mut self.pool, b);
            }
        }
        // A reader that has taken 2 MiB may keep more queued (`fit_unsent`).
        let proven = matches!(flushed, Ok(Flush::Yield | Flush::Blocked))
            && !out.proven
            && out.sent >= UNSENT_PROVEN;
        out.proven |= proven;
        // Bandwidth limits: past its `limit_rate_after`, paced from here on.
        if out.pace.switch.is_some() {
            let turn = match flushed {
                Ok(Flush::Yield) => PaceTurn::Yielded,
                // Watching needs an unsent bound to give back (0: the kernel's).
                Ok(Flush::Blocked) if self.snap.config.condition.unsent_max != 0 => {
                    PaceTurn::Blocked
                }
                _ => PaceTurn::Ended,
            };
            let fd = c.sock.as_raw_fd();
            let step = out
                .pace
                .due(out.sent, turn, || crate::listener::unsent_bytes(fd));
            if step != PaceStep::Nothing {
                let bound = super::pace::unsent_bound_now(&self.shared, &self.snap, out.proven);
                let base = super::pace::base(&self.snap.config.http);
                super::pace::apply(fd, step, base, bound, &mut self.repaced, key);
            }
        }
        // (Not while a pacing watch holds the bound low: the switch gives the
        // raised bound back.)
        let proven = proven && !out.pace.watching;
        match flushed {
            Ok(Flush::Cold { off, len, rest }) => {
                // Not in the page cache: a pool thread reads it and the
                // response waits, parked, for its next turn (`disk_ready`).
                // A reader that has taken its bytes fast has the range after
                // this one read too, while it sends this one (`disk::AHEAD`).
                let who = (key as u32, c.gen);
                let took_ms = self.now_ms.saturating_sub(out.ready_at);
                let ahead = crate::disk::ahead_for(out.sent, took_ms, rest - len);
                let asked = match (&self.shared.disk, out.front_file()) {
                    (Some(pool), Some(f)) => pool.submit(f, off, len, ahead, who, &self.disk_done),
                    _ => Err(Refused::NoDescriptor),
                };
                match asked {
                    Ok(()) => {
                        Counters::add(&self.shared.stats[self.id].disk_waits, 1);
                        // Not a send turn's wait: `disk_ready` queues it when read.
                        self.pause_send(key, Class::Active);
                    }
                    // The disks are behind (the queue, or this disk's share of
                    // it, is full): the response waits and asks again; the
                    // worker does not read that disk itself.
                    Err(Refused::Full | Refused::DiskBusy) => self.retry_disk(key),
                    // No pool, or no descriptor to hand it: sent from here.
                    Err(_) => {
                        out.assume_warm(off + len);
                        return Go::Again;
                    }
                }
                Go::Stop
            }
            Ok(Flush::Yield) => {
                if proven {
                    self.fit_unsent(key, true);
                }
                self.pause_send(key, Class::Waiting);
                Go::Stop
            }
            Ok(Flush::Blocked) => {
                c.flags.set(Flags::WRITE_BLOCKED, true);
                c.phase = Phase::Send { last: self.now_ms };
                // Deferral's RTO guard is for a connection's start: it goes at the
                // first block that finds the kernel's estimate no longer needs it
                // (on loopback and most paths, the first block), so a reader that
                // stops is probed as the kernel's default would, not every second.
                if self.now_ms >= out.guard_next {
                    let guard = crate::deferral::lift_rto_guard(c.sock.as_raw_fd(), true);
                    out.guard_next = match guard {
                        Ok(crate::deferral::Guard::Kept) => {
                            self.now_ms + crate::deferral::GUARD_ASK_EVERY_MS
                        }
                        _ => NEVER,
                    };
                }
                if !std::mem::replace(&mut out.armed, true) {
                    self.arm_writable(key);
                }
                if proven {
                    self.fit_unsent(key, true);
                }
                match self.check_rate(key) {
                    Some(d) => self.set_deadline(key, d),
                    None => self.close(key, CloseReason::SlowRead),
                }
                Go::Stop
            }
            Ok(Flush::Done) => self.response_sent(key),
            Err(e) => {
                tracing::debug!(peer = %c.peer, error = %e, "send failed");
                self.close(key, CloseReason::ClientGone);
                Go::Stop
            }
        }
    }

    /// The last byte of a response went out: counted and logged; the connection
    /// then goes back to its front process, closes, skips the request's body, or
    /// waits for (or already has) its next request.
    fn response_sent(&mut self, key: usize) -> Go {
        let c = &mut self.conns[key];
        let Some(mut out) = c.out.take() else {
            return Go::On;
        };
        let (sent, log) = (out.sent, out.log.take());
        let (head_started, ready_at) = (out.head_started, out.ready_at);
        let discard = out.discard_after;
        release(out, &mut self.pool, &mut self.out_pool);
        self.active -= 1;
        let peer = c.peer;
        self.response_done(peer, log, sent, head_started, ready_at);
        let c = &mut self.conns[key];
        if c.front_id() != 0
            && !c.flags.has(Flags::CLOSE_AFTER)
            && c.rbuf.is_empty()
            && discard == 0
        {
            self.hand_back(key);
            return Go::Stop;
        }
        if c.flags.has(Flags::CLOSE_AFTER) {
            self.finish_closing(key);
            return Go::Stop;
        }
        c.phase = if discard > 0 {
            // A request body is still to be skipped: it keeps the head's total
            // deadline (header_timeout from the head's start), so trickling it
            // cannot hold the connection.
            Phase::Head {
                started: head_started,
                discard,
            }
        } else if c.rbuf.is_empty() {
            Phase::Idle { since: self.now_ms }
        } else {
            Phase::Head {
                started: self.now_ms,
                discard: 0,
            }
        };
        Go::On
    }

    /// Step 2: read what the socket has, up to what a head may need. EOF after a
    /// request (`printf ... | nc`) answers what is buffered, then closes.
    fn read_request_bytes(&mut self, key: usize) -> Go {
        let c = &mut self.conns[key];
        let limit = self.limits.max_head + READ_CHUNK;
        if c.flags.has(Flags::READ_BLOCKED) || c.rbuf.len() >= limit {
            return Go::On;
        }
        // Behind a balancer, an HTTPS connection's PROXY header comes before its
        // handshake: read raw until it is parsed (`proxy_header` then hands the
        // rest to rustls).
        let raw = c.flags.has(Flags::PROXY_PENDING);
        let got = match tls_of(&mut c.via) {
            Some(t) if !raw => {
                tls::read_into(&c.sock, t, &mut c.rbuf, &mut self.pool, limit, READ_CHUNK)
            }
            _ => read_into(
                &mut c.sock,
                &mut c.rbuf,
                &mut self.pool,
                limit,
                c.flags.has(Flags::RDHUP),
            ),
        };
        match got {
            Ok(ReadOutcome::Blocked) => c.flags.set(Flags::READ_BLOCKED, true),
            Ok(ReadOutcome::Full) => {}
            Ok(ReadOutcome::Eof) if !c.rbuf.is_empty() => {
                c.flags.set(Flags::READ_BLOCKED, true);
                c.flags.set(Flags::PEER_CLOSED, true);
            }
            Ok(ReadOutcome::Eof) => {
                self.close(key, CloseReason::ClientGone);
                return Go::Stop;
            }
            Err(e) => {
                // For TLS, a failed handshake or a bad record: its own reason.
                let why = if e.kind() == io::ErrorKind::InvalidData {
                    CloseReason::BadRequest
                } else {
                    CloseReason::ClientGone
                };
                tracing::debug!(peer = %c.peer, error = %e, "read failed");
                self.close(key, why);
                return Go::Stop;
            }
        }
        if matches!(c.phase, Phase::Idle { .. }) && !c.rbuf.is_empty() {
            c.phase = Phase::Head {
                started: self.now_ms,
                discard: 0,
            };
        }
        Go::On
    }

    /// Step 3: drop the bytes of a request body being skipped (after its
    /// response); what is still to come keeps the head's total deadline.
    fn skip_body(&mut self, key: usize) -> Go {
        let c = &mut self.conns[key];
        let Phase::Head { started, discard } = c.phase else {
            return Go::On;
        };
        if discard == 0 {
            return Go::On;
        }
        let n = (discard as usize).min(c.rbuf.len());
        c.rbuf.drain(..n);
        let left = discard - n as u32;
        c.phase = Phase::Head {
            started,
            discard: left,
        };
        if left > 0 {
            return self.wait_for_bytes(key);
        }
        Go::On
    }

    /// Step 3½: a listener behind a load balancer reads its PROXY header first.
    fn read_proxy_header(&mut self, key: usize) -> Go {
        if !self.conns[key].flags.has(Flags::PROXY_PENDING) {
            return Go::On;
        }
        match self.proxy_header(key) {
            Ok(true) => Go::On,
            Ok(false) => self.wait_for_bytes(key),
            Err(why) => {
                tracing::debug!(peer = %self.conns[key].peer, why, "bad PROXY header");
                self.close(key, CloseReason::BadRequest);
                Go::Stop
            }
        }
    }

    /// Step 4: answer the request at the start of the buffer (`next_request`), or
    /// leave it waiting for its turn, for the disk, or for the rest of its head.
    fn answer_next(&mut self, key: usize) -> Go {
        match self.next_request(key) {
            Step::Responded => Go::Again,
            Step::Parked => Go::Stop,
            Step::Wait => {
                // Answered by `run_ready` in its turn, or 503 at the head's
                // total deadline (`on_timer`); one waiting for the disk pool,
                // once it is done (`disk_ready`), or 503 if it takes longer
                // than a send may stall.
                let c = &self.conns[key];
                if matches!(c.phase, Phase::Ready { .. } | Phase::Disk { .. }) {
                    let d = self.deadline_of(c.phase);
                    self.set_deadline(key, d);
                }
                Go::Stop
            }
            Step::Close => {
                let why = self.conns[key].why;
                self.close(key, why);
                Go::Stop
            }
            Step::NeedMore => self.wait_for_bytes(key),
        }
    }

    /// The connection needs more bytes from the client: read on if the socket may
    /// have them; close if the client has sent EOF; otherwise wait, holding no
    /// empty buffer, until the deadline of the phase it is in.
    fn wait_for_bytes(&mut self, key: usize) -> Go {
        let c = &mut self.conns[key];
        if c.flags.has(Flags::PEER_CLOSED) {
            self.close(key, CloseReason::ClientGone);
            return Go::Stop;
        }
        if !c.flags.has(Flags::READ_BLOCKED) {
            return Go::Again; // the buffer had room and more may be readable
        }
        if c.rbuf.is_empty() {
            recycle(&mut self.pool, std::mem::take(&mut c.rbuf));
        }
        let phase = c.phase;
        let d = self.deadline_of(phase);
        self.set_deadline(key, d);
        Go::Stop
    }

    /// Ask for the connection's writable edges (it was registered for readable ones
    /// only, see `adopt`). Asking again when already asked changes nothing; the
    /// kernel reports the socket at once if it became writable meanwhile.
    fn arm_writable(&mut self, key: usize) {
        let c = &mut self.conns[key];
        let both = mio::Interest::READABLE | mio::Interest::WRITABLE;
        let registry = self.poll.registry();
        let armed = if self.unregistered == Some(key) {
            // Answered at accept and not registered yet (`answer_at_accept`).
            self.unregistered = None;
            registry.register(&mut c.sock, mio::Token(key), both)
        } else {
            registry.reregister(&mut c.sock, mio::Token(key), both)
        };
        if let Err(e) = armed {
            // Without writable edges the response stalls; its send deadline closes it.
            tracing::debug!(peer = %c.peer, error = %e, "could not wait for writability");
        }
    }

    /// The last response on a connection is written. Close it at once if the client
    /// has nothing more in flight; otherwise shut down our sending side (the client
    /// sees EOF after the whole response) and linger: read and discard for at most
    /// [`LINGER_MS`] and [`LINGER_BYTES`], then close. Closing with unread bytes in
    /// the socket would send a RST, and a RST makes the client's kernel drop
    /// response bytes it has not yet handed to the application.
    ///
    /// "Nothing more in flight" is known when the client already sent EOF, and
    /// checked with one non-blocking peek otherwise (bytes sent after a
    /// `Connection: close` request may have arrived while the response went out).
    pub(super) fn finish_closing(&mut self, key: usize) {
        let c = &mut self.conns[key];
        if c.flags.has(Flags::PEER_CLOSED)
            || (!c.flags.has(Flags::LINGER) && !unread_bytes_waiting(&c.sock))
        {
            let why = c.why;
            self.close(key, why);
            return;
        }
        recycle(&mut self.pool, std::mem::take(&mut c.rbuf));
        if let Some(t) = tls_of(&mut c.via) {
            // TLS says "that was all" before TCP does (best effort).
            t.send_close_notify();
            let _ = tls::push(&c.sock, t);
        }
        // SAFETY: shutdown on our own open socket.
        unsafe { libc::shutdown(c.sock.as_raw_fd(), libc::SHUT_WR) };
        c.phase = Phase::Linger {
            since: self.now_ms,
            left: LINGER_BYTES,
        };
        c.flags.set(Flags::READ_BLOCKED, false);
        let phase = c.phase;
        let d = self.deadline_of(phase);
        self.set_deadline(key, d);
        self.drain_lingering(key);
    }

    /// Read and throw away what a lingering client still sends; close on its EOF, on
    /// an error, or once [`LINGER_BYTES`] have been discarded.
    pub(super) fn drain_lingering(&mut self, key: usize) {
        let c = &mut self.conns[key];
        let Phase::Linger { since, mut left } = c.phase else {
            return;
        };
        let mut scratch = [0u8; 8192];
        while !c.flags.has(Flags::READ_BLOCKED) {
            // SAFETY: recv into a stack buffer of the given length.
            let n = unsafe {
                libc::recv(
                    c.sock.as_raw_fd(),
                    scratch.as_mut_ptr().cast(),
                    scratch.len(),
                    0,
                )
            };
            if n < 0 {
                match io::Error::last_os_error().kind() {
                    io::ErrorKind::WouldBlock => c.flags.set(Flags::READ_BLOCKED, true),
                    io::ErrorKind::Interrupted => {}
                    _ => break,
                }
                continue;
            }
            if n == 0 || n as u64 >= u64::from(left) {
                break;
            }
            left -= n as u32;
        }
        c.phase = Phase::Linger { since, left };
        if !c.flags.has(Flags::READ_BLOCKED) {
            let why = c.why;
            self.close(key, why);
        }
    }
}
