//! Mapped windows of a file for `mmap` sends (`io = "mmap"`, and `auto` for fast
//! local readers), how many a worker keeps between flushes, and the few it keeps
//! after their responses end ([`window_for`]). Owns the mapping's lifetime and the
//! per-thread count of live windows; what is sent from a window and when a response
//! gives its window up is `send.rs`'s.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::rc::Rc;

/// A mapped window of a file for `io = "mmap"`.
pub struct MapWindow {
    pub(super) ptr: *mut libc::c_void,
    pub(super) len: usize,
    /// File offset the window starts at (page aligned).
    pub(super) base: u64,
    /// Bytes of the window (from its start) whose page-table entries the last
    /// sends filled, as one range ([`MapWindow::populate`]).
    populated: Cell<(usize, usize)>,
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
            populated: Cell::new((0, 0)),
        })
    }

    /// Fill the page-table entries of `[start, end)` (bytes from the window's start)
    /// in one call, before a send reads them: otherwise the kernel's copy out of the
    /// mapping takes a page fault per 16 pages (fault-around), 64 per MiB, and those
    /// faults were ~10% of the server's CPU on keep-alive 1 MiB downloads
    /// (docs/BENCHMARKS.md). Only the bytes the send is about to take, which the
    /// caller has found in the page cache: populating reads cold pages from the
    /// disk, as the send itself would. So never the gap before `start` either (a
    /// shared window's other reader may be further on than this one), and not
    /// `MAP_POPULATE` at `mmap`, which would fill the whole window.
    pub(super) fn populate(&self, start: usize, end: usize) {
        let end = end.min(self.len);
        let (lo, hi) = self.populated.get();
        let continues = lo <= start && start <= hi;
        if continues && end <= hi {
            return;
        }
        // A send that carries on from the filled range fills only what follows it.
        let from = if continues { hi } else { start } & !4095;
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
        self.populated
            .set(if continues { (lo, end) } else { (start, end) });
    }
}

/// Windows kept after their responses, most recent last, at most [`RECENT_MAX`].
type Recent = Vec<(Rc<File>, Rc<MapWindow>)>;

thread_local! {
    static RECENT: RefCell<Recent> = const { RefCell::new(Vec::new()) };
}

/// Windows a worker keeps mapped after the responses that made them ended.
const RECENT_MAX: usize = 8;

/// A window of `file` from `base`, at least `len` bytes: one this worker already
/// has (a concurrent response's, or a recent one's), else a new mapping, kept for
/// the responses that follow. Mapping and unmapping a popular file's window for
/// every response (with its page-table fill and TLB flush) was ~9% of the server's
/// CPU on keep-alive 1 MiB downloads (docs/BENCHMARKS.md); responses reading the
/// same window now share one mapping. What it holds: at most [`RECENT_MAX`] windows
/// (32 MiB of mapping) and their files open, for at most a second after their last
/// use ([`forget_recent`] runs with the open-file cache's sweep), so a deleted
/// file's space is not held.
pub(super) fn window_for(file: &Rc<File>, base: u64, len: usize) -> io::Result<Rc<MapWindow>> {
    RECENT.with_borrow_mut(|recent| {
        if let Some(i) = recent
            .iter()
            .position(|(f, w)| Rc::ptr_eq(f, file) && w.base == base && w.len >= len)
        {
            let hit = recent.remove(i);
            let w = hit.1.clone();
            recent.push(hit);
            return Ok(w);
        }
        let w = Rc::new(MapWindow::map(file, base, len)?);
        if recent.len() >= RECENT_MAX {
            recent.remove(0);
        }
        recent.push((file.clone(), w.clone()));
        Ok(w)
    })
}

