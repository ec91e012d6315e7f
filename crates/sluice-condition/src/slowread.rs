//! Slow-read detection: a response whose client reads below a minimum rate for a
//! whole window is closed. Measured over a window (not per write) so a client whose
//! TCP window briefly closes is not punished; the default (1 KiB/s over 30 s) is
//! far below any real user's line (a 56 kbit/s modem reads 7 KB/s), and several
//! parallel range downloads from one host each pass it on their own.

/// Where the current window started: time (ms) and body bytes sent by then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateWindow {
    pub start_ms: u64,
    pub start_sent: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateVerdict {
    /// Window not over yet; check again at this time (ms).
    CheckAt(u64),
    /// Window over and the rate was fine: a new window starts now.
    Renewed,
    /// Window over and the client read less than the minimum.
    TooSlow,
}

impl RateWindow {
    pub fn start(now_ms: u64, sent: u64) -> RateWindow {
        RateWindow {
            start_ms: now_ms,
            start_sent: sent,
        }
    }

    /// Judge the window at `now_ms` with `sent` bytes sent so far. `min_rate` in
    /// bytes/s (0 = off), `window_ms` the window length.
    pub fn check(&mut self, now_ms: u64, sent: u64, min_rate: u64, window_ms: u64) -> RateVerdict {
        let end = self.start_ms + window_ms;
        if min_rate == 0 || now_ms < end {
            return RateVerdict::CheckAt(end);
        }
        let elapsed = now_ms - self.start_ms;
        let need = min_rate.saturating_mul(elapsed) / 1000;
        if sent - self.start_sent < need {
            return RateVerdict::TooSlow;
        }
        *self = RateWindow::start(now_ms, sent);
        RateVerdict::Renewed
    }
}

/// The least [`unsent_share`] gives a connection: a few segments, so a reader at
/// 1 MB/s still finds bytes queued when the worker comes back a few ms later.
pub const UNSENT_MIN: u32 = 16 * 1024;

/// What a socket may keep unsent until its reader has proven fast: at most this,
/// or `unsent_max` if lower. A reader that stops reading at once (the slow-read
/// attack) pins no more than this; one that takes [`UNSENT_PROVEN`] bytes of a
/// response is allowed `unsent_max` (1 MiB by default), which keeps one fast
/// download's pipe full.
pub const UNSENT_START: u32 = 256 * 1024;

/// Body bytes a response's reader must have taken before its socket may keep
/// `unsent_max` unsent rather than [`UNSENT_START`]: 2 MiB, ~1 ms for a fast
/// download, never reached by a reader of a few bytes a second before
/// `min_send_rate` closes it.
pub const UNSENT_PROVEN: u64 = 2 << 20;

/// The bound every accepted socket starts with (the listener's, inherited):
/// `max` (`condition.unsent_max`) or [`UNSENT_START`], the lower; 0 stays 0 (the
/// kernel's own bound).
pub fn unsent_start(max: u32) -> u32 {
    max.min(UNSENT_START)
}

/// The bound to set on a response's socket now, or `None` to leave the one it
/// has: the share of the budget when the connections outgrow it
/// ([`unsent_share`], under the start bound until the reader is `proven`, under
/// `max` after), and `max` itself for a proven reader when the budget covers it.
/// A reader not proven is never raised; one proven is raised at most to `max`.
pub fn unsent_bound(budget: u64, open: usize, max: u32, proven: bool) -> Option<u32> {
    let cap = if proven { max } else { unsent_start(max) };
    match unsent_share(budget, open, cap) {
        Some(share) => Some(share),
        None if cap > UNSENT_START => Some(cap),
        None => None,
    }
}

