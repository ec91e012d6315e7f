//! Any Apache-syntax text either loads or gives an error; a loaded set answers the
//! same through the compiled index as through the linear reference.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::rules_apache(data));
