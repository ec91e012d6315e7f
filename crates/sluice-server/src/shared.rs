//! What the workers share ([`Shared`]): the current snapshot (read on a generation
//! change), the stop flag, the server-wide connection count and the per-range cap
//! counters (relaxed atomics), per-worker counters, the status board and the disk
//! threads. No locks on the request path: the mutex is taken only after a reload.

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
    /// Connections open in the whole server, and the most it holds.
    pub open: std::sync::atomic::AtomicUsize,
    /// Connections held by `tarpit`/`oversize` answers (not counted in `open`).
    pub drips: std::sync::atomic::AtomicUsize,
    pub max_open: usize,
    pub stop: AtomicBool,
    pub generation: AtomicU64,
    snapshot: Mutex<Arc<Snapshot>>,
    /// One per worker.
    pub stats: Vec<Stats>,
    /// Rates and top talkers for the status page.
    pub board: sluice_status::Board,
    /// The descriptor limit (for the status page).
    pub nofile: u64,
    /// `serve --from unix:PATH`: take connections from a `sluice condition` front
    /// process there instead of from listeners.
    pub from: Option<PathBuf>,
    /// Reads of cold file ranges off the workers (`[files] disk_threads`; set at
    /// start, not on reload). `None`: cold turns are sent from the worker.
    pub disk: Option<disk::DiskPool>,
}

impl Shared {
    /// `max_connections`: the whole server's connection limit (the caps are
    /// fractions of it).
    pub fn new(snap: Snapshot, workers: usize, max_connections: usize, nofile: u64) -> Arc<Shared> {
        let c = &snap.config.condition;
        let limit = |f: f64| ((max_connections as f64 * f).ceil() as u32).max(1);
        let disk = match snap.config.files.disk_threads {
            0 => None,
            n => disk::DiskPool::start(n)
                .map_err(
                    |e| tracing::warn!(error = %e, "no disk threads; cold reads block workers"),
                )
                .ok(),
        };
        Arc::new(Shared {
            open: std::sync::atomic::AtomicUsize::new(0),
            drips: std::sync::atomic::AtomicUsize::new(0),
            max_open: max_connections,
            caps: sluice_condition::RangeCaps::new([
                limit(c.cap_8),
                limit(c.cap_16),
                limit(c.cap_24),
            ]),
            stop: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            snapshot: Mutex::new(Arc::new(snap)),
            stats: (0..workers).map(|_| Stats::default()).collect(),
            board: sluice_status::Board::new(workers),
            nofile,
            from: None,
            disk,
        })
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
}
