//! sluice's own rules format: one rule per line, documented in docs/RULES.md.
//!
//! ```text
//! # KIND  PATTERN        ACTION   [TARGET]     [OPTIONS]
//! exact   /old.html      301      /new.html
//! prefix  /old-dir       302      https://mirror.example/new-dir
//! regex   ^/a/(\d+)$     308      /b/$1        nocase
//! exact   /private       403
//! prefix  /retired       410
//! regex   \.php$         rewrite  /index.html
//! exact   /x             301      /y           host=example.org qsa
//! ```
//! ACTION is a redirect status (301, 302, 303, 307, 308), `rewrite`, `403` or `410`.
//! OPTIONS: `host=NAME`, `nocase`, `qsa`, `ne`. Rules are tried in file order; the
//! first that matches wins. For `prefix` redirects the rest of the path is appended.

use crate::loader::{Ctx, LoadError};
use crate::model::*;
use crate::template::Template;
use std::path::Path;

pub fn parse(text: &str, file: &Path, ctx: &mut Ctx) -> Result<(), LoadError> {
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let err = |msg: String| LoadError::at(file, lineno, msg);
        let toks: Vec<&str> = t.split_whitespace().collect();
        if toks.len() < 3 {
            return Err(err("expected KIND PATTERN ACTION [TARGET] [OPTIONS]".into()));
        }
        let (kind, pat, act) = (toks[0], toks[1], toks[2]);
        let mut rest = &toks[3..];
        let needs_target = matches!(act, "301" | "302" | "303" | "307" | "308" | "rewrite");
        let target = if needs_target {
            let Some((t, r)) = rest.split_first() else {
                return Err(err(format!("action {act} needs a target")));
            };
            rest = r;
            Some(Template::parse(t, &|_| false).map_err(&err)?)
        } else {
            None
        };
        let mut flags = Flags::default();
        let mut host = None;
        for o in rest {
            match *o {
                "nocase" => flags.nocase = true,
                "qsa" => flags.qsa = true,
                "ne" => flags.noescape = true,
                o if o.starts_with("host=") => host = Some(o[5..].to_string()),
                o => {
                    return Err(err(format!(
                        "unknown option {o:?} (host=NAME, nocase, qsa, ne)"
                    )))
                }
            }
        }
        let pattern = match kind {
            "exact" | "prefix" if !pat.starts_with('/') => {
                return Err(err(format!("{kind} pattern must start with '/': {pat:?}")))
            }
            "exact" => Pattern::Exact(pat.to_string()),
            "prefix" => Pattern::Prefix(pat.to_string()),
            "regex" => Pattern::Regex(
                RegexPattern::new(pat.to_string(), flags.nocase, false).map_err(&err)?,
            ),
            k => {
                return Err(err(format!(
                    "unknown rule kind {k:?} (exact, prefix, regex)"
                )))
            }
        };
        let action = match (act, target) {
            ("rewrite", Some(target)) => Action::Rewrite { target },
            ("403", _) => Action::Forbidden,
            ("410", _) => Action::Gone,
            (s, Some(target)) => Action::Redirect {
                status: s.parse().unwrap_or(302),
                target,
            },
            (a, None) => {
                return Err(err(format!(
                    "unknown action {a:?} (301, 302, 303, 307, 308, rewrite, 403, 410)"
                )))
            }
        };
        ctx.push(
            file,
            lineno,
            Class::Rewrite,
            pattern,
            host,
            Vec::new(),
            action,
            flags,
        );
    }
    Ok(())
}
