//! Per-worker counters: written by one worker with relaxed atomics on its own cache
//! lines, summed by whoever reads the status page. No cache line is shared between
//! workers, and each has one writer, so counting is a plain load and store per
//! counter ([`Counters::add`]), seven per request.
//!
//! [`Counters`] is atomics only, with no pointer inside (no `Box`, no `Vec`), so
//! that it can live in memory that several serving processes share
//! (`server.processes`): the server places the whole table there, and each
//! process's status page sums every process's workers.

use sluice_condition::CloseReason;
use std::sync::atomic::{AtomicU64, Ordering};

// Every histogram's upper bounds are whole µs, the unit its values are counted in,
// so a value's bucket is found by integer comparisons (most often the first); the
// page shows them in seconds (`render::secs`).

/// Upper bounds (µs) of the time-to-first-byte histogram: 0.5 ms … 1 s.
pub const TTFB_BOUNDS_US: [u64; 11] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
];
/// Upper bounds (µs) of the whole-transfer histogram: 1 s … 2 h (an ISO download
/// lands in a bucket, not in `+Inf`).
pub const TRANSFER_BOUNDS_US: [u64; 10] = [
    1_000_000,
    5_000_000,
    15_000_000,
    30_000_000,
    60_000_000,
    300_000_000,
    900_000_000,
    1_800_000_000,
    3_600_000_000,
    7_200_000_000,
];

/// Upper bounds (µs) of the loop-turn histogram: 100 µs … 100 ms.
pub const TURN_BOUNDS_US: [u64; 6] = [100, 1_000, 5_000, 10_000, 50_000, 100_000];

/// Connection states shown on the page (and as the `state` label).
pub const STATES: [&str; 8] = [
    "reading",
    "sending",
    "idle",
    "closing",
    "waiting",
    "tarpitted",
    "ready",
    "disk",
];

/// What a matched rule did (the `action` label).
pub const ACTIONS: [&str; 12] = [
    "redirect",
    "rewrite",
    "forbidden",
    "gone",
    "deny",
    "drop",
    "substitute",
    "tarpit",
    "loop",
    "oversize",
    "limit",
    "pass",
];

/// Status codes 100..=599 are counted one by one.
const CODES: usize = 500;

