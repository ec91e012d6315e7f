//! Per-range connection caps shared by every worker (the paper's slow-read
//! prevention: by default no /8 may hold more than 25% of the server's connection
//! limit, no /16 more than 15%, no /24 more than 10%; for IPv6 the /32, /48 and /64),
//! and the operator's cap on one address (IPv4: one host; IPv6: one /64, what one
//! subscriber gets), off by default: nginx's `limit_conn` on the client address,
//! counted here from accept, before the head, so connections that never send one
//! count too.
//!
//! Why shared counters: with `SO_REUSEPORT` the kernel spreads one range's
//! connections over all workers, so a per-worker count would let a range hold
//! `workers ×` its share. The ranges' counters are three tables of 65,536 relaxed
//! atomics (768 KiB), indexed by a hash of the prefix; a connection costs three
//! `fetch_add`s when it opens and three `fetch_sub`s when it closes (tens of
//! nanoseconds, no lock). Two prefixes that share a slot add up, which can only make
//! a cap bite earlier for them, never later: the ranges' caps are hundreds or
//! thousands of connections, where that hardly matters.
//!
//! A cap on one address is a handful of connections, where a shared slot would
//! matter (a client refused because a heavy one shares its slot). So addresses are
//! counted only when the cap is on, in a table of their own of 2^20 slots (4 MiB,
//! as nginx's usual 10 MB `limit_conn_zone`; its pages are only backed once
//! touched), and each address in two slots by two independent hashes: it is over
//! its cap only when both are (a count-min sketch). A wrong refusal then needs both
//! of its slots shared with addresses that together hold the cap: with 20,000
//! clients, each slot is shared with probability ~4%. Cost with the cap on: two
//! more atomics on open and on close, in two cold cache lines.
//!
//! The caps are atomics too, so a reload changes them for the whole server at once
//! ([`RangeCaps::set_limits`]); connections already open stay open. Whether
//! addresses are counted at all is decided at start (a reload that turns the cap on
//! cannot count the connections already open).
//!
//! Several serving processes (`server.processes`) count in one set of tables: the
//! server allocates them in memory the processes share and hands them to
//! [`RangeCaps::over`]. This crate only counts; it never maps memory.

use crate::addr::RangeKey;
use std::sync::atomic::{AtomicU32, Ordering};

/// Slots in each range table.
pub const SLOTS: usize = 1 << 16;
/// Slots in the address table.
pub const ADDRESS_SLOTS: usize = 1 << 20;
/// The level [`RangeCaps::acquire`] reports for the cap on one address (the
/// ranges are 0 = /8, 1 = /16, 2 = /24).
pub const ADDRESS: usize = 3;

/// The caps, in the order of the levels: /8, /16, /24 (IPv6 /32, /48, /64), one
/// address (IPv6 one /64). `u32::MAX`: no cap.
pub type Limits = [u32; 4];

/// The tables to count in: the three ranges', and the addresses' (`None`: the
/// cap on one address is off and addresses are not counted).
pub struct Tables {
    pub ranges: [&'static [AtomicU32]; 3],
    pub addresses: Option<&'static [AtomicU32]>,
}

impl Tables {
    /// Tables of this process's own (zeroed; they live as long as the process).
    pub fn leaked(addresses: bool) -> Tables {
        let table = |n: usize| -> &'static [AtomicU32] {
            Box::leak((0..n).map(|_| AtomicU32::new(0)).collect::<Box<[_]>>())
        };
        Tables {
            ranges: [table(SLOTS), table(SLOTS), table(SLOTS)],
            addresses: addresses.then(|| table(ADDRESS_SLOTS)),
        }
    }
}

pub struct RangeCaps {
    tables: Tables,
    limits: [AtomicU32; 4],
}

impl RangeCaps {
    /// Caps over tables of this process's own; addresses are counted if
    /// `limits[ADDRESS]` is a cap.
    pub fn new(limits: Limits) -> RangeCaps {
        RangeCaps::over(limits, Tables::leaked(limits[ADDRESS] != u32::MAX))
    }

