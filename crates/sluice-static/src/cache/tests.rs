//! The open-file cache: expiry, revalidation, the prebuilt head lines.
use super::*;
use sluice_config::SymlinkPolicy;

#[test]
fn a_whole_file_answer_has_its_lines_written_once_and_the_validators_read_from_them() {
    let d = std::env::temp_dir().join(format!("sluice-lines-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("notes.txt"), b"hello").unwrap();
    let root = Root::new(&d, SymlinkPolicy::InsideRoot).unwrap();
    let mut c = FileCache::new(Duration::from_secs(1), 100, 1024);
    let Entry::File(f) = c.lookup(&root, "notes.txt", Instant::now()) else {
        panic!("not a file");
    };
    let meta = std::fs::metadata(d.join("notes.txt")).unwrap();
    let etag = format!("\"{:x}.{:x}-5\"", meta.mtime(), meta.mtime_nsec());
    let lm = date::format(meta.mtime() as u64);
    assert_eq!(f.etag(), etag);
    assert_eq!(f.last_modified(), lm);
    let want = format!(
        "Last-Modified: {lm}\r\nETag: {etag}\r\nAccept-Ranges: bytes\r\n\
         Content-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n"
    );
    assert_eq!(f.whole_file_lines(), Some(want.as_bytes()));
    std::fs::remove_dir_all(&d).unwrap();

    // The longest ETag and length with every type the table knows fit; a type
    // too long for the record leaves the lines to the handler, validators intact.
    let etag = format!("\"{:x}.{:x}-{:x}\"", u64::MAX, 999_999_999u32, u64::MAX);
    for ext in ["deb", "js", "md", "html", "svg", "bin", "woff2", "xyz"] {
        let mime = mime::for_path(&format!("f.{ext}"));
        let (_, _, full) = head_lines(&lm, &etag, mime, u64::MAX);
        assert!(full > 0, "{mime}");
    }
    let (lines, etag_end, full) = head_lines(&lm, &etag, &"x".repeat(200), 1);
    assert_eq!(full, 0);
    assert_eq!(&lines.as_str()[ETAG_AT..etag_end as usize], etag);
    assert_eq!(&lines.as_str()[LM_AT..LM_AT + 29], lm);
}

#[test]
fn expiry_closes_cached_descriptors() {
    let d = std::env::temp_dir().join(format!("sluice-cache-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("big"), vec![0u8; 100_000]).unwrap();
    std::fs::write(d.join("small"), b"x").unwrap();
    let root = Root::new(&d, SymlinkPolicy::InsideRoot).unwrap();
    let mut c = FileCache::new(Duration::from_millis(100), 100, 1024);
    let t0 = Instant::now();
    assert!(matches!(c.lookup(&root, "big", t0), Entry::File(f) if f.file.is_some()));
    assert!(matches!(c.lookup(&root, "small", t0), Entry::File(f) if f.data.is_some()));
    assert!(matches!(c.lookup(&root, "missing", t0), Entry::NotFound));
    assert_eq!((c.len(), c.fds.mine()), (3, 1));
    c.expire(t0 + Duration::from_millis(50));
    assert_eq!(c.len(), 3, "still valid");
    c.expire(t0 + Duration::from_millis(150));
    // The descriptor is closed and the miss dropped; the small file's bytes stay,
    // to be revalidated by its next request.
    assert_eq!((c.len(), c.fds.mine(), c.bytes.mine()), (1, 0, 1));
    // Unused for longer than that, it goes too.
    c.expire(t0 + Duration::from_millis(100) + KEEP_UNUSED + Duration::from_secs(1));
    assert_eq!((c.len(), c.fds.mine(), c.bytes.mine()), (0, 0, 0));
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn paths_past_the_inline_key_length_are_cached_too() {
    let d = std::env::temp_dir().join(format!("sluice-keys-{}", std::process::id()));
    let long = format!("{}/f", "d".repeat(80));
    std::fs::create_dir_all(d.join(&long).parent().unwrap()).unwrap();
    std::fs::write(d.join(&long), b"long").unwrap();
    std::fs::write(d.join("short"), b"short").unwrap();
    let root = Root::new(&d, SymlinkPolicy::InsideRoot).unwrap();
    let mut c = FileCache::new(Duration::from_secs(60), 100, 1024);
    let t = Instant::now();
    for p in [long.as_str(), "short"] {
        let a = info(c.lookup(&root, p, t));
        assert!(
            Rc::ptr_eq(&a, &info(c.lookup(&root, p, t))),
            "{p} not cached"
        );
    }
    assert_eq!(
        info(c.lookup(&root, &long, t)).data.as_deref().unwrap(),
        b"long"
    );
    // A miss is cached under its own path, long or short.
    assert!(matches!(
        c.lookup(&root, &format!("{long}x"), t),
        Entry::NotFound
    ));
    assert_eq!(c.len(), 3);
    let _ = std::fs::remove_dir_all(d);
}

fn info(e: Entry) -> Rc<FileInfo> {
    match e {
        Entry::File(f) => f,
        other => panic!("not a file: {other:?}"),
    }
}

#[test]
fn an_expired_entry_is_kept_only_while_its_file_is_unchanged() {
    let d = std::env::temp_dir().join(format!("sluice-reval-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join("f");
    std::fs::write(&p, b"one").unwrap();
    let root = Root::new(&d, SymlinkPolicy::InsideRoot).unwrap();
    let mut c = FileCache::new(Duration::from_millis(100), 100, 1024);
    let mut t = Instant::now();
    let a = info(c.lookup(&root, "f", t));
    // Expired and swept, but unchanged: the same entry, not a reload.
    t += Duration::from_millis(150);
    c.expire(t);
    let b = info(c.lookup(&root, "f", t));
    assert!(Rc::ptr_eq(&a, &b), "an unchanged file was loaded again");
    // Rewritten in place with the same size: its times change, so it is reloaded
    // once the entry expires (and not before).
    std::fs::write(&p, b"two").unwrap();
    let f = std::fs::File::options().write(true).open(&p).unwrap();
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    assert!(Rc::ptr_eq(&b, &info(c.lookup(&root, "f", t))));
    t += Duration::from_millis(150);
    let e = info(c.lookup(&root, "f", t));
    assert_eq!(e.data.as_deref().unwrap(), b"two");
    // Replaced by another file (a new inode, renamed over it).
    std::fs::write(d.join("new"), b"three").unwrap();
    std::fs::rename(d.join("new"), &p).unwrap();
    t += Duration::from_millis(150);
    let g = info(c.lookup(&root, "f", t));
    assert_eq!(g.data.as_deref().unwrap(), b"three");
    // Replaced by a symlink to the same file: not the same entry any more.
    std::fs::rename(&p, d.join("target")).unwrap();
    std::os::unix::fs::symlink("target", &p).unwrap();
    t += Duration::from_millis(150);
    let h = info(c.lookup(&root, "f", t));
    assert!(
        !Rc::ptr_eq(&g, &h),
        "a symlink in the file's place passed as the file"
    );
    // Deleted: a miss.
    std::fs::remove_file(&p).unwrap();
    std::fs::remove_file(d.join("target")).unwrap();
    t += Duration::from_millis(150);
    assert!(matches!(c.lookup(&root, "f", t), Entry::NotFound));
    let _ = std::fs::remove_dir_all(d);
}

/// Where the kernel's caches cannot say (a name never asked for), a cache that may
/// not wait makes the lookup itself until one of its own is slow (here:
/// `made_slow_lookup`, what a lookup that slept past `lookup_max` does); then it
/// answers `Cold` (for the disk threads) until their last `TRUST_AFTER` lookups in
/// a row were fast, and twice as many the next time; and while the disk threads
/// have work in hand (the disk is busy), always. With `lookup_max` zero, always
/// `Cold`. Cold answers are never kept; names the kernel knows are
/// answered; an expired entry is checked only from the kernel's caches while
/// lookups are slow.
#[test]
fn lookups_are_made_on_the_worker_only_while_they_are_fast() {
    let d = tempfile::tempdir().unwrap();
    let root = Root::new(d.path(), SymlinkPolicy::InsideRoot).unwrap();
    std::fs::write(d.path().join("f"), b"x").unwrap();
    let now = Instant::now();
    let mut n = 0;
    let mut absent = || {
        n += 1;
        format!("never-asked-{}-{n}", std::process::id())
    };
    let mut c = FileCache::new(Duration::from_secs(1), 100, 1024);
    c.set_disk(cold::DiskWait::Threads { busy: false });
    let costs = Arc::clone(c.lookup_costs());
    // Fast so far: made here, answered, kept.
    assert!(matches!(c.lookup(&root, &absent(), now), Entry::NotFound));
    assert!(matches!(c.lookup(&root, "f", now), Entry::File(_)));
    assert_eq!(c.len(), 2);
    // While the disk threads have work in hand, none is tried here.
    c.set_disk(cold::DiskWait::Threads { busy: true });
    assert!(matches!(c.lookup(&root, &absent(), now), Entry::Cold));
    c.set_disk(cold::DiskWait::Threads { busy: false });
    // One made here was slow: Cold until the disk threads found TRUST_AFTER fast.
    c.gate.made_slow_lookup();
    assert!(matches!(c.lookup(&root, &absent(), now), Entry::Cold));
    for _ in 0..cold::TRUST_AFTER - 1 {
        costs.record(false);
    }
    assert!(matches!(c.lookup(&root, &absent(), now), Entry::Cold));
    // One slow one among them starts the count again.
    costs.record(true);
    for _ in 0..cold::TRUST_AFTER - 1 {
        costs.record(false);
    }
    assert!(matches!(c.lookup(&root, &absent(), now), Entry::Cold));
    // The expired file is still checked (its name is in the kernel's caches).
    let later = now + Duration::from_secs(2);
    assert!(matches!(c.lookup(&root, "f", later), Entry::File(_)));
    costs.record(false);
    assert!(matches!(c.lookup(&root, &absent(), now), Entry::NotFound));
    // Slow again: twice as many.
    c.gate.made_slow_lookup();
    for _ in 0..2 * cold::TRUST_AFTER - 1 {
        costs.record(false);
    }
    assert!(matches!(c.lookup(&root, &absent(), now), Entry::Cold));
    costs.record(false);
    assert!(matches!(c.lookup(&root, &absent(), now), Entry::NotFound));
    assert_eq!(c.len(), 4, "a Cold answer was kept");
    // A name the kernel has an entry for (a miss asked before) is answered either way.
    let known = format!("never-asked-{}-1", std::process::id());
    c.gate.made_slow_lookup();
    c.expire(now + Duration::from_secs(60));
    assert!(matches!(c.lookup(&root, &known, now), Entry::NotFound));
    // Zero: never made here, however fast the disk threads were.
    c.set_lookup_max(Duration::ZERO);
    c.set_disk(cold::DiskWait::Threads { busy: false });
    let costs = Arc::clone(c.lookup_costs());
    for _ in 0..cold::TRUST_AFTER_MAX {
        costs.record(false);
    }
    assert!(matches!(c.lookup(&root, &absent(), now), Entry::Cold));
}

/// What tells a lookup that waited for the disk from one preempted on a busy
/// machine: the thread's sleeps change across a sleep, not across work.
#[test]
fn a_sleep_is_seen_and_work_is_not() {
    use crate::cold::sleeps;
    let before = sleeps();
    let mut x = 0u64;
    for i in 0..1_000_000u64 {
        x = x.wrapping_mul(31).wrapping_add(i);
    }
    std::hint::black_box(x);
    let busy = sleeps();
    std::thread::sleep(Duration::from_millis(2));
    assert_ne!(sleeps(), busy, "a sleep went unseen");
    // (A preemption during the loop is involuntary: not a sleep.)
    assert_eq!(busy.1, before.1, "work read from a device");
}

#[test]
fn a_flood_of_misses_does_not_push_out_the_files_asked_for() {
    // 40 files cached, then 1,000 absent names asked for within the validity: the
    // misses make room for each other, the files stay. Proof: the files, gone
    // from the disk meanwhile, are still answered from the cache.
    let d = std::env::temp_dir().join(format!("sluice-flood-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    for i in 0..40 {
        std::fs::write(d.join(format!("f{i}")), b"x").unwrap();
    }
    let root = Root::new(&d, SymlinkPolicy::InsideRoot).unwrap();
    let mut c = FileCache::new(Duration::from_secs(10), 64, 1024);
    let now = Instant::now();
    for i in 0..40 {
        assert!(matches!(
            c.lookup(&root, &format!("f{i}"), now),
            Entry::File(_)
        ));
        std::fs::remove_file(d.join(format!("f{i}"))).unwrap();
    }
    for i in 0..1000 {
        assert!(matches!(
            c.lookup(&root, &format!("nope{i}"), now),
            Entry::NotFound
        ));
        assert!(c.len() <= 64);
    }
    for i in 0..40 {
        let e = c.lookup(&root, &format!("f{i}"), now);
        assert!(
            matches!(e, Entry::File(_)),
            "f{i} was pushed out by the misses"
        );
    }
    // With no misses to drop, a full table still makes room (here: empties).
    let mut c = FileCache::new(Duration::from_secs(10), 8, 1024);
    std::fs::write(d.join("g"), b"y").unwrap();
    for i in 0..8 {
        std::fs::create_dir_all(d.join(format!("dir{i}"))).unwrap();
        assert!(matches!(
            c.lookup(&root, &format!("dir{i}"), now),
            Entry::Dir
        ));
    }
    assert!(matches!(c.lookup(&root, "g", now), Entry::File(_)));
    assert!(c.len() <= 8);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Out of descriptors, a cache gives back the ones no response holds at once
/// (`shed_descriptors`), and every other cache of the process at its next sweep
/// once told (`shed_everywhere`); a descriptor a response still holds stays open
/// until the response lets it go, and files kept in memory stay.
#[test]
fn out_of_descriptors_every_cache_gives_back_its_idle_ones() {
    let d = std::env::temp_dir().join(format!("sluice-shed-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    for f in ["big1", "big2"] {
        std::fs::write(d.join(f), vec![0u8; 100_000]).unwrap();
    }
    std::fs::write(d.join("small"), b"x").unwrap();
    let root = Root::new(&d, SymlinkPolicy::InsideRoot).unwrap();
    let now = Instant::now();
    let mut a = FileCache::new(Duration::from_secs(60), 100, 1024);
    let mut b = FileCache::new(Duration::from_secs(60), 100, 1024);
    // A response sending from big1 holds its entry.
    let sending = info(a.lookup(&root, "big1", now));
    a.lookup(&root, "big2", now);
    a.lookup(&root, "small", now);
    b.lookup(&root, "big1", now);
    assert_eq!((a.fds.mine(), b.fds.mine()), (2, 1));
    assert_eq!(a.shed_descriptors(), 2);
    assert_eq!(
        (a.len(), a.fds.mine(), a.bytes.mine()),
        (1, 0, 1),
        "the small file stays"
    );
    let held = sending.file.as_ref().expect("a descriptor");
    assert!(
        held.metadata().is_ok(),
        "the response's descriptor is still open"
    );
    // The other cache: untouched by a sweep until told, then at its next sweep.
    b.expire(now);
    assert_eq!(b.fds.mine(), 1);
    shed_everywhere();
    b.expire(now);
    assert_eq!((b.len(), b.fds.mine()), (0, 0));
    // Asked again, the files open again.
    assert!(matches!(a.lookup(&root, "big2", now), Entry::File(f) if f.file.is_some()));
    std::fs::remove_dir_all(&d).unwrap();
}

/// A lookup that fails for a reason of the server's is not the file's answer.
#[test]
fn failures_of_the_servers_own_are_unavailable_not_forbidden() {
    let e = std::io::Error::from_raw_os_error;
    for errno in [
        libc::EMFILE,
        libc::ENFILE,
        libc::ENOMEM,
        libc::ENOBUFS,
        libc::EIO,
    ] {
        assert!(matches!(classify(&e(errno)), Entry::Unavailable), "{errno}");
    }
    assert!(matches!(classify(&e(libc::EACCES)), Entry::Forbidden));
    assert!(matches!(classify(&e(libc::ELOOP)), Entry::Forbidden));
    assert!(matches!(classify(&e(libc::ENOENT)), Entry::NotFound));
}

/// A worker's caches (one per site) share one bound on the small-file bytes they
/// keep in memory: what one keeps, another cannot, until it gives it back.
#[test]
fn a_workers_caches_share_one_byte_bound() {
    let d = std::env::temp_dir().join(format!("sluice-budget-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let body = vec![7u8; 40 << 20];
    for f in ["a.bin", "b.bin"] {
        std::fs::write(d.join(f), &body).unwrap();
    }
    let root = Root::new(&d, SymlinkPolicy::InsideRoot).unwrap();
    let now = Instant::now();
    let base = KEPT.get();
    let cache = || FileCache::new(Duration::from_secs(60), 100, 48 << 20);
    let (mut a, mut b) = (cache(), cache());
    // 40 MiB fit the worker's 64 MiB: kept in memory.
    assert!(matches!(a.lookup(&root, "a.bin", now), Entry::File(f) if f.data.is_some()));
    assert_eq!(KEPT.get(), base + (40 << 20));
    // 40 MiB more would pass it: the other site's cache keeps its file open instead.
    let f = info(b.lookup(&root, "b.bin", now));
    assert!(f.data.is_none() && f.file.is_some());
    assert_eq!(KEPT.get(), base + (40 << 20));
    // The first cache gone (a reload builds new ones), its bytes are free again.
    drop(a);
    assert_eq!(KEPT.get(), base);
    let mut c = cache();
    assert!(matches!(c.lookup(&root, "b.bin", now), Entry::File(f) if f.data.is_some()));
    std::fs::remove_dir_all(&d).unwrap();
}

/// A worker's caches (one per site) share one bound on the descriptors they keep
/// open: past it a large file is served but not kept, until the sweep closes what
/// expired.
#[test]
fn a_workers_caches_share_one_descriptor_bound() {
    let d = std::env::temp_dir().join(format!("sluice-fds-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    for f in ["a1", "a2", "a3", "b1"] {
        std::fs::write(d.join(f), b"large: past small_file_max = 0").unwrap();
    }
    let root = Root::new(&d, SymlinkPolicy::InsideRoot).unwrap();
    let t0 = Instant::now();
    let base = FDS.get();
    // Every file kept open (`small_file_max` 0); a bound of three for the worker.
    let cache = || {
        let mut c = FileCache::new(Duration::from_secs(1), 100, 0);
        c.max_fds = base + 3;
        c
    };
    let (mut a, mut b) = (cache(), cache());
    for f in ["a1", "a2", "a3"] {
        assert!(info(a.lookup(&root, f, t0)).file.is_some());
    }
    assert_eq!((a.fds.mine(), FDS.get()), (3, base + 3));
    // The other site's large file: served (its descriptor is the response's), not kept.
    assert!(info(b.lookup(&root, "b1", t0)).file.is_some());
    assert_eq!((b.len(), b.fds.mine()), (0, 0));
    // Past the validity the sweep closes the first site's; the second's is kept now.
    let t1 = t0 + Duration::from_secs(1);
    a.expire(t1);
    assert_eq!(FDS.get(), base);
    assert!(info(b.lookup(&root, "b1", t1)).file.is_some());
    assert_eq!((b.len(), b.fds.mine()), (1, 1));
    drop(b);
    assert_eq!(FDS.get(), base);
    std::fs::remove_dir_all(&d).unwrap();
}
