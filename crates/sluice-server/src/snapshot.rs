//! The compiled configuration a worker serves with ([`Snapshot`]): the config, its
//! sites with their compiled rules, the parsed address lists and the TLS settings.
//! Built whole from a validated config, replaced whole on reload, never mutated.
//! Building it reads the disk (roots, rules files, certificates): never on a worker.

use sluice_config::Valid;
use sluice_http::Limits;
use sluice_static::{Root, StaticHandler};
use std::sync::Arc;

/// A compiled, validated configuration: what a worker serves with. Replaced whole on
/// reload; never mutated.
pub struct Snapshot {
    pub config: Valid,
    /// Sites, the main (top-level) one first; see `sluice_config::sites`.
    pub sites: Vec<Site>,
    pub hosts: sluice_config::sites::HostIndex,
    /// `condition.cap_exempt`, parsed.
    pub cap_exempt: Vec<sluice_condition::Cidr>,
    /// `status.allow`, parsed.
    pub status_allow: Vec<sluice_condition::Cidr>,
    /// `server.proxy_trusted`, parsed.
    pub proxy_trusted: Vec<sluice_condition::Cidr>,
    /// The `[tls]` section loaded (certificates read and checked), if HTTPS is on.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// One line about it for logs and `sluice check`.
    pub tls_summary: Option<String>,
    /// The devices of the sites' roots and aliases (`st_dev`), and of the file
    /// systems mounted below them, for the disk threads' lanes
    /// (`disk::DiskPool::know`).
    pub devices: Vec<u64>,
}

/// One site, compiled: its settings and its own rules (never another site's).
pub struct Site {
    pub conf: sluice_config::sites::Site,
    pub rules: Option<Arc<sluice_rules::RuleSet>>,
    /// A file or directory in this site's root has the status page's path: the
    /// file wins (a status path never shadows content) and the page is not served
    /// on this site.
    pub status_shadowed: bool,
    /// The root as the rules' `%{REQUEST_FILENAME}` and `%{DOCUMENT_ROOT}` show
    /// it: canonical, as the file handler opens it.
    pub canon_root: std::path::PathBuf,
    /// The header lines of the site's `always` header rules (the first rule for
    /// a name), added to every answer: the request phases' (`phases::respond`),
    /// a range cap's or a busy server's 503, and, on the default site, the 400s
    /// and 408s of heads that named no site ([`Site::add_always`]).
    pub always_headers: Vec<u8>,
    /// `always` rules that a path rule for the same name comes before: (name,
    /// line), added unless the answer has the name already (the path rule
    /// matched: the first rule for a name wins). Empty unless a config does that.
    pub always_unless_set: Vec<(String, Vec<u8>)>,
}

impl Site {
    /// Put the site's `always` headers on an answer: its lines, then each one a
    /// path rule comes before unless the answer carries that name already (the
    /// path rule matched: the first rule for a name wins). Costs an empty check
    /// per answer on a site without `always` rules.
    pub fn add_always(&self, h: &mut sluice_http::response::HeaderBuf) {
        if !self.always_headers.is_empty() {
            h.add_lines(&self.always_headers);
        }
        for (name, line) in &self.always_unless_set {
            if !h.has(name) {
                h.add_lines(line);
            }
        }
    }
}

impl Snapshot {
    /// Compile everything a validated config refers to. Errors are phrased for
    /// the operator; on reload they leave the old snapshot serving.
    /// `rates`: where the rules' rate conditions count (the server's shared cells;
    /// `None`: each rule set its own table).
    pub fn build(
        config: Valid,
        rates: Option<sluice_rules::rates::SharedRates>,
    ) -> Result<Snapshot, String> {
        Self::build_with(config, rates, Rules::Compile(None))
    }

    /// Everything [`Snapshot::build`] checks, with the rules files read and parsed
    /// for their errors and warnings but not compiled (`sluice reload --config`'s
    /// check, beside a serving server: a million regex rules parse in about half
    /// their compile time). The snapshot has no rules: it is for the check only.
    pub fn check(config: Valid) -> Result<Snapshot, String> {
        Self::build_with(config, None, Rules::Check)
    }

