//! What a rule is, independent of the syntax it came from, and how one rule is
//! checked against one request ([`Rule::check`]). Both matchers (the linear
//! reference and the compiled index) call this same function, so they can only
//! differ in *which* rules they try, which is what the equivalence tests check.

pub use crate::compare::{atoi, Accept};
use crate::location::{location, path_safe, split_query};
use crate::outcome::Outcome;
use crate::pattern::{RegexPattern, Trivial};
use crate::request::{Maps, Request};
use crate::template::{Expand, Template};
use regex::bytes::Captures;

/// Where a rule came from, for errors and `explain`.
#[derive(Clone, Debug)]
pub struct Source {
    /// Index into the rule set's file table (8 bytes per rule instead of a path).
    pub file: u16,
    pub line: u32,
}

/// What a rule's path pattern is.
#[derive(Debug)]
pub enum Pattern {
    /// The whole path equals this (exactly, or ASCII-case-insensitively with `nocase`).
    Exact(String),
    /// Apache `Redirect` semantics: the path is this or continues with `/` after it.
    Prefix(String),
    Regex(Box<RegexPattern>),
}

#[derive(Debug)]
pub enum CondTest {
    Regex(Box<RegexPattern>),
    /// `-f`: a regular file exists at the expanded path.
    IsFile,
    /// `-d`: a directory exists at the expanded path.
    IsDir,
    /// `=text`: lexical equality.
    Equals(String),
    /// `<text`, `>text`, `<=text`, `>=text`: lexical order (ASCII case folded
    /// with `NC`), true for the orders `accept` holds.
    Lexical {
        accept: Accept,
        text: String,
    },
    /// `-lt`, `-le`, `-eq`, `-ne`, `-ge`, `-gt` and a number: both sides read as
    /// C's `atoi` reads them (Apache's own reading: `x` is 0, `9abc` is 9).
    Integer {
        accept: Accept,
        n: i32,
    },
}

/// A `RewriteCond`.
#[derive(Debug)]
pub struct Cond {
    pub subject: Template,
    pub test: CondTest,
    pub negate: bool,
    pub nocase: bool,
    pub or_next: bool,
    /// `NV`: the header fields it reads are not named in `Vary` ([`Rule::vary_names`]).
    pub novary: bool,
}

/// What a matching rule does.
#[derive(Debug)]
pub enum Action {
    /// Redirect to the target. For `Prefix` patterns the rest of the path is appended.
    Redirect {
        status: u16,
        target: Template,
    },
    /// Serve another path (internal rewrite); an absolute URL target becomes a 302.
    Rewrite {
        target: Template,
    },
    /// `RewriteRule pattern -`: match (and stop) without changing anything.
    Pass,
    /// An errant-client answer (`deny`, `drop`, `substitute`, …); `None` = `pass`.
    Errant(Option<crate::classify::Errant>),
    /// `limit`: over the rule's rate, 429 with Retry-After; under it, served.
    Limit {
        retry_after_s: u64,
    },
    Forbidden,
    Gone,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Flags {
    pub nocase: bool,
    /// QSA: append the request's query to the target's.
    pub qsa: bool,
    /// QSD: the request's query is dropped (a target's own query stays).
    pub qsd: bool,
    /// NE: do not percent-escape the redirect target.
    pub noescape: bool,
    /// Apache mod_alias rules always carry the query over; mod_rewrite only without
    /// a `?` in the target.
    pub alias_query: bool,
    /// A `RewriteRule` without `L` or `END`: a rewrite (or `-`) it makes hands the
    /// path on to the rules after it, as Apache's rule loop does
    /// ([`crate::RuleSet::lookup_kept`]). Native rules are always terminal.
    pub goes_on: bool,
    /// `PT` (and so `L`): a rewrite it makes goes back through Apache's URL
    /// mapping, so mod_alias's rules (`Redirect*`) are asked with the rewritten
    /// path ([`crate::RuleSet::lookup_kept`]). The other half of PT, that the
    /// rewritten path is served through `Alias`es, is what sluice does with every
    /// rewrite (aliases are the config's, applied where files are opened).
    pub passthrough: bool,
    /// `S=n` on a rule that goes on: when it matches, the next `n` rules are not
    /// asked.
    pub skip: u16,
    /// The rule before this one has `C`: this one is asked only right after that
    /// one matched (or when a skip lands on it), as in Apache's chains.
    pub chained: bool,
    /// `N` (`N=rounds`): when it matches (without `L`), the rules are asked
    /// again from the first with what it rewrote; at most this many passes over
    /// them for one request, the first included, as Apache counts (0: no `N`).
    pub rounds: u16,
}

/// Which phase of Apache a rule belongs to: mod_rewrite runs before mod_alias
/// whatever the order in the file, so rewrite-class rules rank first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Rewrite = 0,
    Alias = 1,
}