/// One worker's counters.
#[repr(align(64))]
pub struct Counters {
    pub accepted: AtomicU64,
    pub closed: AtomicU64,
    pub requests: AtomicU64,
    pub bytes: AtomicU64,
    pub timeouts: AtomicU64,
    /// Times this worker died (panic or event-loop error) and was replaced.
    pub restarts: AtomicU64,
    /// File ranges found not in the page cache and read by the disk threads
    /// while their response waited (the worker went on with others).
    pub disk_waits: AtomicU64,
    /// Requests whose answer's lookup (a path, or a small file's bytes, not in
    /// the kernel's caches) the disk threads made while the request waited.
    pub disk_lookups: AtomicU64,
    /// Times a response's cold range found the disk threads' queue (or its
    /// disk's share of it) full, and waited to ask again.
    pub disk_retries: AtomicU64,
    /// Lookups answered 503 "disk busy": the queue, or their disk's share, full.
    pub disk_busy: AtomicU64,
    /// Listing pages built by the listing threads (a request that waited for
    /// another's build of the same page counts in `disk_lookups`, not here).
    pub listing_builds: AtomicU64,
    /// Requests answered from the worker's kept answers (`files.answer_cache`).
    pub answers_reused: AtomicU64,
    /// A gauge: 1 while this worker is connected to its `sluice condition` front
    /// (`serve --from`), 0 otherwise.
    pub front_attached: AtomicU64,
    /// Times this worker switched TCP_DEFER_ACCEPT off (`defer_accept = "auto"`,
    /// on SYN-queue overflows).
    pub defer_offs: AtomicU64,
    /// Access-log lines lost: in buffers the log's writer thread could not write
    /// (a full disk) or that a worker dropped because the writer fell behind.
    /// Kept in each serving process's first worker's slot, and written by that
    /// process's writer threads and workers alike, so with `fetch_add` (only
    /// when lines are lost), not [`Counters::add`].
    pub log_lost: AtomicU64,
    /// Closed connections by reason (`CloseReason::index`).
    pub closes: [AtomicU64; CloseReason::COUNT],
    /// Requests a rule decided, by action ([`ACTIONS`]).
    pub rule_actions: [AtomicU64; ACTIONS.len()],
    responses: [AtomicU64; CODES],
    ttfb: [AtomicU64; TTFB_BOUNDS_US.len() + 1],
    ttfb_sum_us: AtomicU64,
    transfer: [AtomicU64; TRANSFER_BOUNDS_US.len() + 1],
    transfer_sum_ms: AtomicU64,
    /// The worker's event-loop turns by how long each took, from `epoll_wait`'s
    /// return to its next call: while a turn runs, every other connection of the
    /// worker waits (a cold-disk stall, a long listing, a big batch of sends).
    turn: [AtomicU64; TURN_BOUNDS_US.len() + 1],
    turn_sum_us: AtomicU64,
    /// The worker thread's time runnable but waiting for a CPU, µs since start
    /// (the kernel's `schedstat`, read once a second): what the machine, not the
    /// worker, added to every connection's wait.
    pub cpu_wait_us: AtomicU64,
    /// Gauges, refreshed by the worker about once a second: connections by state,
    /// and the longest loop turn of the last second (µs).
    pub states: [AtomicU64; STATES.len()],
    pub turn_longest_us: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            accepted: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            disk_waits: AtomicU64::new(0),
            disk_lookups: AtomicU64::new(0),
            disk_retries: AtomicU64::new(0),
            disk_busy: AtomicU64::new(0),
            listing_builds: AtomicU64::new(0),
            answers_reused: AtomicU64::new(0),
            front_attached: AtomicU64::new(0),
            defer_offs: AtomicU64::new(0),
            log_lost: AtomicU64::new(0),
            closes: Default::default(),
            rule_actions: Default::default(),
            responses: [const { AtomicU64::new(0) }; CODES],
            ttfb: Default::default(),
            ttfb_sum_us: AtomicU64::new(0),
            transfer: Default::default(),
            transfer_sum_ms: AtomicU64::new(0),
            turn: Default::default(),
            turn_sum_us: AtomicU64::new(0),
            cpu_wait_us: AtomicU64::new(0),
            states: Default::default(),
            turn_longest_us: AtomicU64::new(0),
        }
    }
}

/// The first bucket whose upper bound `us` does not pass (`bounds.len()`: beyond).
#[inline]
fn bucket(bounds: &[u64], us: u64) -> usize {
    bounds.iter().position(|b| us <= *b).unwrap_or(bounds.len())
}

