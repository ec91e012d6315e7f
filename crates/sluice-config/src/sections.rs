//! The file's shape: every section and key, its type and default, as serde reads
//! them (unknown keys are refused here). Bounded numbers and durations are checked
//! while they are read (`de`); what needs several keys at once is `validate`'s.
//!
//! Over 600 lines on purpose: every key of the file with its documentation and
//! default in one place, in the file's own order, is what a reader of this module
//! comes for; split by section, the defaults would sit apart from their keys.

use crate::error::Source;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Per response: `sendfile` until the socket has taken a whole send turn at
    /// once (a fast reader); then, if the reader is on this machine (a loopback
    /// peer: a cache or proxy in front, a benchmark), copy from a mapping, which
    /// costs such a reader about half the CPU per byte (docs/BENCHMARKS.md); back
    /// to `sendfile` when it slows down. Remote and slow readers, and files over
    /// 32 MiB (streamed from memory, where the copy costs more than it saves),
    /// stay zero-copy.
    Auto,
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
    #[serde(deserialize_with = "crate::de::listen")]
    pub listen: Vec<SocketAddr>,
    pub root: PathBuf,
    /// `[[server.alias]]`: other directories served at path prefixes of the main
    /// site ([`AliasRule`]). A site has its own (`[[site.alias]]`), not these.
    pub alias: Vec<AliasRule>,
    #[serde(deserialize_with = "crate::de::workers")]
    pub workers: usize,
    /// Serving processes the workers are split over (each with its own descriptor
    /// limit; `SO_REUSEPORT` spreads connections over all of them). 0 (the default):
    /// one per worker, as nginx's `worker_processes auto` ([`Config::process_count`]).
    #[serde(deserialize_with = "crate::de::processes")]
    pub processes: usize,
    /// Listening sockets per worker per address (default 4, `SO_REUSEPORT`). Each
    /// socket has its own SYN and accept queues, each capped by the kernel's
    /// `net.core.somaxconn` (4096 by default), so a burst of new connections (or
    /// connections the kernel holds under `condition.defer_accept`) has this many
    /// times the room before the kernel drops SYNs or answers with SYN cookies.
    /// 4 goes with deferral (the default); without it the extra sockets measured no
    /// gain and ~3% more CPU per new connection (more `accept` calls that find
    /// nothing), so set 1 with `defer_accept = "0"`. Not used with systemd's
    /// sockets. Set at start.
    #[serde(deserialize_with = "crate::de::listen_sockets")]
    pub listen_sockets: usize,
    #[serde(deserialize_with = "crate::de::duration")]
    pub shutdown_grace: Duration,
    /// How long responses in flight may go on after SIGQUIT, and in the old server
    /// once a new binary serves (SIGUSR2, `upgrade.rs` in sluice-server): long, so a
    /// download started before an upgrade ends as it would have.
    #[serde(deserialize_with = "crate::de::duration")]
    pub upgrade_grace: Duration,
    /// With more than one serving process: a reload that compiles at least this
    /// many rules (the sites' changed rule sets together) forks new serving
    /// processes from the master's compile, and the old ones finish their
    /// responses in flight within `upgrade_grace` and exit, as after an upgrade.
    /// A reload that compiles fewer has each process compile them itself and keep
    /// its connections. Default 100,000; 0: every reload that compiles anything
    /// forks. Forked processes share the master's compiled rules; each process
    /// that compiles holds a copy of its own (a million rules: 780 MB each, and
    /// as many compiles as processes).
    pub reload_fork_rules: u64,
    /// The serving processes' scheduling priority (nice value, -20 to 19), as
    /// nginx's `worker_priority`; 0 (the default) keeps the one sluice started with.
    /// On a machine that also runs other work, a negative value lets a worker that
    /// wakes take a core from it at once (docs/OPERATIONS.md has the figures).
    /// Raising it needs root at start (or `CAP_SYS_NICE`). Set at start.
    #[serde(deserialize_with = "crate::de::priority")]
    pub priority: i32,
    /// The time slice each serving thread asks of the kernel's EEVDF scheduler
    /// (Linux 6.12 and later; `sched_setattr`'s runtime for an ordinary thread),
    /// 0.1–100 ms; "0" (the default) keeps the kernel's own (1.4 ms on a 2-core
    /// machine). A shorter slice gives a thread that wakes an earlier deadline, so
    /// a worker woken by a small request takes a busy core sooner. On the test
    /// machine it moved neither latency target (docs/BENCHMARKS.md). Needs no
    /// privilege. Set at start.
    #[serde(deserialize_with = "crate::de::sched_slice")]
    pub sched_slice: Duration,
    /// Started as root, serve as this user (default: `nobody`).
    pub user: Option<String>,
    /// Started as root with no `user`, keep serving as root (not recommended).
    pub allow_root: bool,
    /// Listen addresses (each also in `listen`) whose connections begin with a
    /// PROXY protocol header (v1 or v2) from a load balancer.
    #[serde(deserialize_with = "crate::de::listen")]
    pub proxy_protocol: Vec<SocketAddr>,
    /// Who may send PROXY headers (`ADDR/LEN`); other sources on those listeners
    /// are closed at once.
    pub proxy_trusted: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSection {
    #[serde(deserialize_with = "crate::de::keepalive_requests")]
    pub keepalive_requests: u64,
    /// How long an idle keep-alive connection is kept. 75 s (nginx's): an idle
    /// connection costs its small record and a descriptor, and under descriptor
    /// pressure conditioning closes idle ones first, least recently used and
    /// heaviest range first, so a long timeout does not cost newcomers their slot.
    /// A short one recycles every held connection each period: with 15 s, 20,000
    /// held keep-alives reopened 80,000 times in 65 s and took the legitimate
    /// client to 0.84 of its rate; with 75 s, 0 and 1.06 (docs/BENCHMARKS.md).
    #[serde(deserialize_with = "crate::de::duration")]
    pub keepalive_timeout: Duration,
    /// Total deadline for a request head (and a skipped body): from accept for
    /// the first request, from its first byte for later ones. 20 s, Apache's
    /// `RequestReadTimeout header=20`: a client that never finishes its head is
    /// closed by it and reconnects at once, so the deadline sets how often an
    /// attacker's connections cost an accept, a 408 and a close (BENCHMARKS.md
    /// "half heads"); while they wait they cost a small record each, and the cap
    /// on incomplete connections (`condition.max_incomplete`) bounds how many.
    #[serde(deserialize_with = "crate::de::duration")]
    pub header_timeout: Duration,
    /// A response that makes no progress for this long is abandoned.
    #[serde(deserialize_with = "crate::de::duration")]
    pub send_timeout: Duration,
    #[serde(deserialize_with = "crate::de::max_request_line")]
    pub max_request_line: usize,
    #[serde(deserialize_with = "crate::de::max_head")]
    pub max_head: usize,
    #[serde(deserialize_with = "crate::de::max_headers")]
    pub max_headers: usize,
    #[serde(deserialize_with = "crate::de::max_ranges")]
    pub max_ranges: usize,
    /// Request bodies up to this size are read and thrown away (keep-alive kept);
    /// larger ones, and chunked bodies, close the connection after the answer.
    #[serde(deserialize_with = "crate::de::max_body_discard")]
    pub max_body_discard: u64,
    /// Bytes per second each connection is sent at most (nginx's `limit_rate`,
    /// per connection rather than per response); 0: no limit. The kernel paces
    /// the socket (`SO_MAX_PACING_RATE`, one `setsockopt` when a connection is
    /// taken, and none while the limit is 0): no CPU and no timers per byte. A
    /// reload applies a new value to new connections. It must be
    /// at least twice `condition.min_send_rate`, or downloads would be cut as slow
    /// readers. One client's parallel connections each get the rate:
    /// `condition.cap_address` bounds how many it may hold.
    #[serde(deserialize_with = "crate::de::limit_rate")]
    pub limit_rate: u64,
    /// Body bytes of each response sent at full speed before `limit_rate` paces
    /// the rest (nginx's `limit_rate_after`); 0, the default: paced from the first
    /// byte. With a threshold a response starts unpaced and is paced once that
    /// many of its bytes have left the socket (looked at after each send turn:
    /// a few hundred KiB late on a real path, up to ~1 MB on loopback); a
    /// response no longer than it is never paced. Two `setsockopt` calls per
    /// response past it, none for the others (`sluice_condition::pace`).
    #[serde(deserialize_with = "crate::de::limit_rate_after")]
    pub limit_rate_after: u64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesSection {
    pub io: IoMode,
    #[serde(deserialize_with = "crate::de::buffer_size")]
    pub buffer_size: usize,
    pub symlinks: SymlinkPolicy,
    pub hidden: bool,
    pub listing: bool,
    /// Names tried in a directory, in order, before its listing: plain file names.
    #[serde(deserialize_with = "crate::de::index")]
    pub index: Vec<String>,
    /// A file of the listed directory shown above its listing's table (Apache's
    /// `HeaderName`), and one shown below it (`ReadmeName`): `""` for none. A name
    /// ending `.html` or `.htm` is the page's HTML as it is (under the listing's
    /// policy: no script); any other is text, shown as it is in `<pre>`. Only
    /// files kept in memory (`small_file_max`) are shown.
    #[serde(deserialize_with = "crate::de::note_name")]
    pub listing_header: String,
    #[serde(deserialize_with = "crate::de::note_name")]
    pub listing_readme: String,
    /// How long a cached open file / stat result is trusted, and a built directory
    /// listing kept (per URL and form) before it is built again.
    #[serde(deserialize_with = "crate::de::duration")]
    pub cache_validity: Duration,
    #[serde(deserialize_with = "crate::de::cache_entries")]
    pub cache_entries: usize,
    /// Files up to this size are kept in memory and sent with one `writev`.
    #[serde(deserialize_with = "crate::de::small_file_max")]
    pub small_file_max: usize,
    /// Answers kept per worker for reuse, keyed by the request head's exact bytes
    /// (`sluice_static::answers`; 0: none kept): whole small files, 304s, HEADs,
    /// indexes, listings, 404s and redirects. A hot file asked for again the same
    /// way skips the parse, the lookup and the head's assembly; kept only as long
    /// as the cache entries the answer read are trusted (`cache_validity`), and on
    /// a site with rules only where the rules decided on the request's bytes.
    #[serde(deserialize_with = "crate::de::answer_cache")]
    pub answer_cache: usize,
    /// Serve `foo.br` / `foo.zst` / `foo.gz` in place of `foo` to clients that
    /// accept that coding.
    pub precompressed: bool,
    /// gzip directory listings for clients that accept it.
    pub compress_listings: bool,
    /// Threads that read file ranges not in the page cache, and make the lookups
    /// (a path, a small file's bytes) that would wait for the disk, so a worker
    /// never waits on it (0: workers read for themselves). Set at start.
    #[serde(deserialize_with = "crate::de::disk_threads")]
    pub disk_threads: usize,
    /// Threads (per serving process, besides the disk threads) that read
    /// directories and build their listing pages, at nice +10, so that clients
    /// asking for big listings can never hold the threads cold files are read
    /// by. Only with `disk_threads` above 0 (else the workers build listings).
    /// Set at start.
    #[serde(deserialize_with = "crate::de::listing_threads")]
    pub listing_threads: usize,
    /// A lookup of a path the kernel has no directory entry for (a name not asked
    /// for in a while, or never: a 404) may or may not read the disk, and nothing
    /// tells which beforehand. The worker makes it itself while the disk threads
    /// have nothing in hand and its own such lookups wait at most this long; one
    /// that waits longer sends the next ones to the disk threads until theirs have
    /// been fast a while (`sluice_static::cold`). 0: always the disk threads.
    #[serde(deserialize_with = "crate::de::duration")]
    pub disk_lookup_max: Duration,
    /// Content types by extension (without the dot, any case) over the built-in
    /// table, e.g. `{ webmanifest = "application/manifest+json" }` (Apache's
    /// `AddType`, nginx's `types`). Read when a file enters the cache: no cost per
    /// request.
    #[serde(deserialize_with = "crate::de::types")]
    pub types: std::collections::BTreeMap<String, String>,
    /// A `mime.types` file (Apache's `TypesConfig`), e.g. `"/etc/mime.types"`:
    /// its types go under `types` (which wins) and over the built-in table. Read
    /// with the config file, and again on every reload (`types_file` module).
    pub types_file: Option<std::path::PathBuf>,
    /// `Cache-Control` for files' answers (200, 206, 304), by path: the first rule
    /// whose `prefix` and `suffix` (each optional) both match the file's path from
    /// the site's root gives the value (nginx's `expires`, Apache's mod_expires and
    /// `Header set Cache-Control`). No rule matches: no header, as before.
    pub cache_control: Vec<CacheControlRule>,
    /// More headers for files' answers (200, 206, 304), by path: every rule whose
    /// `prefix` and `suffix` match adds its header (the first such rule for a name
    /// wins), e.g. `Access-Control-Allow-Origin: *` on a mirror's trees (nginx's
    /// `add_header`, Apache's `Header set`); an `always` rule, on every answer
    /// (where a path rule for its name comes first and matches, that rule's value).
    /// Headers sluice writes itself are refused (`de::header_name`). At most 64
    /// rules.
    #[serde(deserialize_with = "crate::de::header_rules")]
    pub headers: Vec<HeaderRule>,
    /// The body of a 403, 404 or 410 from a file under the site's root, keyed by
    /// status: `{ 404 = "/errors/404.html" }` (Apache's `ErrorDocument`, nginx's
    /// `error_page`). The answer keeps its status and takes the page's type; a
    /// page in a hidden directory (`/.errors/`) is used though it cannot be asked
    /// for. A page that is missing leaves sluice's own short text.
    #[serde(deserialize_with = "crate::de::error_pages")]
    pub error_pages: std::collections::BTreeMap<u16, String>,
    /// Bandwidth limits by path (nginx's `limit_rate` in a `location`, Apache's
    /// mod_ratelimit in a `<Location>`): the first rule whose `prefix` and
    /// `suffix` (each optional) both match a file's path from the site's root
    /// gives its 200 and 206 answers' `rate` and `after`, in place of the site's
    /// `limit_rate` and `limit_rate_after` (`rate = 0`: not limited). No rule
    /// matches: the site's. An answer so limited differently from `[http]` is not
    /// kept, as a limited site's are not.
    pub rate_limits: Vec<RateLimitRule>,
}

/// One `[[files.rate_limits]]` rule (see [`FilesSection::rate_limits`]).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RateLimitRule {
    /// The path starts with this (from the root, with its leading `/`).
    #[serde(default, deserialize_with = "crate::de::path_prefix")]
    pub prefix: String,
    /// The path ends with this (`".iso"`).
    #[serde(default)]
    pub suffix: String,
    /// Bytes per second each such answer is sent at most (0: not limited); at
    /// least twice `condition.min_send_rate`, as `limit_rate`.
    #[serde(deserialize_with = "crate::de::limit_rate")]
    pub rate: u64,
    /// Body bytes sent at full speed before `rate` applies (default 0).
    #[serde(default, deserialize_with = "crate::de::limit_rate_after")]
    pub after: u64,
}

