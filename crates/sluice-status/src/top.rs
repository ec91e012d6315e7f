//! Top talkers: URLs by requests and by bytes (Space-Saving sketches, bounded memory)
//! and address ranges by open connections, incomplete connections and request rate.
//!
//! Each worker keeps its own [`Talkers`] (no locks on the request path) and publishes
//! a [`TopList`] about once a second; the status page merges the published lists.
//! Space-Saving (Metwally et al., 2005) keeps `k` counters: a new key takes over the
//! smallest counter and inherits its count as its error bound, so any key with more
//! than total/k hits is always present. Cost per request: one hash lookup per sketch
//! (two for URLs, one for the /24 tally; FxHash, a few ns for a short path); O(k)
//! only when a new URL evicts another. Measured: `cargo bench -p sluice-status`.
//!
//! Past [`SAMPLE_ABOVE`] requests a second on a worker, only about one request in
//! `stride` is counted, with that weight (which ones is random, so a client cycling
//! through a few URLs cannot hide one of them). The stride is set at each publish
//! from the last interval's rate: [`SAMPLE_STRIDE`] just past the mark, growing
//! with the rate so that about [`SAMPLED_PER_SEC`] requests a second are counted,
//! up to [`MAX_STRIDE`]. A request passed over costs a few instructions (the check
//! is inlined where it is called); one counted ~330 (`bench/user_instr.sh`). The URL
//! lists add up since start, so their sampling error shrinks as they grow (a URL
//! with a tenth of a busy worker's requests: ~1% after a minute); a range's request
//! rate is per interval, within a few percent for a range with a few hundred
//! counted requests in it, less precise for lighter ones. Below the mark every
//! request counts exactly.

use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::net::IpAddr;

/// Counters kept per sketch.
pub const SKETCH_K: usize = 64;
/// Requests a second on one worker above which the top lists are sampled.
pub const SAMPLE_ABOVE: u64 = 4096;
/// One request in this many is counted just past [`SAMPLE_ABOVE`] (on average),
/// with this weight.
pub const SAMPLE_STRIDE: u32 = 8;
/// Past that, the stride grows with the rate to count about this many a second.
pub const SAMPLED_PER_SEC: u64 = SAMPLE_ABOVE / SAMPLE_STRIDE as u64;
/// The largest stride: one request in 64.
pub const MAX_STRIDE: u32 = 64;
/// Entries shown per list.
pub const SHOWN: usize = 10;

#[derive(Debug)]
pub struct SpaceSaving {
    k: usize,
    map: FxHashMap<Box<str>, (u64, u64)>,
    /// Misses since the last admission (see [`ADMIT_EVERY`]).
    misses: u32,
}

/// When the sketch is full, only every `ADMIT_EVERY`th miss replaces the smallest
/// counter: a long tail of one-off paths (a mirror's normal traffic) would otherwise
/// pay the O(k) replacement on most requests. A path with real weight still gets in
/// after a few misses and is then counted exactly; its estimate can be low by at
/// most the weight of the misses skipped before it got in.
pub const ADMIT_EVERY: u32 = 8;

impl SpaceSaving {
    pub fn new(k: usize) -> SpaceSaving {
        SpaceSaving {
            k,
            map: FxHashMap::with_capacity_and_hasher(k + 1, Default::default()),
            misses: 0,
        }
    }

    pub fn add(&mut self, key: &str, weight: u64) {
        if let Some(e) = self.map.get_mut(key) {
            e.0 += weight;
            return;
        }
        if self.map.len() < self.k {
            self.map.insert(key.into(), (weight, 0));
            return;
        }
        self.misses += 1;
        if self.misses < ADMIT_EVERY {
            return;
        }
        self.misses = 0;
        // Replace the smallest: the newcomer inherits its count as error.
        let Some((min_key, &(min, _))) = self.map.iter().min_by_key(|(_, v)| v.0) else {
            return;
        };
        let min_key = min_key.clone();
        self.map.remove(&min_key);
        self.map.insert(key.into(), (min + weight, min));
    }

