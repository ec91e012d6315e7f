//! sluice's configuration: raw TOML → [`Config`] (the raw shape) → [`Valid`] (checked).
//!
//! Owns the file format, every default, and every bound (bounds are data, in
//! [`bounds`], so the docs and the checks cannot drift apart). Unknown keys are
//! errors; every error names the file, the line and the key. It must not touch
//! sockets or compile rules: the server turns a `Config` into a running snapshot.
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:8080"
//! root = "/srv/mirror"
//! workers = 0                 # 0 = one per core
//!
//! [http]
//! keepalive_timeout = "75s"
//! header_timeout = "20s"      # total deadline for a whole request head
//!
//! [files]
//! io = "auto"                 # or "sendfile", "mmap", "read"
//! buffer_size = 32768
//!
//! [log]
//! access = "off"              # or a path
//!
//! [rules]
//! files = ["redirects.conf"]
//! ```

//!
//! The stages, each in its own file, each depending only on those before it:
//! `bounds` (numeric limits as data) → `de` (reading one value: durations, listen
//! addresses, bounded numbers) → `error` (messages, and where each key is in the
//! file) → `sections` (the file's shape and defaults: the raw config; `include`
//! expands the patterns of files whose `[[site]]`s join it, and `types_file` reads
//! a `mime.types` file under `[files] types`) → `sites`
//! (the `[[site]]`s resolved against the top level: the compiled per-site view) →
//! `validate` (checks across keys: a raw [`Config`] becomes a [`Valid`]), and
//! `restart` (which keys a reload cannot change). This file
//! runs them in order: [`Config::read`] (raw) and [`Config::load`] (raw, then valid).

pub mod bounds;
mod de;
mod error;
mod include;
mod restart;
mod sections;
pub mod sites;
pub mod types_file;
mod validate;

pub use de::{parse_duration, parse_listen};
pub use error::{ConfigError, Source};
pub use sections::*;
pub use validate::Valid;

use std::path::Path;

impl Config {
    /// Parse and validate TOML text; `origin` names the file in messages.
    pub fn parse(text: &str, origin: &str) -> Result<Valid, ConfigError> {
        Config::parse_raw(text, origin)?.validate()
    }

    /// Parse TOML text into the raw shape: every key read, no checks across keys.
    pub fn parse_raw(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let (mut cfg, source) = parse_toml::<Config>(text, origin)?;
        cfg.source = source;
        Ok(cfg)
    }

    /// Read, parse and validate a config file.
    pub fn load(path: &Path) -> Result<Valid, ConfigError> {
        Config::read(path)?.validate()
    }

    /// Read and parse a config file into the raw shape, with the `[[site]]`s of the
    /// files it includes after its own; relative paths inside each file (root, rules
    /// files, certificates) are resolved against that file's directory.
    pub fn read(path: &Path) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{origin}: cannot read: {e}")))?;
        let mut cfg = Config::parse_raw(&text, &origin)?;
        let base = path.parent().unwrap_or(Path::new("."));
        if cfg.server.root.is_relative() && text_mentions(&text, "root") {
            cfg.server.root = base.join(&cfg.server.root);
        }
        alias_paths(&mut cfg.server.alias, base);
        for f in cfg.rules.files.iter_mut() {
            if f.is_relative() {
                *f = base.join(&*f);
            }
        }
        let tls = &mut cfg.tls;
        for f in tls.cert.iter_mut().chain(tls.key.iter_mut()).chain(
            tls.sni
                .iter_mut()
                .flat_map(|s| [&mut s.cert, &mut s.key].into_iter()),
        ) {
            if f.is_relative() {
                *f = base.join(&*f);
            }
        }
        for s in cfg.site.iter_mut() {
            site_paths(s, base);
        }
        if let Some(f) = cfg.files.types_file.as_mut() {
            if f.is_relative() {
                *f = base.join(&*f);
            }
            let at = cfg.source.at("files.types_file");
            types_file::merge(f, &mut cfg.files.types, &at)?;
        }
        if !cfg.include.is_empty() {
            cfg.read_includes(base)?;
        }
        Ok(cfg)
    }

    /// Append the `[[site]]`s of every file `include` names (see
    /// [`Config::include`]), recording where each site was written.
    fn read_includes(&mut self, base: &Path) -> Result<(), ConfigError> {
        let own = std::sync::Arc::new(self.source.clone());
        self.site_sources = (1..=self.site.len()).map(|k| (own.clone(), k)).collect();
        for pattern in self.include.clone() {
            let files = include::expand(base, &pattern)
                .map_err(|e| self.source.error("include", format!("{pattern:?}: {e}")))?;
            for file in files {
                let origin = file.display().to_string();
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| ConfigError(format!("{origin}: cannot read: {e}")))?;
                let (sites, source) = parse_toml::<sections::SitesFile>(&text, &origin)?;
                let source = std::sync::Arc::new(source);
                let dir = file.parent().unwrap_or(Path::new("."));
                for (k, mut s) in sites.site.into_iter().enumerate() {
                    site_paths(&mut s, dir);
                    self.site.push(s);
                    self.site_sources.push((source.clone(), k + 1));
                }
            }
        }
        Ok(())
    }

    /// Number of worker threads after resolving `0` to the number of cores.
    pub fn worker_count(&self) -> usize {
        if self.server.workers > 0 {
            self.server.workers
        } else {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        }
    }

    /// Serving processes: `server.processes`, or with 0 one per worker (at most the
    /// bound's maximum).
    pub fn process_count(&self) -> usize {
        match self.server.processes {
            0 => self.worker_count().min(crate::bounds::PROCESSES.1 as usize),
            n => n,
        }
    }
}