/// The unsent bytes one connection may keep queued in the kernel when `open`
/// connections share `budget` bytes of the kernel's TCP memory, at most `max` (the
/// connection's cap: [`unsent_start`] or `condition.unsent_max`, see
/// [`unsent_bound`]). Rounded down to a power of two: a few distinct values, not
/// one per connection count. `None`: `max` itself, whenever the budget covers `max` for every
/// connection, `max` is below [`UNSENT_MIN`], or it is 0 (the kernel's bound).
///
/// Why: each queue is capped by `max` alone, but 38,000 downloads each allowed
/// 1 MiB ask for 37 GiB, where this machine's kernel allows 2.2 GiB for all of
/// TCP and starts shrinking buffers and dropping at 1.5 GiB (`tcp_mem`): past its
/// hard limit it resets connections at random. Shared out, 38,000 slow readers
/// queue 16 KiB each, and a reader at 32 KB/s still has half a second queued.
pub fn unsent_share(budget: u64, open: usize, max: u32) -> Option<u32> {
    if max == 0 {
        return None;
    }
    let share = budget / open.max(1) as u64;
    if share >= u64::from(max) {
        return None;
    }
    let share = share.max(u64::from(UNSENT_MIN)) as u32; // < max ≤ u32::MAX
    let pow2 = 1u32 << (31 - share.leading_zeros());
    (pow2 < max).then_some(pow2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_reader_fails_its_window_a_fast_one_renews() {
        let mut w = RateWindow::start(0, 0);
        assert_eq!(
            w.check(10_000, 100, 1024, 30_000),
            RateVerdict::CheckAt(30_000)
        );
        // 16 B/s for 30 s: 480 bytes, far below 30 KiB.
        assert_eq!(w.check(30_000, 480, 1024, 30_000), RateVerdict::TooSlow);
        let mut w = RateWindow::start(0, 0);
        assert_eq!(w.check(30_000, 40_000, 1024, 30_000), RateVerdict::Renewed);
        assert_eq!(w, RateWindow::start(30_000, 40_000));
        // Off.
        let mut w = RateWindow::start(0, 0);
        assert_eq!(w.check(99_000, 0, 0, 30_000), RateVerdict::CheckAt(30_000));
    }

    #[test]
    fn the_unsent_share_shrinks_with_connections_in_powers_of_two() {
        let gib = 1u64 << 30;
        // Few connections: the budget covers the maximum; the listener's value.
        assert_eq!(unsent_share(gib, 100, 256 * 1024), None);
        assert_eq!(unsent_share(gib, 4096, 256 * 1024), None);
        // 0.75 GiB over 10,800 connections: 72 KiB each, rounded down to 64 KiB.
        assert_eq!(
            unsent_share(3 * gib / 4, 10_800, 256 * 1024),
            Some(64 * 1024)
        );
        // 38,000: 20 KiB, rounded down to 16 KiB; a million: never below the floor.
        assert_eq!(
            unsent_share(3 * gib / 4, 38_000, 256 * 1024),
            Some(16 * 1024)
        );
        assert_eq!(
            unsent_share(3 * gib / 4, 1_000_000, 256 * 1024),
            Some(UNSENT_MIN)
        );
        // A maximum that is not a power of two is never exceeded.
        assert_eq!(unsent_share(gib, 6_000, 200 * 1024), Some(128 * 1024));
        assert_eq!(unsent_share(gib, 1, 20 * 1024), None);
        assert_eq!(unsent_share(10 * 1024, 1, 20 * 1024), Some(16 * 1024));
        // A maximum below the floor: the maximum, the listener's.
        assert_eq!(unsent_share(1, 10, 4096), None);
        // 0: the kernel's own bound, left alone.
        assert_eq!(unsent_share(1, 1_000_000, 0), None);
        // No connections counted yet: as if one.
        assert_eq!(unsent_share(gib, 0, 256 * 1024), None);
    }

    #[test]
    fn a_reader_is_raised_to_the_maximum_only_once_proven_and_within_the_budget() {
        let (gib, mib) = (1u64 << 30, 1u32 << 20);
        assert_eq!(unsent_start(mib), UNSENT_START);
        assert_eq!(unsent_start(64 * 1024), 64 * 1024);
        assert_eq!(unsent_start(0), 0);
        // Few connections: a new response keeps the start bound; a proven one
        // gets the maximum.
        assert_eq!(unsent_bound(gib, 10, mib, false), None);
        assert_eq!(unsent_bound(gib, 10, mib, true), Some(mib));
        // 2,000 connections over 0.75 GiB: 384 KiB each, rounded to 256 KiB, for
        // the proven; the start bound already covers it for the rest.
        assert_eq!(
            unsent_bound(3 * gib / 4, 2_000, mib, true),
            Some(256 * 1024)
        );
        assert_eq!(unsent_bound(3 * gib / 4, 2_000, mib, false), None);
        // 19,000: 32 KiB for everyone, proven or not.
        assert_eq!(
            unsent_bound(3 * gib / 4, 19_000, mib, false),
            Some(32 * 1024)
        );
        assert_eq!(
            unsent_bound(3 * gib / 4, 19_000, mib, true),
            Some(32 * 1024)
        );
        // A maximum at or below the start bound: nothing to raise.
        assert_eq!(unsent_bound(gib, 10, 256 * 1024, true), None);
        assert_eq!(unsent_bound(gib, 10, 64 * 1024, true), None);
        // The kernel's bound is left alone.
        assert_eq!(unsent_bound(1, 1_000_000, 0, true), None);
    }
}
