//! What the caches of one worker keep, counted together over its sites.
//!
//! A worker has one file handler per site, and with it one file cache and one
//! listing cache per site. Each was bounded on its own, so a server with twenty
//! sites could keep twenty times a bound per worker, and a client asking across
//! the sites could make it. A [`Share`] is one cache's count, in a total for its
//! kind that every cache of that kind on the worker's thread reads: the file
//! cache's small files' bytes (`cache::MAX_CACHED_BYTES`) and open descriptors
//! (`cache::MAX_CACHED_FDS`), the listing pages' bytes, the big pages' kept apart
//! and the gzipped forms' (`listing::pages`). The caches of a worker live on
//! its thread (built and dropped there: a reload builds new ones and drops the old),
//! so the totals are thread-locals: no atomics, nothing shared between workers.
//!
//! Owns the counting only: each cache decides what to keep against the total.
//! Costs a thread-local read where a cache checks the bound, and a write per change.

use std::cell::Cell;
use std::thread::LocalKey;

/// What the caches of one kind on a thread keep, in all (`thread_local!`).
pub(crate) type Total = LocalKey<Cell<usize>>;

/// One cache's count, in its thread's [`Total`] too; given back when dropped.
pub(crate) struct Share {
    mine: usize,
    total: &'static Total,
}

impl Share {
    pub(crate) const fn new(total: &'static Total) -> Share {
        Share { mine: 0, total }
    }

    /// This cache's count.
    pub(crate) fn mine(&self) -> usize {
        self.mine
    }

    /// What every cache of this kind on this thread keeps, this one's too.
    pub(crate) fn all(&self) -> usize {
        self.total.get()
    }

    /// This cache now keeps `n`.
    pub(crate) fn set(&mut self, n: usize) {
        // Saturating: a count can only be wrong if a cache moved threads, and that
        // must not panic a server.
        self.total
            .set(self.total.get().saturating_sub(self.mine) + n);
        self.mine = n;
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.set(0);
    }
}
