//! The `Vary` of an answer a rule decided: which request header fields the
//! matches on the way to it read. Owns only that list; it reads compiled rules and
//! never a request. Cost: one look at each matching rule's conditions per answer
//! a rule decided, and nothing allocated for rules without conditions or
//! classification.

use crate::model::Rule;

impl Rule {
    /// The request header fields whose values this rule's match depended on,
    /// for the `Vary` of the answer it decided (RFC 9110 §12.5.5): the fields its
    /// conditions read (`RewriteCond %{HTTP_USER_AGENT}`, `%{HTTP:Accept-Language}`;
    /// not a condition flagged `NV`), and its native `ua=` and `header=`
    /// conditions. So a cache in front of the mirror does not hand one client's
    /// redirect (or 403) to another whose header differs. Apache's mod_rewrite
    /// names them too, but only on an internal rewrite's answer: its redirects and
    /// `F`/`G` answers leave them out. As in Apache, only a rule that matched names
    /// them (the deciding one and those that handed the request on to it:
    /// [`crate::RuleSet::vary`]): an answer no rule decided (a file served because a condition failed)
    /// has none, or every file behind a user-agent rule would vary by user agent.
    /// Appended to `names` (each may repeat: [`join`] says each once); computed
    /// when asked, a rule without conditions costs one look.
    pub fn vary_names<'r>(&'r self, names: &mut Vec<&'r str>) {
        for c in self.conds.iter().filter(|c| !c.novary) {
            c.subject.headers_read(names);
        }
        if let Some(c) = &self.classify {
            if c.ua.is_some() {
                names.push("User-Agent");
            }
            names.extend(c.headers.iter().map(|(h, _)| h.as_str()));
        }
    }
}

/// `names` comma-separated, each once (ASCII case-insensitively); `None` if none.
pub fn join(names: &[&str]) -> Option<String> {
    let mut out = String::new();
    for (i, n) in names.iter().enumerate() {
        if names[..i].iter().any(|m| m.eq_ignore_ascii_case(n)) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(n);
    }
    (!out.is_empty()).then_some(out)
}
