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
    /// Bytes from the window's start whose page-table entries are filled
    /// ([`MapWindow::populate`]).
    populated: usize,
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
        Ok(MapWindow {
            ptr,
            len,
            base,
            populated: 0,
        })
    }

    /// Fill the page-table entries up to `end` (bytes from the window's start) in one
    /// call, before a send reads them: otherwise the kernel's copy out of the mapping
    /// takes a page fault per 16 pages (fault-around), 64 per MiB, and those faults
    /// were ~10% of the server's CPU on keep-alive 1 MiB downloads (docs/BENCHMARKS.md).
    /// Only bytes a send is about to take, which the caller has found in the page
    /// cache: populating reads cold pages from the disk, as the send itself would.
    /// `MAP_POPULATE` at `mmap` would fill the whole window, cold parts included.
    pub(super) fn populate(&mut self, end: usize) {
        let end = end.min(self.len);
        if end <= self.populated {
            return;
        }
        let from = self.populated & !4095;
        // SAFETY: [from, end) lies inside this mapping; MADV_POPULATE_READ only
        // faults pages in (an error, e.g. before Linux 5.14, leaves the faults to
        // the send).
        unsafe {
            libc::madvise(
                self.ptr.cast::<u8>().add(from).cast(),
                end - from,
                libc::MADV_POPULATE_READ,
            )
        };
        self.populated = end;
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

#[cfg(test)]
mod tests {
    use super::MapWindow;

    fn minor_faults() -> i64 {
        // SAFETY: getrusage fills the struct it is given.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
        u.ru_minflt
    }

    #[test]
    fn a_populated_window_is_read_without_page_faults() {
        let dir = std::env::temp_dir().join(format!("sluice-window-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let touch = |w: &MapWindow| {
            let mut sum = 0u64;
            for off in (0..w.len).step_by(4096) {
                // SAFETY: off < len, inside the mapping.
                sum += u64::from(unsafe { *w.ptr.cast::<u8>().add(off) });
            }
            sum
        };
        // Unpopulated: the reads fault (fault-around maps 16 pages per fault).
        let plain = MapWindow::map(&file, 0, 1 << 20).unwrap();
        let before = minor_faults();
        assert_eq!(touch(&plain), 7 * 256);
        let unpopulated = minor_faults() - before;
        drop(plain);
        let mut w = MapWindow::map(&file, 0, 1 << 20).unwrap();
        w.populate(1 << 20);
        let before = minor_faults();
        assert_eq!(touch(&w), 7 * 256);
        let populated = minor_faults() - before;
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            unpopulated >= 8,
            "reads of a fresh mapping fault: {unpopulated}"
        );
        assert!(populated <= 1, "populated, yet {populated} faults");
    }
}
