//! A reload's new snapshot, built beside the serving workers without taking their
//! CPU; the old snapshot's memory given back once nothing holds it; and the
//! master's heap settled before it forks, so that forked processes keep sharing it.
//!
//! Owns:
//! - [`build_beside`]: the thread that reads and compiles a reloaded configuration,
//!   keeping the compiled rules of a site whose rules files (and the files they
//!   name) are byte for byte the same (`sluice_rules::inputs`): then nothing is
//!   compiled, and serving processes go on sharing the master's pages. It runs at
//!   nice +10 for its short life, as the listing threads do
//!   (`sluice_static::cold::lower_this_thread`), so when both want a core the
//!   workers get it first. A million regex rules compile in about 11 s on this
//!   machine's two cores when nothing else runs; with two serving processes, the
//!   master and then each process compile them. Start-up compiles at full
//!   priority: nothing serves yet. In the master the compile's thread stays
//!   parked while its snapshot is in use ([`build_parked`]), so that the next
//!   compile allocates in another malloc arena and the old arena empties whole.
//! - [`Retiring`]: the snapshots a reload replaced, until no worker or connection
//!   holds them. The last reference is dropped on a thread at nice +10
//!   ([`drop_beside`]), never on a worker: freeing a million rules takes hundreds
//!   of milliseconds, which a worker that dropped them last would have stalled
//!   for. Then `malloc_trim(0)` returns the freed pages to the system. Without
//!   it, glibc kept them: one process's RSS went 151 → 265 → 320 → … → 648 MB
//!   over fourteen reloads of 200,000 rules, with 184 MB in use.
//! - [`settle_heap`]: see there.
//!
//! Figures: docs/BENCHMARKS.md, "The fortieth session: reloading a million rules".
//!
//! Must not: hold a lock a worker takes while it compiles or frees (the shared
//! snapshot is swapped by the caller, after the build); drop a snapshot that could
//! still be in use (it is dropped only at a strong count of one: no one else can
//! clone it then).
//!
//! Costs: a thread per reload, and a `malloc_trim` (a few milliseconds per
//! hundred MB freed, holding each malloc arena's lock in turn) once per reload
//! whose old snapshot is gone. Nothing between reloads but one count read per
//! retired snapshot per supervisor turn.

use crate::settings::{load_config, Overrides};
use crate::snapshot::Snapshot;
use std::path::Path;
use std::sync::Arc;

/// Read the configuration and compile it on a thread of its own at lower priority
/// (module doc), and wait for it. Rules that would compile from the same bytes as
/// `previous`'s are not compiled again (`Snapshot::build_with`).
pub(crate) fn build_beside(
    path: Option<&Path>,
    ov: &Overrides,
    rates: Option<sluice_rules::rates::SharedRates>,
    previous: Arc<Snapshot>,
) -> Result<Snapshot, String> {
    build_parked(path, ov, rates, previous).0
}

/// The thread that compiled a snapshot, parked, so that glibc does not give its
/// arena to the next compile's thread while that snapshot lives (the master's
/// reloads, [`build_parked`]). Dropping it lets the thread end.
pub(crate) struct Parked(Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>);

impl Parked {
    /// No thread: the snapshot built at start, on the main thread.
    pub fn none() -> Parked {
        Parked(None)
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        if let Some((release, thread)) = self.0.take() {
            drop(release);
            let _ = thread.join();
        }
    }
}

