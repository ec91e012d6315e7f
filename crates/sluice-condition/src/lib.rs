//! Connection conditioning (Park & Pai, NSDI'06; seed 004): the policies that decide,
//! before a request reaches the handler, which connections a server keeps when it
//! cannot keep them all, and which address ranges may hold how many.
//!
//! This crate owns the decisions and their bookkeeping; it touches no sockets and
//! reads no clock (times are passed in). `sluice-server` calls it at four points of
//! a connection's life and applies what it answers:
//!
//! | when | call | answer |
//! |---|---|---|
//! | accepted | [`RangeCaps::acquire`] (shared by all workers) | over a range's cap → answer 503 |
//! | parked (waiting for bytes) | [`Conditioner::park`] with its [`Class`] | — (trees updated only on a class change) |
//! | at the connection limit, or over `max_incomplete` | [`Conditioner::victim`] | which connection to close, and why |
//! | a complete request must wait (the turn's share is used, others wait, or the active cap is reached) | [`Conditioner::park`] with [`Class::Ready`], then [`Conditioner::next_ready`] | which request is answered next: the least recently served range's oldest |
//! | a response waits for its next send turn | [`Conditioner::park`] with [`Class::Waiting`], then [`Conditioner::next_waiting`] | whose turn it is: the least recently served range's oldest |
//! | sending | [`slowread::RateWindow::check`] | close a reader below the minimum rate |
//! | a response starts, and past its `limit_rate_after` | [`pace::plan`] | the socket's pacing calls (bandwidth limits, not a filter of the paper's) |
//!
//! The stages, in the order a connection meets them (the paper's chain):
//! 1. **request packaging** — a connection reaches the handler only with a complete
//!    head, within a total deadline (the server's header timeout); incomplete
//!    connections are counted per range ([`Class::Incomplete`] tree);
//! 2. **persistent-connection management** — idle keep-alive connections are
//!    counted per range with their age ([`Class::Idle`] tree); under pressure the
//!    oldest idle connection of the heaviest range goes first, before any
//!    incomplete one, and never an active one;
//! 3. **recency-based fair ordering** — complete requests that must wait
//!    ([`Class::Ready`] tree: more arrived in a turn than the worker answers per
//!    turn, or the cap on active responses is reached) and responses waiting for a
//!    send turn ([`Class::Waiting`] tree) go by address range, least recently served
//!    range first ([`RangeTree::pop_least_recent`]), so 200 downloads from one /24
//!    share one range's turns and a client from elsewhere is next, not 201st;
//! 4. **slow-read prevention** — per-range caps ([`caps`]) and a minimum send rate
//!    ([`slowread`]).
//!
//! Cost: a keep-alive request whose head arrives in one read leaves and re-enters
//! the idle class within one `drive` call, so it only moves to the young end of its
//! address's list (O(1), no count changes). A class change walks one path of the
//! tree (9 nodes for IPv4); a send turn or a waiting request's turn is one pop (one
//! path, 16 children scanned per node); a request that never waits costs nothing
//! here. Memory: 13 bytes per connection slot in side tables (links shared by
//! the four trees, and the class), plus the nodes of the live
//! prefixes; nothing in the connection record.

pub mod addr;
pub mod caps;
pub mod defer;
pub mod pace;
pub mod reason;
pub mod slowread;
pub mod tree;

pub use addr::{Cidr, RangeKey};
pub use caps::RangeCaps;
pub use reason::CloseReason;
pub use tree::{Links, RangeTree};

use std::net::IpAddr;

/// What the conditioner needs to know about a parked connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Class {
    /// Not tracked (sending a response, lingering, or gone).
    #[default]
    Active,
    /// A response waiting for its next send turn.
    Waiting,
    /// A complete request waiting for its turn to be answered (more requests were
    /// ready than a worker answers in one turn, or the cap on active responses is
    /// reached).
    Ready,
    /// Waiting for (more of) a request head.
    Incomplete,
    /// Keep-alive, between requests.
    Idle,
}

/// The settings, with the paper's defaults where it has them.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Most connections per worker (the worker's share of the descriptor limit).
    pub max_connections: usize,
    /// Most incomplete connections per worker before the oldest of the heaviest
    /// range is closed.
    pub max_incomplete: usize,
    /// Per-range caps as fractions of the server's connection limit: /8, /16, /24
    /// (IPv6: /32, /48, /64). The paper: 25%, 15%, 10%.
    pub cap_fractions: [f64; 3],
    /// Minimum send rate, bytes/s (0 = off), judged over `send_rate_window_ms`.
    pub min_send_rate: u64,
    pub send_rate_window_ms: u64,
}

/// One worker's conditioning state: who is incomplete and who is idle, by range.
#[derive(Default)]
pub struct Conditioner {
    incomplete: RangeTree,
    idle: RangeTree,
    waiting: RangeTree,
    ready: RangeTree,
    /// The FIFO links of the trees (a connection is in at most one), and the class
    /// of each connection slot as last parked: side tables by slab key, 9 bytes a
    /// slot.
    links: Links,
    class: Vec<Class>,
}

