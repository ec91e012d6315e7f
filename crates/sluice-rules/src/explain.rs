//! `sluice rules explain`: which rules a request is asked of, why each did or did
//! not match, what the rules decided and set, and whether the server may keep
//! the answer. Owns only that report; it decides nothing itself: every step goes
//! through the same `RuleSet::decide` and `Rule::check` as a lookup, and the
//! report ends by comparing the compiled lookup with the linear reference.
//! Cost: an operator's command, not the request path (it lists every
//! classification rule and reads the rules files again for their lines).

use crate::model::{self, Miss, Pattern, Rule};
use crate::{outcome_text, Effects, Outcome, Request, RuleSet};

impl RuleSet {
    /// Whether the server may keep the answer to `req`'s bytes
    /// ([`RuleSet::lookup_kept`]), said for `explain`: yes, or the first reason not.
    fn kept_reason(&self, req: &Request) -> String {
        if self.by_address {
            return "no: some rule is found by the client's address (addr=), so which rules \
                    a request tries depends on who sends it"
                .into();
        }
        let mut files = None;
        let mut no = None;
        self.decide_all(req, |cur, from, rewrite_only| {
            let mut cands = Vec::new();
            self.candidates(cur, &mut cands);
            for &i in cands
                .iter()
                .filter(|&&i| self.may_ask(i, from, rewrite_only))
            {
                let r = &self.rules[i as usize];
                match r.reads_beyond_request(&self.maps) {
                    None => {}
                    Some(model::LOOKS_AT_FILES) => files = files.or(Some(r)),
                    Some(why) => {
                        no = no
                            .take()
                            .or(Some(format!("no: {} {why}", self.describe(r))))
                    }
                }
                if let Ok(o) = r.check(cur, &self.maps) {
                    return Some((i, o));
                }
            }
            None
        });
        if let Some(no) = no {
            return no;
        }
        match files {
            Some(r) => format!(
                "yes, while `sluice serve`'s file cache trusts what it found \
                 (files.cache_validity): {} {}",
                self.describe(r),
                model::LOOKS_AT_FILES
            ),
            None => "yes: every rule tried reads only the request".into(),
        }
    }

    fn describe(&self, r: &Rule) -> String {
        let file = self
            .files
            .get(r.source.file as usize)
            .map(|f| &**f)
            .unwrap_or("?");
        let src = line_text(file, r.source.line as usize).unwrap_or_default();
        format!("{}:{}: {}", file, r.source.line, src.trim())
    }

    /// Which rule matched and why the candidates before it did not; for a
    /// `RewriteRule` without `L`, each step of the loop (`RuleSet::decide`).
    pub fn explain(&self, req: &Request) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.summary());
        // Each lookup below records what its matching rules set in a record of
        // its own, so that `%{ENV:…}` reads the same in all of them.
        let fresh = || std::cell::RefCell::new(Effects::default());
        let (fx, fx_kept, fx_linear, fx_compiled) = (fresh(), fresh(), fresh(), fresh());
        fn with<'r>(req: &Request<'r>, fx: &'r std::cell::RefCell<Effects>) -> Request<'r> {
            Request {
                effects: Some(fx),
                ..*req
            }
        }
        let found = self.decide_all(&with(req, &fx), |cur, from, rewrite_only| {
            // Every classification rule is shown, not only those its index would
            // pick, so that explain can say which condition failed.
            let mut cands = Vec::new();
            self.index.candidates(cur.path, &mut cands);
            cands.extend((0..self.rules.len() as u32).filter(|&i| {
                self.rules[i as usize]
                    .classify
                    .as_ref()
                    .is_some_and(|c| c.indexed)
            }));
            cands.sort_unstable();
            cands.dedup();
            cands.retain(|&i| self.may_ask(i, from, rewrite_only));
            if from > 0 {
                let _ = write!(out, "then, asking the rules after it: ");
            }
            let _ = writeln!(out, "candidates for {:?}: {}", cur.path, cands.len());
            for &i in &cands {
                let r = &self.rules[i as usize];
                match r.check(cur, &self.maps) {
                    Ok(o) => {
                        let on = match o {
                            Outcome::Rewrite { .. } | Outcome::Pass
                                if r.flags.goes_on && r.flags.rounds > 0 =>
                            {
                                ", [N]: every rule is asked again, from the first"
                            }
                            Outcome::Rewrite { .. } | Outcome::Pass if r.flags.goes_on => {
                                ", no [L]: the rules after it are asked"
                            }
                            Outcome::Rewrite { .. } if r.flags.passthrough => {
                                ", [PT]: mod_alias's rules are asked with the rewritten path"
                            }
                            _ => "",
                        };
                        let _ = writeln!(out, "  {}: MATCH ({}{on})", self.describe(r), kind(r));
                        return Some((i, o));
                    }
                    Err(m) => {
                        let why = match m {
                            Miss::Classify(w) => w.to_string(),
                            Miss::Host => "host differs".to_string(),
                            Miss::Pattern => "pattern does not match".to_string(),
                            Miss::Cond(n) => format!("condition #{} fails", n + 1),
                        };
                        let _ = writeln!(out, "  {}: no: {why}", self.describe(r));
                    }
                }
            }
            None
        });
        match found {
            Some((_, o)) => {
                let _ = writeln!(out, "result: {}", outcome_text(&o));
            }
            None => {
                let _ = writeln!(
                    out,
                    "result: no rule matched; the request is served as it is"
                );
            }
        }
        let fx = fx.into_inner();
        for (name, value) in fx.vars() {
            let _ = writeln!(out, "sets %{{ENV:{name}}} = {value:?}");
        }
        if let Some(t) = &fx.content_type {
            let _ = writeln!(out, "sets Content-Type: {t} (on a file served)");
        }
        for c in &fx.cookies {
            let _ = writeln!(out, "sets Set-Cookie: {c}");
        }
        let _ = writeln!(
            out,
            "kept answers: {}",
            self.kept_reason(&with(req, &fx_kept))
        );
        let reference = self.lookup_linear(&with(req, &fx_linear));
        let compiled = self.lookup(&with(req, &fx_compiled));
        if reference != compiled {
            let _ = writeln!(
                out,
                "WARNING: the linear reference gives {} (please report this)",
                outcome_text(&reference)
            );
        }
        out
    }
}

fn kind(r: &Rule) -> &'static str {
    match &r.pattern {
        Pattern::Exact(_) => "exact",
        Pattern::Prefix(_) => "prefix",
        Pattern::Regex(_) => "regex",
    }
}

fn line_text(file: &str, line: usize) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().nth(line.checked_sub(1)?).map(str::to_string)
}
