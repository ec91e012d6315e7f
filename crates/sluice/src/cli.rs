//! The command line: every subcommand and flag, parsed by clap. Definitions only;
//! `main.rs` calls the libraries with what is parsed here.

use clap::{Args, Parser, Subcommand};
use std::net::IpAddr;
use std::path::PathBuf;

/// The experiment names `sluice bench run` accepts, from the experiments' one table.
fn experiment_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        sluice_bench::experiments::ALL
            .iter()
            .map(|e| clap::builder::PossibleValue::new(e.name).help(e.about)),
    )
}

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "A web server for download mirrors and busy static sites"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum Cmd {
    /// Serve files (default: the current directory on 127.0.0.1:8080).
    Serve(ServeArgs),
    /// Validate a config file (and the rules it names) without serving.
    Check { config: PathBuf },
    /// Reload a running server (SIGHUP) and wait until its new configuration serves
    /// in every serving process; exit 1 with the reason if it does not. With
    /// --config, the file is checked first, and a file with errors is reported
    /// without signalling (for systemd's ExecReload=).
    Reload {
        /// The server's main process (systemd: $MAINPID).
        #[arg(long)]
        pid: u32,
        /// The configuration the server reads, checked before the signal.
        #[arg(long)]
        config: Option<PathBuf>,
        /// How long to wait for the server's answer (rules files that changed
        /// compile in each serving process at nice +10: a million regex rules
        /// take minutes under load).
        #[arg(long, default_value = "300s")]
        timeout: String,
    },
    /// Connection conditioning in front of any server: accept and read requests
    /// here, hand each socket with its complete request to backends on a Unix socket.
    Condition(ConditionArgs),
    /// Work with rules files.
    Rules {
        #[command(subcommand)]
        cmd: RulesCmd,
    },
    /// Load generator (like wrk) against any HTTP server, and the seeds' experiments.
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        #[command(subcommand)]
        cmd: Option<BenchCmd>,
        #[command(flatten)]
        load: BenchArgs,
    },
}

#[derive(Args)]
pub struct BenchArgs {
    /// Target URL (http://host:port/path).
    pub url: Option<String>,
    /// Connections to keep open.
    #[arg(short = 'c', long, default_value_t = 10)]
    pub connections: usize,
    /// How long to run, e.g. 10s, 500ms, 2m.
    #[arg(short = 'd', long, default_value = "10s")]
    pub duration: String,
    /// Threads (default: one per core).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Open loop: total requests per second (latency counted from the intended send time).
    #[arg(long)]
    pub rate: Option<f64>,
    /// File of paths or URLs, one per line, requested at random (or in order with --in-order).
    #[arg(long)]
    pub urls: Option<PathBuf>,
    /// With --urls: request them in file order, like siege -f without -i.
    #[arg(long)]
    pub in_order: bool,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Extra request header, "Name: value"; repeatable.
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    #[arg(short = 'm', long, default_value = "GET")]
    pub method: String,
    /// A new connection per request.
    #[arg(long)]
    pub no_keepalive: bool,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Follow same-server redirects, counting the chain as one transaction (siege).
    #[arg(long)]
    pub follow_redirects: bool,
    /// Slow reader: bytes per second per connection.
    #[arg(long)]
    pub read_rate: Option<u64>,
    /// Slow readers out of step: a random head start of up to this many bytes each,
    /// and rate windows at random phases (so downloads of one size do not end together).
    #[arg(long, default_value_t = 0)]
    pub read_stagger: u64,
    /// Local addresses to spread connections over, e.g. 127.0.0.1,127.0.0.2.
    #[arg(long, value_delimiter = ',')]
    pub source_addrs: Vec<IpAddr>,
    /// Per-request timeout.
    #[arg(long, default_value = "10s")]
    pub timeout: String,
    /// Ramp: `c:START:STEP:MAX` (connections) or `rate:START:STEP:MAX` (open-loop
    /// req/s), each step running for -d, until availability drops below
    /// --stop-availability. Prints one row per step.
    #[arg(long)]
    pub ramp: Option<String>,
    /// Ramp stop condition: availability (successful / attempted) below this.
    #[arg(long, default_value_t = 0.5)]
    pub stop_availability: f64,
    /// Split the connections (and rate) over this many processes, each with its own
    /// descriptor limit, and merge their results: how one box opens 100,000+ connections.
    #[arg(long, default_value_t = 1)]
    pub processes: usize,
}

