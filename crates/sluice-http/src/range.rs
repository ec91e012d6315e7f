//! `Range: bytes=…` evaluation (RFC 9110 §14).
//!
//! A syntactically invalid header or a unit other than `bytes` is ignored (the full
//! representation is served), as the RFC allows. More than `max_ranges` ranges is
//! treated the same way: a client asking for hundreds of tiny ranges gets the file
//! once instead of a multipart response that costs us more than it costs them.
//!
//! Amplification (RFC 9110 §17.15): ranges that together ask for more bytes than the
//! file holds, or where more than two overlap, are answered with the whole file
//! (200), as nginx does; otherwise overlapping, adjacent and nearly adjacent ranges
//! are coalesced (sorted by offset, which §14.3 allows), so a multipart body is
//! never bigger than the file plus its part headers. Numerals too large for 64 bits
//! saturate: a first-byte-pos past any file is unsatisfiable, not ignored. A file
//! of no bytes is answered whole (200, empty) whatever the ranges.
/// An inclusive byte range, already clamped to the representation length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

impl ByteRange {
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }
    pub fn is_empty(&self) -> bool {
        false
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum RangeResult {
    /// Serve the whole representation (no header, or one we ignore).
    Full,
    /// Serve these ranges: one → 206 with Content-Range, several → multipart/byteranges.
    Partial(Vec<ByteRange>),
    /// None of the ranges overlaps the representation: 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// Evaluate a Range header value against a representation of `len` bytes.
pub fn evaluate(header: &str, len: u64, max_ranges: usize) -> RangeResult {
    let h = header.trim();
    let Some(eq) = h.find('=') else {
        return RangeResult::Full;
    };
    if !h[..eq].trim().eq_ignore_ascii_case("bytes") {
        return RangeResult::Full;
    }
    let mut out: Vec<ByteRange> = Vec::new();
    let mut count = 0usize;
    for spec in h[eq + 1..].split(',') {
        let spec = spec.trim();
        if spec.is_empty() {
            continue; // RFC 9110 list syntax allows empty elements
        }
        count += 1;
        if count > max_ranges {
            return RangeResult::Full;
        }
        let Some(dash) = spec.find('-') else {
            return RangeResult::Full;
        };
        let (a, b) = (spec[..dash].trim(), spec[dash + 1..].trim());
        if a.is_empty() {
            // Suffix range: the last n bytes.
            let Some(n) = parse_u64(b) else {
                return RangeResult::Full;
            };
            if n == 0 || len == 0 {
                continue;
            }
            let n = n.min(len);
            out.push(ByteRange {
                start: len - n,
                end: len - 1,
            });
        } else {
            let Some(start) = parse_u64(a) else {
                return RangeResult::Full;
            };
            let end = if b.is_empty() {
                u64::MAX
            } else {
                match parse_u64(b) {
                    Some(e) if e >= start => e,
                    _ => return RangeResult::Full,
                }
            };
            if start >= len {
                continue;
            }
            out.push(ByteRange {
                start,
                end: end.min(len - 1),
            });
        }
    }
    if count == 0 {
        return RangeResult::Full;
    }
    if out.is_empty() {
        // An empty file has no byte to point at: its whole (empty) answer, as
        // nginx and Apache give, rather than a 416 to the `bytes=0-` that media
        // elements and download managers open every download with.
        if len == 0 {
            return RangeResult::Full;
        }
        return RangeResult::Unsatisfiable;
    }
    if out.len() == 1 {
        return RangeResult::Partial(out);
    }
    // Asking for more than the whole file, in any combination, gets the whole file.
    let asked = out.iter().fold(0u64, |a, r| a.saturating_add(r.len()));
    if asked > len {
        return RangeResult::Full;
    }
    out.sort_by_key(|r| r.start);
    let mut merged: Vec<ByteRange> = Vec::with_capacity(out.len());
    let mut overlaps = 0;
    for r in out {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => {
                overlaps += 1;
                if overlaps > 1 {
                    return RangeResult::Full;
                }
                last.end = last.end.max(r.end);
            }
            // Adjacent, or a gap smaller than a part header: one part is cheaper.
            Some(last) if r.start - last.end <= COALESCE_GAP => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    RangeResult::Partial(merged)
}

/// Ranges separated by fewer bytes than this are sent as one part: a multipart part
/// header (boundary, Content-Type, Content-Range) costs about this much.
const COALESCE_GAP: u64 = 80;

/// A run of digits as a number; `u64::MAX` when it does not fit (a position past the
/// end of any file). `None` when it is not a run of digits.
fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: u64, e: u64) -> ByteRange {
        ByteRange { start: s, end: e }
    }

    #[test]
    fn single_ranges() {
        assert_eq!(
            evaluate("bytes=0-99", 1000, 16),
            RangeResult::Partial(vec![r(0, 99)])
        );
        assert_eq!(
            evaluate("bytes=900-", 1000, 16),
            RangeResult::Partial(vec![r(900, 999)])
        );
        assert_eq!(
            evaluate("bytes=-100", 1000, 16),
            RangeResult::Partial(vec![r(900, 999)])
        );
        assert_eq!(
            evaluate("bytes=-5000", 1000, 16),
            RangeResult::Partial(vec![r(0, 999)])
        );
        assert_eq!(
            evaluate("bytes=990-5000", 1000, 16),
            RangeResult::Partial(vec![r(990, 999)])
        );
        assert_eq!(
            evaluate("BYTES = 1-1", 1000, 16),
            RangeResult::Partial(vec![r(1, 1)])
        );
    }

    #[test]
    fn beyond_four_gib() {
        let len = 6u64 << 30;
        let start = (5u64 << 30) + 7;
        assert_eq!(
            evaluate(&format!("bytes={start}-"), len, 16),
            RangeResult::Partial(vec![r(start, len - 1)])
        );
    }

    #[test]
    fn unsatisfiable_and_ignored() {
        assert_eq!(
            evaluate("bytes=1000-", 1000, 16),
            RangeResult::Unsatisfiable
        );
        assert_eq!(evaluate("bytes=-0", 1000, 16), RangeResult::Unsatisfiable);
        // An empty file: its whole, empty answer, whatever the ranges.
        for h in [
            "bytes=0-",
            "bytes=0-0",
            "bytes=-1",
            "bytes=-0",
            "bytes=5-9,-3",
        ] {
            assert_eq!(evaluate(h, 0, 16), RangeResult::Full, "{h}");
        }
        assert_eq!(evaluate("bytes=5-1", 1000, 16), RangeResult::Full);
        assert_eq!(evaluate("items=0-1", 1000, 16), RangeResult::Full);
        assert_eq!(evaluate("bytes=a-b", 1000, 16), RangeResult::Full);
        assert_eq!(evaluate("bytes", 1000, 16), RangeResult::Full);
        assert_eq!(evaluate("bytes=", 1000, 16), RangeResult::Full);
    }

    #[test]
    fn amplification_is_refused() {
        // Sixteen "0-" ranges of a 5 GiB file: the whole file once, not 80 GiB.
        let five = 5u64 << 30;
        let many = format!("bytes={}", vec!["0-"; 16].join(","));
        assert_eq!(evaluate(&many, five, 16), RangeResult::Full);
        // Three ranges that overlap one another: the whole file.
        assert_eq!(
            evaluate("bytes=0-9,5-14,10-19", 1000, 16),
            RangeResult::Full
        );
        // One overlap is coalesced; so are adjacent and nearly adjacent ranges.
        assert_eq!(
            evaluate("bytes=0-99,50-149,500-599", 1000, 16),
            RangeResult::Partial(vec![r(0, 149), r(500, 599)])
        );
        assert_eq!(
            evaluate("bytes=10-19,0-9", 1000, 16),
            RangeResult::Partial(vec![r(0, 19)])
        );
        assert_eq!(
            evaluate("bytes=0-9,40-49,900-909", 1000, 16),
            RangeResult::Partial(vec![r(0, 49), r(900, 909)])
        );
        // Together more than the file: whole file.
        assert_eq!(evaluate("bytes=0-599,-500", 1000, 16), RangeResult::Full);
    }

    #[test]
    fn huge_numerals_saturate() {
        let big = "1".repeat(25);
        assert_eq!(
            evaluate(&format!("bytes={big}-"), 1000, 16),
            RangeResult::Unsatisfiable
        );
        assert_eq!(
            evaluate(&format!("bytes=0-{big}"), 1000, 16),
            RangeResult::Partial(vec![r(0, 999)])
        );
        assert_eq!(
            evaluate(&format!("bytes=-{big}"), 1000, 16),
            RangeResult::Partial(vec![r(0, 999)])
        );
    }

    #[test]
    fn multiple_and_cap() {
        assert_eq!(
            evaluate("bytes=0-0, 200-300,-1", 1000, 16),
            RangeResult::Partial(vec![r(0, 0), r(200, 300), r(999, 999)])
        );
        assert_eq!(evaluate("bytes=0-0,1-1,2-2", 10, 2), RangeResult::Full);
        // Unsatisfiable members are dropped when others remain.
        assert_eq!(
            evaluate("bytes=50-60,0-1", 10, 16),
            RangeResult::Partial(vec![r(0, 1)])
        );
    }
}
