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
use std::cell::RefCell;
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
    /// True when there is nothing to record on a match (only `date=` or `B`).
    pub fn records_nothing(&self) -> bool {
        self.env.is_empty() && self.content_type.is_none() && self.cookies.is_empty()
    }

    /// The rule matched: what it sets goes into the request's record, if the
    /// caller keeps one; `ex` escapes its `$N` as its `B` says from now on (the
    /// substitution's expansion only, as in Apache); and its `date=`.
    pub fn on_match<'a>(&'a self, ex: &mut Expand<'a>) -> Option<Arc<str>> {
        if let Some(fx) = ex.req.effects {
            self.apply(ex, fx);
        }
        ex.escape = self.escape.as_ref();
        self.date.clone()
    }

    /// Records what this rule sets into `into`, the rule having matched: the
    /// values are expanded first (they may read `%{ENV:…}` from `into` itself,
    /// as Apache expands a flag's value before it sets it).
    fn apply(&self, ex: &Expand, into: &RefCell<Effects>) {
        if self.records_nothing() {
            return;
        }
        let env: Vec<(&str, Option<String>)> = self
            .env
            .iter()
            .map(|(n, v)| (&**n, v.as_ref().map(|t| t.expand(ex))))
            .collect();
        let content_type = self.content_type.as_ref().map(|t| t.expand(ex));
        let cookies: Vec<String> = self.cookies.iter().map(|c| c.header(ex)).collect();
        let mut fx = into.borrow_mut();
        for (name, value) in env {
            fx.env.retain(|(n, _)| **n != *name);
            if let Some(v) = value {
                fx.env.push((name.into(), v));
            }
        }
        if let Some(t) = content_type.filter(|t| !t.is_empty()) {
            fx.content_type = Some(t);
        }
        fx.cookies.extend(cookies);
    }

    /// True when every value reads only the request (and the rule's captures):
    /// what [`crate::model::Rule::reads`] asks of a rule's templates.
    pub fn reads_request_only(&self, maps: &Maps) -> bool {
        self.env
            .iter()
            .filter_map(|(_, v)| v.as_ref())
            .chain(&self.content_type)
            .chain(self.cookies.iter().map(|c| &c.value))
            .all(|t| t.reads_request_only(maps))
    }
}

/// `CO=NAME:VALUE:DOMAIN[:LIFETIME[:PATH[:SECURE[:HTTPONLY[:SAMESITE]]]]]` (a value
/// starting with `;` uses `;` to separate its fields instead).
#[derive(Debug)]
pub struct Cookie {
    pub name: Box<str>,
    pub value: Template,
    pub domain: Box<str>,
    /// Minutes; 0: a session cookie.
    pub lifetime_min: u64,
    pub path: Box<str>,
    pub secure: bool,
    pub http_only: bool,
    pub same_site: Option<Box<str>>,
}

impl Cookie {
    /// Reads the flag's value (what follows `CO=`).
    pub fn parse(
        spec: &str,
        template: impl Fn(&str) -> Result<Template, String>,
    ) -> Result<Cookie, String> {
        let (sep, body) = match spec.strip_prefix(';') {
            Some(rest) => (';', rest),
            None => (':', spec),
        };
        let f: Vec<&str> = body.split(sep).collect();
        if f.len() < 3 || f[0].is_empty() {
            return Err(format!(
                "[CO={spec}]: a cookie needs at least NAME:VALUE:DOMAIN (CO=lang:en:.example.org)"
            ));
        }
        if f.len() > 8 {
            return Err(format!(
                "[CO={spec}]: at most NAME:VALUE:DOMAIN:LIFETIME:PATH:SECURE:HTTPONLY:SAMESITE"
            ));
        }
        let lifetime_min = match f.get(3).copied().unwrap_or("") {
            "" => 0,
            l => l
                .parse()
                .map_err(|_| format!("[CO={spec}]: the lifetime {l:?} is a number of minutes"))?,
        };
        let yes = |i: usize| {
            f.get(i).is_some_and(|v| {
                v.eq_ignore_ascii_case("true")
                    || *v == "1"
                    || v.eq_ignore_ascii_case(["secure", "httponly"][i - 5])
            })
        };
        // Apache leaves `SameSite` out for `false`, `0` and an empty field.
        let same_site = f
            .get(7)
            .filter(|s| !s.is_empty() && **s != "0" && !s.eq_ignore_ascii_case("false"))
            .map(|s| (*s).into());
        Ok(Cookie {
            name: f[0].into(),
            value: template(f[1])?,
            domain: f[2].into(),
            lifetime_min,
            path: match f.get(4).copied().unwrap_or("") {
                "" => "/".into(),
                p => p.into(),
            },
            secure: yes(5),
            http_only: yes(6),
            same_site,
        })
    }

    /// The `Set-Cookie` value, laid out as Apache's mod_rewrite writes it, but for
    /// the lifetime: `Max-Age` in seconds rather than an `expires` date, so the
    /// same request bytes get the same answer whenever it is asked (the server
    /// may keep an answer the rules decided on the request alone), and every
    /// client since 2011 reads it the same.
    fn header(&self, ex: &Expand) -> String {
        let mut s = format!(
            "{}={}; path={}; domain={}",
            self.name,
            self.value.expand(ex),
            self.path,
            self.domain
        );
        if self.lifetime_min > 0 {
            s.push_str(&format!(
                "; Max-Age={}",
                self.lifetime_min.saturating_mul(60)
            ));
        }
        if self.secure {
            s.push_str("; secure");
        }
        if self.http_only {
            s.push_str("; HttpOnly");
        }
        if let Some(ss) = &self.same_site {
            s.push_str("; SameSite=");
            s.push_str(ss);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_read_as_apache_reads_them() {
        let t = |s: &str| Ok(Template::literal(s));
        let c = Cookie::parse("lang:fr:.example.org:30:/docs:secure:httponly", t).unwrap();
        assert_eq!(
            (
                &*c.name,
                &*c.domain,
                c.lifetime_min,
                &*c.path,
                c.secure,
                c.http_only
            ),
            ("lang", ".example.org", 30, "/docs", true, true)
        );
        let c = Cookie::parse(";a;b;example.org;0;/;true;true;lax", t).unwrap();
        assert_eq!(
            (&*c.domain, c.lifetime_min, c.same_site.as_deref()),
            ("example.org", 0, Some("lax"))
        );
        assert!(Cookie::parse("a:b", t).is_err());
        assert!(Cookie::parse("a:b:d:soon", t).is_err());
    }
}
