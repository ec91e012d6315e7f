//! Per-range connection caps shared by every worker (the paper's slow-read
//! prevention: by default no /8 may hold more than 25% of the server's connection
//! limit, no /16 more than 15%, no /24 more than 10%; for IPv6 the /32, /48 and /64).
//!
//! Why shared counters: with `SO_REUSEPORT` the kernel spreads one range's
//! connections over all workers, so a per-worker count would let a range hold
//! `workers ×` its share. The counters are three tables of 65,536 relaxed atomics
//! (768 KiB), indexed by a hash of the prefix; a connection costs three
//! `fetch_add`s when it opens and three `fetch_sub`s when it closes (tens of
//! nanoseconds, no lock). Two prefixes that share a slot add up, which can only make
//! a cap bite earlier for them, never later.
//!
//! Several serving processes (`server.processes`) count in one set of tables: the
//! server allocates them in memory the processes share and hands them to
//! [`RangeCaps::over`]. This crate only counts; it never maps memory.

use crate::addr::RangeKey;
use std::sync::atomic::{AtomicU32, Ordering};

/// Slots in each of the three tables.
pub const SLOTS: usize = 1 << 16;

pub struct RangeCaps {
    tables: [&'static [AtomicU32]; 3],
    limits: [u32; 3],
}

impl RangeCaps {
    /// `limits`: the most connections a /8, /16, /24 (IPv6: /32, /48, /64) may hold.
    /// The tables are allocated here and live as long as the process (a server has
    /// one `RangeCaps`).
    pub fn new(limits: [u32; 3]) -> RangeCaps {
        let table = || -> &'static [AtomicU32] {
            Box::leak((0..SLOTS).map(|_| AtomicU32::new(0)).collect::<Box<[_]>>())
        };
        RangeCaps::over(limits, [table(), table(), table()])
    }

    /// Count in tables the caller provides (zeroed, [`SLOTS`] each), e.g. in memory
    /// several processes share.
    pub fn over(limits: [u32; 3], tables: [&'static [AtomicU32]; 3]) -> RangeCaps {
        assert!(
            tables.iter().all(|t| t.len() == SLOTS),
            "cap tables hold SLOTS slots"
        );
        RangeCaps { tables, limits }
    }

    fn slot(v: u64) -> usize {
        (v.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48) as usize
    }

    /// Count a new connection from `key`. Returns the first level (0 = /8, 1 = /16,
    /// 2 = /24) whose range is now over its cap, if any. The connection is counted
    /// either way; [`RangeCaps::release`] must be called when it closes.
    pub fn acquire(&self, key: &RangeKey) -> Option<usize> {
        let mut over = None;
        for (level, v) in key.cap_prefixes() {
            let n = self.tables[level][Self::slot(v)].fetch_add(1, Ordering::Relaxed) + 1;
            if n > self.limits[level] && over.is_none() {
                over = Some(level);
            }
        }
        over
    }

    pub fn release(&self, key: &RangeKey) {
        for (level, v) in key.cap_prefixes() {
            self.tables[level][Self::slot(v)].fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether a new connection from `key` would be over a cap at some level (without
    /// counting it).
    pub fn would_exceed(&self, key: &RangeKey) -> bool {
        key.cap_prefixes().iter().any(|&(level, v)| {
            self.tables[level][Self::slot(v)].load(Ordering::Relaxed) >= self.limits[level]
        })
    }

    /// Connections counted for `key`'s range at `level`.
    pub fn count(&self, key: &RangeKey, level: usize) -> u32 {
        let v = key.cap_prefixes()[level].1;
        self.tables[level][Self::slot(v)].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_bite_at_the_right_level() {
        let caps = RangeCaps::new([100, 10, 5]);
        let k = |s: &str| RangeKey::of(s.parse().unwrap());
        for i in 0..5 {
            assert_eq!(caps.acquire(&k(&format!("10.1.2.{i}"))), None);
        }
        // The sixth from the same /24 is over the /24 cap.
        assert_eq!(caps.acquire(&k("10.1.2.99")), Some(2));
        // Another /24 of the same /16 is fine until the /16 holds 10.
        for i in 0..4 {
            assert_eq!(caps.acquire(&k(&format!("10.1.3.{i}"))), None);
        }
        assert_eq!(caps.acquire(&k("10.1.4.1")), Some(1));
        assert_eq!(caps.count(&k("10.1.0.0"), 1), 11);
        caps.release(&k("10.1.4.1"));
        caps.release(&k("10.1.2.99"));
        assert_eq!(caps.count(&k("10.1.0.0"), 1), 9);
        assert_eq!(caps.acquire(&k("192.0.2.1")), None);
    }
}