    /// Count in tables the caller provides (zeroed), e.g. in memory several
    /// processes share.
    pub fn over(limits: Limits, tables: Tables) -> RangeCaps {
        assert!(
            tables.ranges.iter().all(|t| t.len() == SLOTS)
                && tables.addresses.is_none_or(|t| t.len() == ADDRESS_SLOTS),
            "cap tables hold SLOTS (addresses: ADDRESS_SLOTS) slots"
        );
        RangeCaps {
            tables,
            limits: limits.map(AtomicU32::new),
        }
    }

    /// New caps (a reload), for the connections that open from now on. The cap on
    /// one address stays off if addresses are not counted.
    pub fn set_limits(&self, limits: Limits) {
        for (l, v) in self.limits.iter().zip(limits) {
            l.store(v, Ordering::Relaxed);
        }
    }

    /// Whether addresses are counted (the cap on one address was on at start).
    pub fn counts_addresses(&self) -> bool {
        self.tables.addresses.is_some()
    }

    fn slot(v: u64) -> usize {
        (v.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48) as usize
    }

    /// An address's two slots, by two independent hashes (one slot when they agree,
    /// so a count is never taken twice from one slot).
    fn address_slots(key: &RangeKey) -> [Option<usize>; 2] {
        let v = key.address_value();
        let mask = ADDRESS_SLOTS as u64 - 1;
        let a = (v.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 44) & mask;
        let x = (v ^ (v >> 31)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
        let b = (x ^ (x >> 32)) & mask;
        [Some(a as usize), (b != a).then_some(b as usize)]
    }

    /// Count a new connection from `key`. Returns the first level (0 = /8, 1 = /16,
    /// 2 = /24, [`ADDRESS`]) whose range is now over its cap, if any. The
    /// connection is counted either way; [`RangeCaps::release`] must be called
    /// when it closes.
    pub fn acquire(&self, key: &RangeKey) -> Option<usize> {
        let mut over = None;
        for (level, v) in key.cap_prefixes() {
            let n = self.tables.ranges[level][Self::slot(v)].fetch_add(1, Ordering::Relaxed) + 1;
            if n > self.limits[level].load(Ordering::Relaxed) && over.is_none() {
                over = Some(level);
            }
        }
        if let Some(t) = self.tables.addresses {
            let least = Self::address_slots(key)
                .into_iter()
                .flatten()
                .map(|s| t[s].fetch_add(1, Ordering::Relaxed) + 1)
                .min()
                .unwrap_or(0);
            if over.is_none() && least > self.limits[ADDRESS].load(Ordering::Relaxed) {
                over = Some(ADDRESS);
            }
        }
        over
    }

    pub fn release(&self, key: &RangeKey) {
        for (level, v) in key.cap_prefixes() {
            self.tables.ranges[level][Self::slot(v)].fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(t) = self.tables.addresses {
            for s in Self::address_slots(key).into_iter().flatten() {
                t[s].fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether a new connection from `key` would be over a cap at some level (without
    /// counting it).
    pub fn would_exceed(&self, key: &RangeKey) -> bool {
        key.cap_prefixes().iter().any(|&(level, v)| {
            self.tables.ranges[level][Self::slot(v)].load(Ordering::Relaxed)
                >= self.limits[level].load(Ordering::Relaxed)
        }) || (self.tables.addresses.is_some()
            && self.count(key, ADDRESS) >= self.limits[ADDRESS].load(Ordering::Relaxed))
    }

    /// Connections counted for `key`'s range at `level` (for [`ADDRESS`]: the
    /// smaller of its two slots, which is at least its own count; 0 when
    /// addresses are not counted).
    pub fn count(&self, key: &RangeKey, level: usize) -> u32 {
        if level == ADDRESS {
            let Some(t) = self.tables.addresses else {
                return 0;
            };
            return Self::address_slots(key)
                .into_iter()
                .flatten()
                .map(|s| t[s].load(Ordering::Relaxed))
                .min()
                .unwrap_or(0);
        }
        let v = key.cap_prefixes()[level].1;
        self.tables.ranges[level][Self::slot(v)].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_bite_at_the_right_level() {
        let caps = RangeCaps::new([100, 10, 5, u32::MAX]);
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

    #[test]
    fn one_address_is_capped_alone_and_a_reload_moves_the_cap() {
        let caps = RangeCaps::new([u32::MAX, u32::MAX, u32::MAX, 3]);
        let k = |s: &str| RangeKey::of(s.parse().unwrap());
        for _ in 0..3 {
            assert_eq!(caps.acquire(&k("198.51.100.7")), None);
        }
        assert!(caps.would_exceed(&k("198.51.100.7")));
        assert_eq!(caps.acquire(&k("198.51.100.7")), Some(ADDRESS));
        assert_eq!(caps.count(&k("198.51.100.7"), ADDRESS), 4);
        // Its neighbour in the same /24, and anyone else, are not affected.
        assert!(!caps.would_exceed(&k("198.51.100.8")));
        assert_eq!(caps.acquire(&k("198.51.100.8")), None);
        // IPv6: one /64 is one address.
        for i in 0..3 {
            assert_eq!(caps.acquire(&k(&format!("2001:db8:0:1::{i}"))), None);
        }
        assert_eq!(caps.acquire(&k("2001:db8:0:1:ffff::1")), Some(ADDRESS));
        // A reload raises the cap for the next connection; closes count down.
        caps.set_limits([u32::MAX, u32::MAX, u32::MAX, 10]);
        assert_eq!(caps.acquire(&k("198.51.100.7")), None);
        for _ in 0..5 {
            caps.release(&k("198.51.100.7"));
        }
        assert_eq!(caps.count(&k("198.51.100.7"), ADDRESS), 0);
        // 198.51.100.8 is still open: the /24 now holds two.
        caps.set_limits([u32::MAX, u32::MAX, 1, u32::MAX]);
        assert_eq!(caps.acquire(&k("198.51.100.9")), Some(2));
    }

    /// 20,000 clients at random addresses with 2 connections each, and one that
    /// holds 4, all under a cap of 4: none is refused. (One slot per address in a
    /// 65,536-slot table, the ranges' layout, refuses over 500 of these connections:
    /// slots that three such clients share hold 6.)
    #[test]
    fn many_small_clients_stay_under_a_small_cap() {
        let caps = RangeCaps::new([u32::MAX, u32::MAX, u32::MAX, 4]);
        let mut refused = 0;
        let heavy = RangeKey::of("203.0.113.5".parse().unwrap());
        for _ in 0..4 {
            refused += usize::from(caps.acquire(&heavy).is_some());
        }
        let mut x: u64 = 0x243F_6A88_85A3_08D3;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ip = std::net::Ipv4Addr::from(x as u32);
            for _ in 0..2 {
                refused += usize::from(caps.acquire(&RangeKey::of(ip.into())).is_some());
            }
        }
        assert_eq!(refused, 0);
        assert_eq!(caps.count(&heavy, ADDRESS), 4);
        assert!(caps.would_exceed(&heavy));
    }

    #[test]
    fn without_the_address_cap_addresses_are_not_counted() {
        let caps = RangeCaps::new([u32::MAX; 4]);
        assert!(!caps.counts_addresses());
        let k = RangeKey::of("192.0.2.1".parse().unwrap());
        for _ in 0..100 {
            assert_eq!(caps.acquire(&k), None);
        }
        // A reload cannot turn it on: nothing open was counted.
        caps.set_limits([u32::MAX, u32::MAX, u32::MAX, 1]);
        assert_eq!(caps.acquire(&k), None);
        assert_eq!(caps.count(&k, ADDRESS), 0);
    }
}
