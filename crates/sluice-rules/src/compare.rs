//! `RewriteCond`'s comparisons other than a regex: lexical order (`<`, `>`, `<=`,
//! `>=`) and integers (`-lt` … `-gt`), made as Apache makes them, down to how it
//! reads a number (C's `atoi`). Owns only the comparison; `model.rs` folds case
//! and applies it. Cost: one pass over the subject per condition.

/// Which orders of the subject against a condition's text make it true.
#[derive(Debug, Clone, Copy)]
pub struct Accept {
    pub less: bool,
    pub equal: bool,
    pub greater: bool,
}

impl Accept {
    pub fn holds(self, o: std::cmp::Ordering) -> bool {
        match o {
            std::cmp::Ordering::Less => self.less,
            std::cmp::Ordering::Equal => self.equal,
            std::cmp::Ordering::Greater => self.greater,
        }
    }
}

/// `s` as C's `atoi` reads it (glibc's: `strtol`, clamped, cut to an `int`):
/// leading white space, a sign, the digits that follow; anything else ends it,
/// and no digit is 0.
pub fn atoi(s: &str) -> i32 {
    let b = s
        .trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c'])
        .as_bytes();
    let (neg, digits) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        Some(b'+') => (false, &b[1..]),
        _ => (false, b),
    };
    let mut v: i128 = 0;
    for d in digits.iter().take_while(|d| d.is_ascii_digit()) {
        v = (v * 10 + i128::from(d - b'0')).min(i128::from(i64::MAX) + 1);
    }
    let v = if neg { -v } else { v };
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64 as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_as_atoi_reads_them() {
        assert_eq!(atoi("42"), 42);
        assert_eq!(atoi(" \t-12x"), -12);
        assert_eq!(atoi("+5"), 5);
        assert_eq!(atoi("x"), 0);
        assert_eq!(atoi("0x10"), 0);
        // glibc's: strtol clamps to LONG_MAX, and the cut to an int gives -1.
        assert_eq!(atoi("99999999999999999999"), -1);
        assert_eq!(atoi("-99999999999999999999"), 0);
    }
}
