//! `small-files` (seed 004 figs. 4-5): requests/s and latency by file size, with
//! keep-alive and without, every target point by point.

use super::common::*;
use crate::plot::{Axis, Chart, Series, Unit};
use crate::report::{Summary, Table};
use crate::workload::Workload;

/// Seed 004 figs. 4-5: req/s and latency by file size, keep-alive and not.
pub(super) fn run(o: &ExpOptions) -> Result<String, String> {
    const SIZES: [usize; 5] = [100, 1024, 10 * 1024, 100 * 1024, 1024 * 1024];
    if let Some(d) = docroot_dir(o) {
        for s in SIZES {
            write_file(&d.join(format!("size-{s}.bin")), s)?;
        }
    }
    let mut t = Table::new(&[
        "target",
        "size_bytes",
        "keepalive",
        "req_per_s",
        "p50_us",
        "p99_us",
        "MiB_per_s",
        "ratio",
    ]);
    let mut series = Vec::new();
    for ka in [true, false] {
        let mut first = vec![0.0; SIZES.len()];
        let mut pts: Vec<Vec<(f64, f64)>> = vec![Vec::new(); o.targets.len()];
        for (si, s) in SIZES.iter().enumerate() {
            for (ti, tg) in o.targets.iter().enumerate() {
                let (mut opts, p) = options_for(&tg.url, o)?;
                opts.keepalive = ka;
                let w = Workload::single(
                    &format!("{}/sluice-bench/size-{s}.bin", base_path(&p)),
                    &opts,
                );
                let r = go(&opts, &w)?;
                let sm = Summary::new(&tg.url, opts.threads, opts.connections, &r);
                if ti == 0 {
                    first[si] = sm.requests_per_s;
                }
                pts[ti].push((*s as f64, sm.requests_per_s));
                t.push(vec![
                    tg.name.clone(),
                    s.to_string(),
                    ka.to_string(),
                    fmt(sm.requests_per_s),
                    sm.latency_us.p50.to_string(),
                    sm.latency_us.p99.to_string(),
                    fmt(sm.bytes_per_s / 1048576.0),
                    format!("{:.2}", sm.requests_per_s / first[si].max(1e-9)),
                ]);
            }
        }
        for (ti, tg) in o.targets.iter().enumerate() {
            series.push(Series {
                name: format!("{} ({})", tg.name, if ka { "keep-alive" } else { "close" }),
                points: pts[ti].clone(),
            });
        }
    }
    finish(
        o,
        &Report::chart(
            "small-files",
            &t,
            Chart {
                title: format!("Requests/s by file size ({})", o.run_label()),
                x: Axis::log("file size", Unit::Bytes),
                y: Axis::linear("requests/s", Unit::Rate("req/s")),
                series: &series,
            },
        ),
    )
}
