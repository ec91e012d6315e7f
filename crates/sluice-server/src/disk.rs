//! Reads that may wait on the disk, done off the workers.
//!
//! A mirror serves far more bytes than fit in memory. A `sendfile`, a page fault on
//! an `mmap`, or a `pread` of a block that is not in the page cache stalls the whole
//! worker for a disk read (a seek on rotating disks: ~10 ms), and every connection
//! on it waits. So before each [`PREFETCH`] bytes of a large body the send path
//! asks the kernel, without blocking, whether those pages are cached and read
//! ([`resident`]: one-byte `RWF_NOWAIT` reads). If not, the worker parks the response and
//! hands the range to this pool; a pool thread has the kernel read it into the
//! page cache and waits for it, then puts the
//! connection's key on its worker's completion list and wakes the worker. The turn
//! then runs from the cache.
//!
//! The same pool makes the lookups that would wait (a path not in the kernel's
//! caches, a small file's bytes not in the page cache: `sluice_static::cold`): the
//! request waits, parked with its bytes (`Phase::Disk`), while a pool thread looks
//! the path up and reads the file (`ColdLookup::warm`), and the worker then answers
//! it from the start, from the caches. The same goes for a listing's directory
//! read (the entries are left for the worker to render) and the rules' `-f`/`-d`.
//!
//! Listings have a lane of their own: [`DiskPool`]'s listing threads
//! (`files.listing_threads`, named `sluice-list*`, at nice +10 for their whole
//! life) with their own queue. A 100,000-entry directory's page is ~0.25 s of a
//! thread's CPU, and 40 clients asking for it again and again held all eight
//! disk threads of the old shared queue: a 404 for a fresh name, which waits for
//! a disk thread while they have work in hand, took 1.9 s at the median
//! (docs/BENCHMARKS.md, "A listing herd"). Now cold files and lookups never wait
//! behind a listing, and a listing waits only behind other listings. A full
//! listing queue is answered 503 with `Retry-After` by the worker
//! ([`DiskPool::submit_lookup`] says so), never built on the worker.
//!
//! The pool's queue has a lane per device (`disk/lanes.rs`): once the pool knows a
//! second device, no device's reads may take every thread, so a slow or failing
//! disk delays its own files only.
//!
//! When the queue is full, or a device has its whole share of it waiting (a
//! warning says which disk, once a minute), nothing of that disk's is read on a
//! worker, which would wait on it with every client it has: a lookup is answered
//! 503 "disk busy" with `Retry-After`, and a download's response waits and asks
//! again every [`RETRY_MS`], within its deadlines ([`Refused`]). Earlier
//! versions sent the turn from the worker: on a disk that had stopped answering,
//! that stopped the worker and all its clients for as long as the disk took.
//!
//! Owns: the pool threads and the listing threads, their two bounded job queues,
//! one completion list per worker.
//! Must not: touch connections (it sees keys only) or send anything.
//! Costs: nothing for bodies under [`COLD_CHECK_MIN`] (their pages are checked when
//! their cache entry is made: `sluice_static::cold`); for larger bodies, per [`PREFETCH`] bytes sent,
//! one one-byte `RWF_NOWAIT` read (about 1 µs), five for a response that has met
//! a cold range (earlier versions that asked `cachestat(2)`, which walks every
//! page, or read five probes per MiB of every download cost 5–8% more CPU per
//! 1 MiB response — BENCHMARKS.md "A worker never waits on the disk");
//! for a cold range one `dup` of the file, one queue hand-off, on a pool thread one
//! `sendfile` of the range to `/dev/null` (the kernel's own readahead fills the
//! cache and nothing is copied: about 27 µs of the thread's CPU per MiB here, where
//! `WILLNEED` advice and a one-byte read per 64 KiB, the earlier way, cost 250 µs;
//! `bench/populate_cost.c`),
//! and one wake-up; for a fast reader the thread then reads the next MiB the same
//! way before it takes another job ([`AHEAD`]). The kernel's readahead, not the
//! pool, reads most cold bytes: a probe that misses starts a readahead window on
//! the worker (it does not wait for it: 2.4% of a worker's samples in a cold
//! phase, `perf record -t`), and the pool's reads mark pages further on
//! (docs/BENCHMARKS.md, "The cold phase on a core of the server's own").
//! A lookup costs one queue hand-off and one wake-up. A range refused (above)
//! costs, per ask, its probe, an `fstat` and a look at the queue.
//! Kernels without `RWF_NOWAIT` for buffered reads (before 4.14) report everything
//! resident: the pool then never runs, and turns behave as they did before it.