/// One `[[server.alias]]` or `[[site.alias]]`: the paths under `prefix` are
/// served from `root` instead of from under the site's root (Apache's `Alias`,
/// nginx's `alias`): with `prefix = "/ubuntu"` and `root = "/srv/disk2/ubuntu"`,
/// `/ubuntu/dists/x` is `/srv/disk2/ubuntu/dists/x`. The prefix is whole path
/// segments (`/ubuntu` does not take `/ubuntu-cd`); the longest prefix wins; the
/// symlink policy's "inside the root" means inside `root` for the paths under it.
/// Everything else about a path (the cache, listings, hidden files, rules'
/// `-f`/`-d`, `Cache-Control` and header rules by path) sees it as the client
/// wrote it. A listing of the directory above does not show the prefix's name
/// unless that directory has an entry of the name (as Apache's). A relative
/// `root` is against the config file's directory.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AliasRule {
    /// `"/ubuntu"` (a trailing `/` is the same): whole segments, no `.` or `..`.
    pub prefix: String,
    pub root: PathBuf,
}

/// One `[[files.cache_control]]` rule (see [`FilesSection::cache_control`]).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheControlRule {
    /// The path starts with this (from the root, with its leading `/`).
    #[serde(default, deserialize_with = "crate::de::path_prefix")]
    pub prefix: String,
    /// The path ends with this (`".html"`, `"/InRelease"`).
    #[serde(default)]
    pub suffix: String,
    /// The header's value, e.g. `"public, max-age=31536000, immutable"`.
    #[serde(deserialize_with = "crate::de::header_value")]
    pub value: String,
}