    /// As [`Snapshot::build`], with what to do with the rules files.
    pub fn build_with(
        config: Valid,
        rates: Option<sluice_rules::rates::SharedRates>,
        rules_mode: Rules<'_>,
    ) -> Result<Snapshot, String> {
        let (confs, hosts) = sluice_config::sites::resolve(&config).map_err(|e| e.to_string())?;
        let mut sites = Vec::with_capacity(confs.len());
        let mut devices = Vec::new();
        for (i, conf) in confs.into_iter().enumerate() {
            let root = &conf.root;
            let site = if conf.names.is_empty() && sites.is_empty() {
                String::new()
            } else {
                format!("site {}: ", conf.label)
            };
            // Each message starts with where the config says it (`file:line: `).
            let what = format!("{}{site}", config.site_key_at(i, "server.root", ".root"));
            let meta = std::fs::metadata(root)
                .map_err(|e| format!("{what}root {}: {e}", root.display()))?;
            if !meta.is_dir() {
                return Err(format!("{what}root {}: not a directory", root.display()));
            }
            let dev = std::os::unix::fs::MetadataExt::dev(&meta);
            devices.push(dev);
            devices.extend(mounted_below(root, dev));
            for (k, (prefix, dir)) in conf.aliases.iter().enumerate() {
                let at = config.site_key_at(
                    i,
                    &format!("server.alias[{}].root", k + 1),
                    &format!(".alias[{}].root", k + 1),
                );
                let alias = format!("{at}{site}alias /{prefix}: root {}", dir.display());
                match std::fs::metadata(dir) {
                    Ok(m) if m.is_dir() => {
                        let dev = std::os::unix::fs::MetadataExt::dev(&m);
                        devices.push(dev);
                        devices.extend(mounted_below(dir, dev));
                    }
                    Ok(_) => return Err(format!("{alias}: not a directory")),
                    Err(e) => return Err(format!("{alias}: {e}")),
                }
            }
            let opts = sluice_rules::LoadOptions {
                lenient: conf.lenient,
                rates,
                rate_salt: i as u32,
            };
            let rules = match rules_mode {
                _ if conf.rules.is_empty() => None,
                Rules::Check => {
                    let warnings = sluice_rules::RuleSet::check_files(&conf.rules, &opts)
                        .map_err(|e| rules_error(&config, i, &site, e))?;
                    for w in warnings {
                        tracing::warn!(site = %conf.label, "{w}");
                    }
                    None
                }
                Rules::Compile(previous) => {
                    let kept = previous
                        .and_then(|p| p.sites.get(i))
                        .and_then(|s| s.rules.as_ref())
                        .filter(|set| set.inputs().unchanged(&conf.rules, &opts));
                    if let Some(set) = kept {
                        tracing::info!(site = %conf.label, "rules unchanged: the compiled set is kept");
                        Some(Arc::clone(set))
                    } else {
                        let set = sluice_rules::RuleSet::load_files(&conf.rules, &opts)
                            .map_err(|e| rules_error(&config, i, &site, e))?;
                        tracing::info!(site = %conf.label, summary = %set.summary(), "rules compiled");
                        Some(Arc::new(set))
                    }
                }
            };
            let status_shadowed = config.status.enabled
                && root
                    .join(config.status.path.trim_start_matches('/'))
                    .symlink_metadata()
                    .is_ok();
            if status_shadowed {
                tracing::warn!(
                    site = %conf.label,
                    path = %config.status.path,
                    "a file in this site's root has the status page's path: the file is served, not the status page (choose another status.path)"
                );
            }
            let canon_root = std::fs::canonicalize(root)
                .map_err(|e| format!("{what}root {}: {e}", root.display()))?;
            let (always_headers, always_unless_set) = always_lines(&conf.files.headers);
            sites.push(Site {
                conf,
                rules,
                status_shadowed,
                canon_root,
                always_headers,
                always_unless_set,
            });
        }
        use sluice_condition::Cidr;
        let cidrs = |list: &[String], key: &str| {
            Cidr::parse_list(list, key).map_err(|e| format!("{}{e}", config.source.at(key)))
        };
        let cap_exempt = cidrs(&config.condition.cap_exempt, "condition.cap_exempt")?;
        let status_allow = cidrs(&config.status.allow, "status.allow")?;
        let proxy_trusted = cidrs(&config.server.proxy_trusted, "server.proxy_trusted")?;
        let (tls, tls_summary) = if config.tls.enabled() {
            let t = sluice_tls::load(&config.tls)
                .map_err(|e| format!("{}{e}", config.source.at(&e.key)))?;
            (Some(t.config), Some(t.summary))
        } else {
            (None, None)
        };
        Ok(Snapshot {
            config,
            sites,
            hosts,
            cap_exempt,
            status_allow,
            proxy_trusted,
            tls,
            tls_summary,
            devices: {
                devices.sort_unstable();
                devices.dedup();
                devices
            },
        })
    }

