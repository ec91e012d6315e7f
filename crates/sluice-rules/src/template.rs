//! Substitution templates: `$N` (rule captures), `%N` (last matched condition),
//! `%{VAR}` (request variables), `${map:key|default}` (RewriteMap), `\$`/`\%` escapes.
//!
//! Parsed once at load time into parts; expansion is a single pass that appends.
//! A rule with Apache's `B` has its `$N` escaped on the way ([`BackrefEscape`]).

use crate::request::{MapDef, Maps, Request, Var};
use rand::seq::SliceRandom;
use regex::bytes::Captures;

#[derive(Debug, Clone)]
pub enum Part {
    Lit(String),
    RuleRef(usize),
    CondRef(usize),
    Var(Var),
    /// Boxed: maps are rare, and this keeps every other part at 32 bytes.
    Map(Box<MapRef>),
    /// Only first, in a `RewriteRule` substitution whose start is not known
    /// until it is expanded (`$1`, `%{VAR}`, a map): the base (ending in `/`)
    /// put before the expansion if that turns out relative ([`Template::based`]).
    Base(Box<str>),
}

#[derive(Debug, Clone)]
pub struct MapRef {
    /// The map's slot in [`Maps`], found when the template was parsed.
    pub slot: u32,
    pub key: Template,
    pub default: Option<Template>,
}

#[derive(Debug, Clone, Default)]
pub struct Template {
    pub parts: Box<[Part]>,
}

/// What an expansion can read.
pub struct Expand<'a> {
    pub req: &'a Request<'a>,
    pub maps: &'a Maps,
    pub rule: Option<&'a Captures<'a>>,
    pub cond: Option<&'a [Option<String>]>,
    /// `$0` for rules without captures (exact and prefix rules): the whole path.
    pub whole: &'a str,
    /// `B`: how the rule's `$N` are escaped (a substitution's expansion only).
    pub escape: Option<&'a BackrefEscape>,
}

impl Template {
    pub fn literal(s: &str) -> Template {
        Template {
            parts: vec![Part::Lit(s.to_string())].into_boxed_slice(),
        }
    }

    /// This `RewriteRule` substitution, made absolute with `base` as Apache's
    /// mod_rewrite makes it: a substitution that is neither a URL (`scheme://`)
    /// nor a path from `/` is relative, and `base` goes before it (the file's
    /// `RewriteBase`; `/` without one, where Apache's server context puts `/`
    /// and its `.htaccess` the directory's file-system path, a URL no client
    /// can use). A relative start known now is joined now; one known only when
    /// expanded gets a [`Part::Base`]. `base` starts with `/`.
    pub fn based(mut self, base: &str) -> Template {
        let base = if base.ends_with('/') {
            base.to_string()
        } else {
            format!("{base}/")
        };
        let whole = self.parts.len() == 1;
        match self.parts.first_mut() {
            Some(Part::Lit(s)) if s.starts_with('/') || is_url(s) => {}
            // Unless it is a scheme's letters that what follows may finish
            // (`http%{X}://`).
            Some(Part::Lit(s)) if whole || !scheme_start(s) => s.insert_str(0, &base),
            None => {}
            Some(_) => {
                let mut parts = self.parts.into_vec();
                parts.insert(0, Part::Base(base.into()));
                self.parts = parts.into_boxed_slice();
            }
        }
        self
    }

