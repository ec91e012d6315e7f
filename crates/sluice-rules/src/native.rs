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
//! ACTION is a redirect status (301, 302, 303, 307, 308), `rewrite`, `403` or `410`,
//! or an errant-client answer: `deny`, `drop`, `substitute FILE`, `tarpit`, `loop`,
//! `oversize`, `limit`, `pass` ([`crate::classify`]).
//! OPTIONS: `host=NAME`, `nocase`, `qsa`, `ne`; classification conditions `ua=REGEX`,
//! `addr=CIDR[,CIDR]`, `method=NAME[,NAME]`, `header=NAME:REGEX`, `rate=N/WINDOW`,
//! `rate24=N/WINDOW`, `repeat=N/WINDOW`; answer settings `date=HTTP-DATE`,
//! `text=LINE`, `every=DURATION`, `for=DURATION`, `bytes=N`. Values with spaces are
//! double-quoted (`text="please contact the mirror admin"`). Rules are tried in file
//! order; the first that matches wins. For `prefix` redirects the rest of the path
//! is appended.

use crate::classify::{parse_ms, parse_window, Classify, Errant, RateCond, Scope};
use crate::loader::{Ctx, LoadError};
use crate::model::*;
use crate::pattern::RegexPattern;
use crate::template::Template;
use std::path::Path;
use std::sync::Arc;

pub fn parse(text: &str, file: &Path, ctx: &mut Ctx) -> Result<(), LoadError> {
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let err = |msg: String| LoadError::at(file, lineno, msg);
        let toks = tokens(t).map_err(&err)?;
        let toks: Vec<&str> = toks.iter().map(String::as_str).collect();
        if toks.len() < 3 {
            return Err(err("expected KIND PATTERN ACTION [TARGET] [OPTIONS]".into()));
        }
        let (kind, pat, act) = (toks[0], toks[1], toks[2]);
        let mut rest = &toks[3..];
        let needs_target = matches!(
            act,
            "301" | "302" | "303" | "307" | "308" | "rewrite" | "substitute"
        );
        let mut substitute = None;
        let target = if needs_target {
            let Some((t, r)) = rest.split_first() else {
                return Err(err(format!("action {act} needs a target")));
            };
            rest = r;
            if act == "substitute" {
                substitute = Some(read_substitute(file, t, &mut ctx.inputs).map_err(&err)?);
                None
            } else {
                Some(Template::parse(t, &|_| None).map_err(&err)?)
            }
        } else {
            None
        };
        let mut flags = Flags::default();
        let mut host = None;
        let mut cls = Classify::default();
        let mut ans = AnswerOpts::default();
        let seed = ctx.rules.len() as u32;
        for o in rest {
            match *o {
                "nocase" => flags.nocase = true,
                "qsa" => flags.qsa = true,
                "ne" => flags.noescape = true,
                o if o.starts_with("host=") => host = Some(o[5..].to_string()),
                o => classify_option(o, seed, &mut cls, &mut ans).map_err(&err)?,
            }
        }
        let errant = errant_action(act, substitute, &cls, &ans).map_err(&err)?;
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
            _ if errant.is_some() => errant.unwrap_or(Action::Pass),
            ("rewrite", Some(target)) => Action::Rewrite { target },
            ("403", _) => Action::Forbidden,
            ("410", _) => Action::Gone,
            (s, Some(target)) => Action::Redirect {
                status: s.parse().unwrap_or(302),
                target,
            },
            (a, None) => {
                return Err(err(format!(
                    "unknown action {a:?} (301, 302, 303, 307, 308, rewrite, 403, 410, deny, drop, substitute, tarpit, loop, oversize, limit, pass)"
                )))
            }
        };
        if !matches!(action, Action::Errant(_) | Action::Limit { .. })
            && (has_conditions(&cls) || ans.any())
        {
            return Err(err(format!(
                "classification options (ua=, addr=, rate=, date=, ...) go with the errant-client actions, not {act}"
            )));
        }
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
        if let Some(r) = ctx.rules.last_mut() {
            if has_conditions(&cls) {
                r.classify = Some(Box::new(cls));
            }
            if let Some(d) = ans.date {
                r.extra = Some(Box::new(crate::effects::Extra {
                    date: Some(d.into()),
                    ..Default::default()
                }));
            }
        }
    }
    Ok(())
}

fn has_conditions(c: &Classify) -> bool {
    c.ua.is_some()
        || !c.addrs.is_empty()
        || !c.methods.is_empty()
        || !c.headers.is_empty()
        || !c.rates.is_empty()
}

/// Settings of an answer (`date=`, `text=`, `every=`, `for=`, `bytes=`).
#[derive(Default)]
struct AnswerOpts {
    date: Option<String>,
    text: Option<String>,
    every_ms: Option<u64>,
    for_ms: Option<u64>,
    bytes: Option<u64>,
}

impl AnswerOpts {
    fn any(&self) -> bool {
        self.date.is_some()
            || self.text.is_some()
            || self.every_ms.is_some()
            || self.for_ms.is_some()
            || self.bytes.is_some()
    }
}

/// Most a tarpit or oversize answer may last, and most bytes oversize may send.
pub const MAX_FOR_MS: u64 = 3_600_000;
pub const MAX_OVERSIZE_BYTES: u64 = 64 << 20;
/// Largest `substitute` file (kept in memory).
pub const MAX_SUBSTITUTE: u64 = 1 << 20;

