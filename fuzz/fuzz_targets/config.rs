//! Any text as a config file: no panic, and every refusal names the file and,
//! where it has one, the line; the same text as a `types_file` (mime.types) gives only
//! valid pairs or a line of its own (`checks::config`).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::config(data));