mod lanes;

use sluice_static::cold::ColdLookup;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

pub use sluice_static::cold::{resident, COLD_CHECK_MIN};
/// How much one job reads ahead of the turn that found the range cold.
pub const PREFETCH: u64 = 1024 * 1024;
/// Cold ranges and lookups that may wait for a pool thread, over all workers.
const QUEUE: usize = 4096;
/// Listings that may wait for a listing thread: at 0.25 s a build for the biggest
/// directories, a request further back would wait longer than clients do.
const LIST_QUEUE: usize = 64;

/// Connections of one worker whose cold range is now cached: `(key, generation)`.
pub struct Completions {
    done: Mutex<Vec<(u32, u32)>>,
    /// The worker's one waker (mio allows one per poll): the supervisor wakes
    /// the worker with it too (`Shared::wake_workers`).
    waker: Arc<mio::Waker>,
}

impl Completions {
    pub fn new(waker: Arc<mio::Waker>) -> Arc<Completions> {
        Arc::new(Completions {
            done: Mutex::new(Vec::new()),
            waker,
        })
    }

    /// Move the finished keys into `into` (the worker, after its waker's event).
    pub fn take(&self, into: &mut Vec<(u32, u32)>) {
        let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
        into.append(&mut d);
    }

    fn finish(&self, who: (u32, u32)) {
        self.done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(who);
        let _ = self.waker.wake();
    }
}

/// What a pool thread does for a connection, then tells its worker (`to`) about.
struct Job {
    what: Work,
    who: (u32, u32),
    to: Arc<Completions>,
}

enum Work {
    /// A response's file range not in the page cache.
    Range {
        file: File,
        off: u64,
        len: u64,
        /// Bytes after `[off, off + len)` to read once `who` is told (see [`AHEAD`]).
        ahead: u64,
    },
    /// A request whose answer's lookup (or small file) needs the disk: its path
    /// looked up and its bytes read (`ColdLookup::warm`), then it is asked again.
    Lookup(ColdLookup),
}

/// The most a job reads past its range, after reporting it, for a fast reader.
///
/// Without it a fast download on a fast disk alternates: the response waits while
/// a pool thread reads its MiB, then the worker sends that MiB while nothing reads
/// the next one for it, and the next probe finds that one cold: a round trip
/// through the pool per MiB, during which the response sends nothing. Reading the
/// next MiB while the worker sends this one overlaps the two, as a worker that
/// reads for itself overlaps them through the kernel's readahead (cold MiB/s +1%
/// to +18% per round against the build without it; a second MiB ahead added
/// nothing: docs/BENCHMARKS.md). Only responses sent at [`AHEAD_MIN_RATE`] or
/// faster over their life are read ahead for: 19,000 downloads at 32 KB/s would
/// each hold another MiB in the page cache for half a minute. A read ahead is
/// dropped when a job waits for a thread: a response that waits comes first.
pub const AHEAD: u64 = PREFETCH;
/// Bytes a second a response must have been sent at (over its life) to be read
/// ahead for.
pub const AHEAD_MIN_RATE: u64 = 8 << 20;

/// How much a job for a cold range should read past it ([`AHEAD`] at most, and
/// never past the response's own bytes, `after` of them): nothing for a response
/// that has not yet sent its first [`PREFETCH`] (its rate is not known) or that
/// has been sent slower than [`AHEAD_MIN_RATE`]; `sent` bytes in `took_ms`.
pub fn ahead_for(sent: u64, took_ms: u64, after: u64) -> u64 {
    let fast = sent >= PREFETCH && sent.saturating_mul(1000) / took_ms.max(1) >= AHEAD_MIN_RATE;
    if fast {
        after.min(AHEAD)
    } else {
        0
    }
}

