//! HTTP dates (IMF-fixdate), via `httpdate`, plus a once-a-second cache for `Date:`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Format seconds since the epoch as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn format(secs: u64) -> String {
    // HTTP dates end with year 9999 (httpdate panics past it); a file system that
    // stores 64-bit times (btrfs, tmpfs) can hold a later one.
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs.min(LAST_HTTP_DATE)))
}

/// 9999-12-31 23:59:59 UTC, the last time an HTTP date can say.
pub const LAST_HTTP_DATE: u64 = 253_402_300_799;

/// The wall clock in whole seconds since the epoch (0 before it).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Parse any of the three HTTP date formats to seconds since the epoch.
pub fn parse(s: &str) -> Option<u64> {
    let t = httpdate::parse_http_date(s.trim()).ok()?;
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// The `Date:` value, re-rendered at most once per second. One per worker.
///
/// It also keeps the wall clock's second for everything else a worker stamps
/// (access log lines), and reads the wall clock only when that second may have
/// ended: a loop turn in mid-second costs one comparison of monotonic times, where
/// reading the wall clock and converting it cost ~80 instructions a turn
/// (`bench/user_instr.sh`). A step of the system clock shows at the end of the
/// second the cache is in, within a second.
pub struct DateCache {
    secs: u64,
    text: String,
    /// When, on the monotonic clock, the second the cache says ends (`None`: read
    /// the wall clock at the next tick).
    ends: Option<Instant>,
}

impl Default for DateCache {
    fn default() -> Self {
        DateCache {
            secs: u64::MAX,
            text: String::new(),
            ends: None,
        }
    }
}

impl DateCache {
    /// Bring the cache to the monotonic time `now` (a worker does this once per loop
    /// turn, after it reads the clock, so that a response reads
    /// [`DateCache::text`] without converting the time again).
    #[inline]
    pub fn tick(&mut self, now: Instant) {
        self.tick_with(now, SystemTime::now);
    }

    /// [`DateCache::tick`] with the wall clock read by `wall` (a test's clock),
    /// called only when the cached second may have ended. The end is computed from
    /// the wall clock read after `now`, so it errs early (one more read), never late.
    #[inline]
    fn tick_with(&mut self, now: Instant, wall: impl FnOnce() -> SystemTime) {
        if self.ends.is_some_and(|end| now < end) {
            return;
        }
        self.reread(now, wall());
    }

    /// The wall clock read `wall` (after `now`): its second, and when it ends.
    fn reread(&mut self, now: Instant, wall: SystemTime) {
        let since = wall.duration_since(UNIX_EPOCH).unwrap_or_default();
        let s = since.as_secs();
        if s != self.secs {
            self.secs = s;
            self.text = format(s);
        }
        let left = Duration::from_nanos(1_000_000_000 - u64::from(since.subsec_nanos()));
        self.ends = now.checked_add(left);
    }

    /// The value as of the last [`DateCache::tick`].
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The second [`DateCache::text`] says (what a copy of it can be checked by).
    pub fn secs(&self) -> u64 {
        self.secs
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_past_year_9999_are_said_as_its_last_second() {
        assert_eq!(super::format(u64::MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
        assert_eq!(
            super::format(super::LAST_HTTP_DATE + 1),
            super::format(u64::MAX)
        );
    }

    #[test]
    fn the_cache_reads_the_wall_clock_only_when_its_second_ends() {
        use std::time::{Duration, Instant};
        // 900 ms into the second 784,111,777.
        let wall0 = std::time::UNIX_EPOCH + Duration::from_millis(784_111_777_900);
        let t0 = Instant::now();
        let mut c = super::DateCache::default();
        let mut reads = 0;
        let mut tick = |c: &mut super::DateCache, after: u64| {
            let wall = wall0 + Duration::from_millis(after);
            c.tick_with(t0 + Duration::from_millis(after), || {
                reads += 1;
                wall
            });
        };
        tick(&mut c, 0);
        assert_eq!(c.text(), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(c.secs(), 784_111_777);
        tick(&mut c, 50); // the same second: the wall clock is not read
        tick(&mut c, 99);
        assert_eq!(c.text(), "Sun, 06 Nov 1994 08:49:37 GMT");
        tick(&mut c, 100); // the second has ended
        assert_eq!(c.text(), "Sun, 06 Nov 1994 08:49:38 GMT");
        tick(&mut c, 1_099);
        tick(&mut c, 1_100);
        assert_eq!(c.secs(), 784_111_779);
        assert_eq!(reads, 3, "one read a second, not one a turn");
    }

    #[test]
    fn round_trip() {
        assert_eq!(super::format(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(
            super::parse("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784111777)
        );
        assert_eq!(
            super::parse("Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(784111777)
        );
        assert_eq!(super::parse("nope"), None);
    }
}
