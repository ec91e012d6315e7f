//! The per-worker open-file and metadata cache.
//!
//! A hot small file should cost no `open`/`fstat`/`read`/`close` per request (seed 001
//! counted those syscalls as most of a static request's cost). Entries are trusted
//! for `cache_validity` (default 1 s), then looked up again: a file replaced on disk
//! is seen within that time. Small files (≤ `small_file_max`) are kept as bytes and
//! their fd closed, up to 64 MiB over all the caches of a worker (one per site:
//! `crate::budget`; past it a small file is kept open like a large one); larger ones keep
//! their fd open for `sendfile`, at most `MAX_CACHED_FDS` over all the caches of
//! a worker (past it a large file is opened for its response and closed after).
//! That bound is per worker, not the process's: a process out of descriptors
//! (`EMFILE`) has every cache give back
//! the descriptors no response is sending from ([`FileCache::shed_descriptors`],
//! `SHED`), and what still cannot be opened for a reason of the server's is
//! [`Entry::Unavailable`] (a 503, never kept), not a 403.
//! Misses (404) are cached too, so a scan for absent files costs one hash lookup;
//! a full table drops them first (after what expired), so such a scan cannot push
//! out the files asked for (`bench/miss_flood.sh`: 8% less CPU per request).
//!
//! An entry past its validity is not thrown away: its path is `fstatat`ed, and if
//! the same inode is there with the same size and modification and change times
//! ([`Stamp`]), the entry is trusted for another period. That is one system call
//! where a reload costs `openat2`, `fstat`, a read, `close` and the entry's
//! allocations (a tree of 10,000 small files requested at random reloaded every
//! file once a second per worker; docs/BENCHMARKS.md). The once-a-second sweep
//! drops expired entries that hold a descriptor (a deleted file's space must not
//! stay held) and keeps expired in-memory ones for revalidation, within the same
//! entry and byte bounds, until they have gone unused for 30 s. Like nginx's
//! `open_file_cache`, two writes of the same size within one tick of the file
//! system's clock are not told apart.
//!
//! The cache is per worker (no locks); its cost per hit is one hash of the path.

use crate::budget::Share;
use crate::cold;
use crate::mime;
use crate::open::{Root, Stamp};
use hashbrown::HashTable;
use sluice_http::date;
use std::cell::Cell;
use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Descriptors one worker's caches keep open, over all its sites ([`crate::budget`]).
const MAX_CACHED_FDS: usize = 1024;

/// Bytes of small-file content one worker may keep, over all its sites' caches
/// ([`crate::budget`]).
const MAX_CACHED_BYTES: usize = 64 << 20;

thread_local! {
    /// The small-file bytes every file cache on this thread keeps.
    static KEPT: Cell<usize> = const { Cell::new(0) };
    /// The descriptors every file cache on this thread keeps open.
    static FDS: Cell<usize> = const { Cell::new(0) };
}

/// What the handler needs to answer for a regular file.
///
/// Laid out for a cache hit (`repr(C)`, hot fields first): the fields a response
/// reads, its validators and its path (compared by the lookup) sit in one
/// allocation, in consecutive cache lines, so a hit touches no other memory than
/// its table slot, this record and the file's bytes. (With the path and the two
/// validators in allocations of their own, and a slot of 112 bytes, a random pick
/// among 10,000 small files missed the CPU's caches about three more times per
/// request: docs/BENCHMARKS.md.)
#[derive(Debug)]
#[repr(C)]
pub struct FileInfo {
    pub len: u64,
    pub mtime: u64,
    pub mime: &'static str,
    /// The whole content, for small files.
    pub data: Option<Rc<[u8]>>,
    /// An open descriptor, for files sent from disk.
    pub file: Option<Rc<File>>,
    /// The head lines a whole-file 200 sends, written once when the file is
    /// loaded: `Last-Modified`, `ETag` (the validators are read from here too),
    /// then `Accept-Ranges`, `Content-Type` and `Content-Length` up to `full_end`.
    lines: Inline<255>,
    /// Where the `ETag` value ends in `lines` (it starts at [`ETAG_AT`]).
    etag_end: u8,
    /// Where the whole-file lines end; 0 if they did not fit (then the handler
    /// writes them itself).
    full_end: u8,
    /// The path it was looked up by (the cache's key).
    key: Key,
    /// The file's identity and version when loaded (for revalidation).
    stamp: Stamp,
    /// Trusted without a look at the disk until then.
    until: Cell<Instant>,
    /// Its name says it is compressed already (`.gz`, `.xz`, …: `mime::is_compressed`).
    pub compressed: bool,
    /// Which precompressed siblings (`.br`, `.zst`, `.gz`) its path has, as the
    /// static handler last found them, and until when that is trusted (`None`
    /// until first asked).
    pub siblings: Cell<Option<Siblings>>,
}

