//! sluice's rules engine: redirects and rewrites at a per-request cost that does not
//! grow with the number of rules.
//!
//! Pipeline: **syntax** ([`native`], [`apache`]) → **model** ([`model::Rule`], one
//! `check` per rule) → **index** ([`compiled::Index`], which rules can match a
//! path) → [`RuleSet::lookup`]. [`RuleSet::lookup_linear`] is the reference: every
//! rule in order, first match wins; tests check the two agree on random rule sets.
//!
//! Order: rules are ranked mod_rewrite-class first (native rules, `RewriteRule`),
//! then mod_alias-class (`Redirect*`), each in file order, as Apache runs
//! mod_rewrite's hook before mod_alias's. The first rule that matches decides, but
//! for a `RewriteRule` without `L`, which hands its rewrite on (`RuleSet::decide`).
//!
//! Must not: do I/O on the lookup path, except `-f`/`-d` conditions, which stat a
//! file under the document root only when a candidate rule has one.
//! Cost per lookup: see [`compiled`]. The candidate list is a buffer the thread keeps
//! (no allocation per lookup); a redirect allocates its target once.

pub mod apache;
pub mod classify;
pub mod classindex;
pub mod compare;
pub mod compiled;
pub mod effects;
mod explain;
pub mod inputs;
pub mod loader;
pub mod location;
pub mod model;
pub mod native;
pub mod outcome;
pub mod pattern;
pub mod rates;
pub mod request;
pub mod strategy;
pub mod template;
pub mod vary;

pub use inputs::LoadOptions;
pub use loader::{Format, LoadError};
use model::{Flags, Rule};
pub use outcome::{outcome_text, Outcome};
pub use request::{Effects, FileTests, MapDef, Maps, Request, Var};
use std::path::{Path, PathBuf};

/// A compiled set of rules, shared read-only by all workers.
pub struct RuleSet {
    rules: Vec<Rule>,
    maps: Maps,
    index: compiled::Index,
    class_index: classindex::ClassIndex,
    files: Vec<std::sync::Arc<str>>,
    pub warnings: Vec<String>,
    /// Shared by every rate condition (`None` if there is none): fixed memory.
    rates: Option<std::sync::Arc<rates::RateTable>>,
    /// What it was compiled from ([`RuleSet::inputs`]).
    inputs: inputs::Inputs,
    /// Per rule (rank order): what its decision reads ([`model::Rule::reads`]).
    reads: Box<[model::Reads]>,
    /// Some rule is found by the client's address ([`classindex::ClassIndex::by_address`]).
    by_address: bool,
    /// The rank of the first mod_alias-class rule (`rules.len()` if none).
    first_alias: u32,
}

impl RuleSet {
    /// Load and compile rules files, in order.
    pub fn load_files(paths: &[PathBuf], opts: &LoadOptions) -> Result<RuleSet, LoadError> {
        Ok(Self::build(Self::read_files(paths, opts)?, opts))
    }

    /// Read and parse rules files as [`RuleSet::load_files`] does, with the same
    /// errors and warnings, without building the index: a check (for a million
    /// regex rules, 5.3 s against 9.8 s for the whole compile here). Returns the
    /// warnings.
    pub fn check_files(paths: &[PathBuf], opts: &LoadOptions) -> Result<Vec<String>, LoadError> {
        Ok(Self::read_files(paths, opts)?.warnings)
    }

    /// Read and parse `paths` in order into a load context, noting each file read.
    fn read_files(paths: &[PathBuf], opts: &LoadOptions) -> Result<loader::Ctx, LoadError> {
        let mut ctx = loader::Ctx::new(opts.lenient);
        ctx.inputs = inputs::Inputs::new(paths, opts);
        for p in paths {
            let text = std::fs::read_to_string(p)
                .map_err(|e| LoadError::at(p, 0, format!("cannot read: {e}")))?;
            ctx.inputs.note(p, text.as_bytes());
            Self::parse_into(&mut ctx, &text, p, loader::detect(p, &text))?;
        }
        Ok(ctx)
    }

    /// Compile rules from text (`origin` names it in messages).
    pub fn from_str(
        text: &str,
        origin: &str,
        format: Format,
        opts: &LoadOptions,
    ) -> Result<RuleSet, LoadError> {
        let mut ctx = loader::Ctx::new(opts.lenient);
        Self::parse_into(&mut ctx, text, Path::new(origin), format)?;
        Ok(Self::build(ctx, opts))
    }

    fn parse_into(ctx: &mut loader::Ctx, text: &str, p: &Path, f: Format) -> Result<(), LoadError> {
        match f {
            Format::Native => native::parse(text, p, ctx),
            Format::Apache => apache::parse(text, p, ctx),
        }
    }

