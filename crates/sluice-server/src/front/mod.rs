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
//! - `fair`: ready requests wait in the conditioner's address tree and go to a
//!   backend least recently served range first, at every level (the paper's
//!   recency-based choice), so one range's flood of requests waits behind
//!   everyone else's turn;
//! - `slowread`: the per-range connection caps (`sluice_condition::RangeCaps`): a
//!   range over its share is answered 503 here;
//! - `sanity`: a request sluice's parser refuses gets its 4xx from here and never
//!   reaches a backend (without it, the bytes are handed over as they came);
//! - `pass`: one more process in the chain that hands requests through unchanged
//!   ([`relay()`]), to measure what each process in a chain costs (Figures 8 and 9).
//!
//! Signals: SIGTERM/SIGINT stop it; SIGHUP reads the `--config` file again
//! (`Front::reload`); SIGUSR2 starts a new binary on the same sockets and hands it
//! every connection held here (`handover`); SIGUSR1 is logged and ignored.
//!
//! Must not: read a socket a backend holds (the descriptor is shared; its bytes
//! belong to the backend until it says KEEP or CLOSE), change a client socket's
//! flags after handing it over, or block.
//!
//! Costs per request: one `recv` (or more) into a pooled buffer, one parse, one
//! `sendmsg` carrying the descriptor, one 12-byte control message back. Memory: a
//! connection record and, only while a request is incomplete or ready, its buffer.
//!
//! Files: this one (the stages' settings, the connection records, the event loop),
//! `clients` (accepting, reading and packaging requests, refusing, dispatching to
//! backends, the sweep that enforces deadlines), `backends` (the Unix-socket side:
//! asks, KEEP and CLOSE), `handover` (the in-place upgrade: both ends), `status`
//! (the front's own figures, at `/server-status/front`), `relay` (a `pass` process
//! of a chain), `signals` (the handlers, and the wake-up they send the loop).

mod backends;
mod clients;
mod handover;
mod relay;
mod signals;
use signals::Signals;
mod status;

use crate::{deferral, listener};
use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
pub use relay::relay;
use slab::Slab;
use sluice_condition::{Cidr, CloseReason, Conditioner, RangeCaps};
use sluice_config::Valid;
use sluice_http::Limits;
use sluicecc::proto;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const UNIX: Token = Token(usize::MAX - 1);
/// The old front's connections coming over (`handover`), in a new front.
const HANDOVER: Token = Token(usize::MAX - 2);
/// The public port's listening sockets: `TCP + i` for the i-th, as many as
/// `server.listen_sockets` (the config bounds it by `MAX_LISTENERS`).
const MAX_LISTENERS: usize = sluice_config::bounds::LISTEN_SOCKETS.1 as usize;
const TCP: usize = usize::MAX - 2 - MAX_LISTENERS;
/// The environment variable naming the new front's end of the socket pair its
/// predecessor's connections come over (`handover`).
const HANDOVER_VAR: &str = "SLUICE_FRONT_HANDOVER";
/// Where a front's clock (`Front::now`, ms) starts, so that a connection adopted
/// from its predecessor (`handover`) starts, at now minus its age, above zero.
const CLOCK_BASE: u64 = 1 << 32;
const BACKEND_BASE: usize = usize::MAX / 2;
const SWEEP: Duration = Duration::from_millis(100);
/// The sweep's period while the front holds no connection (nothing has a deadline):
/// an idle front wakes once a second, for deferral's check.
const IDLE_SWEEP: Duration = Duration::from_secs(1);
/// The signals' wake-up (below the backends' tokens, above any client's).
const SIGNAL: Token = Token(BACKEND_BASE - 1);
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

