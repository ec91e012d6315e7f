//! sluice's configuration: raw TOML → validated [`Config`].
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
//! keepalive_timeout = "15s"
//! header_timeout = "10s"      # total deadline for a whole request head
//!
//! [files]
//! io = "sendfile"             # or "mmap" or "read"
//! buffer_size = 32768
//!
//! [log]
//! access = "off"              # or a path
//!
//! [rules]
//! files = ["redirects.conf"]
//! ```

pub mod sites;

use serde::{Deserialize, Deserializer};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Numeric bounds of settings: (min, max).
pub mod bounds {
    pub const WORKERS: (u64, u64) = (0, 256);
    pub const BUFFER_SIZE: (u64, u64) = (512, 16 << 20);
    pub const KEEPALIVE_REQUESTS: (u64, u64) = (1, 1 << 32);
    pub const MAX_REQUEST_LINE: (u64, u64) = (256, 1 << 20);
    pub const MAX_HEAD: (u64, u64) = (1024, 1 << 20);
    pub const MAX_HEADERS: (u64, u64) = (8, 128);
    pub const MAX_RANGES: (u64, u64) = (1, 1024);
    pub const MAX_BODY_DISCARD: (u64, u64) = (0, 1 << 30);
    pub const CACHE_ENTRIES: (u64, u64) = (0, 1 << 22);
    pub const DISK_THREADS: (u64, u64) = (0, 256);
    pub const SMALL_FILE_MAX: (u64, u64) = (0, 1 << 20);
}

/// How file bodies are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// `sendfile(2)`: zero-copy from the page cache to the socket.
    Sendfile,
    /// `mmap` a window of the file and `write` from it.
    Mmap,
    /// `pread` into a `buffer_size` buffer and `write` it.
    Read,
}

