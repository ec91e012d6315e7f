//! `heavy-range` (seed 004 Figure 11): an infrequent client's p99 beside 200 heavy
//! downloaders from one range; and `request-flood`, the same beside 200 clients from
//! one range asking for small files as fast as they can (issue 8: the fair choice
//! of which ready request a worker answers next). Each p99 has the machine's own
//! stops beside it (`stall_ms_*`, `stall.rs`): time no server could have answered in.

use super::common::*;
use crate::report::{Summary, Table};
use crate::stall::{StallWatch, Stalls};
use crate::workload::Workload;
use std::time::Duration;

/// Seed 004 Figure 11: an infrequent client (10 req/s, one connection) fetches a
/// 1 KiB file while 200 clients from one range pull 1 MiB files; its p99 with and
/// without them.
pub(super) fn run(o: &ExpOptions) -> Result<String, String> {
    beside(o, "heavy-range", 1 << 20)
}

/// The same infrequent client while 200 keep-alive clients from one range ask for
/// 1 KiB files back to back: many more complete requests than a worker answers in
/// one turn, all from one range.
pub(super) fn run_flood(o: &ExpOptions) -> Result<String, String> {
    beside(o, "request-flood", 1024)
}

/// The infrequent client's p99 alone and beside 200 clients from 127.88.0.1
/// fetching `heavy_size`-byte files.
fn beside(o: &ExpOptions, name: &str, heavy_size: usize) -> Result<String, String> {
    let heavy_file = format!("size-{heavy_size}.bin");
    if let Some(d) = docroot_dir(o) {
        write_file(&d.join("size-1024.bin"), 1024)?;
        write_file(&d.join(&heavy_file), heavy_size)?;
    }
    let mut t = Table::new(&[
        "target",
        "p99_us_alone",
        "p99_us_heavy",
        "ratio",
        "heavy_MiB_per_s",
        "heavy_req_per_s",
        "stall_ms_alone",
        "stall_ms_heavy",
    ]);
    for tg in &o.targets {
        let (mut opts, p) = options_for(&tg.url, o)?;
        opts.connections = 1;
        opts.threads = 1;
        opts.rate = Some(10.0);
        let w = Workload::single(
            &format!("{}/sluice-bench/size-1024.bin", base_path(&p)),
            &opts,
        );
        // The machine's own stops meanwhile (`stall.rs`), beside each p99.
        let watch = StallWatch::start();
        let alone = Summary::new(&tg.url, 1, 1, &go(&opts, &w)?);
        let stall_alone = watch.map(StallWatch::finish);
        let lasting = o.duration + Duration::from_secs(4);
        let heavy = bench_child(
            &[
                &bench_file_url(tg, &heavy_file)?,
                "--json",
                "-c",
                "200",
                "-d",
                &format!("{}ms", lasting.as_millis()),
                "--source-addrs",
                "127.88.0.1",
            ],
            std::process::Stdio::piped(),
        )?;
        std::thread::sleep(Duration::from_secs(2));
        let watch = StallWatch::start();
        let under = go(&opts, &w).map(|r| Summary::new(&tg.url, 1, 1, &r));
        let stall_heavy = watch.map(StallWatch::finish);
        let out = heavy
            .wait_with_output()
            .map_err(|e| format!("heavy clients: {e}"))?;
        let under = under?;
        let json = serde_json::from_slice::<serde_json::Value>(&out.stdout).ok();
        let field = |k: &str| json.as_ref().and_then(|v| v[k].as_f64()).unwrap_or(0.0);
        let (mibs, rps) = (field("bytes_per_s") / 1048576.0, field("requests_per_s"));
        t.push(vec![
            tg.name.clone(),
            alone.latency_us.p99.to_string(),
            under.latency_us.p99.to_string(),
            format!(
                "{:.1}",
                under.latency_us.p99 as f64 / alone.latency_us.p99.max(1) as f64
            ),
            fmt(mibs),
            format!("{rps:.0}"),
            Stalls::ms(stall_alone),
            Stalls::ms(stall_heavy),
        ]);
    }
    finish(o, &Report::table(name, &t))
}
