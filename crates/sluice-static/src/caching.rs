//! What a file's answers carry by path beyond their own headers: `[files]
//! cache_control`, the operator's `Cache-Control` (nginx's `expires`, Apache's
//! mod_expires), and `[files] headers`, any other header the operator adds
//! (`Access-Control-Allow-Origin`, `X-Robots-Tag`: nginx's `add_header`, Apache's
//! `Header set`).
//!
//! Also `[files] rate_limits`: the bandwidth limit a file's answers get by path
//! (carried on the answer, `Response::limit`, for the server to apply).
//!
//! Owns: the rule lists, in their order, and which rules match a path: the first
//! `cache_control` rule; every `headers` rule, the first for each name (an
//! `always` rule for a name before it takes the name from every path rule); the
//! first `rate_limits` rule.
//! Must not: add them to anything but a file's own answers (200, 206, 304:
//! RFC 9110 §15.4.5 has a 304 carry what its 200 would); listings, errors and
//! redirects keep theirs.
//! Costs: nothing without rules; with them, one prefix and one suffix comparison
//! per rule tried, on the full path only (a kept answer carries the headers in its
//! bytes). A `headers` rule's line is written once, when the handler is built.

use sluice_config::{CacheControlRule, HeaderRule, RateLimitRule};

#[derive(Debug, Default)]
pub struct PathHeaders {
    /// (prefix without its leading `/`, as the handler's paths are; suffix; value)
    cache_control: Vec<(String, String, String)>,
    /// (prefix, suffix, the whole line `Name: value\r\n`, the index of the first
    /// rule with the same name: a later rule for a name matched already is skipped)
    headers: Vec<(String, String, Vec<u8>, usize)>,
    /// (prefix without its leading `/`, suffix, (rate, after))
    rates: Vec<(String, String, (u64, u64))>,
}

impl PathHeaders {
    pub fn new(
        cache_control: &[CacheControlRule],
        headers: &[HeaderRule],
        rates: &[RateLimitRule],
    ) -> PathHeaders {
        let bare = |p: &str| p.strip_prefix('/').unwrap_or(p).to_string();
        PathHeaders {
            cache_control: cache_control
                .iter()
                .map(|r| (bare(&r.prefix), r.suffix.clone(), r.value.clone()))
                .collect(),
            // `always` rules are the site's, on every answer (the server adds them);
            // a path rule after an `always` rule for its name never decides.
            headers: headers
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    let first = HeaderRule::first_for_name(headers, i);
                    (!headers[first].always)
                        .then(|| (bare(&r.prefix), r.suffix.clone(), r.line(), first))
                })
                .collect(),
            rates: rates
                .iter()
                .map(|r| (bare(&r.prefix), r.suffix.clone(), (r.rate, r.after)))
                .collect(),
        }
    }

    /// The bandwidth limit `(rate, after)` for the file at `rel`, if a rule matches.
    pub fn rate(&self, rel: &str) -> Option<(u64, u64)> {
        first(&self.rates, rel).copied()
    }

    /// The `Cache-Control` value for the file at `rel` (its path from the root,
    /// without the leading `/`), if a rule matches.
    pub fn cache_control(&self, rel: &str) -> Option<&str> {
        first(&self.cache_control, rel).map(String::as_str)
    }

    /// The other headers' lines for the file at `rel`, in rule order, each name
    /// once (its first matching rule's). Rules are at most 64, so which names are
    /// taken fits in one word.
    pub fn headers<'a>(&'a self, rel: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut taken = 0u64;
        self.headers.iter().filter_map(move |(p, s, line, first)| {
            let bit = 1u64 << (*first % 64);
            if taken & bit != 0 || !rel.starts_with(p.as_str()) || !rel.ends_with(s.as_str()) {
                return None;
            }
            taken |= bit;
            Some(line.as_slice())
        })
    }

    /// Whether there are any rules at all (the handler skips the lookups if not).
    pub fn is_empty(&self) -> bool {
        self.cache_control.is_empty() && self.headers.is_empty() && self.rates.is_empty()
    }
}

