//! What a matching rule does besides deciding, as Apache's mod_rewrite flags say
//! it: `E=` sets a variable the rules after it read as `%{ENV:name}`, `T=` sets the
//! `Content-Type` of the file served, `CO=` adds a `Set-Cookie` to the answer, and
//! `B` (`B=chars`, `BNP`, `BCTLS`) escapes the rule's `$N` in its substitution. The
//! native `date=` (a fixed `Date` header) lives here too.
//!
//! Owns: a rule's settings ([`Extra`], parsed once) and the record of what the
//! rules that matched one request set ([`Effects`], kept by the caller for the
//! length of one lookup and read afterwards: the server puts the type and the
//! cookies on its answer). Must not: read anything but the expansion it is given;
//! it decides nothing.
//!
//! Cost: a rule without any of these carries one empty pointer; a lookup in which
//! no such rule matches touches nothing here. A rule with them expands their
//! templates when it matches, and the record allocates only then.

pub use crate::request::Effects;
use crate::request::Maps;
pub use crate::template::BackrefEscape;
use crate::template::{Expand, Template};
use std::sync::Arc;

/// The settings a rule has besides its pattern, conditions and action: rare, so
/// held behind one pointer ([`crate::model::Rule::extra`]; a million rules
/// without any cost 8 bytes each).
#[derive(Debug, Default)]
pub struct Extra {
    /// A fixed `Date` header for the answer (native `date=`).
    pub date: Option<Arc<str>>,
    /// `E=name:value` (`None`: `E=!name`, which unsets it), in flag order.
    pub env: Box<[(Box<str>, Option<Template>)]>,
    /// `T=type`.
    pub content_type: Option<Template>,
    /// `CO=…`, in flag order.
    pub cookies: Box<[Cookie]>,
    /// `B` and its kin: how `$N` is escaped in the substitution.
    pub escape: Option<BackrefEscape>,
}

impl Extra {
    /// True when the rule has none of these settings (it then carries no box).
    pub fn is_empty(&self) -> bool {
        self.date.is_none()
            && self.escape.is_none()
            && self.env.is_empty()
            && self.content_type.is_none()
            && self.cookies.is_empty()
    }

    /// Records what this rule sets, the rule having matched and its
    /// substitution expanded, into the request's record if the caller keeps one
    /// ([`crate::Request::effects`]), in Apache's order (checked against Debian's
    /// 2.4.71): each `E=` in turn, so a later one reads an earlier one's value as
    /// `%{ENV:…}`; then the cookies and the type, which read them too. The
    /// substitution does not: Apache expands it before it sets anything.
    pub fn apply(&self, ex: &Expand) {
        let Some(into) = ex.req.effects else {
            return;
        };
        // Each value is expanded before the record is borrowed to change it
        // (the expansion may read the record).
        for (name, value) in self.env.iter() {
            let value = value.as_ref().map(|t| t.expand(ex));
            let mut fx = into.borrow_mut();
            fx.env.retain(|(n, _)| n != name);
            if let Some(v) = value {
                fx.env.push((name.clone(), v));
            }
        }
        for c in self.cookies.iter() {
            if let Some(header) = c.header(ex) {
                into.borrow_mut().cookies.push(header);
            }
        }
        if let Some(t) = &self.content_type {
            let t = t.expand(ex);
            if !t.is_empty() {
                into.borrow_mut().content_type = Some(t);
            }
        }
    }

    /// True when every value reads only the request (and the rule's captures):
    /// what [`crate::model::Rule::reads`] asks of a rule's templates.
    pub fn reads_request_only(&self, maps: &Maps) -> bool {
        self.env
            .iter()
            .filter_map(|(_, v)| v.as_ref())
            .chain(&self.content_type)
            .chain(self.cookies.iter().map(|c| &c.spec))
            .all(|t| t.reads_request_only(maps))
    }
}

/// `CO=NAME:VALUE:DOMAIN[:LIFETIME[:PATH[:SECURE[:HTTPONLY[:SAMESITE]]]]]` (a value
/// starting with `;` uses `;` to separate its fields instead). As in Apache, the
/// whole value is expanded first and split into its fields afterwards, so a
/// `%{ENV:name}` in it may hold the separator's character in its braces.
#[derive(Debug)]
pub struct Cookie {
    spec: Template,
}

/// A cookie's fields, split.
struct Fields<'s> {
    name: &'s str,
    value: &'s str,
    domain: &'s str,
    lifetime_min: u64,
    path: &'s str,
    secure: bool,
    http_only: bool,
    same_site: Option<&'s str>,
}

impl Cookie {
    /// Reads the flag's value (what follows `CO=`): refused at load if its
    /// fields (read with what `%{…}` and `${…}` hold left whole) are too few or
    /// too many, or a lifetime written out is not a number.
    pub fn parse(
        spec: &str,
        template: impl Fn(&str) -> Result<Template, String>,
    ) -> Result<Cookie, String> {
        let literal = mask_braces(spec);
        if let Err(why) = fields(&literal) {
            // A lifetime that an expansion gives is checked when it is given.
            let sep = if literal.starts_with(';') { ';' } else { ':' };
            let lifetime = literal.trim_start_matches(';').split(sep).nth(3);
            if !lifetime.is_some_and(|l| l.contains('\u{0}')) {
                return Err(format!("[CO={spec}]: {why}"));
            }
        }
        Ok(Cookie {
            spec: template(spec)?,
        })
    }

