//! One connection's state machine, run on each readiness event: read, parse the
//! head, answer, send, linger, and the class change conditioning is told about at
//! the end of every `drive` (incomplete, idle or busy).

use super::conn::*;
use super::*;
use crate::io::{drain_input, read_into, recycle, unread_bytes_waiting, ReadOutcome};
use crate::send::{Flush, Plain};
use crate::tls;
use sluice_condition::slowread::UNSENT_PROVEN;
use sluice_condition::{Class, CloseReason};
use sluice_status::Counters;
use std::io;
use std::os::fd::AsRawFd;

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

    /// A response stops sending for now (`QUEUED`): waiting for its next send turn
    /// (`Class::Waiting`) or parked on the disk pool (`Class::Active`); its
    /// slow-read deadline is armed, or it is closed if it already read too slowly.
    fn pause_send(&mut self, key: usize, class: Class) {
        let c = &mut self.conns[key];
        c.flags.set(Flags::QUEUED, true);
        c.phase = Phase::Send { last: self.now_ms };
        let peer = c.peer;
        self.cond.park(key as u32, peer, class);
        match self.check_rate(key) {
            Some(d) => self.set_deadline(key, d),
            None => self.close(key, CloseReason::SlowRead),
        }
    }

    /// Advance one connection as far as it can go without blocking.
    pub(super) fn drive_inner(&mut self, key: usize) {
        let cfg_io = self.snap.config.files.io;
        let buffer_size = self.snap.config.files.buffer_size;
        loop {
            let Some(c) = self.conns.get_mut(key) else {
                return;
            };
            if let Phase::Linger { .. } = c.phase {
                self.drain_lingering(key);
                return;
            }
            if let Phase::Drip { .. } = c.phase {
                // Whatever the client sends is read and thrown away; its EOF ends it.
                if !drain_input(&c.sock) {
                    self.close(key, CloseReason::ClientGone);
                }
                return;
            }
            // 0. TLS records rustls queued outside a response (handshake flights,
            //    session tickets) go first; until they are out, nothing else moves.
            if let Some(t) = tls_of(&mut c.via) {
                if t.wants_write() {
                    if c.flags.has(Flags::WRITE_BLOCKED) {
                        return;
                    }
                    match tls::push(&c.sock, t) {
                        Ok(true) => {}
                        Ok(false) => {
                            c.flags.set(Flags::WRITE_BLOCKED, true);
                            return;
                        }
                        Err(_) => {
                            self.close(key, CloseReason::ClientGone);
                            return;
                        }
                    }
                }
            }
            // 1. Finish the response in flight (in turns: see `run_sendq`).
            if let Some(out) = c.out.as_mut() {
                if c.flags.has(Flags::WRITE_BLOCKED) || c.flags.has(Flags::QUEUED) {
                    return;
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
                    let copies_body =
                        cfg_io == sluice_config::IoMode::Read || tls_of(&mut c.via).is_some();
                    if let Some(b) = out.spare_buffer(copies_body) {
                        recycle(&mut self.pool, b);
                    }
                }
                // A reader that has taken 2 MiB may keep more queued (`fit_unsent`).
                let proven = matches!(flushed, Ok(Flush::Yield | Flush::Blocked))
                    && !out.proven
                    && out.sent >= UNSENT_PROVEN;
                out.proven |= proven;
                match flushed {
                    Ok(Flush::Cold { off, len, rest }) => {
                        // Not in the page cache: a pool thread reads it and the
                        // response waits, parked, for its next turn (`disk_ready`).
                        // A reader that has taken its bytes fast has the range after
                        // this one read too, while it sends this one (`disk::AHEAD`).
                        let who = (key as u32, c.gen);
                        let took_ms = self.now_ms.saturating_sub(out.ready_at);
                        let ahead = crate::disk::ahead_for(out.sent, took_ms, rest - len);
                        let parked = match (&self.shared.disk, out.front_file()) {
                            (Some(pool), Some(f)) => {
                                pool.submit(f, off, len, ahead, who, &self.disk_done)
                            }
                            _ => false,
                        };
                        if !parked {
                            out.assume_warm(off + len);
                            continue;
                        }
                        Counters::add(&self.shared.stats[self.id].disk_waits, 1);
                        // Not a send turn's wait: `disk_ready` queues it when read.
                        self.pause_send(key, Class::Active);
                        return;
                    }
                    Ok(Flush::Yield) => {
                        if proven {
                            self.fit_unsent(key, true);
                        }
                        self.pause_send(key, Class::Waiting);
                        return;
                    }
                    Ok(Flush::Blocked) => {
                        c.flags.set(Flags::WRITE_BLOCKED, true);
                        c.phase = Phase::Send { last: self.now_ms };
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
                        return;
                    }
                    Ok(Flush::Done) => {
                        let (sent, log) = (out.sent, out.log.take());
                        let (head_started, ready_at) = (out.head_started, out.ready_at);
                        let discard = out.discard_after;
                        if let Some(out) = c.out.take() {
                            release(out, &mut self.pool, &mut self.out_pool);
                            self.active -= 1;
                        }
                        let peer = c.peer;
                        self.response_done(peer, log, sent, head_started, ready_at);
                        let c = &mut self.conns[key];
                        if c.front_id() != 0
                            && !c.flags.has(Flags::CLOSE_AFTER)
                            && c.rbuf.is_empty()
                            && discard == 0
                        {
                            self.hand_back(key);
                            return;
                        }
                        if c.flags.has(Flags::CLOSE_AFTER) {
                            self.finish_closing(key);
                            return;
                        }
                        c.phase = if discard > 0 {
                            // A request body is still to be skipped: it keeps the
                            // head's total deadline (header_timeout from the head's
                            // start), so trickling it cannot hold the connection.
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
                    }
                    Err(e) => {
                        tracing::debug!(peer = %c.peer, error = %e, "send failed");
                        self.close(key, CloseReason::ClientGone);
                        return;
                    }
                }
            }
            // 2. Read what the client sent.
            let c = &mut self.conns[key];
            if !c.flags.has(Flags::READ_BLOCKED) && c.rbuf.len() < self.limits.max_head + READ_CHUNK
            {
                let limit = self.limits.max_head + READ_CHUNK;
                let got = match tls_of(&mut c.via) {
                    Some(t) => {
                        tls::read_into(&c.sock, t, &mut c.rbuf, &mut self.pool, limit, READ_CHUNK)
                    }
                    None => read_into(
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
                        // Half-close after a request (`printf ... | nc`): answer what
                        // is buffered, then close.
                        c.flags.set(Flags::READ_BLOCKED, true);
                        c.flags.set(Flags::PEER_CLOSED, true);
                    }
                    Ok(ReadOutcome::Eof) => {
                        self.close(key, CloseReason::ClientGone);
                        return;
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
                        return;
                    }
                }
                if matches!(c.phase, Phase::Idle { .. }) && !c.rbuf.is_empty() {
                    c.phase = Phase::Head {
                        started: self.now_ms,
                        discard: 0,
                    };
                }
            }
            // 3. Throw away a request body we are skipping.
            if let Phase::Head { started, discard } = c.phase {
                if discard > 0 {
                    let n = (discard as usize).min(c.rbuf.len());
                    c.rbuf.drain(..n);
                    let left = discard - n as u32;
                    c.phase = Phase::Head {
                        started,
                        discard: left,
                    };
                    if left > 0 {
                        if c.flags.has(Flags::READ_BLOCKED) {
                            // Total, not per read: from the start of the request's head.
                            let d = started + ms(self.snap.config.http.header_timeout);
                            if c.rbuf.is_empty() {
                                recycle(&mut self.pool, std::mem::take(&mut c.rbuf));
                            }
                            self.set_deadline(key, d);
                            return;
                        }
                        continue;
                    }
                }
            }
            // 3½. Behind a load balancer: its PROXY header comes first, within the
            //     same total head deadline; then the connection is the real client's.
            if c.flags.has(Flags::PROXY_PENDING) {
                match self.proxy_header(key) {
                    Ok(true) => {}
                    Ok(false) => {
                        let c = &mut self.conns[key];
                        if c.flags.has(Flags::PEER_CLOSED) {
                            self.close(key, CloseReason::ClientGone);
                            return;
                        }
                        if !c.flags.has(Flags::READ_BLOCKED) {
                            continue;
                        }
                        let d = c.phase.head_started_or(self.now_ms)
                            + ms(self.snap.config.http.header_timeout);
                        self.set_deadline(key, d);
                        return;
                    }
                    Err(why) => {
                        tracing::debug!(peer = %self.conns[key].peer, why, "bad PROXY header");
                        self.close(key, CloseReason::BadRequest);
                        return;
                    }
                }
            }
            // 4. Parse and answer the next request, if a whole head is here.
            match self.next_request(key) {
                Step::Responded => continue,
                Step::Parked => return,
                Step::Wait => {
                    // Answered by `run_ready` in its turn, or 503 at the head's
                    // total deadline (`on_timer`); one waiting for the disk pool,
                    // once it is done (`disk_ready`), or 503 if it takes longer
                    // than a send may stall.
                    let d = match self.conns[key].phase {
                        Phase::Ready { started } => {
                            started + ms(self.snap.config.http.header_timeout)
                        }
                        Phase::Disk { .. } => self.now_ms + ms(self.snap.config.http.send_timeout),
                        _ => return,
                    };
                    self.set_deadline(key, d);
                    return;
                }
                Step::Close => {
                    let why = self.conns[key].why;
                    self.close(key, why);
                    return;
                }
                Step::NeedMore => {
                    let c = &mut self.conns[key];
                    if c.flags.has(Flags::PEER_CLOSED) {
                        self.close(key, CloseReason::ClientGone);
                        return;
                    }
                    if !c.flags.has(Flags::READ_BLOCKED) {
                        continue; // buffer had room and more may be readable
                    }
                    let d = match c.phase {
                        Phase::Head { started, .. }
                        | Phase::Ready { started }
                        | Phase::Disk { started, .. } => {
                            started + ms(self.snap.config.http.header_timeout)
                        }
                        Phase::Idle { since } => {
                            since + ms(self.snap.config.http.keepalive_timeout)
                        }
                        Phase::Send { last } => last + ms(self.snap.config.http.send_timeout),
                        Phase::Linger { since, .. } => since + LINGER_MS,
                        Phase::Drip { until } => until,
                    };
                    if c.rbuf.is_empty() {
                        recycle(&mut self.pool, std::mem::take(&mut c.rbuf));
                    }
                    self.set_deadline(key, d);
                    return;
                }
            }
        }
    }

    /// Ask for the connection's writable edges (it was registered for readable ones
    /// only, see `adopt`). Asking again when already asked changes nothing; the
    /// kernel reports the socket at once if it became writable meanwhile.
    fn arm_writable(&mut self, key: usize) {
        let c = &mut self.conns[key];
        if let Err(e) = self.poll.registry().reregister(
            &mut c.sock,
            mio::Token(key),
            mio::Interest::READABLE | mio::Interest::WRITABLE,
        ) {
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
        let d = self.now_ms + LINGER_MS;
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
