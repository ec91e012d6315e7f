//! The disk pool's tests (and helpers other modules' tests use: `evict`,
//! `cached_pages`, `until_found_cold`).

use super::*;
use std::io::Write;

/// A file of `len` bytes written through to the disk under a directory of its
/// own (removed by the caller), open for reading.
fn on_disk(name: &str, len: usize) -> (std::path::PathBuf, std::path::PathBuf, File) {
    let dir = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("f");
    let mut f = File::create(&p).unwrap();
    f.write_all(&vec![7u8; len]).unwrap();
    f.sync_all().unwrap();
    let f = File::open(&p).unwrap();
    (dir, p, f)
}

/// A pool of one thread and the completion list it reports to (the `Poll`
/// must outlive the waker).
fn one_thread_pool() -> (mio::Poll, Arc<Completions>, DiskPool) {
    let poll = mio::Poll::new().unwrap();
    let done = Completions::new(Arc::new(
        mio::Waker::new(poll.registry(), mio::Token(1)).unwrap(),
    ));
    (poll, done, DiskPool::start(1, 1).unwrap())
}

#[test]
fn a_job_that_panics_leaves_its_thread_alive() {
    let t = std::thread::spawn(|| {
        let first = contained("a", || panic!("a bug in a build"));
        let mut ran = false;
        (first, contained("b", || ran = true), ran)
    });
    assert_eq!(t.join().unwrap(), (false, true, true));
}

#[test]
fn a_fresh_file_is_resident_and_an_evicted_one_is_not() {
    let (dir, p, f) = on_disk("disk", 1 << 20);
    let fd = f.as_raw_fd();
    let _ = std::fs::read(&p).unwrap();
    assert!(resident(fd, 0, 1 << 20, false) && resident(fd, 0, 1 << 20, true));
    // Evicted, a probe says not resident (this test failed one CI run before
    // it retried so).
    for dense in [false, true] {
        until_found_cold(|| {
            evict(&f, 0, 1 << 20);
            (!resident(fd, 0, 1 << 20, dense)).then_some(())
        });
    }
    evict(&f, 0, 1 << 20);
    // The pool brings them back and reports the key.
    let (_poll, done, pool) = one_thread_pool();
    assert_eq!(pool.submit(&f, 0, 1 << 20, 0, (5, 9), &done), Ok(()));
    let mut got = Vec::new();
    for _ in 0..500 {
        done.take(&mut got);
        if !got.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(got, vec![(5, 9)]);
    assert!(resident(fd, 0, 1 << 20, true));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Run `attempt` until it finds the pages it evicted cold (it returns `Some`),
/// 20 times at most, 25 ms apart. On this VM a `RWF_NOWAIT` probe of evicted
/// pages sometimes finishes within the call the disk read it started (~110 µs,
/// in windows of ~10 ms; see sluice-static's `cold` tests) and then reports
/// them resident: 3 to 7 runs in 100 of the send and disk tests failed so. A
/// build whose probe never finds them cold still fails.
pub(crate) fn until_found_cold<T>(mut attempt: impl FnMut() -> Option<T>) -> T {
    for i in 0..20 {
        if i > 0 {
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        if let Some(t) = attempt() {
            return t;
        }
    }
    panic!("twenty tries, and none found the evicted pages cold where it should");
}

/// Drop `f`'s pages of `[off, off + len)` from the page cache, and wait (1 s
/// at most) until `mincore` finds none: the advice skips pages that are
/// still in use somewhere for a moment (a per-CPU list, a socket buffer).
pub(crate) fn evict(f: &File, off: u64, len: u64) {
    for _ in 0..100 {
        // SAFETY: plain advice on an open descriptor.
        unsafe {
            libc::posix_fadvise(
                f.as_raw_fd(),
                off as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        if cached_pages(f, off, len) == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("pages of [{off}, +{len}) stay in the page cache");
}

/// Pages of `[off, off + len)` in the page cache, asked with `mincore`, which
/// (unlike a `RWF_NOWAIT` probe) starts no read of its own.
pub(crate) fn cached_pages(f: &File, off: u64, len: u64) -> usize {
    let pages = (len / 4096) as usize;
    // SAFETY: a private read-only mapping of an open file, unmapped below;
    // `vec` has one byte per page of it.
    unsafe {
        let m = libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            off as libc::off_t,
        );
        assert_ne!(m, libc::MAP_FAILED);
        let mut vec = vec![0u8; pages];
        assert_eq!(libc::mincore(m, len as usize, vec.as_mut_ptr()), 0);
        libc::munmap(m, len as usize);
        vec.iter().filter(|b| **b & 1 == 1).count()
    }
}

#[test]
fn only_a_fast_reader_past_its_first_mib_is_read_ahead_for() {
    // 4 MiB in 100 ms (40 MiB/s), 10 MiB left after the cold range: one AHEAD.
    assert_eq!(ahead_for(4 << 20, 100, 10 << 20), AHEAD);
    // ...but never past the response's end.
    assert_eq!(ahead_for(4 << 20, 100, 4096), 4096);
    // The same reader before its first MiB is out: its rate is not known yet.
    assert_eq!(ahead_for(PREFETCH - 1, 1, 10 << 20), 0);
    // A 32 KB/s download (2 MiB in 64 s) is not read ahead for.
    assert_eq!(ahead_for(2 << 20, 64_000, 10 << 20), 0);
    // Just at the rate: 8 MiB in one second.
    assert_eq!(ahead_for(8 << 20, 1000, 10 << 20), AHEAD);
    assert_eq!(ahead_for(8 << 20, 1001, 10 << 20), 0);
    // A zero elapsed time (same millisecond) is not a division by zero.
    assert_eq!(ahead_for(PREFETCH, 0, 10 << 20), AHEAD);
}

#[test]
fn a_job_that_asks_reads_the_next_range_after_reporting() {
    let (dir, _, f) = on_disk("ahead", 3 << 20);
    let fd = f.as_raw_fd();
    evict(&f, 0, 3 * PREFETCH);
    // SAFETY: plain advice on an open descriptor. `RANDOM` turns the kernel's
    // readahead off for this open file (the pool's `dup` shares it), so what is
    // cached afterwards is what the pool asked for, whatever `read_ahead_kb` is.
    unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_RANDOM) };
    let (_poll, done, pool) = one_thread_pool();
    // Its own MiB, then one more; the third is not asked for.
    assert_eq!(
        pool.submit(&f, 0, PREFETCH, 2 * PREFETCH, (1, 1), &done),
        Ok(())
    );
    // All but a few pages: this VM now and then drops a few pages of a file by
    // itself (3 of the first MiB here, twice in ~250 runs beside the other
    // tests; 4 pages of another test's file). A job that skips a range, or reads
    // none ahead, leaves all its pages out.
    let nearly_all = (PREFETCH / 4096) as usize - 8;
    let mut got = Vec::new();
    for _ in 0..500 {
        done.take(&mut got);
        if !got.is_empty() && cached_pages(&f, PREFETCH, PREFETCH) >= nearly_all {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(got, vec![(1, 1)]);
    let own = cached_pages(&f, 0, PREFETCH);
    assert!(own >= nearly_all, "the job's own range: {own} pages");
    let next = cached_pages(&f, PREFETCH, PREFETCH);
    assert!(next >= nearly_all, "not read ahead: {next} pages");
    assert_eq!(
        cached_pages(&f, 2 * PREFETCH, PREFETCH),
        0,
        "read past AHEAD"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
