//! `incomplete-sweep` (seed 004 Figure 10): legitimate req/s against the number of
//! incomplete connections.

use super::attacks::{legit, start_attack, RAMP};
use super::common::*;
use crate::plot::{Axis, Chart, Series, Unit};
use crate::report::Table;

/// Seed 004 Figure 10: legitimate req/s against the number of incomplete (silent)
/// connections, 100 … `--max-concurrency` (the paper went to 32,000), per target.
/// The run without an attack is measured first and again last (the `0-after` row):
/// every ratio is to the mean of the two, so that one noisy window at either end does
/// not tilt the whole curve. The targets take turns at every step.
pub(super) fn run(o: &ExpOptions) -> Result<String, String> {
    if let Some(d) = docroot_dir(o) {
        write_file(&d.join("size-1024.bin"), 1024)?;
    }
    let steps: Vec<usize> = [0usize, 100, 1000, 4000, 8000, 16_000, 24_000, 32_000]
        .into_iter()
        .filter(|s| *s <= o.max_concurrency)
        .collect();
    let mut t = Table::new(&[
        "target",
        "incomplete",
        "req_per_s",
        "p99_us",
        "ratio_to_none",
    ]);
    // Step by step, every target in turn at each step (not one target's whole
    // sweep after another's): the machine's speed drifts by ±15% over minutes here,
    // and interleaving puts the same drift under every target's row of a step.
    // Per target: the points plotted, and the rows (label, incomplete connections,
    // req/s, p99 µs) in the order measured.
    let mut pts: Vec<Vec<(f64, f64)>> = vec![Vec::new(); o.targets.len()];
    let mut rows: Vec<Vec<(String, usize, f64, u64)>> = vec![Vec::new(); o.targets.len()];
    for &n in &steps {
        for (i, tg) in o.targets.iter().enumerate() {
            let kids = if n > 0 {
                start_attack(tg, "silent", n, o)?
            } else {
                Vec::new()
            };
            if n > 0 {
                std::thread::sleep(RAMP);
            }
            let r = legit(tg, o);
            crate::attack::reap(kids);
            let r = r?;
            pts[i].push(((n.max(1)) as f64, r.requests_per_s));
            rows[i].push((n.to_string(), n, r.requests_per_s, r.latency_us.p99));
        }
    }
    if steps.len() > 1 {
        for (i, tg) in o.targets.iter().enumerate() {
            let r = legit(tg, o)?;
            rows[i].push(("0-after".into(), 0, r.requests_per_s, r.latency_us.p99));
        }
    }
    let mut series = Vec::new();
    for ((tg, rows), points) in o.targets.iter().zip(rows).zip(pts) {
        let nones: Vec<f64> = rows.iter().filter(|r| r.1 == 0).map(|r| r.2).collect();
        let none = nones.iter().sum::<f64>() / nones.len().max(1) as f64;
        for (label, _, rps, p99) in rows {
            t.push(vec![
                tg.name.clone(),
                label,
                fmt(rps),
                p99.to_string(),
                format!("{:.2}", rps / none.max(1e-9)),
            ]);
        }
        series.push(Series {
            name: tg.name.clone(),
            points,
        });
    }
    finish(
        o,
        &Report::chart(
            "incomplete-sweep",
            &t,
            Chart {
                title: format!(
                    "Legitimate requests/s against incomplete connections ({})",
                    o.run_label()
                ),
                x: Axis::log("incomplete connections", Unit::Count),
                y: Axis::linear("legitimate requests/s", Unit::Rate("req/s")),
                series: &series,
            },
        ),
    )
}
