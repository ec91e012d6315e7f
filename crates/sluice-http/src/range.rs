//! `Range: bytes=…` evaluation (RFC 9110 §14).
//!
//! A syntactically invalid header or a unit other than `bytes` is ignored (the full
//! representation is served), as the RFC allows. More than `max_ranges` ranges is
//! treated the same way: a client asking for hundreds of tiny ranges gets the file
//! once instead of a multipart response that costs us more than it costs them.

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
    let mut out = Vec::new();
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
        RangeResult::Unsatisfiable
    } else {
        RangeResult::Partial(out)
    }
}

fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
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
        assert_eq!(evaluate("bytes=0-", 0, 16), RangeResult::Unsatisfiable);
        assert_eq!(evaluate("bytes=5-1", 1000, 16), RangeResult::Full);
        assert_eq!(evaluate("items=0-1", 1000, 16), RangeResult::Full);
        assert_eq!(evaluate("bytes=a-b", 1000, 16), RangeResult::Full);
        assert_eq!(evaluate("bytes", 1000, 16), RangeResult::Full);
        assert_eq!(evaluate("bytes=", 1000, 16), RangeResult::Full);
    }

    #[test]
    fn multiple_and_cap() {
        assert_eq!(
            evaluate("bytes=0-0, 2-3,-1", 10, 16),
            RangeResult::Partial(vec![r(0, 0), r(2, 3), r(9, 9)])
        );
        assert_eq!(evaluate("bytes=0-0,1-1,2-2", 10, 2), RangeResult::Full);
        // Unsatisfiable members are dropped when others remain.
        assert_eq!(
            evaluate("bytes=50-60,0-1", 10, 16),
            RangeResult::Partial(vec![r(0, 1)])
        );
    }
}
