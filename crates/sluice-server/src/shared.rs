//! What the workers share ([`Shared`]): the current snapshot (read on a generation
//! change), the stop flag, the process's connection count, the per-range cap
//! counters and the per-worker counters (relaxed atomics; these two in memory every
//! serving process shares, see `shm`), the status board, the disk threads and the
//! workers' wakers. No locks on the request path: the mutexes are taken only after
//! a reload, and when a worker starts or the server stops.

use crate::disk;
use crate::snapshot::Snapshot;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Counters one worker bumps (relaxed atomics on its own cache lines, so workers do
/// not contend); the status page sums them (`sluice-status`).
pub type Stats = sluice_status::Counters;

pub struct Shared {
    /// Per-range connection counts for the caps, shared by every worker.
    pub caps: sluice_condition::RangeCaps,
    /// Connections open in this process (its slot in the shared region), and the
    /// most it holds.
    pub open: &'static std::sync::atomic::AtomicUsize,
    /// Every serving process's slot (pid, open connections), for the status page.
    pub procs: &'static [crate::shm::ProcSlot],
    /// Where rule sets compiled on a reload count their rate conditions.
    pub rates: sluice_rules::rates::SharedRates,
    /// The kernel's SYN-queue overflow count, read once per interval for every
    /// worker of the server (`deferral::AutoDefer`).
    pub netstat: &'static sluice_condition::defer::SharedReading,
    /// Tarpits and oversize replies this process drips (its slot in the shared
    /// region; the cap is on the sum, [`Shared::drips_open`]).
    pub drips: &'static std::sync::atomic::AtomicUsize,
    /// This process's disk lanes, for the status page (`DiskPool::publish`).
    pub disk_slots: &'static [crate::shm::DiskSlot],
    pub max_open: usize,
    /// The whole server's connection limit (every process's): what the range
    /// caps are fractions of, on a reload too.
    pub server_connections: usize,
    /// Workers in this process (they share `max_open`); `stats` has every
    /// process's.
    pub local_workers: usize,
    pub stop: AtomicBool,
    /// Set with `stop` by SIGQUIT or an upgrade: responses in flight get
    /// `server.upgrade_grace` instead of `shutdown_grace`.
    pub quit: AtomicBool,
    pub generation: AtomicU64,
    snapshot: Mutex<Arc<Snapshot>>,
    /// One per worker of the whole server (every serving process's, in memory they
    /// share: `shm`), indexed by the worker's id.
    pub stats: &'static [Stats],
    /// Rates and top talkers for the status page.
    pub board: sluice_status::Board,
    /// The descriptor limit (for the status page).
    pub nofile: u64,
    /// `serve --from unix:PATH`: take connections from a `sluice condition` front
    /// process there instead of from listeners.
    pub from: Option<PathBuf>,
    /// Bytes of the kernel's TCP memory the whole server's unsent queues may share
    /// (`condition.unsent_total`, by default `kernel_unsent_budget`).
    pub unsent_budget: u64,
    /// Reads of cold file ranges off the workers (`[files] disk_threads`; set at
    /// start, not on reload). `None`: cold turns are sent from the worker.
    pub disk: Option<disk::DiskPool>,
    /// Each running worker's waker, by worker id: an idle worker sleeps up to a
    /// second, and `stop`/`quit` must not wait for it to look.
    wakers: Mutex<Vec<(usize, Arc<mio::Waker>)>>,
}

impl Shared {
    /// `max_connections`: this process's connection limit; `server_connections`:
    /// the whole server's (every process's; the caps are fractions of it). The
    /// counters and the cap tables are in `region`, shared with the other serving
    /// processes.
    pub fn new(
        snap: Arc<Snapshot>,
        region: &crate::shm::Region,
        slot: usize,
        local_workers: usize,
        max_connections: usize,
        server_connections: usize,
        nofile: u64,
    ) -> Arc<Shared> {
        // The process's slot (`Part::slot`): one forked again after one died, or
        // for a reload, starts from nothing.
        region.procs[slot].clear();
        region.procs[slot]
            .pid
            .store(std::process::id(), Ordering::Relaxed);
        sluice_rules::pattern::count_failures_in(&region.procs[slot].regex_failures);
        let c = &snap.config.condition;
        let unsent_budget = match c.unsent_total {
            0 => kernel_unsent_budget(),
            n => n,
        };
        let disk = match snap.config.files.disk_threads {
            0 => None,
            n => disk::DiskPool::start(n, snap.config.files.listing_threads)
                .map_err(
                    |e| tracing::warn!(error = %e, "no disk threads; cold reads block workers"),
                )
                .ok(),
        };
        if let Some(pool) = &disk {
            pool.know(&snap.devices);
        }
        Arc::new(Shared {
            open: &region.procs[slot].open,
            procs: region.procs,
            rates: region.rates,
            netstat: region.netstat,
            drips: &region.procs[slot].drips,
            disk_slots: &region.procs[slot].disks,
            max_open: max_connections,
            local_workers,
            caps: sluice_condition::RangeCaps::over(
                cap_limits(c, server_connections),
                region.caps(c.cap_address > 0),
            ),
            server_connections,
            stop: AtomicBool::new(false),
            quit: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            snapshot: Mutex::new(snap),
            stats: region.stats,
            board: sluice_status::Board::new(region.tops),
            nofile,
            from: None,
            unsent_budget,
            disk,
            wakers: Mutex::new(Vec::new()),
        })
    }

    /// A worker (new, or one replacing a worker that died) says how to wake it.
    pub fn set_waker(&self, id: usize, waker: Arc<mio::Waker>) {
        let mut w = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
        w.retain(|(i, _)| *i != id);
        w.push((id, waker));
    }

    /// End every worker's sleep, after `stop` or `quit` changed: each looks at
    /// them in the turn that follows.
    pub fn wake_workers(&self) {
        let w = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
        for (id, waker) in w.iter() {
            if let Err(e) = waker.wake() {
                tracing::warn!(worker = id, error = %e, "cannot wake a worker");
            }
        }
    }

    pub fn current(&self) -> (Arc<Snapshot>, u64) {
        let g = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        (g.clone(), self.generation.load(Ordering::Acquire))
    }

    pub fn replace(&self, snap: Snapshot) {
        let mut g = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        *g = Arc::new(snap);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Connections open in the whole server (every process's).
    pub fn open_total(&self) -> usize {
        self.procs
            .iter()
            .map(|p| p.open.load(Ordering::Relaxed))
            .sum()
    }

    /// Tarpits and oversize replies open in the whole server (every process's).
    pub fn drips_open(&self) -> usize {
        self.procs
            .iter()
            .map(|p| p.drips.load(Ordering::Relaxed))
            .sum()
    }
}

/// The share of the kernel's TCP memory sluice's unsent queues may take, in all:
/// half of `net.ipv4.tcp_mem`'s pressure mark (its second figure, in pages), the
/// point past which the kernel shrinks every socket's buffers. The other half is
/// left for what the server does not control: its clients' receive windows (on
/// this machine when the clients are local), uploads, other services. 1 GiB if
/// the file cannot be read. See `sluice_condition::slowread::unsent_share`.
fn kernel_unsent_budget() -> u64 {
    let pressure_pages = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_mem")
        .ok()
        .and_then(|t| t.split_whitespace().nth(1)?.parse::<u64>().ok());
    // SAFETY: sysconf reads a constant of the running kernel; no memory is touched.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    pressure_pages.map_or(1 << 30, |p| p * page / 2)
}

/// The caps as counts for a server of `connections` (its `max_connections`, every
/// process's): /8, /16, /24 (IPv6 /32, /48, /64) as fractions of it, and one
/// address, in `sluice_condition::caps::Limits`' order; `u32::MAX` is no cap.
pub fn cap_limits(
    c: &sluice_config::ConditionSection,
    connections: usize,
) -> sluice_condition::caps::Limits {
    let share = |f: f64| ((connections as f64 * f).ceil() as u32).max(1);
    let address = match c.cap_address {
        0 => u32::MAX,
        n => n,
    };
    [share(c.cap_8), share(c.cap_16), share(c.cap_24), address]
}