fn classify_option(o: &str, seed: u32, c: &mut Classify, a: &mut AnswerOpts) -> Result<(), String> {
    let (k, v) = o.split_once('=').ok_or_else(|| {
        format!("unknown option {o:?} (host=, nocase, qsa, ne, ua=, addr=, method=, header=, rate=, rate24=, repeat=, date=, text=, every=, for=, bytes=)")
    })?;
    match k {
        "ua" => c.ua = Some(RegexPattern::new(v.to_string(), true, false)?),
        "addr" => {
            for n in v.split(',') {
                c.addrs
                    .push(sluice_condition::Cidr::parse(n).map_err(|e| format!("addr={e}"))?);
            }
        }
        "method" => c.methods.extend(v.split(',').map(|m| m.to_ascii_uppercase())),
        "header" => {
            let (name, re) = v
                .split_once(':')
                .ok_or_else(|| format!("header={v:?}: expected NAME:REGEX"))?;
            c.headers
                .push((name.to_string(), RegexPattern::new(re.to_string(), true, false)?));
        }
        "rate" | "rate24" | "repeat" => {
            let (max, window_ms) = parse_window(v)?;
            let scope = match k {
                "rate" => Scope::Addr,
                "rate24" => Scope::Net,
                _ => Scope::Repeat,
            };
            c.rates.push(RateCond {
                scope,
                max,
                window_ms,
                seed,
            });
        }
        "date" => {
            httpdate::parse_http_date(v)
                .map_err(|_| format!("date={v:?}: an HTTP date like \"Fri, 31 Dec 1999 23:59:59 GMT\""))?;
            a.date = Some(v.to_string());
        }
        "text" => {
            if v.bytes().any(|b| b < 0x20 && b != b'\t') {
                return Err("text=: no control characters".into());
            }
            a.text = Some(v.to_string());
        }
        "every" => a.every_ms = Some(parse_ms(v)?.max(10)),
        "for" => a.for_ms = Some(parse_ms(v)?.min(MAX_FOR_MS)),
        "bytes" => {
            a.bytes = Some(
                v.parse::<u64>()
                    .ok()
                    .filter(|b| *b <= MAX_OVERSIZE_BYTES)
                    .ok_or_else(|| format!("bytes={v:?}: a number up to {MAX_OVERSIZE_BYTES}"))?,
            )
        }
        _ => {
            return Err(format!(
                "unknown option {k:?} (host=, ua=, addr=, method=, header=, rate=, rate24=, repeat=, date=, text=, every=, for=, bytes=)"
            ))
        }
    }
    Ok(())
}

/// The errant-client action for `act`, if it is one.
fn errant_action(
    act: &str,
    substitute: Option<(Arc<[u8]>, &'static str)>,
    cls: &Classify,
    a: &AnswerOpts,
) -> Result<Option<Action>, String> {
    let for_ms = a.for_ms.unwrap_or(60_000);
    Ok(Some(match act {
        "deny" => Action::Errant(Some(Errant::Deny)),
        "drop" => Action::Errant(Some(Errant::Drop)),
        "pass" => Action::Errant(None),
        "loop" => Action::Errant(Some(Errant::Loop)),
        "substitute" => {
            let (body, ctype) = substitute.ok_or("substitute needs a FILE")?;
            Action::Errant(Some(Errant::Substitute { body, ctype }))
        }
        "tarpit" => Action::Errant(Some(Errant::Tarpit {
            text: a
                .text
                .clone()
                .unwrap_or_else(|| "please wait".into())
                .into(),
            every_ms: a.every_ms.unwrap_or(10_000),
            for_ms,
        })),
        "oversize" => Action::Errant(Some(Errant::Oversize {
            bytes: a.bytes.unwrap_or(1 << 20),
            for_ms,
        })),
        "limit" => {
            let w = cls
                .rates
                .iter()
                .map(|r| r.window_ms)
                .max()
                .ok_or("limit needs a rate condition (rate=, rate24= or repeat=)")?;
            Action::Limit {
                retry_after_s: w.div_ceil(1000),
            }
        }
        _ => return Ok(None),
    }))
}

/// Read a `substitute` file (relative to the rules file), at most 1 MiB, and note
/// it among the set's inputs.
fn read_substitute(
    rules_file: &Path,
    name: &str,
    inputs: &mut crate::inputs::Inputs,
) -> Result<(Arc<[u8]>, &'static str), String> {
    let p = rules_file.parent().unwrap_or(Path::new(".")).join(name);
    let meta = std::fs::metadata(&p).map_err(|e| format!("substitute {}: {e}", p.display()))?;
    if meta.len() > MAX_SUBSTITUTE {
        return Err(format!("substitute {}: larger than 1 MiB", p.display()));
    }
    let body = std::fs::read(&p).map_err(|e| format!("substitute {}: {e}", p.display()))?;
    let ctype = match p.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" | "htm" => "text/html; charset=utf-8",
        "txt" | "" => "text/plain; charset=utf-8",
        "xml" | "xsl" => "application/xml",
        "json" => "application/json",
        "css" => "text/css",
        "js" => "text/javascript",
        _ => "application/octet-stream",
    };
    inputs.note(&p, &body);
    Ok((body.into(), ctype))
}

/// Split a rule line into words; `"..."` groups words (also after `key=`), `\"`
/// inside quotes is a quote.
fn tokens(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted => quoted = false,
            '"' => {
                quoted = true;
                in_word = true;
            }
            '\\' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quoted {
        return Err("unterminated \"".into());
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}
