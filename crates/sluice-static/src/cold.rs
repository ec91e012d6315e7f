//! Knowing, without waiting, whether an answer needs the disk; and the waiting done
//! for it on a thread that may wait.
//!
//! A worker serves thousands of connections from one thread: one system call that
//! waits for the disk (a seek on a mirror's disks, ~10 ms) makes every one of them
//! wait. Three things a file answer does can wait:
//!
//! - **the lookup** of its path, when a directory's entries are not in the kernel's
//!   caches (a file nobody asked for in a while, a name never asked for). Asked with
//!   `openat2(RESOLVE_CACHED)` ([`crate::open::Root::open_cached`]), which fails
//!   with `EAGAIN` instead of reading. That is pessimistic: a name never looked up
//!   fails even when its directory's blocks are in the page cache and nothing need
//!   be read (a 404 scan of new names). So the cache makes such lookups on the
//!   worker, timed ([`LookupCosts`]), while the disk threads have nothing in hand
//!   ([`DiskWait`]: a busy disk would make a lookup wait behind its work), and
//!   sends them to the disk threads from the first one that waited longer than
//!   `files.disk_lookup_max` until the threads' own have been fast a while. So the
//!   worker waits for at most one lookup each time the disk turns slow, and only
//!   while the server is not reading it.
//! - **a small file's bytes**, read into memory when the file's cache entry is
//!   made: asked with [`cached`] (`cachestat`, which starts no read), then read
//!   with `RWF_NOWAIT` ([`read_nowait`]), which fails with `EAGAIN` instead of
//!   waiting if the pages went in between.
//! - **a medium file's bytes** (above `small_file_max`, below [`COLD_CHECK_MIN`]),
//!   sent in one turn: checked at the entry's load with [`cached`]. Larger bodies
//!   are probed by the send path before every `PREFETCH` it sends (the server's
//!   `disk.rs`).
//!
//! The cache ([`crate::cache::FileCache`]) answers such a lookup
//! [`crate::cache::Entry::Cold`], and the handler hands the worker a [`ColdLookup`]:
//! the server's disk threads run [`ColdLookup::warm`], which does the same lookup
//! and read waiting for them, and the worker asks again once it is done.
//!
//! Owns: the residency checks and the warming work. Must not: decide what to do
//! with a cold answer (the worker does), or send anything.
//! Costs: only when an entry is loaded (a miss, or a descriptor's entry after its
//! `cache_validity`), never on a cache hit: a lookup on the worker one `getrusage`
//! (two if it took longer than `disk_lookup_max`), `RESOLVE_CACHED` a flag on the
//! `openat2` the load makes anyway, a small or medium file's check one `cachestat`
//! (Linux 6.5; else one-byte `preadv2` probes) and `RWF_NOWAIT` a flag on a small
//! file's read. A
//! revalidation's `fstatat` and a sibling's (`Accept-Encoding`) are made from the
//! kernel's caches only while lookups go to the disk threads
//! (`FileCache::stamp`: three system calls instead of one). The rules' `-f`/`-d`
//! conditions are lookups in the same cache. A listing's directory read is made
//! off the worker whenever there are disk threads ([`Gate::list`]), by one of the
//! server's listing threads, which also sorts and renders the page (and gzips
//! it, if the request asked) and leaves it for the worker ([`ReadListings`]): a
//! directory of 100,000 entries is ~80 ms of rendering that no longer holds up
//! the worker's other connections. Those threads run at a lower priority (nice
//! +10, [`lower_this_thread`]), so that clients asking for big listings again and
//! again cannot take the CPU from the workers, and they are not the disk threads,
//! so such clients cannot make cold files wait either. A listing is built at
//! most once per `cache_validity` per URL and form, so the hand-off costs
//! nothing on the common path; requests of one worker for a page being built
//! wait for that build ([`ListingKey`]).

use crate::listing;
use crate::open::{sibling_name, Root, Stamp};
use sluice_http::encoding::Coding;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bodies smaller than this are sent without the send path checking their pages
/// (one turn); their residency is checked when their cache entry is made.
pub const COLD_CHECK_MIN: u64 = 128 * 1024;

/// Distance between two residency probes when every part of a range is checked.
pub const PROBE_STEP: u64 = 256 * 1024;

