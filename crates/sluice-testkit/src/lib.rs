//! Test support shared by every integration test: start the real binary
//! (`server`), talk HTTP to it and watch it close (`client`), and scripted hostile
//! clients (`slow`: connect from another loopback range, trickle bytes), and
//! incompressible bytes ([`noise`]), which the unit tests of a cache use too, and
//! files whose pages are not in the page cache ([`write_evicted`]).
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

/// Write `data` to `path` through to the disk, then have the kernel drop its
/// pages ([`evict`]): a file whose reads the server's disk threads must make.
pub fn write_evicted(path: &std::path::Path, data: &[u8]) {
    std::fs::write(path, data).unwrap();
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    evict(&f, data.len());
}

/// Have the kernel drop `f`'s pages (its first `len` bytes' and on), and wait
/// until `mincore` says none is left (a file the server has not opened: nothing
/// else holds them).
pub fn evict(f: &std::fs::File, len: usize) {
    use std::os::fd::AsRawFd;
    // SAFETY: a shared read-only mapping of an open file of this length, unmapped
    // below; `pages` has one byte per page of it.
    unsafe {
        let map = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(map, libc::MAP_FAILED);
        let mut pages = vec![0u8; len.div_ceil(4096)];
        for _ in 0..500 {
            assert_eq!(
                libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED),
                0
            );
            assert_eq!(libc::mincore(map, len, pages.as_mut_ptr()), 0);
            if pages.iter().all(|p| p & 1 == 0) {
                libc::munmap(map, len);
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("the file's pages stay in the page cache");
    }
}