#[derive(Debug)]
pub struct Rule {
    pub source: Source,
    pub class: Class,
    pub pattern: Pattern,
    /// Native rules may name a host (ASCII-case-insensitive equality).
    pub host: Option<Box<str>>,
    pub conds: Box<[Cond]>,
    pub action: Action,
    pub flags: Flags,
    /// Errant-client conditions (native `ua=`, `addr=`, `rate=`, …), if any.
    pub classify: Option<Box<crate::classify::Classify>>,
    /// The rare settings: native `date=`, Apache's `E=`, `T=`, `CO=` and `B`
    /// ([`crate::effects::Extra`]); `None` for almost every rule.
    pub extra: Option<Box<crate::effects::Extra>>,
}

/// Why a rule did not apply (for `explain`).
#[derive(Debug)]
pub enum Miss {
    /// A classification condition failed (which one).
    Classify(&'static str),
    Host,
    Pattern,
    Cond(usize),
}

impl Rule {
    /// Check this rule against `req`; on a match, the outcome it gives.
    pub fn check(&self, req: &Request, maps: &Maps) -> Result<Outcome, Miss> {
        if let Some(h) = &self.host {
            if !req.host.is_some_and(|rh| rh.eq_ignore_ascii_case(h)) {
                return Err(Miss::Host);
            }
        }
        let path = req.path;
        let mut rest = "";
        // `$0` when there are no captures: the whole path, or a group-less regex's match.
        let mut whole = path;
        let caps: Option<Captures> = match &self.pattern {
            Pattern::Exact(p) => {
                let ok = if self.flags.nocase {
                    p.eq_ignore_ascii_case(path)
                } else {
                    p == path
                };
                if !ok {
                    return Err(Miss::Pattern);
                }
                None
            }
            Pattern::Prefix(p) => {
                if !prefix_matches(p, path, self.flags.nocase) {
                    return Err(Miss::Pattern);
                }
                rest = &path[p.len()..];
                None
            }
            // `^`: every path, `$0` empty.
            Pattern::Regex(r) if r.trivial == Trivial::Start => {
                whole = "";
                None
            }
            Pattern::Regex(r) => {
                let Some(re) = r.regex() else {
                    return Err(Miss::Pattern);
                };
                let hay = if r.strip_slash {
                    path.strip_prefix('/').unwrap_or(path)
                } else {
                    path
                };
                if re.captures_len() == 1 {
                    // No groups (`^`, `\.iso$`): only `$0` can be asked for, so find
                    // the match without allocating captures: an "always" rule
                    // (`RewriteRule ^ …`) runs on every request.
                    let Some(m) = re.find(hay.as_bytes()) else {
                        return Err(Miss::Pattern);
                    };
                    match hay.get(m.range()) {
                        Some(w) => {
                            whole = w;
                            None
                        }
                        // A match that splits a character: keep its bytes, as captures do.
                        None => re.captures(hay.as_bytes()),
                    }
                } else {
                    match re.captures(hay.as_bytes()) {
                        Some(c) => Some(c),
                        None => return Err(Miss::Pattern),
                    }
                }
            }
        };
        let exceeded = match &self.classify {
            None => false,
            Some(c) => c.check(req).map_err(Miss::Classify)?,
        };
        let has_rates = self.classify.as_ref().is_some_and(|c| !c.rates.is_empty());
        if has_rates && !exceeded && !matches!(self.action, Action::Limit { .. }) {
            return Err(Miss::Classify("rate not exceeded"));
        }
        let cond_caps = self.check_conds(req, maps, caps.as_ref(), whole)?;
        let extra = self.extra.as_deref();
        let mut ex = Expand {
            req,
            maps,
            rule: caps.as_ref(),
            cond: cond_caps.as_deref(),
            whole,
            // `B`: its `$N` escaped in the substitution only, as in Apache.
            escape: extra.and_then(|x| x.escape.as_ref()),
        };
        let date = extra.and_then(|x| x.date.clone());
        let outcome = match &self.action {
            Action::Pass => Outcome::Pass,
            Action::Errant(e) => Outcome::Answer {
                errant: e.clone(),
                date,
            },
            Action::Limit { retry_after_s } => Outcome::Answer {
                errant: exceeded.then_some(crate::classify::Errant::Limited {
                    retry_after_s: *retry_after_s,
                }),
                date,
            },
            Action::Forbidden => Outcome::Forbidden,
            Action::Gone => Outcome::Gone,
            Action::Redirect { status, target } => {
                let mut t = target.expand(&ex);
                t.push_str(rest);
                Outcome::Redirect {
                    status: *status,
                    location: self.redirect_location(t, req.query),
                }
            }
            Action::Rewrite { target } => {
                let t = target.expand(&ex);
                if t.starts_with("http://") || t.starts_with("https://") {
                    Outcome::Redirect {
                        status: 302,
                        location: self.redirect_location(t, req.query),
                    }
                } else {
                    let (p, q) = split_query(&t);
                    let query = self.query_for(q, req.query);
                    let p = if p.starts_with('/') {
                        p.to_string()
                    } else {
                        format!("/{p}")
                    };
                    Outcome::Rewrite { path: p, query }
                }
            }
        };
        // What it sets besides deciding (`E=`, `CO=`, `T=`), once its
        // substitution is expanded, as in Apache (`effects.rs`).
        if let Some(x) = extra {
            ex.escape = None;
            x.apply(&ex);
        }
        Ok(outcome)
    }