    /// True when expansion can only ever give the same text.
    pub fn is_literal(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Lit(_)))
    }

    pub fn parse(s: &str, map_slot: &dyn Fn(&str) -> Option<u32>) -> Result<Template, String> {
        let b = s.as_bytes();
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut i = 0;
        let flush = |lit: &mut String, parts: &mut Vec<Part>| {
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(lit)));
            }
        };
        while i < b.len() {
            let c = b[i];
            if c == b'\\'
                && i + 1 < b.len()
                && (b[i + 1] == b'$' || b[i + 1] == b'%' || b[i + 1] == b'\\')
            {
                lit.push(b[i + 1] as char);
                i += 2;
                continue;
            }
            if (c == b'$' || c == b'%') && i + 1 < b.len() && b[i + 1].is_ascii_digit() {
                flush(&mut lit, &mut parts);
                let n = (b[i + 1] - b'0') as usize;
                parts.push(if c == b'$' {
                    Part::RuleRef(n)
                } else {
                    Part::CondRef(n)
                });
                i += 2;
                continue;
            }
            if c == b'%' && i + 1 < b.len() && b[i + 1] == b'{' {
                let end = s[i..]
                    .find('}')
                    .ok_or_else(|| format!("unclosed %{{ in {s:?}"))?
                    + i;
                let name = &s[i + 2..end];
                let v = Var::from_name(name)
                    .ok_or_else(|| format!("unsupported variable %{{{name}}}"))?;
                flush(&mut lit, &mut parts);
                parts.push(Part::Var(v));
                i = end + 1;
                continue;
            }
            if c == b'$' && i + 1 < b.len() && b[i + 1] == b'{' {
                let end =
                    matching_brace(s, i + 1).ok_or_else(|| format!("unclosed ${{ in {s:?}"))?;
                let inner = &s[i + 2..end];
                let (name, rest) = inner
                    .split_once(':')
                    .ok_or_else(|| format!("${{{inner}}}: expected ${{map:key}}"))?;
                let Some(slot) = map_slot(name) else {
                    return Err(format!(
                        "${{{name}:...}}: no RewriteMap named {name:?} defined above"
                    ));
                };
                let (k, d) = match split_top_level_pipe(rest) {
                    Some((k, d)) => (k, Some(Template::parse(d, map_slot)?)),
                    None => (rest, None),
                };
                flush(&mut lit, &mut parts);
                parts.push(Part::Map(Box::new(MapRef {
                    slot,
                    key: Template::parse(k, map_slot)?,
                    default: d,
                })));
                i = end + 1;
                continue;
            }
            let ch = s[i..].chars().next().unwrap_or('\u{fffd}');
            lit.push(ch);
            i += ch.len_utf8();
        }
        flush(&mut lit, &mut parts);
        Ok(Template {
            parts: parts.into_boxed_slice(),
        })
    }

    /// True when expansion reads nothing but the request's bytes (and the rule's
    /// own captures): no `%{REMOTE_ADDR}`, `%{HTTPS}`, `%{REQUEST_SCHEME}` or
    /// `%{TIME…}`, no `rnd:` map. A `txt:` map is loaded
    /// with the rules and fixed until a reload; the document root is the site's.
    pub fn reads_request_only(&self, maps: &Maps) -> bool {
        self.parts.iter().all(|p| match p {
            Part::Lit(_) | Part::RuleRef(_) | Part::CondRef(_) | Part::Base(_) => true,
            Part::Var(v) => !matches!(
                v,
                Var::RemoteAddr | Var::Https | Var::Scheme | Var::ServerPort | Var::Time(_)
            ),
            Part::Map(m) => {
                !matches!(maps.get(m.slot), Some(MapDef::Rnd(_)))
                    && m.key.reads_request_only(maps)
                    && m.default
                        .as_ref()
                        .is_none_or(|d| d.reads_request_only(maps))
            }
        })
    }

    /// The request header fields this template reads (`%{HTTP_USER_AGENT}`,
    /// `%{HTTP_REFERER}`, `%{HTTP:Name}`, in map keys and defaults too), for an
    /// answer's `Vary` ([`crate::model::Rule::vary_names`]). The `Host` is not one: it is
    /// part of what a cache keys on already.
    pub fn headers_read<'a>(&'a self, out: &mut Vec<&'a str>) {
        for p in &self.parts {
            match p {
                Part::Var(Var::UserAgent) => out.push("User-Agent"),
                Part::Var(Var::Header(h)) => out.push(h),
                Part::Map(m) => {
                    m.key.headers_read(out);
                    if let Some(d) = &m.default {
                        d.headers_read(out);
                    }
                }
                _ => {}
            }
        }
    }

    pub fn expand(&self, ex: &Expand) -> String {
        let mut out = String::new();
        self.expand_into(ex, &mut out);
        out
    }

    /// The expansion without copying, when the template is one request field that
    /// is already a string (`%{REQUEST_URI}`, `%{HTTP_HOST}`, ...).
    fn direct<'r>(&self, req: &Request<'r>) -> Option<&'r str> {
        match &*self.parts {
            [Part::Var(v)] => v.borrowed(req),
            _ => None,
        }
    }

    pub fn expand_into(&self, ex: &Expand, out: &mut String) {
        let start = out.len();
        let mut base = None;
        for p in &self.parts {
            match p {
                Part::Base(b) => base = Some(b),
                Part::Lit(s) => out.push_str(s),
                Part::RuleRef(n) => {
                    let raw = match ex.rule {
                        Some(c) => c.get(*n).map(|m| m.as_bytes()),
                        None if *n == 0 => Some(ex.whole.as_bytes()),
                        None => None,
                    };
                    match (raw, ex.escape) {
                        (Some(r), Some(e)) => e.push(r, out),
                        (Some(r), None) => out.push_str(&String::from_utf8_lossy(r)),
                        (None, _) => {}
                    }
                }
                Part::CondRef(n) => {
                    if let Some(Some(s)) = ex.cond.and_then(|c| c.get(*n)) {
                        out.push_str(s);
                    }
                }
                Part::Var(v) => v.read(ex.req, out),
                Part::Map(m) => {
                    // The key is looked up where it already is when it is one
                    // request field (`${map:%{REQUEST_URI}}`, the common "always"
                    // rule), else expanded at the end of `out` and replaced there by
                    // the value: a lookup allocates nothing (such a rule runs on
                    // every request).
                    let (key, default) = (&m.key, &m.default);
                    let start = out.len();
                    let def = ex.maps.get(m.slot);
                    let direct = match def {
                        Some(MapDef::Txt(_) | MapDef::Rnd(_)) => key.direct(ex.req),
                        _ => None,
                    };
                    if direct.is_none() {
                        key.expand_into(ex, out);
                    }
                    let k = direct.unwrap_or(&out[start..]);
                    let found: Option<&str> = match def {
                        Some(MapDef::Txt(m)) => m.get(k).map(String::as_str),
                        Some(MapDef::Rnd(m)) => m
                            .get(k)
                            .and_then(|v| v.choose(&mut rand::thread_rng()))
                            .map(String::as_str),
                        Some(MapDef::ToLower) => {
                            out[start..].make_ascii_lowercase();
                            continue;
                        }
                        Some(MapDef::ToUpper) => {
                            out[start..].make_ascii_uppercase();
                            continue;
                        }
                        None => None,
                    };
                    out.truncate(start);
                    match (found, default) {
                        (Some(v), _) => out.push_str(v),
                        (None, Some(d)) => d.expand_into(ex, out),
                        (None, None) => {}
                    }
                }
            }
        }
        if let Some(b) = base {
            let t = &out[start..];
            if !t.starts_with('/') && !is_url(t) {
                out.insert_str(start, b);
            }
        }
    }
}

