//! `defer_accept = "auto"`: when to let the kernel defer new connections.
//!
//! With `TCP_DEFER_ACCEPT` a connection reaches `accept` together with its request:
//! one wake-up of the worker instead of two, about a quarter less server CPU per
//! new connection on small files, and silent connections cost no descriptor. The
//! price is the SYN queue: the kernel keeps each deferred connection there until
//! its first byte, and when the queue is full it answers new clients with SYN
//! cookies, whose MSS table caps a connection at 1460 bytes (45× smaller segments
//! than loopback's; a burst of thousands of new downloads then spends its time in
//! retransmissions: docs/BENCHMARKS.md). So [`DeferSwitch`] keeps deferral on
//! while the kernel reports no SYN-queue overflow, turns it off at the first one,
//! and back on after [`QUIET_MS`] without another.
//!
//! It does not decide about deferral's other cost: the kernel drops the
//! handshake's bare ACK, so a connection's first RTT sample comes from its request,
//! and a client slow to get its request through leaves the connection with an RTT
//! of seconds (measured: 2.1 s smoothed RTT, 7.2 s RTO at 19,000 slow downloads,
//! where 15 ms and 216 ms without deferral). No counter shows that cheaply; instead
//! every deferring listener caps its sockets' retransmission timeout at 1 s
//! (`sluice-server`'s `deferral::set_rto_guard`; lifted at a response's first
//! block once the kernel's estimate is below the cap, or when it outlives its
//! first rate window), which is what lets `"auto"` be the default.
//!
//! Owns: the decision, the parsing of the kernel's counters, and who reads them
//! ([`SharedReading`]). Must not: read files or touch sockets (`sluice-server`'s
//! `deferral::AutoDefer` reads `/proc/net/netstat` and sets the option on its
//! listeners). The counters are the network namespace's, not one listener's: an
//! overflow on any port of the machine turns deferral off, which errs on the safe
//! side. Costs: one comparison per observation; the server reads the counters once
//! every [`CHECK_MS`] for all its workers, whichever worker's turn comes first.

use std::sync::atomic::{AtomicU64, Ordering};

/// How often the server asks the kernel: one `/proc/net/netstat` read and scan
/// (~100 µs of a core on the project's VM, most of it the kernel formatting the
/// text) per interval for the whole server, not per worker ([`SharedReading`]).
pub const CHECK_MS: u64 = 100;
/// Deferral comes back on after this long without a SYN-queue overflow.
pub const QUIET_MS: u64 = 60_000;

/// SYN-queue overflows so far: the kernel's `TcpExt` counters
/// `TCPReqQFullDoCookies` (answered with a cookie) plus `TCPReqQFullDrop` (dropped,
/// cookies being off), from the text of `/proc/net/netstat`. `None` if the text
/// has neither.
pub fn syn_queue_overflows(netstat: &str) -> Option<u64> {
    let mut lines = netstat.lines();
    while let Some(names) = lines.next() {
        let values = lines.next()?;
        let (Some(n), Some(v)) = (
            names.strip_prefix("TcpExt:"),
            values.strip_prefix("TcpExt:"),
        ) else {
            continue;
        };
        let mut found = None;
        for (name, value) in n.split_whitespace().zip(v.split_whitespace()) {
            if name == "TCPReqQFullDoCookies" || name == "TCPReqQFullDrop" {
                let x: u64 = value.parse().ok()?;
                found = Some(found.unwrap_or(0) + x);
            }
        }
        return found;
    }
    None
}

/// Deferral on or off, from successive readings of [`syn_queue_overflows`].
#[derive(Clone, Debug)]
pub struct DeferSwitch {
    on: bool,
    last: Option<u64>,
    last_overflow_ms: u64,
}

impl DeferSwitch {
    /// `on`: what the listeners have now.
    pub fn new(on: bool, now_ms: u64) -> DeferSwitch {
        DeferSwitch {
            on,
            last: None,
            last_overflow_ms: now_ms,
        }
    }

    pub fn is_on(&self) -> bool {
        self.on
    }

    /// A new reading of the overflow count at `now_ms`. `Some(on)` when the
    /// listeners should change to `on`. The first reading only sets the baseline
    /// (overflows before the server started say nothing about it).
    pub fn observe(&mut self, overflows: u64, now_ms: u64) -> Option<bool> {
        let grew = self.last.is_some_and(|l| overflows > l);
        self.last = Some(overflows);
        if grew {
            self.last_overflow_ms = now_ms;
            if self.on {
                self.on = false;
                return Some(false);
            }
        } else if !self.on && now_ms.saturating_sub(self.last_overflow_ms) >= QUIET_MS {
            self.on = true;
            return Some(true);
        }
        None
    }
}

/// One reading of the overflow count shared by every worker of a server (it lives
/// in memory all serving processes map). The counters are the machine's, so one
/// read every [`CHECK_MS`] serves every worker: with one read per worker, an idle
/// server's cost grew with its workers (two workers idled at 0.53% of a core, most
/// of it these reads; docs/BENCHMARKS.md). Atomics only: a process that dies
/// between claiming a read and publishing it leaves the last value in place for
/// one more interval, after which the next worker claims the read again.
#[derive(Debug, Default)]
pub struct SharedReading {
    /// When the last read was claimed (ms of a clock every process shares; 0: never).
    claimed_ms: AtomicU64,
    /// The last published count, plus one (0: none yet).
    value: AtomicU64,
}