/// Run the front process until SIGTERM/SIGINT, or until a new binary it started on
/// SIGUSR2 serves and has its connections (`handover`). SIGHUP reads `config_path`
/// (the `--config` file) again (`Front::reload`); SIGUSR1, which `sluice serve`
/// takes for its log, is logged and ignored here (its default action would end the
/// process and every connection it holds).
pub fn run(
    listen: SocketAddr,
    to: &Path,
    filters: Filters,
    config: Valid,
    config_path: Option<&Path>,
) -> Result<(), String> {
    // Started by an older front's upgrade: its listening sockets and its connections.
    // (Read first: they change the environment, which needs this process alone.)
    let listeners = crate::upgrade::inherited()?;
    let predecessor = crate::upgrade::inherited_fd(HANDOVER_VAR)?;
    let nofile = crate::settings::raise_nofile_limit();
    let signals = Signals::register().map_err(|e| format!("signals: {e}"))?;
    // Started as root: whom this process and its relays become (`None`: stay).
    let user = crate::privileges::plan(config.server.user.as_deref(), config.server.allow_root)?;
    // The chain: this process listens on `to` itself, or on the first relay's input.
    let mut relays = Vec::new();
    let first = if filters.relays == 0 {
        to.to_path_buf()
    } else {
        let hop = |i: usize| PathBuf::from(format!("{}.{i}", to.display()));
        let exe = std::env::current_exe().map_err(|e| format!("relays: {e}"))?;
        // Each relay drops root as this process does (`Front::become_user`), after
        // binding its own socket and giving it to the user.
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
                .args(user.iter().flat_map(|a| ["--user", a.name.as_str()]))
                .spawn()
                .map_err(|e| format!("starting relay {i}: {e}"))?;
            relays.push(child);
        }
        hop(0)
    };
    let sockets = Sockets {
        listeners,
        predecessor,
    };
    let result =
        Front::new(listen, &first, filters, config, nofile, signals, sockets).and_then(|f| {
            f.become_user(user.as_ref())?;
            f.run(config_path)
        });
    for mut r in relays {
        // They exit when this process's socket closes; make sure.
        let _ = r.kill();
        let _ = r.wait();
    }
    result
}

/// Where the connections' generations start (handoff ids are generation and slab
/// key): at random, not at 0, so that a backend still holding a connection of an
/// earlier front, restarted since, cannot name one of this front's connections in
/// a KEEP or CLOSE (the two fronts' first ids were the same numbers).
fn random_start() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    // The standard library seeds its hash keys from the system's random source.
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish() as u32
}

/// What a front started by an older one's upgrade takes from it: the listening
/// sockets (the port and the backends' socket) and its end of the socket pair the
/// held connections come over.
struct Sockets {
    listeners: Vec<OwnedFd>,
    predecessor: Option<OwnedFd>,
}

/// The front's settings that a reload changes (the range caps aside, which
/// `RangeCaps::set_limits` moves in place), made one way at start and on SIGHUP.
struct Settings {
    limits: Limits,
    /// `http.header_timeout`: a request whole, and handed over, this long after
    /// its first byte.
    header_ms: u64,
    /// `http.keepalive_timeout`.
    idle_ms: u64,
    cap_exempt: Vec<Cidr>,
    /// `[status]`: where the front answers for itself (`status`).
    status: Option<StatusAt>,
}

/// `[status]` as the front applies it (`status`: made by `StatusAt::of`).
struct StatusAt {
    /// `[status] path` + `/front`.
    path: String,
    allow: Vec<Cidr>,
}

impl Settings {
    fn of(config: &sluice_config::Config) -> Result<Settings, String> {
        Ok(Settings {
            limits: crate::snapshot::http_limits(&config.http),
            header_ms: config.http.header_timeout.as_millis() as u64,
            idle_ms: config.http.keepalive_timeout.as_millis() as u64,
            cap_exempt: Cidr::parse_list(&config.condition.cap_exempt, "condition.cap_exempt")?,
            status: StatusAt::of(&config.status)?,
        })
    }
}

struct Front {
    poll: Poll,
    /// The public port's sockets (`TCP + i`).
    listeners: Vec<TcpListener>,
    /// `defer_accept = "auto"`: deferral off while the kernel's SYN queues overflow.
    auto_defer: Option<deferral::AutoDefer>,
    unix: OwnedFd,
    unix_path: PathBuf,
    conns: Slab<FConn>,
    backends: Slab<Back>,
    cond: Conditioner,
    caps: RangeCaps,
    /// Ready connections without `fair` (with it they wait in `cond`'s tree).
    fifo: VecDeque<(usize, u32)>,
    filters: Filters,
    /// What a reload may change (`Settings::of`).
    set: Settings,
    max_conns: usize,
    gen: u32,
    epoch: Instant,
    now: u64,
    pool: Vec<Vec<u8>>,
    accept_paused: bool,
    signals: Signals,
    /// The settings in force (a reload names what it cannot change against them).
    config: Valid,
    closes: [u64; CloseReason::ALL.len()],
    handed: u64,
    evictions: u32,
    /// The program file and arguments this front started with (for an upgrade).
    program: Option<crate::upgrade::Program>,
    /// A new front started on SIGUSR2, until it serves or fails.
    upgrading: Option<crate::upgrade::Pending>,
    /// Our end of the socket pair the held connections go over to it.
    handover: Option<OwnedFd>,
    /// In a new front: its end of the pair from the old front, until that one has
    /// sent everything.
    predecessor: Option<OwnedFd>,
    /// Connections taken from the old front.
    adopted: u64,
}

