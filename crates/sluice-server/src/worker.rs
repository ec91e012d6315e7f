//! One worker: an epoll loop (mio) over its own `SO_REUSEPORT` listeners and its
//! own connections. Shared with other workers: the snapshot (read on change), the
//! stop flag, the server-wide connection count and the per-range cap counters
//! (relaxed atomics); so no locks on the request path.
//!
//! The connection state machine, driven by [`Worker::drive`]:
//!
//! ```text
//!  accept ─► HEAD (reading a request head, total deadline = header_timeout)
//!             │ complete head ─► phases::respond ─► SEND (deadline = send_timeout
//!             │                                     since the last progress, and
//!             │                                     the minimum-rate window)
//!             │                      response done ─┤ (big bodies in turns: sendq)
//!             │   ◄── more bytes buffered (pipelined)┤
//!             │   IDLE (no buffer held, deadline = keepalive_timeout)
//!             │                      last response, request bytes unread ─► LINGER
//!             └─ error / timeout / EOF / close / evicted ─► closed (with a reason)
//! ```
//!
//! Conditioning (`sluice-condition`) is consulted at four points: `adopt` (per-range
//! caps), the end of `drive` (the connection's class: incomplete, idle or busy),
//! `make_room` (which connection gives way at the limit) and `check_rate` (slow
//! readers). Every close goes through `close` with a [`CloseReason`].
//!
//! Sockets are registered once, edge-triggered, for both directions;
//! `read_blocked`/`write_blocked` remember which side last saw `EAGAIN`, so a
//! keep-alive request costs read + sendmsg and no epoll_ctl.
//!
//! Memory: an idle keep-alive connection holds no buffer (its read buffer goes back
//! to the worker's pool), just its `Conn` record in the slab, one wheel entry and
//! its links in the conditioning trees' side tables.

use crate::accesslog::{Pending, WorkerLog};
use crate::phases::{self, PhaseCtx};
use crate::send::{Flush, Outgoing, Plain};
use crate::shared::Shared;
use crate::snapshot::Snapshot;
use crate::tls;
use crate::wheel::Wheel;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use sluice_condition::slowread::{RateVerdict, RateWindow};
use sluice_condition::{Class, CloseReason, Conditioner, RangeKey};
use sluice_http::date::DateCache;
use sluice_http::response::{write_status_line, Response};
use sluice_http::{parse_head, BodyFraming, Limits, Method, Parsed};
use sluice_static::StaticHandler;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

const LISTENER_BASE: usize = usize::MAX / 2;
/// The connection to a `sluice condition` front process (`serve --from`).
const FRONT: usize = LISTENER_BASE - 1;
/// The disk pool's wake-up: cold ranges this worker parked are cached now.
const DISK: usize = LISTENER_BASE - 2;
/// Connections a worker asks the front process for ahead of need.
const FRONT_CREDIT: u32 = 64;
const READ_CHUNK: usize = 4096;
const POOL_MAX: usize = 256;
/// Most connections a worker evicts per 100 ms tick to make room (640/s/worker).
const EVICTIONS_PER_TICK: u32 = 64;
/// Body bytes one response may send per turn before others get theirs.
const SEND_TURN: u64 = 256 * 1024;
/// Most wall time one pass over the send queue takes before new events are read.
/// With 200 downloads on a worker with a core of its own, a newcomer's 1 KiB p99
/// measured 2.5 ms at 1 ms, 1.5 ms at 250 µs, 0.7 ms at 125 µs (BENCHMARKS.md
/// "heavy-range"); the download throughput did not move beyond noise.
const SENDQ_BUDGET: Duration = Duration::from_micros(125);
/// Longest a closing connection lingers to drain what the client still sends.
const LINGER_MS: Ms = 2000;
/// Most bytes a lingering connection discards before it is closed anyway.
const LINGER_BYTES: u32 = 1 << 20;

/// Milliseconds since the worker started: connection times are stored this way
/// (8 bytes, not 16) because an idle connection's record is most of its memory.
type Ms = u64;
const NEVER: Ms = u64::MAX;

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for (more of) a request head since `started`; first skipping
    /// `discard` bytes of the last request's body (u32: `http.max_body_discard` is
    /// at most 2^30). The count lives here, in the enum's padding, not in `Conn`.
    Head { started: Ms, discard: u32 },
    /// Sending a response; `last` is the last time bytes moved.
    Send { last: Ms },
    /// Keep-alive, nothing buffered.
    Idle { since: Ms },
    /// The last response is written and our side is shut down; reading and
    /// discarding what the client still sends (bounded in time and bytes) so that
    /// closing does not send a RST that destroys the response's tail (RFC 9112 §9.6).
    /// At most `left` more bytes are read and thrown away.
    Linger { since: Ms, left: u32 },
    /// Answering an errant client slowly (`tarpit`, `oversize`) until `until`; the
    /// rest of its state is in `Worker::drips`. Holds no buffers.
    Drip { until: Ms },
}

struct Conn {
    sock: TcpStream,
    peer: IpAddr,
    gen: u32,
    phase: Phase,
    rbuf: Vec<u8>,
    /// The response being sent; `None` between responses (pooled, so an idle
    /// connection does not carry it).
    out: Option<Box<Outgoing>>,
    requests: u32,
    /// Eight yes/no facts about the connection in one byte (see [`Flags`]): an
    /// idle connection's record is most of what it costs.
    flags: Flags,
    /// How the per-range caps see it (over its cap: its request gets 503).
    cap: Cap,
    /// Why it will close once its last response is written.
    why: CloseReason,
    /// How it came: `None` for plain HTTP from a listener (most connections, so
    /// the rest costs them one pointer).
    via: Option<Box<Via>>,
    deadline: Ms,
    /// When this connection's live wheel entry comes up (`NEVER` if none).
    wheel_at: Ms,
}

/// A connection's yes/no state, one bit each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Flags(u8);

impl Flags {
    /// Close once the response in flight is written.
    const CLOSE_AFTER: u8 = 1;
    /// The socket said EAGAIN on read; wait for the next readable edge.
    const READ_BLOCKED: u8 = 2;
    /// The socket said EAGAIN on write; wait for the next writable edge.
    const WRITE_BLOCKED: u8 = 4;
    /// The client shut its sending side; answer what is buffered, then close.
    const PEER_CLOSED: u8 = 8;
    /// epoll reported RDHUP: do not trust a short read to mean "drained".
    const RDHUP: u8 = 16;
    /// Request bytes may be left unread when we close (a refused head, a body we
    /// do not read): close by lingering, not at once.
    const LINGER: u8 = 32;
    /// Waiting in the worker's send queue for its next turn.
    const QUEUED: u8 = 64;
    /// Waiting for a PROXY protocol header (a `server.proxy_protocol` listener).
    const PROXY_PENDING: u8 = 128;