    /// The heaviest entries: (key, estimated count).
    pub fn top(&self, n: usize) -> Vec<(String, u64)> {
        let mut v: Vec<_> = self.map.iter().map(|(k, v)| (k.to_string(), v.0)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }
}

/// The three range levels: IPv4 /8, /16, /24; IPv6 /32, /48, /64.
pub fn range_label(ip: IpAddr, level: usize) -> String {
    // IPv4-mapped IPv6 is labelled (and keyed, `range_key`) as IPv4.
    let ip = match ip {
        IpAddr::V6(v) => v.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v) => {
            let o = v.octets();
            match level {
                0 => format!("{}.0.0.0/8", o[0]),
                1 => format!("{}.{}.0.0/16", o[0], o[1]),
                _ => format!("{}.{}.{}.0/24", o[0], o[1], o[2]),
            }
        }
        IpAddr::V6(v) => {
            let bits = [32u32, 48, 64][level.min(2)];
            let n = u128::from(v) & (!0u128 << (128 - bits));
            format!("{}/{bits}", std::net::Ipv6Addr::from(n))
        }
    }
}

fn range_key(ip: IpAddr, level: usize) -> (bool, u128) {
    let (bits, v4) = sluice_condition::addr::addr_bits(ip);
    within(v4, bits, level)
}

/// The key of the level-`level` range (0: /8, 1: /16, 2: /24; IPv6 /32, /48, /64)
/// that holds the address (or narrower range's key) `bits`.
fn within(v4: bool, bits: u128, level: usize) -> (bool, u128) {
    let len = if v4 { [8, 16, 24] } else { [32, 48, 64] }[level];
    (v4, bits & sluice_condition::addr::prefix_mask(len, v4))
}

/// One range's figures in a published list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RangeRow {
    pub range: String,
    pub level: usize,
    pub open: u64,
    pub incomplete: u64,
    /// Requests per second over the last publishing interval.
    pub req_rate: f64,
    /// Connections conditioning closed to make room, and requests refused because
    /// the range was over its cap, over the last publishing interval.
    pub evicted: u64,
    pub refused: u64,
}

/// One rule's figures (since start, or since the reload that compiled it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuleRow {
    /// `file:line`.
    pub rule: String,
    pub action: &'static str,
    pub matches: u64,
    pub bytes: u64,
}

/// Rules tracked one by one per worker; past this, matches still count in the
/// per-action totals.
pub const MAX_RULES_TRACKED: usize = 4096;

/// What a worker publishes.
#[derive(Clone, Debug, Default)]
pub struct TopList {
    pub urls_by_requests: Vec<(String, u64)>,
    pub urls_by_bytes: Vec<(String, u64)>,
    pub ranges: Vec<RangeRow>,
    pub rules: Vec<RuleRow>,
}

/// A worker's talkers.
pub struct Talkers {
    by_requests: SpaceSaving,
    by_bytes: SpaceSaving,
    /// Per /24 (IPv6 /64) since the last publish: requests, evictions and refusals,
    /// with one address of it.
    tally_24: FxHashMap<(bool, u128), Tally>,
    /// (site, rule index) → (action, matches, bytes).
    rules: FxHashMap<(u16, u32), (&'static str, u64, u64)>,
    /// Requests answered since the last publish (all of them, sampled or not).
    seen: u64,
    /// 1: every request counts; else [`SAMPLE_STRIDE`] ..= [`MAX_STRIDE`] (set at
    /// each publish).
    stride: u32,
    /// Requests to pass over before the next one is counted.
    skip: u32,
    /// The sampler's random state (xorshift, seeded from the clock).
    rng: u32,
}

impl Default for Talkers {
    fn default() -> Self {
        Talkers {
            by_requests: SpaceSaving::new(SKETCH_K),
            by_bytes: SpaceSaving::new(SKETCH_K),
            tally_24: FxHashMap::default(),
            rules: FxHashMap::default(),
            seen: 0,
            stride: 1,
            skip: 0,
            rng: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x9e37_79b9, |d| d.subsec_nanos())
                | 1,
        }
    }
}

/// What one /24 did since the last publish.
#[derive(Clone, Copy)]
struct Tally {
    requests: u64,
    evicted: u64,
    refused: u64,
    /// One address of the /24 (its ranges are computed at publish time).
    ip: IpAddr,
}

