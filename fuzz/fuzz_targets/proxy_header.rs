//! Any bytes at the start of a PROXY-protocol connection: the parser never panics,
//! never claims more bytes than it was given, and a complete header's length fits
//! the format's bounds.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_http::proxy::{parse, Proxied, V2_MAX};

fuzz_target!(|data: &[u8]| {
    if let Ok(Proxied::Done { len, .. }) = parse(data) {
        assert!(len <= data.len() && len <= V2_MAX);
    }
    // Fed a byte at a time, the answer for the whole never changes once complete.
    if let Ok(Proxied::Done { len, source }) = parse(data) {
        assert_eq!(parse(&data[..len]), Ok(Proxied::Done { len, source }));
    }
});
