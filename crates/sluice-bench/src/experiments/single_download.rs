//! `single-download` (seed 000): one large download's MB/s, median of three.

use super::common::*;
use crate::report::Table;
use crate::workload::Workload;
use std::time::Duration;

pub(super) fn run(o: &ExpOptions) -> Result<String, String> {
    const SIZE: usize = 256 << 20;
    if let Some(d) = docroot_dir(o) {
        write_file(&d.join("single-256m.bin"), SIZE)?;
    }
    let mut t = Table::new(&["target", "MiB_per_s", "seconds", "ratio"]);
    let mut first = 0.0;
    for (ti, tg) in o.targets.iter().enumerate() {
        let mut speeds = Vec::new();
        for _ in 0..3 {
            let (mut opts, p) = options_for(&tg.url, o)?;
            opts.connections = 1;
            opts.threads = 1;
            opts.max_requests = Some(1);
            opts.duration = Duration::from_secs(600);
            let w = Workload::single(
                &format!("{}/sluice-bench/single-256m.bin", base_path(&p)),
                &opts,
            );
            let r = go(&opts, &w)?;
            if r.counts.succeeded != 1 {
                return Err(format!("{}: the download failed ({:?})", tg.name, r.counts));
            }
            speeds.push((
                r.counts.bytes as f64 / r.elapsed.as_secs_f64() / 1048576.0,
                r.elapsed.as_secs_f64(),
            ));
        }
        speeds.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (mbs, secs) = speeds[1];
        if ti == 0 {
            first = mbs;
        }
        t.push(vec![
            tg.name.clone(),
            fmt(mbs),
            format!("{secs:.3}"),
            format!("{:.2}", mbs / first.max(1e-9)),
        ]);
    }
    finish(o, &Report::table("single-download", &t))
}
