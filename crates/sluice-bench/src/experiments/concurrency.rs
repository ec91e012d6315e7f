//! `concurrency` (seed 000): rate-capped downloads stepped up until availability
//! falls below 50%, with the time to first byte and a probe client's latency.

use super::common::*;
use crate::engine;
use crate::options::Options;
use crate::plot::{Axis, Chart, Series, Unit};
use crate::report::{Latency, Summary, Table};
use crate::workload::Workload;
use std::time::Duration;

/// Most connections one load process opens (its descriptor limit is 20,000); past
/// this a concurrency step runs in several `sluice bench` child processes.
const PER_PROCESS: usize = 15_000;
/// Most connections from one loopback source address (the ephemeral port range).
const PER_SOURCE: usize = 25_000;

/// What the downloads of one step did (from this process or merged from children).
struct Downloads {
    counts: crate::outcome::Counts,
    ttfb: Latency,
    elapsed: Duration,
}

/// One step of the concurrency experiment, for one target.
struct ConcStep {
    /// Downloads that ended (finished or failed) during the step, and how many of
    /// those finished. Downloads still running at the end are neither.
    ended: u64,
    done: u64,
    /// done / ended; `None` when nothing ended (the step was shorter than a
    /// download): that is "no answer yet", never "0% available".
    availability: Option<f64>,
    ttfb_p50_ms: f64,
    ttfb_p99_ms: f64,
    probe_p50_ms: f64,
    probe_p99_ms: f64,
    probe_availability: f64,
    mib_per_s: f64,
}

