//! Test support shared by every integration test: start the real binary
//! (`server`), talk HTTP to it and watch it close (`client`), and scripted hostile
//! clients (`slow`: connect from another loopback range, trickle bytes), and
//! incompressible bytes ([`noise`]), which the unit tests of a cache use too.
//!
//! Integration tests start the real `sluice` binary and talk to it over TCP; this
//! crate is how they do it, so that a fix to the harness (a port race, a timeout)
//! is made once. It holds no assertions about the server's behaviour: those are the
//! tests'. Dependency order: `client` at the bottom, `server` and `slow` above it.

pub mod client;
pub mod server;
pub mod slow;

pub use client::*;
pub use server::*;
pub use slow::*;

/// `len` bytes that do not compress and are not all alike (xorshift from `seed`):
/// bodies whose every byte must arrive, and pages whose gzipped form is their size.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