    /// What this rule's decision, a miss or a match and the match's redirect or
    /// rewrite target, reads besides the request's bytes:
    /// - [`Reads::Request`]: nothing; the same bytes from any client, at any time,
    ///   get the same decision until the rules are reloaded;
    /// - [`Reads::Files`]: the files under the root too (`-f`, `-d`): the same
    ///   while those files are as they were;
    /// - [`Reads::More`]: the client's address (`addr=`, `%{REMOTE_ADDR}`), a count
    ///   (`rate=`, `rate24=`, `repeat=`, `limit`: a check is also a count) or
    ///   chance (a `rnd:` map).
    ///
    /// What the server may keep and answer again without asking the rules rests on
    /// this (`RuleSet::lookup_kept`).
    pub fn reads(&self, maps: &Maps) -> Reads {
        match self.reads_beyond_request(maps) {
            None => Reads::Request,
            Some(LOOKS_AT_FILES) => Reads::Files,
            Some(_) => Reads::More,
        }
    }

    /// What else than the request this rule reads, if anything (for `explain`;
    /// the files, [`LOOKS_AT_FILES`], only when it reads nothing more).
    pub fn reads_beyond_request(&self, maps: &Maps) -> Option<&'static str> {
        if let Some(c) = &self.classify {
            if !c.addrs.is_empty() {
                return Some("reads the client's address (addr=)");
            }
            if !c.rates.is_empty() {
                return Some("counts requests (a rate condition)");
            }
        }
        if matches!(self.action, Action::Limit { .. }) {
            return Some("counts requests (limit)");
        }
        if self
            .conds
            .iter()
            .any(|c| !c.subject.reads_request_only(maps))
        {
            return Some(
                "a condition reads the client's address, the scheme, the clock or a rnd: map",
            );
        }
        if self
            .extra
            .as_ref()
            .is_some_and(|x| !x.reads_request_only(maps))
        {
            return Some(
                "an E=, T= or CO= value reads the client's address, the scheme, the clock or a rnd: map",
            );
        }
        match &self.action {
            Action::Redirect { target, .. } | Action::Rewrite { target }
                if !target.reads_request_only(maps) =>
            {
                return Some(
                    "its target reads the client's address, the scheme, the clock or a rnd: map",
                );
            }
            _ => {}
        }
        self.conds
            .iter()
            .any(|c| matches!(c.test, CondTest::IsFile | CondTest::IsDir))
            .then_some(LOOKS_AT_FILES)
    }