/// Seed 000: concurrent slow downloads ramped up until availability falls below 50%,
/// and what the seed plotted beside it: how long a client waits for the server to
/// answer at each concurrency. Per step: the downloads' time to first byte, and a
/// separate probe client fetching a 1 KiB file 20 times a second (p50/p99).
///
/// A step lasts at least two download times (size / rate), so downloads finish
/// inside it; availability counts downloads that ended (finished, refused, reset or
/// timed out), so a transfer still in progress at the end is not a failure.
///
/// A step opens all its downloads at once. By default they then run in step (one
/// size, one rate, windows that refill together) and end and reconnect together
/// every download time: bursts of thousands of connections no mirror's clients make.
/// `--download-stagger` runs them out of step, and `--probe-after` starts the probe
/// once the opening burst is over, so the probe measures a client *at* that many
/// downloads (docs/BENCHMARKS.md has the step at 19,000 both ways).
pub(super) fn run(o: &ExpOptions) -> Result<String, String> {
    let size = o.download_size.max(1);
    let rate = o.download_rate.max(1);
    let transfer = Duration::from_secs_f64(size as f64 / rate as f64);
    let step_len = o.duration.max(transfer * 2 + Duration::from_millis(500));
    let file = format!("download-{size}.bin");
    if let Some(d) = docroot_dir(o) {
        write_file(&d.join(&file), size)?;
        write_file(&d.join("probe-1k.bin"), 1024)?;
    }
    let mut steps = Vec::new();
    let mut c = 100usize;
    while c <= o.max_concurrency {
        steps.push(c);
        c = if c < 1000 { c * 3 } else { c * 2 };
    }
    if steps.last().is_some_and(|&l| l < o.max_concurrency) {
        steps.push(o.max_concurrency);
    }
    let mut t = Table::new(&[
        "target",
        "concurrency",
        "step_s",
        "downloads_ended",
        "downloads_done",
        "availability",
        "ttfb_p50_ms",
        "ttfb_p99_ms",
        "probe_p50_ms",
        "probe_p99_ms",
        "probe_availability",
        "MiB_per_s",
    ]);
    let n = o.targets.len();
    let (mut ttfb_pts, mut probe_pts, mut av_pts) = (
        vec![Vec::new(); n],
        vec![Vec::new(); n],
        vec![Vec::new(); n],
    );
    let mut breaking: Vec<Option<usize>> = vec![None; n];
    let mut short_steps: Vec<usize> = Vec::new();
    // Steps whose packets the kernel dropped before any server saw them.
    let mut lost: Vec<(String, u64)> = Vec::new();
    for &c in &steps {
        for (ti, tg) in o.targets.iter().enumerate() {
            if breaking[ti].is_some() {
                continue;
            }
            let before = softnet_drops();
            let st = concurrency_step(o, tg, c, step_len, &file)?;
            if let (Some(b), Some(a)) = (before, softnet_drops()) {
                if a > b {
                    lost.push((format!("{} at {c}", tg.name), a - b));
                }
            }
            if st.availability.is_none() {
                short_steps.push(c);
            }
            let ms = |us: f64| us.max(0.001);
            ttfb_pts[ti].push((c as f64, ms(st.ttfb_p50_ms)));
            probe_pts[ti].push((c as f64, ms(st.probe_p99_ms)));
            if let Some(a) = st.availability {
                av_pts[ti].push((c as f64, a * 100.0));
                if a < 0.5 {
                    breaking[ti] = Some(c);
                }
            }
            t.push(vec![
                tg.name.clone(),
                c.to_string(),
                format!("{:.1}", step_len.as_secs_f64()),
                st.ended.to_string(),
                st.done.to_string(),
                st.availability.map_or("-".into(), |a| format!("{a:.4}")),
                format!("{:.2}", st.ttfb_p50_ms),
                format!("{:.2}", st.ttfb_p99_ms),
                format!("{:.2}", st.probe_p50_ms),
                format!("{:.2}", st.probe_p99_ms),
                format!("{:.4}", st.probe_availability),
                fmt(st.mib_per_s),
            ]);
        }
    }
    let names = |pts: Vec<Vec<(f64, f64)>>| -> Vec<Series> {
        o.targets
            .iter()
            .zip(pts)
            .map(|(tg, p)| Series {
                name: tg.name.clone(),
                points: p,
            })
            .collect()
    };
    let mut extra = softnet_note(&lost);
    if !short_steps.is_empty() {
        extra += &format!(
            "note: no download ended within a {:.1} s step at concurrency {:?}: those steps say \
             nothing about availability (make -d longer than size / rate = {:.1} s)\n",
            step_len.as_secs_f64(),
            short_steps,
            transfer.as_secs_f64()
        );
    }
    for (tg, b) in o.targets.iter().zip(&breaking) {
        extra += &match b {
            Some(c) => format!(
                "{}: availability fell below 50% at {c} concurrent downloads\n",
                tg.name
            ),
            None => format!(
                "{}: availability stayed at or above 50% up to {} downloads\n",
                tg.name,
                steps.last().copied().unwrap_or(0)
            ),
        };
    }
    let (ttfb, probe, avail) = (names(ttfb_pts), names(probe_pts), names(av_pts));
    let x = Axis::log("concurrent downloads", Unit::Count);
    let label = format!(
        "{}; {} downloads at {}/s each",
        o.targets_label(),
        crate::plot::human(o.download_size as f64, Unit::Bytes),
        crate::plot::human(o.download_rate as f64, Unit::Bytes),
    );
    let chart = |title: &str, y: Axis, series| Chart {
        title: format!("{title} ({label})"),
        x,
        y,
        series,
    };
    let report = Report {
        name: "concurrency",
        table: &t,
        charts: vec![
            (
                "concurrency",
                chart(
                    "Time to first byte (p50) vs concurrent downloads",
                    Axis::linear("TTFB p50", Unit::Suffix("ms")),
                    &ttfb,
                ),
            ),
            (
                "concurrency-probe",
                chart(
                    "1 KiB probe p99 vs concurrent downloads",
                    Axis::linear("probe p99", Unit::Suffix("ms")),
                    &probe,
                ),
            ),
            (
                "concurrency-availability",
                chart(
                    "Availability vs concurrent downloads",
                    Axis::linear("availability", Unit::Suffix("%")),
                    &avail,
                ),
            ),
        ],
    };
    let mut text = finish(o, &report)?;
    text += &extra;
    Ok(text)
}