/// One `[[files.headers]]` rule (see [`FilesSection::headers`]).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderRule {
    /// The path starts with this (from the root, with its leading `/`).
    #[serde(default, deserialize_with = "crate::de::path_prefix")]
    pub prefix: String,
    /// The path ends with this.
    #[serde(default)]
    pub suffix: String,
    /// The header's name, e.g. `"Access-Control-Allow-Origin"`.
    #[serde(deserialize_with = "crate::de::header_name")]
    pub name: String,
    /// Its value, e.g. `"*"`.
    #[serde(deserialize_with = "crate::de::extra_header_value")]
    pub value: String,
    /// On every answer of the site, not only its files' (listings, redirects,
    /// errors, 503s, the status page): `Strict-Transport-Security` and the like, as
    /// nginx's `add_header … always`; the default site's also on the 400, 414,
    /// 431 and 408 answers to heads that never named a site. Such a rule has no
    /// `prefix` or `suffix`.
    #[serde(default)]
    pub always: bool,
}

impl HeaderRule {
    /// The header line it adds, `Name: value\r\n`, as answers carry it.
    pub fn line(&self) -> Vec<u8> {
        format!("{}: {}\r\n", self.name, self.value).into_bytes()
    }

    /// The index of the first rule of `rules` for the name of rule `i` (any case):
    /// the rule that decides that name where it applies (`i` itself, or earlier).
    pub fn first_for_name(rules: &[HeaderRule], i: usize) -> usize {
        rules[..i]
            .iter()
            .position(|o| o.name.eq_ignore_ascii_case(&rules[i].name))
            .unwrap_or(i)
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// `"off"` or a file path for the combined-format access log.
    pub access: String,
    /// tracing filter for stderr, e.g. `"info"` or `"sluice_server=debug"`.
    pub level: String,
    /// Fields appended to every access-log line (the main log and the sites'),
    /// after the combined ones, as `name=value`, in this order.
    pub fields: Vec<LogField>,
}

/// A field an access-log line may end with (`[log] fields`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogField {
    /// `request_time=0.012`: seconds, to the millisecond, from the request head's
    /// first byte to the response's last byte handed to the kernel (nginx's
    /// `$request_time`); `-` for a connection closed without an answer.
    RequestTime,
    /// `host="mirror.example"`: the request's `Host` as sent, without its port,
    /// escaped as the other quoted fields; `"-"` without one (and on a line for a
    /// request that could not be read).
    Host,
    /// `length=4700372992`: the body bytes the answer had to send (its
    /// `Content-Length`; 0 for a HEAD). A line whose bytes sent (`%b`) are fewer
    /// is a download cut short: the client went, or was cut as a slow reader.
    Length,
}