    fn has(self, f: u8) -> bool {
        self.0 & f != 0
    }
    fn set(&mut self, f: u8, on: bool) {
        if on {
            self.0 |= f;
        } else {
            self.0 &= !f;
        }
    }
}

/// A connection that is not plain HTTP from a listener (boxed in `Conn::via`, so
/// the size difference between the variants costs nothing per connection).
#[allow(clippy::large_enum_variant)]
enum Via {
    /// HTTPS: its TLS session (`tls.rs`).
    Tls(rustls::ServerConnection),
    /// Handed over by a `sluice condition` front process, with its id there. It
    /// carries exactly one request; its socket is not read here.
    Front(u64),
}

/// The TLS session of an HTTPS connection (a function of the field, not of the
/// whole `Conn`, so the socket can be borrowed beside it).
fn tls_of(via: &mut Option<Box<Via>>) -> Option<&mut rustls::ServerConnection> {
    match via.as_deref_mut() {
        Some(Via::Tls(t)) => Some(t),
        _ => None,
    }
}

impl Conn {
    /// The front process's id for a handed-over connection, 0 otherwise.
    fn front_id(&self) -> u64 {
        match self.via.as_deref() {
            Some(Via::Front(id)) => *id,
            _ => 0,
        }
    }
}

/// A connection and the per-range caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cap {
    /// From an exempt range: not counted.
    Exempt,
    /// Counted against its ranges.
    Counted,
    /// Counted, and its range was over a cap when it connected.
    Over,
}

enum Step {
    /// A response is queued; drive again to send it.
    Responded,
    /// Need more bytes from the client.
    NeedMore,
    Close,
    /// The connection left the request cycle (an errant-client answer took it).
    Parked,
}

/// A connection answered slowly (`tarpit`, `oversize`): what to send each turn.
struct Drip {
    /// Sent every `every` ms: a tarpit's line, or a block of an oversize body.
    piece: std::sync::Arc<[u8]>,
    every: Ms,
    /// Bytes still allowed.
    budget: u64,
    sent: u64,
    log: Option<Pending>,
}

pub struct Worker {
    id: usize,
    poll: Poll,
    listeners: Vec<TcpListener>,
    conns: Slab<Conn>,
    wheel: Wheel,
    shared: Arc<Shared>,
    snap: Arc<Snapshot>,
    snap_gen: u64,
    /// One file handler per site (`snap.sites` order).
    files: Vec<StaticHandler>,
    /// Each site's log output (`WorkerLog` index), `None` = not logged.
    site_log: Vec<Option<u8>>,
    limits: Limits,
    date: DateCache,
    pool: Vec<Vec<u8>>,
    /// Boxed on purpose: a `Conn` holds `Option<Box<Outgoing>>`, and the pool hands
    /// the same allocations back and forth without moving the struct.
    #[allow(clippy::vec_box)]
    out_pool: Vec<Box<Outgoing>>,
    log: WorkerLog,
    gen: u32,
    now: Instant,
    epoch: Instant,
    now_ms: Ms,
    /// Next sweep of the open-file cache.
    next_expire_ms: Ms,
    accept_paused_until: Option<Instant>,
    last_pressure_warn: Option<Instant>,
    stopping: Option<Instant>,
    /// Who is incomplete and who is idle, by address range (sluice-condition).
    cond: Conditioner,
    /// Evictions in the current tick (see `make_room`), and when the tick began.
    evictions: u32,
    eviction_tick_ms: Ms,
    /// Responses waiting for their next send turn, round robin (see `run_sendq`).
    sendq: std::collections::VecDeque<(u32, u32)>,
    /// Most incomplete connections before the heaviest range's oldest is closed.
    max_incomplete: usize,
    /// Which listeners expect a PROXY protocol header (`server.proxy_protocol`).
    proxy_listeners: Vec<bool>,
    /// Which listeners are HTTPS (`tls.listen`).
    tls_listeners: Vec<bool>,
    /// `serve --from`: the Unix socket to the front process, and scratch for it.
    front: Option<std::os::fd::OwnedFd>,
    front_buf: Vec<u8>,
    /// Connections in `Phase::Drip`, by slab key.
    drips: std::collections::HashMap<usize, Drip>,
    /// Top URLs and address ranges for the status page (published once a second).
    talkers: sluice_status::top::Talkers,
    last_publish: Instant,
    /// Where the disk pool reports this worker's cold ranges as read (`disk.rs`).
    disk_done: Arc<crate::disk::Completions>,
    disk_keys: Vec<(u32, u32)>,
    /// Test hook: a request for exactly this path panics the worker (set only by
    /// the `SLUICE_TEST_PANIC_PATH` environment variable, for the supervision test).
    panic_path: Option<String>,
}

impl Worker {
    pub fn new(
        id: usize,
        listeners: Vec<TcpListener>,
        shared: Arc<Shared>,
        log: WorkerLog,
        max_conns: usize,
    ) -> io::Result<Worker> {
        let poll = Poll::new()?;
        let disk_done =
            crate::disk::Completions::new(mio::Waker::new(poll.registry(), Token(DISK))?);
        let mut listeners = listeners;
        for (i, l) in listeners.iter_mut().enumerate() {
            poll.registry()
                .register(l, Token(LISTENER_BASE + i), Interest::READABLE)?;
        }
        let (snap, snap_gen) = shared.current();
        // Which listeners are PROXY-protocol or HTTPS ones: by their address.
        let marked = |addrs: &[String]| -> Vec<bool> {
            let addrs: Vec<std::net::SocketAddr> =
                addrs.iter().filter_map(|a| a.parse().ok()).collect();
            listeners
                .iter()
                .map(|l| l.local_addr().is_ok_and(|a| addrs.contains(&a)))
                .collect()
        };
        let proxy_listeners = marked(&snap.config.server.proxy_protocol);
        let tls_listeners = marked(&snap.config.tls.listen);
        let front = match &shared.from {
            Some(path) => {
                // Its own connection to the front: the protocol's ask-and-receive
                // keeps every handoff whole, whichever worker asked.
                let fd = sluicecc::proto::connect_nonblocking(path)?;
                poll.registry().register(
                    &mut mio::unix::SourceFd(&fd.as_raw_fd()),
                    Token(FRONT),
                    Interest::READABLE,
                )?;
                for _ in 0..FRONT_CREDIT {
                    sluicecc::proto::send_ctl(fd.as_raw_fd(), sluicecc::proto::ASK, 0)?;
                }
                Some(fd)
            }
            None => None,
        };
        let files = snap.static_handlers()?;
        let site_log = site_logs(&snap, &log);
        let snap_max_incomplete = snap.config.condition.max_incomplete;
        let shared_workers = shared.stats.len().max(1);
        let now = Instant::now();
        Ok(Worker {
            id,
            poll,
            listeners,
            // Sized for the most connections this worker may hold, as nginx sizes its
            // connection array: untouched pages cost no memory, and the slab never
            // reallocates (and doubles) under a connection flood.
            conns: Slab::with_capacity(max_conns.min(1 << 20)),
            wheel: Wheel::new(100, 1024),
            limits: snap.limits(),
            shared,
            snap,
            snap_gen,
            files,
            site_log,
            date: DateCache::default(),
            pool: Vec::new(),
            out_pool: Vec::new(),
            log,
            gen: 0,
            now,
            epoch: now,
            now_ms: 0,
            next_expire_ms: 1000,
            accept_paused_until: None,
            last_pressure_warn: None,
            stopping: None,
            disk_done,
            disk_keys: Vec::new(),
            panic_path: std::env::var("SLUICE_TEST_PANIC_PATH").ok(),
            talkers: Default::default(),
            last_publish: now,
            drips: Default::default(),
            proxy_listeners,
            tls_listeners,
            front,
            front_buf: Vec::new(),
            cond: Conditioner::with_capacity(max_conns.min(1 << 20)),
            evictions: 0,
            eviction_tick_ms: 0,
            sendq: std::collections::VecDeque::new(),
            // A worker's share of the server's incomplete-connection budget.
            max_incomplete: ((max_conns as f64 * snap_max_incomplete) as usize / shared_workers)
                .max(1),
        })
    }

