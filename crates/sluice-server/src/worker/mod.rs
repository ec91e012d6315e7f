//! One worker: an epoll loop (mio) over its own `SO_REUSEPORT` listeners and its
//! own connections. Shared with other workers: the snapshot (read on change), the
//! stop flag, the server-wide connection count and the per-range cap counters
//! (relaxed atomics); so no locks on the request path.
//!
//! The connection state machine, driven by `Worker::drive`:
//!
//! ```text
//!  accept ─► HEAD (reading a request head, total deadline = header_timeout)
//!             │ complete head, must wait ─► READY ─► its turn (run_ready) ─┐
//!             │ complete head ─► phases::respond ─► SEND (deadline = send_timeout ◄┘
//!             │                                     since the last progress, and
//!             │                                     the minimum-rate window)
//!             │                      response done ─┤ (big bodies in fair turns: run_sendq)
//!             │   ◄── more bytes buffered (pipelined)┤
//!             │   IDLE (no buffer held, deadline = keepalive_timeout)
//!             │                      last response, request bytes unread ─► LINGER
//!             └─ error / timeout / EOF / close / evicted ─► closed (with a reason)
//! ```
//!
//! Conditioning (`sluice-condition`) is consulted at five points: `adopt` (per-range
//! caps), the end of `drive` (the connection's class: incomplete, idle, ready,
//! waiting or busy), `run_ready` and `run_sendq` (whose turn is next),
//! `make_room` (which connection gives way at the limit) and `check_rate` (slow
//! readers). Every close goes through `close` with a [`CloseReason`](sluice_condition::CloseReason).
//!
//! Sockets are registered edge-triggered for reading when adopted, and for writing
//! too once a response first finds its socket full (`arm_writable`); the flags
//! `READ_BLOCKED`/`WRITE_BLOCKED` remember which side last saw `EAGAIN`, so a
//! keep-alive request costs one `recv` and one `send` and no `epoll_ctl`.
//!
//! Memory: an idle keep-alive connection holds no buffer (its read buffer goes back
//! to the worker's pool), just its `Conn` record in the slab, one wheel entry and
//! its links in the conditioning trees' side tables.
//!
//! Sleep: a turn with nothing waiting sleeps until the earliest connection deadline
//! on the wheel, the once-a-second housekeeping or the log's next flush, whichever
//! is first (`Worker::sleep_for`), so idle keep-alive connections do not wake it
//! every tick; a stop ends the sleep through the worker's waker (the `DISK` token).
//!
//! Files: `conn` (the record and its types, at the bottom), `admit` (accept, adopt,
//! the range caps, making room at the limit: conditioning's entry points), `drive`
//! (one connection's state machine, its steps assembled in `drive_inner`), `answer`
//! (a complete request → a response), `kept` (the kept answers), `errant` (the
//! errant-client answers), `herd` (requests waiting for one listing build), `timers` (deadlines, the send queue, closing, how long
//! a turn sleeps), `stop` (SIGTERM and SIGQUIT: which connections finish). The rest
//! is here: the worker itself, its event loop and its snapshot.

mod admit;
mod answer;
mod conn;
mod drive;
mod errant;
mod herd;
mod kept;
mod pace;
mod publish;
mod stop;
mod timers;

use crate::accesslog::WorkerLog;
use crate::io::READ_CHUNK;
use crate::send::Outgoing;
use crate::shared::Shared;
use crate::snapshot::Snapshot;
use crate::wheel::Wheel;
use conn::*;
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use sluice_condition::{Class, Conditioner, RangeKey};
use sluice_http::date::DateCache;
use sluice_http::Limits;
use sluice_static::answers::AnswerCache;
use sluice_static::StaticHandler;
use sluice_status::Counters;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LISTENER_BASE: usize = usize::MAX / 2;
/// The connection to a `sluice condition` front process (`serve --from`).
const FRONT: usize = LISTENER_BASE - 1;
/// The worker's waker (mio allows one per poll): the disk pool's (cold ranges this
/// worker parked are cached now), or the supervisor's (`stop` or `quit` changed:
/// `Shared::wake_workers`).
const DISK: usize = LISTENER_BASE - 2;
/// Longest an idle worker (no connection at all) sleeps: its once-a-second
/// housekeeping (caches' expiry, the status page's figures, deferral's check).
const IDLE_SLEEP_MS: Ms = 1000;
/// Connections a worker asks the front process for ahead of need.
const FRONT_CREDIT: u32 = 64;

