//! The small-file bytes every cache of one worker keeps, counted together. A
//! worker has one file cache per site, and each used to be bounded on its own
//! (`MAX_CACHED_BYTES`): a server with twenty sites could keep twenty times that
//! per worker, and a client asking for many distinct small files across the sites
//! could make it. The caches of a worker live on its thread, so the sum is a
//! thread-local: no atomics, nothing shared between workers.
//!
//! Owns the count only; each cache reports its own total when it changes
//! ([`FileCache::set_bytes`](super::FileCache), and when it is dropped).
//! Costs a thread-local read per small file loaded, and a write per change.

use std::cell::Cell;

thread_local! {
    static KEPT: Cell<usize> = const { Cell::new(0) };
}

/// Bytes every cache of this thread keeps now.
pub(super) fn kept() -> usize {
    KEPT.get()
}

/// A cache's own total went from `old` to `new`.
pub(super) fn changed(old: usize, new: usize) {
    KEPT.set(KEPT.get() - old + new);
}