impl LogField {
    /// The name in the config, and before the `=` in a log line.
    pub fn name(self) -> &'static str {
        match self {
            LogField::RequestTime => "request_time",
            LogField::Host => "host",
            LogField::Length => "length",
        }
    }
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
    /// Most responses the whole server sends at once (0, the default: no cap).
    /// Past it, complete requests wait in the `ready` queue and are answered, least
    /// recently served address range first, as responses finish; one that waits
    /// longer than `http.header_timeout` from its first byte is answered 503 with
    /// Retry-After. For servers whose disk or uplink is the bottleneck, not the
    /// connection count.
    pub max_active: usize,
    /// Most requests a worker answers per turn of its event loop (≥ 1). Past it, the
    /// turn's other complete requests wait in the `ready` queue and the next turn
    /// takes them least recently served address range first (the paper's fair
    /// choice), so one range that sends a burst of requests cannot push a request
    /// from elsewhere behind the whole burst.
    pub ready_per_turn: u32,
    /// Per-range caps as fractions of max_connections (paper: 0.25, 0.15, 0.10) for
    /// /8, /16, /24 (IPv6 /32, /48, /64); a connection over its range's cap is
    /// answered 503 with Retry-After. 1.0 turns a level off.
    pub cap_8: f64,
    pub cap_16: f64,
    pub cap_24: f64,
    /// Most connections one address may hold (IPv6: one /64), counted from accept;
    /// over it, 503 with Retry-After. 0 (the default): no cap, since one address
    /// may carry many users (NAT). Turning it on from 0 takes a restart
    /// (docs/CONDITIONING.md).
    pub cap_address: u32,
    /// A response whose client reads less than this many bytes/s over a whole
    /// `send_rate_window` is closed (0 = off).
    pub min_send_rate: u64,
    #[serde(deserialize_with = "crate::de::duration")]
    pub send_rate_window: Duration,
    /// Most bytes of a response a fast reader's connection keeps queued in the
    /// kernel and not yet sent (`TCP_NOTSENT_LOWAT`; 0 = the kernel's own bound, the
    /// socket's whole send buffer). Every socket starts at 256 KiB (or this, if
    /// lower: the listeners' value, which accepted sockets inherit) and is raised
    /// to this once its reader has taken 2 MiB of a response. A reader that stops
    /// reading then pins 256 KiB of the kernel's TCP memory beyond its own receive
    /// window, instead of a send buffer autotuned to several MiB (2,000 slow
    /// readers held 1.9 GiB without a bound, ~0.8 GiB with 256 KiB), while one fast
    /// download keeps its pipe full (256 KiB cost it 20–30% on a slow receiver).
    /// Past `unsent_total` the connections get their share of that instead
    /// (docs/CONDITIONING.md). Set at start.
    #[serde(deserialize_with = "crate::de::unsent_max")]
    pub unsent_max: u32,
    /// Bytes the whole server's unsent queues share (0 = half the kernel's
    /// `tcp_mem` pressure mark, read at start). Past `unsent_total / unsent_max`
    /// connections, a large response's connection may queue only its share,
    /// rounded down to a power of two and at least 16 KiB: 38,000 downloads would
    /// otherwise ask for 9.3 GiB where this machine's kernel allows 2.2 GiB for all
    /// of TCP, and past that it resets connections at random. Set at start.
    #[serde(deserialize_with = "crate::de::unsent_total")]
    pub unsent_total: u64,
    /// Ranges the caps do not apply to (`ADDR/LEN`). Default: loopback, whose
    /// clients are the machine itself (local proxies, monitoring, benchmarks).
    pub cap_exempt: Vec<String>,
    /// Let the kernel hold a new connection that has sent nothing (TCP_DEFER_ACCEPT)
    /// before sluice accepts it: `"auto"` (the default), `"0"` (off), or a duration.
    /// A deferred connection arrives with its request (one wake-up instead of two:
    /// ~25% less server CPU per new connection), and silent connections cost no
    /// descriptor. But the kernel keeps each deferred connection in the listener's
    /// SYN queue, so a burst of new clients can overflow it into SYN cookies (whose
    /// MSS table caps a loopback or jumbo-frame connection at 1460 bytes), and a
    /// client slow to send its request after connecting leaves the connection with
    /// an inflated RTT estimate, which deferring listeners bound by capping their
    /// sockets' retransmission timeout at 1 s (`deferral::set_rto_guard`; Linux
    /// 6.14+). `"auto"` defers for 10 s and switches deferral off while the kernel
    /// reports SYN-queue overflows, back on after a minute without any
    /// (docs/CONDITIONING.md). Set at start.
    pub defer_accept: DeferAccept,
}

