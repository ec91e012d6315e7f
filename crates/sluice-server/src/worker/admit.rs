//! How connections enter a worker and how it makes room: [`Worker::accept`] and
//! [`Worker::adopt`] (the one entry point, for accepted sockets and sockets a front
//! process hands over), the PROXY header, the per-range caps, and eviction of the
//! heaviest range's oldest idle-then-incomplete connection at the limit (rationed
//! per 100 ms tick); with `serve --from`, the connection to the front process, made
//! again when the front goes away ([`connect_front`]).

use super::conn::*;
use super::*;
use mio::net::TcpStream;
use mio::{Interest, Token};
use sluice_condition::{Class, CloseReason, RangeKey};
use sluice_status::Counters;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Worker {
    pub(super) fn accept(&mut self, li: usize) {
        if self.accept_paused_until.is_some() || self.stopping.is_some() {
            return;
        }
        loop {
            if self.accept_left == 0 {
                // This turn's share is taken: the rest at the next turn, which
                // does not sleep while a listener is pending.
                if !self.accept_pending.contains(&li) {
                    self.accept_pending.push(li);
                }
                return;
            }
            // At the limit, conditioning makes room (the oldest idle, else incomplete,
            // connection of the heaviest address range); with everyone busy, accepting
            // pauses for a tick and the kernel's backlog holds the newcomers.
            let open = self.shared.open.load(Ordering::Relaxed);
            let at_limit = open >= self.shared.max_open;
            if at_limit && (self.cond.victim().is_none() || !self.eviction_ration_left()) {
                // Everyone is busy, or this tick's evictions are spent: newcomers
                // wait in the kernel's backlog (make_room pauses accepting a tick).
                self.make_room("connection limit reached");
                return;
            }
            let Some(l) = self.listeners.get(li) else {
                return;
            };
            match l.accept() {
                Ok((sock, addr)) => {
                    self.accept_left -= 1;
                    // At the limit, a newcomer from a range already at its cap would
                    // only be answered 503: close it at once, evicting nobody (an
                    // attacking range that reconnects as fast as it is closed then
                    // costs an accept and a close, and never another client's slot).
                    // Anyone else gets the slot of the heaviest range's oldest idle or
                    // incomplete connection, as in the paper.
                    if at_limit {
                        let peer = addr.ip();
                        let over_cap = !self.snap.cap_exempt.iter().any(|c| c.contains(peer))
                            && self.shared.caps.would_exceed(&RangeKey::of(peer));
                        if over_cap || !self.make_room("connection limit reached") {
                            drop(sock);
                            let why = if over_cap {
                                CloseReason::RangeCap
                            } else {
                                CloseReason::AtLimit
                            };
                            Counters::add(&self.shared.stats[self.id].closes[why.index()], 1);
                            continue;
                        }
                    }
                    let proxy = self.proxy_listeners.get(li).copied().unwrap_or(false);
                    let tls = self.tls_listeners.get(li).copied().unwrap_or(false);
                    // A deferred listener hands a plain connection over with its
                    // request: answer it before registering it (`answer_at_accept`).
                    let at_once = !proxy && !tls && self.deferred.get(li).copied().unwrap_or(false);
                    match self.adopt(sock, addr.ip(), proxy, tls, !at_once) {
                        Some(key) if at_once => self.answer_at_accept(key),
                        _ => {}
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE/ENFILE/ENOBUFS: out of descriptors or memory (the limit is
                    // shared with the other workers). The file caches' idle
                    // descriptors go first (this worker's now, the process's other
                    // caches within a second), a connection only if they held none.
                    let out_of_fds = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                    if out_of_fds && self.shed_file_descriptors() > 0 {
                        continue;
                    }
                    if !self.make_room(&format!("accept failed: {e}")) {
                        return;
                    }
                }
            }
        }
    }

    /// Take a new connection: the one entry point for accepted sockets (and, later,
    /// sockets handed over by a conditioning front process).
    pub(super) fn adopt(
        &mut self,
        sock: TcpStream,
        peer: IpAddr,
        proxy: bool,
        tls: bool,
        register: bool,
    ) -> Option<usize> {
        if proxy && !self.snap.proxy_trusted.iter().any(|c| c.contains(peer)) {
            // Only a trusted balancer may say who the client is.
            tracing::debug!(%peer, "PROXY listener: untrusted source, closed");
            return None;
        }
        // HTTPS: the handshake is the first part of the connection's first head
        // (same total deadline, same "incomplete" class in the address tree).
        let tls = if tls {
            let session = self
                .snap
                .tls
                .as_ref()
                .map(|cfg| rustls::ServerConnection::new(cfg.clone()));
            match session {
                Some(Ok(s)) => Some(Box::new(Via::Tls(s))),
                _ => {
                    tracing::warn!(%peer, "HTTPS listener without a TLS configuration: closed");
                    return None;
                }
            }
        } else {
            None
        };
        // A bandwidth limit for everyone from the first byte: the kernel paces
        // the socket from here on (its base: `sluice_condition::pace`).
        let base = super::pace::base(&self.snap.config.http);
        if base != sluice_condition::pace::UNPACED {
            super::pace::set(sock.as_raw_fd(), base);
        }
        // TCP_NODELAY and TCP_NOTSENT_LOWAT: inherited from the listener
        // (`listener::set_inherited`); a socket handed over by a front process from
        // the front's listener (the front's `unsent_max`, with its slow-read filter
        // on), not once per handed-over request here.
        self.gen = self.gen.wrapping_add(1);
        let now = self.now_ms;
        // Slow-read prevention: count it against its ranges (shared by all workers).
        // Behind a balancer the socket's address is the balancer's: the real
        // client is counted once its PROXY header arrives (`proxy_header`).
        let cap = if proxy {
            Cap::Exempt
        } else {
            self.range_cap(peer)
        };
        let phase = Phase::Head {
            started: now,
            discard: 0,
        };
        let deadline = self.deadline_of(phase);
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        let mut conn = Conn {
            sock,
            peer,
            gen: self.gen,
            phase,
            rbuf: Vec::new(),
            out: None,
            requests: 0,
            flags: Flags(Flags::READ_BLOCKED | if proxy { Flags::PROXY_PENDING } else { 0 }),
            cap,
            why: CloseReason::Done,
            via: tls,
            deadline,
            wheel_at: NEVER,
        };
        // Readable edges only: a new socket is writable at once, and that first
        // writable edge would cost every short connection one more event. A
        // response asks for writable edges when it first cannot write all it has
        // (`arm_writable`); a TLS handshake may have to wait to write from the start.
        let interest = if conn.via.is_some() {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        if register
            && self
                .poll
                .registry()
                .register(&mut conn.sock, Token(key), interest)
                .is_err()
        {
            self.release_range(peer, cap);
            return None;
        }
        conn.wheel_at = self.wheel.insert(conn.deadline, (key as u32, conn.gen));
        entry.insert(conn);
        self.shared.open.fetch_add(1, Ordering::Relaxed);
        Counters::add(&self.shared.stats[self.id].accepted, 1);
        // Request packaging: it is incomplete until its first head arrives; too many
        // incomplete connections cost the heaviest range its oldest one.
        self.cond.park(key as u32, peer, Class::Incomplete);
        if self.cond.incomplete() as usize > self.max_incomplete {
            if let Some(v) = self.cond.incomplete_victim() {
                self.close(v as usize, CloseReason::EvictedIncomplete);
            }
        }
        self.conns.contains(key).then_some(key)
    }

    /// A connection from a deferred listener (`TCP_DEFER_ACCEPT`: the kernel hands
    /// it over once its first bytes are in), adopted without registering it with
    /// epoll: it is driven at once, and registered only if it is still open
    /// afterwards (keep-alive, a head still arriving, a response that did not fit,
    /// a linger) or when its response asks for writable edges (`arm_writable`). A
    /// `Connection: close` request answered in full then costs no `epoll_ctl` and
    /// no event, which is what a new connection per request (ab, siege, scripts)
    /// pays for every request. Closing a socket that was never registered is an
    /// ordinary close.
    fn answer_at_accept(&mut self, key: usize) {
        let gen = self.conns[key].gen;
        self.unregistered = Some(key);
        self.conns[key].flags.set(Flags::READ_BLOCKED, false);
        self.drive(key);
        if self.unregistered.take().is_none() {
            return; // `arm_writable` registered it
        }
        let Some(c) = self.conns.get_mut(key).filter(|c| c.gen == gen) else {
            return; // answered and closed
        };
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut c.sock, Token(key), Interest::READABLE)
        {
            tracing::debug!(peer = %c.peer, error = %e, "could not register a connection");
            self.close(key, CloseReason::ClientGone);
        }
    }

    /// `serve --from`: adopt the connections a `sluice condition` front process
    /// handed over, each with exactly one complete request, through the same entry
    /// point as accepted ones. Their sockets are never read here (the front reads
    /// the next request once it hears KEEP).
    pub(super) fn take_handoffs(&mut self) {
        use sluicecc::proto;
        loop {
            let Some(fd) = self.front.as_ref().map(|f| f.as_raw_fd()) else {
                return;
            };
            match proto::recv_handoff(fd, &mut self.front_buf) {
                Ok(Some(h)) => {
                    let sock = TcpStream::from_std(std::net::TcpStream::from(h.fd));
                    match self.adopt(sock, h.peer.ip(), false, false, true) {
                        Some(key) => {
                            let c = &mut self.conns[key];
                            c.via = Some(Box::new(Via::Front(h.id)));
                            c.rbuf = h.request;
                            self.drive(key);
                        }
                        None => {
                            let _ = proto::send_ctl(fd, proto::CLOSE, h.id);
                            let _ = proto::send_ctl(fd, proto::ASK, 0);
                        }
                    }
                }
                Ok(None) => {
                    self.front_gone();
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(worker = self.id, error = %e, "bad handoff from the front process");
                    return;
                }
            }
        }
    }

    /// The front process went away (stopped, restarted, upgraded): its socket
    /// closed. The connections it handed over become this worker's own: each
    /// finishes its response and then closes, since their ids mean nothing to the
    /// next front (whose own ids may be the same numbers) and the client's other
    /// descriptor, the front's, is gone. A new front may serve already (an
    /// upgraded one takes over the same socket), so it is asked for at once, and
    /// then by `reconnect_front` every second.
    fn front_gone(&mut self) {
        tracing::warn!(
            worker = self.id,
            "the conditioning front process went away; its connections here finish their responses, and a front is asked for at once and then every second"
        );
        // Dropping the descriptor closes it, which takes it out of epoll.
        self.front = None;
        self.shared.stats[self.id]
            .front_attached
            .store(0, Ordering::Relaxed);
        for (_, c) in self.conns.iter_mut() {
            if c.front_id() != 0 {
                c.via = None;
                c.flags.set(Flags::CLOSE_AFTER, true);
            }
        }
        self.reconnect_front();
    }

    /// At start, and once a second (`run`) while this worker has no front: connect
    /// to its socket (`serve --from`), again after a restart or a new binary's.
    /// Not while stopping.
    pub(super) fn reconnect_front(&mut self) {
        if self.front.is_some() || self.stopping.is_some() {
            return;
        }
        let Some(path) = self.shared.from.as_deref() else {
            return;
        };
        if let Ok(fd) = connect_front(self.poll.registry(), path, self.id) {
            tracing::info!(
                worker = self.id,
                "connected to the conditioning front process"
            );
            self.front = Some(fd);
            self.shared.stats[self.id]
                .front_attached
                .store(1, Ordering::Relaxed);
        }
    }

    /// A handed-over connection's request is answered and the client stays: the
    /// front process keeps it (KEEP) and this worker lets go of its copy.
    pub(super) fn hand_back(&mut self, key: usize) {
        self.pace_leave(key, true);
        let c = &mut self.conns[key];
        let id = c.front_id();
        c.via = None;
        // The front's descriptor shares the socket, so closing ours would not take
        // it out of this worker's epoll set: remove it explicitly.
        let _ = self.poll.registry().deregister(&mut c.sock);
        if let Some(f) = &self.front {
            let _ = sluicecc::proto::send_ctl(f.as_raw_fd(), sluicecc::proto::KEEP, id);
            let _ = sluicecc::proto::send_ctl(f.as_raw_fd(), sluicecc::proto::ASK, 0);
        }
        self.close(key, CloseReason::Done);
    }

    /// Per-range cap accounting for a new client address (shared by all workers).
    pub(super) fn range_cap(&self, peer: IpAddr) -> Cap {
        if self.snap.cap_exempt.iter().any(|c| c.contains(peer)) {
            Cap::Exempt
        } else if self.shared.caps.acquire(&RangeKey::of(peer)).is_some() {
            Cap::Over
        } else {
            Cap::Counted
        }
    }

    /// Read a PROXY protocol header off the front of the buffer: `Ok(true)` when
    /// done (the connection now carries the real client's address, and counts
    /// against that client's ranges), `Ok(false)` for more bytes, `Err` to close.
    pub(super) fn proxy_header(&mut self, key: usize) -> Result<bool, &'static str> {
        use sluice_http::proxy::{parse, Proxied};
        let c = &mut self.conns[key];
        let (len, source) = match parse(&c.rbuf).map_err(|e| e.0)? {
            Proxied::Partial => return Ok(false),
            Proxied::Done { len, source } => (len, source),
        };
        c.rbuf.drain(..len);
        c.flags.set(Flags::PROXY_PENDING, false);
        if let Some(t) = tls_of(&mut c.via) {
            // HTTPS: what followed the header is the handshake's start, for rustls.
            crate::tls::feed(&c.sock, t, &c.rbuf).map_err(|_| "bad TLS after the PROXY header")?;
            c.rbuf.clear();
        }
        let old = c.peer;
        // LOCAL / UNKNOWN: the balancer's own connection (a health check).
        let ip = source.map_or(old, |a| match a.ip() {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        });
        self.cond.forget(key as u32, old);
        let cap = self.range_cap(ip);
        let c = &mut self.conns[key];
        c.peer = ip;
        c.cap = cap;
        self.cond.park(key as u32, ip, Class::Incomplete);
        Ok(true)
    }

    /// Whether this tick's evictions ([`EVICTIONS_PER_TICK`]) are not all spent.
    pub(super) fn eviction_ration_left(&mut self) -> bool {
        if self.now_ms >= self.eviction_tick_ms + self.wheel.tick().as_millis() as Ms {
            self.eviction_tick_ms = self.now_ms;
            self.evictions = 0;
        }
        self.evictions < EVICTIONS_PER_TICK
    }

    /// Close one connection chosen by conditioning to make room. False if every
    /// connection is busy (then accepting pauses for a tick). Warns at most once a
    /// second.
    pub(super) fn make_room(&mut self, why: &str) -> bool {
        // Evictions are rationed (EVICTIONS_PER_TICK per worker per tick): attackers
        // reconnect as fast as they are closed, and unrationed eviction turns every
        // reconnect into an accept plus a close, burning the CPU the legitimate
        // clients need. Past the ration, newcomers wait in the kernel's backlog.
        let victim = if self.eviction_ration_left() {
            self.cond.victim()
        } else {
            None
        };
        if let Some((k, reason)) = victim {
            self.evictions += 1;
            self.close(k as usize, reason);
        } else {
            self.accept_paused_until = Some(self.now + self.wheel.tick());
        }
        if self
            .last_pressure_warn
            .is_none_or(|t| self.now.duration_since(t) >= Duration::from_secs(1))
        {
            self.last_pressure_warn = Some(self.now);
            tracing::warn!(
                worker = self.id,
                open = self.conns.len(),
                idle = self.cond.idle(),
                incomplete = self.cond.incomplete(),
                evicting = victim.map_or("nothing (all busy)", |(_, r)| r.as_str()),
                "{why}"
            );
        }
        victim.is_some()
    }

    /// The process is out of descriptors: this worker's file caches close the
    /// files no response is sending from, and the process's other caches do at
    /// their next sweep. How many of this worker's cached entries held one.
    fn shed_file_descriptors(&mut self) -> usize {
        self.files.iter_mut().map(|f| f.shed_descriptors()).sum()
    }

    pub(super) fn release_range(&self, peer: IpAddr, cap: Cap) {
        if cap != Cap::Exempt {
            self.shared.caps.release(&RangeKey::of(peer));
        }
    }
}

/// This worker's own connection to the front process at `path`, registered for its
/// handoffs and with `FRONT_CREDIT` connections asked for: the protocol's
/// ask-and-receive keeps every handoff whole, whichever worker asked. A front that
/// is not there (yet, or any more) is logged once as a warning, then at debug
/// level until one answers.
fn connect_front(
    registry: &mio::Registry,
    path: &std::path::Path,
    worker: usize,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::sync::atomic::AtomicBool;
    static TOLD: AtomicBool = AtomicBool::new(false);
    let connected = (|| {
        let fd = sluicecc::proto::connect_nonblocking(path)?;
        registry.register(
            &mut mio::unix::SourceFd(&fd.as_raw_fd()),
            Token(FRONT),
            Interest::READABLE,
        )?;
        for _ in 0..FRONT_CREDIT {
            sluicecc::proto::send_ctl(fd.as_raw_fd(), sluicecc::proto::ASK, 0)?;
        }
        Ok(fd)
    })();
    match &connected {
        Ok(_) => TOLD.store(false, Ordering::Relaxed),
        Err(e) if !TOLD.swap(true, Ordering::Relaxed) => {
            tracing::warn!(worker, path = %path.display(), error = %e, "no conditioning front process to connect to; asking again every second")
        }
        Err(e) => tracing::debug!(worker, error = %e, "still no conditioning front process"),
    }
    connected
}