#[derive(Subcommand)]
pub enum BenchCmd {
    /// Run one of the seeds' experiments against one or more servers.
    Run(ExperimentArgs),
    /// One attacking process for the conditioning experiments (started by them).
    #[command(hide = true)]
    Attack(AttackArgs),
}

#[derive(Args)]
pub struct AttackArgs {
    /// silent, half, slowloris or hold
    pub mode: String,
    pub url: String,
    #[arg(short = 'c', long, default_value_t = 1000)]
    pub connections: usize,
    #[arg(short = 'd', long, default_value = "10s")]
    pub duration: String,
    #[arg(long, value_delimiter = ',')]
    pub source_addrs: Vec<IpAddr>,
}

#[derive(Args)]
pub struct ExperimentArgs {
    /// Which experiment (the list is `sluice_bench::experiments::ALL`; for the attacks,
    /// --max-concurrency sets the attack's size).
    #[arg(value_parser = experiment_names())]
    pub experiment: String,
    /// Server under test, URL or NAME=URL; repeatable (printed side by side).
    #[arg(long = "target")]
    pub targets: Vec<String>,
    /// redirects: the same server without rules, one per --target.
    #[arg(long = "baseline")]
    pub baselines: Vec<String>,
    /// Directory the servers serve; the experiment writes its files under DIR/sluice-bench/.
    #[arg(long)]
    pub docroot: Option<PathBuf>,
    /// Where tables (CSV) and plots (SVG) go.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    #[arg(short = 'd', long, default_value = "10s")]
    pub duration: String,
    #[arg(short = 'c', long, default_value_t = 50)]
    pub connections: usize,
    #[arg(short = 't', long, default_value_t = 1)]
    pub threads: usize,
    /// buffer-sweep: the file to read.
    #[arg(long)]
    pub file: Option<PathBuf>,
    #[arg(long, default_value_t = 102_400)]
    pub buffer_max: usize,
    #[arg(long, default_value_t = 1024)]
    pub buffer_step: usize,
    /// concurrency: the highest step (past ~15,000 the downloads are spread over
    /// child processes, and over several 127.x source addresses on loopback).
    #[arg(long, default_value_t = 10_000)]
    pub max_concurrency: usize,
    /// concurrency: size of each download (the seed's mirror: large files).
    #[arg(long, default_value_t = 256 * 1024)]
    pub download_size: usize,
    /// concurrency: each downloader's read rate, bytes/s (a modem-to-DSL client).
    #[arg(long, default_value_t = 64 * 1024)]
    pub download_rate: u64,
    /// concurrency, cold-files: run the measuring client (the probe; the small-file
    /// client) at real-time priority (`SCHED_FIFO` 1; needs root or CAP_SYS_NICE),
    /// so that on a machine shared with the load its own wait for a CPU does not
    /// count as the server's latency. cold-files: use it with --small-rate.
    #[arg(long)]
    pub probe_fifo: bool,
    /// concurrency: every probe request on a new connection (a new client's
    /// latency: the server's accept of it included), not on one kept-alive one.
    #[arg(long)]
    pub probe_new_connections: bool,
    /// concurrency: downloads out of step, as a mirror's clients are: each starts with
    /// a random part of its first file already read and reads in its own second, so
    /// they do not end and reconnect together (without it a step's downloads, started
    /// at once and all of one size and rate, end in lockstep).
    #[arg(long)]
    pub download_stagger: bool,
    /// concurrency: the probe starts this long into each step (e.g. 4s), so it measures
    /// a client at that many downloads, not during the step's opening burst of
    /// connections (0: the whole step, as before).
    #[arg(long, default_value = "0s")]
    pub probe_after: String,
    /// redirects: a path the rules redirect (e.g. the last rule's).
    #[arg(long)]
    pub redirect_path: Option<String>,
    /// cold-files: the small client asks this many requests a second (open loop)
    /// instead of as many as its connections can, so every server serves it the same
    /// work and the downloads' MiB/s compare fairly.
    #[arg(long)]
    pub small_rate: Option<f64>,
}

