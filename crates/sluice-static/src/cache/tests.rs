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
    assert_eq!((c.len(), c.fds), (3, 1));
    c.expire(t0 + Duration::from_millis(50));
    assert_eq!(c.len(), 3, "still valid");
    c.expire(t0 + Duration::from_millis(150));
    // The descriptor is closed and the miss dropped; the small file's bytes stay,
    // to be revalidated by its next request.
    assert_eq!((c.len(), c.fds, c.bytes), (1, 0, 1));
    // Unused for longer than that, it goes too.
    c.expire(t0 + Duration::from_millis(100) + KEEP_UNUSED + Duration::from_secs(1));
    assert_eq!((c.len(), c.fds, c.bytes), (0, 0, 0));
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
/// not wait makes the lookup itself while such lookups are fast, and answers
/// `Cold` for the next ones once one waited longer than `lookup_max` (it slept,
/// for the disk: a lookup here stands in for one with `made_lookup`); with
/// `lookup_max` zero, always `Cold`. Cold answers are never kept.
#[test]
fn a_slow_lookup_sends_the_next_ones_to_the_disk_threads() {
    let d = tempfile::tempdir().unwrap();
    let root = Root::new(d.path(), SymlinkPolicy::InsideRoot).unwrap();
    let now = Instant::now();
    let absent = |i: u32| format!("never-asked-{}-{i}", std::process::id());
    let cold = |e: &Entry| matches!(e, Entry::Cold);
    let mut c = FileCache::new(Duration::from_secs(1), 100, 1024);
    c.set_may_wait(false);
    c.set_lookup_max(Duration::from_millis(1));
    // Fast: made here, answered, kept.
    assert!(matches!(c.lookup(&root, &absent(1), now), Entry::NotFound));
    assert!(matches!(c.lookup(&root, &absent(2), now), Entry::NotFound));
    assert_eq!(c.len(), 2);
    // Long but awake (preempted): still made here.
    c.made_lookup(now, Duration::from_millis(5), false);
    assert!(matches!(c.lookup(&root, &absent(3), now), Entry::NotFound));
    // Asleep but quick (a fast disk): still made here.
    c.made_lookup(now, Duration::from_micros(200), true);
    assert!(matches!(c.lookup(&root, &absent(4), now), Entry::NotFound));
    // Asleep and long: the next ones are Cold until SLOW_LOOKUPS_FOR has passed.
    c.made_lookup(now, Duration::from_millis(5), true);
    assert!(cold(&c.lookup(&root, &absent(5), now)));
    assert!(cold(&c.lookup(
        &root,
        &absent(6),
        now + Duration::from_secs(9)
    )));
    let later = now + SLOW_LOOKUPS_FOR + Duration::from_secs(1);
    assert!(matches!(
        c.lookup(&root, &absent(7), later),
        Entry::NotFound
    ));
    assert_eq!(c.len(), 5, "a Cold answer was kept");
    // Zero: none made here. A name the kernel has an entry for is still answered.
    c.set_lookup_max(Duration::ZERO);
    assert!(cold(&c.lookup(&root, &absent(8), later)));
    assert!(matches!(c.lookup(&root, &absent(9), later), Entry::Cold));
    let known = absent(1);
    c.expire(later + Duration::from_secs(60));
    assert!(matches!(c.lookup(&root, &known, later), Entry::NotFound));
}

/// What tells a lookup that waited for the disk from one preempted on a busy
/// machine: the thread's sleeps change across a sleep, not across work.
#[test]
fn a_sleep_is_seen_and_work_is_not() {
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
