//! The paper's 16-ary address tree: each node counts the members below it, so the
//! heaviest range at every level (/4, /8, …, one host) is found by descending to the
//! child with the largest count, 8 steps for IPv4 and 16 for IPv6.
//!
//! Members are connections, named by a small integer (the worker's slab key). Each
//! leaf (one host, or one IPv6 /64) keeps its members in a FIFO, oldest first, as an
//! intrusive doubly linked list whose links live in a side table indexed by the
//! member id. That keeps the connection record itself unchanged (an idle keep-alive
//! connection must stay small) and makes insert, remove and "touch" (move to the
//! young end) O(depth) or O(1) with no allocation once the nodes exist.
//!
//! Nodes are allocated lazily, only for prefixes that have members, and returned to
//! a free list when their count drops to zero, so memory follows the number of
//! distinct live addresses: at most depth nodes (88 bytes each) per address, shared
//! by common prefixes. The side table costs 12 bytes per member id.

use crate::addr::RangeKey;

const NONE: u32 = u32::MAX;

struct Node {
    count: u32,
    parent: u32,
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
            children: [NONE; 16],
            head: NONE,
            tail: NONE,
            digit,
        }
    }
}

#[derive(Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
    /// The member's leaf, or NONE when it is not in this tree.
    leaf: u32,
}

const UNLINKED: Link = Link {
    prev: NONE,
    next: NONE,
    leaf: NONE,
};

/// Counts of members by address range, with a FIFO of members per address.
pub struct RangeTree {
    nodes: Vec<Node>,
    free: Vec<u32>,
    links: Vec<Link>,
}

