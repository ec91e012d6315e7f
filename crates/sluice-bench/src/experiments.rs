//! The seeds' experiments, one function each, all built from the same pieces:
//! a list of targets, the engine ([`crate::engine::run`]), a [`Table`] (printed, and
//! written as CSV) and an SVG plot. Several targets are run point by point,
//! interleaved, and printed side by side with ratios to the first target.
//!
//! Experiments that need files write them under `--docroot` (the directory the
//! servers under test serve), in `sluice-bench/`, so every server gets the same files.
//! New experiments (the attack experiments of the conditioning issue) add a match
//! arm in [`run`] and a function here.

use crate::engine::{self, Options, RunResult};
use crate::plot::{line, Series};
use crate::report::{Latency, Summary, Table};
use crate::workload::{Pick, Workload};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const NAMES: &[&str] = &[
    "small-files",
    "random-files",
    "specweb",
    "concurrency",
    "single-download",
    "redirects",
    "buffer-sweep",
    "incomplete",
    "half-heads",
    "slowloris",
    "persistent-hold",
    "slow-read",
    "heavy-range",
    "incomplete-sweep",
    "cold-files",
];

/// A server under test.
#[derive(Clone, Debug)]
pub struct Target {
    pub name: String,
    pub url: String,
}

impl Target {
    /// `NAME=URL` or just `URL` (named by its host:port).
    pub fn parse(s: &str) -> Target {
        match s.split_once('=') {
            Some((n, u)) if !n.contains('/') => Target {
                name: n.to_string(),
                url: u.to_string(),
            },
            _ => Target {
                name: s
                    .trim_start_matches("http://")
                    .trim_end_matches('/')
                    .to_string(),
                url: s.to_string(),
            },
        }
    }
}

#[derive(Clone, Debug)]
pub struct ExpOptions {
    pub targets: Vec<Target>,
    /// Baselines for `redirects`: the same servers without rules, in target order.
    pub baselines: Vec<Target>,
    pub duration: Duration,
    pub connections: usize,
    pub threads: usize,
    pub out_dir: PathBuf,
    pub docroot: Option<PathBuf>,
    /// `buffer-sweep`: the file to read (default: a 100 MiB file made in out_dir).
    pub file: Option<PathBuf>,
    pub buffer_max: usize,
    pub buffer_step: usize,
    /// `buffer-sweep`: bytes read per buffer size (the seed read 100 MB each time).
    pub sweep_bytes: u64,
    /// `concurrency`: the highest concurrency step.
    pub max_concurrency: usize,
    /// `concurrency`: bytes per download, and each downloader's read rate (bytes/s).
    pub download_size: usize,
    pub download_rate: u64,
    /// `redirects`: the path the last rule redirects.
    pub redirect_path: Option<String>,
}

impl Default for ExpOptions {
    fn default() -> Self {
        ExpOptions {
            targets: Vec::new(),
            baselines: Vec::new(),
            duration: Duration::from_secs(10),
            connections: 50,
            threads: 1,
            out_dir: PathBuf::from("bench-out"),
            docroot: None,
            file: None,
            buffer_max: 100 * 1024,
            buffer_step: 1024,
            sweep_bytes: 16 << 20,
            max_concurrency: 10_000,
            download_size: 256 * 1024,
            download_rate: 64 * 1024,
            redirect_path: None,
        }
    }
}

/// Run one experiment; returns the report text (also written to `out_dir`).
pub fn run(name: &str, o: &ExpOptions) -> Result<String, String> {
    std::fs::create_dir_all(&o.out_dir).map_err(|e| format!("{}: {e}", o.out_dir.display()))?;
    if name != "buffer-sweep" && o.targets.is_empty() {
        return Err(format!("{name} needs at least one --target URL"));
    }
    let text = match name {
        "small-files" => small_files(o)?,
        "random-files" => random_files(o)?,
        "specweb" => specweb(o)?,
        "concurrency" => concurrency(o)?,
        "single-download" => single_download(o)?,
        "redirects" => redirects(o)?,
        "buffer-sweep" => buffer_sweep(o)?,
        "incomplete" => attacks(o, "incomplete", "silent", 16_000)?,
        "half-heads" => attacks(o, "half-heads", "half", 8_000)?,
        "slowloris" => attacks(o, "slowloris", "slowloris", 4_000)?,
        "persistent-hold" => attacks(o, "persistent-hold", "hold", 10_000)?,
        "slow-read" => attacks(o, "slow-read", "slow-read", 1_000)?,
        "heavy-range" => heavy_range(o)?,
        "incomplete-sweep" => incomplete_sweep(o)?,
        "cold-files" => crate::cold_files::cold_files(o)?,
        other => {
            return Err(format!(
                "unknown experiment {other:?}; one of: {}",
                NAMES.join(", ")
            ))
        }
    };
    let report = o.out_dir.join(format!("{name}.txt"));
    std::fs::write(&report, &text).map_err(|e| format!("{}: {e}", report.display()))?;
    Ok(text)
}

