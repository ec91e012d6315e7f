//! Apache syntax: `Redirect`, `RedirectPermanent`, `RedirectTemp`, `RedirectMatch`,
//! `RewriteEngine`, `RewriteCond`, `RewriteRule`, `RewriteMap` (`txt:`, `rnd:`,
//! `int:tolower|toupper`), and `<IfModule>` wrappers (their content is used).
//!
//! Semantics follow Apache 2.4 where sluice can honour them, and are refused with a
//! file:line error where it cannot (an unsupported flag silently ignored would change
//! what a redirect does). Deliberate differences, documented in docs/RULES.md:
//! every rule is terminal (as with `[L]`), mod_rewrite rules rank before mod_alias
//! rules as in Apache's hook order, and `%{REQUEST_FILENAME}` is root + path.

use crate::loader::{Ctx, LoadError};
use crate::model::*;
use crate::pattern::RegexPattern;
use crate::request::MapDef;
use crate::template::Template;
use rustc_hash::FxHashMap;
use std::path::Path;

pub fn parse(text: &str, file: &Path, ctx: &mut Ctx) -> Result<(), LoadError> {
    let mut engine_on = false;
    let mut conds: Vec<Cond> = Vec::new();
    let mut warned_engine_off = false;
    // A skipped (lenient) condition must take its rule with it, or the rule would
    // apply unconditionally.
    let mut poisoned = false;
    'lines: for (lineno, line) in logical_lines(text) {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let err = |msg: String| LoadError::at(file, lineno, msg);
        let toks = tokenize(t).map_err(&err)?;
        let Some(d) = toks.first() else { continue };
        let args = &toks[1..];
        let dl = d.to_ascii_lowercase();
        if dl.starts_with("<ifmodule") || dl == "</ifmodule>" {
            continue;
        }
        match dl.as_str() {
            "rewriteengine" => {
                engine_on = match args.first().map(|s| s.to_ascii_lowercase()).as_deref() {
                    Some("on") => true,
                    Some("off") => false,
                    _ => return Err(err("RewriteEngine takes on or off".into())),
                };
            }
            "rewritemap" => {
                if args.len() < 2 {
                    return Err(err("RewriteMap needs a name and type:source".into()));
                }
                let def = load_map(&args[1], file).map_err(&err)?;
                ctx.maps.insert(args[0].clone(), def);
            }
            "rewritecond" => {
                if args.len() < 2 || args.len() > 3 {
                    return Err(err(
                        "RewriteCond needs a test string, a pattern and optional [flags]".into(),
                    ));
                }
                let mut nocase = false;
                let mut or_next = false;
                if let Some(f) = args.get(2) {
                    for flag in flag_list(f).map_err(&err)? {
                        match flag.to_ascii_lowercase().as_str() {
                            "nc" | "nocase" => nocase = true,
                            "or" | "ornext" => or_next = true,
                            other => {
                                ctx.unsupported(
                                    file,
                                    lineno,
                                    format!("RewriteCond flag [{other}]"),
                                )?;
                                poisoned = true;
                                continue 'lines;
                            }
                        }
                    }
                }
                let subject =
                    Template::parse(&args[0], &|m| ctx.maps.contains_key(m)).map_err(&err)?;
                let (negate, pat) = match args[1].strip_prefix('!') {
                    Some(p) => (true, p),
                    None => (false, args[1].as_str()),
                };
                let test = match pat {
                    "-f" | "-F" => CondTest::IsFile,
                    "-d" => CondTest::IsDir,
                    p if p.starts_with('=') => CondTest::Equals(p[1..].to_string()),
                    p if p.starts_with('-') && p.len() == 2 => {
                        ctx.unsupported(file, lineno, format!("RewriteCond test {p}"))?;
                        poisoned = true;
                        continue 'lines;
                    }
                    p => CondTest::Regex({
                        // A condition is never indexed: drop the hint.
                        let mut r =
                            RegexPattern::new(p.to_string(), nocase, false).map_err(&err)?;
                        r.hint = None;
                        r
                    }),
                };
                conds.push(Cond {
                    subject,
                    test,
                    negate,
                    nocase,
                    or_next,
                });
            }
            "rewriterule" => {
                if args.len() < 2 || args.len() > 3 {
                    return Err(err(
                        "RewriteRule needs a pattern, a substitution and optional [flags]".into(),
                    ));
                }
                let mut flags = Flags::default();
                let mut redirect: Option<u16> = None;
                let (mut forbidden, mut gone) = (false, false);
                if let Some(f) = args.get(2) {
                    for flag in flag_list(f).map_err(&err)? {
                        let (name, val) = match flag.split_once('=') {
                            Some((n, v)) => (n.to_ascii_lowercase(), Some(v.to_string())),
                            None => (flag.to_ascii_lowercase(), None),
                        };
                        match name.as_str() {
                            "l" | "last" | "end" => {}
                            "nc" | "nocase" => flags.nocase = true,
                            "qsa" | "qsappend" => flags.qsa = true,
                            "ne" | "noescape" => flags.noescape = true,
                            "f" | "forbidden" => forbidden = true,
                            "g" | "gone" => gone = true,
                            "r" | "redirect" => {
                                redirect = Some(match val.as_deref() {
                                    None => 302,
                                    Some(v) => redirect_status(v).ok_or_else(|| {
                                        err(format!(
                                        "[R={v}]: not a redirect status (301, 302, 303, 307, 308)"
                                    ))
                                    })?,
                                })
                            }
                            other => {
                                ctx.unsupported(
                                    file,
                                    lineno,
                                    format!("RewriteRule flag [{other}]"),
                                )?;
                                conds.clear();
                                poisoned = false;
                                continue 'lines;
                            }
                        }
                    }
                }
                if args[0].starts_with('!') {
                    ctx.unsupported(file, lineno, "negated RewriteRule pattern".into())?;
                    conds.clear();
                    poisoned = false;
                    continue;
                }
                let strip = args[0].len() > 1
                    && args[0].starts_with('^')
                    && args[0].as_bytes()[1].is_ascii_alphanumeric();
                let re = RegexPattern::new(args[0].clone(), flags.nocase, strip).map_err(&err)?;
                let target =
                    Template::parse(&args[1], &|m| ctx.maps.contains_key(m)).map_err(&err)?;
                let action = if forbidden {
                    Action::Forbidden
                } else if gone {
                    Action::Gone
                } else if args[1] == "-" {
                    Action::Pass
                } else if let Some(status) = redirect {
                    Action::Redirect { status, target }
                } else {
                    Action::Rewrite { target }
                };
                let rule_conds = std::mem::take(&mut conds);
                if std::mem::take(&mut poisoned) {
                    ctx.warn(
                        file,
                        lineno,
                        "RewriteRule skipped: one of its conditions was skipped",
                    );
                    continue;
                }
                if !engine_on {
                    if !warned_engine_off {
                        ctx.warn(file, lineno, "RewriteRule ignored: RewriteEngine is off here (Apache ignores it too; add \"RewriteEngine On\")");
                        warned_engine_off = true;
                    }
                    continue;
                }
                ctx.push(
                    file,
                    lineno,
                    Class::Rewrite,
                    Pattern::Regex(re),
                    None,
                    rule_conds,
                    action,
                    flags,
                );
            }
            "redirect" | "redirectpermanent" | "redirecttemp" | "redirectmatch" => {
                let is_match = dl == "redirectmatch";
                let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
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
                                .ok_or_else(|| err(format!("{d}: unknown status {first:?}")))?;
                            a.remove(0);
                        }
                    }
                }
                let needs_url = (300..400).contains(&status);
                if a.is_empty() || (needs_url && a.len() != 2) || (!needs_url && a.len() > 2) {
                    return Err(err(format!(
                        "{d}: expected {}",
                        if is_match {
                            "[status] regex URL"
                        } else {
                            "[status] URL-path URL"
                        }
                    )));
                }
                if !is_match && !a[0].starts_with('/') {
                    return Err(err(format!(
                        "{d}: URL-path must start with '/': {:?}",
                        a[0]
                    )));
                }
                let mut flags = Flags {
                    alias_query: true,
                    ..Flags::default()
                };
                flags.noescape = true;
                let action = if needs_url {
                    let target = if is_match {
                        Template::parse(a[1], &|_| false).map_err(&err)?
                    } else {
                        Template::literal(a[1])
                    };
                    Action::Redirect { status, target }
                } else if status == 410 {
                    Action::Gone
                } else if status == 403 {
                    Action::Forbidden
                } else {
                    return Err(err(format!(
                        "{d}: status {status} is not supported (3xx, 403, 410)"
                    )));
                };
                let pattern = if is_match {
                    Pattern::Regex(RegexPattern::new(a[0].to_string(), false, false).map_err(&err)?)
                } else {
                    Pattern::Prefix(a[0].to_string())
                };
                ctx.push(
                    file,
                    lineno,
                    Class::Alias,
                    pattern,
                    None,
                    Vec::new(),
                    action,
                    flags,
                );
            }
            _ => ctx.unsupported(file, lineno, format!("directive {d}"))?,
        }
    }
    if !conds.is_empty() {
        ctx.warn(
            file,
            0,
            "RewriteCond at the end of the file has no RewriteRule; ignored",
        );
    }
    Ok(())
}

