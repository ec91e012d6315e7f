//! Memory every serving process shares (`server.processes`): one anonymous
//! `MAP_SHARED` mapping, made before the serving processes are forked, holding the
//! whole server's per-worker counters ([`Stats`], for the status page) and top-list
//! slots ([`TopSlot`], so the status page lists the whole server's talkers), two
//! [`ProcSlot`]s per process (one per generation, [`generations`]: its pid, open
//! connections and regex failures, so the status page sums them, its tarpits, so
//! `tarpit_max` caps their sum, and which reload it has made, so the master knows
//! when a reload is done), the three range-cap tables and the address-cap table (`sluice_condition::RangeCaps`,
//! so a /24's cap, and one address's, holds across processes as it holds across
//! threads) and the rate cells of the
//! rules' rate conditions (`sluice_rules::rates`, so `rate=` counts a client's
//! requests whichever process answers them), and the last reading of the kernel's
//! SYN-queue overflow count (`sluice_condition::defer::SharedReading`, so
//! `defer_accept = "auto"` reads `/proc/net/netstat` once per interval for the
//! whole server, not once per worker).
//!
//! What it owns: the mapping and the layout of what is in it. What it must not do:
//! hold anything but atomics (no pointers, no locks: a process that dies mid-update
//! leaves a counter one off, never a structure broken), or be unmapped (the slices
//! it hands out are `'static`; the mapping lives as long as the process).
//! Cost: nothing per request beyond the atomics it replaces: the same relaxed
//! `fetch_add`s, in pages that happen to be shared. About 4.6 KiB of counters and a
//! 64 KiB top-list slot (a few KiB of it touched) per worker, 768 KiB
//! of range-cap tables, 4 MiB of address-cap table and 8 MiB of rate cells, mapped
//! once; pages are only backed by memory once touched (the address table: only
//! with `condition.cap_address`; the rate cells: only with rate conditions).
//!
//! Written here rather than with a crate: it is one `mmap` call and a layout.

use sluice_condition::caps::{Tables, ADDRESS_SLOTS, SLOTS};
use sluice_condition::defer::SharedReading;
use sluice_rules::rates::CELLS as RATE_CELLS;
use sluice_status::slot::TopSlot;
use sluice_status::Counters as Stats;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};

/// One serving process's figures.
#[derive(Default)]
pub struct ProcSlot {
    /// Its pid (0 until it runs).
    pub pid: AtomicU32,
    /// Connections it holds (its `Shared::open`).
    pub open: AtomicUsize,
    /// Its rule regexes that failed to compile, counted here as they fail
    /// (`sluice_rules::pattern::count_failures_in`).
    pub regex_failures: AtomicU64,
    /// Tarpits and oversize replies it is dripping (`[rules] tarpit_max` caps the
    /// sum over every process: `Shared::drips_open`).
    pub drips: AtomicUsize,
    /// The master's reload it was last asked to make (written before the master's
    /// SIGHUP), and the last it has made (written after its reload, failed or
    /// not): the master tells systemd `READY=1` once every process has caught up.
    pub reload_asked: AtomicU64,
    pub reload_done: AtomicU64,
    /// Its disk threads' queue, a slot per device lane, in the order the pool met
    /// the devices (the first [`DISK_SLOTS`]); written about once a second by its
    /// workers (`DiskPool::publish`), read by the status page.
    pub disks: [DiskSlot; DISK_SLOTS],
}

impl ProcSlot {
    /// Empty the slot for a process that starts in it, or once its process has
    /// exited: no pid, nothing open, no lanes. Which reload it was asked is the
    /// master's to write, and is kept.
    pub fn clear(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.pid.store(0, Relaxed);
        self.open.store(0, Relaxed);
        self.drips.store(0, Relaxed);
        self.regex_failures.store(0, Relaxed);
        for d in &self.disks {
            d.dev.store(0, Relaxed);
            d.waiting.store(0, Relaxed);
            d.reading.store(0, Relaxed);
        }
    }

    /// The pid of the process in this slot, if one runs there.
    pub fn running(&self) -> Option<u32> {
        match self.pid.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            pid => Some(pid),
        }
    }
}

/// Device lanes per process shown on the status page: the sites' roots and
/// aliases on more disks than this are counted in the totals only.
pub const DISK_SLOTS: usize = 8;

/// One device's lane of a process's disk threads' queue.
#[derive(Default)]
pub struct DiskSlot {
    /// `st_dev + 1` (0: no lane in this slot).
    pub dev: AtomicU64,
    /// Jobs waiting in the lane.
    pub waiting: AtomicU32,
    /// Jobs and reads ahead being read now.
    pub reading: AtomicU32,
}

/// The shared mapping's contents.
pub struct Region {
    /// One per worker of the whole server (every process's), by global worker id.
    pub stats: &'static [Stats],
    /// One per worker of the whole server, by global worker id.
    pub tops: &'static [TopSlot],
    /// One per serving process, by its slot (`Part::slot`): with more than one
    /// process, two per process, for two generations of them: the serving ones
    /// and, after a reload that forked new processes, the old ones finishing
    /// their responses (`processes.rs`). A slot with no process has pid 0.
    pub procs: &'static [ProcSlot],
    /// The /8, /16, /24 (IPv6 /32, /48, /64) cap tables.
    caps: [&'static [AtomicU32]; 3],
    /// The table one address's connections count in (used only with the cap on).
    addresses: &'static [AtomicU32],
    /// Where every rule set's rate conditions count.
    pub rates: sluice_rules::rates::SharedRates,
    /// The kernel's SYN-queue overflow count, read for every worker at once.
    pub netstat: &'static SharedReading,
}

impl Region {
    /// The cap tables, with the address table if `addresses` (the cap on one
    /// address is on).
    pub fn caps(&self, addresses: bool) -> Tables {
        Tables {
            ranges: self.caps,
            addresses: addresses.then_some(self.addresses),
        }
    }

