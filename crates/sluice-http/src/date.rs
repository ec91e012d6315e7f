//! HTTP dates (IMF-fixdate), via `httpdate`, plus a once-a-second cache for `Date:`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Format seconds since the epoch as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn format(secs: u64) -> String {
    // HTTP dates end with year 9999 (httpdate panics past it); a file system that
    // stores 64-bit times (btrfs, tmpfs) can hold a later one.
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs.min(LAST_HTTP_DATE)))
}

/// 9999-12-31 23:59:59 UTC, the last time an HTTP date can say.
pub const LAST_HTTP_DATE: u64 = 253_402_300_799;

/// Parse any of the three HTTP date formats to seconds since the epoch.
pub fn parse(s: &str) -> Option<u64> {
    let t = httpdate::parse_http_date(s.trim()).ok()?;
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// Whole seconds since the epoch for a `SystemTime` (0 before the epoch).
pub fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The `Date:` value, re-rendered at most once per second. One per worker.
pub struct DateCache {
    secs: u64,
    text: String,
}

impl Default for DateCache {
    fn default() -> Self {
        DateCache {
            secs: u64::MAX,
            text: String::new(),
        }
    }
}

impl DateCache {
    /// Move to `now` (a worker does this once per loop turn, where it reads the
    /// clock, so that a response reads [`DateCache::text`] without converting the
    /// time again: ~50 instructions a response).
    pub fn set(&mut self, now: SystemTime) {
        let s = secs(now);
        if s != self.secs {
            self.secs = s;
            self.text = format(s);
        }
    }

    /// The value as of the last [`DateCache::set`].
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
    fn the_cache_says_the_second_it_was_set_to() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(784_111_777_900);
        let mut c = super::DateCache::default();
        c.set(t);
        assert_eq!(c.text(), "Sun, 06 Nov 1994 08:49:37 GMT");
        c.set(t + std::time::Duration::from_millis(50)); // the same second
        assert_eq!(c.text(), "Sun, 06 Nov 1994 08:49:37 GMT");
        c.set(t + std::time::Duration::from_millis(200)); // the next second
        assert_eq!(c.text(), "Sun, 06 Nov 1994 08:49:38 GMT");
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