/// What the first of `rules` (prefix, suffix, what) whose prefix and suffix both
/// match `rel` gives.
fn first<'a, T>(rules: &'a [(String, String, T)], rel: &str) -> Option<&'a T> {
    rules
        .iter()
        .find(|(p, s, _)| rel.starts_with(p.as_str()) && rel.ends_with(s.as_str()))
        .map(|(_, _, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_rule_that_matches_decides() {
        let rule = |prefix: &str, suffix: &str, value: &str| CacheControlRule {
            prefix: prefix.into(),
            suffix: suffix.into(),
            value: value.into(),
        };
        let cc = PathHeaders::new(
            &[
                rule("/debian/dists/", "/InRelease", "max-age=120"),
                rule("/debian/", "", "max-age=86400"),
                rule("", ".html", "no-cache"),
            ],
            &[],
            &[],
        );
        assert_eq!(
            cc.cache_control("debian/dists/stable/InRelease"),
            Some("max-age=120")
        );
        assert_eq!(
            cc.cache_control("debian/dists/stable/Release"),
            Some("max-age=86400")
        );
        assert_eq!(cc.cache_control("debian/index.html"), Some("max-age=86400"));
        assert_eq!(cc.cache_control("about/index.html"), Some("no-cache"));
        assert_eq!(cc.cache_control("about/logo.png"), None);
        assert_eq!(PathHeaders::default().cache_control("debian/x"), None);
    }

    #[test]
    fn every_matching_header_rule_adds_its_line_each_name_once() {
        let rule = |prefix: &str, suffix: &str, name: &str, value: &str| HeaderRule {
            prefix: prefix.into(),
            suffix: suffix.into(),
            name: name.into(),
            value: value.into(),
            always: false,
        };
        let h = PathHeaders::new(
            &[],
            &[
                rule("/debian/pool/", "", "X-Robots-Tag", "noindex"),
                rule("/", "", "Access-Control-Allow-Origin", "*"),
                rule("/debian/", "", "x-robots-tag", "none"),
                rule("", ".iso", "Content-Disposition", "attachment"),
            ],
            &[],
        );
        let lines = |rel| -> Vec<String> {
            h.headers(rel)
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .collect()
        };
        assert_eq!(
            lines("debian/pool/main/a.deb"),
            [
                "X-Robots-Tag: noindex\r\n",
                "Access-Control-Allow-Origin: *\r\n"
            ],
            "the first rule for a name wins, whatever its case"
        );
        assert_eq!(
            lines("debian/dists/Release"),
            [
                "Access-Control-Allow-Origin: *\r\n",
                "x-robots-tag: none\r\n"
            ]
        );
        assert_eq!(
            lines("cd/x.iso"),
            [
                "Access-Control-Allow-Origin: *\r\n",
                "Content-Disposition: attachment\r\n"
            ]
        );
        assert!(PathHeaders::default().headers("x").next().is_none());
    }

    #[test]
    fn an_always_rule_before_a_path_rule_takes_its_name() {
        let rule = |prefix: &str, name: &str, value: &str, always: bool| HeaderRule {
            prefix: prefix.into(),
            suffix: String::new(),
            name: name.into(),
            value: value.into(),
            always,
        };
        let h = PathHeaders::new(
            &[],
            &[
                rule("/embed/", "Referrer-Policy", "origin", false),
                rule("", "X-Frame-Options", "DENY", true),
                rule("", "referrer-policy", "no-referrer", true),
                rule("/embed/", "x-frame-options", "SAMEORIGIN", false),
            ],
            &[],
        );
        let lines: Vec<_> = h.headers("embed/a.html").collect();
        assert_eq!(lines, [b"Referrer-Policy: origin\r\n".as_slice()]);
    }

    #[test]
    fn the_first_rate_rule_that_matches_decides() {
        let rule = |prefix: &str, suffix: &str, rate: u64, after: u64| RateLimitRule {
            prefix: prefix.into(),
            suffix: suffix.into(),
            rate,
            after,
        };
        let h = PathHeaders::new(
            &[],
            &[],
            &[
                rule("/debian/dists/", "", 0, 0),
                rule("/debian/", ".iso", 1_000_000, 10_000_000),
                rule("", ".iso", 500_000, 0),
            ],
        );
        assert!(!h.is_empty());
        assert_eq!(h.rate("debian/dists/x.iso"), Some((0, 0)));
        assert_eq!(h.rate("debian/cd/x.iso"), Some((1_000_000, 10_000_000)));
        assert_eq!(h.rate("fedora/x.iso"), Some((500_000, 0)));
        assert_eq!(h.rate("debian/pool/x.deb"), None);
    }
}