/// A set of content codings whose sibling files exist ([`Coding::bit`]), and until
/// when that is known (`cache_validity` after it was looked at).
///
/// [`Coding::bit`]: sluice_http::encoding::Coding::bit
#[derive(Clone, Copy, Debug)]
pub struct Siblings {
    pub present: u8,
    pub until: Instant,
}

impl FileInfo {
    /// `"<mtime>.<nanoseconds>-<size>"` in hex, quoted.
    pub fn etag(&self) -> &str {
        &self.lines.as_str()[ETAG_AT..self.etag_end as usize]
    }
    /// The modification time as an HTTP date.
    pub fn last_modified(&self) -> &str {
        &self.lines.as_str()[LM_AT..LM_AT + 29]
    }
    /// Until when this entry is trusted without a look at the disk (an answer
    /// built from it may be reused until then: `Response::reuse_until`).
    pub fn trusted_until(&self) -> Instant {
        self.until.get()
    }
    /// The header lines of a 200 for the whole file, without a content coding
    /// (`Last-Modified`, `ETag`, `Accept-Ranges`, `Content-Type`,
    /// `Content-Length`), or `None` when the handler must write them.
    pub fn whole_file_lines(&self) -> Option<&[u8]> {
        let end = self.full_end as usize;
        (end > 0).then(|| &self.lines.as_str().as_bytes()[..end])
    }
}

#[derive(Debug, Clone)]
pub enum Entry {
    File(Rc<FileInfo>),
    Dir,
    NotFound,
    /// Exists but may not be served (permissions, symlink escape, not a regular file).
    Forbidden,
    /// Not known yet: looking it up, or reading its bytes, would wait for the disk,
    /// and the cache was told not to wait ([`FileCache::set_disk`]; see
    /// [`crate::cold`]). Never kept.
    Cold,
    /// Could not be looked up for a reason of the server's, not the file's: the
    /// process is out of descriptors or the kernel out of memory, or the disk
    /// failed ([`unavailable`]). Answered 503, never kept: a moment later the
    /// same path may open.
    Unavailable,
}

/// One table slot, 16 bytes, so the table of a worker caching 10,000 files fits in
/// the CPU's second-level cache: a file's expiry and key are in its [`FileInfo`],
/// which a hit reads anyway.
enum Slot {
    File(Rc<FileInfo>),
    /// A directory, a miss or a forbidden path.
    Other(Box<Other>),
}

struct Other {
    key: Key,
    entry: Entry,
    until: Instant,
}

impl Slot {
    fn key(&self) -> &str {
        match self {
            Slot::File(f) => {
                // The hit reads all of it (count, key, fields, validators): start
                // every line loading at once rather than one miss after another.
                prefetch(Rc::as_ptr(f).cast::<u8>().wrapping_sub(16), 5);
                f.key.as_str()
            }
            Slot::Other(o) => o.key.as_str(),
        }
    }

    fn until(&self) -> Instant {
        match self {
            Slot::File(f) => f.until.get(),
            Slot::Other(o) => o.until,
        }
    }

    /// A remembered 404: cheap to forget, and what a scan for absent names fills
    /// the table with.
    fn is_miss(&self) -> bool {
        matches!(self, Slot::Other(o) if matches!(o.entry, Entry::NotFound))
    }

    /// What it holds: (descriptors, bytes of content).
    fn cost(&self) -> (usize, usize) {
        match self {
            Slot::File(f) => file_cost(f),
            Slot::Other(_) => (0, 0),
        }
    }

    fn entry(&self) -> Entry {
        match self {
            Slot::File(f) => Entry::File(f.clone()),
            Slot::Other(o) => o.entry.clone(),
        }
    }
}