impl Conditioner {
    /// Side tables sized for `slots` connections up front: they never reallocate
    /// (a grown vector's old block stays in the process's memory).
    pub fn with_capacity(slots: usize) -> Conditioner {
        Conditioner {
            links: Links::with_capacity(slots),
            class: Vec::with_capacity(slots),
            ..Default::default()
        }
    }

    /// Record that connection `id` from `peer` is parked in `class`. Cheap when the
    /// class did not change (an idle connection is moved to its list's young end).
    pub fn park(&mut self, id: u32, peer: IpAddr, class: Class) {
        let i = id as usize;
        if self.class.len() <= i {
            self.class.resize(i + 1, Class::Active);
        }
        let old = self.class[i];
        if old == class {
            // (A waiting response stays where it is in its queue.)
            if class == Class::Idle {
                self.idle.touch(&mut self.links, id);
            }
            return;
        }
        let key = RangeKey::of(peer);
        self.leave(id, old, &key);
        match class {
            Class::Incomplete => self.incomplete.insert(&mut self.links, id, &key),
            Class::Idle => self.idle.insert(&mut self.links, id, &key),
            Class::Waiting => self.waiting.insert(&mut self.links, id, &key),
            Class::Ready => self.ready.insert(&mut self.links, id, &key),
            Class::Active => {}
        }
        self.class[i] = class;
    }

    /// Where connection `id` is parked now ([`Class::Active`] if never parked).
    pub fn class_of(&self, id: u32) -> Class {
        self.class
            .get(id as usize)
            .copied()
            .unwrap_or(Class::Active)
    }

    /// Connection `id` (from `peer`) is closed.
    pub fn forget(&mut self, id: u32, peer: IpAddr) {
        if let Some(&c) = self.class.get(id as usize) {
            self.leave(id, c, &RangeKey::of(peer));
            self.class[id as usize] = Class::Active;
        }
    }

    fn leave(&mut self, id: u32, class: Class, key: &RangeKey) {
        match class {
            Class::Incomplete => self.incomplete.remove(&mut self.links, id, key),
            Class::Idle => self.idle.remove(&mut self.links, id, key),
            Class::Waiting => self.waiting.remove(&mut self.links, id, key),
            Class::Ready => self.ready.remove(&mut self.links, id, key),
            Class::Active => {}
        }
    }

    /// Whose send turn is next: the oldest waiting response of the least recently
    /// served range ([`RangeTree::pop_least_recent`]); it becomes [`Class::Active`].
    pub fn next_waiting(&mut self) -> Option<u32> {
        let id = self.waiting.pop_least_recent(&mut self.links)?;
        Some(self.activate(id))
    }

    /// Responses waiting for a send turn.
    pub fn waiting(&self) -> u32 {
        self.waiting.len()
    }

    /// Which complete request is answered next: the oldest ready request of the
    /// least recently served range, chosen as for send turns; it becomes
    /// [`Class::Active`].
    pub fn next_ready(&mut self) -> Option<u32> {
        let id = self.ready.pop_least_recent(&mut self.links)?;
        Some(self.activate(id))
    }

    /// A connection taken off a queue by its turn is busy now.
    fn activate(&mut self, id: u32) -> u32 {
        self.class[id as usize] = Class::Active;
        id
    }

    /// Complete requests waiting to be answered.
    pub fn ready(&self) -> u32 {
        self.ready.len()
    }

    /// Which connection to close to make room: find the address range holding the
    /// most idle *and* incomplete connections together (so a range that floods the
    /// server with silent connections cannot make it give up a light range's idle
    /// keep-alive instead), and there close the oldest idle connection, else the
    /// oldest incomplete one. `None`: everyone is busy (the newcomer waits).
    pub fn victim(&self) -> Option<(u32, CloseReason)> {
        RangeTree::heaviest_oldest_of_two(&self.idle, &self.incomplete).map(|(id, idle)| {
            let why = if idle {
                CloseReason::EvictedIdle
            } else {
                CloseReason::EvictedIncomplete
            };
            (id, why)
        })
    }

    /// The oldest incomplete connection of the heaviest range (over `max_incomplete`).
    pub fn incomplete_victim(&self) -> Option<u32> {
        self.incomplete.heaviest_oldest()
    }

    pub fn incomplete(&self) -> u32 {
        self.incomplete.len()
    }