/// Are the pages of `fd`'s `[off, off + len)` in the page cache and read? Asked
/// with one-byte reads that must not wait (`RWF_NOWAIT`: `EAGAIN` instead of a
/// disk read). Present is not enough: the kernel's readahead puts pages in the
/// cache before their I/O completes, and a send would wait for those.
///
/// `dense = false` reads only the range's last byte (one system call per MiB of a
/// hot download); `dense = true` reads one byte every [`PROBE_STEP`] and the last,
/// for a response that has already found its file cold, where readahead is likely
/// to be still in flight in the middle of the range. `true` when the kernel cannot
/// tell (an error other than `EAGAIN`), so the caller carries on as it would have.
pub fn resident(fd: i32, off: u64, len: u64, dense: bool) -> bool {
    if len == 0 {
        return true;
    }
    let mut b = 0u8;
    let iov = libc::iovec {
        iov_base: (&mut b as *mut u8).cast(),
        iov_len: 1,
    };
    let last = off + len - 1;
    let mut at = if dense { off } else { last };
    loop {
        // SAFETY: one valid iovec of one byte.
        let n = unsafe { libc::preadv2(fd, &iov, 1, at as libc::off_t, libc::RWF_NOWAIT) };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN) {
            return false;
        }
        if at == last {
            return true;
        }
        at = (at + PROBE_STEP).min(last);
    }
}

/// Are all pages of `fd`'s first `len` bytes in the page cache? Asked with
/// `cachestat(2)` (Linux 6.5), which, unlike a missed [`resident`] probe, starts no
/// read: the disk thread then reads the whole range with one request, where a
/// probe's readahead (16 KiB from the probed page) and the thread's read of the
/// rest took two. It counts every page of the range, so it is kept for ranges
/// below [`COLD_CHECK_MIN`] (32 pages at most). Where the kernel has no
/// `cachestat`, [`resident`] answers.
pub fn cached(fd: i32, len: u64) -> bool {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        cache: u64,
        dirty: u64,
        writeback: u64,
        evicted: u64,
        recently_evicted: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451; // the same number on every architecture
    static NO_CACHESTAT: AtomicBool = AtomicBool::new(false);
    if len == 0 {
        return true;
    }
    if !NO_CACHESTAT.load(Ordering::Relaxed) {
        let range = Range { off: 0, len };
        let mut st = Stat::default();
        // SAFETY: the arguments cachestat(2) takes: a descriptor, a range to read
        // and a struct to fill, flags 0.
        let r = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                fd,
                &range as *const Range,
                &mut st as *mut Stat,
                0,
            )
        };
        if r == 0 {
            // SAFETY: sysconf has no preconditions.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(512) as u64;
            return st.cache >= len.div_ceil(page);
        }
        NO_CACHESTAT.store(true, Ordering::Relaxed);
    }
    resident(fd, 0, len, true)
}

/// Fill `buf` from the start of `file` only from the page cache: `Ok(true)` when
/// all of it was there, `Ok(false)` when some of it needs the disk (the kernel has
/// then started reading it). Kernels that cannot say (before 4.14) read as usual.
pub fn read_nowait(file: &File, buf: &mut [u8]) -> io::Result<bool> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        let iov = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        // SAFETY: one iovec over the unfilled part of `buf`.
        let n = unsafe {
            libc::preadv2(
                file.as_raw_fd(),
                &iov,
                1,
                done as libc::off_t,
                libc::RWF_NOWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => return Ok(false),
                Some(libc::EINTR) => continue,
                Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => {
                    std::os::unix::fs::FileExt::read_exact_at(file, rest, done as u64)?;
                    return Ok(true);
                }
                _ => return Err(e),
            }
        }
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        done += n as usize;
    }
    Ok(true)
}

/// Whether the answers that follow may wait for the disk: set by the worker for
/// each request ([`crate::StaticHandler::set_disk`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskWait {
    /// They may (no disk threads, or this request has waited for them enough):
    /// a lookup reads what it must.
    May,
    /// The disk threads wait instead: where an answer would wait it stops short
    /// ([`crate::cache::Entry::Cold`]). `busy`: they have work in hand, so the
    /// disk is in use and a lookup that reads it would wait behind that work:
    /// then none is tried on the worker, however fast lookups have been.
    Threads { busy: bool },
}

