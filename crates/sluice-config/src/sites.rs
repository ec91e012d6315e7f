//! Virtual hosts: `[[site]]` sections, and choosing a site by `Host`.
//!
//! Owns the site list as the server sees it (every site resolved to a root, file
//! settings, rules files and an access log) and [`HostIndex`], the lookup from a
//! request's host to a site. Pure data: no sockets, no rules compilation.
//!
//! The top-level `[server] root`, `[rules]`, `[files]` and `[log] access` form the
//! *main site*: it answers requests whose host names no `[[site]]` (or that have no
//! host), unless a `[[site]]` says `default = true`. So a config without `[[site]]`
//! is one site, exactly as before.
//!
//! Names are matched as nginx does for the two forms it has without regexes: exact
//! names first, then `*.example.org` (any depth of subdomain, not `example.org`
//! itself), longest suffix first. Matching is ASCII case-insensitive and ignores a
//! trailing dot. Cost per request: nothing with one site; otherwise one hash lookup
//! plus one per wildcard suffix of the host (a few).

use crate::error::ConfigError;
use crate::sections::{Config, FilesSection, SiteSection};
use std::collections::HashMap;
use std::path::PathBuf;

/// A site resolved against the top-level settings.
#[derive(Clone, Debug)]
pub struct Site {
    /// The first name, or `"(main)"` for the top-level site; for messages and logs.
    pub label: String,
    pub names: Vec<String>,
    pub root: PathBuf,
    /// Directories served at path prefixes ([`crate::AliasRule`]), as checked by
    /// [`aliases`]: (prefix without its slashes, e.g. `"pub/ubuntu"`, root).
    pub aliases: Vec<(String, PathBuf)>,
    pub files: FilesSection,
    pub rules: Vec<PathBuf>,
    pub lenient: bool,
    /// `None`: no access log for this site.
    pub access_log: Option<String>,
    /// `[http] limit_rate` and `limit_rate_after` with the site's own over them.
    pub limit_rate: u64,
    pub limit_rate_after: u64,
}

/// Host → site index.
#[derive(Clone, Debug, Default)]
pub struct HostIndex {
    exact: HashMap<String, usize>,
    /// (".example.org", site), longest suffix first.
    wildcard: Vec<(String, usize)>,
    default: usize,
}

impl HostIndex {
    /// The site for a request's host (port already stripped).
    pub fn find(&self, host: Option<&str>) -> usize {
        let Some(h) = host else {
            return self.default;
        };
        if self.exact.is_empty() && self.wildcard.is_empty() {
            return self.default;
        }
        let h = h.strip_suffix('.').unwrap_or(h);
        let lower;
        let h = if h.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = h.to_ascii_lowercase();
            lower.as_str()
        } else {
            h
        };
        if let Some(&i) = self.exact.get(h) {
            return i;
        }
        for (suffix, i) in &self.wildcard {
            if h.len() > suffix.len() && h.ends_with(suffix.as_str()) {
                return *i;
            }
        }
        self.default
    }

    pub fn default_site(&self) -> usize {
        self.default
    }
}

