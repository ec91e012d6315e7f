//! Request rates for classification rules (`rate=`, `rate24=`, `repeat=`), in
//! bounded memory whatever the number of clients.
//!
//! One table per rule set, shared by every worker and every rate condition: a
//! count-min sketch of [`CELLS`] atomic cells, two rows. A key (the rule's seed with
//! the client address, its /24 or /64, or the address and the URL) maps to one cell
//! per row and per window parity; a cell packs the window number (24 bits) and the
//! count (40 bits). The rate over a sliding window is estimated the usual way from
//! two fixed windows: `current + previous × (1 − elapsed fraction of current)`.
//!
//! Error: count-min only overestimates. With `n` requests in a window spread over
//! many keys, a key's count is high by at most `e·n / (CELLS/2)` with probability
//! `1 − e^-2` per row (the two rows' minimum is taken): with 1,000,000 requests per
//! window over a million addresses, about 5 requests. Memory: [`CELLS`] × 8 bytes =
//! 8 MiB, fixed. Cost: two or four relaxed atomic operations per rate condition
//! checked, and a hash; nothing for requests that reach no rate condition.
//!
//! Several serving processes (`server.processes`) must count a client's requests
//! together: the server passes cells in memory they share, with one epoch
//! ([`SharedRates`]); every rule set any of them compiles counts there. Keys stay
//! apart by the rule's seed (its position in its file) and the site's salt.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Cells in the table (both rows, both window parities).
pub const CELLS: usize = 1 << 20;
const ROWS: usize = 2;
const COUNT_BITS: u32 = 40;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

pub struct RateTable {
    cells: Cells,
    epoch: Instant,
}

/// The table's cells: its own, or [`SharedRates`]'.
enum Cells {
    Owned(Box<[AtomicU64]>),
    Shared(&'static [AtomicU64]),
}

/// Cells (exactly [`CELLS`], zeroed) that outlive every rule set and may be shared
/// with other processes, and the instant window numbers count from (the same in
/// every process: `Instant` is the system-wide monotonic clock).
#[derive(Clone, Copy)]
pub struct SharedRates {
    pub cells: &'static [AtomicU64],
    pub epoch: Instant,
}

impl std::fmt::Debug for SharedRates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedRates({} cells)", self.cells.len())
    }
}

impl std::fmt::Debug for RateTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RateTable({} cells)", self.cells().len())
    }
}

impl Default for RateTable {
    fn default() -> Self {
        RateTable {
            cells: Cells::Owned((0..CELLS).map(|_| AtomicU64::new(0)).collect()),
            epoch: Instant::now(),
        }
    }
}

impl RateTable {
    /// Count in shared cells.
    pub fn over(shared: SharedRates) -> RateTable {
        assert_eq!(shared.cells.len(), CELLS, "a rate table holds CELLS cells");
        RateTable {
            cells: Cells::Shared(shared.cells),
            epoch: shared.epoch,
        }
    }

    fn cells(&self) -> &[AtomicU64] {
        match &self.cells {
            Cells::Owned(c) => c,
            Cells::Shared(c) => c,
        }
    }

    /// Bytes held, whatever the number of clients.
    pub fn memory(&self) -> usize {
        self.cells().len() * 8
    }

    /// Count one request for `key` in a sliding window of `window_ms` (`add`; else
    /// only look: a request asked again, already counted), and return the
    /// estimated number of requests in the window including this one.
    pub fn hit(&self, key: impl Hash, window_ms: u64, add: bool) -> u64 {
        let now = self.epoch.elapsed().as_millis() as u64;
        self.count_at(key, window_ms, now, add)
    }

    /// [`RateTable::hit`] at `now_ms` (from the table's epoch), counting.
    pub fn hit_at(&self, key: impl Hash, window_ms: u64, now_ms: u64) -> u64 {
        self.count_at(key, window_ms, now_ms, true)
    }

