//! The `sluice` command: glue between the command line and the library crates.
//! No server, rules or benchmark logic lives here.

use clap::{Args, Parser, Subcommand};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "A web server for download mirrors and busy static sites"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
enum Cmd {
    /// Serve files (default: the current directory on 127.0.0.1:8080).
    Serve(ServeArgs),
    /// Validate a config file (and the rules it names) without serving.
    Check { config: PathBuf },
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
struct BenchArgs {
    /// Target URL (http://host:port/path).
    url: Option<String>,
    /// Connections to keep open.
    #[arg(short = 'c', long, default_value_t = 10)]
    connections: usize,
    /// How long to run, e.g. 10s, 500ms, 2m.
    #[arg(short = 'd', long, default_value = "10s")]
    duration: String,
    /// Threads (default: one per core).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Open loop: total requests per second (latency counted from the intended send time).
    #[arg(long)]
    rate: Option<f64>,
    /// File of paths or URLs, one per line, requested at random (or in order with --in-order).
    #[arg(long)]
    urls: Option<PathBuf>,
    /// With --urls: request them in file order, like siege -f without -i.
    #[arg(long)]
    in_order: bool,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    json: bool,
    /// Extra request header, "Name: value"; repeatable.
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    #[arg(short = 'm', long, default_value = "GET")]
    method: String,
    /// A new connection per request.
    #[arg(long)]
    no_keepalive: bool,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// Follow same-server redirects, counting the chain as one transaction (siege).
    #[arg(long)]
    follow_redirects: bool,
    /// Slow reader: bytes per second per connection.
    #[arg(long)]
    read_rate: Option<u64>,
    /// Local addresses to spread connections over, e.g. 127.0.0.1,127.0.0.2.
    #[arg(long, value_delimiter = ',')]
    source_addrs: Vec<IpAddr>,
    /// Per-request timeout.
    #[arg(long, default_value = "10s")]
    timeout: String,
    /// Ramp: `c:START:STEP:MAX` (connections) or `rate:START:STEP:MAX` (open-loop
    /// req/s), each step running for -d, until availability drops below
    /// --stop-availability. Prints one row per step.
    #[arg(long)]
    ramp: Option<String>,
    /// Ramp stop condition: availability (successful / attempted) below this.
    #[arg(long, default_value_t = 0.5)]
    stop_availability: f64,
    /// Split the connections (and rate) over this many processes, each with its own
    /// descriptor limit, and merge their results: how one box opens 100,000+ connections.
    #[arg(long, default_value_t = 1)]
    processes: usize,
}

/// Set by a `--processes` parent in each child: "INDEX/COUNT".
const CHILD_ENV: &str = "SLUICE_BENCH_CHILD";

#[derive(Subcommand)]
enum BenchCmd {
    /// Run one of the seeds' experiments against one or more servers.
    Run(ExperimentArgs),
    /// One attacking process for the conditioning experiments (started by them).
    #[command(hide = true)]
    Attack(AttackArgs),
}

#[derive(Args)]
struct AttackArgs {
    /// silent, half, slowloris or hold
    mode: String,
    url: String,
    #[arg(short = 'c', long, default_value_t = 1000)]
    connections: usize,
    #[arg(short = 'd', long, default_value = "10s")]
    duration: String,
    #[arg(long, value_delimiter = ',')]
    source_addrs: Vec<IpAddr>,
}

#[derive(Args)]
struct ExperimentArgs {
    /// small-files, random-files, specweb, concurrency, single-download, redirects,
    /// buffer-sweep; attacks: incomplete, half-heads, slowloris, persistent-hold,
    /// slow-read, heavy-range, incomplete-sweep (--max-concurrency sets the attack size)
    experiment: String,
    /// Server under test, URL or NAME=URL; repeatable (printed side by side).
    #[arg(long = "target")]
    targets: Vec<String>,
    /// redirects: the same server without rules, one per --target.
    #[arg(long = "baseline")]
    baselines: Vec<String>,
    /// Directory the servers serve; the experiment writes its files under DIR/sluice-bench/.
    #[arg(long)]
    docroot: Option<PathBuf>,
    /// Where tables (CSV) and plots (SVG) go.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    #[arg(short = 'd', long, default_value = "10s")]
    duration: String,
    #[arg(short = 'c', long, default_value_t = 50)]
    connections: usize,
    #[arg(short = 't', long, default_value_t = 1)]
    threads: usize,
    /// buffer-sweep: the file to read.
    #[arg(long)]
    file: Option<PathBuf>,
    #[arg(long, default_value_t = 102_400)]
    buffer_max: usize,
    #[arg(long, default_value_t = 1024)]
    buffer_step: usize,
    /// concurrency: the highest step (past ~15,000 the downloads are spread over
    /// child processes, and over several 127.x source addresses on loopback).
    #[arg(long, default_value_t = 10_000)]
    max_concurrency: usize,
    /// concurrency: size of each download (the seed's mirror: large files).
    #[arg(long, default_value_t = 256 * 1024)]
    download_size: usize,
    /// concurrency: each downloader's read rate, bytes/s (a modem-to-DSL client).
    #[arg(long, default_value_t = 64 * 1024)]
    download_rate: u64,
    /// redirects: a path the rules redirect (e.g. the last rule's).
    #[arg(long)]
    redirect_path: Option<String>,
}

#[derive(Args)]
struct ServeArgs {
    /// Directory to serve (overrides server.root).
    dir: Option<PathBuf>,
    /// Address to listen on, ADDR:PORT (overrides server.listen).
    #[arg(long)]
    listen: Option<String>,
    /// Worker threads (0 = one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// TOML config file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Access log path, or "off".
    #[arg(long = "access-log")]
    access_log: Option<String>,
    /// Rules file (native or Apache syntax); repeatable.
    #[arg(long = "rules")]
    rules: Vec<PathBuf>,
    /// Skip unsupported rule directives with a warning instead of refusing the file.
    #[arg(long)]
    lenient: bool,
    /// Started as root: bind, then serve as this user (overrides server.user;
    /// default nobody).
    #[arg(long)]
    user: Option<String>,
    /// Started as root with no --user: keep serving as root (server.allow_root).
    #[arg(long = "allow-root")]
    allow_root: bool,
    /// Also serve HTTPS on ADDR:PORT (tls.listen); needs --tls-cert and --tls-key
    /// unless the config names them.
    #[arg(long = "tls-listen")]
    tls_listen: Option<String>,
    /// PEM certificate chain, leaf first (tls.cert).
    #[arg(long = "tls-cert")]
    tls_cert: Option<PathBuf>,
    /// PEM private key (tls.key).
    #[arg(long = "tls-key")]
    tls_key: Option<PathBuf>,
    /// Serve as a backend of `sluice condition`: take each connection, with its
    /// complete request, from the front process at unix:PATH (no listeners here).
    #[arg(long)]
    from: Option<String>,
}

#[derive(Args)]
struct ConditionArgs {
    /// TCP address clients connect to, ADDR:PORT.
    #[arg(long, required_unless_present = "relay")]
    listen: Option<String>,
    /// Where backends (or the next process of the chain) ask for connections: unix:PATH.
    #[arg(long)]
    to: String,
    /// Stages, in chain order: packaging,persist,fair,slowread,sanity; each `pass`
    /// adds a pass-through process to the chain.
    #[arg(long, default_value = "packaging,persist,fair,slowread,sanity")]
    filters: String,
    /// TOML config: its [http] deadlines and limits and [condition] settings apply.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Run as one pass-through process of a chain (started by the front itself).
    #[arg(long, hide = true, requires = "from")]
    relay: bool,
    /// With --relay: the stage before this one, unix:PATH.
    #[arg(long, hide = true)]
    from: Option<String>,
}

#[derive(Subcommand)]
enum RulesCmd {
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

fn init_tracing(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluice: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Serve(a) => {
            init_tracing("info");
            let ov = sluice_server::Overrides {
                root: a.dir,
                listen: a.listen,
                workers: a.workers,
                access_log: a.access_log,
                rules: a.rules,
                lenient: a.lenient,
                user: a.user,
                allow_root: a.allow_root,
                tls_listen: a.tls_listen,
                tls_cert: a.tls_cert,
                tls_key: a.tls_key,
                from: a.from,
            };
            sluice_server::serve(a.config, ov).map_err(anyhow::Error::msg)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Condition(a) => {
            init_tracing("info");
            let to = sluicecc::proto::unix_path(&a.to).to_path_buf();
            if a.relay {
                let from = a.from.as_deref().unwrap_or_default();
                sluice_server::front::relay(sluicecc::proto::unix_path(from), &to)
                    .map_err(anyhow::Error::msg)?;
                return Ok(ExitCode::SUCCESS);
            }
            let listen = a.listen.unwrap_or_default();
            let addr: std::net::SocketAddr = listen
                .parse()
                .map_err(|_| anyhow::anyhow!("--listen {listen:?}: expected ADDR:PORT"))?;
            let filters =
                sluice_server::front::Filters::parse(&a.filters).map_err(anyhow::Error::msg)?;
            let cfg = sluice_server::load_config(a.config.as_deref(), &Default::default())
                .map_err(anyhow::Error::msg)?;
            sluice_server::front::run(addr, &to, filters, cfg).map_err(anyhow::Error::msg)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check { config } => {
            init_tracing("warn");
            let cfg = sluice_server::load_config(Some(&config), &Default::default())
                .map_err(anyhow::Error::msg)?;
            let snap = sluice_server::Snapshot::build(cfg).map_err(anyhow::Error::msg)?;
            println!("{}: OK", config.display());
            // One line per site: which names it answers, its root, its rules.
            for (i, site) in snap.sites.iter().enumerate() {
                let c = &site.conf;
                if i == 0
                    && snap.sites.len() > 1
                    && c.names.is_empty()
                    && snap.hosts.default_site() != 0
                {
                    continue; // the top level is not used: a [[site]] is the default
                }
                let names = if c.names.is_empty() {
                    "-".to_string()
                } else {
                    c.names.join(" ")
                };
                let default = if snap.hosts.default_site() == i {
                    " (default)"
                } else {
                    ""
                };
                let rules = match &site.rules {
                    Some(r) => {
                        for w in &r.warnings {
                            eprintln!("warning: {}: {w}", c.label);
                        }
                        r.summary()
                    }
                    None => "no rules".into(),
                };
                println!(
                    "  site {}{default}: names {names}; root {}; {rules}; log {}",
                    c.label,
                    c.root.display(),
                    c.access_log.as_deref().unwrap_or("off")
                );
            }
            if let Some(t) = &snap.tls_summary {
                println!("  https on {}: {t}", snap.config.tls.listen.join(" "));
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench {
            cmd: Some(BenchCmd::Run(a)),
            ..
        } => {
            let o = sluice_bench::experiments::ExpOptions {
                targets: a
                    .targets
                    .iter()
                    .map(|t| sluice_bench::experiments::Target::parse(t))
                    .collect(),
                baselines: a
                    .baselines
                    .iter()
                    .map(|t| sluice_bench::experiments::Target::parse(t))
                    .collect(),
                duration: sluice_config::parse_duration(&a.duration).map_err(anyhow::Error::msg)?,
                connections: a.connections,
                threads: a.threads,
                out_dir: a.out,
                docroot: a.docroot,
                file: a.file,
                buffer_max: a.buffer_max,
                buffer_step: a.buffer_step,
                max_concurrency: a.max_concurrency,
                download_size: a.download_size,
                download_rate: a.download_rate,
                redirect_path: a.redirect_path,
                ..Default::default()
            };
            let text =
                sluice_bench::experiments::run(&a.experiment, &o).map_err(anyhow::Error::msg)?;
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench {
            cmd: Some(BenchCmd::Attack(a)),
            ..
        } => {
            sluice_server::raise_nofile_limit();
            let mode = sluice_bench::attack::Mode::parse(&a.mode)
                .ok_or_else(|| anyhow::anyhow!("attack mode: silent, half, slowloris or hold"))?;
            let (addr, _, path) =
                sluice_bench::experiments::split_url(&a.url).map_err(anyhow::Error::msg)?;
            let d = sluice_config::parse_duration(&a.duration).map_err(anyhow::Error::msg)?;
            let st =
                sluice_bench::attack::hold(addr, &path, mode, a.connections, &a.source_addrs, d)?;
            println!("{}", serde_json::to_string(&st)?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench { cmd: None, load } => bench(load),
        Cmd::Rules {
            cmd:
                RulesCmd::Explain {
                    file,
                    url,
                    host,
                    ua,
                    addr,
                    method,
                    headers,
                    lenient,
                },
        } => {
            init_tracing("warn");
            let (files, root, lenient) =
                if file.extension().and_then(|e| e.to_str()) == Some("toml") {
                    // A config: the site that --host chooses (as the server would), with
                    // that site's rules only.
                    let cfg = sluice_config::Config::load(&file).map_err(anyhow::Error::msg)?;
                    let (sites, hosts) =
                        sluice_config::sites::resolve(&cfg, &file.display().to_string())
                            .map_err(anyhow::Error::msg)?;
                    let host_only = host.as_deref().map(strip_port);
                    let site = &sites[hosts.find(host_only)];
                    if sites.len() > 1 {
                        println!("site: {} (root {})", site.label, site.root.display());
                    }
                    (
                        site.rules.clone(),
                        Some(site.root.clone()),
                        lenient || site.lenient,
                    )
                } else {
                    (vec![file.clone()], None, lenient)
                };
            let set =
                sluice_rules::RuleSet::load_files(&files, &sluice_rules::LoadOptions { lenient })?;
            for w in &set.warnings {
                eprintln!("warning: {w}");
            }
            let raw_headers: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
            let (path, query) = match url.split_once('?') {
                Some((p, q)) => (p.to_string(), Some(q.to_string())),
                None => (url.clone(), None),
            };
            let req = sluice_rules::Request {
                path: &path,
                query: query.as_deref(),
                host: host.as_deref(),
                user_agent: ua.as_deref(),
                remote_addr: addr,
                root: root.as_deref(),
                method: &method,
                headers: raw_headers.as_bytes(),
            };
            print!("{}", set.explain(&req));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `example.org:8080` → `example.org`; `[::1]:80` → `[::1]` (as the server sees Host).
fn strip_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h.find(']').map_or(h, |i| &h[..=i]);
    }
    match h.split_once(':') {
        Some((name, port)) if !port.contains(':') => name,
        _ => h,
    }
}

fn bench(a: BenchArgs) -> anyhow::Result<ExitCode> {
    let url = a.url.ok_or_else(|| {
        anyhow::anyhow!("sluice bench URL -c N -d DURATION (or: sluice bench run EXPERIMENT)")
    })?;
    let (addr, host, path) =
        sluice_bench::experiments::split_url(&url).map_err(anyhow::Error::msg)?;
    let duration = sluice_config::parse_duration(&a.duration).map_err(anyhow::Error::msg)?;
    let threads = a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let opts = sluice_bench::Options {
        addr,
        host,
        connections: a.connections.max(1),
        threads,
        duration,
        rate: a.rate,
        keepalive: !a.no_keepalive,
        pipeline: a.pipeline.max(1),
        method: a.method,
        headers: a.headers,
        timeout: sluice_config::parse_duration(&a.timeout).map_err(anyhow::Error::msg)?,
        follow_redirects: a.follow_redirects,
        read_rate: a.read_rate,
        source_addrs: a.source_addrs,
        max_requests: None,
        progress: !a.json
            && duration.as_secs() >= 3
            && std::io::IsTerminal::is_terminal(&std::io::stderr()),
    };
    let workload = match &a.urls {
        Some(f) => {
            let text =
                std::fs::read_to_string(f).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
            let list = sluice_bench::workload::read_list(&text);
            anyhow::ensure!(!list.is_empty(), "{}: no URLs", f.display());
            let pick = if a.in_order {
                sluice_bench::Pick::Sequential
            } else {
                sluice_bench::Pick::Random
            };
            sluice_bench::Workload::new(list, pick, &opts)
        }
        None => sluice_bench::Workload::single(&path, &opts),
    };
    if let Some(spec) = &a.ramp {
        return ramp(&url, &opts, &workload, spec, a.stop_availability, a.json);
    }
    let child = std::env::var(CHILD_ENV).ok();
    if a.processes > 1 && child.is_none() {
        return fan_out(&url, &opts, a.processes, a.json);
    }
    let mut opts = opts;
    if let Some((k, n)) = child.as_deref().and_then(|c| c.split_once('/')) {
        let (k, n): (usize, usize) = (k.parse()?, n.parse()?);
        opts.connections = (opts.connections / n + usize::from(k < opts.connections % n)).max(1);
        opts.rate = opts.rate.map(|r| r / n as f64);
        opts.progress = false;
    }
    let r = sluice_bench::run(&opts, &workload)?;
    let mut s = sluice_bench::Summary::new(
        &url,
        opts.threads.min(opts.connections),
        opts.connections,
        &r,
    );
    if child.is_some() {
        s.histogram_v2_hex = Some(sluice_bench::report::histogram_to_hex(&r.latency));
        s.ttfb_histogram_v2_hex = Some(sluice_bench::report::histogram_to_hex(&r.ttfb));
        println!("{}", serde_json::to_string(&s)?);
        return Ok(ExitCode::SUCCESS);
    }
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        print!("{}", s.human());
    }
    Ok(ExitCode::SUCCESS)
}

/// Run the same command in `n` child processes and merge their counts and histograms.
fn fan_out(
    url: &str,
    opts: &sluice_bench::Options,
    n: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let children: Vec<std::process::Child> = (0..n)
        .map(|k| {
            Command::new(&exe)
                .args(&args)
                .env(CHILD_ENV, format!("{k}/{n}"))
                .stdout(std::process::Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut counts = sluice_bench::engine::Counts::default();
    let mut latency = sluice_bench::engine::new_histogram();
    let mut ttfb = sluice_bench::engine::new_histogram();
    let mut elapsed = std::time::Duration::ZERO;
    for c in children {
        let out = c.wait_with_output()?;
        anyhow::ensure!(
            out.status.success(),
            "a bench process failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let part: sluice_bench::engine::Counts = serde_json::from_value(v["counts"].clone())?;
        counts.add(&part);
        let h = v["histogram_v2_hex"]
            .as_str()
            .and_then(sluice_bench::report::histogram_from_hex)
            .ok_or_else(|| anyhow::anyhow!("a bench process sent no histogram"))?;
        latency.add(&h).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let f = v["ttfb_histogram_v2_hex"]
            .as_str()
            .and_then(sluice_bench::report::histogram_from_hex)
            .ok_or_else(|| anyhow::anyhow!("a bench process sent no TTFB histogram"))?;
        ttfb.add(&f).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        elapsed = elapsed.max(std::time::Duration::from_secs_f64(
            v["duration_s"].as_f64().unwrap_or(0.0),
        ));
    }
    let r = sluice_bench::RunResult {
        counts,
        latency,
        ttfb,
        elapsed,
    };
    let s = sluice_bench::Summary::new(url, opts.threads, opts.connections, &r);
    if json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        print!("{}", s.human());
    }
    Ok(ExitCode::SUCCESS)
}

/// Step connections or rate up until availability falls below `stop`.
fn ramp(
    url: &str,
    opts: &sluice_bench::Options,
    workload: &sluice_bench::Workload,
    spec: &str,
    stop: f64,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let parts: Vec<&str> = spec.split(':').collect();
    let bad =
        || anyhow::anyhow!("--ramp {spec:?}: expected c:START:STEP:MAX or rate:START:STEP:MAX");
    let [what, start, step, max] = parts.as_slice() else {
        return Err(bad());
    };
    let (start, step, max): (f64, f64, f64) = (start.parse()?, step.parse()?, max.parse()?);
    anyhow::ensure!(*what == "c" || *what == "rate", bad());
    anyhow::ensure!(start > 0.0 && step > 0.0 && max >= start, bad());
    let mut rows = Vec::new();
    if !json {
        println!(
            "{:>10}  {:>12}  {:>10}  {:>10}  {:>12}",
            what, "req/s", "p50", "p99", "availability"
        );
    }
    let mut x = start;
    while x <= max {
        let mut o = opts.clone();
        o.progress = false;
        if *what == "c" {
            o.connections = x as usize;
        } else {
            o.rate = Some(x);
        }
        let r = sluice_bench::run(&o, workload)?;
        let s = sluice_bench::Summary::new(url, o.threads.min(o.connections), o.connections, &r);
        if !json {
            println!(
                "{:>10}  {:>12.1}  {:>10}  {:>10}  {:>11.2}%",
                x,
                s.requests_per_s,
                sluice_bench::report::us(s.latency_us.p50),
                sluice_bench::report::us(s.latency_us.p99),
                s.availability * 100.0
            );
        }
        let low = s.availability < stop;
        rows.push(serde_json::json!({ "step": x, "summary": s }));
        if low {
            if !json {
                println!(
                    "availability fell below {:.0}% at {what} = {x}",
                    stop * 100.0
                );
            }
            break;
        }
        x += step;
    }
    if json {
        println!("{}", serde_json::to_string(&rows)?);
    }
    Ok(ExitCode::SUCCESS)
}
