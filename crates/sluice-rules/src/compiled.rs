//! The compiled index: which rules can possibly match a path, found without looking
//! at the others.
//!
//! Every rule lands in the cheapest strategy that can select it (the ripgrep globset
//! idea):
//! - **exact**: a hash map from path to rule (also regexes that are `^literal$`);
//! - **prefix**: `Redirect`-style segment prefixes in a hash map, probed with each
//!   of the request path's own segment prefixes (2 × depth + 1 probes);
//! - **literal-indexed regex**: for each regex, a set of literals one of which must
//!   occur in any path it matches (its prefix or suffix literals, from
//!   `regex-syntax`); one Aho-Corasick pass over the path yields the candidates;
//! - **always**: regexes with no usable literal (e.g. `.*`), tried on every request.
//!
//! A lookup gathers candidate indices from all four, sorts them, and runs the full
//! check ([`crate::model::Rule::check`]) in index order, so the first rule in file
//! order wins exactly as in the linear reference. Per-request cost: O(path length +
//! candidates + always-list), independent of the number of exact, prefix and
//! literal-indexed rules.

use crate::model::{Pattern, Rule};
use crate::strategy::Strategy;
use aho_corasick::{AhoCorasick, Anchored, Input, MatchKind, StartKind};
use rustc_hash::FxHashMap;

/// Rule indices sharing one key. Most keys name one rule; store it inline.
#[derive(Debug, Clone)]
enum Ids {
    One(u32),
    Many(Box<[u32]>),
}

impl Ids {
    fn push(&mut self, id: u32) {
        *self = match std::mem::replace(self, Ids::One(0)) {
            Ids::One(a) => Ids::Many(vec![a, id].into_boxed_slice()),
            Ids::Many(v) => {
                let mut v = v.into_vec();
                v.push(id);
                Ids::Many(v.into_boxed_slice())
            }
        }
    }
    fn extend_into(&self, out: &mut Vec<u32>) {
        match self {
            Ids::One(a) => out.push(*a),
            Ids::Many(v) => out.extend_from_slice(v),
        }
    }
}

/// Index rule `id` under each of its literals (lowercased for case-insensitive sets).
fn add_literals(target: &mut FxHashMap<Vec<u8>, Ids>, ls: Vec<Vec<u8>>, ci: bool, id: u32) {
    for l in ls {
        let l = if ci { l.to_ascii_lowercase() } else { l };
        match target.get_mut(&l) {
            Some(ids) => ids.push(id),
            None => {
                target.insert(l, Ids::One(id));
            }
        }
    }
}

/// Exact and prefix keys are stored as 64-bit hashes, not strings: the rule's own
/// check compares the text anyway, so a collision only adds a candidate, and a
/// million exact rules do not keep every path twice.
type KeyMap = FxHashMap<u64, Ids>;

fn key(s: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<rustc_hash::FxHasher>::default().hash_one(s.as_bytes())
}

fn add(map: &mut KeyMap, k: &str, id: u32) {
    match map.get_mut(&key(k)) {
        Some(ids) => ids.push(id),
        None => {
            map.insert(key(k), Ids::One(id));
        }
    }
}

#[derive(Default)]
struct LiteralIndex {
    ac: Option<AhoCorasick>,
    /// Aho-Corasick pattern id → rules that need that literal.
    rules: Vec<Ids>,
    /// Anchored indexes only: pattern id → the longest other literal that is a
    /// prefix of it (`NONE` if none). An anchored search finds the longest literal
    /// that starts the path; this chain yields all the shorter ones. (Aho-Corasick
    /// cannot do anchored *overlapping* searches, and does not need to here.)
    parent: Vec<u32>,
    anchored: bool,
}

const NONE: u32 = u32::MAX;

impl LiteralIndex {
    fn build(
        lits: FxHashMap<Vec<u8>, Ids>,
        case_insensitive: bool,
        anchored: bool,
    ) -> LiteralIndex {
        if lits.is_empty() {
            return LiteralIndex::default();
        }
        let (pats, rules): (Vec<Vec<u8>>, Vec<Ids>) = lits.into_iter().unzip();
        let mut b = AhoCorasick::builder();
        b.ascii_case_insensitive(case_insensitive);
        let mut parent = Vec::new();
        if anchored {
            // Anchored: the search walks only as far as the path's prefix matches a
            // literal, so a miss costs a byte or two whatever the number of rules.
            b.start_kind(StartKind::Anchored)
                .match_kind(MatchKind::LeftmostLongest);
            let id: FxHashMap<&[u8], u32> = pats
                .iter()
                .enumerate()
                .map(|(i, p)| (p.as_slice(), i as u32))
                .collect();
            parent = pats
                .iter()
                .map(|p| {
                    (1..p.len())
                        .rev()
                        .find_map(|n| id.get(&p[..n]).copied())
                        .unwrap_or(NONE)
                })
                .collect();
        }
        let ac = b.build(&pats).ok();
        LiteralIndex {
            ac,
            rules,
            parent,
            anchored,
        }
    }

    #[inline]
    fn candidates(&self, path: &str, out: &mut Vec<u32>) {
        if let Some(ac) = &self.ac {
            self.search(ac, path, out);
        }
    }

    /// The rules of every literal the automaton finds in `path` (out of line: most
    /// rule sets leave some of the four literal indexes empty).
    fn search(&self, ac: &AhoCorasick, path: &str, out: &mut Vec<u32>) {
        if self.anchored {
            if let Ok(Some(m)) = ac.try_find(Input::new(path).anchored(Anchored::Yes)) {
                let mut k = m.pattern().as_usize() as u32;
                while k != NONE {
                    self.rules[k as usize].extend_into(out);
                    k = self.parent[k as usize];
                }
            }
        } else {
            for m in ac.find_overlapping_iter(path) {
                self.rules[m.pattern().as_usize()].extend_into(out);
            }
        }
    }
}

