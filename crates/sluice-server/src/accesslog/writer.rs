//! The access log's writer thread: one per log file and serving process, writing
//! the workers' buffers of whole lines to the file, reopening it on `SIGUSR1`, and
//! reporting what it could not write.
//!
//! Owns: the file descriptor, its reopening, and the reports of its trouble (a
//! write that fails, buffers the workers dropped because the thread fell behind):
//! in the error log, and as lines lost on the status page (`Counters::log_lost`,
//! which the workers add their dropped buffers' lines to).
//! Must not: split a line between two files, or report the same trouble more than
//! once a minute ([`REPORT_EVERY`]): a full disk at 100,000 requests a second fails
//! every buffer (626 warnings in 3 s from two writers before the bound;
//! `tests/ops.rs`). A line the failure cut short is ended, so the next one starts
//! on a line of its own.
//! Costs: one `write` per buffer (32 KiB, or a second's lines).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A worker's end of a writer thread's queue (and of its count of the buffers
/// dropped because the queue was full).
#[derive(Clone)]
pub struct Handle {
    pub(super) tx: SyncSender<Vec<u8>>,
    pub(super) dropped: Arc<AtomicU64>,
    /// The status page's count of lost lines (`Counters::log_lost`).
    pub(super) lost: &'static AtomicU64,
}

pub struct Writer {
    tx: SyncSender<Vec<u8>>,
    dropped: Arc<AtomicU64>,
    lost: &'static AtomicU64,
    /// Set by [`Writer::reopen`] (SIGUSR1); the writer thread reopens the path
    /// before its next write.
    reopen: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// An access log file opened (as root, before privileges are dropped) whose writer
/// thread has not started yet: the serving process starts it ([`LogFile::start`]),
/// so with `server.processes` each process writes through its own thread to the
/// same file (appends of whole buffers, so lines do not interleave).
pub struct LogFile {
    path: PathBuf,
    file: std::fs::File,
}

impl LogFile {
    pub fn open(path: PathBuf) -> std::io::Result<LogFile> {
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(LogFile { path, file })
    }

    /// Open the path again (SIGUSR1 to a master: the processes it forks from now
    /// on write to the new file, not to the one logrotate moved away). A failure
    /// keeps the old file, as a writer's reopen does.
    pub fn reopen(&mut self) {
        match OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
        {
            Ok(f) => self.file = f,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot reopen the access log; keeping the old file")
            }
        }
    }

    /// Start the writer thread on a duplicate of the descriptor; lines lost are
    /// counted in `lost` (the status page's, `Counters::log_lost`).
    pub fn start(&self, lost: &'static AtomicU64) -> std::io::Result<Writer> {
        Writer::start(self.path.clone(), self.file.try_clone()?, lost)
    }
}

impl Writer {
    fn start(path: PathBuf, f: std::fs::File, lost: &'static AtomicU64) -> std::io::Result<Writer> {
        let (tx, rx): (SyncSender<Vec<u8>>, Receiver<Vec<u8>>) = sync_channel(256);
        let dropped = Arc::new(AtomicU64::new(0));
        let d2 = dropped.clone();
        let reopen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let r2 = reopen.clone();
        let thread = std::thread::Builder::new().name("sluice-log".into()).spawn(move || {
            let mut out = Sink::new(f);
            let mut drops = Every::new(REPORT_EVERY);
            let mut reported = 0;
            while let Ok(buf) = rx.recv() {
                // Log rotation: `mv access.log access.log.1; kill -USR1`. Buffers hold
                // whole lines, so no line is split across the two files; a failed
                // reopen keeps writing to the old file.
                if r2.swap(false, Ordering::AcqRel) {
                    match OpenOptions::new().create(true).append(true).open(&path) {
                        Ok(nf) => {
                            out.reopened(nf);
                            tracing::info!(path = %path.display(), "access log reopened");
                        }
                        Err(e) => tracing::error!(path = %path.display(), error = %e, "cannot reopen the access log; still writing to the old file"),
                    }
                }
                if buf.is_empty() {
                    continue; // a wake-up from `reopen`
                }
                match out.write(&buf, Instant::now()) {
                    None => {}
                    Some(Trouble::Failed(e, (buffers, bytes))) => tracing::warn!(path = %path.display(), error = %e, lost_buffers = buffers, lost_bytes = bytes, "access log write failed (reported at most once a minute)"),
                    Some(Trouble::Over((buffers, bytes))) => tracing::warn!(path = %path.display(), lost_buffers = buffers, lost_bytes = bytes, "access log writes work again"),
                }
                let lines = std::mem::take(&mut out.lost_lines);
                if lines > 0 {
                    lost.fetch_add(lines, Ordering::Relaxed);
                }
                let d = d2.load(Ordering::Relaxed);
                if d != reported && drops.due(Instant::now()) {
                    tracing::warn!(dropped_buffers = d - reported, "access log could not keep up; lines dropped");
                    reported = d;
                }
            }
        })?;
        Ok(Writer {
            tx,
            dropped,
            lost,
            reopen,
            thread: Some(thread),
        })
    }