/// Run `c` rate-limited downloads against `tg` for `len`, with the probe beside them.
fn concurrency_step(
    o: &ExpOptions,
    tg: &Target,
    c: usize,
    len: Duration,
    file: &str,
) -> Result<ConcStep, String> {
    let (mut opts, p) = options_for(&tg.url, o)?;
    opts.connections = c;
    opts.threads = o.threads.max(1);
    opts.duration = len;
    opts.read_rate = Some(o.download_rate.max(1));
    if o.download_stagger {
        opts.read_stagger = o.download_size as u64;
    }
    opts.timeout = Duration::from_secs(60).max(len);
    let base = base_path(&p);
    let dl_path = format!("{base}/sluice-bench/{file}");
    // The probe: one connection, 20 small requests a second, open loop (its
    // latency counts from when each request was due). With new connections, the
    // client connects ahead of the next due time and closes after each response:
    // the latency holds the server's accept (deferred until the request arrives),
    // not the handshake the kernel completes alone.
    let (mut popts, _) = options_for(&tg.url, o)?;
    popts.connections = 1;
    popts.keepalive = !o.probe_new_connections;
    popts.threads = 1;
    // Measured after `probe_after` (clamped to leave a second), to the step's end.
    let after = o
        .probe_after
        .min(len.saturating_sub(Duration::from_secs(1)));
    popts.duration = len - after;
    popts.rate = Some(20.0);
    popts.timeout = len;
    let pw = Workload::single(&format!("{base}/sluice-bench/probe-1k.bin"), &popts);
    let fifo = o.probe_fifo;
    let probe = std::thread::spawn(move || {
        std::thread::sleep(after);
        if fifo {
            // This thread only (and the threads it starts): the downloads stay at
            // ordinary priority.
            super::common::measuring_client_fifo()?;
        }
        engine::run(&popts, &pw).map_err(|e| e.to_string())
    });
    let r = if c > PER_PROCESS {
        downloads_in_processes(&opts, &tg.url, &dl_path, c)?
    } else {
        let r = go(&opts, &Workload::single(&dl_path, &opts))?;
        Downloads {
            ttfb: Latency::of(&r.ttfb),
            counts: r.counts,
            elapsed: r.elapsed,
        }
    };
    let pr = probe
        .join()
        .map_err(|_| "the probe thread panicked".to_string())?
        .map_err(|e| format!("probe: {e}"))?;
    let ended = r.counts.attempted;
    let done = r.counts.succeeded;
    let ps = Summary::new(&tg.url, 1, 1, &pr);
    Ok(ConcStep {
        ended,
        done,
        availability: (ended > 0).then(|| done as f64 / ended as f64),
        ttfb_p50_ms: r.ttfb.p50 as f64 / 1000.0,
        ttfb_p99_ms: r.ttfb.p99 as f64 / 1000.0,
        probe_p50_ms: ps.latency_us.p50 as f64 / 1000.0,
        probe_p99_ms: ps.latency_us.p99 as f64 / 1000.0,
        probe_availability: ps.availability,
        mib_per_s: r.counts.bytes as f64 / r.elapsed.as_secs_f64().max(1e-9) / 1048576.0,
    })
}

/// A step too big for one process: `sluice bench URL --processes K --json`, which
/// splits the connections over K children and merges their counts and histograms.
/// On loopback, connections also spread over several source addresses
/// (127.0.1.1, 127.0.1.2, ...) so that no address runs out of ports.
fn downloads_in_processes(
    opts: &Options,
    url: &str,
    path: &str,
    c: usize,
) -> Result<Downloads, String> {
    let procs = c.div_ceil(PER_PROCESS);
    let (addr, _, _) = split_url(url)?;
    let full = format!("http://{}{path}", authority(url));
    let mut cmd = crate::process::load_process()?;
    cmd.args(["bench", &full, "--json"])
        .args(["-c", &c.to_string()])
        .args(["-t", &opts.threads.to_string()])
        .args(["-d", &format!("{}ms", opts.duration.as_millis())])
        .args(["--timeout", &format!("{}ms", opts.timeout.as_millis())])
        .args(["--processes", &procs.to_string()]);
    if let Some(r) = opts.read_rate {
        cmd.args(["--read-rate", &r.to_string()]);
    }
    if opts.read_stagger > 0 {
        cmd.args(["--read-stagger", &opts.read_stagger.to_string()]);
    }
    if addr.ip().is_loopback() && addr.is_ipv4() {
        let sources: Vec<String> = (1..=c.div_ceil(PER_SOURCE).max(1))
            .map(|k| format!("127.0.1.{k}"))
            .collect();
        cmd.args(["--source-addrs", &sources.join(",")]);
    }
    let out = cmd.output().map_err(|e| format!("sluice bench: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "sluice bench --processes {procs}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let part = crate::fanout::ChildReport::parse(&out.stdout)?;
    Ok(Downloads {
        counts: part.counts,
        ttfb: part.ttfb_us,
        elapsed: Duration::from_secs_f64(part.duration_s.max(0.0)),
    })
}