    fn build(ctx: loader::Ctx, opts: &LoadOptions) -> RuleSet {
        let mut rules = ctx.rules;
        // Stable: file order is kept within each class.
        rules.sort_by_key(|r| r.class);
        rules.shrink_to_fit();
        let class_index = classindex::ClassIndex::build(&mut rules);
        let index = compiled::Index::build(&mut rules);
        // One rate table for all rate conditions, made only if some rule has one.
        let mut rates = None;
        for r in rules.iter_mut() {
            if let Some(c) = r.classify.as_mut().filter(|c| !c.rates.is_empty()) {
                let t = rates.get_or_insert_with(|| {
                    std::sync::Arc::new(match opts.rates {
                        Some(shared) => rates::RateTable::over(shared),
                        None => rates::RateTable::default(),
                    })
                });
                c.table = Some(t.clone());
                for r in &mut c.rates {
                    r.seed = r
                        .seed
                        .wrapping_add(opts.rate_salt.wrapping_mul(0x9E37_79B9));
                }
            }
        }
        let reads = rules.iter().map(|r| r.reads(&ctx.maps)).collect();
        let first_alias = rules.partition_point(|r| r.class == model::Class::Rewrite) as u32;
        RuleSet {
            first_alias,
            by_address: class_index.by_address(),
            reads,
            rules,
            maps: ctx.maps,
            index,
            class_index,
            files: ctx.files,
            warnings: ctx.warnings,
            rates,
            inputs: ctx.inputs,
        }
    }

    /// The files and options it was compiled from: a reload that would compile the
    /// same keeps this set ([`inputs::Inputs::unchanged`]).
    pub fn inputs(&self) -> &inputs::Inputs {
        &self.inputs
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Bytes held by rate state (fixed, whatever the number of clients).
    pub fn rate_memory(&self) -> usize {
        self.rates.as_ref().map_or(0, |t| t.memory())
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn counts(&self) -> compiled::Counts {
        self.index.counts
    }

    /// One line for the log: how many rules went to which strategy.
    pub fn summary(&self) -> String {
        let c = self.index.counts;
        format!(
            "{} rules: {} exact, {} prefix, {} literal-indexed regex, {} always-checked regex{}",
            self.rules.len(),
            c.exact,
            c.prefix,
            c.literal,
            c.always,
            match self.class_index.count {
                0 => String::new(),
                n => format!(", {n} found by user agent or address"),
            }
        )
    }

    /// The compiled lookup: the first rule (in rank order) that matches.
    pub fn lookup(&self, req: &Request) -> Outcome {
        self.lookup_rule(req).0
    }

    /// [`RuleSet::lookup`], and the index of the rule that decided (for the status
    /// page's per-rule counters; [`RuleSet::rule_origin`] names it).
    pub fn lookup_rule(&self, req: &Request) -> (Outcome, Option<u32>) {
        let (o, rule, _) = self.lookup_kept(req);
        (o, rule)
    }

    /// [`RuleSet::lookup_rule`], and whether the decision followed from the
    /// request's bytes alone: every rule tried, the one that matched included,
    /// reads nothing else ([`model::Rule::reads`]), and no rule is found by the
    /// client's address (then another client's candidates differ). When true, the
    /// same bytes get the same outcome from every client until the rules are
    /// reloaded, and the server may keep the answer for them. A rule that tests
    /// files (`-f`, `-d`) keeps it true only through [`Request::files`], whose
    /// answers the server bounds a kept answer by ([`FileTests`]); without it,
    /// such a decision is not kept. Costs one flag per rule tried.
    pub fn lookup_kept(&self, req: &Request) -> (Outcome, Option<u32>, bool) {
        // The candidate list lives in a buffer the thread keeps: a request that
        // some rule may match (every redirect) allocates no list. `check` never
        // looks rules up, so the buffer is not taken twice.
        thread_local!(static CANDS: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) });
        let mut cands = CANDS.take();
        let mut kept = !self.by_address;
        cands.clear();
        self.candidates(req, &mut cands);
        let mut found = self.first_match(req, &cands, 0, false, &mut kept);
        // Apache's loop goes on only past a `RewriteRule` without `L`, or a `-`.
        if found.as_ref().is_some_and(|(i, o)| self.goes_on(*i, o)) {
            found = self.decide(found, req, |req, from, rewrite_only| {
                cands.clear();
                self.candidates(req, &mut cands);
                self.first_match(req, &cands, from, rewrite_only, &mut kept)
            });
        }
        CANDS.set(cands);
        match found {
            Some((i, o)) => (o, Some(i), kept),
            None => (Outcome::Pass, None, kept),
        }
    }