    fn count_at(&self, key: impl Hash, window_ms: u64, now_ms: u64, add: bool) -> u64 {
        let window_ms = window_ms.max(1);
        let win = now_ms / window_ms;
        let frac = (now_ms % window_ms) as f64 / window_ms as f64;
        let (cur_tag, prev_tag) = (win & 0xff_ffff, win.wrapping_sub(1) & 0xff_ffff);
        let mut best = u64::MAX;
        let half = CELLS / ROWS;
        let cells = self.cells();
        for row in 0..ROWS {
            let mut h = rustc_hash::FxHasher::default();
            (row as u64 ^ 0x9e37_79b9).hash(&mut h);
            key.hash(&mut h);
            let x = h.finish().wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let base = row * half + ((x >> 20) as usize % (half / 2)) * 2;
            let cur = &cells[base + (win & 1) as usize];
            let prev = &cells[base + (win.wrapping_sub(1) & 1) as usize];
            let c = if add {
                bump(cur, cur_tag)
            } else {
                count_in(cur.load(Ordering::Relaxed), cur_tag)
            };
            let p = count_in(prev.load(Ordering::Relaxed), prev_tag);
            let est = c + (p as f64 * (1.0 - frac)) as u64;
            best = best.min(est);
        }
        best
    }
}

/// A cell's count for window `tag` (zero if it holds another window's).
fn count_in(v: u64, tag: u64) -> u64 {
    if v >> COUNT_BITS == tag {
        v & COUNT_MASK
    } else {
        0
    }
}

/// Add one to a cell for window `tag`, restarting it if it holds an older window.
fn bump(cell: &AtomicU64, tag: u64) -> u64 {
    let mut v = cell.load(Ordering::Relaxed);
    loop {
        let next = if v >> COUNT_BITS == tag {
            v + 1
        } else {
            (tag << COUNT_BITS) | 1
        };
        match cell.compare_exchange_weak(v, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next & COUNT_MASK,
            Err(now) => v = now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_within_a_window_and_slides() {
        let t = RateTable::default();
        for i in 1..=100 {
            assert_eq!(t.hit_at(("a", 1), 10_000, 500), i);
        }
        // Another key is independent.
        assert_eq!(t.hit_at(("b", 1), 10_000, 600), 1);
        // Half-way through the next window, half the previous one still counts.
        assert_eq!(t.hit_at(("a", 1), 10_000, 15_000), 1 + 50);
        // Two windows later it is gone.
        assert_eq!(t.hit_at(("a", 1), 10_000, 30_500), 1);
        // Looking counts nothing.
        assert_eq!(t.count_at(("a", 1), 10_000, 30_600, false), 1);
        assert_eq!(t.hit_at(("a", 1), 10_000, 30_700), 2);
    }

    #[test]
    fn two_tables_over_the_same_cells_count_together() {
        let cells: &'static [AtomicU64] =
            Box::leak((0..CELLS).map(|_| AtomicU64::new(0)).collect::<Box<[_]>>());
        let shared = SharedRates {
            cells,
            epoch: Instant::now(),
        };
        let (a, b) = (RateTable::over(shared), RateTable::over(shared));
        for i in 1..=10 {
            assert_eq!(a.hit_at(("k", 1), 10_000, 100), 2 * i - 1);
            assert_eq!(b.hit_at(("k", 1), 10_000, 100), 2 * i);
        }
    }

    #[test]
    fn a_million_addresses_stay_in_bounded_memory_with_small_error() {
        let t = RateTable::default();
        for i in 0..1_000_000u32 {
            t.hit_at(i, 60_000, 1000);
        }
        assert_eq!(t.memory(), 8 << 20);
        // A fresh key's first hit: the overestimate is the collision error.
        let mut worst = 0;
        for i in 2_000_000..2_001_000u32 {
            worst = worst.max(t.hit_at(i, 60_000, 1000) - 1);
        }
        assert!(worst <= 10, "overestimate {worst}");
    }
}
