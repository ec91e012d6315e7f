//! `sluice condition`: connection conditioning in front of any server (seed 004's
//! Figure 1). This process owns the TCP listener, reads each request completely,
//! applies the conditioning stages, and hands the client's socket with its request
//! to whichever backend asks for one over a Unix-domain socket (`sluice-cc`'s
//! protocol). Backends answer on the socket themselves; the response never passes
//! through here.
//!
//! The stages (`--filters`), all in this one process, with the code `sluice serve`
//! uses:
//! - `packaging` (always on): a request is handed over only when complete, within
//!   `http.header_timeout` from its first byte; incomplete connections are counted
//!   per address range and the heaviest range's oldest goes first when room runs out
//!   (`sluice_condition::Conditioner`);
//! - `persist`: after a backend says KEEP, the connection comes back here and waits
//!   idle (counted per range, evicted oldest-first of the heaviest range under
//!   pressure) until its next request is complete. Without it, a handed-over
//!   connection is forgotten here and lives as long as its backend keeps it;
//! - `fair`: ready requests wait in one queue per /24 (IPv6 /64), served round
//!   robin, so one range's flood of requests waits behind everyone else's turn;
//! - `slowread`: the per-range connection caps (`sluice_condition::RangeCaps`): a
//!   range over its share is answered 503 here;
//! - `sanity`: a request sluice's parser refuses gets its 4xx from here and never
//!   reaches a backend (without it, the bytes are handed over as they came);
//! - `pass`: one more process in the chain that hands requests through unchanged
//!   ([`relay`]), to measure what each process in a chain costs (Figures 8 and 9).
//!
//! Must not: read a socket a backend holds (the descriptor is shared; its bytes
//! belong to the backend until it says KEEP or CLOSE), change a client socket's
//! flags after handing it over, or block.
//!
//! Costs per request: one `recv` (or more) into a pooled buffer, one parse, one
//! `sendmsg` carrying the descriptor, one 12-byte control message back. Memory: a
//! connection record and, only while a request is incomplete or ready, its buffer.

use crate::listener;
use crate::worker::{read_into, recycle, ReadOutcome};
use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use sluice_condition::addr::{addr_bits, prefix_mask};
use sluice_condition::{Cidr, Class, CloseReason, Conditioner, RangeCaps, RangeKey};
use sluice_config::Config;
use sluice_http::{parse_head, BodyFraming, Limits, Parsed};
use sluicecc::proto;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TCP: Token = Token(usize::MAX - 1);
const UNIX: Token = Token(usize::MAX - 2);
const BACKEND_BASE: usize = usize::MAX / 2;
const SWEEP: Duration = Duration::from_millis(100);
/// Most connections closed per sweep period to make room (1,280/s), as a worker of
/// `sluice serve` rations them: an attacker that reconnects as fast as it is
/// evicted then waits in the kernel's backlog instead of taking the whole CPU.
const EVICTIONS_PER_SWEEP: u32 = 128;
/// Largest request body the front buffers and hands over (a mirror takes GETs).
const MAX_BODY: usize = 64 * 1024;

/// Which stages run.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    pub persist: bool,
    pub fair: bool,
    pub slowread: bool,
    pub sanity: bool,
    /// Pass-through processes between this one and the backends.
    pub relays: usize,
}

impl Filters {
    /// `packaging,persist,fair,slowread,sanity` (the default) or any list of those
    /// and `pass`.
    pub fn parse(s: &str) -> Result<Filters, String> {
        let mut f = Filters::default();
        let mut packaging = false;
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "packaging" => packaging = true,
                "persist" => f.persist = true,
                "fair" => f.fair = true,
                "slowread" => f.slowread = true,
                "sanity" => f.sanity = true,
                "pass" => f.relays += 1,
                other => {
                    return Err(format!(
                        "--filters: unknown filter {other:?} (packaging, persist, fair, slowread, sanity, pass)"
                    ))
                }
            }
        }
        if !packaging {
            return Err("--filters: packaging is what the front process does (reading each request whole); it must be in the list".into());
        }
        Ok(f)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// Reading a request (its first byte at `since`, or accepted at `since`).
    Reading,
    /// Complete, waiting in the ready queue for a backend.
    Ready,
    /// Handed to backend `b` (a `backends` key); its bytes are the backend's.
    Backend(usize),
    /// Kept between requests (`persist`).
    Idle,
}

