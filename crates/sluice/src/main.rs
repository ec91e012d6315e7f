//! The `sluice` command: glue between the command line and the library crates.
//! No server, rules or benchmark logic lives here.

mod cli;

use clap::Parser;
use cli::{BenchArgs, BenchCmd, Cli, Cmd, RulesCmd};
use std::process::ExitCode;

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
            // Until the config is read; then `[log] level` (or SLUICE_LOG).
            sluice_server::logging::init("info");
            let ov = sluice_server::Overrides {
                root: a.dir,
                listen: a.listen,
                workers: a.workers,
                processes: a.processes,
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
            sluice_server::logging::init("info");
            let to = sluicecc::proto::unix_path(&a.to).to_path_buf();
            if a.relay {
                let from = a.from.as_deref().unwrap_or_default();
                sluice_server::front::relay(
                    sluicecc::proto::unix_path(from),
                    &to,
                    a.user.as_deref(),
                )
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
            sluice_server::logging::apply(&cfg.log.level);
            sluice_server::front::run(addr, &to, filters, cfg, a.config.as_deref())
                .map_err(anyhow::Error::msg)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Reload {
            pid,
            config,
            timeout,
        } => {
            let within = sluice_config::parse_duration(&timeout).map_err(anyhow::Error::msg)?;
            if let Some(config) = config {
                sluice_server::logging::init("warn");
                // The check parses the rules (it does not compile them: a million
                // regex rules still take seconds of CPU) beside a server that is
                // serving: at nice +10, as the server's own reload compiles.
                sluice_server::lower_priority_for_compile();
                let cfg = sluice_server::load_config(Some(&config), &Default::default())
                    .map_err(anyhow::Error::msg)?;
                sluice_server::Snapshot::check(cfg).map_err(anyhow::Error::msg)?;
            }
            sluice_server::reloaded::ask(pid, within)
                .map_err(|e| anyhow::anyhow!("reload of pid {pid}: {e}"))?;
            println!("reloaded: pid {pid} serves the new configuration");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check { config } => {
            sluice_server::logging::init("warn");
            let cfg = sluice_server::load_config(Some(&config), &Default::default())
                .map_err(anyhow::Error::msg)?;
            let snap = sluice_server::Snapshot::build(cfg, None).map_err(anyhow::Error::msg)?;
            println!("{}: OK", config.display());
            let (lines, warnings) = snap.describe();
            for w in warnings {
                eprintln!("warning: {w}");
            }
            for l in lines {
                println!("  {l}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench {
            cmd: Some(BenchCmd::Run(a)),
            ..
        } => {
            let o = a.options()?;
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
            sluice_server::logging::init("warn");
            // With a config: the site that --host chooses (as the server would),
            // that site's rules only, and its file handler for `-f`/`-d`.
            let (files, mut handler, lenient) =
                if file.extension().and_then(|e| e.to_str()) == Some("toml") {
                    let cfg = sluice_config::Config::load(&file).map_err(anyhow::Error::msg)?;
                    let (sites, hosts) =
                        sluice_config::sites::resolve(&cfg).map_err(anyhow::Error::msg)?;
                    let host_only = host
                        .as_deref()
                        .map(sluice_rules::request::host_without_port);
                    let site = &sites[hosts.find(host_only)];
                    if sites.len() > 1 {
                        println!("site: {} (root {})", site.label, site.root.display());
                    }
                    let handler = sluice_server::static_handler(site, &cfg)?;
                    (site.rules.clone(), Some(handler), lenient || site.lenient)
                } else {
                    (vec![file.clone()], None, lenient)
                };
            let set = sluice_rules::RuleSet::load_files(
                &files,
                &sluice_rules::LoadOptions {
                    lenient,
                    ..Default::default()
                },
            )?;
            for w in &set.warnings {
                eprintln!("warning: {w}");
            }
            let raw_headers: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
            let (path, query) = match url.split_once('?') {
                Some((p, q)) => (p.to_string(), Some(q.to_string())),
                None => (url.clone(), None),
            };
            let root = handler.as_ref().map(|h| h.root().path().to_path_buf());
            let now = std::time::Instant::now();
            let tests = handler
                .as_mut()
                .map(|h| sluice_server::phases::CacheTests::new(h, now));
            let req = sluice_rules::Request {
                path: &path,
                uri: None,
                query: query.as_deref(),
                host: host.as_deref(),
                user_agent: ua.as_deref(),
                remote_addr: addr,
                root: root.as_deref(),
                files: tests.as_ref().map(|t| t as &dyn sluice_rules::FileTests),
                counted: false,
                https: false,
                target: "",
                minor: 1,
                method: &method,
                headers: raw_headers.as_bytes(),
                // `explain` keeps a record of its own of what the rules set.
                effects: None,
            };
            print!("{}", set.explain(&req));
            Ok(ExitCode::SUCCESS)
        }
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
    let mut opts = sluice_bench::Options {
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
        read_stagger: a.read_stagger,
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
    use sluice_bench::{fanout, ramp};
    if let Some(spec) = &a.ramp {
        let r = ramp::Ramp::parse(spec).map_err(anyhow::Error::msg)?;
        let steps = ramp::run(&url, &opts, &workload, r, a.stop_availability, !a.json)
            .map_err(anyhow::Error::msg)?;
        if a.json {
            let rows: Vec<_> = steps
                .iter()
                .map(|s| serde_json::json!({ "step": s.x, "summary": s.summary }))
                .collect();
            println!("{}", serde_json::to_string(&rows)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let child = fanout::child_index();
    let r = match child {
        Some((k, n)) => {
            opts = fanout::child_options(&opts, k, n);
            let r = sluice_bench::run(&opts, &workload)?;
            let s = fanout::child_summary(&url, &opts, &r);
            println!("{}", serde_json::to_string(&s)?);
            return Ok(ExitCode::SUCCESS);
        }
        None if a.processes > 1 => fanout::run(a.processes).map_err(anyhow::Error::msg)?,
        None => sluice_bench::run(&opts, &workload)?,
    };
    let threads = if a.processes > 1 {
        opts.threads
    } else {
        opts.threads.min(opts.connections)
    };
    let s = sluice_bench::Summary::new(&url, threads, opts.connections, &r);
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        print!("{}", s.human());
    }
    Ok(ExitCode::SUCCESS)
}