    /// The `Location` for expanded target `t`: its own query merged with the
    /// request's ([`Rule::query_for`]) and, without NE, its path escaped. When that
    /// changes nothing (`Redirect 301 /old /new` on a request without a query), `t`
    /// itself is returned: a redirect allocates its target once, not twice.
    fn redirect_location(&self, t: String, orig_query: Option<&str>) -> String {
        let (p, q) = split_query(&t);
        let query = self.query_for(q, orig_query);
        if q.is_none() && query.is_none() && (self.flags.noescape || p.bytes().all(path_safe)) {
            return t;
        }
        location(p, query.as_deref(), self.flags.noescape)
    }

    /// The query a target ends up with.
    fn query_for(&self, target_q: Option<&str>, orig: Option<&str>) -> Option<String> {
        let orig = orig.filter(|q| !q.is_empty() && !self.flags.qsd);
        let q = match target_q {
            None => orig.map(str::to_string),
            Some(tq) if self.flags.qsa => match orig {
                Some(o) if !tq.is_empty() => Some(format!("{tq}&{o}")),
                Some(o) => Some(o.to_string()),
                None => Some(tq.to_string()),
            },
            Some(tq) if self.flags.alias_query => match orig {
                Some(o) if tq.is_empty() => Some(o.to_string()),
                _ => Some(tq.to_string()),
            },
            Some(tq) => Some(tq.to_string()),
        };
        q.filter(|q| !q.is_empty())
    }

    /// Apache's condition loop: AND by default, `[OR]` chains a condition with the
    /// next; `%N` refers to the last condition regex that matched.
    fn check_conds(
        &self,
        req: &Request,
        maps: &Maps,
        caps: Option<&Captures>,
        whole: &str,
    ) -> Result<Option<Vec<Option<String>>>, Miss> {
        let mut last: Option<Vec<Option<String>>> = None;
        let mut i = 0;
        while i < self.conds.len() {
            let c = &self.conds[i];
            let ex = Expand {
                req,
                maps,
                rule: caps,
                cond: last.as_deref(),
                whole,
                escape: None,
            };
            // Expanded into a buffer the thread keeps (no allocation per
            // condition); expansion never checks conditions, so it is not re-entered.
            let (ok, groups) = SUBJECT.with(|buf| {
                let mut subject = buf.borrow_mut();
                subject.clear();
                c.subject.expand_into(&ex, &mut subject);
                eval_cond(c, &subject, req)
            });
            if c.or_next {
                if ok {
                    if let Some(g) = groups {
                        last = Some(g);
                    }
                    while i < self.conds.len() && self.conds[i].or_next {
                        i += 1;
                    }
                }
                i += 1;
                continue;
            }
            if !ok {
                return Err(Miss::Cond(i));
            }
            if let Some(g) = groups {
                last = Some(g);
            }
            i += 1;
        }
        Ok(last)
    }
}