impl Talkers {
    fn tally(&mut self, peer: IpAddr) -> &mut Tally {
        self.tally_24.entry(range_key(peer, 2)).or_insert(Tally {
            requests: 0,
            evicted: 0,
            refused: 0,
            ip: peer,
        })
    }

    /// A request for `path` from `peer`, answered with `bytes` of body: counted in
    /// the URL lists and its /24's request rate (every request, or a sample of them
    /// on a busy worker; see the module doc).
    ///
    /// Inlined where it is called, so that a request the sample passes over costs
    /// two counts and a comparison; the counting itself is out of line.
    #[inline]
    pub fn answered(&mut self, peer: IpAddr, path: &str, bytes: u64) {
        self.seen += 1;
        if self.skip > 0 {
            self.skip -= 1;
            return;
        }
        self.count(peer, path, bytes);
    }

    /// The request `answered` counts: drawn the next skip, then counted with
    /// the sample's weight.
    #[inline(never)]
    fn count(&mut self, peer: IpAddr, path: &str, bytes: u64) {
        let w = self.stride;
        if w > 1 {
            // Skip 0 ..= 2w-2 requests, w-1 on average: one in w counted.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 17;
            self.rng ^= self.rng << 5;
            self.skip = self.rng % (2 * w - 1);
        }
        let w = u64::from(w);
        self.by_requests.add(path, w);
        if bytes > 0 {
            self.by_bytes.add(path, bytes * w);
        }
        self.tally(peer).requests += w;
    }

    /// Conditioning closed a connection from `peer` to make room.
    pub fn evicted(&mut self, peer: IpAddr) {
        self.tally(peer).evicted += 1;
    }

    /// A request from `peer` was refused: its range is over its cap.
    pub fn refused(&mut self, peer: IpAddr) {
        self.tally(peer).refused += 1;
    }

    /// Rule `rule` of site `site` decided a request, answered with `bytes`.
    pub fn rule(&mut self, site: u16, rule: u32, action: &'static str, bytes: u64) {
        let full = self.rules.len() >= MAX_RULES_TRACKED;
        match self.rules.get_mut(&(site, rule)) {
            Some(e) => {
                e.1 += 1;
                e.2 += bytes;
            }
            None if !full => {
                self.rules.insert((site, rule), (action, 1, bytes));
            }
            None => {}
        }
    }

    /// Forget per-rule figures (after a reload: rule indices change).
    pub fn reset_rules(&mut self) {
        self.rules.clear();
    }