fn redirect_status(v: &str) -> Option<u16> {
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

fn alias_status(v: &str) -> Option<u16> {
    match v.to_ascii_lowercase().as_str() {
        "gone" => Some(410),
        n => redirect_status(n).or_else(|| n.parse().ok().filter(|s| *s == 410 || *s == 403)),
    }
}

/// Lines with `\` continuations joined, numbered by their first physical line.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    for (i, l) in text.lines().enumerate() {
        if cur.is_empty() {
            start = i + 1;
        }
        if let Some(s) = l.strip_suffix('\\') {
            cur.push_str(s);
            cur.push(' ');
        } else {
            cur.push_str(l);
            out.push((start, std::mem::take(&mut cur)));
        }
    }
    if !cur.is_empty() {
        out.push((start, cur));
    }
    out
}

/// Split on whitespace; `"..."` is one token with `\"` and `\\` escapes.
pub fn tokenize(s: &str) -> Result<Vec<String>, String> {
    let mut toks = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut t = String::new();
        if c == '"' {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' if matches!(chars.peek(), Some('"') | Some('\\')) => {
                        t.push(chars.next().unwrap_or('\\'))
                    }
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => t.push(c),
                }
            }
            if !closed {
                return Err("unclosed quote".into());
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                t.push(c);
                chars.next();
            }
        }
        toks.push(t);
    }
    Ok(toks)
}