/// How many rules went to each strategy (logged at load, shown by `explain`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub exact: usize,
    pub prefix: usize,
    pub literal: usize,
    pub always: usize,
}

/// One structure per case mode: rules without NC are keyed as written, NC rules
/// lowercased (and literal automata built ASCII-case-insensitive).
#[derive(Default)]
struct CaseSplit<T> {
    exact: T,
    nocase: T,
}

impl<T> CaseSplit<T> {
    fn pick(&mut self, nocase: bool) -> &mut T {
        if nocase {
            &mut self.nocase
        } else {
            &mut self.exact
        }
    }
    fn map<U>(self, f: impl Fn(T, bool) -> U) -> CaseSplit<U> {
        CaseSplit {
            exact: f(self.exact, false),
            nocase: f(self.nocase, true),
        }
    }
}

/// Insert `k` (lowercased for NC rules) into the map of its case mode.
fn add_key(maps: &mut CaseSplit<KeyMap>, k: &str, nocase: bool, id: u32) {
    if nocase {
        add(maps.pick(true), &k.to_ascii_lowercase(), id)
    } else {
        add(maps.pick(false), k, id)
    }
}

#[derive(Default)]
pub struct Index {
    exact: CaseSplit<KeyMap>,
    prefix: CaseSplit<KeyMap>,
    anchored: CaseSplit<LiteralIndex>,
    literals: CaseSplit<LiteralIndex>,
    always: Vec<u32>,
    pub counts: Counts,
}

impl Index {
    pub fn build(rules: &mut [Rule]) -> Index {
        let mut ix = Index::default();
        type Lits = FxHashMap<Vec<u8>, Ids>;
        let mut anchored: CaseSplit<Lits> = CaseSplit::default();
        let mut literals: CaseSplit<Lits> = CaseSplit::default();
        for (i, r) in rules.iter_mut().enumerate() {
            let id = i as u32;
            if r.classify.as_ref().is_some_and(|c| c.indexed) {
                continue; // found by User-Agent or address instead (classindex)
            }
            let nocase = r.flags.nocase;
            match &mut r.pattern {
                Pattern::Exact(p) => {
                    ix.counts.exact += 1;
                    add_key(&mut ix.exact, p, nocase, id);
                }
                Pattern::Prefix(p) => {
                    ix.counts.prefix += 1;
                    add_key(&mut ix.prefix, p, nocase, id);
                }
                Pattern::Regex(re) => {
                    match re.hint.take().map(|b| *b).unwrap_or(Strategy::Always) {
                        Strategy::Exact { path, nocase } => {
                            ix.counts.exact += 1;
                            add_key(&mut ix.exact, &path, nocase, id);
                        }
                        Strategy::Anchored {
                            literals: ls,
                            nocase,
                        } => {
                            ix.counts.literal += 1;
                            add_literals(anchored.pick(nocase), ls, nocase, id);
                        }
                        Strategy::Literals {
                            literals: ls,
                            nocase,
                        } => {
                            ix.counts.literal += 1;
                            add_literals(literals.pick(nocase), ls, nocase, id);
                        }
                        Strategy::Always => {
                            ix.counts.always += 1;
                            ix.always.push(id);
                        }
                    }
                }
            }
        }
        ix.anchored = anchored.map(|l, ci| LiteralIndex::build(l, ci, true));
        ix.literals = literals.map(|l, ci| LiteralIndex::build(l, ci, false));
        for m in [
            &mut ix.exact.exact,
            &mut ix.exact.nocase,
            &mut ix.prefix.exact,
            &mut ix.prefix.nocase,
        ] {
            m.shrink_to_fit();
        }
        ix
    }

    /// Candidate rule indices for `path`, ascending and without duplicates.
    pub fn candidates(&self, path: &str, out: &mut Vec<u32>) {
        // Each structure is probed only when it holds rules: a set of "always"
        // rules alone (`RewriteRule ^ …` behind a map) hashes nothing here.
        if !self.exact.exact.is_empty() {
            if let Some(ids) = self.exact.exact.get(&key(path)) {
                ids.extend_into(out);
            }
        }
        let lower = (!self.exact.nocase.is_empty() || !self.prefix.nocase.is_empty())
            .then(|| path.to_ascii_lowercase());
        if let Some(l) = &lower {
            if let Some(ids) = self.exact.nocase.get(&key(l)) {
                ids.extend_into(out);
            }
        }
        if !self.prefix.exact.is_empty() {
            probe_prefixes(&self.prefix.exact, path, out);
        }
        if let Some(l) = &lower {
            if !self.prefix.nocase.is_empty() {
                probe_prefixes(&self.prefix.nocase, l, out);
            }
        }
        for ix in [&self.anchored, &self.literals] {
            ix.exact.candidates(path, out);
            ix.nocase.candidates(path, out);
        }
        out.extend_from_slice(&self.always);
        if out.len() > 1 {
            out.sort_unstable();
            out.dedup();
        }
    }
}

/// Probe every key a segment-prefix rule could have for this path: the path itself,
/// and at each `/`, the text before it and the text through it.
fn probe_prefixes(map: &KeyMap, path: &str, out: &mut Vec<u32>) {
    if let Some(ids) = map.get(&key(path)) {
        ids.extend_into(out);
    }
    for (k, b) in path.bytes().enumerate() {
        if b == b'/' {
            if k > 0 {
                if let Some(ids) = map.get(&key(&path[..k])) {
                    ids.extend_into(out);
                }
            }
            if k + 1 < path.len() {
                if let Some(ids) = map.get(&key(&path[..=k])) {
                    ids.extend_into(out);
                }
            }
        }
    }
}