    pub fn idle(&self) -> u32 {
        self.idle.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn idle_goes_before_incomplete_and_the_busy_are_never_chosen() {
        let mut c = Conditioner::default();
        c.park(0, ip("10.0.0.1"), Class::Incomplete);
        c.park(1, ip("10.0.0.1"), Class::Idle);
        c.park(2, ip("10.0.0.3"), Class::Active);
        // Same address: its idle connection goes first.
        assert_eq!(c.victim(), Some((1, CloseReason::EvictedIdle)));
        c.forget(1, ip("10.0.0.1"));
        assert_eq!(c.victim(), Some((0, CloseReason::EvictedIncomplete)));
        c.park(0, ip("10.0.0.1"), Class::Active);
        assert_eq!(c.victim(), None);
    }

    #[test]
    fn a_flood_of_silent_connections_cannot_cost_a_light_range_its_idle_one() {
        let mut c = Conditioner::default();
        // The legitimate client's keep-alive is the only idle connection; the
        // attackers' are all incomplete. The heaviest range counts both kinds.
        c.park(0, ip("127.0.0.1"), Class::Idle);
        for id in 1..100 {
            c.park(id, ip(&format!("127.66.0.{}", id % 7)), Class::Incomplete);
        }
        // While the attacking range holds more than the legitimate one, only its
        // connections go (at one against one it is a tie).
        for _ in 1..99 {
            let (v, why) = c.victim().unwrap();
            assert_ne!(v, 0);
            assert_eq!(why, CloseReason::EvictedIncomplete);
            c.forget(v, ip(&format!("127.66.0.{}", v % 7)));
        }
        assert_eq!((c.idle(), c.incomplete()), (1, 1));
    }

    #[test]
    fn a_recently_used_idle_connection_outlives_older_ones() {
        let mut c = Conditioner::default();
        // A legitimate client's idle connection, then many held ones from elsewhere.
        c.park(0, ip("127.0.0.1"), Class::Idle);
        for id in 1..50 {
            c.park(id, ip("127.66.0.1"), Class::Idle);
        }
        // The legitimate client makes a request (Idle again at once: touch).
        c.park(0, ip("127.0.0.1"), Class::Idle);
        // While the held range is heavier, only its connections are chosen.
        for _ in 1..49 {
            let (v, _) = c.victim().unwrap();
            assert_ne!(v, 0);
            c.forget(v, ip("127.66.0.1"));
        }
        assert_eq!((c.idle(), c.incomplete()), (2, 0));
    }

    #[test]
    fn send_turns_go_by_range_and_a_waiting_response_is_never_a_victim() {
        let mut c = Conditioner::default();
        // 100 downloads from one host hold the queue; then one from elsewhere.
        for id in 0..100 {
            c.park(id, ip("127.88.0.1"), Class::Waiting);
        }
        c.park(100, ip("127.0.0.1"), Class::Waiting);
        assert_eq!(c.waiting(), 101);
        assert_eq!(c.victim(), None, "waiting responses are busy, not idle");
        // Within two turns the newcomer's response goes, not after 100.
        let two = [c.next_waiting().unwrap(), c.next_waiting().unwrap()];
        assert!(two.contains(&100), "{two:?}");
        // A response taken for its turn and queued again goes behind the others of
        // its address; a closed one leaves the queue.
        let first = two.iter().copied().find(|&x| x != 100).unwrap();
        c.park(first, ip("127.88.0.1"), Class::Waiting);
        c.forget(50, ip("127.88.0.1"));
        let mut order = Vec::new();
        while let Some(id) = c.next_waiting() {
            order.push(id);
        }
        assert_eq!(order.len(), 99);
        assert_eq!(order.last(), Some(&first));
        assert!(!order.contains(&50));
        assert_eq!(c.waiting(), 0);
    }

    #[test]
    fn ready_requests_are_answered_by_range_and_kept_apart_from_send_turns() {
        let mut c = Conditioner::default();
        // A /24 floods the worker with complete requests, and a download from the
        // same range waits for a send turn; then one request from elsewhere.
        for id in 0..50 {
            c.park(id, ip(&format!("127.66.0.{}", id % 5)), Class::Ready);
        }
        c.park(50, ip("127.66.0.9"), Class::Waiting);
        c.park(51, ip("127.0.0.1"), Class::Ready);
        assert_eq!((c.ready(), c.waiting()), (51, 1));
        assert_eq!(c.victim(), None, "complete requests are never evicted");
        let two = [c.next_ready().unwrap(), c.next_ready().unwrap()];
        assert!(two.contains(&51), "{two:?}");
        // Within the flooding range, its addresses take turns too: the next five
        // answers are one per address, not the oldest five of one.
        let five: std::collections::HashSet<u32> =
            (0..5).map(|_| c.next_ready().unwrap() % 5).collect();
        assert_eq!(five.len(), 5, "{five:?}");
        // The send queue is untouched; a closed ready request leaves its queue.
        assert_eq!(c.next_waiting(), Some(50));
        c.forget(49, ip("127.66.0.4"));
        let mut n = 0;
        while c.next_ready().is_some() {
            n += 1;
        }
        assert_eq!(n, 51 - 2 - 5 - 1);
    }
}
