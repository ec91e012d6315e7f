//! Mapped windows of a file for `mmap` sends (`io = "mmap"`, and `auto` for fast
//! local readers), and how many a worker keeps between flushes. Owns the mapping's
//! lifetime and the per-thread count of live windows; what is sent from a window and
//! when a window is given up is `send.rs`'s.

use std::io;
use std::os::fd::AsRawFd;

/// A mapped window of a file for `io = "mmap"`.
pub struct MapWindow {
    pub(super) ptr: *mut libc::c_void,
    pub(super) len: usize,
    /// File offset the window starts at (page aligned).
    pub(super) base: u64,
}

impl MapWindow {
    /// Map `len` bytes of `file` from `base` (page aligned), read-only.
    pub(super) fn map(file: &std::fs::File, base: u64, len: usize) -> io::Result<MapWindow> {
        // SAFETY: read-only shared mapping of an open file; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                base as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        LIVE_WINDOWS.set(LIVE_WINDOWS.get() + 1);
        Ok(MapWindow { ptr, len, base })
    }
}

impl Drop for MapWindow {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and are unmapped once.
        unsafe { libc::munmap(self.ptr, self.len) };
        LIVE_WINDOWS.set(LIVE_WINDOWS.get() - 1);
    }
}

thread_local! {
    /// Mapped windows alive on this thread (a worker's responses never leave it).
    static LIVE_WINDOWS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Windows a worker keeps mapped between flushes (see [`super::Outgoing::flush`]): eight
/// fast local downloads keep theirs; 1,000 readers that stopped hold at most this
/// many, about 64 MiB of RSS in all, instead of one each.
const KEPT_WINDOWS: u32 = 64;

/// Does this worker hold more windows than it keeps between flushes? Then the
/// flush that just ended gives its window up.
pub(super) fn over_kept() -> bool {
    LIVE_WINDOWS.get() > KEPT_WINDOWS
}
