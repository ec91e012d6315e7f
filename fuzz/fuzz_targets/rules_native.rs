//! Any native-syntax text (with the errant-client options) either loads or gives an
//! error naming the line; a loaded set answers the same through the compiled indexes
//! (path, user agent, address) as through the linear reference. No `substitute`
//! file can be read: it names nothing that exists, so such lines fail to load.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::rules_native(data));
