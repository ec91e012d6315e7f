//! The disk threads' queue, one lane per device, so that a slow or failing disk
//! cannot take every thread.
//!
//! A mirror serves trees from several disks (`[[server.alias]]`, or mount points
//! under the root). With one queue, downloads from a disk that reads at 2 MB/s (a
//! rotating disk under a scan, a failing one retrying each sector) held all eight
//! threads, and a cold 4 KiB file on a healthy disk waited seconds behind them
//! (`bench/two_disks.py`, docs/BENCHMARKS.md). Now each job waits in the lane of
//! its device (`st_dev` of the file being sent, or of the directory a lookup's path
//! is under: the root's, its alias's, or a mount point's below them:
//! `sluice_static::mounts`), and threads take from the lanes in turn.
//! Once the pool knows a second device (the sites' roots and aliases, and the
//! file systems mounted below them, are known from the start, `Queue::know`; one
//! mounted later, from its first job), one device may have at most [`cap`] of
//! its jobs being read at once (every thread but a quarter of them, and at least
//! one), and its lane may hold at most half the queue's room: whatever one disk
//! does, the other devices keep threads and room. A server whose files are all on
//! one device never knows a second, and uses every thread as before.
//!
//! Owns: the waiting jobs, each device's count of jobs being read (and shows
//! both, per lane, to the status page: `Queue::lanes`).
//! Must not: read anything itself, or make a caller wait (`push` refuses instead).
//! Costs: one mutex and one condition variable, as the `sync_channel` it replaced;
//! per take, a scan of the lanes (one per device ever met: a handful).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

/// How many of one device's jobs may be read at once, of `threads`, when the
/// pool has met more than one device: all but a quarter, and at least one.
pub fn cap(threads: usize) -> usize {
    threads.saturating_sub((threads / 4).max(1)).max(1)
}

pub struct Queue<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    cap: usize,
    /// Jobs that may wait, over all lanes.
    room: usize,
}

struct State<T> {
    lanes: Vec<Lane<T>>,
    waiting: usize,
    /// The lane to look at first on the next take (turns go round).
    next: usize,
    closed: bool,
}

struct Lane<T> {
    dev: u64,
    jobs: VecDeque<T>,
    reading: usize,
}

impl<T> State<T> {
    /// The limits once there are several devices: (jobs being read, jobs waiting).
    fn limits(&self, cap: usize, room: usize) -> (usize, usize) {
        if self.lanes.len() > 1 {
            (cap, room / 2)
        } else {
            (usize::MAX, room)
        }
    }

    fn lane(&mut self, dev: u64) -> &mut Lane<T> {
        let i = match self.lanes.iter().position(|l| l.dev == dev) {
            Some(i) => i,
            None => {
                self.lanes.push(Lane {
                    dev,
                    jobs: VecDeque::new(),
                    reading: 0,
                });
                self.lanes.len() - 1
            }
        };
        &mut self.lanes[i]
    }
}