fn matching_brace(s: &str, open: usize) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in s[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

fn split_top_level_pipe(s: &str) -> Option<(&str, &str)> {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            '|' if depth == 0 => return Some((&s[..i], &s[i + 1..])),
            _ => {}
        }
    }
    None
}

/// `scheme://…` (any scheme: Apache's list is long), or `mailto:`: a URL, not a
/// path.
fn is_url(s: &str) -> bool {
    if s.starts_with("mailto:") {
        return true;
    }
    match s.find("://") {
        Some(n) if n > 0 => {
            let scheme = &s.as_bytes()[..n];
            scheme[0].is_ascii_alphabetic()
                && scheme
                    .iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'))
        }
        _ => false,
    }
}

/// Whether `s` (a substitution's literal start, with more to come) may be the
/// start of a URL's scheme: letters (and `+-.`), or those and `:` or `:/`.
fn scheme_start(s: &str) -> bool {
    let name = s.trim_end_matches(['/', ':']);
    let tail = &s[name.len()..];
    !name.is_empty()
        && name.as_bytes()[0].is_ascii_alphabetic()
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'))
        && matches!(tail, "" | ":" | ":/")
}

/// Apache's `B` flags (`B`, `B=chars`, `BNP`, `BCTLS`): a rule's `$N` escaped before it goes into the substitution.
/// Apache matches the decoded path, so its captures are decoded; sluice's are the
/// path as sent, so a capture is percent-decoded first and then escaped as
/// Apache escapes it: the same bytes come out (checked against Debian's Apache in
/// `crates/sluice/tests/apache_parity.rs`).
#[derive(Debug, Clone, Default)]
pub struct BackrefEscape {
    /// `B=chars`: only these bytes are escaped (`None`: every byte but ASCII
    /// letters, digits and `_`).
    pub only: Option<Box<[u8]>>,
    /// `BCTLS`: only control bytes and the space are escaped.
    pub controls: bool,
    /// `BNP`: a space becomes `%20`, not `+`.
    pub no_plus: bool,
}

