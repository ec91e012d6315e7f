//! mod_alias: `Redirect`, `RedirectPermanent`, `RedirectTemp` (prefix match on a
//! URL-path) and `RedirectMatch` (regex), each with an optional status first
//! (`permanent`, `temp`, `seeother`, `gone`, or a number).
//!
//! Owns the argument shapes and status words of these four directives. Every rule it
//! pushes is `Class::Alias`, which ranks after mod_rewrite's rules as in Apache's hook
//! order. Cost: load time only.

use super::lex::Line;
use crate::loader::{Ctx, LoadError};
use crate::model::*;
use crate::pattern::RegexPattern;
use crate::template::Template;

/// One of the four redirect directives (`at.directive` says which).
pub(super) fn directive(at: &Line, ctx: &mut Ctx) -> Result<(), LoadError> {
    let d = at.directive;
    let dl = d.to_ascii_lowercase();
    let is_match = dl == "redirectmatch";
    let mut a: Vec<&str> = at.args.iter().map(String::as_str).collect();
    let mut status = match dl.as_str() {
        "redirectpermanent" => 301,
        _ => 302,
    };
    if dl == "redirect" || is_match {
        if let Some(first) = a.first() {
            let looks_like_path = if is_match {
                a.len() == 2
            } else {
                first.starts_with('/')
            };
            if !looks_like_path {
                status = alias_status(first)
                    .ok_or_else(|| at.err(format!("{d}: unknown status {first:?}")))?;
                a.remove(0);
            }
        }
    }
    let needs_url = (300..400).contains(&status);
    if a.is_empty() || (needs_url && a.len() != 2) || (!needs_url && a.len() > 2) {
        return Err(at.err(format!(
            "{d}: expected {}",
            if is_match {
                "[status] regex URL"
            } else {
                "[status] URL-path URL"
            }
        )));
    }
    if !is_match && !a[0].starts_with('/') {
        return Err(at.err(format!("{d}: URL-path must start with '/': {:?}", a[0])));
    }
    let flags = Flags {
        alias_query: true,
        noescape: true,
        ..Flags::default()
    };
    let action = if needs_url {
        let target = if is_match {
            Template::parse(a[1], &|_| None).map_err(|m| at.err(m))?
        } else {
            Template::literal(a[1])
        };
        Action::Redirect { status, target }
    } else if status == 410 {
        Action::Gone
    } else if status == 403 {
        Action::Forbidden
    } else {
        return Err(at.err(format!(
            "{d}: status {status} is not supported (3xx, 403, 410)"
        )));
    };
    let pattern = if is_match {
        Pattern::Regex(RegexPattern::new(a[0].to_string(), false, false).map_err(|m| at.err(m))?)
    } else {
        Pattern::Prefix(a[0].to_string())
    };
    ctx.push(
        at.file,
        at.lineno,
        Class::Alias,
        pattern,
        None,
        Vec::new(),
        action,
        flags,
    );
    Ok(())
}

/// A redirect status word or number: 301, 302, 303, 307, 308.
pub(super) fn redirect_status(v: &str) -> Option<u16> {
    match v.to_ascii_lowercase().as_str() {
        "permanent" => Some(301),
        "temp" => Some(302),
        "seeother" => Some(303),
        n => n
            .parse()
            .ok()
            .filter(|s| matches!(s, 301 | 302 | 303 | 307 | 308)),
    }
}

/// mod_alias also takes `gone` (410) and 403, which need no URL.
fn alias_status(v: &str) -> Option<u16> {
    match v.to_ascii_lowercase().as_str() {
        "gone" => Some(410),
        n => redirect_status(n).or_else(|| n.parse().ok().filter(|s| *s == 410 || *s == 403)),
    }
}