    /// The `Set-Cookie` value, laid out as Apache's mod_rewrite writes it, but for
    /// the lifetime: `Max-Age` in seconds rather than an `expires` date, so the
    /// same request bytes get the same answer whenever it is asked (the server
    /// may keep an answer the rules decided on the request alone), and every
    /// client since 2011 reads it the same. `None` if the expanded value does not
    /// split into a cookie (Apache sets none then either).
    fn header(&self, ex: &Expand) -> Option<String> {
        let spec = self.spec.expand(ex);
        let f = fields(&spec).ok()?;
        let mut s = format!(
            "{}={}; path={}; domain={}",
            f.name, f.value, f.path, f.domain
        );
        if f.lifetime_min > 0 {
            s.push_str(&format!("; Max-Age={}", f.lifetime_min.saturating_mul(60)));
        }
        if f.secure {
            s.push_str("; secure");
        }
        if f.http_only {
            s.push_str("; HttpOnly");
        }
        if let Some(ss) = f.same_site {
            s.push_str("; SameSite=");
            s.push_str(ss);
        }
        Some(s)
    }
}

/// `spec` split into a cookie's fields, as Apache splits an expanded `CO=`.
fn fields(spec: &str) -> Result<Fields<'_>, String> {
    let (sep, body) = match spec.strip_prefix(';') {
        Some(rest) => (';', rest),
        None => (':', spec),
    };
    let f: Vec<&str> = body.split(sep).collect();
    if f.len() < 3 || f[0].is_empty() {
        return Err("a cookie needs at least NAME:VALUE:DOMAIN (CO=lang:en:.example.org)".into());
    }
    if f.len() > 8 {
        return Err("at most NAME:VALUE:DOMAIN:LIFETIME:PATH:SECURE:HTTPONLY:SAMESITE".into());
    }
    let lifetime_min = match f.get(3).copied().unwrap_or("") {
        "" => 0,
        l => l
            .parse()
            .map_err(|_| format!("the lifetime {l:?} is a number of minutes"))?,
    };
    // Apache's words for yes: `true`, `1`, and the flag's own name.
    let yes = |i: usize, word: &str| {
        f.get(i).is_some_and(|v| {
            v.eq_ignore_ascii_case("true") || *v == "1" || v.eq_ignore_ascii_case(word)
        })
    };
    Ok(Fields {
        name: f[0],
        value: f[1],
        domain: f[2],
        lifetime_min,
        path: f.get(4).copied().filter(|p| !p.is_empty()).unwrap_or("/"),
        secure: yes(5, "secure"),
        http_only: yes(6, "httponly"),
        // Apache leaves `SameSite` out for `false`, `0` and an empty field.
        same_site: f
            .get(7)
            .copied()
            .filter(|s| !s.is_empty() && *s != "0" && !s.eq_ignore_ascii_case("false")),
    })
}

/// `spec` with what `%{…}` and `${…}` hold (braces included) as one NUL each, so
/// that their `:` do not split fields when a cookie is checked at load.
fn mask_braces(spec: &str) -> String {
    let mut out = String::with_capacity(spec.len());
    let mut depth = 0usize;
    let mut prev = '\u{0}';
    for c in spec.chars() {
        if c == '{' && (prev == '%' || prev == '$' || depth > 0) {
            if depth == 0 {
                out.pop();
                out.push('\u{0}');
            }
            depth += 1;
        } else if c == '}' && depth > 0 {
            depth -= 1;
        } else if depth == 0 {
            out.push(c);
        }
        prev = c;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_read_as_apache_reads_them() {
        let f = fields("lang:fr:.example.org:30:/docs:secure:httponly").unwrap();
        assert_eq!(
            (
                f.name,
                f.domain,
                f.lifetime_min,
                f.path,
                f.secure,
                f.http_only
            ),
            ("lang", ".example.org", 30, "/docs", true, true)
        );
        let f = fields(";a;b;example.org;0;/;true;true;lax").unwrap();
        assert_eq!(
            (f.domain, f.lifetime_min, f.same_site),
            ("example.org", 0, Some("lax"))
        );
        let t = |s: &str| Ok(Template::literal(s));
        assert!(Cookie::parse("a:b", t).is_err());
        assert!(Cookie::parse("a:b:d:soon", t).is_err());
        // What the braces hold is one field, whatever it holds.
        assert!(Cookie::parse("c:%{ENV:z}%{HTTP:X-A}:d", t).is_ok());
        assert!(Cookie::parse("c:v:d:%{ENV:minutes}", t).is_ok());
        assert!(Cookie::parse("c:%{ENV:z}", t).is_err());
        assert!(Cookie::parse("c:%{ENV:z}:d:soon", t).is_err());
    }
}
