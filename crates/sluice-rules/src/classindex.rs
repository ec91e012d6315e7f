//! Indexes for classification rules, so that ten thousand `ua=` and `addr=` rules
//! cost ordinary traffic what ten do.
//!
//! A classification rule usually matches every path (`prefix / deny ua=...`): in
//! the path index it would be a candidate for every request, and its regex would run
//! on every request. Instead, a rule whose `ua=` regex has a required literal is
//! found through that literal (one Aho-Corasick scan of the User-Agent finds every
//! such rule whose literal occurs), and a rule with `addr=` ranges through a hash of
//! the client address truncated to each prefix length in use. Each candidate is then
//! checked in full (`Rule::check`), in rank order with the path index's candidates,
//! so which rule wins never depends on how it was found. Rules with neither stay in
//! the path index.
//!
//! Cost per request: one scan of the User-Agent (linear in its length) when any rule
//! is in the UA index, and one hash lookup per distinct prefix length when any rule
//! is in the address index.

use crate::model::Rule;
use crate::strategy::Strategy;
use aho_corasick::AhoCorasick;
use rustc_hash::FxHashMap;
use std::net::IpAddr;

#[derive(Default)]
pub struct ClassIndex {
    ua: Option<AhoCorasick>,
    /// Pattern id in `ua` → rules.
    ua_rules: Vec<Vec<u32>>,
    /// (prefix length, is IPv4, masked address) → rules.
    nets: FxHashMap<(u8, bool, u128), Vec<u32>>,
    /// Distinct (prefix length, is IPv4) pairs in `nets`.
    lens: Vec<(u8, bool)>,
    pub count: usize,
}

impl ClassIndex {
    /// Take the rules this index can find out of the path index's hands (marks
    /// them `indexed`).
    pub fn build(rules: &mut [Rule]) -> ClassIndex {
        let mut ix = ClassIndex::default();
        let mut lits: FxHashMap<Vec<u8>, Vec<u32>> = FxHashMap::default();
        for (i, r) in rules.iter_mut().enumerate() {
            let Some(c) = r.classify.as_mut() else {
                continue;
            };
            let id = i as u32;
            let ua_lits =
                c.ua.as_mut()
                    .and_then(|re| match re.hint.take().map(|b| *b) {
                        Some(Strategy::Exact { path, .. }) if !path.is_empty() => {
                            Some(vec![path.into_bytes()])
                        }
                        Some(Strategy::Anchored { literals: v, .. })
                        | Some(Strategy::Literals { literals: v, .. })
                            if v.iter().all(|l| !l.is_empty()) =>
                        {
                            Some(v)
                        }
                        _ => None,
                    });
            if let Some(ls) = ua_lits {
                for l in ls {
                    lits.entry(l.to_ascii_lowercase()).or_default().push(id);
                }
                c.indexed = true;
            } else if !c.addrs.is_empty() {
                for n in &c.addrs {
                    let (len, v4, addr) = n.parts();
                    ix.nets.entry((len, v4, addr)).or_default().push(id);
                    if !ix.lens.contains(&(len, v4)) {
                        ix.lens.push((len, v4));
                    }
                }
                c.indexed = true;
            }
            ix.count += usize::from(c.indexed);
        }
        if !lits.is_empty() {
            let (pats, ids): (Vec<Vec<u8>>, Vec<Vec<u32>>) = lits.into_iter().unzip();
            ix.ua = AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .build(&pats)
                .ok();
            ix.ua_rules = ids;
        }
        ix
    }

    /// Whether some rule is found by the client's address: then which rules are
    /// candidates depends on who asks, not only on what is asked.
    pub fn by_address(&self) -> bool {
        !self.lens.is_empty()
    }

    /// Add the rules that may match this User-Agent and address to `out` (unsorted,
    /// possibly repeated).
    pub fn candidates(&self, ua: Option<&str>, addr: Option<IpAddr>, out: &mut Vec<u32>) {
        if let (Some(ac), Some(ua)) = (&self.ua, ua) {
            for m in ac.find_overlapping_iter(ua.as_bytes()) {
                out.extend_from_slice(&self.ua_rules[m.pattern().as_usize()]);
            }
        }
        if let (false, Some(a)) = (self.lens.is_empty(), addr) {
            let (bits, v4) = sluice_condition::addr::addr_bits(a);
            for &(len, lv4) in &self.lens {
                if lv4 != v4 {
                    continue;
                }
                let key = (len, v4, bits & sluice_condition::addr::prefix_mask(len, v4));
                if let Some(ids) = self.nets.get(&key) {
                    out.extend_from_slice(ids);
                }
            }
        }
    }
}