/// Most connections a worker evicts per 100 ms tick to make room (640/s/worker).
const EVICTIONS_PER_TICK: u32 = 64;
/// Most connections a worker accepts per loop turn; the next turn (no sleep) takes
/// more. Draining the queue took an 8,000-connection burst in one 120 ms turn.
const ACCEPTS_PER_TURN: u32 = 64;
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
    /// Answers kept for the same request bytes, with what each request still
    /// counts (`kept::reuse_answer`).
    answers: AnswerCache<Kept>,
    /// Bandwidth limits: the sockets not at their base pacing (`pace.rs`).
    repaced: sluice_condition::pace::Repaced,
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
    /// Connections this turn may still accept ([`ACCEPTS_PER_TURN`]).
    accept_left: u32,
    /// Listeners left with connections queued (edge-triggered: no new event).
    accept_pending: Vec<usize>,
    last_pressure_warn: Option<Instant>,
    stopping: Option<Instant>,
    /// The stop is a quit (`upgrade_grace`), until SIGTERM shortens it.
    quitting: bool,
    /// Who is incomplete, idle, or waiting for a send turn, by address range
    /// (sluice-condition); the waiting ones are the send queue (see `run_sendq`).
    cond: Conditioner,
    /// Evictions in the current tick (see `make_room`), and when the tick began.
    evictions: u32,
    eviction_tick_ms: Ms,
    /// `defer_accept = "auto"`: deferral on this worker's listeners, off while the
    /// kernel's SYN queues overflow (`deferral::AutoDefer`).
    auto_defer: Option<crate::deferral::AutoDefer>,
    /// Most incomplete connections before the heaviest range's oldest is closed.
    max_incomplete: usize,
    /// Responses in flight on this worker (`c.out` is some), and this worker's
    /// share of `condition.max_active` (`u32::MAX`: no cap).
    active: u32,
    max_active: u32,
    /// Requests answered in this loop turn, and how many a turn answers before
    /// the rest wait in `Phase::Ready` (`condition.ready_per_turn`).
    answered: u32,
    ready_per_turn: u32,
    /// Set by `run_ready` while it drives the request it chose: that one request
    /// is answered although others still wait (and by `disk_ready`).
    admit_one: bool,
    /// Set by `disk_ready` while it drives a request the disk pool has made the
    /// lookups of: how many times that request has waited for it (`Phase::Disk`).
    /// Taken by the first request `next_request` meets (that one).
    disk_rounds: u32,
    /// Which listeners expect a PROXY protocol header (`server.proxy_protocol`).
    proxy_listeners: Vec<bool>,
    /// Which listeners are HTTPS (`tls.listen`).
    tls_listeners: Vec<bool>,
    /// Listeners with `TCP_DEFER_ACCEPT` on (kept as `auto_defer` switches them).
    deferred: Vec<bool>,
    /// The connection `answer_at_accept` drives before registering it with epoll.
    unregistered: Option<usize>,
    /// `serve --from`: the Unix socket to the front process, and scratch for it.
    front: Option<std::os::fd::OwnedFd>,
    front_buf: Vec<u8>,
    /// Connections in `Phase::Drip`, by slab key.
    drips: std::collections::HashMap<usize, Drip>,
    /// Top URLs and address ranges for the status page (published once a second).
    talkers: sluice_status::top::Talkers,
    last_publish: Instant,
    /// The longest loop turn since the last publish (µs), and the thread's time
    /// waiting for a CPU at the last publish (ns, `schedstat`).
    turn_longest_us: u64,
    cpu_wait_ns: u64,
    /// Where the disk pool reports this worker's cold ranges as read, and cold
    /// lookups as made (`disk.rs`).
    disk_done: Arc<crate::disk::Completions>,
    disk_keys: Vec<(u32, u32)>,
    /// Responses whose cold range the pool refused (its queue, or its disk's
    /// share of it, full): each asks again at `disk_retry_at` (`retry_disk`).
    disk_retry: Vec<(u32, u32)>,
    disk_retry_at: Ms,
    /// Listing builds running for this worker's requests, and the requests that
    /// wait for each (`herd.rs`).
    herds: herd::Herds,
    /// Test hook: a request for exactly this path panics the worker (set only by
    /// the `SLUICE_TEST_PANIC_PATH` environment variable, for the supervision test).
    panic_path: Option<String>,
}

