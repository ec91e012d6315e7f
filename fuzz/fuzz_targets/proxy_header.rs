//! Any bytes at the start of a PROXY-protocol connection: the parser never panics,
//! never claims more bytes than it was given, and a complete header's length fits
//! the format's bounds.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::proxy_header(data));
