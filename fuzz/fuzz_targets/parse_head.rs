//! The request-head parser must never panic; a complete head must fit the input, and its target hold no fragment, space or control.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::parse_head(data));
