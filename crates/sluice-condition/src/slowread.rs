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
}
