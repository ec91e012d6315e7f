//! Path normalization never yields a climbing path; Range evaluation never yields a
//! range outside the representation.
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
        for r in rs {
            assert!(r.start <= r.end && r.end < len);
        }
    }
});
