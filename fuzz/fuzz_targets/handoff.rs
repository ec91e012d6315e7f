//! Any bytes as a handoff message from a front process (`sluice serve --from`
//! decodes these): never a panic; a message accepted is exactly a header and the
//! request length it declares, within the protocol's bound.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluicecc::proto::{decode, HEADER_LEN, MAX_REQUEST};

fuzz_target!(|data: &[u8]| {
    if decode(data).is_ok() {
        assert!(data.len() >= HEADER_LEN && data.len() - HEADER_LEN <= MAX_REQUEST);
        let declared = u32::from_le_bytes(data[4..8].try_into().unwrap()) as usize;
        assert_eq!(declared, data.len() - HEADER_LEN);
    }
});
