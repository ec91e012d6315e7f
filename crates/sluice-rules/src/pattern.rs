//! A rule's regex ([`RegexPattern`]): parsed at load time (so syntax errors are
//! reported with file and line, and the index strategy is decided from that one
//! parse), compiled on first use (so a million rules load in seconds). A regex that
//! parses but fails to compile (past the size limit) is logged once and counted
//! ([`compile_failures`]); it then never matches.

use regex::bytes::Regex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static COMPILE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Where this process's failures are counted as well (see [`count_failures_in`]).
static ALSO_COUNT_IN: OnceLock<&'static AtomicU64> = OnceLock::new();

/// Regexes that parsed at load time but failed to compile on first use, in this
/// process (each counted once); the status page and `explain` can show it.
pub fn compile_failures() -> u64 {
    COMPILE_FAILURES.load(Ordering::Relaxed)
}

/// Count this process's failures in `cell` too, from now on (the first call wins):
/// a serving process passes its slot in memory the server's processes share, so
/// whichever process answers the status page sees them at once.
pub fn count_failures_in(cell: &'static AtomicU64) {
    let _ = ALSO_COUNT_IN.set(cell);
}

/// A regex, parsed at load time (so syntax errors are reported with file and line)
/// and compiled on first use (so a million rules load in seconds, not minutes).
#[derive(Debug)]
pub struct RegexPattern {
    pub source: String,
    /// Per-directory style (`^old/...`, no leading slash): matched against the path
    /// without its leading `/`, as Apache does in `.htaccess` files.
    pub strip_slash: bool,
    compiled: OnceLock<Option<Regex>>,
    /// `^` or `^$`, the two patterns Apache configurations use to mean "any path"
    /// and "empty" (`RewriteRule ^ …`, `RewriteCond … !^$`): answered without the
    /// regex engine, since an "always" rule runs them on every request.
    pub trivial: Trivial,
    /// How the index should select this rule, worked out from the one parse that
    /// validated it; taken (and freed) when the index is built.
    pub(crate) hint: Option<Box<crate::strategy::Strategy>>,
}

impl RegexPattern {
    pub fn new(source: String, nocase: bool, strip_slash: bool) -> Result<Box<Self>, String> {
        // Parse the case-sensitive form once: it validates the syntax ((?i) cannot
        // make a valid pattern invalid) and gives the literals the index needs.
        let hir = regex_syntax::ParserBuilder::new()
            .unicode(false)
            .utf8(false)
            .build()
            .parse(&source)
            .map_err(|e| format!("bad regex {source:?}: {}", first_line(&e.to_string())))?;
        let hint = Some(Box::new(crate::strategy::classify(
            &hir,
            strip_slash,
            nocase,
        )));
        let trivial = match source.as_str() {
            "^" => Trivial::Start,
            "^$" => Trivial::Empty,
            _ => Trivial::No,
        };
        Ok(Box::new(RegexPattern {
            source: wrap(&source, nocase),
            trivial,
            strip_slash,
            compiled: OnceLock::new(),
            hint,
        }))
    }

    /// The pattern as compiled (with the case flag folded in).
    pub fn full_source(&self) -> &str {
        &self.source
    }

    pub fn regex(&self) -> Option<&Regex> {
        self.compiled
            .get_or_init(|| {
                // Byte-oriented and ASCII-only classes, like Apache's PCRE (non-UTF mode).
                match regex::bytes::RegexBuilder::new(&self.source)
                    .unicode(false)
                    .size_limit(1 << 20)
                    .build()
                {
                    Ok(r) => Some(r),
                    Err(e) => {
                        COMPILE_FAILURES.fetch_add(1, Ordering::Relaxed);
                        if let Some(cell) = ALSO_COUNT_IN.get() {
                            cell.fetch_add(1, Ordering::Relaxed);
                        }
                        tracing::warn!(
                            regex = %self.source,
                            error = %first_line(&e.to_string()),
                            "a rule's regex does not compile: the rule never matches"
                        );
                        None
                    }
                }
            })
            .as_ref()
    }
}

fn first_line(s: &str) -> String {
    s.lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

/// A pattern whose answer needs no regex engine (see [`RegexPattern::trivial`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trivial {
    No,
    /// `^`: matches every subject, with an empty match at its start.
    Start,
    /// `^$`: matches the empty subject only.
    Empty,
}

pub fn wrap(source: &str, nocase: bool) -> String {
    if nocase {
        format!("(?i){source}")
    } else {
        source.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regex_too_big_to_compile_is_counted_and_never_matches() {
        // Parses (so it loads), but its compiled program is far past the 1 MiB limit.
        let p = RegexPattern::new("(a{1000}){1000}".into(), false, false).unwrap();
        let before = compile_failures();
        assert!(p.regex().is_none());
        assert!(p.regex().is_none(), "a second use must not count again");
        assert_eq!(compile_failures(), before + 1);
        let ok = RegexPattern::new("^/a".into(), false, false).unwrap();
        assert!(ok.regex().is_some());
    }
}