/// How one file cache looks paths up: waiting for the disk where it may
/// ([`DiskWait`]), else without, and what its own lookups have shown.
///
/// Whether a lookup will read the disk is not known beforehand: the kernel's
/// caches answer `EAGAIN` (`RESOLVE_CACHED`) also for a name never asked for in a
/// directory whose blocks are cached, which needs no read (a scan for absent
/// files). Sending every such lookup to the disk threads cost that scan 2.5 times
/// the CPU per request, and asking the caches first then opening on the worker
/// 20% (docs/BENCHMARKS.md). So while the disk threads have no work in hand (the
/// disk is not busy with the server's reads) lookups are made on the worker, timed,
/// until one waits longer than `files.disk_lookup_max` ([`LookupCosts::timed`]):
/// then the gate is `slow`, lookups go to the disk threads, and once
/// `trust_after` of theirs in a row did not wait (twice as many each time) they
/// are made on the worker again. A worker thus waits for at most one lookup each
/// time the disk turns slow, and only while the server is not reading it.
#[derive(Debug)]
pub struct Gate {
    may_wait: bool,
    disk_busy: bool,
    /// What lookups outside the kernel's caches cost lately (shared with the
    /// disk threads' [`ColdLookup`]s).
    costs: Arc<LookupCosts>,
    slow: bool,
    /// The disk threads' fast lookups in a row after which lookups are made on the
    /// worker again: doubled each time they are, up to [`TRUST_AFTER_MAX`].
    trust_after: u32,
}

/// Fast lookups by the disk threads in a row after which lookups are made on the
/// worker again, the first time.
pub const TRUST_AFTER: u32 = 16;
/// The most it is doubled to.
pub const TRUST_AFTER_MAX: u32 = 4096;

impl Gate {
    /// A gate that may wait (until told otherwise, [`Gate::set`]); `max`:
    /// `files.disk_lookup_max` (zero: no lookup outside the kernel's caches is
    /// made on the worker).
    pub fn new(max: Duration) -> Gate {
        Gate {
            may_wait: true,
            disk_busy: false,
            costs: LookupCosts::new(max),
            slow: max.is_zero(),
            trust_after: TRUST_AFTER,
        }
    }

    /// What the worker says for the request that follows.
    pub fn set(&mut self, disk: DiskWait) {
        (self.may_wait, self.disk_busy) = match disk {
            DiskWait::May => (true, false),
            DiskWait::Threads { busy } => (false, busy),
        };
    }

    pub fn may_wait(&self) -> bool {
        self.may_wait
    }

    pub fn costs(&self) -> &Arc<LookupCosts> {
        &self.costs
    }

    /// Open `rel`: as [`Root::open`] where the cache may wait; else where lookups
    /// are made on the worker (see the type's doc), timed; else only from the
    /// kernel's caches ([`Root::open_cached`]: `EAGAIN` where they would read).
    pub fn open(&mut self, root: &Root, rel: &str) -> io::Result<File> {
        if self.may_wait {
            return root.open(rel);
        }
        if !self.on_worker() {
            return root.open_cached(rel);
        }
        let (opened, slow) = self.costs.timed(|| root.open(rel));
        if slow {
            self.made_slow_lookup();
        }
        opened
    }

    /// The identity and version of `rel` as it is now ([`Root::stamp`]), for a
    /// revalidation or a sibling's presence: where lookups go to the disk threads
    /// (`slow`, or the disk in use), only from the kernel's caches
    /// ([`Root::stamp_cached`]: `EAGAIN` where they would read; three system calls
    /// instead of one). Entries revalidated were used within the last 30 s, so
    /// their names are rarely out of the caches, but after the caches were emptied
    /// (memory pressure, a tree walk) each of them stalled the worker once.
    pub fn stamp(&mut self, root: &Root, rel: &str) -> io::Result<Stamp> {
        if self.may_wait || self.on_worker() {
            root.stamp(rel)
        } else {
            root.stamp_cached(rel)
        }
    }