fn text_mentions(text: &str, key: &str) -> bool {
    text.lines().any(|l| l.trim_start().starts_with(key))
}

/// Parse TOML text as `T`, with the index of where its keys are; a parse error is
/// `origin:line: key: what`.
fn parse_toml<T: serde::de::DeserializeOwned>(
    text: &str,
    origin: &str,
) -> Result<(T, Source), ConfigError> {
    let source = Source::index(origin, text);
    let value = toml::from_str(text).map_err(|e| {
        // toml's message carries the span; turn it into "file:line: key: what".
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
            .unwrap_or(0);
        let msg = e.message().trim().to_string();
        match source.key_at(line) {
            Some(key) => ConfigError(format!("{origin}:{line}: {key}: {msg}")),
            None => ConfigError(format!("{origin}:{line}: {msg}")),
        }
    })?;
    Ok((value, source))
}

/// Aliases' relative roots, against the directory of their file.
fn alias_paths(aliases: &mut [crate::AliasRule], base: &Path) {
    for a in aliases {
        if a.root.is_relative() {
            a.root = base.join(&a.root);
        }
    }
}

/// A site's relative root and rules files, against the directory of its file.
fn site_paths(s: &mut SiteSection, base: &Path) {
    if s.root.is_relative() {
        s.root = base.join(&s.root);
    }
    alias_paths(&mut s.alias, base);
    for f in s.rules.iter_mut() {
        if f.is_relative() {
            *f = base.join(&*f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn defaults_parse_from_empty() {
        let c = Config::parse("", "x.toml").unwrap();
        assert_eq!(c.files.io, IoMode::Auto);
        assert_eq!(c.server.listen, vec!["127.0.0.1:8080".parse().unwrap()]);
    }

    #[test]
    fn processes_default_to_one_per_worker() {
        let c = Config::parse("[server]\nworkers = 3\n", "x.toml").unwrap();
        assert_eq!((c.server.processes, c.process_count()), (0, 3));
        let c = Config::parse("[server]\nworkers = 3\nprocesses = 1\n", "x.toml").unwrap();
        assert_eq!(c.process_count(), 1);
        // One per core when workers are, at most the bound.
        let c = Config::parse("", "x.toml").unwrap();
        assert_eq!(c.process_count(), c.worker_count().min(64));
        let c = Config::parse("[server]\nworkers = 200\n", "x.toml").unwrap();
        assert_eq!(c.process_count(), 64);
    }

    #[test]
    fn values_and_durations() {
        let c = Config::parse(
            "[server]\nlisten=[\"[::1]:9\"]\n[http]\nkeepalive_timeout=\"500ms\"\nheader_timeout=3\n[files]\nio=\"mmap\"\nsymlinks=\"never\"\n",
            "x",
        )
        .unwrap();
        assert_eq!(c.http.keepalive_timeout, Duration::from_millis(500));
        assert_eq!(c.http.header_timeout, Duration::from_secs(3));
        assert_eq!(c.files.io, IoMode::Mmap);
        assert_eq!(c.files.symlinks, SymlinkPolicy::Never);
        let c = Config::parse("[server]\nlisten = \"127.0.0.1:9\"\n", "x").unwrap();
        assert_eq!(c.server.listen, vec!["127.0.0.1:9".parse().unwrap()]);
    }

    #[test]
    fn defer_accept_is_auto_a_duration_or_off() {
        let h = Duration::from_secs(10);
        let c = Config::parse("", "x").unwrap();
        assert_eq!(c.condition.defer_accept, DeferAccept::Auto);
        assert_eq!(c.condition.defer_accept.initial_secs(h), 10);
        for (text, want, secs) in [
            ("\"auto\"", DeferAccept::Auto, 10),
            ("\"0\"", DeferAccept::Off, 0),
            ("0", DeferAccept::Off, 0),
            (
                "\"1500ms\"",
                DeferAccept::For(Duration::from_millis(1500)),
                2,
            ),
            ("\"60s\"", DeferAccept::For(Duration::from_secs(60)), 10),
        ] {
            let c = Config::parse(&format!("[condition]\ndefer_accept = {text}\n"), "x").unwrap();
            assert_eq!(c.condition.defer_accept, want, "{text}");
            assert_eq!(c.condition.defer_accept.initial_secs(h), secs, "{text}");
        }
        let e = Config::parse("[condition]\ndefer_accept = \"sometimes\"\n", "x.toml").unwrap_err();
        assert!(e.to_string().contains("x.toml:2"), "{e}");
        assert!(e.to_string().contains("auto"), "{e}");
    }

    // Bad configs and their messages (`file:line: key: what`) are data:
    // testdata/config-bad/, run by tests/testdata.rs.

    #[test]
    fn the_defaults_are_valid_and_a_change_is_checked_again() {
        let v = Valid::default();
        let mut raw = v.into_raw();
        raw.condition.cap_8 = 2.0;
        assert!(raw.validate().is_err());
    }

    #[test]
    fn a_config_built_in_code_names_the_key_without_a_line() {
        let mut c = Config::default();
        c.condition.cap_16 = 0.0;
        assert_eq!(
            c.check().unwrap_err().0,
            "condition.cap_16: 0 is not a fraction in (0, 1]"
        );
    }

    /// A directory of config files for one test, removed when it ends.
    struct Files(std::path::PathBuf);
    impl Files {
        fn new(tag: &str, files: &[(&str, &str)]) -> Files {
            let d =
                std::env::temp_dir().join(format!("sluice-config-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            for (name, text) in files {
                let p = d.join(name);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, text).unwrap();
            }
            Files(d)
        }
        fn load(&self) -> Result<Valid, ConfigError> {
            Config::load(&self.0.join("main.toml"))
        }
    }
    impl Drop for Files {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn included_files_add_sites_in_order_with_their_own_paths_and_lines() {
        let f = Files::new(
            "include",
            &[
                (
                    "main.toml",
                    "include = [\"sites.d/*.toml\", \"extra/one.toml\"]\n[[site]]\nnames = [\"main.example\"]\nroot = \"m\"\n",
                ),
                ("sites.d/b.toml", "[[site]]\nnames = [\"b.example\"]\nroot = \"b\"\nrules = [\"b.conf\"]\n"),
                ("sites.d/a.toml", "[[site]]\nnames = [\"a.example\"]\nroot = \"/srv/a\"\n"),
                ("sites.d/.a.toml.swp", "not toml at all ["),
                ("sites.d/notes.txt", "not toml either ["),
                ("extra/one.toml", "[[site]]\nnames = [\"one.example\"]\nroot = \"one\"\n"),
            ],
        );
        let c = f.load().unwrap();
        let names: Vec<&str> = c.site.iter().map(|s| s.names[0].as_str()).collect();
        assert_eq!(
            names,
            ["main.example", "a.example", "b.example", "one.example"]
        );
        assert_eq!(c.site[0].root, f.0.join("m"));
        assert_eq!(c.site[1].root, Path::new("/srv/a"));
        assert_eq!(
            c.site[2].root,
            f.0.join("sites.d/b"),
            "relative to its own file"
        );
        assert_eq!(c.site[2].rules, [f.0.join("sites.d/b.conf")]);
        assert_eq!(c.site[3].root, f.0.join("extra/one"));
        let (sites, idx) = sites::resolve(&c).unwrap();
        assert_eq!(sites.len(), 5);
        assert_eq!(idx.find(Some("b.example")), 3);

        // Errors name the included file, its line, and the site's number in it.
        let d = f.0.display();
        for (name, text, want) in [
            (
                "sites.d/b.toml",
                "[[site]]\nnames = [\"b.example\"]\nroot = \"b\"\n\n[[site]]\nnames = [\"a.example\"]\nroot = \"x\"\n",
                format!("{d}/sites.d/b.toml:6: site[2].names: \"a.example\" is also in site[1] of {d}/sites.d/a.toml"),
            ),
            (
                "sites.d/b.toml",
                "[server]\nworkers = 1\n",
                format!("{d}/sites.d/b.toml:1: server: unknown field `server`, expected `site`"),
            ),
            (
                "sites.d/b.toml",
                "[[site]]\nnames = [\"b.example\"]\nroot = \"b\"\nlisting = \"no\"\n",
                format!("{d}/sites.d/b.toml:4: site[1].listing: invalid type"),
            ),
            (
                "main.toml",
                "include = [\"missing.toml\"]\n",
                format!("{d}/main.toml:1: include: \"missing.toml\": {d}/missing.toml is not a file"),
            ),
            (
                "main.toml",
                "include = [\"*/x.toml\"]\n",
                format!("{d}/main.toml:1: include: \"*/x.toml\": a * may be in the file name only"),
            ),
        ] {
            let keep = std::fs::read_to_string(f.0.join(name)).unwrap();
            std::fs::write(f.0.join(name), text).unwrap();
            let e = f.load().unwrap_err();
            assert!(e.0.starts_with(&want), "{text}:\n{e}\nwanted {want}");
            std::fs::write(f.0.join(name), keep).unwrap();
        }
        // An empty directory of sites is no error.
        let f = Files::new(
            "include-empty",
            &[
                ("main.toml", "include = [\"sites.d/*.toml\"]\n"),
                ("sites.d/README", ""),
            ],
        );
        assert!(f.load().unwrap().site.is_empty());
    }
}
