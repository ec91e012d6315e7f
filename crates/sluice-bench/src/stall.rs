//! A watch for the machine itself stopping: time that no thread of the load
//! generator could have run, which no server can answer in.
//!
//! On a virtual machine whose host caps its CPU time, both vCPUs can stop for tens
//! of milliseconds at a time (on this project's machine: ~30 ms in every 100 ms
//! while its disk is read and both vCPUs are busy; docs/BENCHMARKS.md). A latency
//! figure measured across such stops is the host's, not the server's, and an open
//! loop counts them in full. [`StallWatch`] runs one thread that sleeps [`TICK`] at a
//! time at `SCHED_FIFO` priority 1, so it wakes at once whatever else wants the CPU,
//! and counts every wake-up later than [`STALL_MIN`] past its time as a stall. An
//! experiment prints the total beside its latencies.
//!
//! Owns: the watch thread. Must not: busy-wait (it would take a core from the load).
//! Costs: 200 wake-ups a second (at 1 ms, 1,000 a second, the heavy-range
//! downloaders beside it on the client's core moved ~40% fewer MiB/s). Without the
//! privilege for `SCHED_FIFO` it does not run ([`StallWatch::start`] returns
//! `None`): at ordinary priority a late wake-up is mostly the load's own threads,
//! and would read as a stall.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the watch sleeps each time.
pub const TICK: Duration = Duration::from_millis(5);
/// A wake-up this late (past the [`TICK`] asked for) counts as a stall.
pub const STALL_MIN: Duration = Duration::from_millis(4);

/// Put the calling thread (and the threads it starts from now on) at `SCHED_FIFO`
/// priority 1. Needs root or `CAP_SYS_NICE`.
pub fn fifo_this_thread() -> std::io::Result<()> {
    let p = libc::sched_param { sched_priority: 1 };
    // SAFETY: sets the calling thread's own policy; no pointers kept.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// What the watch saw: stalls and their total length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stalls {
    pub count: u64,
    pub total: Duration,
}

impl Stalls {
    /// Their total in whole ms for a table; `-` when nothing watched.
    pub fn ms(s: Option<Stalls>) -> String {
        s.map_or("-".into(), |s| {
            format!("{:.0}", s.total.as_secs_f64() * 1e3)
        })
    }
}

pub struct StallWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<(AtomicU64, AtomicU64)>,
    thread: JoinHandle<()>,
}

impl StallWatch {
    /// Start watching; `None` if the thread cannot have `SCHED_FIFO` (see above).
    pub fn start() -> Option<StallWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let (ok_tx, ok_rx) = std::sync::mpsc::channel();
        let (s, n) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            let fifo = fifo_this_thread().is_ok();
            let _ = ok_tx.send(fifo);
            if !fifo {
                return;
            }
            while !s.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                std::thread::sleep(TICK);
                let late = t0.elapsed().saturating_sub(TICK);
                if late >= STALL_MIN {
                    n.0.fetch_add(1, Ordering::Relaxed);
                    n.1.fetch_add(late.as_micros() as u64, Ordering::Relaxed);
                }
            }
        });
        if ok_rx.recv().unwrap_or(false) {
            Some(StallWatch { stop, seen, thread })
        } else {
            let _ = thread.join();
            None
        }
    }

    /// Stop watching and say what was seen.
    pub fn finish(self) -> Stalls {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        Stalls {
            count: self.seen.0.load(Ordering::Relaxed),
            total: Duration::from_micros(self.seen.1.load(Ordering::Relaxed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quiet machine does not stall for long; the watch stops when asked. (Where
    /// the tests may not use `SCHED_FIFO`, the watch must say so by not starting.)
    #[test]
    fn a_quiet_second_shows_next_to_no_stall_and_the_watch_stops() {
        let Some(w) = StallWatch::start() else {
            // SAFETY: a plain query of the calling process's credentials.
            assert_ne!(unsafe { libc::geteuid() }, 0, "root may use SCHED_FIFO");
            return;
        };
        std::thread::sleep(Duration::from_millis(500));
        let t = Instant::now();
        let s = w.finish();
        assert!(
            t.elapsed() < Duration::from_millis(100),
            "the watch did not stop"
        );
        // Sleeping itself is not a stall: 100 sleeps of 5 ms would be 500 ms.
        assert!(s.total < Duration::from_millis(100), "{s:?}");
    }
}