/// Resolve the config's sites: index 0 is the main (top-level) site.
///
/// Errors name the file, the line of the site's key, and the key (`site[2].names`).
pub fn resolve(cfg: &Config) -> Result<(Vec<Site>, HostIndex), ConfigError> {
    let main_log = (cfg.log.access != "off").then(|| cfg.log.access.clone());
    let mut sites = vec![Site {
        label: "(main)".into(),
        names: Vec::new(),
        root: cfg.server.root.clone(),
        aliases: aliases(&cfg.server.alias)
            .map_err(|(i, k, m)| cfg.source.error(&format!("server.alias[{i}].{k}"), m))?,
        files: cfg.files.clone(),
        rules: cfg.rules.files.clone(),
        lenient: cfg.rules.lenient,
        access_log: main_log.clone(),
        limit_rate: cfg.http.limit_rate,
        limit_rate_after: cfg.http.limit_rate_after,
    }];
    let mut idx = HostIndex::default();
    let mut seen: HashMap<String, String> = HashMap::new();
    for (n, s) in cfg.site.iter().enumerate() {
        let what = cfg.site_name(n);
        if s.names.is_empty() && !s.default {
            return Err(cfg.site_error(n, "", "names = [...] is needed (or default = true)"));
        }
        if s.root.as_os_str().is_empty() {
            return Err(cfg.site_error(n, "", "root is needed"));
        }
        let site_no = sites.len();
        let mut names = Vec::new();
        for name in &s.names {
            let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
            let bare = name.strip_prefix("*.").unwrap_or(&name);
            if bare.is_empty()
                || bare.contains('*')
                || !bare
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b))
            {
                return Err(cfg.site_error(
                    n,
                    ".names",
                    format!("{name:?}: a host name, or *.domain for its subdomains"),
                ));
            }
            if let Some(other) = seen.insert(name.clone(), what.clone()) {
                return Err(cfg.site_error(n, ".names", format!("{name:?} is also in {other}")));
            }
            match name.strip_prefix('*') {
                Some(suffix) => idx.wildcard.push((suffix.to_string(), site_no)),
                None => {
                    idx.exact.insert(name.clone(), site_no);
                }
            }
            names.push(name);
        }
        if s.default {
            if idx.default != 0 {
                return Err(cfg.site_error(
                    n,
                    ".default",
                    format!(
                        "true, but {} already is the default",
                        cfg.site_name(idx.default - 1)
                    ),
                ));
            }
            idx.default = site_no;
        }
        let limit_rate = s.limit_rate.unwrap_or(cfg.http.limit_rate);
        let min = cfg.condition.min_send_rate;
        if let Some(m) = crate::bounds::limit_rate_problem(limit_rate, min) {
            return Err(cfg.site_error(n, ".limit_rate", m));
        }
        let files = site_files(&cfg.files, s);
        // (`[files]`'s own rules are checked with `[files]`: `validate.rs`.)
        for (i, r) in s.rate_limits.iter().flatten().enumerate() {
            if let Some(m) = crate::bounds::limit_rate_problem(r.rate, min) {
                return Err(cfg.site_error(n, &format!(".rate_limits[{}].rate", i + 1), m));
            }
        }
        let aliases = aliases(&s.alias)
            .map_err(|(i, k, m)| cfg.site_error(n, &format!(".alias[{i}].{k}"), m))?;
        let access_log = match s.access_log.as_deref() {
            Some("off") => None,
            Some("") => return Err(cfg.site_error(n, ".access_log", "empty path (use \"off\")")),
            Some(p) => Some(p.to_string()),
            None => main_log.clone(),
        };
        sites.push(Site {
            label: names.first().cloned().unwrap_or_else(|| what.clone()),
            names,
            root: s.root.clone(),
            aliases,
            files,
            rules: s.rules.clone(),
            lenient: s.lenient,
            access_log,
            limit_rate,
            limit_rate_after: s.limit_rate_after.unwrap_or(cfg.http.limit_rate_after),
        });
    }
    idx.wildcard
        .sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
    Ok((sites, idx))
}