impl BackrefEscape {
    /// Appends capture `raw` (as sent) to `out`, decoded and escaped.
    pub fn push(&self, raw: &[u8], out: &mut String) {
        let mut bytes = Vec::with_capacity(raw.len() * 3);
        for b in decode(raw) {
            let escape = if self.controls {
                b <= b' ' || b == 0x7f || self.only.as_ref().is_some_and(|o| o.contains(&b))
            } else {
                match &self.only {
                    Some(o) => o.contains(&b),
                    None => !(b.is_ascii_alphanumeric() || b == b'_'),
                }
            };
            if !escape {
                bytes.push(b);
            } else if b == b' ' && !self.no_plus {
                bytes.push(b'+');
            } else {
                // Lower-case hex, as Apache writes it.
                const HEX: &[u8; 16] = b"0123456789abcdef";
                bytes.extend([b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
            }
        }
        out.push_str(&String::from_utf8_lossy(&bytes));
    }
}

/// `raw` with its `%XX` escapes decoded (a `%` that starts none is kept).
fn decode(raw: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' && i + 2 < raw.len() {
            if let (Some(h), Some(l)) = (hex(raw[i + 1]), hex(raw[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_is_decoded_then_escaped_as_apache_escapes_it() {
        let esc = |e: &BackrefEscape, raw: &str| {
            let mut s = String::new();
            e.push(raw.as_bytes(), &mut s);
            s
        };
        let b = BackrefEscape::default();
        // Debian's Apache 2.4.71 with [B,NE]: letters, digits and `_` kept.
        assert_eq!(
            esc(&b, "a%20b&c+d~f_g.h-i!j%C3%A9"),
            "a+b%26c%2bd%7ef_g%2eh%2di%21j%c3%a9"
        );
        let bnp = BackrefEscape {
            no_plus: true,
            ..Default::default()
        };
        assert_eq!(esc(&bnp, "a%20b&c"), "a%20b%26c");
        let only = BackrefEscape {
            only: Some((*b"&+").into()),
            ..Default::default()
        };
        assert_eq!(esc(&only, "a%20b&c+d=e"), "a b%26c%2bd=e");
        let ctls = BackrefEscape {
            controls: true,
            ..Default::default()
        };
        assert_eq!(esc(&ctls, "a%20b&c%09"), "a+b&c%09");
        // A `%` that starts no escape is a `%`.
        assert_eq!(esc(&b, "100%"), "100%25");
        assert_eq!(esc(&b, "%zz"), "%25zz");
    }
}
