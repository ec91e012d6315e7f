//! The request-head parser must never panic, and a complete head must fit the input.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_http::{parse_head, Limits, Parsed};

fuzz_target!(|data: &[u8]| {
    if let Ok(Parsed::Complete(h)) = parse_head(data, &Limits::default()) {
        assert!(h.head_len <= data.len());
        assert!(h.path.starts_with('/') || h.path == "*");
    }
});
