//! `Accept-Encoding` negotiation (RFC 9110 §12.5.3) for the content codings a static
//! server can offer without compressing anything per request: precompressed
//! siblings on disk (`.br`, `.zst`, `.gz`).
//!
//! Owns only the reading of the header; which files exist is the static handler's
//! business. Cost: one pass over the header, no allocation.

/// A content coding sluice can serve from a sibling file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    Br,
    Zstd,
    Gzip,
}

impl Coding {
    /// In the server's order of preference (smallest files first) when the client
    /// weighs them equally.
    pub const ALL: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

    /// The `Content-Encoding` token.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// Its bit in a set of codings (`1 << position in ALL`).
    pub fn bit(self) -> u8 {
        1 << self as u8
    }

    /// The sibling file's suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            Coding::Br => ".br",
            Coding::Zstd => ".zst",
            Coding::Gzip => ".gz",
        }
    }
}

/// The codings the client accepts, best first (by q-value, then by
/// [`Coding::ALL`]'s order); codings with `q=0`, or not named and not covered by
/// `*`, are left out. At most three entries; unused slots are `None`.
pub fn acceptable(header: &str) -> [Option<Coding>; 3] {
    // q-values in thousandths; -1 = not mentioned.
    let mut q = [-1i32; 3];
    let mut star = -1i32;
    for item in header.split(',') {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or("").trim();
        if name.is_empty() {
            continue;
        }
        let mut weight = 1000;
        for p in parts {
            let p = p.trim();
            if let Some(v) = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")) {
                weight = parse_qvalue(v.trim()).unwrap_or(0);
            }
        }
        let slot = if name.eq_ignore_ascii_case("br") {
            0
        } else if name.eq_ignore_ascii_case("zstd") {
            1
        } else if name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip") {
            2
        } else if name == "*" {
            star = star.max(weight);
            continue;
        } else {
            continue;
        };
        q[slot] = q[slot].max(weight);
    }
    let mut order: [(i32, usize); 3] = [(0, 0); 3];
    for (i, w) in q.iter().enumerate() {
        let w = if *w < 0 { star } else { *w };
        order[i] = (w, i);
    }
    // Stable: equal weights keep the server's preference.
    order.sort_by_key(|o| std::cmp::Reverse(o.0));
    let mut out = [None; 3];
    let mut n = 0;
    for (w, i) in order {
        if w > 0 {
            out[n] = Some(Coding::ALL[i]);
            n += 1;
        }
    }
    out
}

/// `0`, `0.5`, `1.000` → thousandths; anything else is not a qvalue.
fn parse_qvalue(v: &str) -> Option<i32> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut f = 0;
    for (i, b) in frac.bytes().enumerate() {
        f += i32::from(b - b'0') * [100, 10, 1][i];
    }
    match int {
        "0" => Some(f),
        "1" if f == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coding::*;

    #[test]
    fn order_and_weights() {
        assert_eq!(
            acceptable("gzip, deflate, br, zstd"),
            [Some(Br), Some(Zstd), Some(Gzip)]
        );
        assert_eq!(acceptable("gzip"), [Some(Gzip), None, None]);
        assert_eq!(acceptable("br;q=0.5, gzip"), [Some(Gzip), Some(Br), None]);
        assert_eq!(acceptable("br;q=0, gzip;q=0.001"), [Some(Gzip), None, None]);
        assert_eq!(acceptable("*"), [Some(Br), Some(Zstd), Some(Gzip)]);
        assert_eq!(
            acceptable("*;q=0.1, br;q=0"),
            [Some(Zstd), Some(Gzip), None]
        );
        assert_eq!(acceptable("identity"), [None, None, None]);
        assert_eq!(acceptable(""), [None, None, None]);
        assert_eq!(acceptable("x-gzip ; Q=1.000"), [Some(Gzip), None, None]);
        // A malformed weight counts as 0: never send what the client may not decode.
        assert_eq!(acceptable("gzip;q=2"), [None, None, None]);
        assert_eq!(acceptable("gzip;q=0.5000"), [None, None, None]);
    }
}
