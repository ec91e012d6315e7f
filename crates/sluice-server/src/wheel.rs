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
//!
//! [`Wheel::next_due`] says when the earliest non-empty slot comes up, so a worker
//! whose connections are all idle keep-alives sleeps until their first deadline, not
//! one tick at a time: one bit per slot (128 bytes for 1024 slots) is set by
//! `insert` and cleared as `advance` empties the slot, and the search reads those
//! words, not the slots (at most 16 word reads, once per turn that goes to sleep).

/// What an entry names: a slab key and the connection generation it was made for
/// (a slot reused by a new connection must not inherit an old timer). 8 bytes.
pub type Key = (u32, u32);

/// Times are milliseconds on the worker's own clock.
pub struct Wheel {
    slots: Vec<Vec<Key>>,
    /// Bit `i` set while `slots[i]` holds an entry.
    busy: Vec<u64>,
    tick_ms: u64,
    /// Last tick whose slot has been emptied.
    cur: u64,
}

impl Wheel {
    pub fn new(tick_ms: u64, slots: usize) -> Self {
        Wheel {
            slots: (0..slots).map(|_| Vec::new()).collect(),
            busy: vec![0; slots.div_ceil(64)],
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
        let i = (t % n) as usize;
        self.slots[i].push(key);
        self.busy[i / 64] |= 1 << (i % 64);
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
            self.busy.fill(0);
            self.cur = target;
            return;
        }
        while self.cur < target {
            self.cur += 1;
            let i = (self.cur % n) as usize;
            due.append(&mut self.slots[i]);
            self.busy[i / 64] &= !(1 << (i % 64));
        }
    }

    /// When the earliest entry comes up (the time `advance` must reach to report
    /// it), or `None` if the wheel is empty. Always later than the last `advance`.
    pub fn next_due(&self) -> Option<u64> {
        let n = self.slots.len();
        let from = ((self.cur + 1) % n as u64) as usize;
        // Slots from the next one to the end of the array, then from its start.
        let i = self.first_busy(from).or_else(|| self.first_busy(0))?;
        let ahead = (i + n - from) % n;
        Some((self.cur + 1 + ahead as u64) * self.tick_ms)
    }

    /// The first slot at or after `from` (in array order) holding an entry.
    fn first_busy(&self, from: usize) -> Option<usize> {
        let mut w = from / 64;
        let mut bits = self.busy.get(w)? & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            bits = *self.busy.get(w)?;
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
        assert_eq!(w.next_due(), None, "a big jump empties every slot");
    }

    #[test]
    fn next_due_is_the_earliest_entry_across_the_wrap_and_word_edges() {
        let mut w = Wheel::new(100, 1024);
        assert_eq!(w.next_due(), None);
        let mut due = Vec::new();
        // Move the wheel near the end of its array, so entries wrap to its start.
        w.advance(100_000, &mut due);
        assert_eq!(w.cur, 1000);
        let late = w.insert(105_000, (1, 0)); // slot 26 of the next rotation
        assert_eq!(w.next_due(), Some(late));
        let soon = w.insert(101_300, (2, 0)); // slot 1013, in the array's last word
        assert_eq!(w.next_due(), Some(soon));
        assert_eq!(soon, 101_300);
        w.advance(101_300, &mut due);
        assert_eq!(due, vec![(2, 0)]);
        assert_eq!(w.next_due(), Some(late), "its slot's bit is cleared");
        // An entry for beyond one rotation comes up at the rotation's end.
        let far = w.insert(u64::MAX, (3, 0));
        assert_eq!(w.next_due(), Some(late));
        due.clear();
        w.advance(late, &mut due);
        assert_eq!(due, vec![(1, 0)]);
        assert_eq!(w.next_due(), Some(far));
        assert_eq!(far, (1013 + 1024) * 100);
        // Every slot boundary of a word: 63, 64, 127, 128.
        let mut w = Wheel::new(10, 256);
        for slot in [128u64, 127, 64, 63] {
            w.insert(slot * 10, (slot as u32, 0));
            assert_eq!(w.next_due(), Some(slot * 10));
        }
        for slot in [63u64, 64, 127, 128] {
            due.clear();
            w.advance(slot * 10, &mut due);
            assert_eq!(due, vec![(slot as u32, 0)]);
        }
        assert_eq!(w.next_due(), None);
    }
}
