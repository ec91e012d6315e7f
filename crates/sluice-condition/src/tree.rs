//! The paper's 16-ary address tree: each node counts the members below it, so the
//! heaviest range at every level (/4, /8, …, one host) is found by descending to the
//! child with the largest count, 8 steps for IPv4 and 16 for IPv6.
//!
//! Members are connections, named by a small integer (the worker's slab key). Each
//! leaf (one host, or one IPv6 /64) keeps its members in a FIFO, oldest first, as an
//! intrusive doubly linked list whose links ([`Links`]) live in a side table indexed
//! by the member id, owned by the caller and shared by all its trees (a connection is
//! in one tree at a time): 12 bytes per connection slot. That keeps the connection
//! record itself unchanged (an idle keep-alive connection must stay small) and makes
//! insert and remove O(depth) with no allocation once the nodes exist. A link also
//! remembers its member's leaf, so "touch" (move to the young end), which every
//! keep-alive request makes, is O(1): the 9-step descent it replaced was ~4% of a
//! small request's user-space instructions (`bench/user_instr.sh`).
//!
//! Nodes are allocated lazily, only for prefixes that have members, and returned to
//! a free list when their count drops to zero, so memory follows the number of
//! distinct live addresses: at most depth nodes (88 bytes each) per address, shared
//! by common prefixes.

use crate::addr::RangeKey;

const NONE: u32 = u32::MAX;

struct Node {
    count: u32,
    parent: u32,
    /// When a member at or below this node was last taken by
    /// [`RangeTree::pop_least_recent`] (the tree's own clock; 0 = never).
    served: u64,
    children: [u32; 16],
    /// Leaf only: the oldest and youngest member.
    head: u32,
    tail: u32,
    digit: u8,
}

impl Node {
    fn new(parent: u32, digit: u8) -> Node {
        Node {
            count: 0,
            parent,
            served: 0,
            children: [NONE; 16],
            head: NONE,
            tail: NONE,
            digit,
        }
    }
}

/// One member's neighbours in its address's FIFO.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    prev: u32,
    next: u32,
    /// The leaf the member is linked at (`NONE` when unlinked).
    leaf: u32,
}

const UNLINKED: Link = Link {
    prev: NONE,
    next: NONE,
    leaf: NONE,
};

/// The side table of links, indexed by member id; one may serve several trees as
/// long as a member is in at most one of them.
#[derive(Default)]
pub struct Links(Vec<Link>);

impl Links {
    pub fn with_capacity(n: usize) -> Links {
        Links(Vec::with_capacity(n))
    }
}

/// Counts of members by address range, with a FIFO of members per address.
pub struct RangeTree {
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// Ticks once per [`RangeTree::pop_least_recent`].
    clock: u64,
    /// Empty nodes kept by `pop_least_recent`, freed by `prune`.
    kept: u32,
}

impl Default for RangeTree {
    fn default() -> Self {
        RangeTree {
            nodes: vec![Node::new(NONE, 0)],
            free: Vec::new(),
            clock: 0,
            kept: 0,
        }
    }
}