/// `[condition] defer_accept`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeferAccept {
    Off,
    /// Always, for this long (capped at `http.header_timeout`).
    For(Duration),
    /// For [`DeferAccept::AUTO`], off while the SYN queue overflows.
    Auto,
}

/// `"auto"`, or a duration (`"0"`: off).
impl<'de> Deserialize<'de> for DeferAccept {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Secs(u64),
        }
        let d = match Raw::deserialize(d)? {
            Raw::Text(s) if s.trim() == "auto" => return Ok(DeferAccept::Auto),
            Raw::Text(s) => crate::de::parse_duration(&s)
                .map_err(|e| serde::de::Error::custom(format!("{e} (or \"auto\")")))?,
            Raw::Secs(n) => Duration::from_secs(n),
        };
        Ok(if d.is_zero() {
            DeferAccept::Off
        } else {
            DeferAccept::For(d)
        })
    }
}

impl DeferAccept {
    /// How long `"auto"` defers.
    pub const AUTO: Duration = Duration::from_secs(10);

    /// Whole seconds to set on a listener at start (0: off), never longer than the
    /// head deadline the deferral stands in front of.
    pub fn initial_secs(self, header_timeout: Duration) -> u64 {
        let d = match self {
            DeferAccept::Off => Duration::ZERO,
            DeferAccept::For(d) => d,
            DeferAccept::Auto => Self::AUTO,
        };
        d.min(header_timeout).as_secs_f64().ceil() as u64
    }
}