    /// Rules this snapshot compiled rather than kept from `previous` (a reload:
    /// `Rules::Compile(Some(previous))` keeps a site's set by sharing it).
    pub fn rules_compiled_since(&self, previous: &Snapshot) -> u64 {
        let kept = |set: &Arc<sluice_rules::RuleSet>| {
            previous
                .sites
                .iter()
                .filter_map(|s| s.rules.as_ref())
                .any(|p| Arc::ptr_eq(p, set))
        };
        self.sites
            .iter()
            .filter_map(|s| s.rules.as_ref())
            .filter(|set| !kept(set))
            .map(|set| set.len() as u64)
            .sum()
    }

    /// One file handler per site, in site order (each owns its own cache).
    pub fn static_handlers(&self) -> std::io::Result<Vec<StaticHandler>> {
        self.sites
            .iter()
            .map(|s| static_handler(&s.conf, &self.config))
            .collect()
    }

    pub fn limits(&self) -> Limits {
        http_limits(&self.config.http)
    }
}

/// What [`Snapshot::build_with`] does with a site's rules files.
#[derive(Clone, Copy)]
pub enum Rules<'a> {
    /// Compile them, keeping `previous`'s set for a site whose files would read
    /// the same bytes with the same options (`sluice_rules::inputs`): a reload.
    Compile(Option<&'a Snapshot>),
    /// Read and parse them for their errors only ([`Snapshot::check`]).
    Check,
}

/// A rules file's error as the operator reads it: a file that cannot be read is
/// named where the config names it; an error inside one, at its own line.
fn rules_error(config: &Valid, site_no: usize, site: &str, e: sluice_rules::LoadError) -> String {
    let at = match e.line {
        0 => config.site_key_at(site_no, "rules.files", ".rules"),
        _ => String::new(),
    };
    format!("{at}{site}{e}")
}

/// Whether an error page's path (`/errors/404.html`) names a file, opened as the
/// handler opens it (`site_root`: the alias it is under, the symlink policy). A
/// check for `sluice check`'s warnings only: the page is looked up again at each
/// error, and may appear later.
fn error_page_exists(root: &Root, page: &str) -> bool {
    sluice_static::path::normalize(page, true).is_ok_and(|n| {
        root.open(&n.rel)
            .and_then(|f| f.metadata())
            .is_ok_and(|m| m.is_file())
    })
}

/// The request-head limits `[http]` sets (for the workers, and the front process).
pub fn http_limits(http: &sluice_config::HttpSection) -> Limits {
    Limits {
        max_request_line: http.max_request_line,
        max_head: http.max_head,
        max_headers: http.max_headers,
    }
}

