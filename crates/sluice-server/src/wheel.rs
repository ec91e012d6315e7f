//! A hashed timing wheel for connection deadlines.
//!
//! Every timeout in a worker (header deadline, keep-alive idle, send progress, later
//! tarpits and conditioning holds) is a deadline on the connection; the wheel only
//! says "look at this connection again around then". A connection has at most one
//! entry: moving its deadline later is a field store, not a wheel operation; when its
//! entry comes due and the deadline has moved, the worker re-inserts it. So a
//! keep-alive connection that serves a thousand requests touches the wheel a handful
//! of times, and an idle one costs one 8-byte entry (a [`Key`]; checked by the
//! worker's record-size test).
//!
//! Insert and expiry are O(1) per entry. Time is passed in, never read here, so tests
//! drive it without sleeping.

/// What an entry names: a slab key and the connection generation it was made for
/// (a slot reused by a new connection must not inherit an old timer). 8 bytes.
pub type Key = (u32, u32);

/// Times are milliseconds on the worker's own clock.
pub struct Wheel {
    slots: Vec<Vec<Key>>,
    tick_ms: u64,
    /// Last tick whose slot has been emptied.
    cur: u64,
}

impl Wheel {
    pub fn new(tick_ms: u64, slots: usize) -> Self {
        Wheel {
            slots: (0..slots).map(|_| Vec::new()).collect(),
            tick_ms,
            cur: 0,
        }
    }

    pub fn tick(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.tick_ms)
    }

    /// Schedule `key` to be reported at or after `at` (never before), or earlier if
    /// `at` is beyond one rotation. Returns when the entry will actually come up.
    pub fn insert(&mut self, at: u64, key: Key) -> u64 {
        // Deadlines beyond one rotation land in a nearer slot and are re-inserted by
        // the caller when they come up early: the wheel never fires late, at worst early.
        let n = self.slots.len() as u64;
        let t = at
            .div_ceil(self.tick_ms)
            .max(self.cur + 1)
            .min(self.cur + n);
        self.slots[(t % n) as usize].push(key);
        t * self.tick_ms
    }

    /// Move time to `now`, appending every entry whose slot has passed to `due`.
    /// The caller checks each against the connection's real deadline.
    pub fn advance(&mut self, now: u64, due: &mut Vec<Key>) {
        let target = now / self.tick_ms;
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
        let mut w = Wheel::new(100, 16);
        w.insert(250, (1, 0));
        w.insert(50, (2, 0));
        let mut due = Vec::new();
        w.advance(99, &mut due);
        assert!(due.is_empty());
        w.advance(100, &mut due);
        assert_eq!(due, vec![(2, 0)]);
        due.clear();
        w.advance(299, &mut due);
        assert!(due.is_empty());
        w.advance(300, &mut due);
        assert_eq!(due, vec![(1, 0)]);
        assert!(w.is_empty());
    }

    #[test]
    fn far_deadlines_come_up_early_and_big_jumps_flush_everything() {
        let mut w = Wheel::new(10, 8);
        let at = w.insert(10_000, (7, 3));
        assert_eq!(at, 80, "reported when it will really come up");
        let mut due = Vec::new();
        w.advance(80, &mut due);
        assert_eq!(
            due,
            vec![(7, 3)],
            "beyond one rotation: reported early for re-insert"
        );
        due.clear();
        for i in 0..5u32 {
            w.insert(100 + u64::from(i) * 10, (i, 0));
        }
        w.advance(60_000, &mut due);
        assert_eq!(due.len(), 5);
    }
}