impl RangeTree {
    /// Members in the whole tree.
    pub fn len(&self) -> u32 {
        self.nodes[0].count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Add member `id` (not already in the tree) at `key`, as the youngest there.
    pub fn insert(&mut self, links: &mut Links, id: u32, key: &RangeKey) {
        let mut n = 0u32;
        self.nodes[0].count += 1;
        // Family first, then the address nibbles.
        for &d in std::iter::once(&key.family).chain(key.digits()) {
            let child = self.nodes[n as usize].children[d as usize];
            n = if child != NONE {
                child
            } else {
                let c = self.alloc(n, d);
                self.nodes[n as usize].children[d as usize] = c;
                c
            };
            self.nodes[n as usize].count += 1;
        }
        if links.0.len() <= id as usize {
            links.0.resize(id as usize + 1, UNLINKED);
        }
        self.push_back(links, n, id);
    }

    /// The leaf of `key`, if the tree has members there.
    fn leaf_of(&self, key: &RangeKey) -> Option<u32> {
        let mut n = 0u32;
        for &d in std::iter::once(&key.family).chain(key.digits()) {
            let c = self.nodes[n as usize].children[d as usize];
            if c == NONE {
                return None;
            }
            n = c;
        }
        Some(n)
    }

    /// Remove member `id`, which the caller knows is in this tree at `key`.
    pub fn remove(&mut self, links: &mut Links, id: u32, key: &RangeKey) {
        let Some(leaf) = self.leaf_of(key) else {
            debug_assert!(false, "removing {id}: no leaf for its address");
            return;
        };
        self.remove_at(links, leaf, id, false);
    }

    /// The paper's recency-based choice: descend, at every level, to the non-empty
    /// child served least recently (never served first; the lowest digit on ties),
    /// take the oldest member of that address, stamp the path as just served, and
    /// remove the member. So with one range holding 200 waiting members and another
    /// holding one, the one is taken first or second, not 200th: ranges take turns
    /// at every level, and members of one address take turns in arrival order.
    ///
    /// The stamps are per node. Nodes this leaves empty are kept, stamps and all,
    /// so a member queued again at once (a response with more to send) is behind
    /// the ranges that have not had a turn; they are freed in batches
    /// (`RangeTree::prune`), after which a range coming back counts as never
    /// served, which only ever favours a range that was not waiting. Cost: one path (9 nodes for IPv4), 16 children scanned
    /// at each (the scan stands in for the paper's LRU child lists: same order, no
    /// list to maintain on every insert).
    pub fn pop_least_recent(&mut self, links: &mut Links) -> Option<u32> {
        let mut n = 0usize;
        self.clock += 1;
        let now = self.clock;
        loop {
            self.nodes[n].served = now;
            let head = self.nodes[n].head;
            if head != NONE {
                // Keep the emptied nodes and their stamps: a member served and
                // queued again at once must find its address marked as just served.
                self.remove_at(links, n as u32, head, true);
                if self.kept > 9 * 512 {
                    self.prune();
                }
                return Some(head);
            }
            let mut best = NONE;
            let mut best_at = u64::MAX;
            for &c in &self.nodes[n].children {
                if c != NONE
                    && self.nodes[c as usize].count > 0
                    && self.nodes[c as usize].served < best_at
                {
                    best = c;
                    best_at = self.nodes[c as usize].served;
                }
            }
            if best == NONE {
                return None;
            }
            n = best as usize;
        }
    }

    /// Unlink `id` from `leaf`'s FIFO and drop the counts on the way up.
    /// With `keep`, nodes left empty stay in place (with their stamps) until the
    /// next [`RangeTree::prune`]; otherwise they are freed at once.
    fn remove_at(&mut self, links: &mut Links, leaf: u32, id: u32, keep: bool) {
        self.unlink(links, leaf, id);
        // Walk up, dropping counts and freeing nodes that became empty.
        let mut n = leaf;
        while n != 0 {
            let node = &mut self.nodes[n as usize];
            node.count -= 1;
            let (parent, digit, empty) = (node.parent, node.digit, node.count == 0);
            if empty {
                if keep {
                    self.kept += 1;
                } else {
                    self.nodes[parent as usize].children[digit as usize] = NONE;
                    self.free.push(n);
                }
            }
            n = parent;
        }
        self.nodes[0].count -= 1;
    }

    /// Free every empty node kept by [`RangeTree::pop_least_recent`] (whole empty
    /// subtrees: a node's count is the sum of its children's). Run when there are
    /// as many kept nodes as a full tree of 512 addresses would have, so the cost is
    /// amortized over at least that many pops.
    fn prune(&mut self) {
        let mut stack = vec![0u32];
        while let Some(n) = stack.pop() {
            for d in 0..16 {
                let c = self.nodes[n as usize].children[d];
                if c == NONE {
                    continue;
                }
                if self.nodes[c as usize].count == 0 {
                    self.nodes[n as usize].children[d] = NONE;
                    // Its whole subtree is empty: free it all.
                    let mut dead = vec![c];
                    while let Some(x) = dead.pop() {
                        dead.extend(
                            self.nodes[x as usize]
                                .children
                                .iter()
                                .filter(|&&y| y != NONE),
                        );
                        self.free.push(x);
                    }
                } else {
                    stack.push(c);
                }
            }
        }
        self.kept = 0;
    }

    /// Make `id` (a member of this tree) the youngest member at its address.
    pub fn touch(&mut self, links: &mut Links, id: u32) {
        let Some(&Link { leaf, .. }) = links.0.get(id as usize) else {
            return;
        };
        if leaf == NONE || self.nodes[leaf as usize].tail == id {
            return;
        }
        self.unlink(links, leaf, id);
        self.push_back(links, leaf, id);
    }

    /// The oldest member of the heaviest range: descend, at every level, to the
    /// child with the most members (the lowest digit on ties), then take the oldest
    /// member of that address.
    pub fn heaviest_oldest(&self) -> Option<u32> {
        Self::descend(self, None).map(|(id, _)| id)
    }

    /// Members at or below the range `key` truncated to `depth` address digits.
    pub fn count_at(&self, key: &RangeKey, depth: usize) -> u32 {
        let mut n = 0usize;
        for &d in std::iter::once(&key.family).chain(&key.digits()[..depth.min(key.len as usize)]) {
            let c = self.nodes[n].children[d as usize];
            if c == NONE {
                return 0;
            }
            n = c as usize;
        }
        self.nodes[n].count
    }

    /// Like [`RangeTree::heaviest_oldest`], over two trees at once: the heaviest
    /// range by the *sum* of both trees' counts, then at that address the oldest
    /// member of `a` if it has one there, else the oldest of `b`. Returns the member
    /// and whether it came from `a`. (Used with `a` = idle and `b` = incomplete
    /// connections: the range to give up a connection is the one holding the most
    /// of either kind, and there an idle connection goes before an incomplete one.)
    pub fn heaviest_oldest_of_two(a: &RangeTree, b: &RangeTree) -> Option<(u32, bool)> {
        Self::descend(a, Some(b))
    }

    /// The descent behind both: through `a` and, in step, `b` (if any), by the sum
    /// of their counts.
    fn descend(a: &RangeTree, b: Option<&RangeTree>) -> Option<(u32, bool)> {
        const EMPTY: &RangeTree = &RangeTree {
            nodes: Vec::new(),
            free: Vec::new(),
            clock: 0,
            kept: 0,
        };
        let (b, mut nb) = match b {
            Some(b) => (b, Some(0usize)),
            None => (EMPTY, None),
        };
        let mut na = Some(0usize);
        loop {
            let head =
                |t: &RangeTree, n: Option<usize>| n.map(|n| t.nodes[n].head).filter(|&h| h != NONE);
            if let Some(h) = head(a, na) {
                return Some((h, true));
            }
            if let Some(h) = head(b, nb) {
                return Some((h, false));
            }
            let child = |t: &RangeTree, n: Option<usize>, d: usize| {
                n.map(|n| t.nodes[n].children[d])
                    .filter(|&c| c != NONE)
                    .map(|c| c as usize)
            };
            let count = |t: &RangeTree, c: Option<usize>| c.map_or(0, |c| t.nodes[c].count);
            let mut best = None;
            let mut best_count = 0;
            for d in 0..16 {
                let total = count(a, child(a, na, d)) + count(b, child(b, nb, d));
                if total > best_count {
                    best = Some(d);
                    best_count = total;
                }
            }
            let d = best?;
            na = child(a, na, d);
            nb = child(b, nb, d);
        }
    }

    fn alloc(&mut self, parent: u32, digit: u8) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = Node::new(parent, digit);
                i
            }
            None => {
                self.nodes.push(Node::new(parent, digit));
                (self.nodes.len() - 1) as u32
            }
        }
    }

    fn push_back(&mut self, links: &mut Links, leaf: u32, id: u32) {
        let tail = self.nodes[leaf as usize].tail;
        links.0[id as usize] = Link {
            prev: tail,
            next: NONE,
            leaf,
        };
        if tail == NONE {
            self.nodes[leaf as usize].head = id;
        } else {
            links.0[tail as usize].next = id;
        }
        self.nodes[leaf as usize].tail = id;
    }

    fn unlink(&mut self, links: &mut Links, leaf: u32, id: u32) {
        let Link { prev, next, .. } = links.0[id as usize];
        if prev == NONE {
            self.nodes[leaf as usize].head = next;
        } else {
            links.0[prev as usize].next = next;
        }
        if next == NONE {
            self.nodes[leaf as usize].tail = prev;
        } else {
            links.0[next as usize].prev = prev;
        }
        links.0[id as usize] = UNLINKED;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> RangeKey {
        RangeKey::of(s.parse().unwrap())
    }

    #[test]
    fn the_heaviest_range_loses_its_oldest_member() {
        let mut t = RangeTree::default();
        let mut l = Links::default();
        let mut addr = std::collections::HashMap::new();
        // One legitimate host, and an attacker /16 spread over many hosts, each of
        // them lighter than the legitimate one.
        for id in 0..3 {
            t.insert(&mut l, id, &key("127.0.0.1"));
            addr.insert(id, key("127.0.0.1"));
        }
        for host in 1..=20u32 {
            let k = key(&format!("127.66.0.{host}"));
            t.insert(&mut l, 9 + host, &k);
            addr.insert(9 + host, k);
        }
        assert_eq!(t.len(), 23);
        // 127.66/16 holds 20 of 23: while it is the heavier range its members go,
        // never 127.0.0.1's, though that one host holds more than any other.
        while t.count_at(&key("127.66.0.1"), 4) > 3 {
            let v = t.heaviest_oldest().unwrap();
            assert!((10..30).contains(&v), "evicted {v}");
            t.remove(&mut l, v, &addr[&v]);
        }
        // Then the heaviest is 127.0.0.1 (3 against 3, lower digit): its oldest.
        assert_eq!(t.heaviest_oldest(), Some(0));
    }

    #[test]
    fn the_least_recently_served_range_goes_next() {
        let mut t = RangeTree::default();
        let mut l = Links::default();
        // 256 waiting from one /24 (four on each of 64 hosts), then one from
        // elsewhere.
        for id in 0..256u32 {
            t.insert(&mut l, id, &key(&format!("127.66.0.{}", id % 64)));
        }
        t.insert(&mut l, 500, &key("127.0.0.1"));
        // Neither range has been served: the one is taken first or second (ties go
        // to the lower digit), never behind the 256.
        let first: Vec<u32> = (0..65)
            .map(|_| t.pop_least_recent(&mut l).unwrap())
            .collect();
        assert!(first[..2].contains(&500), "{:?}", &first[..2]);
        // Inside the /24 the turns go round at every level (the four groups of 16
        // hosts, then the hosts in each): 64 turns reach all 64 hosts.
        let hosts: std::collections::HashSet<u32> =
            first.iter().filter(|&&x| x < 256).map(|x| x % 64).collect();
        assert_eq!(hosts.len(), 64);
        let mut left = 0;
        while t.pop_least_recent(&mut l).is_some() {
            left += 1;
        }
        assert_eq!(left, 257 - 65);
        assert!(t.is_empty());
        assert_eq!(t.pop_least_recent(&mut l), None);
    }

    #[test]
    fn nodes_kept_by_pops_are_pruned_and_reused() {
        let mut t = RangeTree::default();
        let mut l = Links::default();
        let keys: Vec<RangeKey> = (0..3000u32)
            .map(|i| key(&format!("10.{}.{}.{}", i % 7, (i / 7) % 251, i % 250)))
            .collect();
        for round in 0..3 {
            for (id, k) in keys.iter().enumerate() {
                t.insert(&mut l, id as u32, k);
            }
            let mut seen = 0;
            while let Some(id) = t.pop_least_recent(&mut l) {
                assert!((id as usize) < keys.len());
                seen += 1;
            }
            assert_eq!(seen, keys.len(), "round {round}");
            assert!(t.is_empty());
            // Pruning ran (3000 addresses leave far more than 9 × 512 kept nodes),
            // so the node table does not grow round after round.
            assert!(t.kept <= 9 * 512, "{}", t.kept);
            assert!(t.nodes.len() < 3000 * 9, "{}", t.nodes.len());
        }
        // A member inserted after the pops is found and removed normally.
        t.insert(&mut l, 1, &keys[1]);
        t.remove(&mut l, 1, &keys[1]);
        assert!(t.is_empty());
    }

    #[test]
    fn a_requeued_member_waits_behind_other_ranges() {
        let mut t = RangeTree::default();
        let mut l = Links::default();
        let (a, b, c) = (key("10.0.0.1"), key("10.0.0.2"), key("192.168.1.1"));
        t.insert(&mut l, 1, &a);
        t.insert(&mut l, 2, &b);
        t.insert(&mut l, 3, &c);
        let mut order = Vec::new();
        for _ in 0..6 {
            let id = t.pop_least_recent(&mut l).unwrap();
            order.push(id);
            // A response with more to send queues again at once.
            let k = [a, b, c][id as usize - 1];
            t.insert(&mut l, id, &k);
        }
        // 10/8 and 192/8 alternate; inside 10/8 the two hosts alternate.
        assert_eq!(order, [1, 3, 2, 3, 1, 3]);
    }

    #[test]
    fn touch_makes_a_member_young() {
        let mut t = RangeTree::default();
        let mut l = Links::default();
        let k = key("10.0.0.1");
        for id in 0..3 {
            t.insert(&mut l, id, &k);
        }
        t.touch(&mut l, 0);
        assert_eq!(t.heaviest_oldest(), Some(1));
        t.remove(&mut l, 1, &k);
        assert_eq!(t.heaviest_oldest(), Some(2));
        t.remove(&mut l, 2, &k);
        assert_eq!(t.heaviest_oldest(), Some(0));
    }

    #[test]
    fn counts_by_level_and_families_apart() {
        let mut t = RangeTree::default();
        let mut l = Links::default();
        t.insert(&mut l, 0, &key("10.1.2.3"));
        t.insert(&mut l, 1, &key("10.1.9.9"));
        t.insert(&mut l, 2, &key("10.2.0.1"));
        t.insert(&mut l, 3, &key("2001:db8::1"));
        let k = key("10.1.2.3");
        assert_eq!(t.count_at(&k, 2), 3); // 10/8
        assert_eq!(t.count_at(&k, 4), 2); // 10.1/16
        assert_eq!(t.count_at(&k, 6), 1); // 10.1.2/24
        assert_eq!(t.count_at(&key("2001:db8::5"), 16), 1);
        assert_eq!(t.len(), 4);
    }

    proptest::proptest! {
        /// Random inserts, touches and removes keep the counts equal to a plain
        /// recount, always pick a live member, and never leak nodes.
        #[test]
        fn counts_stay_exact(ops in proptest::collection::vec((0u32..64, 0u8..6, 0u8..3), 1..300)) {
            let addrs = ["10.0.0.1", "10.0.0.2", "10.0.1.1", "11.0.0.1", "::1", "2001:db8::1"];
            let mut t = RangeTree::default();
            let mut l = Links::default();
            let mut model: std::collections::HashMap<u32, u8> = Default::default();
            for (id, a, op) in ops {
                match (op, model.get(&id).copied()) {
                    (0, None) => {
                        t.insert(&mut l, id, &key(addrs[a as usize]));
                        model.insert(id, a);
                    }
                    (1, Some(at)) => {
                        t.remove(&mut l, id, &key(addrs[at as usize]));
                        model.remove(&id);
                    }
                    (2, Some(_)) => t.touch(&mut l, id),
                    _ => {}
                }
                proptest::prop_assert_eq!(t.len() as usize, model.len());
                if let Some(v) = t.heaviest_oldest() {
                    proptest::prop_assert!(model.contains_key(&v));
                }
            }
            for (id, at) in model.clone() {
                t.remove(&mut l, id, &key(addrs[at as usize]));
            }
            proptest::prop_assert_eq!(t.nodes.len() - 1, t.free.len(), "nodes leaked");
        }
    }
}