/// Split `http://host:port/path` into (addr, host header, path).
pub fn split_url(url: &str) -> Result<(std::net::SocketAddr, String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs"))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let with_port = if hostport.contains(':') && !hostport.ends_with(']') {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    use std::net::ToSocketAddrs;
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| format!("{url}: {e}"))?
        .next()
        .ok_or_else(|| format!("{url}: no address"))?;
    let host = hostport
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(hostport)
        .to_string();
    Ok((addr, host, path.to_string()))
}

fn options_for(url: &str, o: &ExpOptions) -> Result<(Options, String), String> {
    let (addr, host, path) = split_url(url)?;
    let opts = Options {
        addr,
        host,
        connections: o.connections,
        threads: o.threads,
        duration: o.duration,
        ..Options::default()
    };
    Ok((opts, path))
}

fn base_path(p: &str) -> String {
    p.trim_end_matches('/').to_string()
}

fn go(opts: &Options, w: &Workload) -> Result<RunResult, String> {
    engine::run(opts, w).map_err(|e| format!("load run failed: {e}"))
}

fn docroot_dir(o: &ExpOptions) -> Option<PathBuf> {
    o.docroot.as_ref().map(|d| d.join("sluice-bench"))
}

pub(crate) fn write_file(path: &Path, size: usize) -> Result<(), String> {
    if std::fs::metadata(path)
        .map(|m| m.len() as usize == size)
        .unwrap_or(false)
    {
        return Ok(());
    }
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    std::fs::write(path, data).map_err(|e| format!("{}: {e}", path.display()))
}

fn fmt(x: f64) -> String {
    format!("{x:.1}")
}

/// Seed 004 figs. 4-5: req/s and latency by file size, keep-alive and not.
fn small_files(o: &ExpOptions) -> Result<String, String> {
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
        "small-files",
        &t,
        "Requests/s by file size",
        "file size (bytes)",
        "requests/s",
        &series,
        true,
    )
}

/// Seed 002 part three: 10,000 random 1 KiB files.
fn random_files(o: &ExpOptions) -> Result<String, String> {
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
    finish(o, "random-files", &t, "", "", "", &[], false)
}

fn random_file_set(o: &ExpOptions) -> Result<Vec<String>, String> {
    if let Some(d) = docroot_dir(o) {
        for i in 0..10_000 {
            write_file(&d.join(format!("rf/{:02}/{i:05}.bin", i % 100)), 1024)?;
        }
    }
    Ok((0..10_000)
        .map(|i| format!("/sluice-bench/rf/{:02}/{i:05}.bin", i % 100))
        .collect())
}

fn random_run(url: &str, o: &ExpOptions, paths: &[String]) -> Result<Summary, String> {
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

/// Seed 004 figs. 6-7: a SpecWeb99-like file set (per directory: 4 classes of 9
/// files, 0.1-0.9 KB, 1-9 KB, 10-90 KB, 100-900 KB), Zipf-popular, by data-set size.
fn specweb(o: &ExpOptions) -> Result<String, String> {
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
        "specweb",
        &t,
        "SpecWeb99-like throughput by data-set size",
        "data set (MiB)",
        "MiB/s",
        &series,
        false,
    )
}

/// Most connections one load process opens (its descriptor limit is 20,000); past
/// this a concurrency step runs in several `sluice bench` child processes.
const PER_PROCESS: usize = 15_000;
/// Most connections from one loopback source address (the ephemeral port range).
const PER_SOURCE: usize = 25_000;