/// [`build_beside`], with the compiling thread kept parked until the returned
/// [`Parked`] is dropped. glibc gives a new thread the arena of one that ended
/// (its free list) before it makes a new arena: every reload's compile then lands
/// in the arena that holds the snapshot in use, between its chunks, and once that
/// snapshot is freed its pages stay partly used. In the master, after five reloads
/// of a million changed rules, 900 MB were resident for 447 MB in use (and shared
/// with every serving process forked since). With the thread of the snapshot in
/// use parked, the next compile gets another arena, and the old one is emptied
/// whole when its snapshot goes. Drop the `Parked` of the replaced snapshot after
/// the snapshot itself.
pub(crate) fn build_parked(
    path: Option<&Path>,
    ov: &Overrides,
    rates: Option<sluice_rules::rates::SharedRates>,
    previous: Arc<Snapshot>,
) -> (Result<Snapshot, String>, Parked) {
    let path = path.map(Path::to_path_buf);
    let ov = ov.clone();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("sluice-reload".into())
        .spawn(move || {
            lower_priority_for_compile();
            let built = load_config(path.as_deref(), &ov).and_then(|c| {
                Snapshot::build_with(c, rates, crate::snapshot::Rules::Compile(Some(&previous)))
            });
            drop(previous);
            let _ = done_tx.send(built);
            // Parked: holds its arena, and nothing else, until released.
            let _ = release_rx.recv();
        });
    let thread = match spawned {
        Ok(t) => t,
        Err(e) => {
            return (
                Err(format!("cannot start the reload's thread: {e}")),
                Parked(None),
            )
        }
    };
    let built = done_rx
        .recv()
        .unwrap_or_else(|_| Err("the reload's build panicked".to_string()));
    (built, Parked(Some((release_tx, thread))))
}

/// Lower the calling thread's priority to the reload thread's (nice +10): for
/// `sluice reload --config`, whose check compiles the rules beside a serving server.
pub fn lower_priority_for_compile() {
    sluice_static::cold::lower_this_thread();
}

/// Snapshots replaced by reloads, kept until nothing else holds them (module doc).
#[derive(Default)]
pub(crate) struct Retiring(Vec<Arc<Snapshot>>);

impl Retiring {
    pub fn push(&mut self, old: Arc<Snapshot>) {
        self.0.push(old);
        self.sweep();
    }

    /// Drop the snapshots only this holds, and give the freed memory back to the
    /// system, on a thread at nice +10 ([`drop_beside`], not waited for).
    pub fn sweep(&mut self) {
        let (gone, kept) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|s| Arc::strong_count(s) == 1);
        self.0 = kept;
        drop_beside(gone, false);
    }
}

/// Drop `snapshots` (the last holder of each) and trim, on a thread at nice +10:
/// freeing a million compiled rules takes a core for a while. `wait`: join it (the
/// master, which must have no thread running when it forks). Inline if no thread
/// starts.
pub(crate) fn drop_beside(snapshots: Vec<Arc<Snapshot>>, wait: bool) {
    if snapshots.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("sluice-retire".into())
        .spawn(move || {
            lower_priority_for_compile();
            drop(snapshots);
            trim();
        });
    match spawned {
        Ok(t) if wait => {
            let _ = t.join();
        }
        Ok(_) => {}
        Err(_) => trim(),
    }
}

/// How many large requests [`settle_heap`] makes: each has glibc sort up to
/// 10,000 chunks of its unsorted free list into their bins.
const SETTLE_ROUNDS: usize = 1000;

/// Before the master forks serving processes: return the free pages (`trim`) and
/// have the allocator sort its free lists here, once, rather than in each serving
/// process. glibc keeps the chunks a compile freed in an unsorted list, and sorts
/// them into bins during later `malloc`s, writing each chunk's header. In a forked
/// process every such write copies a page it shared with the master: after a
/// million rules were compiled, each serving process's once-a-second allocations
/// unshared 8–12 MB a second of the heap, 140 MB in the first 12 s. A request
/// that no free chunk fits exactly (100 KiB, from the large bins) sorts up to
/// 10,000 chunks; [`SETTLE_ROUNDS`] of them sort millions, and cost microseconds
/// once the list is empty. Nothing to do with another allocator.
pub(crate) fn settle_heap() {
    trim();
    #[cfg(target_env = "gnu")]
    for _ in 0..SETTLE_ROUNDS {
        drop(std::hint::black_box(Vec::<u8>::with_capacity(100 << 10)));
    }
}

/// Return the allocator's free pages to the system (glibc: `malloc_trim(0)`
/// releases the free pages inside every arena, not only at a heap's top).
pub(crate) fn trim() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes no pointers and only changes the allocator's own
    // free lists, under each arena's lock.
    unsafe {
        libc::malloc_trim(0);
    }
}