impl ExperimentArgs {
    /// What `sluice bench run` hands the experiment.
    pub fn options(&self) -> anyhow::Result<sluice_bench::experiments::ExpOptions> {
        use sluice_bench::experiments::Target;
        Ok(sluice_bench::experiments::ExpOptions {
            targets: self.targets.iter().map(|t| Target::parse(t)).collect(),
            baselines: self.baselines.iter().map(|t| Target::parse(t)).collect(),
            duration: sluice_config::parse_duration(&self.duration).map_err(anyhow::Error::msg)?,
            connections: self.connections,
            threads: self.threads,
            out_dir: self.out.clone(),
            docroot: self.docroot.clone(),
            file: self.file.clone(),
            buffer_max: self.buffer_max,
            buffer_step: self.buffer_step,
            max_concurrency: self.max_concurrency,
            download_size: self.download_size,
            download_rate: self.download_rate,
            probe_fifo: self.probe_fifo,
            probe_new_connections: self.probe_new_connections,
            download_stagger: self.download_stagger,
            probe_after: sluice_config::parse_duration(&self.probe_after)
                .map_err(anyhow::Error::msg)?,
            redirect_path: self.redirect_path.clone(),
            small_rate: self.small_rate,
            ..Default::default()
        })
    }
}

#[derive(Args)]
pub struct ServeArgs {
    /// Directory to serve (overrides server.root).
    pub dir: Option<PathBuf>,
    /// Address to listen on, ADDR:PORT (overrides server.listen).
    #[arg(long)]
    pub listen: Option<String>,
    /// Worker threads (0 = one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Serving processes the workers are split over (0 = one per worker; overrides
    /// server.processes).
    #[arg(long)]
    pub processes: Option<usize>,
    /// TOML config file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Access log path, or "off".
    #[arg(long = "access-log")]
    pub access_log: Option<String>,
    /// Rules file (native or Apache syntax); repeatable.
    #[arg(long = "rules")]
    pub rules: Vec<PathBuf>,
    /// Skip unsupported rule directives with a warning instead of refusing the file.
    #[arg(long)]
    pub lenient: bool,
    /// Started as root: bind, then serve as this user (overrides server.user;
    /// default nobody).
    #[arg(long)]
    pub user: Option<String>,
    /// Started as root with no --user: keep serving as root (server.allow_root).
    #[arg(long = "allow-root")]
    pub allow_root: bool,
    /// Also serve HTTPS on ADDR:PORT (tls.listen); needs --tls-cert and --tls-key
    /// unless the config names them.
    #[arg(long = "tls-listen")]
    pub tls_listen: Option<String>,
    /// PEM certificate chain, leaf first (tls.cert).
    #[arg(long = "tls-cert")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key (tls.key).
    #[arg(long = "tls-key")]
    pub tls_key: Option<PathBuf>,
    /// Serve as a backend of `sluice condition`: take each connection, with its
    /// complete request, from the front process at unix:PATH (no listeners here).
    #[arg(long)]
    pub from: Option<String>,
}

#[derive(Args)]
pub struct ConditionArgs {
    /// TCP address clients connect to, ADDR:PORT.
    #[arg(long, required_unless_present = "relay")]
    pub listen: Option<String>,
    /// Where backends (or the next process of the chain) ask for connections: unix:PATH.
    #[arg(long)]
    pub to: String,
    /// Stages, in chain order: packaging,persist,fair,slowread,sanity; each `pass`
    /// adds a pass-through process to the chain.
    #[arg(long, default_value = "packaging,persist,fair,slowread,sanity")]
    pub filters: String,
    /// TOML config: its `[http]` deadlines and limits and `[condition]` settings apply.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Run as one pass-through process of a chain (started by the front itself).
    #[arg(long, hide = true, requires = "from")]
    pub relay: bool,
    /// With --relay: the stage before this one, unix:PATH.
    #[arg(long, hide = true)]
    pub from: Option<String>,
    /// With --relay, started as root: the user to serve as (the front's `server.user`).
    #[arg(long, hide = true, requires = "relay")]
    pub user: Option<String>,
}

#[derive(Subcommand)]
pub enum RulesCmd {
    /// Show which rule a request matches, and why.
    Explain {
        /// A config file (its rules are used) or a rules file.
        file: PathBuf,
        /// The request path (with optional ?query).
        url: String,
        #[arg(long)]
        host: Option<String>,
        #[arg(long)]
        ua: Option<String>,
        #[arg(long)]
        addr: Option<IpAddr>,
        /// The request method (for `method=` conditions).
        #[arg(long, default_value = "GET")]
        method: String,
        /// A request header, "Name: value" (for `header=` conditions); repeatable.
        #[arg(long = "header")]
        headers: Vec<String>,
        #[arg(long)]
        lenient: bool,
    },
}