/// Which symlinks are followed when opening a path under the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SymlinkPolicy {
    /// Follow symlinks whose target stays inside the root (default).
    InsideRoot,
    /// Never follow a symlink.
    Never,
    /// Follow every symlink, even out of the root (for trees the operator trusts).
    Any,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    /// `"ADDR:PORT"` or a list of them.
    #[serde(deserialize_with = "de_listen")]
    pub listen: Vec<String>,
    pub root: PathBuf,
    #[serde(deserialize_with = "de_workers")]
    pub workers: usize,
    #[serde(deserialize_with = "de_duration")]
    pub shutdown_grace: Duration,
    /// Started as root, serve as this user (default: `nobody`).
    pub user: Option<String>,
    /// Started as root with no `user`, keep serving as root (not recommended).
    pub allow_root: bool,
    /// Listen addresses (each also in `listen`) whose connections begin with a
    /// PROXY protocol header (v1 or v2) from a load balancer.
    pub proxy_protocol: Vec<String>,
    /// Who may send PROXY headers (`ADDR/LEN`); other sources on those listeners
    /// are closed at once.
    pub proxy_trusted: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSection {
    #[serde(deserialize_with = "de_keepalive_requests")]
    pub keepalive_requests: u64,
    #[serde(deserialize_with = "de_duration")]
    pub keepalive_timeout: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub header_timeout: Duration,
    /// A response that makes no progress for this long is abandoned.
    #[serde(deserialize_with = "de_duration")]
    pub send_timeout: Duration,
    #[serde(deserialize_with = "de_max_request_line")]
    pub max_request_line: usize,
    #[serde(deserialize_with = "de_max_head")]
    pub max_head: usize,
    #[serde(deserialize_with = "de_max_headers")]
    pub max_headers: usize,
    #[serde(deserialize_with = "de_max_ranges")]
    pub max_ranges: usize,
    /// Request bodies up to this size are read and thrown away (keep-alive kept);
    /// larger ones, and chunked bodies, close the connection after the answer.
    #[serde(deserialize_with = "de_max_body_discard")]
    pub max_body_discard: u64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesSection {
    pub io: IoMode,
    #[serde(deserialize_with = "de_buffer_size")]
    pub buffer_size: usize,
    pub symlinks: SymlinkPolicy,
    pub hidden: bool,
    pub listing: bool,
    pub index: Vec<String>,
    /// How long a cached open file / stat result is trusted.
    #[serde(deserialize_with = "de_duration")]
    pub cache_validity: Duration,
    #[serde(deserialize_with = "de_cache_entries")]
    pub cache_entries: usize,
    /// Files up to this size are kept in memory and sent with one `writev`.
    #[serde(deserialize_with = "de_small_file_max")]
    pub small_file_max: usize,
    /// Serve `foo.br` / `foo.zst` / `foo.gz` in place of `foo` to clients that
    /// accept that coding.
    pub precompressed: bool,
    /// gzip directory listings for clients that accept it.
    pub compress_listings: bool,
    /// Threads that read file ranges not in the page cache, so a worker never
    /// waits on the disk (0: workers read cold ranges themselves). Set at start.
    #[serde(deserialize_with = "de_disk_threads")]
    pub disk_threads: usize,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// `"off"` or a file path for the combined-format access log.
    pub access: String,
    /// tracing filter for stderr, e.g. `"info"` or `"sluice_server=debug"`.
    pub level: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RulesSection {
    /// Rules files (native or Apache syntax), relative to the config file.
    pub files: Vec<PathBuf>,
    /// Skip unsupported directives with a warning instead of refusing the file.
    pub lenient: bool,
    /// Most connections held by `tarpit` and `oversize` answers in the whole
    /// server; past it those answers become `drop`.
    pub tarpit_max: usize,
}

impl Default for RulesSection {
    fn default() -> Self {
        RulesSection {
            files: Vec::new(),
            lenient: false,
            tarpit_max: 10_000,
        }
    }
}

/// Connection conditioning (docs/CONDITIONING.md; seed 004).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConditionSection {
    /// Most connections the server holds (0 = from the descriptor limit). At the
    /// limit the oldest idle connection of the heaviest address range is closed to
    /// make room, then the oldest incomplete one; only if every connection is busy
    /// is a newcomer refused.
    pub max_connections: usize,
    /// Most connections still sending their first request head, as a fraction of
    /// max_connections; past it the oldest incomplete connection of the heaviest
    /// range is closed. 1.0 (the default) sets no separate cap: as in the paper,
    /// incomplete connections are closed only when the server runs out of room (a
    /// lower cap also cuts legitimate bursts of new connections: measured, 10,800
    /// downloads starting at once lost 3% to a 0.5 cap).
    pub max_incomplete: f64,
    /// Per-range caps as fractions of max_connections (paper: 0.25, 0.15, 0.10) for
    /// /8, /16, /24 (IPv6 /32, /48, /64); a connection over its range's cap is
    /// answered 503 with Retry-After. 1.0 turns a level off.
    pub cap_8: f64,
    pub cap_16: f64,
    pub cap_24: f64,
    /// A response whose client reads less than this many bytes/s over a whole
    /// `send_rate_window` is closed (0 = off).
    pub min_send_rate: u64,
    #[serde(deserialize_with = "de_duration")]
    pub send_rate_window: Duration,
    /// Ranges the caps do not apply to (`ADDR/LEN`). Default: loopback, whose
    /// clients are the machine itself (local proxies, monitoring, benchmarks).
    pub cap_exempt: Vec<String>,
    /// Let the kernel hold a new connection that has sent nothing (TCP_DEFER_ACCEPT)
    /// for this long before sluice accepts it ("0" = off). Silent connections then
    /// cost no descriptor; one that stays silent is handed over after it and closed
    /// after `http.header_timeout` more.
    #[serde(deserialize_with = "de_duration")]
    pub defer_accept: Duration,
}

impl Default for ConditionSection {
    fn default() -> Self {
        ConditionSection {
            max_connections: 0,
            max_incomplete: 1.0,
            cap_8: 0.25,
            cap_16: 0.15,
            cap_24: 0.10,
            min_send_rate: 1024,
            send_rate_window: Duration::from_secs(30),
            cap_exempt: vec!["127.0.0.0/8".into(), "::1/128".into()],
            defer_accept: Duration::from_secs(10),
        }
    }
}

/// The status page (docs/STATUS.md).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatusSection {
    pub enabled: bool,
    /// The page's path on every site; `PATH?format=json`, `PATH?auto` and
    /// `PATH/metrics` are its other forms. A file at this path wins.
    pub path: String,
    /// Who may see it (`ADDR/LEN`); everyone else gets 403.
    pub allow: Vec<String>,
}

