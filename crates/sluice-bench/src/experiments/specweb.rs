//! `specweb` (seed 004 figs. 6-7): a SpecWeb99-like file set by data-set size.

use super::common::*;
use crate::plot::{Axis, Chart, Series, Unit};
use crate::report::{Summary, Table};
use crate::workload::Workload;

/// files, 0.1-0.9 KB, 1-9 KB, 10-90 KB, 100-900 KB), Zipf-popular, by data-set size.
pub(super) fn run(o: &ExpOptions) -> Result<String, String> {
    let dir_counts = [5usize, 20, 60];
    let mut t = Table::new(&[
        "target",
        "dirs",
        "dataset_MiB",
        "req_per_s",
        "MiB_per_s",
        "p99_us",
    ]);
    let mut pts: Vec<Vec<(f64, f64)>> = vec![Vec::new(); o.targets.len()];
    for &dirs in &dir_counts {
        let mut files = Vec::new();
        let mut total = 0usize;
        for d in 0..dirs {
            for class in 0..4u32 {
                for k in 1..=9usize {
                    let size = k * 100 * 10usize.pow(class);
                    let rel = format!("/sluice-bench/spec/dir{d:03}/class{class}_{k}");
                    if let Some(root) = &o.docroot {
                        write_file(&root.join(rel.trim_start_matches('/')), size)?;
                    }
                    total += size;
                    files.push((rel, class, k));
                }
            }
        }
        // SpecWeb99's mix favours small classes (35/50/14/1 %); rank files by class
        // then size and let Zipf make the top of that order hot.
        files.sort_by_key(|(_, c, k)| (*c, *k));
        let paths: Vec<String> = files.into_iter().map(|(p, _, _)| p).collect();
        for (ti, tg) in o.targets.iter().enumerate() {
            let (opts, p) = options_for(&tg.url, o)?;
            let prefix = base_path(&p);
            let w = Workload::zipf(
                paths.iter().map(|x| format!("{prefix}{x}")).collect(),
                1.0,
                &opts,
            );
            let r = go(&opts, &w)?;
            let sm = Summary::new(&tg.url, opts.threads, opts.connections, &r);
            let mib = total as f64 / 1048576.0;
            pts[ti].push((mib, sm.bytes_per_s / 1048576.0));
            t.push(vec![
                tg.name.clone(),
                dirs.to_string(),
                fmt(mib),
                fmt(sm.requests_per_s),
                fmt(sm.bytes_per_s / 1048576.0),
                sm.latency_us.p99.to_string(),
            ]);
        }
    }
    let series: Vec<Series> = o
        .targets
        .iter()
        .zip(pts)
        .map(|(tg, p)| Series {
            name: tg.name.clone(),
            points: p,
        })
        .collect();
    finish(
        o,
        &Report::chart(
            "specweb",
            &t,
            Chart {
                title: format!(
                    "SpecWeb99-like throughput by data-set size ({})",
                    o.run_label()
                ),
                x: Axis::linear("data set", Unit::Suffix("MiB")),
                y: Axis::linear("throughput", Unit::Suffix("MiB/s")),
                series: &series,
            },
        ),
    )
}
