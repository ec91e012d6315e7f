//! Path normalization never yields a climbing path; Range evaluation never yields a
//! range outside the representation, nor parts that overlap or add up to more than
//! the file; a generated `Location` is never a network-path reference and never holds
//! a byte a header may not.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_http::range::{evaluate, RangeResult};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(n) = sluice_static::path::normalize(s, true) {
        assert!(!n.rel.starts_with('/'));
        assert!(!n.rel.split('/').any(|x| x == ".." || x == "."));
    }
    let len = data.len() as u64 * 977;
    if let RangeResult::Partial(rs) = evaluate(s, len, 16) {
        let mut total = 0u64;
        for (i, r) in rs.iter().enumerate() {
            assert!(r.start <= r.end && r.end < len);
            if i > 0 {
                assert!(r.start > rs[i - 1].end, "parts overlap: {rs:?}");
            }
            total += r.len();
        }
        assert!(total <= len, "ranges amplify: {rs:?}");
    }
    let loc = sluice_http::response::safe_location(s);
    assert!(!loc.starts_with("//") && !loc.starts_with("/\\"), "{loc}");
    assert!(loc.bytes().all(|b| b > b' ' && b < 0x7f), "{loc:?}");
});