impl Default for StatusSection {
    fn default() -> Self {
        StatusSection {
            enabled: true,
            path: "/server-status".into(),
            allow: vec!["127.0.0.0/8".into(), "::1/128".into()],
        }
    }
}

/// HTTPS (docs/OPERATIONS.md "HTTPS"): listeners beside `server.listen`, the
/// default certificate, and per-name certificates picked by SNI.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSection {
    /// `"ADDR:PORT"` or a list of them; none = no HTTPS.
    #[serde(deserialize_with = "de_listen")]
    pub listen: Vec<String>,
    /// PEM certificate chain (leaf first) and PEM private key of the default
    /// certificate: for clients that send no SNI or a name no `[[tls.sni]]` has.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Kernel TLS: `"auto"` (use it when a runtime probe finds it) or `"off"`.
    pub ktls: KtlsMode,
    /// Session resumption with tickets (TLS 1.2 and 1.3); on by default.
    pub tickets: bool,
    /// Certificates for other names (SNI).
    pub sni: Vec<SniCert>,
}

impl Default for TlsSection {
    fn default() -> Self {
        TlsSection {
            listen: Vec::new(),
            cert: None,
            key: None,
            ktls: KtlsMode::Auto,
            tickets: true,
            sni: Vec::new(),
        }
    }
}

/// One `[[tls.sni]]` entry: a certificate for some host names.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SniCert {
    /// `"mirror.example.org"` or `"*.example.org"` (one label, as certificates do).
    pub names: Vec<String>,
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KtlsMode {
    #[default]
    Auto,
    Off,
}

/// The whole validated configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerSection,
    pub http: HttpSection,
    pub files: FilesSection,
    pub log: LogSection,
    pub rules: RulesSection,
    pub condition: ConditionSection,
    pub status: StatusSection,
    pub tls: TlsSection,
    /// Virtual hosts ([`sites`]); none = one site, the top level.
    pub site: Vec<sites::SiteSection>,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            listen: vec!["127.0.0.1:8080".into()],
            root: PathBuf::from("."),
            workers: 0,
            shutdown_grace: Duration::from_secs(10),
            user: None,
            allow_root: false,
            proxy_protocol: Vec::new(),
            proxy_trusted: vec!["127.0.0.0/8".into(), "::1/128".into()],
        }
    }
}

impl Default for HttpSection {
    fn default() -> Self {
        HttpSection {
            keepalive_requests: 10_000,
            keepalive_timeout: Duration::from_secs(15),
            header_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(60),
            max_request_line: 8 * 1024,
            max_head: 16 * 1024,
            max_headers: 64,
            max_ranges: 16,
            max_body_discard: 64 * 1024,
        }
    }
}

impl Default for FilesSection {
    fn default() -> Self {
        FilesSection {
            io: IoMode::Sendfile,
            // Seed 003's sweep found the best read buffer near 30 KB; docs/BENCHMARKS.md
            // has this machine's figures.
            buffer_size: 32 * 1024,
            symlinks: SymlinkPolicy::InsideRoot,
            hidden: false,
            listing: true,
            index: vec!["index.html".into()],
            cache_validity: Duration::from_secs(1),
            cache_entries: 16_384,
            small_file_max: 16 * 1024,
            precompressed: true,
            compress_listings: true,
            disk_threads: 8,
        }
    }
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            access: "off".into(),
            level: "info".into(),
        }
    }
}

