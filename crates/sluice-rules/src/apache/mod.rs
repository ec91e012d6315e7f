//! Apache syntax: `Redirect`, `RedirectPermanent`, `RedirectTemp`, `RedirectMatch`,
//! `RewriteEngine`, `RewriteBase`, `RewriteCond`, `RewriteRule`, `RewriteMap`
//! (`txt:`, `rnd:`, `int:tolower|toupper`), and `<IfModule>` wrappers (their
//! content is used).
//!
//! Semantics follow Apache 2.4 where sluice can honour them, and are refused with a
//! file:line error where it cannot (an unsupported flag silently ignored would change
//! what a redirect does). Deliberate differences, documented in docs/RULES.md:
//! a redirect is terminal even without `[L]`, patterns see the path as sent, and
//! `%{REQUEST_FILENAME}` is root + path. As in Apache, mod_rewrite rules rank before
//! mod_alias rules (its hook order), and a `RewriteRule` without `L` hands its
//! rewrite to the rules after it.
//!
//! One file per directive family, below this dispatcher: `lex` (lines, tokens, flag
//! lists), `rewrite` (RewriteEngine/Cond/Rule and the state between them), `alias`
//! (the four Redirect directives), `map` (RewriteMap). This file only splits a line
//! into directive and arguments and hands it to its family.

mod alias;
mod lex;
mod map;
mod rewrite;

pub use lex::tokenize;

use crate::loader::{Ctx, LoadError};
use std::path::Path;

/// Parses one Apache rules file into `ctx`.
pub fn parse(text: &str, file: &Path, ctx: &mut Ctx) -> Result<(), LoadError> {
    let lines = lex::logical_lines(text);
    // The last `RewriteBase` applies to every rule of the file, those before it
    // too: read it first.
    let mut rewrite = rewrite::Rewrite::with_base(rewrite::base_of(&lines, file)?);
    for (lineno, line) in &lines {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let toks = lex::tokenize(t).map_err(|m| LoadError::at(file, *lineno, m))?;
        let Some((d, args)) = toks.split_first() else {
            continue;
        };
        let at = lex::Line {
            file,
            lineno: *lineno,
            directive: d,
            args,
        };
        let dl = d.to_ascii_lowercase();
        if dl.starts_with("<ifmodule") || dl == "</ifmodule>" {
            continue;
        }
        match dl.as_str() {
            "rewriteengine" => rewrite.engine(&at)?,
            // Read, and checked, before the rules (`rewrite::base_of`).
            "rewritebase" => {}
            "rewritemap" => map::directive(&at, ctx)?,
            "rewritecond" => rewrite.cond(&at, ctx)?,
            "rewriterule" => rewrite.rule(&at, ctx)?,
            "redirect" | "redirectpermanent" | "redirecttemp" | "redirectmatch" => {
                alias::directive(&at, ctx)?
            }
            // A directory at a URL prefix is the config's, not a rule's: say where.
            "alias" => ctx.unsupported(
                file,
                *lineno,
                format!("directive {d} (in sluice it is the config's [[server.alias]] or [[site.alias]]: prefix, root)"),
            )?,
            _ => ctx.unsupported(file, *lineno, format!("directive {d}"))?,
        }
    }
    rewrite.finish(file, ctx);
    Ok(())
}