/// What [`SharedReading::take`] tells a worker whose check is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// Another worker read the counters less than [`CHECK_MS`] ago: this count.
    Fresh(u64),
    /// This worker reads them now, and then [`SharedReading::publish`]es the count.
    Read,
    /// Another worker has claimed the read and not yet published it: skip this check.
    Skip,
}

impl SharedReading {
    /// At `now_ms` (a clock every process shares, e.g. `CLOCK_MONOTONIC`, above 0).
    pub fn take(&self, now_ms: u64) -> Take {
        let at = self.claimed_ms.load(Ordering::Acquire);
        if at != 0 && now_ms < at.saturating_add(CHECK_MS) {
            return match self.value.load(Ordering::Acquire) {
                0 => Take::Skip,
                v => Take::Fresh(v - 1),
            };
        }
        match self
            .claimed_ms
            .compare_exchange(at, now_ms, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Take::Read,
            Err(_) => Take::Skip,
        }
    }

    /// The count the worker that was told [`Take::Read`] found.
    pub fn publish(&self, overflows: u64) {
        self.value
            .store(overflows.saturating_add(1), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NETSTAT: &str =
        "TcpExt: SyncookiesSent SyncookiesRecv TCPReqQFullDoCookies TCPReqQFullDrop ListenDrops\n\
TcpExt: 2606 12 2600 3 0\n\
IpExt: InNoRoutes InTruncatedPkts\n\
IpExt: 0 0\n";

    #[test]
    fn overflows_are_cookies_plus_drops_of_tcpext() {
        assert_eq!(syn_queue_overflows(NETSTAT), Some(2603));
        assert_eq!(syn_queue_overflows("IpExt: A B\nIpExt: 1 2\n"), None);
        assert_eq!(syn_queue_overflows("TcpExt: A B\nTcpExt: 1 2\n"), None);
        assert_eq!(syn_queue_overflows(""), None);
        // Names and values out of step: no guess.
        assert_eq!(
            syn_queue_overflows("TcpExt: TCPReqQFullDrop\nTcpExt: x\n"),
            None
        );
    }

    #[test]
    fn one_read_per_interval_serves_every_worker() {
        let r = SharedReading::default();
        // The first worker due reads; a second one in the same interval waits for
        // the count, then takes it as it is.
        assert_eq!(r.take(1_000), Take::Read);
        assert_eq!(r.take(1_010), Take::Skip);
        r.publish(7);
        assert_eq!(r.take(1_020), Take::Fresh(7));
        assert_eq!(r.take(1_099), Take::Fresh(7));
        // The interval over: the next worker due reads again, the others take the
        // last count until it publishes the new one.
        assert_eq!(r.take(1_100), Take::Read);
        assert_eq!(r.take(1_150), Take::Fresh(7));
        r.publish(9);
        assert_eq!(r.take(1_160), Take::Fresh(9));
        // A reader that never published (its process died) holds the read for one
        // interval only.
        assert_eq!(r.take(1_300), Take::Read);
        assert_eq!(r.take(1_399), Take::Fresh(9));
        assert_eq!(r.take(1_400), Take::Read);
        // A zero count is a count.
        let z = SharedReading::default();
        assert_eq!(z.take(5), Take::Read);
        z.publish(0);
        assert_eq!(z.take(6), Take::Fresh(0));
    }

    #[test]
    fn this_machine_has_the_counters() {
        // Linux has had both since 4.4; if this fails, "auto" never switches.
        let text = std::fs::read_to_string("/proc/net/netstat").unwrap();
        assert!(syn_queue_overflows(&text).is_some(), "{text}");
    }

    #[test]
    fn off_at_the_first_overflow_on_after_a_quiet_minute() {
        let mut s = DeferSwitch::new(true, 0);
        // Overflows before the first reading are only the baseline.
        assert_eq!(s.observe(500, 0), None);
        assert_eq!(s.observe(500, 100), None);
        assert_eq!(s.observe(501, 200), Some(false));
        assert!(!s.is_on());
        // Still overflowing: stays off, and the quiet minute starts again.
        assert_eq!(s.observe(900, 30_000), None);
        assert_eq!(s.observe(900, 89_999), None);
        assert_eq!(s.observe(900, 90_000), Some(true));
        assert!(s.is_on());
        assert_eq!(s.observe(900, 200_000), None);
    }

    #[test]
    fn listeners_found_off_come_on_after_the_quiet_minute() {
        // A worker that restarts finds its listeners as its predecessor left them.
        let mut s = DeferSwitch::new(false, 1_000);
        assert_eq!(s.observe(7, 1_000), None);
        assert_eq!(s.observe(7, 60_999), None);
        assert_eq!(s.observe(7, 61_000), Some(true));
    }
}
