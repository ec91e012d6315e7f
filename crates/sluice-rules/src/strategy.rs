//! Which index strategy a regex rule gets, decided once from the parse that
//! validated it: an exact path (`^literal$`), anchored literals (a `^` prefix),
//! literals that occur anywhere, or "always". Depends on regex-syntax only; the
//! index (`compiled`) files rules by it.

use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Hir, HirKind, Look};

/// How the index selects one regex rule (worked out at parse time). `nocase`: the
/// rule is case-insensitive (NC), so its key is looked up lowercased.
#[derive(Debug)]
pub enum Strategy {
    /// `^literal$`: the one path it matches.
    Exact { path: String, nocase: bool },
    /// One of these literals starts every path the regex matches.
    Anchored {
        literals: Vec<Vec<u8>>,
        nocase: bool,
    },
    /// One of these literals occurs in every path the regex matches.
    Literals {
        literals: Vec<Vec<u8>>,
        nocase: bool,
    },
    /// No usable literal: tried on every request.
    Always,
}

/// Literal sets larger than this are not worth indexing.
const MAX_LITERALS: usize = 32;

/// Pick the strategy for a regex from its (case-sensitive) parse. Case-insensitive
/// rules (NC) are indexed with an ASCII-case-insensitive automaton; matching is
/// ASCII-only too (like Apache's PCRE), so a match always contains the literal.
pub fn classify(hir: &Hir, strip_slash: bool, ci: bool) -> Strategy {
    if let Some(lit) = anchored_literal(hir) {
        let path = if strip_slash { format!("/{lit}") } else { lit };
        return Strategy::Exact { path, nocase: ci };
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
            return Strategy::Anchored {
                literals: ls,
                nocase: ci,
            };
        }
    }
    // Otherwise the longer of the prefix and suffix literal sets, searched anywhere.
    let best = [prefix, usable(ExtractKind::Suffix)]
        .into_iter()
        .flatten()
        .max_by_key(|(min, _)| *min);
    match best {
        // One-byte literals (like "/") would make every path a candidate.
        Some((min, ls)) if min >= 2 => Strategy::Literals {
            literals: ls,
            nocase: ci,
        },
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
            matches!(classify(r"^/a/b\.html$", false), Strategy::Exact { path, nocase: false } if path == "/a/b.html")
        );
        assert!(
            matches!(classify(r"(?i)^/A$", false), Strategy::Exact { path, nocase: true } if path == "/A")
        );
        assert!(
            matches!(classify(r"^old\.html$", true), Strategy::Exact { path, nocase: false } if path == "/old.html")
        );
        assert!(
            matches!(classify(r"^/docs/(.*)$", false), Strategy::Anchored { literals: l, nocase: false } if l == vec![b"/docs/".to_vec()])
        );
        assert!(matches!(
            classify(r"\.php$", false),
            Strategy::Literals { .. }
        ));
        assert!(matches!(
            classify(r"^/(.*)$", false),
            Strategy::Anchored { .. }
        ));
        assert!(
            matches!(classify(r"^docs/(.*)$", true), Strategy::Anchored { literals: l, nocase: false } if l == vec![b"/docs/".to_vec()])
        );
        assert!(matches!(
            classify(r"/docs/(.*)$", false),
            Strategy::Literals { .. }
        ));
        assert!(matches!(classify(r"^(.*)$", false), Strategy::Always));
        assert!(matches!(classify(r".*", false), Strategy::Always));
    }
}