/// Let go of the windows kept after their responses (the worker's once-a-second
/// sweep, and a worker over `KEPT_WINDOWS`).
pub fn forget_recent() {
    let old = RECENT.with_borrow_mut(std::mem::take);
    drop(old);
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
/// flush that just ended gives its window up. Asking first lets go of the windows
/// kept after their responses ([`forget_recent`]): those go before any response's.
pub(super) fn over_kept() -> bool {
    if LIVE_WINDOWS.get() > KEPT_WINDOWS {
        forget_recent();
    }
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

    /// A file of `len` copies of `byte` in a directory of its own: its path and the
    /// file, open. The caller removes `path`'s directory.
    fn file_of(name: &str, byte: u8, len: usize) -> (std::path::PathBuf, std::fs::File) {
        let dir = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        // Written a page at a time: one large write can put the file in large
        // folios (ext4 on Linux 6.18), and then a single fault maps a whole
        // megabyte, which would hide what populating saves.
        let mut out = std::fs::File::create(&path).unwrap();
        for chunk in vec![byte; len].chunks(4096) {
            std::io::Write::write_all(&mut out, chunk).unwrap();
        }
        drop(out);
        let file = std::fs::File::open(&path).unwrap();
        (path, file)
    }

    fn remove(path: &std::path::Path) {
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_populated_window_is_read_without_page_faults() {
        let (path, file) = file_of("window", 7, 1 << 20);
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
        let w = MapWindow::map(&file, 0, 1 << 20).unwrap();
        w.populate(0, 1 << 20);
        let before = minor_faults();
        assert_eq!(touch(&w), 7 * 256);
        let populated = minor_faults() - before;
        remove(&path);
        assert!(
            unpopulated >= 8,
            "reads of a fresh mapping fault: {unpopulated}"
        );
        assert!(populated <= 1, "populated, yet {populated} faults");
    }

    #[test]
    fn a_send_further_in_does_not_read_the_gap_before_it() {
        const MIB: usize = 1 << 20;
        let (path, file) = file_of("gap", 3, 8 * MIB);
        file.sync_all().unwrap();
        // Up to five tries, each from the start: this VM now and then drops a few
        // pages of a file by itself (4 of the second 4 MiB once in ~300 runs, found
        // by `mincore` just before populating), and populating reads around the
        // missing page, into the first 4 MiB. Populating from the window's start
        // (the bug this guards) fills the first 4 MiB in every try.
        let mut resident = Vec::new();
        for _ in 0..5 {
            // The first 4 MiB leave the page cache; the rest is in it (a reader
            // of a shared window is further on, and found its bytes cached).
            crate::disk::tests::evict(&file, 0, 4 * MIB as u64);
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut vec![0; 4 * MIB], 4 * MIB as u64)
                .unwrap();
            let w = MapWindow::map(&file, 0, 8 * MIB).unwrap();
            w.populate(4 * MIB, 8 * MIB);
            let mut vec = vec![0u8; 4 * MIB / 4096];
            // SAFETY: mincore over the first 4 MiB of our mapping into a vector of
            // one byte per page.
            let r = unsafe { libc::mincore(w.ptr, 4 * MIB, vec.as_mut_ptr()) };
            assert_eq!(r, 0);
            resident.push(vec.iter().filter(|&&b| b & 1 == 1).count());
            if resident[resident.len() - 1] <= 16 {
                break;
            }
        }
        remove(&path);
        assert!(
            resident.iter().any(|&n| n <= 16),
            "populating from 4 MiB read {resident:?} pages of the unchecked first 4 MiB"
        );
    }

    #[test]
    fn responses_share_a_window_and_it_is_let_go_by_the_sweep() {
        use super::{forget_recent, window_for, LIVE_WINDOWS};
        use std::rc::Rc;
        let (path, file) = file_of("recent", 1, 3 << 20);
        let file = Rc::new(file);
        let live = || LIVE_WINDOWS.get();
        let start = live();
        let a = window_for(&file, 0, 1 << 20).unwrap();
        let b = window_for(&file, 0, 1 << 20).unwrap();
        assert!(Rc::ptr_eq(&a, &b), "a second response reuses the mapping");
        assert_eq!(live(), start + 1);
        // Another part of the file, or the same path opened again (a replaced file
        // is a new open file): a mapping of its own.
        let c = window_for(&file, 1 << 20, 1 << 20).unwrap();
        let other = Rc::new(std::fs::File::open(&path).unwrap());
        let d = window_for(&other, 0, 1 << 20).unwrap();
        assert!(!Rc::ptr_eq(&a, &d));
        assert_eq!(live(), start + 3);
        // The responses end: their windows stay mapped for the next ones...
        drop((a, b, c, d));
        assert_eq!(live(), start + 3);
        let again = window_for(&file, 0, 1 << 20).unwrap();
        assert_eq!(live(), start + 3, "found again, not mapped again");
        drop(again);
        // ...until the sweep lets them go, files and all.
        forget_recent();
        assert_eq!(live(), start);
        assert_eq!(Rc::strong_count(&file), 1);
        remove(&path);
    }
}