struct FConn {
    sock: TcpStream,
    peer: SocketAddr,
    gen: u32,
    st: St,
    since: u64,
    rbuf: Vec<u8>,
    /// The complete request waiting for a backend.
    ready: Vec<u8>,
    capped: bool,
}

struct Back {
    sock: OwnedFd,
    /// Connections it asked for and has not been given yet.
    credit: u32,
}

/// Run the front process until SIGTERM/SIGINT.
pub fn run(listen: SocketAddr, to: &Path, filters: Filters, config: Config) -> Result<(), String> {
    let nofile = crate::settings::raise_nofile_limit();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| format!("signals: {e}"))?;
    }
    // The chain: this process listens on `to` itself, or on the first relay's input.
    let mut relays = Vec::new();
    let first = if filters.relays == 0 {
        to.to_path_buf()
    } else {
        let hop = |i: usize| PathBuf::from(format!("{}.{i}", to.display()));
        let exe = std::env::current_exe().map_err(|e| format!("relays: {e}"))?;
        for i in 0..filters.relays {
            let down = if i + 1 == filters.relays {
                to.to_path_buf()
            } else {
                hop(i + 1)
            };
            let child = std::process::Command::new(&exe)
                .args(["condition", "--relay", "--from"])
                .arg(format!("unix:{}", hop(i).display()))
                .arg("--to")
                .arg(format!("unix:{}", down.display()))
                .spawn()
                .map_err(|e| format!("starting relay {i}: {e}"))?;
            relays.push(child);
        }
        hop(0)
    };
    let result = Front::new(listen, &first, filters, config, nofile, stop).and_then(|f| f.run());
    for mut r in relays {
        // They exit when this process's socket closes; make sure.
        let _ = r.kill();
        let _ = r.wait();
    }
    result
}

struct Front {
    poll: Poll,
    listener: TcpListener,
    unix: OwnedFd,
    unix_path: PathBuf,
    conns: Slab<FConn>,
    backends: Slab<Back>,
    cond: Conditioner,
    caps: RangeCaps,
    cap_exempt: Vec<Cidr>,
    /// Ready connections: one queue per range (`fair`), or one for all.
    queues: HashMap<u128, VecDeque<(usize, u32)>>,
    order: VecDeque<u128>,
    filters: Filters,
    limits: Limits,
    header_ms: u64,
    idle_ms: u64,
    max_conns: usize,
    gen: u32,
    epoch: Instant,
    now: u64,
    pool: Vec<Vec<u8>>,
    accept_paused: bool,
    stop: Arc<AtomicBool>,
    closes: [u64; CloseReason::ALL.len()],
    handed: u64,
    evictions: u32,
}