fn flag_list(f: &str) -> Result<Vec<String>, String> {
    let inner = f
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .ok_or_else(|| format!("flags must look like [R=301,L], got {f:?}"))?;
    Ok(inner
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect())
}

fn load_map(spec: &str, file: &Path) -> Result<MapDef, String> {
    let (kind, src) = spec
        .split_once(':')
        .ok_or_else(|| format!("RewriteMap source {spec:?}: expected type:source"))?;
    match kind {
        "int" => match src {
            "tolower" => Ok(MapDef::ToLower),
            "toupper" => Ok(MapDef::ToUpper),
            other => Err(format!(
                "RewriteMap int:{other} is not supported (tolower, toupper)"
            )),
        },
        "txt" | "rnd" => {
            let p = Path::new(src);
            let p = if p.is_relative() {
                file.parent().unwrap_or(Path::new(".")).join(p)
            } else {
                p.to_path_buf()
            };
            let text = std::fs::read_to_string(&p)
                .map_err(|e| format!("RewriteMap file {}: {e}", p.display()))?;
            let mut txt: FxHashMap<String, String> = FxHashMap::default();
            let mut rnd: FxHashMap<String, Vec<String>> = FxHashMap::default();
            for line in text.lines() {
                let l = line.trim();
                if l.is_empty() || l.starts_with('#') {
                    continue;
                }
                let mut it = l.split_whitespace();
                let (Some(k), Some(v)) = (it.next(), it.next()) else {
                    continue;
                };
                // Apache's txt maps answer with the first entry for a key.
                if kind == "txt" {
                    txt.entry(k.to_string()).or_insert_with(|| v.to_string());
                } else {
                    rnd.entry(k.to_string())
                        .or_insert_with(|| v.split('|').map(str::to_string).collect());
                }
            }
            Ok(if kind == "txt" {
                MapDef::Txt(txt)
            } else {
                MapDef::Rnd(rnd)
            })
        }
        other => Err(format!(
            "RewriteMap type {other}: is not supported (txt, rnd, int)"
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens() {
        assert_eq!(
            super::tokenize(r#"Redirect 301 "/a b" /c"#).unwrap(),
            ["Redirect", "301", "/a b", "/c"]
        );
        assert!(super::tokenize("\"open").is_err());
    }
}
