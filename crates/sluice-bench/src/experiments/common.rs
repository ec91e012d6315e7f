//! What every experiment is made of: the targets and options (`ExpOptions`), URL
//! helpers, the files experiments write under `--docroot`, child `sluice bench`
//! processes, the kernel's count of dropped input packets ([`softnet_drops`]), and
//! [`finish`], which writes an experiment's table as CSV and its chart
//! as SVG/PNG. Experiments sit above this module and never depend on each other's
//! internals except the attack helpers in `attacks`.

use crate::engine;
use crate::options::Options;
use crate::outcome::RunResult;
use crate::plot::Chart;
use crate::report::Table;
use crate::workload::Workload;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// `concurrency` and `cold-files`: the measuring client (the probe; the small-file
    /// client) runs at `SCHED_FIFO` priority 1 (`measuring_client_fifo`).
    pub probe_fifo: bool,
    /// `concurrency`: each probe request on a new connection (closed after its
    /// response), so the server accepts every one; `false`: one kept-alive connection.
    pub probe_new_connections: bool,
    /// `concurrency`: the downloads out of step (`Options::read_stagger` of one file's
    /// size), so they do not all end and reconnect together.
    pub download_stagger: bool,
    /// `concurrency`: how far into each step the probe starts (it runs to the step's
    /// end), so it can measure a client at the step's concurrency, after the burst
    /// of connections that opens the step.
    pub probe_after: Duration,
    /// `redirects`: the path the last rule redirects.
    pub redirect_path: Option<String>,
    /// `cold-files`: the small client's rate (req/s, open loop); `None`: closed loop.
    pub small_rate: Option<f64>,
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
            probe_fifo: false,
            probe_new_connections: false,
            download_stagger: false,
            probe_after: Duration::ZERO,
            redirect_path: None,
            small_rate: None,
        }
    }
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

pub(super) fn options_for(url: &str, o: &ExpOptions) -> Result<(Options, String), String> {
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

pub(super) fn base_path(p: &str) -> String {
    p.trim_end_matches('/').to_string()
}

/// Put the calling thread (and the threads it starts from now on) at `SCHED_FIFO`
/// priority 1: a measuring client on a machine shared with the load, so that its
/// own wait for a CPU does not count as the server's latency. The threads started
/// before (the load) keep their ordinary priority. Needs root or `CAP_SYS_NICE`.
pub(super) fn measuring_client_fifo() -> Result<(), String> {
    crate::stall::fifo_this_thread().map_err(|e| format!("--probe-fifo: sched_setscheduler: {e}"))
}

pub(super) fn go(opts: &Options, w: &Workload) -> Result<RunResult, String> {
    engine::run(opts, w).map_err(|e| format!("load run failed: {e}"))
}

pub(super) fn docroot_dir(o: &ExpOptions) -> Option<PathBuf> {
    o.docroot.as_ref().map(|d| d.join("sluice-bench"))
}

pub fn write_file(path: &Path, size: usize) -> Result<(), String> {
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

pub(super) fn fmt(x: f64) -> String {
    format!("{x:.1}")
}

pub(super) fn fmt3(x: f64) -> String {
    format!("{x:.4}")
}

/// `http://HOST:PORT[/base]/sluice-bench/NAME`: a file the experiments wrote.
pub(super) fn bench_file_url(tg: &Target, name: &str) -> Result<String, String> {
    let (_, _, p) = split_url(&tg.url)?;
    Ok(format!(
        "http://{}{}/sluice-bench/{name}",
        authority(&tg.url),
        base_path(&p)
    ))
}

/// `HOST:PORT` of an `http://` URL.
pub(super) fn authority(url: &str) -> &str {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or("")
}

/// `sluice bench ARGS...` as a child process of this same binary (clients that must
/// not share this process's descriptors or CPU accounting).
pub(super) fn bench_child(
    args: &[&str],
    stdout: std::process::Stdio,
) -> Result<std::process::Child, String> {
    crate::process::load_process()?
        .arg("bench")
        .args(args)
        .stdout(stdout)
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("sluice bench: {e}"))
}

/// What an experiment leaves behind: its table (printed with ratios, and written as
/// `NAME.csv`) and the charts of a sweep (`STEM.svg` and `STEM.png` each).
pub struct Report<'a> {
    pub name: &'a str,
    pub table: &'a Table,
    pub charts: Vec<(&'a str, Chart<'a>)>,
}