/// The pool: `threads` readers sharing one bounded queue. Dropping it ends them
/// once the queue is empty.
pub struct DiskPool {
    /// Cold ranges and lookups, a lane per device (`disk/lanes.rs`).
    jobs: Arc<lanes::Queue<Job>>,
    /// Jobs queued or being read (not the reads ahead): while any is, the disk
    /// is in use, and a worker tries no lookup that might read it (`busy`).
    /// Listings are not counted: they have their own threads.
    in_hand: Arc<AtomicUsize>,
    /// The listing threads' queue.
    lists: SyncSender<Job>,
    /// When (seconds since `started`) a slow disk was last reported (`warn_slow`).
    slow_said: std::sync::atomic::AtomicU64,
    started: std::time::Instant,
}

/// `DiskPool::slow_said` before any report.
const NEVER_SAID: u64 = u64::MAX;

/// Why [`DiskPool::submit`] or [`DiskPool::submit_lookup`] did not take a job.
/// In no case does the worker read the disk instead (except for
/// [`Refused::NoDescriptor`]): it would wait on a disk that is already behind,
/// with every client it has.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The queue of cold ranges and lookups is full (`QUEUE`, 4,096, waiting: the
    /// disks are far behind). A lookup is answered 503 "disk busy"; a range's
    /// response waits and asks again ([`RETRY_MS`]).
    Full,
    /// The listing threads' queue is full: the worker answers 503, and does not
    /// build the page itself (a big directory's would stall it for 0.2 s).
    ListingsFull,
    /// The job's device has its whole share of the queue waiting (with two
    /// devices or more, `disk/lanes.rs`): that disk is slow or failing. As for
    /// [`Refused::Full`].
    DiskBusy,
    /// The range's file could not be duplicated for a thread (no descriptor
    /// left, for a moment: conditioning makes room at the limit). The worker
    /// sends that turn itself, as without a pool: waiting would hold the
    /// download for a reason that has nothing to do with the disk.
    NoDescriptor,
}

/// A device as the log, the status page and `sluice check` name it:
/// `major:minor`, as `lsblk` and `/proc/self/mountinfo` do.
pub fn device_name(dev: u64) -> String {
    format!("{}:{}", libc::major(dev), libc::minor(dev))
}

/// How long a response whose cold range was refused (the queue or its disk's
/// share full) waits before it asks again. Its deadlines run meanwhile as for any
/// response waiting for the disk: the minimum send rate over its window (30 s by
/// default) and `send_timeout` from its last progress, so a disk that never
/// catches up ends it (counted as `disk_stalled`, not as a slow reader). Each
/// ask costs a one-byte probe, an `fstat` and a look at the queue.
pub const RETRY_MS: u64 = 50;