    pub fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut due = Vec::new();
        loop {
            // Responses waiting for a send turn: look for new events without sleeping.
            let timeout = if self.sendq.is_empty() {
                self.wheel.tick()
            } else {
                Duration::ZERO
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            self.now = Instant::now();
            self.now_ms = self.now.duration_since(self.epoch).as_millis() as Ms;
            self.refresh_snapshot();
            for ev in events.iter() {
                let t = ev.token().0;
                if t == FRONT {
                    self.take_handoffs();
                    continue;
                }
                if t == DISK {
                    self.disk_ready();
                    continue;
                }
                if t >= LISTENER_BASE {
                    self.accept(t - LISTENER_BASE);
                    continue;
                }
                let Some(c) = self.conns.get_mut(t) else {
                    continue;
                };
                // A handed-over connection's socket is the front's to read.
                if (ev.is_readable() || ev.is_read_closed() || ev.is_error()) && c.front_id() == 0 {
                    c.flags.set(Flags::READ_BLOCKED, false);
                }
                if ev.is_read_closed() || ev.is_error() {
                    // The FIN may already sit behind the data: read until EOF,
                    // because no further edge will announce it.
                    c.flags.set(Flags::RDHUP, true);
                }
                if ev.is_writable() || ev.is_write_closed() || ev.is_error() {
                    c.flags.set(Flags::WRITE_BLOCKED, false);
                    // A response in flight whose socket drained takes its next turn
                    // from the send queue, after this batch's reads and accepts:
                    // a batch of 100 writable downloads sent inline would hold a
                    // new request back by 100 turns.
                    if matches!(c.phase, Phase::Send { .. })
                        && c.out.is_some()
                        && !ev.is_error()
                        && !c.flags.has(Flags::RDHUP)
                    {
                        if !c.flags.has(Flags::QUEUED) {
                            c.flags.set(Flags::QUEUED, true);
                            self.sendq.push_back((t as u32, c.gen));
                        }
                        continue;
                    }
                }
                self.drive(t);
            }
            self.run_sendq();
            self.wheel.advance(self.now_ms, &mut due);
            for (key, gen) in due.drain(..) {
                self.on_timer(key as usize, gen);
            }
            if let Some(until) = self.accept_paused_until {
                if self.now >= until {
                    self.accept_paused_until = None;
                    for i in 0..self.listeners.len() {
                        self.accept(i);
                    }
                }
            }
            self.log.tick(self.now);
            if self.now_ms >= self.next_expire_ms {
                self.next_expire_ms = self.now_ms + 1000;
                for f in &mut self.files {
                    f.expire(self.now);
                }
                self.publish_status();
            }
            if self.shared.stop.load(Ordering::Relaxed) && self.stopping.is_none() {
                self.begin_stop();
            }
            if let Some(deadline) = self.stopping {
                if self.conns.is_empty() || self.now >= deadline {
                    if !self.conns.is_empty() {
                        tracing::info!(
                            worker = self.id,
                            open = self.conns.len(),
                            "grace period over; closing"
                        );
                    }
                    self.log.flush();
                    return Ok(());
                }
            }
        }
    }

    /// Carry out `drop`, `tarpit` or `oversize` for the request just parsed.
    /// Tarpits and oversize answers leave conditioning's accounting (no range cap,
    /// no eviction, not in `open`), hold no buffers, and are capped server-wide by
    /// `rules.tarpit_max`; past the cap they are dropped.
    fn errant_answer(
        &mut self,
        key: usize,
        e: sluice_rules::classify::Errant,
        log: Option<Pending>,
    ) -> Step {
        use sluice_rules::classify::Errant;
        const OVERSIZE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nServer: sluice\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000000000000\r\nConnection: close\r\n\r\n";
        const TARPIT_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nServer: sluice\r\nContent-Type: text/plain; charset=utf-8\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
        /// An oversize body goes out 4 KiB every 250 ms: 16 KiB/s, 1 MiB in 64 s.
        const OVERSIZE_PIECE: usize = 4096;
        let full = self.shared.drips.load(Ordering::Relaxed) >= self.snap.config.rules.tarpit_max;
        let (head, piece, every, budget, for_ms): (&[u8], std::sync::Arc<[u8]>, Ms, u64, u64) =
            match e {
                Errant::Tarpit {
                    text,
                    every_ms,
                    for_ms,
                } if !full => {
                    let mut line = text.as_bytes().to_vec();
                    line.push(b'\n');
                    (TARPIT_HEAD, line.into(), every_ms, u64::MAX, for_ms)
                }
                Errant::Oversize { bytes, for_ms } if !full => {
                    // One block shared by every oversize answer: a connection holds
                    // a reference, not 4 KiB of its own.
                    static PIECE: std::sync::OnceLock<std::sync::Arc<[u8]>> =
                        std::sync::OnceLock::new();
                    let piece = PIECE.get_or_init(|| vec![b'0'; OVERSIZE_PIECE].into());
                    (OVERSIZE_HEAD, piece.clone(), 250, bytes, for_ms)
                }
                _ => {
                    // drop (asked for, or over the tarpit cap): no response at all.
                    let c = &mut self.conns[key];
                    if let Some(p) = log {
                        self.log.line(
                            SystemTime::now(),
                            c.peer,
                            &p.with_status(444).with_note("drop"),
                            0,
                        );
                    }
                    c.why = CloseReason::Errant;
                    return Step::Close;
                }
            };
        let now = self.now_ms;
        let c = &mut self.conns[key];
        let (peer, cap) = (c.peer, c.cap);
        c.cap = Cap::Exempt;
        c.rbuf = Vec::new();
        c.phase = Phase::Drip {
            until: now + for_ms,
        };
        let sent = conn_send(c, head);
        self.release_range(peer, cap);
        self.cond.forget(key as u32, peer);
        self.shared.open.fetch_sub(1, Ordering::Relaxed);
        self.shared.drips.fetch_add(1, Ordering::Relaxed);
        self.drips.insert(
            key,
            Drip {
                piece,
                every,
                budget,
                sent: sent as u64,
                log,
            },
        );
        self.set_deadline(key, (now + every).min(now + for_ms));
        Step::Parked
    }