    /// The entries of directory `rel` for its listing: read here where the gate
    /// may wait; else those a disk thread has read for it since the request
    /// stopped short (`ready`); else `None`: stop short (`ColdLookup::listing`).
    ///
    /// Unlike a lookup, a listing is never read on the worker while the disk
    /// threads may read it, even while lookups are fast: reading a directory's
    /// entries is one read of the disk for its blocks and one for each inode
    /// block, ~1.2 s for 120 entries on a disk of 400 reads a second with the
    /// caches empty, where a lookup is one read. The hand-off costs two wake-ups,
    /// once per page build (`files.cache_validity` per URL and form).
    ///
    /// The page is built (sorted, rendered, and gzipped if `form` asks) where the
    /// entries are read: by the disk thread, so that a big directory's page (0.4 µs
    /// an entry: 40 ms for 100,000) does not hold up the worker's other
    /// connections; on the worker only when the worker reads the entries itself
    /// (gzipped later, through the page cache's `GzipCache`).
    pub fn list(
        &self,
        root: &Root,
        rel: &str,
        hidden: bool,
        form: &listing::Form,
        ready: &ReadListings,
    ) -> Option<io::Result<listing::Built>> {
        if let Some(read) = ready.take(rel, form) {
            return Some(read);
        }
        self.may_wait
            .then(|| listing::read(root, rel, hidden).map(|items| form.build(items, false)))
    }

    /// Whether a lookup that may read the disk is made on the worker now: lookups
    /// are trusted there and the disk threads have nothing in hand.
    fn on_worker(&mut self) -> bool {
        self.trusted() && !self.disk_busy
    }

    /// Whether lookups are made on the worker (not `slow`, or the disk threads
    /// have since found `trust_after` in a row fast).
    fn trusted(&mut self) -> bool {
        if self.slow && self.costs.may_be_fast() && self.costs.fast_in_a_row() >= self.trust_after {
            self.slow = false;
            // If they turn slow again, twice as many the next time.
            self.trust_after = (self.trust_after * 2).min(TRUST_AFTER_MAX);
        }
        !self.slow
    }

    /// A lookup made on the worker waited for the disk: the next ones go to the
    /// disk threads until `trust_after` of theirs in a row have been fast.
    pub(crate) fn made_slow_lookup(&mut self) {
        self.slow = true;
        self.costs.restart();
    }
}

/// What the lookups the kernel's caches could not make have cost lately: shared
/// by a worker's file cache (which makes them itself while they are fast) and the
/// [`ColdLookup`]s it hands to the disk threads (which report what theirs cost).
/// A lookup is slow when it waited for the disk: it slept ([`sleeps`]; a
/// preemption on a busy machine is not a sleep) and took longer than `max`.
#[derive(Debug)]
pub struct LookupCosts {
    max: Duration,
    /// The disk threads' lookups that were not slow, in a row.
    fast_in_a_row: AtomicU32,
}

impl LookupCosts {
    /// `max`: `files.disk_lookup_max` (zero: every lookup counts as slow).
    pub fn new(max: Duration) -> Arc<LookupCosts> {
        Arc::new(LookupCosts {
            max,
            fast_in_a_row: AtomicU32::new(0),
        })
    }

    /// Run a lookup, timed: its result, and whether it was slow. One
    /// `getrusage` before it, and one after it if it took longer than `max`.
    pub fn timed<T>(&self, lookup: impl FnOnce() -> T) -> (T, bool) {
        let (start, before) = (Instant::now(), sleeps());
        let got = lookup();
        let slow = self.max.is_zero() || (start.elapsed() > self.max && sleeps() != before);
        (got, slow)
    }

    /// The disk threads made a lookup, slow or not.
    pub fn record(&self, slow: bool) {
        if slow {
            self.fast_in_a_row.store(0, Ordering::Relaxed);
        } else {
            self.fast_in_a_row.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many of the disk threads' last lookups in a row were fast.
    pub fn fast_in_a_row(&self) -> u32 {
        self.fast_in_a_row.load(Ordering::Relaxed)
    }

    /// Whether a lookup may ever be made on the worker (`max` above zero).
    pub fn may_be_fast(&self) -> bool {
        !self.max.is_zero()
    }

    /// A lookup made on the worker was slow: the count starts again.
    pub fn restart(&self) {
        self.fast_in_a_row.store(0, Ordering::Relaxed);
    }
}

/// How many times this thread has gone to sleep (voluntary context switches)
/// and blocks it has read from a device: a lookup that changes them waited for
/// the disk (or for a lock: the same wait for the worker's other connections).
/// One `getrusage` system call.
pub fn sleeps() -> (i64, i64) {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: a valid rusage buffer for the calling thread's figures.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, ru.as_mut_ptr()) } != 0 {
        return (0, 0);
    }
    // SAFETY: getrusage succeeded, so the buffer is filled.
    let ru = unsafe { ru.assume_init() };
    (ru.ru_nvcsw, ru.ru_inblock)
}

/// A lookup that found its answer needs the disk: the path (normalized, relative
/// to the root) and the root, so that a disk thread can do the waiting
/// ([`ColdLookup::warm`]).
#[derive(Debug)]
pub struct ColdLookup {
    root: Arc<Root>,
    rel: Box<str>,
    costs: Arc<LookupCosts>,
    /// A directory's listing, not a path: whether hidden names are listed, the
    /// page asked for, and where it goes.
    listing: Option<(bool, Box<listing::Form>, Arc<ReadListings>)>,
}

impl ColdLookup {
    pub(crate) fn new(root: Arc<Root>, rel: &str, costs: Arc<LookupCosts>) -> ColdLookup {
        ColdLookup {
            root,
            rel: rel.into(),
            costs,
            listing: None,
        }
    }