    /// Reopen the log file by its path (after logrotate moved it), before the next
    /// buffer is written.
    pub fn reopen(&self) {
        self.reopen.store(true, Ordering::Release);
        let _ = self.tx.try_send(Vec::new()); // wake the writer; a full queue wakes it anyway
    }

    pub fn handle(&self) -> Handle {
        Handle {
            tx: self.tx.clone(),
            dropped: self.dropped.clone(),
            lost: self.lost,
        }
    }

    /// Close the channel and wait for everything queued to be written.
    pub fn finish(mut self) {
        let (tx, _) = sync_channel(1);
        drop(std::mem::replace(&mut self.tx, tx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The most often the writer reports the same trouble (a write that failed, buffers
/// dropped): a full disk at 100,000 requests a second fails every buffer, two to
/// thirty a second per worker, and a warning for each would flood the error log
/// that the operator needs to find the cause (nginx reports such failures at most
/// once a minute, too).
const REPORT_EVERY: Duration = Duration::from_secs(60);

/// A report that is due at most once per period: the first time, then only when
/// the period has passed since the last one.
struct Every {
    period: Duration,
    last: Option<Instant>,
}

impl Every {
    fn new(period: Duration) -> Every {
        Every { period, last: None }
    }

    fn due(&mut self, now: Instant) -> bool {
        if self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < self.period)
        {
            return false;
        }
        self.last = Some(now);
        true
    }
}

/// The writer thread's file, and what it could not write to it.
struct Sink<W: Write> {
    f: W,
    /// A write failed part-way through a buffer: the file may end inside a line,
    /// so the next buffer that is written starts on a line of its own.
    torn: bool,
    /// Buffers and bytes lost since the failures began (`failing`), and since
    /// the last report.
    lost: (u64, u64),
    unreported: (u64, u64),
    failing: bool,
    reports: Every,
    /// Lines lost since the writer thread last took the count (a line the
    /// failure cut counts as lost).
    lost_lines: u64,
}

impl<W: Write> Sink<W> {
    fn new(f: W) -> Sink<W> {
        Sink {
            f,
            torn: false,
            lost: (0, 0),
            unreported: (0, 0),
            failing: false,
            reports: Every::new(REPORT_EVERY),
            lost_lines: 0,
        }
    }

    /// The same log on a new file (`SIGUSR1`): nothing of the old one is cut.
    fn reopened(&mut self, f: W) {
        self.f = f;
        self.torn = false;
    }

    /// Write one buffer of whole lines. A failure is counted, and returned when a
    /// report is due (with the buffers and bytes lost since the last report); the
    /// first success after failures returns what they lost in all.
    fn write(&mut self, buf: &[u8], now: Instant) -> Option<Trouble> {
        let mut done = 0;
        let mut r = Ok(());
        if self.torn {
            r = self.f.write_all(b"\n");
            self.torn = r.is_err();
        }
        while r.is_ok() && done < buf.len() {
            match self.f.write(&buf[done..]) {
                Ok(0) => r = Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => r = Err(e),
            }
        }
        match r {
            Ok(()) => {
                if !std::mem::take(&mut self.failing) {
                    return None;
                }
                self.unreported = (0, 0);
                Some(Trouble::Over(std::mem::take(&mut self.lost)))
            }
            Err(e) => {
                self.torn |= done > 0 && buf[done - 1] != b'\n';
                self.failing = true;
                let lost = (buf.len() - done) as u64;
                self.lost_lines += lines_from(buf, done);
                self.lost = (self.lost.0 + 1, self.lost.1 + lost);
                self.unreported = (self.unreported.0 + 1, self.unreported.1 + lost);
                self.reports
                    .due(now)
                    .then(|| Trouble::Failed(e, std::mem::take(&mut self.unreported)))
            }
        }
    }
}

/// Lines lost when a buffer of whole lines could only be written up to `done`: the
/// line that the failure cut, and every one after it.
pub(super) fn lines_from(buf: &[u8], done: usize) -> u64 {
    let whole = buf[..done]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    buf[whole..].iter().filter(|&&b| b == b'\n').count() as u64
}

/// What the writer thread has to say about its file: (buffers, bytes) lost.
#[derive(Debug)]
enum Trouble {
    /// Writes fail; lost since the last report.
    Failed(std::io::Error, (u64, u64)),
    /// Writes work again; lost since they began to fail.
    Over((u64, u64)),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A disk with `room` bytes left (`None`: no end).
    struct Disk {
        data: Vec<u8>,
        room: Option<usize>,
    }

    /// A writer's file on an empty disk with `room` bytes left.
    fn sink(room: usize) -> Sink<Disk> {
        Sink::new(Disk {
            data: Vec::new(),
            room: Some(room),
        })
    }

    impl Write for Disk {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let n = self.room.map_or(b.len(), |r| r.min(b.len()));
            if n == 0 && !b.is_empty() {
                return Err(std::io::ErrorKind::StorageFull.into());
            }
            if let Some(r) = &mut self.room {
                *r -= n;
            }
            self.data.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_full_disk_is_reported_once_a_minute_with_what_it_lost() {
        let t0 = Instant::now();
        let mut s = sink(0);
        let mut reports = Vec::new();
        // A buffer every 100 ms for 100 s.
        for i in 0..1000 {
            match s.write(b"a line\n", t0 + Duration::from_millis(i * 100)) {
                Some(Trouble::Failed(_, lost)) => reports.push((i, lost)),
                Some(Trouble::Over(_)) => panic!("the disk is still full"),
                None => {}
            }
        }
        // The first failure at once, then one a minute with what was lost since.
        assert_eq!(reports, vec![(0, (1, 7)), (600, (600, 4200))]);
        assert_eq!(s.lost_lines, 1000);
        s.f.room = None;
        let over = s.write(b"back\n", t0 + Duration::from_secs(101));
        assert!(
            matches!(over, Some(Trouble::Over((1000, 7000)))),
            "{over:?}"
        );
        assert!(s.write(b"more\n", t0 + Duration::from_secs(102)).is_none());
        assert_eq!(s.f.data, b"back\nmore\n");
    }

    #[test]
    fn a_line_cut_by_a_full_disk_does_not_swallow_the_next() {
        let t0 = Instant::now();
        let mut s = sink(10);
        assert!(matches!(
            s.write(b"0123456789abc\n", t0),
            Some(Trouble::Failed(_, (1, 4)))
        ));
        // Room for the line break only: the cut line is ended, the buffer lost.
        s.f.room = Some(1);
        assert!(
            s.write(b"lost\n", t0).is_none(),
            "reported within the minute"
        );
        s.f.room = None;
        assert!(matches!(
            s.write(b"next\n", t0),
            Some(Trouble::Over((2, 9)))
        ));
        assert_eq!(s.f.data, b"0123456789\nnext\n");
        assert_eq!(s.lost_lines, 2, "the cut line and the one lost whole");
    }

    #[test]
    fn a_failure_at_a_line_end_cuts_nothing() {
        let mut s = sink(7);
        assert!(s.write(b"a line\nnext\n", Instant::now()).is_some());
        s.f.room = None;
        assert!(s.write(b"x\n", Instant::now()).is_some());
        assert_eq!(s.f.data, b"a line\nx\n");
        assert_eq!(s.lost_lines, 1);
    }

    #[test]
    fn lines_lost_are_the_cut_one_and_those_after() {
        let buf = b"a\nbb\ncc\n";
        assert_eq!(lines_from(buf, 0), 3);
        assert_eq!(lines_from(buf, 2), 2);
        assert_eq!(lines_from(buf, 3), 2);
        assert_eq!(lines_from(buf, 7), 1);
        assert_eq!(lines_from(buf, 8), 0);
    }
}