    /// A dripping connection's timer: send the next piece, or end it.
    fn drip_turn(&mut self, key: usize) {
        let now = self.now_ms;
        let Phase::Drip { until } = self.conns[key].phase else {
            return;
        };
        let Some(d) = self.drips.get_mut(&key) else {
            self.close(key, CloseReason::Errant);
            return;
        };
        if now >= until || d.budget == 0 {
            self.close(key, CloseReason::Errant);
            return;
        }
        let n = (d.piece.len() as u64).min(d.budget) as usize;
        let sent = conn_send(&mut self.conns[key], &d.piece[..n]);
        if sent < 0 {
            self.close(key, CloseReason::ClientGone);
            return;
        }
        d.sent += sent as u64;
        d.budget -= sent as u64;
        let next = (now + d.every).min(until);
        // This runs from the timer that just fired: re-arm like any other deadline.
        let c = &mut self.conns[key];
        c.deadline = next;
        let gen = c.gen;
        self.rearm(key, gen);
    }

    /// Once a second: connections by state, and the top lists, for the status page.
    /// O(connections of this worker): about a millisecond at 20,000.
    fn publish_status(&mut self) {
        let secs = self.now.duration_since(self.last_publish).as_secs_f64();
        self.last_publish = self.now;
        // One pass over the connections: states counted while the top lists read
        // each connection's address.
        let mut states = [0u64; sluice_status::counters::STATES.len()];
        let conns = self.conns.iter().map(|(_, c)| {
            let i = match c.phase {
                Phase::Head { .. } => 0,
                // In the round-robin queue, waiting for its next send turn.
                Phase::Send { .. } if c.flags.has(Flags::QUEUED) => 4,
                Phase::Send { .. } => 1,
                Phase::Idle { .. } => 2,
                Phase::Linger { .. } => 3,
                Phase::Drip { .. } => 5,
            };
            states[i] += 1;
            (
                c.peer,
                matches!(c.phase, Phase::Head { .. }) && c.out.is_none(),
            )
        });
        let sites = &self.snap.sites;
        let name = |site: u16, i: u32| {
            let s = &sites[usize::from(site)];
            let origin = s.rules.as_ref().map_or("?".into(), |r| r.rule_origin(i));
            if sites.len() > 1 {
                format!("{} {origin}", s.conf.label)
            } else {
                origin
            }
        };
        let list = self.talkers.publish(conns, secs, name);
        let st = &self.shared.stats[self.id];
        for (a, n) in st.states.iter().zip(states) {
            a.store(n, Ordering::Relaxed);
        }
        self.shared.board.publish(self.id, list);
    }

    fn refresh_snapshot(&mut self) {
        let g = self.shared.generation.load(Ordering::Acquire);
        if g == self.snap_gen {
            return;
        }
        let (snap, g) = self.shared.current();
        match snap.static_handlers() {
            Ok(files) => {
                self.files = files;
                self.site_log = site_logs(&snap, &self.log);
                // Rule indices belong to the old rules.
                self.talkers.reset_rules();
                self.limits = snap.limits();
                self.snap = snap;
            }
            Err(e) => {
                tracing::error!(worker = self.id, error = %e, "cannot open new root; keeping the old one")
            }
        }
        self.snap_gen = g;
    }

