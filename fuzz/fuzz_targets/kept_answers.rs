//! Kept answers: any bytes as requests; an answer only for exactly its head's bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::kept_answers(data));
