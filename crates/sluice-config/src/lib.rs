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
//! file) → `sections` (the file's shape and defaults: the raw config) → `sites`
//! (the `[[site]]`s resolved against the top level: the compiled per-site view) →
//! `validate` (checks across keys: a raw [`Config`] becomes a [`Valid`]), and
//! `restart` (which keys a reload cannot change). This file
//! runs them in order: [`Config::read`] (raw) and [`Config::load`] (raw, then valid).

pub mod bounds;
mod de;
mod error;
mod restart;
mod sections;
pub mod sites;
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
        let source = Source::index(origin, text);
        let mut cfg: Config = toml::from_str(text).map_err(|e| {
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
        cfg.source = source;
        Ok(cfg)
    }

    /// Read, parse and validate a config file.
    pub fn load(path: &Path) -> Result<Valid, ConfigError> {
        Config::read(path)?.validate()
    }

    /// Read and parse a config file into the raw shape; relative paths inside it
    /// (root, rules files, certificates) are resolved against the file's directory.
    pub fn read(path: &Path) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{origin}: cannot read: {e}")))?;
        let mut cfg = Config::parse_raw(&text, &origin)?;
        let base = path.parent().unwrap_or(Path::new("."));
        if cfg.server.root.is_relative() && text_mentions(&text, "root") {
            cfg.server.root = base.join(&cfg.server.root);
        }
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
            if s.root.is_relative() {
                s.root = base.join(&s.root);
            }
            for f in s.rules.iter_mut() {
                if f.is_relative() {
                    *f = base.join(&*f);
                }
            }
        }
        Ok(cfg)
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
}