impl<T> Queue<T> {
    /// A queue for `threads` threads holding at most `room` waiting jobs.
    pub fn new(threads: usize, room: usize) -> Queue<T> {
        Queue {
            state: Mutex::new(State {
                lanes: Vec::new(),
                waiting: 0,
                next: 0,
                closed: false,
            }),
            ready: Condvar::new(),
            cap: cap(threads),
            room,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Make lanes for `devices` now (the roots' and aliases' devices), so the
    /// limits hold from the first job: a lane made only when a second device's
    /// first job comes would find every thread already reading the first device.
    pub fn know(&self, devices: &[u64]) {
        let mut st = self.lock();
        for &d in devices {
            st.lane(d);
        }
    }

    /// Queue `job` in `dev`'s lane; `Err` when there is no room, with the job
    /// and whether it was this device's share that was full (the queue as a
    /// whole had room: the disk is slow, not the server busy).
    pub fn push(&self, dev: u64, job: T) -> Result<(), (T, bool)> {
        let mut st = self.lock();
        if let Err(share) = self.room_in(&mut st, dev) {
            return Err((job, share));
        }
        st.lane(dev).jobs.push_back(job);
        st.waiting += 1;
        drop(st);
        self.ready.notify_one();
        Ok(())
    }

    /// Whether [`Queue::push`] would take a job of `dev`'s now (`Err` as push's):
    /// asked before a job is made, so a refused one costs no `dup` of its file.
    pub fn room(&self, dev: u64) -> Result<(), bool> {
        self.room_in(&mut self.lock(), dev)
    }

    fn room_in(&self, st: &mut State<T>, dev: u64) -> Result<(), bool> {
        if st.closed || st.waiting >= self.room {
            return Err(false);
        }
        // The limits as they are with this device's lane (made now if new: a
        // lane is kept once made, as `know` makes them).
        st.lane(dev);
        let (_, share) = st.limits(self.cap, self.room);
        if st.lane(dev).jobs.len() >= share {
            return Err(true);
        }
        Ok(())
    }

    /// The next job a thread may read, and its device, taken from the lanes in
    /// turn, skipping a device that has its [`cap`] of jobs being read. With `wait`,
    /// blocks until there is one (`None` once closed with nothing to take);
    /// without, `None` at once.
    pub fn take(&self, wait: bool) -> Option<(u64, T)> {
        let mut st = self.lock();
        loop {
            let (cap, _) = st.limits(self.cap, self.room);
            let n = st.lanes.len();
            for i in 0..n {
                let k = (st.next + i) % n;
                let lane = &mut st.lanes[k];
                if lane.reading < cap {
                    if let Some(job) = lane.jobs.pop_front() {
                        lane.reading += 1;
                        let dev = lane.dev;
                        st.waiting -= 1;
                        st.next = k + 1;
                        return Some((dev, job));
                    }
                }
            }
            if !wait || (st.closed && st.waiting == 0) {
                return None;
            }
            st = self.ready.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A read of `dev`'s that no job asked for (a read ahead) may start: `true`,
    /// and it counts as being read until [`Queue::done`], unless the device has
    /// its cap of reads already (then `false`, and it should not start).
    pub fn start_unasked(&self, dev: u64) -> bool {
        let mut st = self.lock();
        let (cap, _) = st.limits(self.cap, self.room);
        let lane = st.lane(dev);
        if lane.reading >= cap {
            return false;
        }
        lane.reading += 1;
        true
    }

    /// A thread has finished a read on `dev` (a job's, or one it started unasked).
    pub fn done(&self, dev: u64) {
        let mut st = self.lock();
        let lane = st.lane(dev);
        lane.reading = lane.reading.saturating_sub(1);
        drop(st);
        // A job of this device may have waited for the read to end.
        self.ready.notify_one();
    }

    /// Each lane's device, waiting jobs and reads in progress, in the order the
    /// lanes were made (for the status page: one lock, a handful of lanes).
    pub fn lanes(&self, mut each: impl FnMut(u64, usize, usize)) {
        let st = self.lock();
        for l in &st.lanes {
            each(l.dev, l.jobs.len(), l.reading);
        }
    }

    /// No more jobs: threads end once the waiting ones are taken.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_threads_for_other_devices() {
        assert_eq!(cap(8), 6);
        assert_eq!(cap(4), 3);
        assert_eq!(cap(2), 1);
        // One thread cannot be shared: it reads whatever comes.
        assert_eq!(cap(1), 1);
    }

    #[test]
    fn one_device_uses_every_thread() {
        let q = Queue::new(4, 100);
        for j in 0..6 {
            q.push(1, j).unwrap();
        }
        let got: Vec<_> = (0..4).filter_map(|_| q.take(false)).collect();
        assert_eq!(got, vec![(1, 0), (1, 1), (1, 2), (1, 3)]);
    }

    #[test]
    fn a_slow_device_cannot_hold_the_last_threads() {
        // Four threads; device 1's jobs are being read (they never end, as on a
        // disk that hangs) when device 2's job comes.
        let q = Queue::new(4, 100);
        q.push(1, 10).unwrap();
        q.push(2, 20).unwrap();
        for j in 11..20 {
            q.push(1, j).unwrap();
        }
        let mut taken = Vec::new();
        while let Some(t) = q.take(false) {
            taken.push(t);
        }
        // Device 1 gets its cap (3), device 2 its job; device 1's others wait.
        assert_eq!(taken, vec![(1, 10), (2, 20), (1, 11), (1, 12)]);
        // A device-2 job now is taken at once, past device 1's waiting ones...
        q.push(2, 21).unwrap();
        q.done(2);
        assert_eq!(q.take(false), Some((2, 21)));
        // ...and device 1 gets another only when one of its reads ends.
        assert_eq!(q.take(false), None);
        q.done(1);
        assert_eq!(q.take(false), Some((1, 13)));
        // Nor may a read ahead take device 1 past its cap.
        assert!(!q.start_unasked(1));
        assert!(q.start_unasked(2));
    }

    #[test]
    fn known_devices_hold_the_cap_from_the_first_job() {
        let q = Queue::new(4, 100);
        q.know(&[1, 2]);
        for j in 0..4 {
            q.push(1, j).unwrap();
        }
        let got: Vec<_> = std::iter::from_fn(|| q.take(false)).collect();
        assert_eq!(got, vec![(1, 0), (1, 1), (1, 2)]);
    }

    #[test]
    fn one_device_cannot_fill_the_queue_once_there_are_two() {
        let q = Queue::new(8, 10);
        q.push(2, 0).unwrap();
        for j in 0..4 {
            q.push(1, j).unwrap();
        }
        // Half the room (5) is device 1's share, and it has 4 waiting: one more.
        assert_eq!(q.room(1), Ok(()));
        assert!(q.push(1, 4).is_ok());
        assert_eq!(q.room(1), Err(true), "room says what push would");
        assert_eq!(q.push(1, 5), Err((5, true)));
        // Device 2 still has room, until the queue as a whole is full.
        assert!(q.push(2, 1).is_ok());
        for j in 2..5 {
            q.push(2, j).unwrap();
        }
        assert_eq!((q.room(2), q.room(3)), (Err(false), Err(false)));
    }

    #[test]
    fn a_closed_queue_ends_its_threads_once_it_is_empty() {
        let q = std::sync::Arc::new(Queue::new(2, 10));
        q.push(1, 7).unwrap();
        q.close();
        assert_eq!(q.push(1, 8), Err((8, false)));
        let q2 = std::sync::Arc::clone(&q);
        let t = std::thread::spawn(move || (q2.take(true), q2.take(true)));
        assert_eq!(t.join().unwrap(), (Some((1, 7)), None));
    }
}