impl DiskPool {
    /// `threads` disk threads and `listing_threads` listing threads (at least one).
    pub fn start(threads: usize, listing_threads: usize) -> std::io::Result<DiskPool> {
        // Test hooks: shorter queues, and a disk that takes `hold` ms more per
        // job, for the tests of full queues (`tests/disk_behind.rs`).
        let hook = |name: &str, or: usize| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(or)
        };
        let hold = std::time::Duration::from_millis(hook("SLUICE_TEST_DISK_HOLD_MS", 0) as u64);
        let jobs = Arc::new(lanes::Queue::new(
            threads,
            hook("SLUICE_TEST_DISK_QUEUE", QUEUE),
        ));
        let in_hand = Arc::new(AtomicUsize::new(0));
        let sink = Arc::new(std::fs::OpenOptions::new().write(true).open("/dev/null")?);
        for i in 0..threads {
            let jobs = Arc::clone(&jobs);
            let sink = Arc::clone(&sink);
            let in_hand = Arc::clone(&in_hand);
            std::thread::Builder::new()
                .name(format!("sluice-disk{i}"))
                .spawn(move || read_loop(&jobs, &sink, &in_hand, hold))?;
        }
        let list_queue = hook("SLUICE_TEST_LIST_QUEUE", LIST_QUEUE);
        let (lists, list_rx) = sync_channel::<Job>(list_queue);
        let list_rx = Arc::new(Mutex::new(list_rx));
        for i in 0..listing_threads.max(1) {
            let rx = Arc::clone(&list_rx);
            std::thread::Builder::new()
                .name(format!("sluice-list{i}"))
                .spawn(move || list_loop(&rx))?;
        }
        Ok(DiskPool {
            jobs,
            in_hand,
            lists,
            slow_said: std::sync::atomic::AtomicU64::new(NEVER_SAID),
            started: std::time::Instant::now(),
        })
    }

    /// The devices the sites' files are on (`Snapshot::devices`), at start and
    /// after each reload: with two or more, no device may take every thread
    /// (`disk/lanes.rs`) from the first job on.
    pub fn know(&self, devices: &[u64]) {
        self.jobs.know(devices);
    }

    /// Copy each device lane's waiting and reading jobs into `slots` (this
    /// process's, in the shared region) for the status page; called about once a
    /// second by each worker of the process. Lanes past the slots are left out.
    pub fn publish(&self, slots: &[crate::shm::DiskSlot]) {
        let mut n = 0;
        self.jobs.lanes(|dev, waiting, reading| {
            if let Some(s) = slots.get(n) {
                s.dev.store(dev + 1, Ordering::Relaxed);
                s.waiting.store(waiting as u32, Ordering::Relaxed);
                s.reading.store(reading as u32, Ordering::Relaxed);
            }
            n += 1;
        });
    }

    /// Whether the threads have work in hand (the disk is in use).
    pub fn busy(&self) -> bool {
        self.in_hand.load(Ordering::Relaxed) > 0
    }

    /// Read `[off, off + len)` of `file` off the worker, then report `who` to `to`;
    /// then, unless another job waits, the `ahead` bytes after it, at most [`AHEAD`]
    /// ([`ahead_for`] says how many for a response).
    /// `Err` when the range could not be queued ([`Refused`] says what the caller
    /// does then).
    pub fn submit(
        &self,
        file: &File,
        off: u64,
        len: u64,
        ahead: u64,
        who: (u32, u32),
        to: &Arc<Completions>,
    ) -> Result<(), Refused> {
        // Its device's lane: one `fstat`, beside the `dup` and the disk read.
        // No `dup` for a job that would be refused (it is asked again and again).
        let dev = file.metadata().map_or(0, |m| m.dev());
        self.jobs
            .room(dev)
            .map_err(|share| self.refused(dev, share))?;
        let Ok(file) = file.try_clone() else {
            return Err(Refused::NoDescriptor);
        };
        let what = Work::Range {
            file,
            off,
            len,
            // The pool's own bound, whatever the caller asks (the test holds it to it).
            ahead: ahead.min(AHEAD),
        };
        self.queue(what, dev, who, to)
    }

    /// Make `cold`'s lookup and read off the worker (a listing on a listing
    /// thread), then report `who` to `to`; else why not ([`Refused`]).
    pub fn submit_lookup(
        &self,
        cold: ColdLookup,
        who: (u32, u32),
        to: &Arc<Completions>,
    ) -> Result<(), Refused> {
        if cold.is_listing() {
            let job = Job {
                what: Work::Lookup(cold),
                who,
                to: Arc::clone(to),
            };
            return self.lists.try_send(job).map_err(|_| Refused::ListingsFull);
        }
        let dev = cold.device();
        self.queue(Work::Lookup(cold), dev, who, to)
    }

    fn queue(
        &self,
        what: Work,
        dev: u64,
        who: (u32, u32),
        to: &Arc<Completions>,
    ) -> Result<(), Refused> {
        let job = Job {
            what,
            who,
            to: Arc::clone(to),
        };
        self.in_hand.fetch_add(1, Ordering::Relaxed);
        match self.jobs.push(dev, job) {
            Ok(()) => Ok(()),
            Err((_, share)) => {
                self.in_hand.fetch_sub(1, Ordering::Relaxed);
                Err(self.refused(dev, share))
            }
        }
    }

    /// Why a job of `dev`'s was refused: its device's `share` of the queue was
    /// full (said in the log), or the whole queue.
    fn refused(&self, dev: u64, share: bool) -> Refused {
        if share {
            self.warn_slow(dev);
            Refused::DiskBusy
        } else {
            Refused::Full
        }
    }

    /// Say, at most once a minute, that `dev`'s reads fill its share of the queue.
    fn warn_slow(&self, dev: u64) {
        let now = self.started.elapsed().as_secs();
        let last = self.slow_said.load(Ordering::Relaxed);
        if (last == NEVER_SAID || now >= last + 60)
            && self
                .slow_said
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                device = %device_name(dev),
                "a disk's reads fill its share of the disk threads' queue: it is slow or failing; until it catches up its cold lookups are answered 503 and its cold downloads wait"
            );
        }
    }
}

