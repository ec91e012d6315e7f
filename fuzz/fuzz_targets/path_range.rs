//! Path normalization never yields a climbing path; Range evaluation never yields a
//! range outside the representation, nor parts that overlap or add up to more than
//! the file; a generated `Location` is never a network-path reference and never holds
//! a byte a header may not.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::path_range(data));