impl Front {
    fn new(
        listen: SocketAddr,
        unix_path: &Path,
        filters: Filters,
        config: Valid,
        nofile: u64,
        signals: Signals,
        sockets: Sockets,
    ) -> Result<Front, String> {
        let poll = Poll::new().map_err(|e| e.to_string())?;
        let defer = config
            .condition
            .defer_accept
            .initial_secs(config.http.header_timeout);
        let (inherited_tcp, unix) = if sockets.listeners.is_empty() {
            listener::ensure_free(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
            // The handoff socket listens before the public port opens: once a client
            // can connect, a backend can too (a backend that connected after seeing
            // the port open was refused in the moment between the two).
            (None, proto::listen(unix_path).map_err(|e| e.to_string())?)
        } else {
            let (tcp, unix) = Front::listeners_of(sockets.listeners)?;
            (Some(tcp), unix)
        };
        // Slow-read prevention also bounds what a backend can queue for a reader
        // that stops reading (the start bound of `condition.unsent_max`, inherited
        // by every client; the backend's worker raises a proven reader's).
        let unsent_max = if filters.slowread {
            sluice_condition::slowread::unsent_start(config.condition.unsent_max)
        } else {
            0
        };
        // Several `SO_REUSEPORT` sockets on the port (`server.listen_sockets`, as a
        // worker of `sluice serve` has), each with its own SYN and accept queues: a
        // burst of new connections overflows one queue where it spreads over four,
        // and `defer_accept = "auto"` switches deferral off on overflows (with one
        // socket, a flood of 32,000 silent connections did, and then reached here).
        let mut tcp = match inherited_tcp {
            Some(ls) => {
                for l in &ls {
                    listener::set_inherited(l.as_raw_fd(), unsent_max)
                        .map_err(|e| e.to_string())?;
                }
                ls
            }
            None => (0..config.server.listen_sockets)
                .map(|_| listener::bind(listen, 4096, defer, unsent_max))
                .collect::<io::Result<Vec<_>>>()
                .map_err(|e| {
                    let _ = std::fs::remove_file(unix_path);
                    format!("cannot listen on {listen}: {e}")
                })?,
        };
        for (i, l) in tcp.iter_mut().enumerate() {
            poll.registry()
                .register(l, Token(TCP + i), Interest::READABLE)
                .map_err(|e| e.to_string())?;
        }
        poll.registry()
            .register(&mut SourceFd(&unix.as_raw_fd()), UNIX, Interest::READABLE)
            .map_err(|e| e.to_string())?;
        poll.registry()
            .register(
                &mut SourceFd(&signals.wake.as_raw_fd()),
                SIGNAL,
                Interest::READABLE,
            )
            .map_err(|e| e.to_string())?;
        if let Some(h) = &sockets.predecessor {
            socket2::SockRef::from(h)
                .set_nonblocking(true)
                .map_err(|e| e.to_string())?;
            poll.registry()
                .register(&mut SourceFd(&h.as_raw_fd()), HANDOVER, Interest::READABLE)
                .map_err(|e| e.to_string())?;
        }
        let room = nofile.saturating_sub(256) as usize;
        let max_conns = match config.condition.max_connections {
            0 => room,
            n => n.min(room),
        }
        .max(16);
        let c = &config.condition;
        let set = Settings::of(&config)?;
        let epoch = Instant::now();
        let auto_defer = (config.condition.defer_accept == sluice_config::DeferAccept::Auto
            && defer > 0)
            .then(|| {
                let fds = tcp.iter().map(|l| l.as_raw_fd()).collect();
                deferral::AutoDefer::new(fds, defer, CLOCK_BASE, None)
            });
        Ok(Front {
            poll,
            listeners: tcp,
            auto_defer,
            unix,
            unix_path: unix_path.to_path_buf(),
            conns: Slab::with_capacity(max_conns.min(1 << 20)),
            backends: Slab::new(),
            cond: Conditioner::with_capacity(max_conns.min(1 << 20)),
            caps: RangeCaps::new(crate::shared::cap_limits(c, max_conns)),
            fifo: VecDeque::new(),
            set,
            filters,
            max_conns,
            gen: random_start(),
            epoch,
            now: CLOCK_BASE,
            pool: Vec::new(),
            accept_paused: false,
            signals,
            config,
            closes: [0; CloseReason::ALL.len()],
            handed: 0,
            evictions: 0,
            program: crate::upgrade::Program::this(),
            upgrading: None,
            handover: None,
            predecessor: sockets.predecessor,
            adopted: 0,
        })
    }

    /// Nothing held and nothing under way: the loop may sleep its idle second.
    fn idle(&self) -> bool {
        self.conns.is_empty()
            && self.upgrading.is_none()
            && self.predecessor.is_none()
            && !self.accept_paused
    }

    fn run(mut self, config_path: Option<&Path>) -> Result<(), String> {
        use std::io::Write;
        let _ = writeln!(
            std::io::stdout(),
            "sluice condition: {} → unix:{} ({} connections at most)",
            self.listeners[0]
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            self.unix_path.display(),
            self.max_conns
        );
        let _ = std::io::stdout().flush();
        // Started by an older front: it stops accepting once it reads this, then
        // sends its connections (`HANDOVER`). Under systemd (`Type=notify`), ready.
        crate::upgrade::announce_ready();
        crate::systemd::notify("READY=1\nSTATUS=conditioning");
        let mut events = Events::with_capacity(1024);
        let mut next_sweep = self.epoch + SWEEP;
        while !self.signals.stop.load(Ordering::Relaxed) {
            if self.signals.reload.swap(false, Ordering::Relaxed) {
                crate::systemd::reloading();
                let began = crate::reloaded::Began::now();
                let made = self.reload(config_path);
                crate::systemd::notify("READY=1");
                began.tell(&made); // a waiting `sluice reload`
            }
            if self.signals.upgrade.swap(false, Ordering::Relaxed) {
                self.start_upgrade();
            }
            if self.signals.ignored.swap(false, Ordering::Relaxed) {
                tracing::warn!("SIGUSR1 ignored: sluice condition has no log file to reopen");
            }
            let now = Instant::now();
            // A connection came while the front slept its idle second: its
            // deadlines want the ordinary sweep.
            if !self.idle() {
                next_sweep = next_sweep.min(now + SWEEP);
            }
            let wait = next_sweep.saturating_duration_since(now);
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e.to_string());
                }
            }
            self.now = CLOCK_BASE + self.epoch.elapsed().as_millis() as u64;
            for ev in events.iter() {
                match ev.token() {
                    SIGNAL => self.signals.drain(),
                    UNIX => self.accept_backends(),
                    HANDOVER => self.adopt_handed(),
                    Token(t) if (TCP..TCP + MAX_LISTENERS).contains(&t) => self.accept(t - TCP),
                    Token(t) if t >= BACKEND_BASE => self.backend_says(t - BACKEND_BASE),
                    Token(k) => self.client(k),
                }
            }
            self.dispatch();
            if let Some(a) = &mut self.auto_defer {
                a.poll(self.now); // it logs a switch itself
            }
            if Instant::now() >= next_sweep {
                next_sweep = Instant::now() + if self.idle() { IDLE_SWEEP } else { SWEEP };
                self.evictions = 0;
                self.sweep();
                if self.accept_paused {
                    self.accept_paused = false;
                    for i in 0..self.listeners.len() {
                        self.accept(i);
                    }
                }
            }
            if self.upgrade_done() {
                // The socket file is the new front's now.
                tracing::info!(handed = self.handed, "sluice condition: upgraded");
                return Ok(());
            }
        }
        crate::systemd::notify("STOPPING=1");
        if let Some(p) = self.upgrading.take() {
            // Stopped while a new front was starting on our sockets: it stops too.
            p.cancel();
        }
        let _ = std::fs::remove_file(&self.unix_path);
        tracing::info!(handed = self.handed, "sluice condition: stopped");
        Ok(())
    }

    /// SIGHUP: read the `--config` file again. A file with errors is logged
    /// (`file:line: message`) and changes nothing. Otherwise the request limits, the
    /// header and idle deadlines (at once, also for connections already open: the
    /// sweep measures from each one's start), the range caps and `cap_exempt` take
    /// the new values, and the settings read only at start (the listener's and the
    /// descriptor budget's: `condition.max_connections`, `unsent_max`,
    /// `defer_accept`, turning `cap_address` on) are named in a warning.
    fn reload(&mut self, config_path: Option<&Path>) -> Result<(), String> {
        let Some(path) = config_path else {
            tracing::info!("SIGHUP: no --config file to read again");
            return Ok(());
        };
        let read = crate::load_config(Some(path), &Default::default())
            .and_then(|new| Ok((Settings::of(&new)?, new)));
        let (set, new) = match read {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("reload failed, still serving the previous configuration: {e}");
                return Err(e);
            }
        };
        // The front has no workers, sites or TLS of its own: only its own keys count
        // (`condition.*`, and how many sockets it listens on).
        let later: Vec<&str> = self
            .config
            .restart_only_changes(&new)
            .into_iter()
            .filter(|k| k.starts_with("condition.") || *k == "server.listen_sockets")
            .collect();
        if !later.is_empty() {
            tracing::warn!(
                "reload: {} changed and take effect only after a restart",
                later.join(", ")
            );
        }
        self.set = set;
        self.caps
            .set_limits(crate::shared::cap_limits(&new.condition, self.max_conns));
        crate::logging::apply(&new.log.level);
        self.config = new;
        tracing::info!("reloaded configuration");
        Ok(())
    }
}