impl Default for ConditionSection {
    fn default() -> Self {
        ConditionSection {
            max_connections: 0,
            max_incomplete: 1.0,
            max_active: 0,
            ready_per_turn: 32,
            cap_8: 0.25,
            cap_16: 0.15,
            cap_24: 0.10,
            cap_address: 0,
            min_send_rate: 1024,
            send_rate_window: Duration::from_secs(30),
            unsent_max: 1024 * 1024,
            unsent_total: 0,
            cap_exempt: vec!["127.0.0.0/8".into(), "::1/128".into()],
            defer_accept: DeferAccept::Auto,
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
    #[serde(deserialize_with = "crate::de::listen")]
    pub listen: Vec<SocketAddr>,
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
    /// Files whose `[[site]]` sections join this file's, read in order after it:
    /// paths, or patterns with `*` in the file name (`"sites.d/*.toml"`: every
    /// matching file but hidden ones, in name order; none is fine), relative to
    /// this file. An included file holds `[[site]]` sections only (nginx's
    /// `include sites-enabled/*;`, Apache's `IncludeOptional`). Read by
    /// [`Config::read`] (a file's config), not by [`Config::parse`] (text).
    pub include: Vec<String>,
    pub server: ServerSection,
    pub http: HttpSection,
    pub files: FilesSection,
    pub log: LogSection,
    pub rules: RulesSection,
    pub condition: ConditionSection,
    pub status: StatusSection,
    pub tls: TlsSection,
    /// Virtual hosts (`crate::sites`); none = one site, the top level.
    pub site: Vec<SiteSection>,
    /// Where each key is in the file, for messages (not a key itself).
    #[serde(skip)]
    pub source: Source,
    /// Where each of `site` was written when some come from included files: that
    /// file's keys and the site's number in it (empty: all in this file).
    #[serde(skip)]
    pub site_sources: Vec<(std::sync::Arc<Source>, usize)>,
}

/// An included file: `[[site]]` sections and nothing else.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct SitesFile {
    pub site: Vec<SiteSection>,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
            root: PathBuf::from("."),
            alias: Vec::new(),
            workers: 0,
            processes: 0,
            listen_sockets: 4,
            shutdown_grace: Duration::from_secs(10),
            upgrade_grace: Duration::from_secs(3600),
            reload_fork_rules: 100_000,
            priority: 0,
            sched_slice: Duration::ZERO,
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
            keepalive_timeout: Duration::from_secs(75),
            header_timeout: Duration::from_secs(20),
            send_timeout: Duration::from_secs(60),
            max_request_line: 8 * 1024,
            max_head: 16 * 1024,
            max_headers: 64,
            max_ranges: 16,
            max_body_discard: 64 * 1024,
            limit_rate: 0,
            limit_rate_after: 0,
        }
    }
}