impl Snapshot {
    /// What `sluice check` prints under "OK": a line per site (its names, root, rules
    /// and access log), one for HTTPS, and one for the disk threads' lanes when
    /// the files are on more than one device; and the rules' warnings, for stderr.
    pub fn describe(&self) -> (Vec<String>, Vec<String>) {
        let (mut lines, mut warnings) = (Vec::new(), Vec::new());
        for (i, site) in self.sites.iter().enumerate() {
            let c = &site.conf;
            if i == 0
                && self.sites.len() > 1
                && c.names.is_empty()
                && self.hosts.default_site() != 0
            {
                continue; // the top level is not used: a [[site]] is the default
            }
            let names = if c.names.is_empty() {
                "-".to_string()
            } else {
                c.names.join(" ")
            };
            let default = if self.hosts.default_site() == i {
                " (default)"
            } else {
                ""
            };
            // A site from an included file says which (site i is the config's
            // site i - 1; the top level is 0).
            let from = i
                .checked_sub(1)
                .and_then(|n| self.config.site_sources.get(n))
                .filter(|(src, _)| src.origin != self.config.source.origin)
                .map_or(String::new(), |(src, _)| format!(" (from {})", src.origin));
            let rules = match &site.rules {
                Some(r) => {
                    warnings.extend(r.warnings.iter().map(|w| format!("{}: {w}", c.label)));
                    r.summary()
                }
                None => "no rules".into(),
            };
            let root = site_root(c).ok();
            for (status, page) in &c.files.error_pages {
                if !root.as_ref().is_some_and(|r| error_page_exists(r, page)) {
                    warnings.push(format!(
                        "{}: error page for {status} {page}: no such file under the root (the short text is sent instead)",
                        c.label
                    ));
                }
            }
            let aliases: String = c
                .aliases
                .iter()
                .map(|(p, d)| format!(" (/{p}/ from {})", d.display()))
                .collect();
            lines.push(format!(
                "site {}{default}{from}: names {names}; root {}{aliases}; {rules}; log {}",
                c.label,
                c.root.display(),
                c.access_log.as_deref().unwrap_or("off")
            ));
        }
        if self.devices.len() > 1 && self.config.files.disk_threads > 0 {
            let devs: Vec<String> = self
                .devices
                .iter()
                .map(|&d| crate::disk::device_name(d))
                .collect();
            lines.push(format!(
                "disk lanes: {} (the devices of the roots, aliases and file systems mounted below them: no one device's reads may take every disk thread)",
                devs.join(" ")
            ));
        }
        if let Some(t) = &self.tls_summary {
            lines.push(format!(
                "https on {}: {t}",
                self.config
                    .tls
                    .listen
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
        (lines, warnings)
    }
}

/// `Name: value\r\n` for each `always` header rule that is the first rule for
/// its name (the site's `always_headers`), and (name, line) for each whose name a
/// path rule takes first (`always_unless_set`); one after an `always` rule for
/// its name is never sent.
fn always_lines(rules: &[sluice_config::HeaderRule]) -> (Vec<u8>, Vec<(String, Vec<u8>)>) {
    let (mut lines, mut unless_set) = (Vec::new(), Vec::new());
    for (i, r) in rules.iter().enumerate().filter(|(_, r)| r.always) {
        match sluice_config::HeaderRule::first_for_name(rules, i) {
            first if first == i => lines.extend_from_slice(&r.line()),
            first if !rules[first].always => unless_set.push((r.name.clone(), r.line())),
            _ => {}
        }
    }
    (lines, unless_set)
}

/// The file handler for one site of `config`, as a worker has it (and as
/// `sluice rules explain` asks it for `-f`/`-d`).
pub fn static_handler(
    site: &sluice_config::sites::Site,
    config: &sluice_config::Config,
) -> std::io::Result<StaticHandler> {
    Ok(StaticHandler::new(
        site_root(site)?,
        site.files.clone(),
        config.http.max_ranges,
    ))
}

/// A site's root with its aliases mounted: where its paths are opened.
fn site_root(site: &sluice_config::sites::Site) -> std::io::Result<Root> {
    let mut root = Root::new(&site.root, site.files.symlinks)
        .map_err(|e| std::io::Error::new(e.kind(), format!("root {}: {e}", site.root.display())))?;
    for (prefix, dir) in &site.aliases {
        root.mount(prefix, dir).map_err(|e| {
            let what = format!("alias /{prefix}: root {}: {e}", dir.display());
            std::io::Error::new(e.kind(), what)
        })?;
    }
    Ok(root)
}

impl Snapshot {
    /// On a reload to `new`: name the settings that changed but take effect only
    /// after a restart (the config's own list, and access log paths: a site whose
    /// log is not open logs to the main log until then), in one warning.
    pub(crate) fn warn_restart_only(&self, new: &Snapshot) {
        let logs = |s: &Snapshot| -> Vec<Option<String>> {
            s.sites.iter().map(|x| x.conf.access_log.clone()).collect()
        };
        let mut keys = self.config.restart_only_changes(&new.config);
        if self.config.log.access != new.config.log.access || logs(self) != logs(new) {
            keys.push("access log paths");
        }
        if !keys.is_empty() {
            tracing::warn!(
                "reload: {} changed and take effect only after a restart (the rest of the new configuration is in use)",
                keys.join(", ")
            );
        }
    }
}

/// The devices of the file systems mounted below `dir` (on device `dev`).
fn mounted_below(dir: &std::path::Path, dev: u64) -> impl Iterator<Item = u64> {
    let canon = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    sluice_static::mounts::below(&canon, dev)
        .into_iter()
        .map(|(_, d)| d)
}