    /// The first of `cands` (ascending ranks) from rank `from` on (only
    /// mod_rewrite-class rules if `rewrite_only`) that matches `req`, and its
    /// outcome; `kept` is cleared if a rule tried reads more than the request.
    #[inline]
    fn first_match(
        &self,
        req: &Request,
        cands: &[u32],
        from: u32,
        rewrite_only: bool,
        kept: &mut bool,
    ) -> Option<(u32, Outcome)> {
        let start = if from == 0 {
            0
        } else {
            cands.partition_point(|&c| c < from)
        };
        for &i in &cands[start..] {
            if !self.may_ask(i, from, rewrite_only) {
                continue;
            }
            *kept &= match self.reads[i as usize] {
                model::Reads::Request => true,
                model::Reads::Files => req.files.is_some(),
                model::Reads::More => false,
            };
            if let Ok(o) = self.rules[i as usize].check(req, &self.maps) {
                return Some((i, o));
            }
        }
        None
    }

    /// The rank the loop goes on from after rule `i` went on: the next, or past
    /// the rules its `S=n` skips (never past mod_rewrite's rules).
    fn after(&self, i: u32) -> u32 {
        match self.rules[i as usize].flags.skip {
            0 => i + 1,
            n => (i + 1 + u32::from(n)).min(self.first_alias.max(i + 1)),
        }
    }

    /// Whether rule `i` is asked in a step from rank `from` ([`RuleSet::decide`]):
    /// not before `from`, not a mod_alias rule once the path is rewritten, and a
    /// rule chained by `C` only right after the rule before it matched.
    fn may_ask(&self, i: u32, from: u32, rewrite_only: bool) -> bool {
        i >= from
            && (!rewrite_only || i < self.first_alias)
            && (!self.rules[i as usize].flags.chained || i == from)
    }

    /// Whether the loop goes on past rule `i`'s outcome `o` ([`RuleSet::decide`]).
    fn goes_on(&self, i: u32, o: &Outcome) -> bool {
        let flags = &self.rules[i as usize].flags;
        matches!(o, Outcome::Pass | Outcome::Rewrite { .. }) && flags.goes_on
            || matches!(o, Outcome::Pass) && i < self.first_alias
            || matches!(o, Outcome::Rewrite { .. }) && flags.passthrough
    }