    /// Map the region for `workers` workers in `processes` processes. Made once,
    /// before any fork.
    pub fn map(workers: usize, processes: usize) -> std::io::Result<Region> {
        let processes = generations(processes);
        let stats_bytes = workers * std::mem::size_of::<Stats>();
        let tops_bytes = (workers * std::mem::size_of::<TopSlot>()).next_multiple_of(64);
        let procs_bytes = (processes * std::mem::size_of::<ProcSlot>()).next_multiple_of(64);
        let table_bytes = SLOTS * std::mem::size_of::<AtomicU32>();
        let procs_at = stats_bytes + tops_bytes;
        let tables_at = procs_at + procs_bytes;
        let addresses_at = tables_at + 3 * table_bytes;
        let rates_at = addresses_at + ADDRESS_SLOTS * std::mem::size_of::<AtomicU32>();
        let netstat_at =
            (rates_at + RATE_CELLS * std::mem::size_of::<AtomicU64>()).next_multiple_of(64);
        let len = netstat_at + std::mem::size_of::<SharedReading>();
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = base.cast::<u8>();
        // The mapping is page-aligned, so the counters (64-byte aligned, their size a
        // multiple of it) start aligned, and every part after them starts on 64 bytes.
        debug_assert_eq!(stats_bytes % std::mem::align_of::<Stats>(), 0);
        debug_assert_eq!(stats_bytes % 64, 0);
        // SAFETY: the mapping is `len` bytes, zeroed, readable and writable, never
        // unmapped; each slice below covers its own part of it. Every counter is
        // written with a valid value before a reference to it exists, and atomics
        // may be shared by threads and processes alike.
        unsafe {
            let stats = base.cast::<Stats>();
            for i in 0..workers {
                stats.add(i).write(Stats::default());
            }
            let stats = std::slice::from_raw_parts(stats, workers);
            // Zeroed memory is a valid, empty TopSlot (atomics only).
            let tops = std::slice::from_raw_parts(base.add(stats_bytes).cast::<TopSlot>(), workers);
            let procs = base.add(procs_at).cast::<ProcSlot>();
            for i in 0..processes {
                procs.add(i).write(ProcSlot::default());
            }
            let procs = std::slice::from_raw_parts(procs, processes);
            let table = |k: usize| -> &'static [AtomicU32] {
                let p = base.add(tables_at + k * table_bytes).cast::<AtomicU32>();
                // Zeroed memory is a valid AtomicU32 (0).
                std::slice::from_raw_parts(p, SLOTS)
            };
            // Zeroed memory is a valid AtomicU64 (0): an empty window.
            let rates =
                std::slice::from_raw_parts(base.add(rates_at).cast::<AtomicU64>(), RATE_CELLS);
            Ok(Region {
                stats,
                tops,
                procs,
                caps: [table(0), table(1), table(2)],
                // Zeroed memory is a valid AtomicU32 (0).
                addresses: std::slice::from_raw_parts(
                    base.add(addresses_at).cast::<AtomicU32>(),
                    ADDRESS_SLOTS,
                ),
                rates: sluice_rules::rates::SharedRates {
                    cells: rates,
                    epoch: std::time::Instant::now(),
                },
                // Zeroed memory is a valid SharedReading (atomics: never read).
                netstat: &*base.add(netstat_at).cast::<SharedReading>(),
            })
        }
    }
}

/// Process slots for `processes` serving processes: two generations of them
/// when a master forks them (it may fork new ones while the old finish), one
/// for a single process.
pub fn generations(processes: usize) -> usize {
    if processes > 1 {
        2 * processes
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_forked_child_counts_into_the_parents_view() {
        let r = Region::map(3, 2).unwrap();
        // SAFETY: the child only touches atomics and exits at once.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            r.stats[2].requests.fetch_add(7, Ordering::Relaxed);
            r.caps[1][42].fetch_add(3, Ordering::Relaxed);
            r.procs[1].open.fetch_add(5, Ordering::Relaxed);
            r.rates.cells[RATE_CELLS - 1].fetch_add(9, Ordering::Relaxed);
            let mut l = sluice_status::top::TopList::default();
            l.urls_by_requests.push(("/from-the-child".into(), 11));
            r.tops[2].write(&l);
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(r.stats[2].requests.load(Ordering::Relaxed), 7);
        assert_eq!(r.stats[0].requests.load(Ordering::Relaxed), 0);
        assert_eq!(r.caps[1][42].load(Ordering::Relaxed), 3);
        assert_eq!(r.procs[1].open.load(Ordering::Relaxed), 5);
        assert_eq!(r.procs[0].open.load(Ordering::Relaxed), 0);
        assert_eq!(r.rates.cells[RATE_CELLS - 1].load(Ordering::Relaxed), 9);
        assert_eq!(
            r.tops[2].read().urls_by_requests,
            vec![("/from-the-child".to_string(), 11)]
        );
        assert!(r.tops[1].read().urls_by_requests.is_empty());
    }
}