    /// The page of directory `rel` in `form` ([`Gate::list`]), to be built into
    /// `into`.
    pub(crate) fn listing(
        root: Arc<Root>,
        rel: &str,
        costs: Arc<LookupCosts>,
        hidden: bool,
        form: listing::Form,
        into: Arc<ReadListings>,
    ) -> ColdLookup {
        ColdLookup {
            listing: Some((hidden, Box::new(form), into)),
            ..ColdLookup::new(root, rel, costs)
        }
    }

    /// The path it is for.
    pub fn path(&self) -> &str {
        &self.rel
    }

    /// The device its path is under, as far as the server knows without a lookup:
    /// the root's, or its alias's ([`Root::device`]). The disk threads keep each
    /// device's reads from taking every thread (`sluice-server`'s `disk.rs`).
    pub fn device(&self) -> u64 {
        self.root.device(&self.rel)
    }

    /// Whether it reads a directory and builds its listing page (the server has
    /// threads of their own for those).
    pub fn is_listing(&self) -> bool {
        self.listing.is_some()
    }

    /// For a listing: which page it builds, as [`ListingKey`] (requests of one
    /// worker for the same page wait for one build).
    pub fn listing_key(&self) -> Option<ListingKey> {
        let (_, form, _) = self.listing.as_ref()?;
        Some(ListingKey {
            rel: self.rel.clone(),
            form: form.id(),
            gzip: form.gzip,
        })
    }

    /// On a thread that may wait: look the path up (under the root's symlink
    /// policy, as the worker will), read what the worker's next lookup reads
    /// (the bytes of a file below [`COLD_CHECK_MIN`], through `read`, which should
    /// have the kernel read them into the page cache), and stat its precompressed
    /// siblings' names. Errors end it quietly: the worker's next lookup meets them
    /// and answers them, as it would have. What the lookup cost is recorded in the
    /// worker's [`LookupCosts`].
    /// For a listing, it reads the directory's entries as the worker would, and
    /// builds the page asked for and leaves it for the worker.
    pub fn warm(&self, mut read: impl FnMut(&File, u64, u64)) {
        if let Some((hidden, form, into)) = &self.listing {
            // A big directory is CPU work (a stat per entry, then the page): the
            // server's listing threads do it, at a lower priority
            // ([`lower_this_thread`]).
            let (entries, slow) = self
                .costs
                .timed(|| listing::read(&self.root, &self.rel, *hidden));
            self.costs.record(slow);
            // Built here, after the timed read: the rendering is not the disk's.
            into.put(&self.rel, form, entries.map(|e| form.build_off_worker(e)));
            return;
        }
        let (opened, slow) = self.costs.timed(|| self.root.open(&self.rel));
        self.costs.record(slow);
        if let Ok(f) = opened {
            if let Ok(m) = f.metadata() {
                if m.is_file() && m.len() < COLD_CHECK_MIN {
                    read(&f, 0, m.len());
                }
            }
        }
        let mut name = String::with_capacity(self.rel.len() + 5);
        for coding in Coding::ALL {
            sibling_name(&mut name, &self.rel, coding);
            let _ = self.root.stamp(&name);
        }
    }
}

mod listings;
mod priority;
pub use listings::{ListingKey, ReadListings, READ_LISTINGS_MAX, READ_LISTING_TTL};
pub use priority::{lower_this_thread, LISTING_NICE};

#[cfg(test)]
mod tests;