impl Worker {
    pub fn new(
        id: usize,
        listeners: Vec<TcpListener>,
        auto_defer: Option<u64>,
        shared: Arc<Shared>,
        mut log: WorkerLog,
        max_conns: usize,
    ) -> io::Result<Worker> {
        let poll = Poll::new()?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), Token(DISK))?);
        shared.set_waker(id, waker.clone());
        let disk_done = crate::disk::Completions::new(waker);
        let mut listeners = listeners;
        for (i, l) in listeners.iter_mut().enumerate() {
            poll.registry()
                .register(l, Token(LISTENER_BASE + i), Interest::READABLE)?;
        }
        let auto_defer = auto_defer.map(|secs| {
            let fds = listeners.iter().map(|l| l.as_raw_fd()).collect();
            crate::deferral::AutoDefer::new(fds, secs, 0, Some(shared.netstat))
        });
        let (snap, snap_gen) = shared.current();
        // Which listeners are PROXY-protocol or HTTPS ones: by their address.
        let marked = |addrs: &[std::net::SocketAddr]| -> Vec<bool> {
            listeners
                .iter()
                .map(|l| l.local_addr().is_ok_and(|a| addrs.contains(&a)))
                .collect()
        };
        let deferred = listeners
            .iter()
            .map(|l| crate::deferral::defer_accept_is_on(l.as_raw_fd()))
            .collect();
        let proxy_listeners = marked(&snap.config.server.proxy_protocol);
        let tls_listeners = marked(&snap.config.tls.listen);
        let files = snap.static_handlers()?;
        let answers = AnswerCache::new(snap.config.files.answer_cache);
        let site_log = site_logs(&snap, &log);
        log.set_fields(&snap.config.log.fields);
        let snap_max_incomplete = snap.config.condition.max_incomplete;
        // `max_active` is the whole server's (every process's workers share it);
        // the connection limit is this process's.
        let shared_workers = shared.stats.len().max(1);
        let local_workers = shared.local_workers.max(1);
        let max_active = active_share(&snap, shared_workers);
        let ready_per_turn = snap.config.condition.ready_per_turn;
        let now = Instant::now();
        let mut w = Worker {
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
            answers,
            repaced: Default::default(),
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
            accept_left: ACCEPTS_PER_TURN,
            accept_pending: Vec::new(),
            last_pressure_warn: None,
            stopping: None,
            quitting: false,
            disk_done,
            disk_keys: Vec::new(),
            disk_retry: Vec::new(),
            disk_retry_at: 0,
            herds: herd::Herds::default(),
            panic_path: std::env::var("SLUICE_TEST_PANIC_PATH").ok(),
            talkers: Default::default(),
            last_publish: now,
            turn_longest_us: 0,
            cpu_wait_ns: 0,
            drips: Default::default(),
            proxy_listeners,
            tls_listeners,
            deferred,
            unregistered: None,
            // `serve --from`: connected below; without its front yet (started
            // first), the worker asks again every second.
            front: None,
            front_buf: Vec::new(),
            cond: Conditioner::with_capacity(max_conns.min(1 << 20)),
            evictions: 0,
            eviction_tick_ms: 0,
            auto_defer,
            active: 0,
            max_active,
            answered: 0,
            ready_per_turn,
            admit_one: false,
            disk_rounds: 0,
            // A worker's share of its process's incomplete-connection budget
            // (`max_conns` is the process's limit, shared by its workers).
            max_incomplete: ((max_conns as f64 * snap_max_incomplete) as usize / local_workers)
                .max(1),
        };
        w.reconnect_front();
        Ok(w)
    }

    pub fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut due = Vec::new();
        self.start_cpu_wait();
        self.now = Instant::now();
        loop {
            // The turn that just ended (from the last poll's return): every other
            // connection of this worker waited that long. One clock read per turn.
            let turn_us = self.now.elapsed().as_micros() as u64;
            self.shared.stats[self.id].turn(turn_us);
            self.turn_longest_us = self.turn_longest_us.max(turn_us);
            // Requests or responses waiting for a turn: look for new events without
            // sleeping (ready requests held back only by the cap on active
            // responses wait for one to finish instead).
            let ready = self.cond.ready() > 0 && self.active < self.max_active;
            let timeout = if self.cond.waiting() == 0 && !ready && self.accept_pending.is_empty() {
                self.sleep_for()
            } else {
                Duration::ZERO
            };
            self.answered = 0;
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            self.now = Instant::now();
            self.accept_left = ACCEPTS_PER_TURN;
            // The wall clock's second, for `Date` and log lines: read when it ends,
            // not once per turn or per response (a turn answers dozens under load).
            self.date.tick(self.now);
            self.now_ms = self.now.duration_since(self.epoch).as_millis() as Ms;
            self.refresh_snapshot();
            for ev in events.iter() {
                let t = ev.token().0;
                if t == FRONT {
                    self.take_handoffs();
                    continue;
                }
                if t == DISK {
                    // (For a stop, nothing to take: `stop` and `quit` are read below.)
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
                            self.cond.park(t as u32, c.peer, Class::Waiting);
                        }
                        continue;
                    }
                }
                self.drive(t);
            }
            // Then the connections the last turn left in the kernel's queue (after
            // the events of the open ones), the requests that wait, fairly, and the
            // responses' send turns.
            for li in std::mem::take(&mut self.accept_pending) {
                self.accept(li);
            }
            self.run_ready();
            self.run_sendq();
            self.wheel.advance(self.now_ms, &mut due);
            for (key, gen) in due.drain(..) {
                self.on_timer(key as usize, gen);
            }
            if !self.disk_retry.is_empty() && self.now_ms >= self.disk_retry_at {
                self.disk_retry_due();
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
            if let Some(on) = self.auto_defer.as_mut().and_then(|a| a.poll(self.now_ms)) {
                self.deferred.fill(on);
                Counters::add(&self.shared.stats[self.id].defer_offs, u64::from(!on));
            }
            if self.now_ms >= self.next_expire_ms {
                self.next_expire_ms = self.now_ms + 1000;
                for f in &mut self.files {
                    f.expire(self.now);
                }
                self.answers.expire(self.now);
                crate::send::forget_recent_windows();
                self.publish_status();
                self.reconnect_front();
            }
            if self.shared.stop.load(Ordering::Relaxed) && self.stopping.is_none() {
                self.begin_stop();
            }
            if self.quitting && !self.shared.quit.load(Ordering::Relaxed) {
                self.hurry_stop();
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

    fn refresh_snapshot(&mut self) {
        let g = self.shared.generation.load(Ordering::Acquire);
        if g == self.snap_gen {
            return;
        }
        let (snap, g) = self.shared.current();
        match snap.static_handlers() {
            Ok(files) => {
                self.files = files;
                // Sites, files and settings may all differ: nothing kept is reused.
                self.answers = AnswerCache::new(snap.config.files.answer_cache);
                self.site_log = site_logs(&snap, &self.log);
                self.log.set_fields(&snap.config.log.fields);
                // Rule indices belong to the old rules.
                self.talkers.reset_rules();
                self.limits = snap.limits();
                self.max_active = active_share(&snap, self.shared.stats.len().max(1));
                self.ready_per_turn = snap.config.condition.ready_per_turn;
                self.snap = snap;
            }
            Err(e) => {
                tracing::error!(worker = self.id, error = %e, "cannot open new root; keeping the old one")
            }
        }
        self.snap_gen = g;
    }
}

/// A worker's share of `condition.max_active` (rounded up; `u32::MAX` when 0, no
/// cap). Per worker, like the incomplete cap: each worker answers its own
/// connections, and `SO_REUSEPORT` spreads them evenly.
fn active_share(snap: &Snapshot, workers: usize) -> u32 {
    match snap.config.condition.max_active {
        0 => u32::MAX,
        n => n.div_ceil(workers).min(u32::MAX as usize) as u32,
    }
}

/// How long a connection accepted just before the server stops may take to send
/// its request (`begin_stop`).
const JUST_ACCEPTED_MS: Ms = 1000;

fn ms(d: Duration) -> Ms {
    d.as_millis() as Ms
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
