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
use aho_corasick::{AhoCorasick, Anchored, Input, MatchKind, StartKind};
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Hir, HirKind, Look};
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

    fn candidates(&self, path: &str, out: &mut Vec<u32>) {
        let Some(ac) = &self.ac else { return };
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

#[derive(Default)]
pub struct Index {
    exact: KeyMap,
    exact_ci: KeyMap,
    prefix: KeyMap,
    prefix_ci: KeyMap,
    lit: LiteralIndex,
    lit_ci: LiteralIndex,
    anchored: LiteralIndex,
    anchored_ci: LiteralIndex,
    always: Vec<u32>,
    pub counts: Counts,
}

/// How the index selects one regex rule (worked out at parse time).
#[derive(Debug)]
pub enum Strategy {
    Exact(String, bool),
    /// One of these literals starts every path the regex matches.
    Anchored(Vec<Vec<u8>>, bool),
    /// One of these literals occurs in every path the regex matches.
    Literals(Vec<Vec<u8>>, bool),
    Always,
}

impl Index {
    pub fn build(rules: &mut [Rule]) -> Index {
        let mut ix = Index::default();
        let mut lits: FxHashMap<Vec<u8>, Ids> = FxHashMap::default();
        let mut lits_ci: FxHashMap<Vec<u8>, Ids> = FxHashMap::default();
        let mut anch: FxHashMap<Vec<u8>, Ids> = FxHashMap::default();
        let mut anch_ci: FxHashMap<Vec<u8>, Ids> = FxHashMap::default();
        for (i, r) in rules.iter_mut().enumerate() {
            let id = i as u32;
            if r.classify.as_ref().is_some_and(|c| c.indexed) {
                continue; // found by User-Agent or address instead (classindex)
            }
            let nocase = r.flags.nocase;
            match &mut r.pattern {
                Pattern::Exact(p) => {
                    ix.counts.exact += 1;
                    if nocase {
                        add(&mut ix.exact_ci, &p.to_ascii_lowercase(), id)
                    } else {
                        add(&mut ix.exact, p, id)
                    }
                }
                Pattern::Prefix(p) => {
                    ix.counts.prefix += 1;
                    if nocase {
                        add(&mut ix.prefix_ci, &p.to_ascii_lowercase(), id)
                    } else {
                        add(&mut ix.prefix, p, id)
                    }
                }
                Pattern::Regex(re) => {
                    match re.hint.take().map(|b| *b).unwrap_or(Strategy::Always) {
                        Strategy::Exact(p, ci) => {
                            ix.counts.exact += 1;
                            if ci {
                                add(&mut ix.exact_ci, &p.to_ascii_lowercase(), id)
                            } else {
                                add(&mut ix.exact, &p, id)
                            }
                        }
                        Strategy::Anchored(ls, ci) => {
                            ix.counts.literal += 1;
                            add_literals(if ci { &mut anch_ci } else { &mut anch }, ls, ci, id);
                        }
                        Strategy::Literals(ls, ci) => {
                            ix.counts.literal += 1;
                            add_literals(if ci { &mut lits_ci } else { &mut lits }, ls, ci, id);
                        }
                        Strategy::Always => {
                            ix.counts.always += 1;
                            ix.always.push(id);
                        }
                    }
                }
            }
        }
        ix.lit = LiteralIndex::build(lits, false, false);
        ix.lit_ci = LiteralIndex::build(lits_ci, true, false);
        ix.anchored = LiteralIndex::build(anch, false, true);
        ix.anchored_ci = LiteralIndex::build(anch_ci, true, true);
        ix.exact.shrink_to_fit();
        ix.prefix.shrink_to_fit();
        ix
    }

    /// Candidate rule indices for `path`, ascending and without duplicates.
    pub fn candidates(&self, path: &str, out: &mut Vec<u32>) {
        if let Some(ids) = self.exact.get(&key(path)) {
            ids.extend_into(out);
        }
        let lower = (!self.exact_ci.is_empty() || !self.prefix_ci.is_empty())
            .then(|| path.to_ascii_lowercase());
        if let Some(l) = &lower {
            if let Some(ids) = self.exact_ci.get(&key(l)) {
                ids.extend_into(out);
            }
        }
        if !self.prefix.is_empty() {
            probe_prefixes(&self.prefix, path, out);
        }
        if let Some(l) = &lower {
            if !self.prefix_ci.is_empty() {
                probe_prefixes(&self.prefix_ci, l, out);
            }
        }
        self.anchored.candidates(path, out);
        self.anchored_ci.candidates(path, out);
        self.lit.candidates(path, out);
        self.lit_ci.candidates(path, out);
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

/// Literal sets larger than this are not worth indexing.
const MAX_LITERALS: usize = 32;

/// Pick the strategy for a regex from its (case-sensitive) parse. Case-insensitive
/// rules (NC) are indexed with an ASCII-case-insensitive automaton; matching is
/// ASCII-only too (like Apache's PCRE), so a match always contains the literal.
pub fn classify(hir: &Hir, strip_slash: bool, ci: bool) -> Strategy {
    if let Some(lit) = anchored_literal(hir) {
        let path = if strip_slash { format!("/{lit}") } else { lit };
        return Strategy::Exact(path, ci);
    }
    let usable = |kind: ExtractKind| -> Option<(usize, Vec<Vec<u8>>)> {
        let mut ex = Extractor::new();
        ex.kind(kind);
        let seq = ex.extract(hir);
        let lits = seq.literals()?;
        if lits.is_empty()
            || lits.len() > MAX_LITERALS
            || lits.iter().any(|l| l.as_bytes().is_empty())
        {
            return None;
        }
        let min = lits.iter().map(|l| l.as_bytes().len()).min().unwrap_or(0);
        Some((min, lits.iter().map(|l| l.as_bytes().to_vec()).collect()))
    };
    let prefix = usable(ExtractKind::Prefix);
    // `^`-anchored with a literal prefix (most redirect rules): the most selective
    // key there is, and the cheapest to search.
    if hir.properties().look_set_prefix().contains(Look::Start) {
        if let Some((_, ls)) = &prefix {
            let ls = if strip_slash {
                ls.iter().map(|l| [b"/".as_slice(), l].concat()).collect()
            } else {
                ls.clone()
            };
            return Strategy::Anchored(ls, ci);
        }
    }
    // Otherwise the longer of the prefix and suffix literal sets, searched anywhere.
    let best = [prefix, usable(ExtractKind::Suffix)]
        .into_iter()
        .flatten()
        .max_by_key(|(min, _)| *min);
    match best {
        // One-byte literals (like "/") would make every path a candidate.
        Some((min, ls)) if min >= 2 => Strategy::Literals(ls, ci),
        _ => Strategy::Always,
    }
}

/// `^literal$` (no groups, no classes) → the literal.
fn anchored_literal(hir: &Hir) -> Option<String> {
    let HirKind::Concat(parts) = hir.kind() else {
        return None;
    };
    if parts.len() != 3 {
        return None;
    }
    let start = matches!(parts[0].kind(), HirKind::Look(Look::Start));
    let end = matches!(parts[2].kind(), HirKind::Look(Look::End));
    match parts[1].kind() {
        HirKind::Literal(l) if start && end => String::from_utf8(l.0.to_vec()).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(src: &str, strip_slash: bool) -> Strategy {
        let (s, ci) = match src.strip_prefix("(?i)") {
            Some(s) => (s, true),
            None => (src, false),
        };
        let hir = regex_syntax::ParserBuilder::new()
            .unicode(false)
            .utf8(false)
            .build()
            .parse(s)
            .unwrap();
        super::classify(&hir, strip_slash, ci)
    }

    #[test]
    fn strategies() {
        assert!(
            matches!(classify(r"^/a/b\.html$", false), Strategy::Exact(p, false) if p == "/a/b.html")
        );
        assert!(matches!(classify(r"(?i)^/A$", false), Strategy::Exact(p, true) if p == "/A"));
        assert!(
            matches!(classify(r"^old\.html$", true), Strategy::Exact(p, false) if p == "/old.html")
        );
        assert!(
            matches!(classify(r"^/docs/(.*)$", false), Strategy::Anchored(l, false) if l == vec![b"/docs/".to_vec()])
        );
        assert!(matches!(classify(r"\.php$", false), Strategy::Literals(..)));
        assert!(matches!(
            classify(r"^/(.*)$", false),
            Strategy::Anchored(..)
        ));
        assert!(
            matches!(classify(r"^docs/(.*)$", true), Strategy::Anchored(l, false) if l == vec![b"/docs/".to_vec()])
        );
        assert!(matches!(
            classify(r"/docs/(.*)$", false),
            Strategy::Literals(..)
        ));
        assert!(matches!(classify(r"^(.*)$", false), Strategy::Always));
        assert!(matches!(classify(r".*", false), Strategy::Always));
    }
}