thread_local! {
    /// A condition's subject, expanded (see `Rule::check_conds`).
    static SUBJECT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

fn eval_cond(c: &Cond, subject: &str, req: &Request) -> (bool, Option<Vec<Option<String>>>) {
    let (hit, groups) = match &c.test {
        CondTest::Regex(r) if c.negate && r.trivial == Trivial::Empty => (subject.is_empty(), None),
        // A negated condition's groups are never kept: match without captures.
        CondTest::Regex(r) if c.negate => (
            r.regex().is_some_and(|re| re.is_match(subject.as_bytes())),
            None,
        ),
        CondTest::Regex(r) => match r.regex().and_then(|re| re.captures(subject.as_bytes())) {
            Some(cap) => {
                let g = cap
                    .iter()
                    .map(|m| m.map(|m| String::from_utf8_lossy(m.as_bytes()).into_owned()))
                    .collect();
                (true, Some(g))
            }
            None => (false, None),
        },
        CondTest::Equals(s) => (
            if c.nocase {
                s.eq_ignore_ascii_case(subject)
            } else {
                s == subject
            },
            None,
        ),
        CondTest::IsFile | CondTest::IsDir => {
            let dir = matches!(c.test, CondTest::IsDir);
            (file_test(subject, dir, req), None)
        }
        CondTest::Lexical { accept, text } => {
            let order = if c.nocase {
                let fold = |s: &str| {
                    s.bytes()
                        .map(|b| b.to_ascii_lowercase())
                        .collect::<Vec<_>>()
                };
                fold(subject).cmp(&fold(text))
            } else {
                subject.cmp(text.as_str())
            };
            (accept.holds(order), None)
        }
        CondTest::Integer { accept, n } => (accept.holds(atoi(subject).cmp(n)), None),
    };
    if c.negate {
        (!hit, None)
    } else {
        (hit, groups)
    }
}

/// `-f` (`dir == false`) or `-d` on `subject`: only inside the document root, never
/// through `..`; through the server's file cache when it gives one
/// ([`crate::request::FileTests`]), else a `stat`.
fn file_test(subject: &str, dir: bool, req: &Request) -> bool {
    let Some(root) = req.root else {
        return false;
    };
    let rs = root.to_string_lossy();
    let rel = subject.strip_prefix(rs.as_ref()).unwrap_or(subject);
    if rel.split('/').any(|s| s == "..") || rel.contains('\0') {
        return false;
    }
    if let Some(files) = req.files {
        return if rel.starts_with('/') {
            files.is(rel, dir)
        } else {
            files.is(&format!("/{rel}"), dir)
        };
    }
    match std::fs::metadata(root.join(rel.trim_start_matches('/'))) {
        Ok(m) if dir => m.is_dir(),
        Ok(m) => m.is_file(),
        Err(_) => false,
    }
}

/// What a rule's decision reads besides the request's bytes ([`Rule::reads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    Request,
    Files,
    More,
}

/// [`Rule::reads_beyond_request`]'s words for [`Reads::Files`].
pub const LOOKS_AT_FILES: &str = "looks at the disk (-f, -d)";

/// `Redirect` prefix semantics: whole path segments only.
pub fn prefix_matches(p: &str, path: &str, nocase: bool) -> bool {
    if path.len() < p.len() || !path.is_char_boundary(p.len()) {
        return false;
    }
    let head = &path[..p.len()];
    let eq = if nocase {
        head.eq_ignore_ascii_case(p)
    } else {
        head == p
    };
    eq && (path.len() == p.len() || p.ends_with('/') || path.as_bytes()[p.len()] == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn prefix_is_segment_aware() {
        assert!(prefix_matches("/foo", "/foo", false));
        assert!(prefix_matches("/foo", "/foo/bar", false));
        assert!(!prefix_matches("/foo", "/foobar", false));
        assert!(prefix_matches("/foo/", "/foo/bar", false));
        assert!(!prefix_matches("/foo/", "/foo", false));
        assert!(prefix_matches("/", "/anything", false));
        assert!(prefix_matches("/FOO", "/foo/x", true));
    }
}