impl Default for RangeTree {
    fn default() -> Self {
        RangeTree {
            nodes: vec![Node::new(NONE, 0)],
            free: Vec::new(),
            links: Vec::new(),
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

    pub fn contains(&self, id: u32) -> bool {
        self.links.get(id as usize).is_some_and(|l| l.leaf != NONE)
    }

    /// Add member `id` (not already in the tree) at `key`, as the youngest there.
    pub fn insert(&mut self, id: u32, key: &RangeKey) {
        debug_assert!(!self.contains(id));
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
        if self.links.len() <= id as usize {
            self.links.resize(id as usize + 1, UNLINKED);
        }
        self.push_back(n, id);
    }

    /// Remove member `id`; false if it was not in the tree.
    pub fn remove(&mut self, id: u32) -> bool {
        let Some(&Link { leaf, .. }) = self.links.get(id as usize) else {
            return false;
        };
        if leaf == NONE {
            return false;
        }
        self.unlink(leaf, id);
        // Walk up, dropping counts and freeing nodes that became empty.
        let mut n = leaf;
        while n != 0 {
            let node = &mut self.nodes[n as usize];
            node.count -= 1;
            let (parent, digit, empty) = (node.parent, node.digit, node.count == 0);
            if empty {
                self.nodes[parent as usize].children[digit as usize] = NONE;
                self.free.push(n);
            }
            n = parent;
        }
        self.nodes[0].count -= 1;
        true
    }

    /// Make `id` the youngest member at its address (it was just used).
    pub fn touch(&mut self, id: u32) {
        let leaf = match self.links.get(id as usize) {
            Some(l) if l.leaf != NONE => l.leaf,
            _ => return,
        };
        if self.nodes[leaf as usize].tail == id {
            return;
        }
        self.unlink(leaf, id);
        self.push_back(leaf, id);
    }

    /// The oldest member of the heaviest range: descend, at every level, to the
    /// child with the most members (the lowest digit on ties), then take the oldest
    /// member of that address.
    pub fn heaviest_oldest(&self) -> Option<u32> {
        if self.is_empty() {
            return None;
        }
        let mut n = 0usize;
        loop {
            let node = &self.nodes[n];
            if node.head != NONE {
                return Some(node.head);
            }
            let mut best = NONE;
            let mut best_count = 0;
            for &c in &node.children {
                if c != NONE && self.nodes[c as usize].count > best_count {
                    best = c;
                    best_count = self.nodes[c as usize].count;
                }
            }
            if best == NONE {
                return None; // unreachable while counts are consistent
            }
            n = best as usize;
        }
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
        let (mut na, mut nb) = (Some(0usize), Some(0usize));
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

    fn push_back(&mut self, leaf: u32, id: u32) {
        let tail = self.nodes[leaf as usize].tail;
        self.links[id as usize] = Link {
            prev: tail,
            next: NONE,
            leaf,
        };
        if tail == NONE {
            self.nodes[leaf as usize].head = id;
        } else {
            self.links[tail as usize].next = id;
        }
        self.nodes[leaf as usize].tail = id;
    }

    fn unlink(&mut self, leaf: u32, id: u32) {
        let Link { prev, next, .. } = self.links[id as usize];
        if prev == NONE {
            self.nodes[leaf as usize].head = next;
        } else {
            self.links[prev as usize].next = next;
        }
        if next == NONE {
            self.nodes[leaf as usize].tail = prev;
        } else {
            self.links[next as usize].prev = prev;
        }
        self.links[id as usize] = UNLINKED;
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
        // One legitimate host, and an attacker /16 spread over many hosts, each of
        // them lighter than the legitimate one.
        t.insert(0, &key("127.0.0.1"));
        t.insert(1, &key("127.0.0.1"));
        t.insert(2, &key("127.0.0.1"));
        for host in 1..=20u32 {
            t.insert(9 + host, &key(&format!("127.66.0.{host}")));
        }
        assert_eq!(t.len(), 23);
        // 127.66/16 holds 20 of 23: while it is the heavier range its members go,
        // never 127.0.0.1's, though that one host holds more than any other.
        while t.count_at(&key("127.66.0.1"), 4) > 3 {
            let v = t.heaviest_oldest().unwrap();
            assert!((10..30).contains(&v), "evicted {v}");
            assert!(t.remove(v));
        }
        // Then the heaviest is 127.0.0.1 (3 against 3, lower digit): its oldest.
        assert_eq!(t.heaviest_oldest(), Some(0));
    }

    #[test]
    fn touch_makes_a_member_young() {
        let mut t = RangeTree::default();
        for id in 0..3 {
            t.insert(id, &key("10.0.0.1"));
        }
        t.touch(0);
        assert_eq!(t.heaviest_oldest(), Some(1));
        t.remove(1);
        assert_eq!(t.heaviest_oldest(), Some(2));
        t.remove(2);
        assert_eq!(t.heaviest_oldest(), Some(0));
    }

    #[test]
    fn counts_by_level_and_families_apart() {
        let mut t = RangeTree::default();
        t.insert(0, &key("10.1.2.3"));
        t.insert(1, &key("10.1.9.9"));
        t.insert(2, &key("10.2.0.1"));
        t.insert(3, &key("2001:db8::1"));
        let k = key("10.1.2.3");
        assert_eq!(t.count_at(&k, 2), 3); // 10/8
        assert_eq!(t.count_at(&k, 4), 2); // 10.1/16
        assert_eq!(t.count_at(&k, 6), 1); // 10.1.2/24
        assert_eq!(t.count_at(&key("2001:db8::5"), 16), 1);
        assert_eq!(t.len(), 4);
    }

    proptest::proptest! {
        /// Random inserts and removes keep the counts equal to a plain recount and
        /// never leak nodes.
        #[test]
        fn counts_stay_exact(ops in proptest::collection::vec((0u32..64, 0u8..6, proptest::bool::ANY), 1..300)) {
            let addrs = ["10.0.0.1", "10.0.0.2", "10.0.1.1", "11.0.0.1", "::1", "2001:db8::1"];
            let mut t = RangeTree::default();
            let mut model: std::collections::HashMap<u32, u8> = Default::default();
            for (id, a, add) in ops {
                if add && !model.contains_key(&id) {
                    t.insert(id, &key(addrs[a as usize]));
                    model.insert(id, a);
                } else if !add {
                    proptest::prop_assert_eq!(t.remove(id), model.remove(&id).is_some());
                }
                proptest::prop_assert_eq!(t.len() as usize, model.len());
                if let Some(v) = t.heaviest_oldest() {
                    proptest::prop_assert!(model.contains_key(&v));
                }
            }
            for id in model.keys().copied().collect::<Vec<_>>() {
                t.remove(id);
            }
            proptest::prop_assert_eq!(t.nodes.len() - 1, t.free.len(), "nodes leaked");
        }
    }
}