impl Drop for DiskPool {
    /// The threads end once the jobs waiting are read (the listing threads when
    /// their queue's sender, `lists`, goes).
    fn drop(&mut self) {
        self.jobs.close();
    }
}

/// Each job: have the kernel read the range through its own readahead and wait
/// for it, by `sendfile` to `/dev/null`: the page cache's pages are spliced to a
/// sink that drops them, so nothing is copied. Errors and EOF (a file truncated
/// meanwhile) end the job; the worker meets them when it sends, as it always did.
/// Then, if the job asks for it and no other job may be taken, the range after it
/// ([`AHEAD`]) is read the same way with nobody to tell (counted in its device's
/// reads: `lanes::Queue::start_unasked`).
fn read_loop(
    jobs: &lanes::Queue<Job>,
    sink: &File,
    in_hand: &AtomicUsize,
    hold: std::time::Duration,
) {
    let mut ahead: Option<(u64, File, u64, u64)> = None;
    loop {
        let Some((dev, job)) = jobs.take(ahead.is_none()) else {
            // Nothing to take: the read ahead, if there is one (a response that
            // waits would have come first, and dropped it).
            match ahead.take() {
                Some((dev, f, off, len)) => {
                    if jobs.start_unasked(dev) {
                        fill(sink, &f, off, len);
                        jobs.done(dev);
                    }
                    continue;
                }
                None => return,
            }
        };
        // A response waits: it goes first, and a pending read ahead is dropped
        // (`ahead` is set anew below).
        if !hold.is_zero() {
            std::thread::sleep(hold);
        }
        let next = match job.what {
            Work::Range {
                file,
                off,
                len,
                ahead: after,
            } => {
                let len = len.clamp(1, PREFETCH);
                fill(sink, &file, off, len);
                (after > 0).then_some((dev, file, off + len, after))
            }
            Work::Lookup(cold) => {
                contained(cold.path(), || {
                    cold.warm(|f, off, len| fill(sink, f, off, len))
                });
                None
            }
        };
        in_hand.fetch_sub(1, Ordering::Relaxed);
        jobs.done(dev);
        job.to.finish(job.who);
        ahead = next;
    }
}

/// A listing thread: at nice +10 from its start (`LISTING_NICE`), so that the
/// workers, when they want the CPU, get it first; each job reads a directory,
/// builds its page, and reports.
fn list_loop(rx: &Mutex<Receiver<Job>>) {
    sluice_static::cold::lower_this_thread();
    loop {
        let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok(job) = job else { return };
        if let Work::Lookup(cold) = job.what {
            contained(cold.path(), || cold.warm(|_, _, _| {}));
        }
        job.to.finish(job.who);
    }
}

/// Run `warm`; a panic in it (a bug in a listing's build, say) is logged, and
/// the thread goes on to report the request, which is then asked again as
/// after any lookup: a thread that died would leave it, and every request after
/// it in the queue, waiting until its deadline.
fn contained(path: &str, warm: impl FnOnce()) -> bool {
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(warm)).is_ok();
    if !ok {
        tracing::error!(path, "a disk or listing thread's job panicked");
    }
    ok
}

/// Have `[off, off + len)` of `file` read into the page cache, waiting for it.
fn fill(sink: &File, file: &File, off: u64, len: u64) {
    let mut at = off as libc::off_t;
    let mut left = len as usize;
    while left > 0 {
        // SAFETY: both descriptors are open; `at` is a valid offset pointer.
        let n = unsafe { libc::sendfile(sink.as_raw_fd(), file.as_raw_fd(), &mut at, left) };
        if n <= 0 {
            break;
        }
        left -= n as usize;
    }
}

#[cfg(test)]
pub(crate) mod tests;
