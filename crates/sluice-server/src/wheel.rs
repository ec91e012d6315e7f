//! A hashed timing wheel for connection deadlines.
//!
//! Every timeout in a worker (header deadline, keep-alive idle, send progress, later
//! tarpits and conditioning holds) is a deadline on the connection; the wheel only
//! says "look at this connection again around then". A connection has at most one
//! entry: moving its deadline later is a field store, not a wheel operation; when its
//! entry comes due and the deadline has moved, the worker re-inserts it. So a
//! keep-alive connection that serves a thousand requests touches the wheel a handful
//! of times, and an idle one costs one 16-byte entry.
//!
//! Insert and expiry are O(1) per entry. Time is passed in, never read here, so tests
//! drive it without sleeping.

use std::time::{Duration, Instant};

/// What an entry names: a slab key and the connection generation it was made for
/// (a slot reused by a new connection must not inherit an old timer).
pub type Key = (usize, u32);

pub struct Wheel {
    slots: Vec<Vec<Key>>,
    tick: Duration,
    origin: Instant,
    /// Last tick whose slot has been emptied.
    cur: u64,
}

impl Wheel {
    pub fn new(now: Instant, tick: Duration, slots: usize) -> Self {
        Wheel {
            slots: (0..slots).map(|_| Vec::new()).collect(),
            tick,
            origin: now,
            cur: 0,
        }
    }

    pub fn tick(&self) -> Duration {
        self.tick
    }

    fn tick_ceil(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.origin).as_nanos();
        let tk = self.tick.as_nanos();
        d.div_ceil(tk) as u64
    }

    fn tick_floor(&self, t: Instant) -> u64 {
        (t.saturating_duration_since(self.origin).as_nanos() / self.tick.as_nanos()) as u64
    }

    /// Schedule `key` to be reported at or after `at` (never before), or earlier if
    /// `at` is beyond one rotation. Returns when the entry will actually come up.
    pub fn insert(&mut self, at: Instant, key: Key) -> Instant {
        // Deadlines beyond one rotation land in a nearer slot and are re-inserted by
        // the caller when they come up early: the wheel never fires late, at worst early.
        let n = self.slots.len() as u64;
        let t = self.tick_ceil(at).max(self.cur + 1).min(self.cur + n);
        self.slots[(t % n) as usize].push(key);
        self.origin + self.tick * t as u32
    }

    /// Move time to `now`, appending every entry whose slot has passed to `due`.
    /// The caller checks each against the connection's real deadline.
    pub fn advance(&mut self, now: Instant, due: &mut Vec<Key>) {
        let target = self.tick_floor(now);
        let n = self.slots.len() as u64;
        if target > self.cur + n {
            for s in self.slots.iter_mut() {
                due.append(s);
            }
            self.cur = target;
            return;
        }
        while self.cur < target {
            self.cur += 1;
            due.append(&mut self.slots[(self.cur % n) as usize]);
        }
    }

    pub fn len(&self) -> usize {
        self.slots.iter().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_not_before_deadline() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0, Duration::from_millis(100), 16);
        w.insert(t0 + Duration::from_millis(250), (1, 0));
        w.insert(t0 + Duration::from_millis(50), (2, 0));
        let mut due = Vec::new();
        w.advance(t0 + Duration::from_millis(99), &mut due);
        assert!(due.is_empty());
        w.advance(t0 + Duration::from_millis(100), &mut due);
        assert_eq!(due, vec![(2, 0)]);
        due.clear();
        w.advance(t0 + Duration::from_millis(299), &mut due);
        assert!(due.is_empty());
        w.advance(t0 + Duration::from_millis(300), &mut due);
        assert_eq!(due, vec![(1, 0)]);
        assert!(w.is_empty());
    }

    #[test]
    fn far_deadlines_come_up_early_and_big_jumps_flush_everything() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0, Duration::from_millis(10), 8);
        w.insert(t0 + Duration::from_secs(10), (7, 3));
        let mut due = Vec::new();
        w.advance(t0 + Duration::from_millis(80), &mut due);
        assert_eq!(
            due,
            vec![(7, 3)],
            "beyond one rotation: reported early for re-insert"
        );
        due.clear();
        for i in 0..5 {
            w.insert(t0 + Duration::from_millis(100 + i * 10), (i as usize, 0));
        }
        w.advance(t0 + Duration::from_secs(60), &mut due);
        assert_eq!(due.len(), 5);
    }
}