    /// Apache's rule loop (mod_rewrite's `apply_rewrite_list`, then mod_alias), from
    /// `first`, the first rule that matched `req` and its outcome, over
    /// `step(request, from, rewrite_only)`: the first rule of rank `from` or later
    /// that matches `request` (only mod_rewrite-class rules if `rewrite_only`), and
    /// its outcome. Returns the deciding rule (the last one that matched) and what
    /// was decided.
    ///
    /// Almost every rule set decides in one step: a redirect, a refusal, a rule with
    /// `L`, a native rule. Only a `RewriteRule` without `L` goes on, as in Apache:
    /// - its rewrite becomes the path (and query) the later rules see, while
    ///   `%{REQUEST_URI}` keeps what the client sent ([`Request::uri`]); once the
    ///   path is rewritten, mod_alias's rules (`Redirect*`) are not asked, as
    ///   mod_rewrite's translation has then taken the request;
    /// - its `-` changes nothing and the next rule is asked;
    /// - with `S=n` the next `n` rules are passed over ([`RuleSet::after`]), and a
    ///   rule chained to the one before it by `C` is asked only right after that
    ///   one matched ([`RuleSet::may_ask`]; so a chain whose head does not match
    ///   is passed over whole);
    /// - with `N` the rules are asked again from the first, with what it
    ///   rewrote (or the same path, for a `-`), and past the rule's limit of
    ///   rounds the answer is [`Outcome::LoopLimit`] (Apache's 500).
    ///
    /// A `-` with `L` ends mod_rewrite's loop: the rewrite so far stands, or, if
    /// nothing was rewritten, mod_alias's rules are asked (Apache declines the
    /// translation then). A rewrite with `PT` ends it too, and mod_alias's rules
    /// are asked with the rewritten path (Apache's mod_rewrite declines with the
    /// new URI); if none matches, the rewrite stands. A redirect ends the loop even without `L` (Apache would
    /// hand `http://host/…` to the later rules, which then match only patterns not
    /// anchored at `/`; docs/RULES.md). Each step starts past the last match, so
    /// the loop asks at most as many steps as there are rules per `N` round.
    fn decide(
        &self,
        first: Option<(u32, Outcome)>,
        req: &Request,
        mut step: impl FnMut(&Request, u32, bool) -> Option<(u32, Outcome)>,
    ) -> Option<(u32, Outcome)> {
        let (mut i, mut o) = first?;
        // What a rule without `L` rewrote: the path and query the later rules see.
        let mut now: Option<(String, Option<String>)> = None;
        // A rewrite with `PT` has ended mod_rewrite's loop: mod_alias's turn.
        let mut passed = false;
        // The round of the rules this is: an `N` starts the next, and the
        // first pass counts as one, as in Apache (`N=4` allows three passes).
        let mut round = 1u32;
        loop {
            let Flags {
                goes_on,
                passthrough,
                rounds,
                ..
            } = self.rules[i as usize].flags;
            // `N`: what this rule left is asked of every rule again, from the
            // first (Apache answers 500 past the rule's limit of rounds).
            let restart =
                goes_on && rounds > 0 && matches!(o, Outcome::Pass | Outcome::Rewrite { .. });
            if restart {
                round += 1;
                if round >= u32::from(rounds) {
                    return Some((i, Outcome::LoopLimit));
                }
            }
            let from = match o {
                Outcome::Rewrite { path, query } if restart => {
                    now = Some((path, query));
                    0
                }
                Outcome::Pass if restart => 0,
                Outcome::Rewrite { path, query } if goes_on => {
                    now = Some((path, query));
                    self.after(i)
                }
                Outcome::Rewrite { path, query } if passthrough => {
                    now = Some((path, query));
                    passed = true;
                    self.first_alias.max(i + 1)
                }
                Outcome::Pass if goes_on => self.after(i),
                Outcome::Pass if now.is_none() => self.first_alias.max(i + 1),
                Outcome::Pass => break,
                decided => return Some((i, decided)),
            };
            let cur = match &now {
                Some((path, query)) => Request {
                    path,
                    query: query.as_deref(),
                    uri: Some(req.uri.unwrap_or(req.path)),
                    ..*req
                },
                None => *req,
            };
            // The rules the request went through before the deciding one, for
            // its `Vary` (recorded only when the caller keeps a record).
            if let Some(fx) = req.effects {
                fx.borrow_mut().handed_on.push(i);
            }
            match step(&cur, from, now.is_some() && !passed) {
                Some((j, next)) => (i, o) = (j, next),
                None => break,
            }
        }
        Some((
            i,
            match now {
                Some((path, query)) => Outcome::Rewrite { path, query },
                None => Outcome::Pass,
            },
        ))
    }

    /// [`RuleSet::decide`], its first step made by `step` too.
    fn decide_all(
        &self,
        req: &Request,
        mut step: impl FnMut(&Request, u32, bool) -> Option<(u32, Outcome)>,
    ) -> Option<(u32, Outcome)> {
        let first = step(req, 0, false);
        self.decide(first, req, step)
    }

    /// The `Vary` of the answer rule `i` decided ([`model::Rule::vary_names`]), if any,
    /// with the fields read by the rules that matched before it and handed the
    /// request on (`through`: [`Effects::handed_on`]), as Apache's mod_rewrite
    /// names every matching rule's.
    pub fn vary(&self, i: u32, through: &[u32]) -> Option<String> {
        let mut names = Vec::new();
        for &r in through.iter().chain([&i]) {
            if let Some(rule) = self.rules.get(r as usize) {
                rule.vary_names(&mut names);
            }
        }
        vary::join(&names)
    }

    /// `file:line` of rule `i`.
    pub fn rule_origin(&self, i: u32) -> String {
        match self.rules.get(i as usize) {
            Some(r) => {
                let file = self.files.get(r.source.file as usize).map_or("?", |f| &**f);
                format!("{file}:{}", r.source.line)
            }
            None => "?".into(),
        }
    }

    /// Rules that may match, ascending (rank order), without duplicates: from the
    /// path index and, for classification rules, by User-Agent and address.
    fn candidates(&self, req: &Request, out: &mut Vec<u32>) {
        self.index.candidates(req.path, out);
        if self.class_index.count > 0 {
            let before = out.len();
            self.class_index
                .candidates(req.user_agent, req.remote_addr, out);
            if out.len() != before {
                out.sort_unstable();
                out.dedup();
            }
        }
    }

    /// The reference lookup: every rule, in order. For tests and `explain`.
    pub fn lookup_linear(&self, req: &Request) -> Outcome {
        self.decide_all(req, |req, from, rewrite_only| {
            (from..self.rules.len() as u32)
                .filter(|&i| self.may_ask(i, from, rewrite_only))
                .find_map(|i| Some((i, self.rules[i as usize].check(req, &self.maps).ok()?)))
        })
        .map_or(Outcome::Pass, |(_, o)| o)
    }
}
