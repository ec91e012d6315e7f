//! The checks that need more than one key (a proxy listener must be a listener,
//! TLS needs a certificate and a key, fractions in (0, 1], the status path's shape,
//! the sites), run once after parsing and again after command-line overrides
//! ([`Config::check`]). Every message names the file, the line of the key (when the
//! file has it) and the key: `sluice.toml:12: condition.cap_8: 2 is not a fraction`.
//!
//! A config that passed is a [`Valid`]: the only way to get one is
//! [`Config::validate`], and what compiles a config (the server's snapshot, the
//! conditioning front) takes a `Valid`, so a raw config cannot be served by mistake.
//! Reading it is free (`Deref`); changing it means [`Valid::into_raw`] and validating
//! again.

use crate::error::ConfigError;
use crate::sections::Config;
use crate::sites;
use std::time::Duration;

/// A config whose cross-key checks passed ([`Config::validate`]).
#[derive(Clone, Debug)]
pub struct Valid(Config);

impl std::ops::Deref for Valid {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0
    }
}

impl Valid {
    /// Back to a raw config, to change it (then [`Config::validate`] again).
    pub fn into_raw(self) -> Config {
        self.0
    }
}

impl Default for Valid {
    /// The embedded defaults, which are valid (a unit test checks it).
    fn default() -> Valid {
        Config::default()
            .validate()
            .expect("the default config is valid")
    }
}

impl Config {
    /// Run the checks ([`Config::check`]); a config that passes becomes [`Valid`].
    pub fn validate(self) -> Result<Valid, ConfigError> {
        self.check()?;
        Ok(Valid(self))
    }

    /// Check what no single key's reader can: everything a server needs before it
    /// binds or compiles anything.
    pub fn check(&self) -> Result<(), ConfigError> {
        let src = &self.source;
        if self.server.listen.is_empty() {
            return Err(src.error("server.listen", "at least one address is needed"));
        }
        for p in &self.server.proxy_protocol {
            if !self.server.listen.contains(p) && !self.tls.listen.contains(p) {
                return Err(src.error(
                    "server.proxy_protocol",
                    format!("{p} is not one of server.listen or tls.listen"),
                ));
            }
        }
        self.check_tls()?;
        let c = &self.condition;
        for (k, v) in [
            ("condition.max_incomplete", c.max_incomplete),
            ("condition.cap_8", c.cap_8),
            ("condition.cap_16", c.cap_16),
            ("condition.cap_24", c.cap_24),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(src.error(k, format!("{v} is not a fraction in (0, 1]")));
            }
        }
        let s = &self.server;
        if s.workers > 0 && s.processes > s.workers {
            return Err(src.error(
                "server.processes",
                format!(
                    "{} processes for {} workers: each process runs at least one worker",
                    s.processes, s.workers
                ),
            ));
        }
        if c.ready_per_turn == 0 {
            return Err(src.error("condition.ready_per_turn", "at least 1"));
        }
        if c.send_rate_window < Duration::from_secs(1) {
            return Err(src.error("condition.send_rate_window", "at least 1s"));
        }
        if let Some(m) = crate::bounds::limit_rate_problem(self.http.limit_rate, c.min_send_rate) {
            return Err(src.error("http.limit_rate", m));
        }
        for (i, r) in self.files.rate_limits.iter().enumerate() {
            if let Some(m) = crate::bounds::limit_rate_problem(r.rate, c.min_send_rate) {
                return Err(src.error(&format!("files.rate_limits[{}].rate", i + 1), m));
            }
        }
        sites::resolve(self)?;
        self.check_always_headers()?;
        let p = &self.status.path;
        if !p.starts_with('/')
            || p.len() < 2
            || p.ends_with('/')
            || p.contains(['?', '#', '%', ' '])
        {
            return Err(src.error(
                "status.path",
                format!("{p:?}: a plain absolute path like \"/server-status\""),
            ));
        }
        if self.log.access != "off" && self.log.access.is_empty() {
            return Err(src.error("log.access", "empty path (use \"off\")"));
        }
        let fields = &self.log.fields;
        if let Some(f) = (1..fields.len()).find(|&i| fields[..i].contains(&fields[i])) {
            return Err(src.error(
                "log.fields",
                format!("{:?} is named twice", fields[f].name()),
            ));
        }
        Ok(())
    }

    /// An `always` header rule is on every answer, whatever its path: it may not
    /// name a `prefix` or `suffix` (`[files]`'s rules and each site's).
    fn check_always_headers(&self) -> Result<(), ConfigError> {
        let narrowed = |rules: &[crate::HeaderRule]| {
            rules
                .iter()
                .position(|r| r.always && !(r.prefix.is_empty() && r.suffix.is_empty()))
        };
        const WHY: &str = "an always rule is on every answer: it has no prefix or suffix";
        if let Some(i) = narrowed(&self.files.headers) {
            return Err(self
                .source
                .error(&format!("files.headers[{}].always", i + 1), WHY));
        }
        for (n, s) in self.site.iter().enumerate() {
            if let Some(i) = s.headers.as_deref().and_then(narrowed) {
                return Err(self.site_error(n, ".headers", format!("rule {}: {WHY}", i + 1)));
            }
        }
        Ok(())
    }

    /// The `[tls]` section's shape only: addresses differ from the HTTP ones, a
    /// listener has a default certificate, names look like host names. Whether the
    /// files hold a usable certificate and key is `sluice-tls`'s check.
    fn check_tls(&self) -> Result<(), ConfigError> {
        let (t, src) = (&self.tls, &self.source);
        for l in &t.listen {
            if self.server.listen.contains(l) {
                return Err(src.error(
                    "tls.listen",
                    format!(
                        "{l} is also in server.listen (one address is HTTP or HTTPS, not both)"
                    ),
                ));
            }
        }
        if t.enabled() && (t.cert.is_none() || t.key.is_none()) {
            return Err(src.error("tls", "cert and key are needed with tls.listen"));
        }
        if t.cert.is_some() != t.key.is_some() {
            return Err(src.error("tls", "cert and key go together"));
        }
        for (i, s) in t.sni.iter().enumerate() {
            let key = format!("tls.sni[{}].names", i + 1);
            if s.names.is_empty() {
                return Err(src.error(&key, "names = [...] is needed"));
            }
            for n in &s.names {
                let bare = n.strip_prefix("*.").unwrap_or(n);
                let ok = !bare.is_empty()
                    && bare.split('.').all(|l| {
                        !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    });
                if !ok {
                    return Err(src.error(&key, format!("{n:?} is not a host name (or *.domain)")));
                }
            }
        }
        Ok(())
    }
}
