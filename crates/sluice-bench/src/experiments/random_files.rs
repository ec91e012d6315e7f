//! `random-files` (seed 002 part three): 10,000 random 1 KiB files.

use super::common::*;
use crate::report::{Summary, Table};
use crate::workload::{Pick, Workload};

/// Seed 002 part three: 10,000 random 1 KiB files.
pub(super) fn run(o: &ExpOptions) -> Result<String, String> {
    let paths = random_file_set(o)?;
    let mut t = Table::new(&[
        "target",
        "req_per_s",
        "p50_us",
        "p99_us",
        "availability",
        "ratio",
    ]);
    let mut first = 0.0;
    for (ti, tg) in o.targets.iter().enumerate() {
        let sm = random_run(&tg.url, o, &paths)?;
        if ti == 0 {
            first = sm.requests_per_s;
        }
        t.push(vec![
            tg.name.clone(),
            fmt(sm.requests_per_s),
            sm.latency_us.p50.to_string(),
            sm.latency_us.p99.to_string(),
            format!("{:.4}", sm.availability),
            format!("{:.2}", sm.requests_per_s / first.max(1e-9)),
        ]);
    }
    finish(o, &Report::table("random-files", &t))
}

pub(super) fn random_file_set(o: &ExpOptions) -> Result<Vec<String>, String> {
    if let Some(d) = docroot_dir(o) {
        for i in 0..10_000 {
            write_file(&d.join(format!("rf/{:02}/{i:05}.bin", i % 100)), 1024)?;
        }
    }
    Ok((0..10_000)
        .map(|i| format!("/sluice-bench/rf/{:02}/{i:05}.bin", i % 100))
        .collect())
}

pub(super) fn random_run(url: &str, o: &ExpOptions, paths: &[String]) -> Result<Summary, String> {
    let (opts, p) = options_for(url, o)?;
    let prefix = base_path(&p);
    let w = Workload::new(
        paths.iter().map(|x| format!("{prefix}{x}")).collect(),
        Pick::Random,
        &opts,
    );
    let r = go(&opts, &w)?;
    Ok(Summary::new(url, opts.threads, opts.connections, &r))
}
