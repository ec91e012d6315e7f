//! `redirects` (seeds 001/002): what declared rules cost ordinary traffic, and the
//! time per redirect beside the time per 1 KiB file.

use super::common::*;
use super::random_files::{random_file_set, random_run};
use crate::report::Table;
use crate::workload::Workload;

/// Seeds 001/002: (a) ordinary traffic with rules declared vs the same server without,
/// (b) time per redirect on one keep-alive connection vs time per 1 KiB file.
pub(super) fn run(o: &ExpOptions) -> Result<String, String> {
    if o.baselines.len() != o.targets.len() {
        return Err(
            "redirects needs one --baseline URL (the same server without rules) per --target"
                .into(),
        );
    }
    let paths = random_file_set(o)?;
    if let Some(d) = docroot_dir(o) {
        write_file(&d.join("size-1024.bin"), 1024)?;
    }
    let mut t = Table::new(&[
        "target",
        "req_per_s_with_rules",
        "req_per_s_without",
        "ratio",
        "ms_per_redirect",
        "ms_per_1k_file",
    ]);
    for (tg, base) in o.targets.iter().zip(&o.baselines) {
        let with = random_run(&tg.url, o, &paths)?;
        let without = random_run(&base.url, o, &paths)?;
        let per = |path: &str| -> Result<f64, String> {
            let (mut opts, _) = options_for(&tg.url, o)?;
            opts.connections = 1;
            opts.threads = 1;
            opts.max_requests = Some(20_000);
            let w = Workload::single(path, &opts);
            let r = go(&opts, &w)?;
            Ok(r.latency.mean() / 1000.0)
        };
        let redirect_ms = match &o.redirect_path {
            Some(p) => fmt3(per(p)?),
            None => "-".into(),
        };
        let file_ms = fmt3(per("/sluice-bench/size-1024.bin")?);
        t.push(vec![
            tg.name.clone(),
            fmt(with.requests_per_s),
            fmt(without.requests_per_s),
            format!(
                "{:.3}",
                with.requests_per_s / without.requests_per_s.max(1e-9)
            ),
            redirect_ms,
            file_ms,
        ]);
    }
    finish(o, &Report::table("redirects", &t))
}