/// Ask the CPU to start loading `lines` cache lines from `p` (a hint: it never
/// faults, whatever the address; a no-op off x86-64).
#[inline(always)]
fn prefetch(p: *const u8, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    for i in 0..lines {
        // SAFETY: PREFETCHT0 is a hint that cannot fault.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                p.wrapping_add(i * 64).cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, lines);
}

/// The per-worker cache: a hash table of slots (16 bytes each) keyed by path, hashed with the
/// standard library's keyed SipHash (the keys are request paths, and misses are
/// cached too, so a client chooses them: an unkeyed hash would let it pile them
/// into one chain). `hashbrown::HashTable` rather than `HashMap<Box<str>, _>`:
/// the key of a file entry lives in its [`FileInfo`], which a hit reads anyway.
pub struct FileCache {
    table: HashTable<Slot>,
    hasher: RandomState,
    validity: Duration,
    max_entries: usize,
    small_file_max: usize,
    /// Its open descriptors, counted in the worker's total (`FDS`).
    fds: Share,
    /// The most descriptors the worker's caches keep ([`MAX_CACHED_FDS`]).
    max_fds: usize,
    /// Its small files' bytes, counted in the worker's total (`KEPT`).
    bytes: Share,
    /// The last [`SHED`] this cache has answered.
    shed_seen: u32,
    /// Whether a load may wait for the disk, and how it looks up without
    /// waiting when not ([`cold::Gate`]).
    gate: cold::Gate,
    /// Content types: the built-in table and the operator's (`[files] types`).
    types: mime::Types,
}

impl FileCache {
    pub fn new(validity: Duration, max_entries: usize, small_file_max: usize) -> Self {
        FileCache {
            table: HashTable::new(),
            hasher: RandomState::new(),
            validity,
            max_entries,
            small_file_max,
            fds: Share::new(&FDS),
            max_fds: MAX_CACHED_FDS,
            bytes: Share::new(&KEPT),
            shed_seen: SHED.load(Ordering::Relaxed),
            gate: cold::Gate::new(Duration::from_millis(1)),
            types: mime::Types::default(),
        }
    }

    /// The content types files get when they enter the cache.
    pub fn set_types(&mut self, types: mime::Types) {
        self.types = types;
    }

    /// The longest a lookup outside the kernel's caches made on the worker may
    /// wait for the disk (`files.disk_lookup_max`; zero: none is made there). Set
    /// when the cache is made: it starts the gate afresh (it may wait, until
    /// [`FileCache::set_disk`] says otherwise).
    pub fn set_lookup_max(&mut self, max: Duration) {
        self.gate = cold::Gate::new(max);
    }

    /// What lookups outside the kernel's caches cost lately, for the disk
    /// threads' [`cold::ColdLookup`]s to report theirs.
    pub fn lookup_costs(&self) -> &Arc<cold::LookupCosts> {
        self.gate.costs()
    }

    /// Whether the lookups that follow may wait for the disk (the default), or
    /// answer [`Entry::Cold`] where they would ([`crate::cold`]).
    pub fn set_disk(&mut self, disk: cold::DiskWait) {
        self.gate.set(disk);
    }

    /// How this cache looks things up (for a listing's directory read: whether it
    /// may wait).
    pub(crate) fn gate(&self) -> &cold::Gate {
        &self.gate
    }

    /// The identity and version of `rel` as it is now, for a revalidation or a
    /// sibling's presence, without waiting for the disk where the cache may not
    /// ([`cold::Gate::stamp`]).
    pub fn stamp(&mut self, root: &Root, rel: &str) -> io::Result<Stamp> {
        self.gate.stamp(root, rel)
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Look `rel` up, from the cache when fresh, else from disk.
    pub fn lookup(&mut self, root: &Root, rel: &str, now: Instant) -> Entry {
        self.lookup_until(root, rel, now).0
    }

    /// [`lookup`](Self::lookup), and until when the entry is trusted (`now` when
    /// it is not kept).
    pub fn lookup_until(&mut self, root: &Root, rel: &str, now: Instant) -> (Entry, Instant) {
        let hash = self.hasher.hash_one(rel);
        if let Some(s) = self.table.find(hash, |s| s.key() == rel) {
            let until = s.until();
            if until > now {
                if let Slot::File(f) = s {
                    // Its bytes (and their count, which the response's clone
                    // bumps) while the handler builds the head.
                    if let Some(d) = &f.data {
                        prefetch(d.as_ptr().wrapping_sub(16), 4);
                    }
                }
                return (s.entry(), until);
            }
            // Expired: still the same file, unchanged? Then trust it again.
            if let Slot::File(f) = s {
                let f = Rc::clone(f);
                if self.stamp(root, rel).ok().as_ref() == Some(&f.stamp) {
                    f.until.set(now + self.validity);
                    return (Entry::File(f), now + self.validity);
                }
            }
        }
        let entry = self.load(root, rel);
        if matches!(entry, Entry::Cold | Entry::Unavailable) {
            return (entry, now);
        }
        if self.max_entries > 0 && self.insert(hash, rel, entry.clone(), now) {
            return (entry, now + self.validity);
        }
        (entry, now)
    }

    /// Drop entries past their validity that hold a descriptor, closing it, and
    /// those with nothing to revalidate (misses, directories). Called
    /// about once a second: without it, a large file deleted from the tree (an old
    /// ISO on a mirror) would stay open, its disk space unreclaimed, until the same
    /// path was requested again. O(entries); a few microseconds per thousand.
    pub fn expire(&mut self, now: Instant) {
        if SHED.load(Ordering::Relaxed) != self.shed_seen {
            self.shed_descriptors();
        }
        let before = self.table.len();
        self.table
            .retain(|s| s.until() > now || kept_for_revalidation(s, now));
        if self.table.len() != before {
            self.recount();
        }
    }

    /// Open and read `rel`; unless the cache may wait, only as far as the kernel
    /// can without the disk ([`crate::cold`]), else [`Entry::Cold`].
    fn load(&mut self, root: &Root, rel: &str) -> Entry {
        let mut opened = self.gate.open(root, rel);
        if opened.as_ref().is_err_and(out_of_descriptors) {
            // The process's descriptors are all in use: give back the idle
            // ones, and try once more.
            if self.shed_for_the_process() > 0 {
                opened = self.gate.open(root, rel);
            }
        }
        let file = match opened {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Entry::Cold,
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
        // A future mtime (an upstream's clock) is sent, and compared, as now (RFC
        // 9110 §8.8.2.1, as Apache): a client keeping the future date would be
        // told 304 about every real change until then (`serve.rs` test).
        let stored = meta.mtime().max(0) as u64;
        let mtime = stored.min(date::unix_now());
        // The stored mtime (with nanoseconds) and size, like nginx: no inode numbers
        // leak, and mirrors holding the same file at the same time give the same tag.
        let etag = format!("\"{:x}.{:x}-{:x}\"", stored, meta.mtime_nsec().max(0), len);
        let mime = self.types.for_path(rel);
        // The ETag is at most 2 + 16 + 1 + 8 + 1 + 16 bytes, an HTTP date 29.
        let (lines, etag_end, full_end) = head_lines(&date::format(mtime), &etag, mime, len);
        let mut info = FileInfo {
            len,
            mtime,
            mime,
            data: None,
            file: None,
            lines,
            etag_end,
            full_end,
            key: Key::new(rel),
            stamp: Stamp::of(&meta),
            until: Cell::new(Instant::now()),
            compressed: mime::is_compressed(rel),
            siblings: Cell::new(None),
        };
        if (len as usize) <= self.small_file_max
            && self.bytes.all() + len as usize <= MAX_CACHED_BYTES
        {
            let mut buf = vec![0u8; len as usize];
            // Not waiting: asked first (`cachestat` starts no read), then read
            // without waiting (the pages may go in between). A read with
            // `RWF_NOWAIT` alone starts the kernel's readahead, which on a fast
            // disk under load sometimes completes within the call and returns the
            // bytes (17 of 8,000 evicted files, four processes at once): the disk
            // was read on the worker after all.
            let read = match self.gate.may_wait() {
                true => file.read_exact_at(&mut buf, 0).map(|()| true),
                false if !cold::cached(file.as_raw_fd(), len) => Ok(false),
                false => cold::read_nowait(&file, &mut buf),
            };
            match read {
                Ok(true) => {
                    info.data = Some(buf.into());
                    return Entry::File(Rc::new(info));
                }
                Ok(false) => return Entry::Cold,
                Err(_) => {}
            }
        } else if !self.gate.may_wait()
            && len < cold::COLD_CHECK_MIN
            && !cold::cached(file.as_raw_fd(), len)
        {
            // Sent in one turn, unchecked by the send path: checked here.
            return Entry::Cold;
        }
        info.file = Some(Rc::new(file));
        Entry::File(Rc::new(info))
    }

    /// Keep `entry` for `validity`; false when it is not kept (a descriptor over
    /// [`MAX_CACHED_FDS`]).
    fn insert(&mut self, hash: u64, rel: &str, entry: Entry, now: Instant) -> bool {
        if self.table.len() >= self.max_entries {
            // Full: drop what has expired; if that frees less than an eighth of
            // the table, the misses too (a scan for absent names, a flood of
            // random paths, must not push out the files that are asked for); if
            // even that frees too little, everything. Each pass frees an eighth or
            // empties the table, so its O(n) scan is paid once per n/8 inserts.
            let room = (self.max_entries / 8).max(1);
            self.table.retain(|s| s.until() > now);
            if self.table.len() + room > self.max_entries {
                self.table.retain(|s| !s.is_miss());
                if self.table.len() + room > self.max_entries {
                    self.table.clear();
                }
            }
            self.recount();
        }
        if let Entry::File(f) = &entry {
            if f.file.is_some() && self.fds.all() >= self.max_fds {
                return false; // served, just not kept: the descriptor closes after the response
            }
        }
        let added = cost(&entry);
        let until = now + self.validity;
        let slot = match entry {
            Entry::File(f) => {
                f.until.set(until);
                Slot::File(f)
            }
            entry => Slot::Other(Box::new(Other {
                key: Key::new(rel),
                entry,
                until,
            })),
        };
        let hasher = &self.hasher;
        let mut freed = (0, 0);
        match self.table.find_mut(hash, |s| s.key() == rel) {
            Some(old) => {
                freed = old.cost();
                *old = slot;
            }
            None => {
                self.table
                    .insert_unique(hash, slot, |s| hasher.hash_one(s.key()));
            }
        }
        self.fds.set(self.fds.mine() - freed.0 + added.0);
        self.bytes.set(self.bytes.mine() - freed.1 + added.1);
        true
    }

    /// The process is out of descriptors: this cache gives back the ones no
    /// response is sending from now ([`FileCache::shed_descriptors`]), and every
    /// other cache of the process at its next [`FileCache::expire`] (`SHED`).
    /// Returns how many of this cache's entries held one.
    pub fn shed_for_the_process(&mut self) -> usize {
        shed_everywhere();
        self.shed_descriptors()
    }

    /// Drop every entry that holds a descriptor: each closes now, unless a
    /// response is sending from it (that one closes when the response ends). The
    /// files are opened again when next asked for. Returns how many entries held
    /// one.
    pub fn shed_descriptors(&mut self) -> usize {
        self.shed_seen = SHED.load(Ordering::Relaxed);
        let held = self.fds.mine();
        if held > 0 {
            self.table
                .retain(|s| !matches!(s, Slot::File(f) if f.file.is_some()));
            self.recount();
        }
        held
    }

    fn recount(&mut self) {
        let (mut fds, mut bytes) = (0, 0);
        for s in self.table.iter() {
            let (f, b) = s.cost();
            fds += f;
            bytes += b;
        }
        self.fds.set(fds);
        self.bytes.set(bytes);
    }
}

/// How long past its validity an unused in-memory entry is kept for its next
/// request to check: a file nobody asked for in that time gives its bytes back.
const KEEP_UNUSED: Duration = Duration::from_secs(30);

/// An expired entry the sweep keeps: file bytes in memory, no descriptor, a stamp
/// to check them against on their next request, and expired less than
/// [`KEEP_UNUSED`] ago.
fn kept_for_revalidation(s: &Slot, now: Instant) -> bool {
    matches!(s, Slot::File(f) if f.file.is_none())
        && now.saturating_duration_since(s.until()) < KEEP_UNUSED
}

fn cost(e: &Entry) -> (usize, usize) {
    match e {
        Entry::File(f) => file_cost(f),
        _ => (0, 0),
    }
}

fn file_cost(f: &FileInfo) -> (usize, usize) {
    (
        f.file.is_some() as usize,
        f.data.as_ref().map_or(0, |d| d.len()),
    )
}

fn classify(e: &io::Error) -> Entry {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ENAMETOOLONG) => Entry::NotFound,
        _ if unavailable(e) => Entry::Unavailable,
        _ => Entry::Forbidden,
    }
}

mod failed;
mod inline;
pub use failed::unavailable;
use failed::{out_of_descriptors, shed_everywhere, SHED};
use inline::{head_lines, Inline, Key, ETAG_AT, LM_AT};

#[cfg(test)]
mod tests;
