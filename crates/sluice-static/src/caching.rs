//! What a file's answers tell HTTP caches: `[files] cache_control`, the operator's
//! `Cache-Control` by path (nginx's `expires`, Apache's mod_expires).
//!
//! Owns: the rules, in their order, and the choice of the first that matches.
//! Must not: add the header to anything but a file's own answers (200, 206, 304:
//! RFC 9110 §15.4.5 has a 304 carry what its 200 would); listings, errors and
//! redirects keep theirs.
//! Costs: nothing without rules; with them, one prefix and one suffix comparison
//! per rule tried, on the full path only (a kept answer carries the header in its
//! bytes).

use sluice_config::CacheControlRule;

#[derive(Debug, Default)]
pub struct CacheControl {
    /// (prefix without its leading `/`, as the handler's paths are; suffix; value)
    rules: Vec<(String, String, String)>,
}

impl CacheControl {
    pub fn new(rules: &[CacheControlRule]) -> CacheControl {
        CacheControl {
            rules: rules
                .iter()
                .map(|r| {
                    let prefix = r.prefix.strip_prefix('/').unwrap_or(&r.prefix);
                    (prefix.to_string(), r.suffix.clone(), r.value.clone())
                })
                .collect(),
        }
    }

    /// The value for the file at `rel` (its path from the root, without the
    /// leading `/`), if a rule matches.
    pub fn for_path(&self, rel: &str) -> Option<&str> {
        self.rules
            .iter()
            .find(|(p, s, _)| rel.starts_with(p.as_str()) && rel.ends_with(s.as_str()))
            .map(|(_, _, v)| v.as_str())
    }
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
        let cc = CacheControl::new(&[
            rule("/debian/dists/", "/InRelease", "max-age=120"),
            rule("/debian/", "", "max-age=86400"),
            rule("", ".html", "no-cache"),
        ]);
        assert_eq!(
            cc.for_path("debian/dists/stable/InRelease"),
            Some("max-age=120")
        );
        assert_eq!(
            cc.for_path("debian/dists/stable/Release"),
            Some("max-age=86400")
        );
        assert_eq!(cc.for_path("debian/index.html"), Some("max-age=86400"));
        assert_eq!(cc.for_path("about/index.html"), Some("no-cache"));
        assert_eq!(cc.for_path("about/logo.png"), None);
        assert_eq!(CacheControl::default().for_path("debian/x"), None);
    }
}
