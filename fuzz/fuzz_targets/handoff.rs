//! Any bytes as a handoff message from a front process (`sluice serve --from`
//! decodes these): never a panic; a message accepted is exactly a header and the
//! request length it declares, within the protocol's bound.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::handoff(data));