/// A configuration error, already phrased for the operator (`file: line N: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ConfigError {}

impl Config {
    /// Parse TOML text; `origin` names the file in messages.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| {
            // toml's message carries the span; turn it into "file:line: key: what".
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
                .unwrap_or(0);
            let msg = e.message().trim().to_string();
            ConfigError(format!("{origin}:{line}: {msg}"))
        })?;
        cfg.validate(origin)?;
        Ok(cfg)
    }

    /// Read and parse a config file; relative paths inside it (root, rules files) are
    /// resolved against the file's directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{origin}: cannot read: {e}")))?;
        let mut cfg = Config::parse(&text, &origin)?;
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

    fn validate(&mut self, origin: &str) -> Result<(), ConfigError> {
        if self.server.listen.is_empty() {
            return Err(ConfigError(format!(
                "{origin}: server.listen: at least one address is needed"
            )));
        }
        for l in &self.server.listen {
            if l.parse::<std::net::SocketAddr>().is_err() {
                return Err(ConfigError(format!(
                    "{origin}: server.listen: {l:?} is not ADDR:PORT (e.g. 127.0.0.1:8080 or [::1]:8080)"
                )));
            }
        }
        for p in &self.server.proxy_protocol {
            if !self.server.listen.contains(p) {
                return Err(ConfigError(format!(
                    "{origin}: server.proxy_protocol: {p:?} is not one of server.listen"
                )));
            }
        }
        self.tls.validate(origin, &self.server.listen)?;
        let c = &self.condition;
        for (k, v) in [
            ("max_incomplete", c.max_incomplete),
            ("cap_8", c.cap_8),
            ("cap_16", c.cap_16),
            ("cap_24", c.cap_24),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(ConfigError(format!(
                    "{origin}: condition.{k}: {v} is not a fraction in (0, 1]"
                )));
            }
        }
        if c.send_rate_window < Duration::from_secs(1) {
            return Err(ConfigError(format!(
                "{origin}: condition.send_rate_window: at least 1s"
            )));
        }
        sites::resolve(self, origin)?;
        let p = &self.status.path;
        if !p.starts_with('/')
            || p.len() < 2
            || p.ends_with('/')
            || p.contains(['?', '#', '%', ' '])
        {
            return Err(ConfigError(format!(
                "{origin}: status.path {p:?}: a plain absolute path like \"/server-status\""
            )));
        }
        if self.log.access != "off" && self.log.access.is_empty() {
            return Err(ConfigError(format!(
                "{origin}: log.access: empty path (use \"off\")"
            )));
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
}

impl TlsSection {
    /// Is HTTPS configured at all?
    pub fn enabled(&self) -> bool {
        !self.listen.is_empty()
    }

    /// The shape only: addresses parse and differ from the HTTP ones, a listener
    /// has a default certificate, names look like host names. Whether the files
    /// hold a usable certificate and key is `sluice-tls`'s check.
    pub fn validate(&self, origin: &str, http: &[String]) -> Result<(), ConfigError> {
        for l in &self.listen {
            if l.parse::<std::net::SocketAddr>().is_err() {
                return Err(ConfigError(format!(
                    "{origin}: tls.listen: {l:?} is not ADDR:PORT (e.g. 0.0.0.0:443)"
                )));
            }
            if http.contains(l) {
                return Err(ConfigError(format!(
                    "{origin}: tls.listen: {l:?} is also in server.listen (one address is HTTP or HTTPS, not both)"
                )));
            }
        }
        if self.enabled() && (self.cert.is_none() || self.key.is_none()) {
            return Err(ConfigError(format!(
                "{origin}: tls: cert and key are needed with tls.listen"
            )));
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err(ConfigError(format!(
                "{origin}: tls: cert and key go together"
            )));
        }
        for (i, s) in self.sni.iter().enumerate() {
            if s.names.is_empty() {
                return Err(ConfigError(format!(
                    "{origin}: tls.sni[{i}]: names = [...] is needed"
                )));
            }
            for n in &s.names {
                let bare = n.strip_prefix("*.").unwrap_or(n);
                let ok = !bare.is_empty()
                    && bare.split('.').all(|l| {
                        !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    });
                if !ok {
                    return Err(ConfigError(format!(
                        "{origin}: tls.sni[{i}]: {n:?} is not a host name (or *.domain)"
                    )));
                }
            }
        }
        Ok(())
    }
}

