//! The residency checks against evicted files, and the listings left for a worker.

use super::*;
use crate::listing;
use std::io::Write;

/// A file of `len` bytes written through to the disk, with its pages evicted
/// from the page cache (the advice works on clean pages of a file on disk). A
/// page the writing thread left in another CPU's batch of pages not yet on the
/// kernel's lists is not evicted by the first advice, so it is given until the
/// first page is gone (at most a second): what the tests check starts from there.
fn evicted(dir: &std::path::Path, name: &str, len: usize) -> File {
    let p = dir.join(name);
    let mut f = File::create(&p).unwrap();
    f.write_all(&vec![7u8; len]).unwrap();
    f.sync_all().unwrap();
    let f = File::open(&p).unwrap();
    for _ in 0..100 {
        // SAFETY: plain advice on an open descriptor.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if !cached(f.as_raw_fd(), 1) {
            return f;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{name}'s pages stayed in the page cache");
}

fn form(desc: bool, gzip: bool) -> listing::Form {
    listing::Form {
        key: listing::SortKey::Name,
        desc,
        json: false,
        gzip,
        compress: true,
        title: b"/".to_vec(),
        notes: [None, None],
    }
}

fn page() -> io::Result<listing::Built> {
    Ok(listing::Built {
        body: Vec::new(),
        gz: None,
    })
}

fn gzipped_page() -> io::Result<listing::Built> {
    Ok(listing::Built {
        body: Vec::new(),
        gz: Some(Vec::new()),
    })
}

#[test]
fn read_listings_are_taken_once_and_bounded() {
    let ready = ReadListings::default();
    let plain = form(false, false);
    for i in 0..=READ_LISTINGS_MAX {
        ready.put(&format!("d{i}"), &plain, page());
    }
    assert!(ready.take("d0", &plain).is_none(), "the oldest made room");
    assert!(ready.take("d1", &plain).is_some_and(|r| r.is_ok()));
    assert!(ready.take("d1", &plain).is_none(), "taken once");
    ready.put("e", &plain, Err(io::ErrorKind::NotFound.into()));
    assert!(ready.take("e", &plain).is_some_and(|r| r.is_err()));
    // Entries older than the TTL are never handed out.
    ready.0.lock().unwrap()[0].at -= READ_LISTING_TTL;
    let first = ready.0.lock().unwrap()[0].rel.clone();
    assert!(ready.take(&first, &plain).is_none());
}

/// A page is taken only by a request for its form; a gzipped build also serves a
/// plain request (it has the plain body), a plain build not a gzip one.
#[test]
fn read_listings_are_taken_by_their_form() {
    let ready = ReadListings::default();
    ready.put("d", &form(false, false), page());
    assert!(
        ready.take("d", &form(true, false)).is_none(),
        "another order"
    );
    assert!(ready.take("d", &form(false, true)).is_none(), "not gzipped");
    assert!(ready.take("d", &form(false, false)).is_some());
    ready.put("d", &form(true, true), gzipped_page());
    assert!(ready.take("d", &form(true, false)).is_some());
    ready.put("d", &form(true, true), gzipped_page());
    assert!(ready.take("d", &form(true, true)).is_some());
}

#[test]
fn cachestat_tells_cached_pages_from_evicted_ones_without_reading_them() {
    let dir = tempfile::tempdir().unwrap();
    let f = evicted(dir.path(), "medium", 70_000);
    assert!(!cached(f.as_raw_fd(), 70_000));
    // Asking started no read: still nothing there a moment later.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(!cached(f.as_raw_fd(), 70_000));
    assert!(!cached(f.as_raw_fd(), 1));
    let mut buf = vec![0u8; 70_000];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 0).unwrap();
    assert!(cached(f.as_raw_fd(), 70_000));
    assert!(cached(f.as_raw_fd(), 0));
}

#[test]
fn a_read_that_would_wait_says_so_and_a_cached_one_fills_the_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let mut buf = vec![0u8; 12_000];
    // Evicted, the read says it would wait. Not always on this VM: in about one
    // run in 14 of this test alone, every such read for a while (20 files in
    // 12 ms) returned the whole file after ~110 µs, so the disk read the call
    // started had finished within it. With a 25 ms pause between tries, 150 runs
    // in 150 found a read that said so. A build whose read never says "would wait"
    // still fails, after half a second.
    let f = (0..20)
        .map(|i| {
            if i > 0 {
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            evicted(dir.path(), &format!("small{i}"), 12_000)
        })
        .find(|f| !read_nowait(f, &mut buf).unwrap())
        .expect("evicted pages read without waiting, twenty times");
    // Once the kernel has read them (the failed read started it), they are there.
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 0).unwrap();
    buf.fill(0);
    assert!(read_nowait(&f, &mut buf).unwrap());
    assert!(buf.iter().all(|&b| b == 7));
    // A file shorter than the buffer is an error, not a partial answer.
    let mut long = vec![0u8; 12_001];
    assert!(read_nowait(&f, &mut long).is_err());
}

/// A listing thread is lowered, and only it: a thread started before keeps its
/// value.
#[test]
fn a_listing_thread_alone_is_lowered() {
    std::thread::spawn(|| {
        let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let was = nice();
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            asked.recv().unwrap();
            nice()
        });
        lower_this_thread();
        assert_eq!(nice(), (was + LISTING_NICE).min(19));
        ask.send(()).unwrap();
        assert_eq!(
            other.join().unwrap(),
            was,
            "only the calling thread is lowered"
        );
    })
    .join()
    .unwrap();
}