/// What the downloads of one step did (from this process or merged from children).
struct Downloads {
    counts: engine::Counts,
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
fn concurrency(o: &ExpOptions) -> Result<String, String> {
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
    for &c in &steps {
        for (ti, tg) in o.targets.iter().enumerate() {
            if breaking[ti].is_some() {
                continue;
            }
            let st = concurrency_step(o, tg, c, step_len, &file)?;
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
    line(
        &o.out_dir.join("concurrency-availability"),
        "Availability vs concurrent downloads",
        "concurrent downloads",
        "availability %",
        &names(av_pts),
        true,
    )?;
    line(
        &o.out_dir.join("concurrency-probe"),
        "Probe (1 KiB) p99 latency vs concurrent downloads",
        "concurrent downloads",
        "probe p99 ms",
        &names(probe_pts),
        true,
    )?;
    let mut extra = String::new();
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
    let mut text = finish(
        o,
        "concurrency",
        &t,
        "Time to first byte (p50) vs concurrent downloads",
        "concurrent downloads",
        "TTFB p50 ms",
        &names(ttfb_pts),
        true,
    )?;
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
    opts.timeout = Duration::from_secs(60).max(len);
    let base = base_path(&p);
    let dl_path = format!("{base}/sluice-bench/{file}");
    // The probe: one connection, 20 small requests a second, open loop (its
    // latency counts from when each request was due).
    let (mut popts, _) = options_for(&tg.url, o)?;
    popts.connections = 1;
    popts.threads = 1;
    popts.duration = len;
    popts.rate = Some(20.0);
    popts.timeout = len;
    let pw = Workload::single(&format!("{base}/sluice-bench/probe-1k.bin"), &popts);
    let probe = std::thread::spawn(move || engine::run(&popts, &pw));
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
    let mut cmd = crate::load_process()?;
    cmd.args(["bench", &full, "--json"])
        .args(["-c", &c.to_string()])
        .args(["-t", &opts.threads.to_string()])
        .args(["-d", &format!("{}ms", opts.duration.as_millis())])
        .args(["--timeout", &format!("{}ms", opts.timeout.as_millis())])
        .args(["--processes", &procs.to_string()]);
    if let Some(r) = opts.read_rate {
        cmd.args(["--read-rate", &r.to_string()]);
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
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("bench JSON: {e}"))?;
    let counts: engine::Counts =
        serde_json::from_value(v["counts"].clone()).map_err(|e| format!("bench JSON: {e}"))?;
    let ttfb: Latency =
        serde_json::from_value(v["ttfb_us"].clone()).map_err(|e| format!("bench JSON: {e}"))?;
    Ok(Downloads {
        counts,
        ttfb,
        elapsed: Duration::from_secs_f64(v["duration_s"].as_f64().unwrap_or(0.0)),
    })
}

/// Seed 000: one large download, MB/s (median of three).
fn single_download(o: &ExpOptions) -> Result<String, String> {
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
    finish(o, "single-download", &t, "", "", "", &[], false)
}

/// Seeds 001/002: (a) ordinary traffic with rules declared vs the same server without,
/// (b) time per redirect on one keep-alive connection vs time per 1 KiB file.
fn redirects(o: &ExpOptions) -> Result<String, String> {
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
    finish(o, "redirects", &t, "", "", "", &[], false)
}

fn fmt3(x: f64) -> String {
    format!("{x:.4}")
}

/// Seed 003: read a file with every buffer size in a range; bytes/s per size.
fn buffer_sweep(o: &ExpOptions) -> Result<String, String> {
    let file = match &o.file {
        Some(f) => f.clone(),
        None => {
            let f = o.out_dir.join("sweep-100m.bin");
            write_file(&f, 100 << 20)?;
            f
        }
    };
    let mut sizes: Vec<usize> = vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512];
    let mut s = o.buffer_step.max(1);
    while s <= o.buffer_max {
        sizes.push(s);
        s += o.buffer_step.max(1);
    }
    sizes.sort_unstable();
    sizes.dedup();
    let mut t = Table::new(&["buffer_bytes", "MiB_per_s"]);
    let mut pts = Vec::new();
    let mut buf = vec![0u8; o.buffer_max.max(512)];
    // Warm the page cache so the sweep measures the read path, not the disk.
    let _ = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut best = (0usize, 0.0f64);
    for &size in &sizes {
        let mut f = std::fs::File::open(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        // Tiny buffers read fewer bytes, so the sweep ends in reasonable time.
        let limit = o
            .sweep_bytes
            .min((size as u64).saturating_mul(1 << 16))
            .max(1 << 16);
        let start = Instant::now();
        let mut total = 0u64;
        while total < limit {
            match f.read(&mut buf[..size]) {
                Ok(0) => break,
                Ok(n) => total += n as u64,
                Err(e) => return Err(format!("{}: {e}", file.display())),
            }
        }
        let mbs = total as f64 / start.elapsed().as_secs_f64() / 1048576.0;
        if mbs > best.1 {
            best = (size, mbs);
        }
        pts.push((size as f64, mbs));
        t.push(vec![size.to_string(), fmt(mbs)]);
    }
    let series = [Series {
        name: file.display().to_string(),
        points: pts,
    }];
    let mut text = finish(
        o,
        "buffer-sweep",
        &t,
        "Read throughput by buffer size",
        "buffer size (bytes)",
        "MiB/s",
        &series,
        true,
    )?;
    text += &format!(
        "best buffer: {} bytes ({:.0} MiB/s); for sluice: [files] buffer_size = {}\n",
        best.0,
        best.1,
        best.0.max(512)
    );
    Ok(text)
}

/// How long attackers get to reach their full number before the measurement.
const RAMP: Duration = Duration::from_secs(4);

/// A legitimate client (`-c` connections, closed loop) on the 1 KiB file.
fn legit(tg: &Target, o: &ExpOptions) -> Result<Summary, String> {
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
fn start_attack(
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

/// `http://HOST:PORT[/base]/sluice-bench/NAME`: a file the experiments wrote.
fn bench_file_url(tg: &Target, name: &str) -> Result<String, String> {
    let (_, _, p) = split_url(&tg.url)?;
    Ok(format!(
        "http://{}{}/sluice-bench/{name}",
        authority(&tg.url),
        base_path(&p)
    ))
}

/// `HOST:PORT` of an `http://` URL.
fn authority(url: &str) -> &str {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or("")
}

/// `sluice bench ARGS...` as a child process of this same binary (clients that must
/// not share this process's descriptors or CPU accounting).
fn bench_child(args: &[&str], stdout: std::process::Stdio) -> Result<std::process::Child, String> {
    crate::load_process()?
        .arg("bench")
        .args(args)
        .stdout(stdout)
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("sluice bench: {e}"))
}

/// Seed 004's attack table: a legitimate client's req/s and p99 without and with
/// the attack, for every target; attackers from 127.66.x (several processes past
/// one's descriptor limit). `--max-concurrency` sets the attack's size (default:
/// the figure from the conditioning issue's table).
fn attacks(o: &ExpOptions, name: &str, mode: &str, default_n: usize) -> Result<String, String> {
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
        t.push(vec![
            tg.name.clone(),
            mode.to_string(),
            n.to_string(),
            fmt(before.requests_per_s),
            fmt(under.requests_per_s),
            format!(
                "{:.2}",
                under.requests_per_s / before.requests_per_s.max(1e-9)
            ),
            before.latency_us.p99.to_string(),
            under.latency_us.p99.to_string(),
            stats.closed.to_string(),
        ]);
    }
    finish(o, name, &t, "", "", "", &[], false)
}

/// Seed 004 Figure 11: an infrequent client (10 req/s, one connection) fetches a
/// 1 KiB file while 200 clients from one range pull 1 MiB files; its p99 with and
/// without them.
fn heavy_range(o: &ExpOptions) -> Result<String, String> {
    if let Some(d) = docroot_dir(o) {
        write_file(&d.join("size-1024.bin"), 1024)?;
        write_file(&d.join("size-1048576.bin"), 1 << 20)?;
    }
    let mut t = Table::new(&[
        "target",
        "p99_us_alone",
        "p99_us_heavy",
        "ratio",
        "heavy_MiB_per_s",
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
        let alone = Summary::new(&tg.url, 1, 1, &go(&opts, &w)?);
        let lasting = o.duration + Duration::from_secs(4);
        let heavy = bench_child(
            &[
                &bench_file_url(tg, "size-1048576.bin")?,
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
        let under = go(&opts, &w).map(|r| Summary::new(&tg.url, 1, 1, &r));
        let out = heavy
            .wait_with_output()
            .map_err(|e| format!("heavy clients: {e}"))?;
        let under = under?;
        let mibs = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v["bytes_per_s"].as_f64())
            .unwrap_or(0.0)
            / 1048576.0;
        t.push(vec![
            tg.name.clone(),
            alone.latency_us.p99.to_string(),
            under.latency_us.p99.to_string(),
            format!(
                "{:.1}",
                under.latency_us.p99 as f64 / alone.latency_us.p99.max(1) as f64
            ),
            fmt(mibs),
        ]);
    }
    finish(o, "heavy-range", &t, "", "", "", &[], false)
}

/// Seed 004 Figure 10: legitimate req/s against the number of incomplete (silent)
/// connections, 100 … `--max-concurrency` (the paper went to 32,000), per target.
fn incomplete_sweep(o: &ExpOptions) -> Result<String, String> {
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
        "incomplete-sweep",
        &t,
        "Legitimate requests/s against incomplete connections",
        "incomplete connections",
        "requests/s",
        &series,
        true,
    )
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn finish(
    o: &ExpOptions,
    name: &str,
    t: &Table,
    title: &str,
    xl: &str,
    yl: &str,
    series: &[Series],
    log_x: bool,
) -> Result<String, String> {
    let csv = o.out_dir.join(format!("{name}.csv"));
    std::fs::write(&csv, t.csv()).map_err(|e| format!("{}: {e}", csv.display()))?;
    let mut text = t.text();
    text += &format!("csv: {}\n", csv.display());
    if !series.is_empty() && series.iter().any(|s| !s.points.is_empty()) {
        for written in line(&o.out_dir.join(name), title, xl, yl, series, log_x)? {
            text += &format!("plot: {written}\n");
        }
    }
    Ok(text)
}