impl<'a> Report<'a> {
    /// A report that is a table only.
    pub fn table(name: &'a str, table: &'a Table) -> Report<'a> {
        Report {
            name,
            table,
            charts: Vec::new(),
        }
    }

    /// A table and one chart named after the experiment.
    pub fn chart(name: &'a str, table: &'a Table, chart: Chart<'a>) -> Report<'a> {
        Report {
            name,
            table,
            charts: vec![(name, chart)],
        }
    }
}

/// Write the report's files into `out_dir`; returns the table's text and what was written.
pub fn finish(o: &ExpOptions, r: &Report) -> Result<String, String> {
    let csv = o.out_dir.join(format!("{}.csv", r.name));
    std::fs::write(&csv, r.table.csv()).map_err(|e| format!("{}: {e}", csv.display()))?;
    let mut text = r.table.text();
    text += &format!("csv: {}\n", csv.display());
    for (stem, chart) in &r.charts {
        if chart.series.iter().all(|s| s.points.is_empty()) {
            continue;
        }
        for written in chart.draw(&o.out_dir.join(stem))? {
            text += &format!("plot: {written}\n");
        }
    }
    Ok(text)
}

impl ExpOptions {
    /// The servers a chart compares: `sluice vs nginx`.
    pub fn targets_label(&self) -> String {
        let names: Vec<&str> = self.targets.iter().map(|t| t.name.as_str()).collect();
        names.join(" vs ")
    }

    /// What a chart's title says was run: the targets, connections and time per point.
    pub fn run_label(&self) -> String {
        format!(
            "{}; {} connections, {} s per point",
            self.targets_label(),
            self.connections,
            self.duration.as_secs_f64()
        )
    }
}

/// Packets the kernel dropped from its per-CPU input backlogs since boot (the second
/// column of `/proc/net/softnet_stat`, summed over CPUs); `None` where it cannot be
/// read. Loopback traffic passes through that backlog (`net.core.netdev_max_backlog`
/// packets per CPU), so a burst of connections can lose SYNs and requests there, and
/// each loss costs its connection a retransmission timeout: a step's latency would
/// then measure the machine's setting, not the server.
pub fn softnet_drops() -> Option<u64> {
    parse_softnet_drops(&std::fs::read_to_string("/proc/net/softnet_stat").ok()?)
}

fn parse_softnet_drops(text: &str) -> Option<u64> {
    let mut sum = 0u64;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let col = line.split_whitespace().nth(1)?;
        sum += u64::from_str_radix(col, 16).ok()?;
    }
    Some(sum)
}

/// A note for an experiment's output when steps lost packets in the input backlog:
/// `lost` holds (step label, packets dropped during it).
pub fn softnet_note(lost: &[(String, u64)]) -> String {
    if lost.is_empty() {
        return String::new();
    }
    let max = std::fs::read_to_string("/proc/sys/net/core/netdev_max_backlog")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let steps: Vec<String> = lost.iter().map(|(s, n)| format!("{s}: {n}")).collect();
    format!(
        "note: the kernel dropped packets from its input backlog during these steps ({}; \
         net.core.netdev_max_backlog = {max}). On loopback each lost SYN or request costs \
         its connection a retransmission (~1 s), which shows in the time to first byte; \
         raise net.core.netdev_max_backlog to measure the servers rather than the loss.\n",
        steps.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softnet_drops_sum_the_second_column_over_cpus() {
        let text = "0000a000 00000010 00000003 00000000\n0000b000 000000ff 00000000 00000000\n";
        assert_eq!(parse_softnet_drops(text), Some(0x10 + 0xff));
        assert_eq!(parse_softnet_drops("zz\n"), None);
        // This machine's file reads (Linux).
        assert!(softnet_drops().is_some());
        assert_eq!(softnet_note(&[]), "");
        let note = softnet_note(&[("10800".into(), 24_345)]);
        assert!(note.contains("10800: 24345") && note.contains("netdev_max_backlog"));
    }
}
