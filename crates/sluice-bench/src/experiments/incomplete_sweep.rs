//! `incomplete-sweep` (seed 004 Figure 10): legitimate req/s against the number of
//! incomplete connections.

use super::attacks::{legit, start_attack, RAMP};
use super::common::*;
use crate::plot::{Axis, Chart, Series, Unit};
use crate::report::Table;

/// Seed 004 Figure 10: legitimate req/s against the number of incomplete (silent)
/// connections, 100 … `--max-concurrency` (the paper went to 32,000), per target.
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
    let mut series = Vec::new();
    for tg in &o.targets {
        let mut pts = Vec::new();
        let mut none = 0.0;
        for &n in &steps {
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
            if n == 0 {
                none = r.requests_per_s;
            }
            pts.push(((n.max(1)) as f64, r.requests_per_s));
            t.push(vec![
                tg.name.clone(),
                n.to_string(),
                fmt(r.requests_per_s),
                r.latency_us.p99.to_string(),
                format!("{:.2}", r.requests_per_s / none.max(1e-9)),
            ]);
        }
        series.push(Series {
            name: tg.name.clone(),
            points: pts,
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