impl Counters {
    /// Add `n` to counter `c`, a field of the calling worker's own `Counters`.
    ///
    /// A plain load and store, not a locked read-modify-write: only the worker
    /// writes its counters (a replacement after a crash starts once the old one is
    /// gone), so nothing can be lost between the two, and a reader sees the old
    /// value or the new one, never a torn one. A `lock add` costs about 20 cycles
    /// on x86; a request counts seven times (`cargo bench -p sluice-status`,
    /// "worker counters per request"). Counters written by anyone else (`restarts`,
    /// by the supervisor) keep `fetch_add`.
    #[inline]
    pub fn add(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// One response started (its status is final): counted as a request.
    pub fn response(&self, status: u16) {
        Counters::add(&self.requests, 1);
        let i = usize::from(status).wrapping_sub(100);
        if i < CODES {
            Counters::add(&self.responses[i], 1);
        }
    }

    /// A response finished: its time to first byte and whole transfer, in µs.
    pub fn timings(&self, ttfb_us: u64, transfer_us: u64) {
        Counters::add(&self.ttfb[bucket(&TTFB_BOUNDS_US, ttfb_us)], 1);
        Counters::add(&self.ttfb_sum_us, ttfb_us);
        Counters::add(&self.transfer[bucket(&TRANSFER_BOUNDS_US, transfer_us)], 1);
        Counters::add(&self.transfer_sum_ms, transfer_us / 1000);
    }

    /// One event-loop turn ended after `us` µs.
    #[inline]
    pub fn turn(&self, us: u64) {
        Counters::add(&self.turn[bucket(&TURN_BOUNDS_US, us)], 1);
        Counters::add(&self.turn_sum_us, us);
    }
}

/// The sum over all workers, read once per status request.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    pub accepted: u64,
    pub closed: u64,
    pub requests: u64,
    pub bytes: u64,
    pub restarts: u64,
    pub disk_waits: u64,
    pub disk_lookups: u64,
    pub disk_retries: u64,
    pub disk_busy: u64,
    pub listing_builds: u64,
    pub answers_reused: u64,
    /// Workers connected to a `sluice condition` front now.
    pub front_attached: u64,
    pub defer_offs: u64,
    pub log_lost: u64,
    pub closes: [u64; CloseReason::COUNT],
    pub rule_actions: [u64; ACTIONS.len()],
    /// (status, count), non-zero only, ascending.
    pub responses: Vec<(u16, u64)>,
    pub ttfb: Vec<u64>,
    pub ttfb_sum_s: f64,
    pub transfer: Vec<u64>,
    pub transfer_sum_s: f64,
    /// Per worker, connections by state.
    pub states: Vec<[u64; STATES.len()]>,
    /// Event-loop turns by duration ([`TURN_BOUNDS_US`], last = beyond) and their sum.
    pub turn: Vec<u64>,
    pub turn_sum_s: f64,
    /// Per worker: the longest loop turn of the last second, and the time waited
    /// for a CPU since start, both in seconds.
    pub turn_longest_s: Vec<f64>,
    pub cpu_wait_s: Vec<f64>,
}

