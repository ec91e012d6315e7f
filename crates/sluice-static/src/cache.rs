//! The per-worker open-file and metadata cache.
//!
//! A hot small file should cost no `open`/`fstat`/`read`/`close` per request (seed 001
//! counted those syscalls as most of a static request's cost). Entries are trusted
//! for `cache_validity` (default 1 s), then looked up again: a file replaced on disk
//! is seen within that time. Small files (≤ `small_file_max`) are kept as bytes and
//! their fd closed; larger ones keep their fd open for `sendfile`, bounded by
//! `MAX_CACHED_FDS` so the cache cannot eat the process's descriptor limit.
//! Misses (404) are cached too, so a scan for absent files costs one hash lookup.
//!
//! The cache is per worker (no locks); its cost per hit is one hash of the path.

use crate::mime;
use crate::open::Root;
use sluice_http::date;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::rc::Rc;
use std::time::{Duration, Instant};

const MAX_CACHED_FDS: usize = 1024;
/// Bytes of small-file content one worker may keep.
const MAX_CACHED_BYTES: usize = 64 << 20;

/// What the handler needs to answer for a regular file.
#[derive(Debug)]
pub struct FileInfo {
    pub len: u64,
    pub mtime: u64,
    pub etag: String,
    pub last_modified: String,
    pub mime: &'static str,
    /// The whole content, for small files.
    pub data: Option<Rc<[u8]>>,
    /// An open descriptor, for files sent from disk.
    pub file: Option<Rc<File>>,
}

#[derive(Debug, Clone)]
pub enum Entry {
    File(Rc<FileInfo>),
    Dir,
    NotFound,
    /// Exists but may not be served (permissions, symlink escape, not a regular file).
    Forbidden,
}

struct Slot {
    entry: Entry,
    until: Instant,
}

pub struct FileCache {
    map: HashMap<Box<str>, Slot>,
    validity: Duration,
    max_entries: usize,
    small_file_max: usize,
    fds: usize,
    bytes: usize,
}

impl FileCache {
    pub fn new(validity: Duration, max_entries: usize, small_file_max: usize) -> Self {
        FileCache {
            map: HashMap::new(),
            validity,
            max_entries,
            small_file_max,
            fds: 0,
            bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Look `rel` up, from the cache when fresh, else from disk.
    pub fn lookup(&mut self, root: &Root, rel: &str, now: Instant) -> Entry {
        if let Some(s) = self.map.get(rel) {
            if s.until > now {
                return s.entry.clone();
            }
        }
        let entry = self.load(root, rel);
        if self.max_entries > 0 {
            self.insert(rel, entry.clone(), now);
        }
        entry
    }

    /// Drop entries past their validity, closing the descriptors they hold. Called
    /// about once a second: without it, a large file deleted from the tree (an old
    /// ISO on a mirror) would stay open, its disk space unreclaimed, until the same
    /// path was requested again. O(entries); a few microseconds per thousand.
    pub fn expire(&mut self, now: Instant) {
        let before = self.map.len();
        self.map.retain(|_, s| s.until > now);
        if self.map.len() != before {
            self.recount();
        }
    }

    fn load(&mut self, root: &Root, rel: &str) -> Entry {
        let file = match root.open(rel) {
            Ok(f) => f,
            Err(e) => return classify(&e),
        };
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(e) => return classify(&e),
        };
        if meta.is_dir() {
            return Entry::Dir;
        }
        if !meta.is_file() {
            return Entry::Forbidden;
        }
        let len = meta.len();
        let mtime = meta.mtime().max(0) as u64;
        // mtime (with nanoseconds) and size, like nginx: no inode numbers leak, and
        // mirrors holding the same file at the same time give the same tag.
        let etag = format!("\"{:x}.{:x}-{:x}\"", mtime, meta.mtime_nsec().max(0), len);
        let mut info = FileInfo {
            len,
            mtime,
            etag,
            last_modified: date::format(mtime),
            mime: mime::for_path(rel),
            data: None,
            file: None,
        };
        if (len as usize) <= self.small_file_max && self.bytes + len as usize <= MAX_CACHED_BYTES {
            let mut buf = vec![0u8; len as usize];
            if file.read_exact_at(&mut buf, 0).is_ok() {
                info.data = Some(buf.into());
                return Entry::File(Rc::new(info));
            }
        }
        info.file = Some(Rc::new(file));
        Entry::File(Rc::new(info))
    }

    fn insert(&mut self, rel: &str, entry: Entry, now: Instant) {
        if self.map.len() >= self.max_entries {
            self.map.retain(|_, s| s.until > now);
            if self.map.len() >= self.max_entries {
                self.map.clear();
            }
            self.recount();
        }
        if let Entry::File(f) = &entry {
            if f.file.is_some() && self.fds >= MAX_CACHED_FDS {
                return; // served, just not kept: the descriptor closes after the response
            }
        }
        let added = cost(&entry);
        let old = self.map.insert(
            rel.into(),
            Slot {
                entry,
                until: now + self.validity,
            },
        );
        if let Some(old) = old {
            let (f, b) = cost(&old.entry);
            self.fds -= f;
            self.bytes -= b;
        }
        self.fds += added.0;
        self.bytes += added.1;
    }

    fn recount(&mut self) {
        self.fds = 0;
        self.bytes = 0;
        for s in self.map.values() {
            let (f, b) = cost(&s.entry);
            self.fds += f;
            self.bytes += b;
        }
    }
}

fn cost(e: &Entry) -> (usize, usize) {
    match e {
        Entry::File(f) => (
            f.file.is_some() as usize,
            f.data.as_ref().map_or(0, |d| d.len()),
        ),
        _ => (0, 0),
    }
}

fn classify(e: &io::Error) -> Entry {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ENAMETOOLONG) => Entry::NotFound,
        _ => Entry::Forbidden,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_config::SymlinkPolicy;

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
        assert_eq!((c.len(), c.fds, c.bytes), (0, 0, 0));
        let _ = std::fs::remove_dir_all(d);
    }
}