    fn begin_stop(&mut self) {
        self.stopping = Some(self.now + self.snap.config.server.shutdown_grace);
        for mut l in self.listeners.drain(..) {
            let _ = self.poll.registry().deregister(&mut l);
        }
        let idle: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.out.is_none() && c.rbuf.is_empty())
            .map(|(k, _)| k)
            .collect();
        for k in idle {
            self.close(k, CloseReason::Shutdown);
        }
        for (_, c) in self.conns.iter_mut() {
            c.flags.set(Flags::CLOSE_AFTER, true);
            c.why = CloseReason::Shutdown;
        }
    }

    fn accept(&mut self, li: usize) {
        if self.accept_paused_until.is_some() || self.stopping.is_some() {
            return;
        }
        loop {
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
                            self.shared.stats[self.id].closes[why.index()]
                                .fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                    let proxy = self.proxy_listeners.get(li).copied().unwrap_or(false);
                    let tls = self.tls_listeners.get(li).copied().unwrap_or(false);
                    self.adopt(sock, addr.ip(), proxy, tls);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE/ENFILE/ENOBUFS: out of descriptors or memory (the limit is
                    // shared with the other workers). Free one and retry.
                    if !self.make_room(&format!("accept failed: {e}")) {
                        return;
                    }
                }
            }
        }
    }

    /// Take a new connection: the one entry point for accepted sockets (and, later,
    /// sockets handed over by a conditioning front process).
    fn adopt(&mut self, sock: TcpStream, peer: IpAddr, proxy: bool, tls: bool) -> Option<usize> {
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
        let _ = sock.set_nodelay(true);
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
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        let mut conn = Conn {
            sock,
            peer,
            gen: self.gen,
            phase: Phase::Head {
                started: now,
                discard: 0,
            },
            rbuf: Vec::new(),
            out: None,
            requests: 0,
            flags: Flags(Flags::READ_BLOCKED | if proxy { Flags::PROXY_PENDING } else { 0 }),
            cap,
            why: CloseReason::Done,
            via: tls,
            deadline: now + ms(self.snap.config.http.header_timeout),
            wheel_at: NEVER,
        };
        if self
            .poll
            .registry()
            .register(
                &mut conn.sock,
                Token(key),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            self.release_range(peer, cap);
            return None;
        }
        conn.wheel_at = self.wheel.insert(conn.deadline, (key as u32, conn.gen));
        entry.insert(conn);
        self.shared.open.fetch_add(1, Ordering::Relaxed);
        self.shared.stats[self.id]
            .accepted
            .fetch_add(1, Ordering::Relaxed);
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

    /// `serve --from`: adopt the connections a `sluice condition` front process
    /// handed over, each with exactly one complete request, through the same entry
    /// point as accepted ones. Their sockets are never read here (the front reads
    /// the next request once it hears KEEP).
    fn take_handoffs(&mut self) {
        use sluicecc::proto;
        loop {
            let Some(fd) = self.front.as_ref().map(|f| f.as_raw_fd()) else {
                return;
            };
            match proto::recv_handoff(fd, &mut self.front_buf) {
                Ok(Some(h)) => {
                    let sock = TcpStream::from_std(std::net::TcpStream::from(h.fd));
                    match self.adopt(sock, h.peer.ip(), false, false) {
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
                    tracing::error!(
                        worker = self.id,
                        "the conditioning front process went away; stopping"
                    );
                    self.front = None;
                    self.shared.stop.store(true, Ordering::Relaxed);
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

    /// A handed-over connection's request is answered and the client stays: the
    /// front process keeps it (KEEP) and this worker lets go of its copy.
    fn hand_back(&mut self, key: usize) {
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
    fn range_cap(&self, peer: IpAddr) -> Cap {
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
    fn proxy_header(&mut self, key: usize) -> Result<bool, &'static str> {
        use sluice_http::proxy::{parse, Proxied};
        let c = &mut self.conns[key];
        let (len, source) = match parse(&c.rbuf).map_err(|e| e.0)? {
            Proxied::Partial => return Ok(false),
            Proxied::Done { len, source } => (len, source),
        };
        c.rbuf.drain(..len);
        c.flags.set(Flags::PROXY_PENDING, false);
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
    fn eviction_ration_left(&mut self) -> bool {
        if self.now_ms >= self.eviction_tick_ms + self.wheel.tick().as_millis() as Ms {
            self.eviction_tick_ms = self.now_ms;
            self.evictions = 0;
        }
        self.evictions < EVICTIONS_PER_TICK
    }

    /// Close one connection chosen by conditioning to make room. False if every
    /// connection is busy (then accepting pauses for a tick). Warns at most once a
    /// second.
    fn make_room(&mut self, why: &str) -> bool {
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

    fn release_range(&self, peer: IpAddr, cap: Cap) {
        if cap != Cap::Exempt {
            self.shared.caps.release(&RangeKey::of(peer));
        }
    }

    fn on_timer(&mut self, key: usize, gen: u32) {
        let now = self.now_ms;
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if c.gen != gen {
            return;
        }
        if c.deadline <= now {
            let reason = match c.phase {
                Phase::Head { .. } => CloseReason::HeaderTimeout,
                Phase::Idle { .. } => CloseReason::IdleTimeout,
                Phase::Send { last } => {
                    // Two limits share this deadline: no progress for send_timeout,
                    // and the minimum rate over a window (slow-read prevention).
                    if now >= last + ms(self.snap.config.http.send_timeout) {
                        CloseReason::SendTimeout
                    } else {
                        match self.check_rate(key) {
                            None => CloseReason::SlowRead,
                            Some(d) => {
                                // Still fine: re-arm below for the next check.
                                self.conns[key].deadline = d;
                                self.rearm(key, gen);
                                return;
                            }
                        }
                    }
                }
                Phase::Linger { .. } => {
                    // The lingering period is over: a normal end, not a timeout.
                    self.close(key, CloseReason::Done);
                    return;
                }
                Phase::Drip { .. } => {
                    self.drip_turn(key);
                    return;
                }
            };
            let c = &mut self.conns[key];
            tracing::debug!(peer = %c.peer, why = reason.as_str(), "timeout");
            self.shared.stats[self.id]
                .timeouts
                .fetch_add(1, Ordering::Relaxed);
            if matches!(c.phase, Phase::Head { .. }) && c.out.is_none() && !c.rbuf.is_empty() {
                // Part of a head arrived, and the rest did not in time: say so
                // (best effort, one non-blocking send) and log it. A connection that
                // sent nothing at all is closed silently.
                conn_send(
                    c,
                    b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                );
                if self.log.enabled() {
                    let p = Pending::rejected(
                        &c.rbuf,
                        408,
                        self.site_log[self.snap.hosts.default_site()],
                    );
                    self.log.line(SystemTime::now(), c.peer, &p, 0);
                }
            }
            self.close(key, reason);
            return;
        }
        self.rearm(key, gen);
    }

    /// After a timer fired early (the deadline moved later), put the connection's
    /// one wheel entry back at its deadline.
    fn rearm(&mut self, key: usize, gen: u32) {
        let c = &mut self.conns[key];
        if c.wheel_at <= self.now_ms || c.wheel_at == NEVER {
            c.wheel_at = self.wheel.insert(c.deadline, (key as u32, gen));
        }
    }

    /// Give each queued response one more turn (at most [`SEND_TURN`] bytes), in
    /// arrival order, for at most [`SENDQ_BUDGET`] of wall time; what is left waits
    /// for the next loop turn, after new events. So a small request that arrives
    /// while 200 large downloads are sending waits for one budget, not for all of
    /// them to fill their sockets (the paper's fairness, applied to send turns).
    fn run_sendq(&mut self) {
        let n = self.sendq.len();
        if n == 0 {
            return;
        }
        let start = Instant::now();
        for i in 0..n {
            let Some((key, gen)) = self.sendq.pop_front() else {
                break;
            };
            let key = key as usize;
            match self.conns.get_mut(key) {
                Some(c) if c.gen == gen && c.flags.has(Flags::QUEUED) => {
                    c.flags.set(Flags::QUEUED, false)
                }
                _ => continue,
            }
            self.drive(key);
            if i + 1 < n && start.elapsed() >= SENDQ_BUDGET {
                break;
            }
        }
    }

    /// Responses whose cold range the disk pool has read take their next send
    /// turn (they stayed `QUEUED` while parked, so nothing else queued them).
    fn disk_ready(&mut self) {
        let mut keys = std::mem::take(&mut self.disk_keys);
        self.disk_done.take(&mut keys);
        for (key, gen) in keys.drain(..) {
            if let Some(c) = self.conns.get(key as usize) {
                if c.gen == gen && c.flags.has(Flags::QUEUED) {
                    self.sendq.push_back((key, gen));
                }
            }
        }
        self.disk_keys = keys;
    }

    /// Slow-read check of a connection in SEND: `None` if its client read below the
    /// minimum rate over a whole window, else the deadline to arm (the earlier of the
    /// send timeout and the window's end).
    fn check_rate(&mut self, key: usize) -> Option<Ms> {
        let cond = &self.snap.config.condition;
        let (min_rate, window) = (cond.min_send_rate, ms(cond.send_rate_window));
        let send_timeout = ms(self.snap.config.http.send_timeout);
        let now = self.now_ms;
        let c = &mut self.conns[key];
        let Phase::Send { last } = c.phase else {
            return Some(c.deadline);
        };
        let stall = last + send_timeout;
        let Some(out) = c.out.as_mut() else {
            return Some(stall);
        };
        match out.rate.check(now, out.sent, min_rate, window) {
            RateVerdict::TooSlow => None,
            RateVerdict::CheckAt(t) => Some(stall.min(t)),
            RateVerdict::Renewed => Some(stall.min(now + window)),
        }
    }

    /// Close a connection, for `why` (counted per reason for the status page).
    fn close(&mut self, key: usize, why: CloseReason) {
        if let Some(d) = self.drips.remove(&key) {
            // It left `open` when it began to drip; `open` is decremented below.
            self.shared.open.fetch_add(1, Ordering::Relaxed);
            self.shared.drips.fetch_sub(1, Ordering::Relaxed);
            if let (Some(p), Some(c)) = (d.log, self.conns.get(key)) {
                self.log.line(SystemTime::now(), c.peer, &p, d.sent);
            }
            self.shared.stats[self.id]
                .bytes
                .fetch_add(d.sent, Ordering::Relaxed);
        }
        if let Some(mut c) = self.conns.try_remove(key) {
            if matches!(why, CloseReason::SlowRead | CloseReason::SendTimeout) {
                // Abortive close (RST): a plain close would leave the kernel sending
                // the megabytes still queued for a client that reads a few bytes a
                // second, and the connection, seen from the client, would stay open.
                abort_on_close(&c.sock);
            }
            match why {
                CloseReason::EvictedIdle | CloseReason::EvictedIncomplete => {
                    self.talkers.evicted(c.peer)
                }
                CloseReason::RangeCap => self.talkers.refused(c.peer),
                _ => {}
            }
            if c.front_id() != 0 {
                // Handed over by a front process: it closes the client too, and this
                // worker asks for the next connection.
                if let Some(f) = &self.front {
                    let _ = sluicecc::proto::send_ctl(
                        f.as_raw_fd(),
                        sluicecc::proto::CLOSE,
                        c.front_id(),
                    );
                    let _ = sluicecc::proto::send_ctl(f.as_raw_fd(), sluicecc::proto::ASK, 0);
                }
                // Another descriptor (the front's) shares the socket: remove it here.
                let _ = self.poll.registry().deregister(&mut c.sock);
            }
            // No epoll_ctl(DEL): closing the socket (its only descriptor) removes it.
            self.cond.forget(key as u32, c.peer);
            self.release_range(c.peer, c.cap);
            recycle(&mut self.pool, std::mem::take(&mut c.rbuf));
            if let Some(mut out) = c.out.take() {
                // A response cut short (client gone, send timeout, shutdown grace
                // over) is logged too, with the bytes that did go out: on a mirror
                // these aborted downloads are the lines an operator looks for.
                if let Some(p) = out.log.take() {
                    self.log.line(SystemTime::now(), c.peer, &p, out.sent);
                }
                self.shared.stats[self.id]
                    .bytes
                    .fetch_add(out.sent, Ordering::Relaxed);
                release(out, &mut self.pool, &mut self.out_pool);
            }
            self.shared.open.fetch_sub(1, Ordering::Relaxed);
            let st = &self.shared.stats[self.id];
            st.closed.fetch_add(1, Ordering::Relaxed);
            st.closes[why.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Advance one connection as far as it can go, then tell conditioning where it
    /// is parked (incomplete, idle or busy): the one place classes change.
    fn drive(&mut self, key: usize) {
        self.drive_inner(key);
        if let Some(c) = self.conns.get(key) {
            let class = match c.phase {
                Phase::Head { .. } if c.out.is_none() => Class::Incomplete,
                Phase::Idle { .. } => Class::Idle,
                // Errant clients being answered slowly are outside conditioning's
                // accounting: never evicted for room, never counted in a range.
                Phase::Drip { .. } => {
                    self.cond.forget(key as u32, c.peer);
                    return;
                }
                _ => Class::Active,
            };
            self.cond.park(key as u32, c.peer, class);
        }
    }

    /// Advance one connection as far as it can go without blocking.
    fn drive_inner(&mut self, key: usize) {
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
                match flushed {
                    Ok(Flush::Cold { off, len }) => {
                        // Not in the page cache: a pool thread reads it and the
                        // response waits, parked, for its next turn (`disk_ready`).
                        let who = (key as u32, c.gen);
                        let parked = match (&self.shared.disk, out.front_file()) {
                            (Some(pool), Some(f)) => pool.submit(f, off, len, who, &self.disk_done),
                            _ => false,
                        };
                        if !parked {
                            out.assume_warm(off + len);
                            continue;
                        }
                        c.flags.set(Flags::QUEUED, true);
                        c.phase = Phase::Send { last: self.now_ms };
                        self.shared.stats[self.id]
                            .disk_waits
                            .fetch_add(1, Ordering::Relaxed);
                        match self.check_rate(key) {
                            Some(d) => self.set_deadline(key, d),
                            None => self.close(key, CloseReason::SlowRead),
                        }
                        return;
                    }
                    Ok(Flush::Yield) => {
                        c.flags.set(Flags::QUEUED, true);
                        c.phase = Phase::Send { last: self.now_ms };
                        self.sendq.push_back((key as u32, c.gen));
                        match self.check_rate(key) {
                            Some(d) => self.set_deadline(key, d),
                            None => self.close(key, CloseReason::SlowRead),
                        }
                        return;
                    }
                    Ok(Flush::Blocked) => {
                        c.flags.set(Flags::WRITE_BLOCKED, true);
                        c.phase = Phase::Send { last: self.now_ms };
                        match self.check_rate(key) {
                            Some(d) => self.set_deadline(key, d),
                            None => self.close(key, CloseReason::SlowRead),
                        }
                        return;
                    }
                    Ok(Flush::Done) => {
                        let sent = out.sent;
                        if let Some(p) = out.log.take() {
                            self.log.line(SystemTime::now(), c.peer, &p, sent);
                        }
                        self.shared.stats[self.id]
                            .bytes
                            .fetch_add(sent, Ordering::Relaxed);
                        let head_started = out.head_started;
                        self.shared.stats[self.id].timings(
                            out.ready_at.saturating_sub(head_started) * 1000,
                            self.now_ms.saturating_sub(head_started) * 1000,
                        );
                        let discard = out.discard_after;
                        if let Some(out) = c.out.take() {
                            release(out, &mut self.pool, &mut self.out_pool);
                        }
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
                        let d = match c.phase {
                            Phase::Head { started, .. } => started,
                            _ => self.now_ms,
                        } + ms(self.snap.config.http.header_timeout);
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
                        Phase::Head { started, .. } => {
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
    fn finish_closing(&mut self, key: usize) {
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
    fn drain_lingering(&mut self, key: usize) {
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

    fn set_deadline(&mut self, key: usize, d: Ms) {
        let c = &mut self.conns[key];
        c.deadline = d;
        // One live wheel entry per connection; add another only if it must fire sooner.
        if d < c.wheel_at {
            c.wheel_at = self.wheel.insert(d, (key as u32, c.gen));
        }
    }

    fn next_request(&mut self, key: usize) -> Step {
        let c = &mut self.conns[key];
        if c.rbuf.is_empty() || c.flags.has(Flags::CLOSE_AFTER) {
            return if c.flags.has(Flags::CLOSE_AFTER) && c.out.is_none() {
                Step::Close
            } else {
                Step::NeedMore
            };
        }
        let rbuf = std::mem::take(&mut c.rbuf);
        let mut head_started = self.now_ms;
        let parsed = parse_head(&rbuf, &self.limits);
        let mut errant: Option<sluice_rules::classify::Errant> = None;
        // A request body to read and throw away once the response is out.
        let mut discard_body = 0u32;
        let (resp, consumed, keep_alive, announce_keep_alive, head_only, log) = match parsed {
            Ok(Parsed::Partial) => {
                self.conns[key].rbuf = rbuf;
                return Step::NeedMore;
            }
            Err(e) => {
                tracing::debug!(peer = %c.peer, error = e.as_str(), "bad request");
                let mut r = Response::text(e.status(), Some(e.as_str()));
                r.close = true;
                c.why = CloseReason::BadRequest;
                // The framing can no longer be trusted: whatever else the client
                // sends is drained after the answer, never parsed.
                c.flags.set(Flags::LINGER, true);
                let log = self.log.enabled().then(|| {
                    Pending::rejected(
                        &rbuf,
                        e.status(),
                        self.site_log[self.snap.hosts.default_site()],
                    )
                });
                (r, rbuf.len(), false, false, false, log)
            }
            Ok(Parsed::Complete(head)) => {
                if self.panic_path.as_deref() == Some(head.path) {
                    panic!("test hook: SLUICE_TEST_PANIC_PATH requested");
                }
                // Virtual hosts: the Host header picks the site (its root, settings,
                // rules and log); unknown or missing hosts get the default site.
                let site = self.snap.hosts.find(head.host);
                let mut ctx = PhaseCtx {
                    snap: &self.snap,
                    shared: &self.shared,
                    site: &self.snap.sites[site],
                    files: &mut self.files[site],
                    peer: c.peer,
                    now: self.now,
                    rule: None,
                    errant: None,
                };
                let mut resp = if c.cap == Cap::Over {
                    // Slow-read prevention: this address range holds more than its
                    // share of the server's connections. Say so, and when to retry.
                    let mut r = Response::text(503, Some("too many connections from your network"));
                    r.headers.add("Retry-After", "10");
                    r.close = true;
                    c.why = CloseReason::RangeCap;
                    r
                } else {
                    phases::respond(&mut ctx, &head)
                };
                let rule = ctx.rule;
                errant = ctx.errant.take();
                match head.framing() {
                    BodyFraming::None => {}
                    BodyFraming::Length(n) if n <= self.snap.config.http.max_body_discard => {
                        discard_body = n as u32 // bounded by max_body_discard ≤ 2^30
                    }
                    // Too big to skip, or chunked: answer, then close (lingering, so
                    // the unread body does not turn the close into a RST), and never
                    // parse the body as a request.
                    _ => {
                        resp.close = true;
                        c.flags.set(Flags::LINGER, true);
                    }
                }
                c.requests += 1;
                // Status page: top URLs (by requests, and by bytes answered) and the
                // request rate per address range.
                let body_len: u64 = resp.body.iter().map(|b| b.len()).sum();
                self.talkers.request(c.peer, head.path);
                self.talkers.bytes(head.path, body_len);
                if let Some((rule, action)) = rule {
                    self.shared.stats[self.id].rule_actions[action].fetch_add(1, Ordering::Relaxed);
                    self.talkers.rule(
                        site as u16,
                        rule,
                        sluice_status::counters::ACTIONS[action],
                        body_len,
                    );
                }
                if u64::from(c.requests) >= self.snap.config.http.keepalive_requests {
                    resp.close = true;
                }
                let log = self
                    .log
                    .enabled()
                    .then(|| Pending::new(&head, resp.status, self.site_log[site]))
                    .map(|p| match rule {
                        // Errant-client answers say which in the log line.
                        Some((_, a)) if a >= 4 => p.with_note(sluice_status::counters::ACTIONS[a]),
                        _ => p,
                    });
                // HTTP/1.0 keep-alive must be announced; 1.1 is persistent by default.
                let keep = head.keep_alive && self.stopping.is_none();
                let announce = keep && head.minor == 0;
                head_started = match c.phase {
                    Phase::Head { started, .. } => started,
                    _ => self.now_ms,
                };
                (
                    resp,
                    head.head_len,
                    keep,
                    announce,
                    head.method() == Method::Head,
                    log,
                )
            }
        };
        self.shared.stats[self.id].response(resp.status);
        if let Some(e) = errant {
            recycle(&mut self.pool, rbuf);
            return self.errant_answer(key, e, log);
        }
        let c = &mut self.conns[key];
        let mut rbuf = rbuf;
        rbuf.drain(..consumed.min(rbuf.len()));
        c.rbuf = rbuf;
        let close = resp.close || !keep_alive;
        c.flags.set(Flags::CLOSE_AFTER, close);
        // Anything pipelined after a response that closes the connection is unread.
        if close && !c.rbuf.is_empty() {
            c.flags.set(Flags::LINGER, true);
        }
        let out = c.out.insert(self.out_pool.pop().unwrap_or_default());
        out.log = log;
        out.discard_after = discard_body;
        out.head_started = head_started;
        out.ready_at = self.now_ms;
        out.rate = RateWindow::start(self.now_ms, 0);
        let wbuf = &mut out.wbuf;
        if wbuf.capacity() == 0 {
            *wbuf = self.pool.pop().unwrap_or_default();
        }
        write_status_line(wbuf, resp.status);
        wbuf.extend_from_slice(b"Server: sluice\r\nDate: ");
        match &resp.date {
            // An errant-client rule's fixed Date (`date=`).
            Some(d) => wbuf.extend_from_slice(d.as_bytes()),
            None => wbuf.extend_from_slice(self.date.get(SystemTime::now()).as_bytes()),
        }
        wbuf.extend_from_slice(b"\r\n");
        wbuf.extend_from_slice(resp.headers.as_bytes());
        if close {
            wbuf.extend_from_slice(b"Connection: close\r\n");
        } else if announce_keep_alive {
            wbuf.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        wbuf.extend_from_slice(b"\r\n");
        out.head_len = wbuf.len() as u64;
        let bodyless = head_only || resp.status == 304 || resp.status == 204;
        if !bodyless {
            out.chunks = resp.body.into();
        }
        c.phase = Phase::Send { last: self.now_ms };
        Step::Responded
    }
}

pub(crate) enum ReadOutcome {
    /// The socket is drained (a short read means the next byte will raise a new edge).
    Blocked,
    /// The buffer reached its limit; parse before reading more.
    Full,
    Eof,
}

pub(crate) fn read_into(
    sock: &mut TcpStream,
    buf: &mut Vec<u8>,
    pool: &mut Vec<Vec<u8>>,
    limit: usize,
    until_eof: bool,
) -> io::Result<ReadOutcome> {
    if buf.capacity() == 0 {
        *buf = pool.pop().unwrap_or_else(|| Vec::with_capacity(READ_CHUNK));
    }
    loop {
        if buf.len() >= limit {
            return Ok(ReadOutcome::Full);
        }
        if buf.capacity() - buf.len() < 512 {
            buf.reserve(READ_CHUNK);
        }
        let old = buf.len();
        let room = (buf.capacity() - old).min(limit - old);
        // SAFETY: recv writes at most `room` bytes into the spare capacity, and
        // set_len only covers what it wrote.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().add(old).cast(), room, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(ReadOutcome::Blocked),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        if n == 0 {
            return Ok(ReadOutcome::Eof);
        }
        let n = n as usize;
        // SAFETY: the kernel initialized these n bytes.
        unsafe { buf.set_len(old + n) };
        if n < room && !until_eof {
            return Ok(ReadOutcome::Blocked);
        }
    }
}

/// Are request bytes waiting in the socket (one `recv(MSG_PEEK)`)? EOF and errors
/// count as "no": there is nothing to protect the response from.
fn unread_bytes_waiting(sock: &TcpStream) -> bool {
    let mut b = 0u8;
    // SAFETY: peek one byte into a local.
    let n = unsafe {
        libc::recv(
            sock.as_raw_fd(),
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// SO_LINGER {on, 0}: closing the socket resets it and drops what is queued.
fn abort_on_close(sock: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on our own socket with a correctly sized struct.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
}

/// One non-blocking send outside a response (a 408 before closing, an errant
/// client's drip), through TLS on an HTTPS connection: bytes taken (0 if the
/// socket is full), or -1 if the connection is gone.
fn conn_send(c: &mut Conn, msg: &[u8]) -> isize {
    match tls_of(&mut c.via) {
        Some(t) => tls::send_some(&c.sock, t, msg),
        None => send_some(&c.sock, msg),
    }
}

/// One non-blocking send: bytes sent (0 if the socket is full), or -1 if the
/// connection is gone.
fn send_some(sock: &TcpStream, msg: &[u8]) -> isize {
    // SAFETY: send from a valid slice on our own socket.
    let n = unsafe {
        libc::send(
            sock.as_raw_fd(),
            msg.as_ptr().cast(),
            msg.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n >= 0 {
        return n;
    }
    match io::Error::last_os_error().kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => 0,
        _ => -1,
    }
}

/// Read and discard whatever is waiting; false on EOF or error.
fn drain_input(sock: &TcpStream) -> bool {
    let mut scratch = [0u8; 4096];
    loop {
        // SAFETY: recv into a stack buffer of the given length.
        let n = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                scratch.as_mut_ptr().cast(),
                scratch.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            continue;
        }
        if n == 0 {
            return false;
        }
        return matches!(
            io::Error::last_os_error().kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        );
    }
}

fn ms(d: Duration) -> Ms {
    d.as_millis() as Ms
}

/// Return a finished response's send state (and its write buffer) to the pools.
#[allow(clippy::vec_box)] // the pool of boxes the worker keeps (see `Worker::out_pool`)
fn release(mut out: Box<Outgoing>, pool: &mut Vec<Vec<u8>>, out_pool: &mut Vec<Box<Outgoing>>) {
    recycle(pool, std::mem::take(&mut out.wbuf));
    out.reset();
    out_pool.push(out);
}

/// Give a buffer back to the worker's pool (bounded), so idle connections hold none.
pub(crate) fn recycle(pool: &mut Vec<Vec<u8>>, mut buf: Vec<u8>) {
    if buf.capacity() > 0 && buf.capacity() <= 64 * 1024 && pool.len() < POOL_MAX {
        buf.clear();
        pool.push(buf);
    }
}

impl Drop for Worker {
    /// A worker that dies (a panic; see `lib.rs` supervision) takes its connections
    /// with it: give back what they hold in the server-wide accounting (the
    /// connection count, the tarpit count, the per-range caps), or the limits would
    /// shrink with every restart. After a normal shutdown there is nothing left.
    fn drop(&mut self) {
        for (key, c) in self.conns.iter() {
            if self.drips.contains_key(&key) {
                self.shared.drips.fetch_sub(1, Ordering::Relaxed);
            } else {
                self.shared.open.fetch_sub(1, Ordering::Relaxed);
            }
            if c.cap != Cap::Exempt {
                self.shared.caps.release(&RangeKey::of(c.peer));
            }
        }
    }
}

/// Each site's log output: its own file if that file is open (logs open at start-up
/// only), else the main log, else none.
fn site_logs(snap: &Snapshot, log: &WorkerLog) -> Vec<Option<u8>> {
    let main = snap.sites[0]
        .conf
        .access_log
        .as_deref()
        .and_then(|p| log.index_of(p));
    snap.sites
        .iter()
        .map(|s| match s.conf.access_log.as_deref() {
            None => None,
            Some(p) => log.index_of(p).or(main),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    /// An idle keep-alive connection costs its `Conn` record plus one 8-byte wheel
    /// entry (docs/BENCHMARKS.md measures its RSS). Keep the record small: anything
    /// only needed while a response is in flight belongs in `Outgoing`, anything
    /// only some connections need behind `via` (TLS, handed over by a front
    /// process: one pointer for everyone else), yes/no state in `flags`. 120 in a
    /// debug build, where mio's TcpStream carries a selector id; 104 in release.
    #[test]
    fn idle_connection_record_stays_small() {
        let size = std::mem::size_of::<super::Conn>();
        assert!(size <= 120, "Conn grew to {size} bytes");
        assert_eq!(std::mem::size_of::<crate::wheel::Key>(), 8);
    }
}