impl Front {
    fn new(
        listen: SocketAddr,
        unix_path: &Path,
        filters: Filters,
        config: Config,
        nofile: u64,
        stop: Arc<AtomicBool>,
    ) -> Result<Front, String> {
        let poll = Poll::new().map_err(|e| e.to_string())?;
        listener::ensure_free(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        let defer = config
            .condition
            .defer_accept
            .min(config.http.header_timeout)
            .as_secs_f64()
            .ceil() as u64;
        let mut tcp = listener::bind(listen, 4096, defer)
            .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        let unix = proto::listen(unix_path).map_err(|e| e.to_string())?;
        poll.registry()
            .register(&mut tcp, TCP, Interest::READABLE)
            .map_err(|e| e.to_string())?;
        poll.registry()
            .register(&mut SourceFd(&unix.as_raw_fd()), UNIX, Interest::READABLE)
            .map_err(|e| e.to_string())?;
        let room = nofile.saturating_sub(256) as usize;
        let max_conns = match config.condition.max_connections {
            0 => room,
            n => n.min(room),
        }
        .max(16);
        let c = &config.condition;
        let limit = |f: f64| ((max_conns as f64 * f).ceil() as u32).max(1);
        let cap_exempt = Cidr::parse_list(&c.cap_exempt, "condition.cap_exempt")?;
        let epoch = Instant::now();
        Ok(Front {
            poll,
            listener: tcp,
            unix,
            unix_path: unix_path.to_path_buf(),
            conns: Slab::with_capacity(max_conns.min(1 << 20)),
            backends: Slab::new(),
            cond: Conditioner::with_capacity(max_conns.min(1 << 20)),
            caps: RangeCaps::new([limit(c.cap_8), limit(c.cap_16), limit(c.cap_24)]),
            cap_exempt,
            queues: HashMap::new(),
            order: VecDeque::new(),
            limits: Limits {
                max_request_line: config.http.max_request_line,
                max_head: config.http.max_head,
                max_headers: config.http.max_headers,
            },
            header_ms: config.http.header_timeout.as_millis() as u64,
            idle_ms: config.http.keepalive_timeout.as_millis() as u64,
            filters,
            max_conns,
            gen: 0,
            epoch,
            now: 0,
            pool: Vec::new(),
            accept_paused: false,
            stop,
            closes: [0; CloseReason::ALL.len()],
            handed: 0,
            evictions: 0,
        })
    }

    fn run(mut self) -> Result<(), String> {
        use std::io::Write;
        let _ = writeln!(
            std::io::stdout(),
            "sluice condition: {} → unix:{} ({} connections at most)",
            self.listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            self.unix_path.display(),
            self.max_conns
        );
        let _ = std::io::stdout().flush();
        let mut events = Events::with_capacity(1024);
        let mut next_sweep = self.epoch + SWEEP;
        while !self.stop.load(Ordering::Relaxed) {
            let wait = next_sweep.saturating_duration_since(Instant::now());
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e.to_string());
                }
            }
            self.now = self.epoch.elapsed().as_millis() as u64;
            for ev in events.iter() {
                match ev.token() {
                    TCP => self.accept(),
                    UNIX => self.accept_backends(),
                    Token(t) if t >= BACKEND_BASE => self.backend_says(t - BACKEND_BASE),
                    Token(k) => self.client(k),
                }
            }
            self.dispatch();
            if Instant::now() >= next_sweep {
                next_sweep = Instant::now() + SWEEP;
                self.evictions = 0;
                self.sweep();
                if self.accept_paused {
                    self.accept_paused = false;
                    self.accept();
                }
            }
        }
        let _ = std::fs::remove_file(&self.unix_path);
        tracing::info!(handed = self.handed, "sluice condition: stopped");
        Ok(())
    }

    fn accept(&mut self) {
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
            let (sock, peer) = match self.listener.accept() {
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
            let exempt = self.cap_exempt.iter().any(|c| c.contains(peer.ip()));
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
            self.gen = self.gen.wrapping_add(1);
            let entry = self.conns.vacant_entry();
            let key = entry.key();
            let mut c = FConn {
                sock,
                peer,
                gen: self.gen,
                st: St::Reading,
                since: self.now,
                rbuf: Vec::new(),
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
                continue;
            }
            entry.insert(c);
            self.cond.park(key as u32, peer.ip(), Class::Incomplete);
            self.client(key);
        }
    }

    fn accept_backends(&mut self) {
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
    fn backend_says(&mut self, b: usize) {
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
    fn backend_gone(&mut self, b: usize) {
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
    fn kept(&mut self, key: usize) {
        let now = self.now;
        let c = &mut self.conns[key];
        c.st = St::Idle;
        c.since = now;
        // Bytes may have arrived (and their edge passed) while the backend held it.
        self.client(key);
    }

    /// Read what a client sent and see whether a whole request is here.
    fn client(&mut self, key: usize) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if !matches!(c.st, St::Reading | St::Idle) {
            return; // a backend's, or already waiting in the queue
        }
        // The worker's read (pooled buffer, into spare capacity): until EAGAIN, since
        // this loop does not track RDHUP.
        let max = self.limits.max_head + MAX_BODY;
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
    fn package(&mut self, key: usize) -> Option<bool> {
        let c = &mut self.conns[key];
        if c.rbuf.is_empty() {
            return Some(false);
        }
        let len = match parse_head(&c.rbuf, &self.limits) {
            Ok(Parsed::Partial) => return Some(false),
            Ok(Parsed::Complete(head)) => match head.framing() {
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
        c.ready = c.rbuf.drain(..len).collect();
        c.st = St::Ready;
        let ip = c.peer.ip();
        let gen = c.gen;
        self.cond.park(key as u32, ip, Class::Active);
        let range = if self.filters.fair {
            let (bits, v4) = addr_bits(ip);
            bits & prefix_mask(if v4 { 24 } else { 64 }, v4)
        } else {
            0
        };
        let q = self.queues.entry(range).or_default();
        if q.is_empty() {
            self.order.push_back(range);
        }
        q.push_back((key, gen));
        Some(true)
    }

    /// Answer a refused request here and close: it never reaches a backend.
    fn refuse(&mut self, key: usize, status: u16, why: &str) {
        let c = &self.conns[key];
        let msg = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{why}\n",
            sluice_http::response::reason(status),
            why.len() + 1
        );
        send_best_effort(&c.sock, msg.as_bytes());
        self.close(key, CloseReason::BadRequest);
    }

    /// Hand ready requests to backends that asked, round robin over ranges.
    fn dispatch(&mut self) {
        while let Some(range) = self.order.front().copied() {
            let Some(b) = self
                .backends
                .iter()
                .filter(|(_, bk)| bk.credit > 0)
                .max_by_key(|(_, bk)| bk.credit)
                .map(|(k, _)| k)
            else {
                return;
            };
            self.order.pop_front();
            let q = self.queues.get_mut(&range).expect("queued range");
            let (key, gen) = q.pop_front().expect("non-empty queue");
            if q.is_empty() {
                self.queues.remove(&range);
            } else {
                self.order.push_back(range);
            }
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
                    let q = self.queues.entry(range).or_default();
                    if q.is_empty() {
                        self.order.push_front(range);
                    }
                    q.push_front((key, gen));
                    return;
                }
                Err(_) => {
                    let q = self.queues.entry(range).or_default();
                    if q.is_empty() {
                        self.order.push_front(range);
                    }
                    q.push_front((key, gen));
                    self.backend_gone(b);
                }
            }
        }
    }

    /// Deadlines: a request must be whole `header_timeout` after its first byte
    /// (after accept for the first one); a kept connection waits `keepalive_timeout`.
    fn sweep(&mut self) {
        let now = self.now;
        let expired: Vec<(usize, CloseReason)> = self
            .conns
            .iter()
            .filter_map(|(k, c)| match c.st {
                St::Reading if now >= c.since + self.header_ms => {
                    Some((k, CloseReason::HeaderTimeout))
                }
                St::Idle if now >= c.since + self.idle_ms => Some((k, CloseReason::IdleTimeout)),
                _ => None,
            })
            .collect();
        for (k, why) in expired {
            if why == CloseReason::HeaderTimeout && !self.conns[k].rbuf.is_empty() {
                send_best_effort(
                    &self.conns[k].sock,
                    b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
            self.close(k, why);
        }
    }

    fn close(&mut self, key: usize, why: CloseReason) {
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

fn send_best_effort(sock: &TcpStream, msg: &[u8]) {
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

/// `sluice condition --relay`: one pass-through process of a chain. It asks the
/// stage before it for a connection whenever the stage after it asks, hands each
/// one on unchanged, and passes KEEP and CLOSE back; it holds no connection
/// itself. Exits when the stage before it goes away.
pub fn relay(from: &Path, to: &Path) -> Result<(), String> {
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