fn text_mentions(text: &str, key: &str) -> bool {
    text.lines().any(|l| l.trim_start().starts_with(key))
}

/// Parse `"15s"`, `"500ms"`, `"2m"`, `"1h"` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like \"15s\" or \"500ms\""))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    if !(0.0..=86400.0 * 365.0).contains(&secs) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Secs(u64),
    }
    match Raw::deserialize(d)? {
        Raw::Text(s) => parse_duration(&s).map_err(serde::de::Error::custom),
        Raw::Secs(n) => Ok(Duration::from_secs(n)),
    }
}

fn de_listen<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Raw::deserialize(d)? {
        Raw::One(s) => vec![s],
        Raw::Many(v) => v,
    })
}

macro_rules! bounded {
    ($name:ident, $ty:ty, $b:expr) => {
        fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
            let v = u64::deserialize(d)?;
            let (lo, hi) = $b;
            if v < lo || v > hi {
                return Err(serde::de::Error::custom(format!(
                    "{v} is out of range ({lo}..={hi})"
                )));
            }
            Ok(v as $ty)
        }
    };
}
bounded!(de_workers, usize, bounds::WORKERS);
bounded!(de_buffer_size, usize, bounds::BUFFER_SIZE);
bounded!(de_disk_threads, usize, bounds::DISK_THREADS);
bounded!(de_keepalive_requests, u64, bounds::KEEPALIVE_REQUESTS);
bounded!(de_max_request_line, usize, bounds::MAX_REQUEST_LINE);
bounded!(de_max_head, usize, bounds::MAX_HEAD);
bounded!(de_max_headers, usize, bounds::MAX_HEADERS);
bounded!(de_max_ranges, usize, bounds::MAX_RANGES);
bounded!(de_max_body_discard, u64, bounds::MAX_BODY_DISCARD);
bounded!(de_cache_entries, usize, bounds::CACHE_ENTRIES);
bounded!(de_small_file_max, usize, bounds::SMALL_FILE_MAX);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_from_empty() {
        let c = Config::parse("", "x.toml").unwrap();
        assert_eq!(c.files.io, IoMode::Sendfile);
        assert_eq!(c.server.listen, vec!["127.0.0.1:8080"]);
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
        assert_eq!(c.server.listen, vec!["127.0.0.1:9"]);
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let e = Config::parse("[server]\nworkers = 2\nlisen = \"x\"\n", "sluice.toml").unwrap_err();
        assert!(e.0.starts_with("sluice.toml:3:"), "{e}");
        assert!(e.0.contains("lisen"), "{e}");
        let e = Config::parse("[files]\n\nbuffer_size = 1\n", "s.toml").unwrap_err();
        assert!(
            e.0.starts_with("s.toml:3:") && e.0.contains("out of range"),
            "{e}"
        );
        let e = Config::parse("[files]\nio = \"aio\"\n", "s.toml").unwrap_err();
        assert!(e.0.starts_with("s.toml:2:") && e.0.contains("aio"), "{e}");
        let e = Config::parse("[http]\nkeepalive_timeout = \"5 parsecs\"\n", "s.toml").unwrap_err();
        assert!(e.0.starts_with("s.toml:2:"), "{e}");
        let e = Config::parse("[server]\nlisten = [\"nowhere\"]\n", "s.toml").unwrap_err();
        assert!(e.0.contains("server.listen"), "{e}");
    }
}