/// What [`aliases`] found wrong: the rule's number (from 1), its key, the message.
pub type AliasError = (usize, &'static str, String);

/// Check a site's aliases and give each prefix as a lookup compares it: its
/// segments without the slashes around them (`"/pub/ubuntu/"` → `"pub/ubuntu"`).
/// A prefix must be an absolute path of plain segments (no empty ones, no `.` or
/// `..`, none of `%?#\\` or NUL: it is compared with the decoded, normalized
/// path), not `/` itself (that is the site's `root`), and not given twice; a root
/// must be named. Whether the root exists is the server's check, when it opens it.
/// An error is (the rule's number from 1, the key, what is wrong).
pub fn aliases(rules: &[crate::AliasRule]) -> Result<Vec<(String, PathBuf)>, AliasError> {
    let mut out: Vec<(String, PathBuf)> = Vec::with_capacity(rules.len());
    for (i, a) in rules.iter().enumerate() {
        let p = &a.prefix;
        let inner = p
            .strip_prefix('/')
            .map(|x| x.strip_suffix('/').unwrap_or(x));
        let ok = inner.is_some_and(|x| {
            !x.is_empty()
                && x.split('/').all(|seg| !matches!(seg, "" | "." | ".."))
                && !x.contains(['%', '?', '#', '\\', '\0'])
        });
        let Some(inner) = inner.filter(|_| ok) else {
            return Err((
                i + 1,
                "prefix",
                format!("{p:?}: an absolute path of plain segments, like \"/ubuntu\" (not \"/\", no \".\" or \"..\")"),
            ));
        };
        if a.root.as_os_str().is_empty() {
            return Err((i + 1, "root", "is needed".into()));
        }
        if out.iter().any(|(q, _)| q == inner) {
            return Err((i + 1, "prefix", format!("{p:?} is given twice")));
        }
        out.push((inner.to_string(), a.root.clone()));
    }
    Ok(out)
}

impl Config {
    /// The file that has `self.site[n]`, and the site's number in it (from 1).
    fn site_at(&self, n: usize) -> (&crate::Source, usize) {
        match self.site_sources.get(n) {
            Some((src, k)) => (src, *k),
            None => (&self.source, n + 1),
        }
    }

    /// How messages name `self.site[n]`: `site[2]`, or `site[1] of FILE` for a
    /// site from an included file.
    pub(crate) fn site_name(&self, n: usize) -> String {
        match self.site_at(n) {
            (src, k) if src.origin != self.source.origin => format!("site[{k}] of {}", src.origin),
            (_, k) => format!("site[{k}]"),
        }
    }

    /// `FILE:LINE: ` where the site that [`resolve`] numbers `i` sets `key`
    /// (`i` 0 is the top level, whose key is `main_key`, e.g. `server.root`; a
    /// `[[site]]`'s is `site[k]` followed by `site_key`, e.g. `.root`), in the
    /// file it was written in: for the checks made when the config is put to use
    /// (a root that is not there, a rules file that cannot be read).
    pub fn site_key_at(&self, i: usize, main_key: &str, site_key: &str) -> String {
        match i.checked_sub(1) {
            None => self.source.at(main_key),
            Some(n) => {
                let (src, k) = self.site_at(n);
                src.at(&format!("site[{k}]{site_key}"))
            }
        }
    }

    /// `FILE:LINE: site[k]KEY: msg` for `self.site[n]`, in the file it was written
    /// in (`key` is `""` or `".names"` and the like).
    pub(crate) fn site_error(
        &self,
        n: usize,
        key: &str,
        msg: impl std::fmt::Display,
    ) -> ConfigError {
        let (src, k) = self.site_at(n);
        src.error(&format!("site[{k}]{key}"), msg)
    }
}

/// A site's file settings: `[files]` with what the site says over it. Settings
/// the site gives replace `[files]`'s, except the two maps (`types`,
/// `error_pages`), which are merged key by key, the site's winning: a site that
/// adds one type or one page keeps the others.
fn site_files(main: &FilesSection, s: &SiteSection) -> FilesSection {
    let mut f = main.clone();
    // Each key the site gives (the same name in both sections) replaces the main's.
    macro_rules! replace {
        ($($key:ident),*) => {$(
            if let Some(v) = &s.$key {
                f.$key = v.clone();
            }
        )*};
    }
    replace!(
        listing,
        hidden,
        index,
        listing_header,
        listing_readme,
        symlinks,
        precompressed,
        compress_listings,
        cache_control,
        headers,
        rate_limits
    );
    f.types
        .extend(s.types.iter().map(|(k, v)| (k.clone(), v.clone())));
    f.error_pages
        .extend(s.error_pages.iter().map(|(k, v)| (*k, v.clone())));
    f
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn hosts_choose_sites() {
        let c = Config::parse(
            r#"
[[site]]
names = ["mirror.example.org", "*.example.org"]
root = "/a"
[[site]]
names = ["*.cdn.example.org", "Static.Example.NET"]
root = "/b"
listing = false
"#,
            "x.toml",
        )
        .unwrap();
        let (sites, idx) = super::resolve(&c).unwrap();
        assert_eq!(sites.len(), 3);
        assert!(!sites[2].files.listing && sites[1].files.listing);
        let f = |h| idx.find(Some(h));
        assert_eq!(f("mirror.example.org"), 1);
        assert_eq!(f("MIRROR.example.org."), 1);
        assert_eq!(f("ftp.example.org"), 1);
        assert_eq!(f("a.b.example.org"), 1);
        assert_eq!(f("x.cdn.example.org"), 2, "longest suffix wins");
        assert_eq!(f("static.example.net"), 2);
        assert_eq!(f("example.org"), 0, "*.example.org is subdomains only");
        assert_eq!(f("other"), 0);
        assert_eq!(idx.find(None), 0);
    }

    #[test]
    fn default_site_and_errors() {
        let c = Config::parse(
            "[[site]]\nnames=[\"a\"]\nroot=\"/a\"\n[[site]]\ndefault=true\nroot=\"/b\"\n",
            "x",
        )
        .unwrap();
        let (_, idx) = super::resolve(&c).unwrap();
        assert_eq!(
            (idx.find(None), idx.find(Some("zzz")), idx.find(Some("a"))),
            (2, 2, 1)
        );
        for (text, want) in [
            ("[[site]]\nroot=\"/a\"\n", "s.toml:1: site[1]: names"),
            (
                "[[site]]\nnames=[\"a\"]\n",
                "s.toml:1: site[1]: root is needed",
            ),
            (
                "[[site]]\nnames=[\"a\"]\nroot=\"/a\"\n[[site]]\nnames=[\"A\"]\nroot=\"/b\"\n",
                "s.toml:5: site[2].names: \"a\" is also in site[1]",
            ),
            (
                "[[site]]\nnames=[\"a*b\"]\nroot=\"/a\"\n",
                "s.toml:2: site[1].names: \"a*b\": a host name",
            ),
            (
                "[[site]]\ndefault=true\nroot=\"/a\"\n[[site]]\ndefault=true\nroot=\"/b\"\n",
                "s.toml:5: site[2].default: true, but site[1] already is the default",
            ),
        ] {
            let e = Config::parse(text, "s.toml").unwrap_err();
            assert!(e.0.starts_with(want), "{text}: {e}");
        }
        let e =
            Config::parse("[[site]]\nnames=[\"a\"]\nroot=\"/a\"\nrooot=1\n", "s.toml").unwrap_err();
        assert!(e.0.starts_with("s.toml:4:"), "{e}");
    }

    #[test]
    fn a_site_gives_its_own_file_settings_over_the_main_ones() {
        let c = Config::parse(
            r#"
[files]
index = ["index.html", "index.htm"]
types = { webmanifest = "application/manifest+json", deb = "application/x-deb" }
error_pages = { 404 = "/.errors/404.html", 403 = "/.errors/403.html" }
[[files.cache_control]]
suffix = ".deb"
value = "max-age=86400"
[[files.headers]]
name = "Access-Control-Allow-Origin"
value = "*"

[[site]]
names = ["www.example.org"]
root = "/www"
index = ["index.xhtml"]
symlinks = "never"
precompressed = false
compress_listings = false
types = { deb = "application/vnd.debian.binary-package", md = "text/markdown" }
error_pages = { 404 = "/errors/missing.html" }
[[site.cache_control]]
prefix = "/assets/"
value = "public, max-age=31536000, immutable"
[[site.headers]]
name = "X-Robots-Tag"
value = "noindex"

[[site]]
names = ["mirror.example.org"]
root = "/mirror"
"#,
            "x.toml",
        )
        .unwrap();
        let (sites, _) = super::resolve(&c).unwrap();
        let (main, www, mirror) = (&sites[0].files, &sites[1].files, &sites[2].files);
        // Given: replaced.
        assert_eq!(www.index, ["index.xhtml"]);
        assert_eq!(www.symlinks, crate::SymlinkPolicy::Never);
        assert!(!www.precompressed && !www.compress_listings);
        assert_eq!(www.cache_control.len(), 1);
        assert_eq!(www.cache_control[0].prefix, "/assets/");
        assert_eq!(www.headers.len(), 1);
        assert_eq!(www.headers[0].name, "X-Robots-Tag");
        // The maps: merged, the site's key winning, the main's others kept.
        assert_eq!(www.types["deb"], "application/vnd.debian.binary-package");
        assert_eq!(www.types["md"], "text/markdown");
        assert_eq!(www.types["webmanifest"], "application/manifest+json");
        assert_eq!(www.error_pages[&404], "/errors/missing.html");
        assert_eq!(www.error_pages[&403], "/.errors/403.html");
        // Not given: the main's, for that site and the main site alike.
        for f in [main, mirror] {
            assert_eq!(f.index, ["index.html", "index.htm"]);
            assert_eq!(f.symlinks, crate::SymlinkPolicy::InsideRoot);
            assert!(f.precompressed && f.compress_listings);
            assert_eq!(f.cache_control[0].suffix, ".deb");
            assert_eq!(f.headers[0].value, "*");
            assert_eq!(f.types.len(), 2);
            assert_eq!(f.error_pages[&404], "/.errors/404.html");
        }
        // A site's values are checked as `[files]`'s are, with the line.
        for (text, want) in [
            (
                "[[site]]\nnames=[\"a\"]\nroot=\"/a\"\nindex=[\"../x.html\"]\n",
                "s.toml:4: site[1].index: \"../x.html\": an index is a file name",
            ),
            (
                "[[site]]\nnames=[\"a\"]\nroot=\"/a\"\nerror_pages={500=\"/e.html\"}\n",
                "s.toml:4: site[1].error_pages: \"500\": a page can be given for 403, 404 and 410",
            ),
            (
                "[[site]]\nnames=[\"a\"]\nroot=\"/a\"\ntypes={x=\"bad\"}\n",
                "s.toml:4: site[1].types: \"x\" = \"bad\": not a media type",
            ),
            (
                "[files]\nindex=[\"a/b.html\"]\n",
                "s.toml:2: files.index: \"a/b.html\": an index is a file name",
            ),
            (
                "[[site]]\nnames=[\"a\"]\nroot=\"/a\"\n[[site.headers]]\nname=\"X-A\"\nvalue=\"1\"\nalways=true\nsuffix=\".x\"\n",
                "s.toml:1: site[1].headers: rule 1: an always rule is on every answer",
            ),
        ] {
            let e = Config::parse(text, "s.toml").unwrap_err();
            assert!(e.0.starts_with(want), "{text}: {e}");
        }
    }
}
