//! Seed 004's attack table (`incomplete`, `half-heads`, `slowloris`,
//! `persistent-hold`, `slow-read`): a legitimate client's req/s and p99 without and
//! with the attack; also the legitimate client and the attack starter that
//! `heavy_range` and `incomplete_sweep` reuse.

use super::common::*;
use crate::report::{Summary, Table};
use crate::workload::Workload;
use std::time::Duration;

/// How long attackers get to reach their full number before the measurement.
pub(super) const RAMP: Duration = Duration::from_secs(4);

/// A legitimate client (`-c` connections, closed loop) on the 1 KiB file.
pub(super) fn legit(tg: &Target, o: &ExpOptions) -> Result<Summary, String> {
    let (opts, p) = options_for(&tg.url, o)?;
    let w = Workload::single(
        &format!("{}/sluice-bench/size-1024.bin", base_path(&p)),
        &opts,
    );
    let r = go(&opts, &w)?;
    Ok(Summary::new(&tg.url, opts.threads, opts.connections, &r))
}

/// Start `n` attackers of `mode` against a target (child processes); `slow-read`
/// attackers are `sluice bench --read-rate 16` on a 16 MiB file.
pub(super) fn start_attack(
    tg: &Target,
    mode: &str,
    n: usize,
    o: &ExpOptions,
) -> Result<Vec<std::process::Child>, String> {
    let lasting = o.duration + RAMP + Duration::from_secs(2);
    if mode == "slow-read" {
        let url = bench_file_url(tg, "size-16777216.bin")?;
        let procs = n.div_ceil(crate::attack::PER_PROCESS).max(1);
        let child = bench_child(
            &[
                &url,
                "--json",
                "--read-rate",
                "16",
                "-c",
                &n.to_string(),
                "--processes",
                &procs.to_string(),
                "-d",
                &format!("{}ms", lasting.as_millis()),
                "--timeout",
                "600s",
                "--source-addrs",
                "127.66.0.1,127.77.0.1",
            ],
            std::process::Stdio::null(),
        )?;
        return Ok(vec![child]);
    }
    crate::attack::spawn(&bench_file_url(tg, "size-1024.bin")?, mode, n, lasting, 66)
}

/// A legitimate client's req/s and p99 without and with the attack, for every
/// target; attackers from 127.66.x (several processes past one's descriptor limit).
/// `--max-concurrency` sets the attack's size (default: `default_n`, the figure
/// from the conditioning issue's table). The client runs without the attack before
/// and again after it, and the ratio is to the mean of the two: one window's noise
/// on this side of the comparison (a shared machine's) moves the ratio half as much.
pub(super) fn run(
    o: &ExpOptions,
    name: &str,
    mode: &str,
    default_n: usize,
) -> Result<String, String> {
    let n = if o.max_concurrency != ExpOptions::default().max_concurrency {
        o.max_concurrency
    } else {
        default_n
    };
    if let Some(d) = docroot_dir(o) {
        write_file(&d.join("size-1024.bin"), 1024)?;
        if mode == "slow-read" {
            write_file(&d.join("size-16777216.bin"), 16 << 20)?;
        }
    }
    let mut t = Table::new(&[
        "target",
        "attack",
        "attack_conns",
        "req_per_s_before",
        "req_per_s_under",
        "req_per_s_after",
        "ratio",
        "p99_us_before",
        "p99_us_under",
        "attackers_reopened",
    ]);
    for tg in &o.targets {
        let before = legit(tg, o)?;
        let kids = start_attack(tg, mode, n, o)?;
        std::thread::sleep(RAMP);
        let under = legit(tg, o);
        let stats = crate::attack::reap(kids);
        let under = under?;
        let after = legit(tg, o)?;
        let without = (before.requests_per_s + after.requests_per_s) / 2.0;
        t.push(vec![
            tg.name.clone(),
            mode.to_string(),
            n.to_string(),
            fmt(before.requests_per_s),
            fmt(under.requests_per_s),
            fmt(after.requests_per_s),
            format!("{:.2}", under.requests_per_s / without.max(1e-9)),
            before.latency_us.p99.to_string(),
            under.latency_us.p99.to_string(),
            stats.closed.to_string(),
        ]);
    }
    finish(o, &Report::table(name, &t))
}