impl Default for FilesSection {
    fn default() -> Self {
        FilesSection {
            io: IoMode::Auto,
            // Seed 003's sweep found the best read buffer near 30 KB; docs/BENCHMARKS.md
            // has this machine's figures.
            buffer_size: 32 * 1024,
            symlinks: SymlinkPolicy::InsideRoot,
            hidden: false,
            listing: true,
            index: vec!["index.html".into()],
            listing_header: String::new(),
            listing_readme: String::new(),
            cache_validity: Duration::from_secs(1),
            cache_entries: 16_384,
            small_file_max: 16 * 1024,
            answer_cache: 1024,
            precompressed: true,
            compress_listings: true,
            disk_threads: 8,
            listing_threads: 2,
            disk_lookup_max: Duration::from_millis(1),
            types: Default::default(),
            types_file: None,
            cache_control: Vec::new(),
            rate_limits: Vec::new(),
            headers: Vec::new(),
            error_pages: Default::default(),
        }
    }
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            access: "off".into(),
            level: "info".into(),
            fields: Vec::new(),
        }
    }
}

/// One `[[site]]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SiteSection {
    /// Host names: `"mirror.example.org"` or `"*.example.org"`.
    pub names: Vec<String>,
    /// This site answers unknown or missing hosts (at most one site may say so).
    pub default: bool,
    pub root: PathBuf,
    /// `[[site.alias]]`: other directories served at path prefixes of this site
    /// ([`AliasRule`]; the main site's `[[server.alias]]` are not inherited).
    pub alias: Vec<AliasRule>,
    /// Rules files for this site only (relative to the config file).
    pub rules: Vec<PathBuf>,
    pub lenient: bool,
    /// This site's own values of `[files]` settings that are about its files (the
    /// rest, such as caches, I/O and disk threads, are the whole server's). Each one
    /// absent keeps `[files]`'s: `listing`, `hidden`, `index`, `listing_header`,
    /// `listing_readme`, `symlinks`, `precompressed`, `compress_listings`,
    /// `cache_control`, `headers` and `rate_limits` replace it; `types`
    /// and `error_pages` are merged over it, key by key (`sites::resolve`).
    pub listing: Option<bool>,
    pub hidden: Option<bool>,
    #[serde(deserialize_with = "crate::de::index_some")]
    pub index: Option<Vec<String>>,
    #[serde(deserialize_with = "crate::de::note_name_some")]
    pub listing_header: Option<String>,
    #[serde(deserialize_with = "crate::de::note_name_some")]
    pub listing_readme: Option<String>,
    pub symlinks: Option<SymlinkPolicy>,
    pub precompressed: Option<bool>,
    pub compress_listings: Option<bool>,
    pub cache_control: Option<Vec<CacheControlRule>>,
    #[serde(deserialize_with = "crate::de::header_rules_some")]
    pub headers: Option<Vec<HeaderRule>>,
    #[serde(deserialize_with = "crate::de::types")]
    pub types: std::collections::BTreeMap<String, String>,
    #[serde(deserialize_with = "crate::de::error_pages")]
    pub error_pages: std::collections::BTreeMap<u16, String>,
    /// This site's own `[[files.rate_limits]]` (replacing `[files]`'s).
    pub rate_limits: Option<Vec<RateLimitRule>>,
    /// This site's own access log (default: the main `[log] access`).
    pub access_log: Option<String>,
    /// This site's own `[http] limit_rate` and `limit_rate_after` (each absent
    /// keeps `[http]`'s; a reload applies them to the next response). A site
    /// whose `limit_rate` differs from `[http]`'s costs a `setsockopt` when a
    /// connection's socket is not at the site's rate yet, and its answers are
    /// not kept (`sluice_static::answers`): each takes the full path
    /// (`sluice_condition::pace`).
    #[serde(deserialize_with = "crate::de::limit_rate_some")]
    pub limit_rate: Option<u64>,
    #[serde(deserialize_with = "crate::de::limit_rate_after_some")]
    pub limit_rate_after: Option<u64>,
}

impl TlsSection {
    /// Is HTTPS configured at all?
    pub fn enabled(&self) -> bool {
        !self.listen.is_empty()
    }
}
