//! The `sluice` command: glue between the command line and the library crates.
//! No server, rules or benchmark logic lives here.

use clap::{Args, Parser, Subcommand};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

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
enum Cmd {
    /// Serve files (default: the current directory on 127.0.0.1:8080).
    Serve(ServeArgs),
    /// Validate a config file (and the rules it names) without serving.
    Check { config: PathBuf },
    /// Work with rules files.
    Rules {
        #[command(subcommand)]
        cmd: RulesCmd,
    },
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
            };
            sluice_server::serve(a.config, ov).map_err(anyhow::Error::msg)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check { config } => {
            init_tracing("warn");
            let cfg = sluice_server::load_config(Some(&config), &Default::default())
                .map_err(anyhow::Error::msg)?;
            let snap = sluice_server::Snapshot::build(cfg).map_err(anyhow::Error::msg)?;
            match &snap.rules {
                Some(r) => {
                    for w in &r.warnings {
                        eprintln!("warning: {w}");
                    }
                    println!("{}: OK ({})", config.display(), r.summary())
                }
                None => println!("{}: OK", config.display()),
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Rules {
            cmd:
                RulesCmd::Explain {
                    file,
                    url,
                    host,
                    ua,
                    addr,
                    lenient,
                },
        } => {
            init_tracing("warn");
            let (files, root) = if file.extension().and_then(|e| e.to_str()) == Some("toml") {
                let cfg = sluice_config::Config::load(&file).map_err(anyhow::Error::msg)?;
                (cfg.rules.files.clone(), Some(cfg.server.root.clone()))
            } else {
                (vec![file.clone()], None)
            };
            let set =
                sluice_rules::RuleSet::load_files(&files, &sluice_rules::LoadOptions { lenient })?;
            for w in &set.warnings {
                eprintln!("warning: {w}");
            }
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
            };
            print!("{}", set.explain(&req));
            Ok(ExitCode::SUCCESS)
        }
    }
}