impl Totals {
    pub fn sum(workers: &[Counters]) -> Totals {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut t = Totals {
            ttfb: vec![0; TTFB_BOUNDS_US.len() + 1],
            transfer: vec![0; TRANSFER_BOUNDS_US.len() + 1],
            turn: vec![0; TURN_BOUNDS_US.len() + 1],
            ..Default::default()
        };
        let mut codes = vec![0u64; CODES];
        for w in workers {
            t.accepted += ld(&w.accepted);
            t.closed += ld(&w.closed);
            t.requests += ld(&w.requests);
            t.bytes += ld(&w.bytes);
            t.restarts += ld(&w.restarts);
            t.disk_waits += ld(&w.disk_waits);
            t.disk_lookups += ld(&w.disk_lookups);
            t.disk_retries += ld(&w.disk_retries);
            t.disk_busy += ld(&w.disk_busy);
            t.listing_builds += ld(&w.listing_builds);
            t.answers_reused += ld(&w.answers_reused);
            t.front_attached += ld(&w.front_attached);
            t.defer_offs += ld(&w.defer_offs);
            t.log_lost += ld(&w.log_lost);
            for (a, b) in t.closes.iter_mut().zip(&w.closes) {
                *a += ld(b);
            }
            for (a, b) in t.rule_actions.iter_mut().zip(&w.rule_actions) {
                *a += ld(b);
            }
            for (a, b) in codes.iter_mut().zip(w.responses.iter()) {
                *a += ld(b);
            }
            for (a, b) in t.ttfb.iter_mut().zip(&w.ttfb) {
                *a += ld(b);
            }
            for (a, b) in t.transfer.iter_mut().zip(&w.transfer) {
                *a += ld(b);
            }
            t.ttfb_sum_s += ld(&w.ttfb_sum_us) as f64 / 1e6;
            t.transfer_sum_s += ld(&w.transfer_sum_ms) as f64 / 1e3;
            for (a, b) in t.turn.iter_mut().zip(&w.turn) {
                *a += ld(b);
            }
            t.turn_sum_s += ld(&w.turn_sum_us) as f64 / 1e6;
            t.turn_longest_s.push(ld(&w.turn_longest_us) as f64 / 1e6);
            t.cpu_wait_s.push(ld(&w.cpu_wait_us) as f64 / 1e6);
            let mut s = [0u64; STATES.len()];
            for (a, b) in s.iter_mut().zip(&w.states) {
                *a = ld(b);
            }
            t.states.push(s);
        }
        t.responses = codes
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| (i as u16 + 100, *n))
            .collect();
        t
    }

    /// Connections by state over all workers.
    pub fn states_total(&self) -> [u64; STATES.len()] {
        let mut s = [0u64; STATES.len()];
        for w in &self.states {
            for (a, b) in s.iter_mut().zip(w) {
                *a += b;
            }
        }
        s
    }

    pub fn redirects(&self) -> u64 {
        self.responses
            .iter()
            .filter(|(c, _)| matches!(c, 301 | 302 | 303 | 307 | 308))
            .map(|(_, n)| n)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sums_and_buckets() {
        let w = [Counters::default(), Counters::default()];
        w[0].response(200);
        w[1].response(200);
        w[1].response(404);
        w[0].response(999); // counted as a request, not as a code
        w[0].timings(400, 2_000_000);
        w[1].timings(2_000_000, 10_000_000_000);
        let t = Totals::sum(&w);
        assert_eq!(t.requests, 4);
        assert_eq!(t.responses, vec![(200, 2), (404, 1)]);
        assert_eq!(t.ttfb[0], 1);
        assert_eq!(t.ttfb[TTFB_BOUNDS_US.len()], 1, "2 s is past 1 s");
        assert_eq!(t.transfer[1], 1, "2 s: the 5 s bucket");
        assert_eq!(t.transfer[TRANSFER_BOUNDS_US.len()], 1);
    }

    #[test]
    fn the_microsecond_bounds_are_the_published_ones() {
        const TTFB_BOUNDS: [f64; 11] = [
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
        ];
        const TRANSFER_BOUNDS: [f64; 10] = [
            1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0,
        ];
        for (us, secs) in [
            (&TTFB_BOUNDS_US[..], &TTFB_BOUNDS[..]),
            (&TRANSFER_BOUNDS_US[..], &TRANSFER_BOUNDS[..]),
        ] {
            assert_eq!(us.len(), secs.len());
            for (u, s) in us.iter().zip(secs) {
                assert_eq!(*u as f64 / 1e6, *s, "{u} µs");
            }
        }
        // A bound is inclusive, as the page's `le` says.
        assert_eq!(bucket(&TTFB_BOUNDS_US, 500), 0);
        assert_eq!(bucket(&TTFB_BOUNDS_US, 501), 1);
        assert_eq!(bucket(&TTFB_BOUNDS_US, 1_000_001), TTFB_BOUNDS_US.len());
    }

    #[test]
    fn loop_turns_land_in_their_buckets_and_the_longest_is_per_worker() {
        let w = [Counters::default(), Counters::default()];
        w[0].turn(40); // ≤ 100 µs
        w[0].turn(100); // a bound is inclusive
        w[1].turn(7_000); // ≤ 10 ms
        w[1].turn(250_000); // past 100 ms
        w[1].turn_longest_us.store(250_000, Ordering::Relaxed);
        w[0].cpu_wait_us.store(1_500_000, Ordering::Relaxed);
        let t = Totals::sum(&w);
        assert_eq!(t.turn, vec![2, 0, 0, 1, 0, 0, 1]);
        assert!((t.turn_sum_s - 0.25714).abs() < 1e-9);
        assert_eq!(t.turn_longest_s, vec![0.0, 0.25]);
        assert_eq!(t.cpu_wait_s, vec![1.5, 0.0]);
    }
}