    /// Build the list to publish. `conns` yields (peer, incomplete?) for every open
    /// connection of this worker; `secs` is the time since the last publish.
    /// `name` turns (site, rule index) into `file:line`.
    pub fn publish(
        &mut self,
        conns: impl Iterator<Item = (IpAddr, bool)>,
        secs: f64,
        name: impl Fn(u16, u32) -> String,
    ) -> TopList {
        // Every connection and every tally counts once, in its /24 (IPv6 /64) row;
        // the /16 and /8 rows are then summed from those. One FxHash lookup per
        // connection: this runs once a second over all of a worker's connections,
        // and the whole loop waits for it (under 1 ms at 15,000; three SipHash
        // lookups per connection took 1-5 ms, `bench/held_turns.py`).
        type Rows = FxHashMap<(bool, u128), (RangeRow, IpAddr)>;
        fn row(rows: &mut Rows, key: (bool, u128), level: usize, ip: IpAddr) -> &mut RangeRow {
            let new = || {
                let row = RangeRow {
                    level,
                    ..Default::default()
                };
                (row, ip)
            };
            &mut rows.entry(key).or_insert_with(new).0
        }
        let mut levels: [Rows; 3] = Default::default();
        for (ip, incomplete) in conns {
            let r = row(&mut levels[2], range_key(ip, 2), 2, ip);
            r.open += 1;
            r.incomplete += u64::from(incomplete);
        }
        let secs = secs.max(1e-3);
        // Sample the next interval if this one was busy.
        let rate = self.seen as f64 / secs;
        let busy = rate > SAMPLE_ABOVE as f64;
        self.stride = if busy {
            (rate / SAMPLED_PER_SEC as f64).clamp(SAMPLE_STRIDE as f64, MAX_STRIDE as f64) as u32
        } else {
            1
        };
        if !busy {
            self.skip = 0;
        }
        self.seen = 0;
        for (key, t) in self.tally_24.drain() {
            let r = row(&mut levels[2], key, 2, t.ip);
            r.req_rate += t.requests as f64 / secs;
            r.evicted += t.evicted;
            r.refused += t.refused;
        }
        let [l8, l16, l24] = &mut levels;
        for (&(v4, bits), (r24, ip)) in l24.iter() {
            for (level, rows) in [(0, &mut *l8), (1, &mut *l16)] {
                let r = row(rows, within(v4, bits, level), level, *ip);
                r.open += r24.open;
                r.incomplete += r24.incomplete;
                r.req_rate += r24.req_rate;
                r.evicted += r24.evicted;
                r.refused += r24.refused;
            }
        }
        // Keep each level's heaviest by any measure: at most SHOWN per measure.
        let mut out = Vec::new();
        for (level, rows) in levels.iter().enumerate() {
            let rows: Vec<&(RangeRow, IpAddr)> = rows.values().collect();
            let mut keep = std::collections::HashSet::new();
            for measure in 0..4 {
                let mut idx: Vec<usize> = (0..rows.len()).collect();
                let m = |r: &RangeRow| match measure {
                    0 => r.open as f64,
                    1 => r.incomplete as f64,
                    2 => r.req_rate,
                    _ => (r.evicted + r.refused) as f64,
                };
                idx.sort_by(|a, b| m(&rows[*b].0).total_cmp(&m(&rows[*a].0)));
                keep.extend(idx.into_iter().take(SHOWN));
            }
            for i in keep {
                let (mut r, ip) = rows[i].clone();
                r.range = range_label(ip, level);
                out.push(r);
            }
        }
        let mut rules: Vec<_> = self.rules.iter().collect();
        rules.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
        let rules = rules
            .into_iter()
            .take(SHOWN * 2)
            .map(|(&(site, i), &(action, matches, bytes))| RuleRow {
                rule: name(site, i),
                action,
                matches,
                bytes,
            })
            .collect();
        TopList {
            urls_by_requests: self.by_requests.top(SHOWN * 2),
            urls_by_bytes: self.by_bytes.top(SHOWN * 2),
            ranges: out,
            rules,
        }
    }
}

/// Merge the workers' lists: counts of the same key add up.
pub fn merge(lists: &[TopList]) -> TopList {
    let mut req: HashMap<String, u64> = HashMap::new();
    let mut bytes: HashMap<String, u64> = HashMap::new();
    let mut ranges: HashMap<String, RangeRow> = HashMap::new();
    let mut rules: HashMap<String, RuleRow> = HashMap::new();
    for l in lists {
        for r in &l.rules {
            let e = rules.entry(r.rule.clone()).or_insert_with(|| RuleRow {
                rule: r.rule.clone(),
                action: r.action,
                ..Default::default()
            });
            e.matches += r.matches;
            e.bytes += r.bytes;
        }
        for (k, n) in &l.urls_by_requests {
            *req.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &l.urls_by_bytes {
            *bytes.entry(k.clone()).or_default() += n;
        }
        for r in &l.ranges {
            let e = ranges.entry(r.range.clone()).or_insert_with(|| RangeRow {
                range: r.range.clone(),
                level: r.level,
                ..Default::default()
            });
            e.open += r.open;
            e.incomplete += r.incomplete;
            e.req_rate += r.req_rate;
            e.evicted += r.evicted;
            e.refused += r.refused;
        }
    }
    let mut rules: Vec<RuleRow> = rules.into_values().collect();
    rules.sort_by(|a, b| b.matches.cmp(&a.matches).then_with(|| a.rule.cmp(&b.rule)));
    rules.truncate(SHOWN * 2);
    let top = |m: HashMap<String, u64>| {
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(SHOWN);
        v
    };
    let mut ranges: Vec<RangeRow> = ranges.into_values().collect();
    ranges.sort_by(|a, b| {
        a.level
            .cmp(&b.level)
            .then(b.open.cmp(&a.open))
            .then(b.req_rate.total_cmp(&a.req_rate))
            .then_with(|| a.range.cmp(&b.range))
    });
    TopList {
        urls_by_requests: top(req),
        urls_by_bytes: top(bytes),
        ranges,
        rules,
    }
}

#[cfg(test)]
mod tests;
