//! `sluice bench run cold-files`: does a server's small-file latency suffer while
//! it sends files that are not in the page cache?
//!
//! A mirror's data set is far larger than its memory, so most download bytes come
//! from the disk, and a server that reads them on its event loop makes every other
//! connection on that loop wait for the disk. Per target, twice — once with the big
//! files cached, once with them evicted (`posix_fadvise(DONTNEED)` before every
//! download, so they stay cold) — this runs [`DOWNLOADS`] whole-file downloads in a
//! loop beside a closed-loop client of `-c` connections fetching a 1 KiB file, and
//! prints the small client's p99 in both runs and the downloads' MiB/s, and the
//! small client's req/s: on a machine whose cores the downloads keep busy, a server
//! that stalls the small client on the disk leaves the downloads more CPU, so their
//! MiB/s alone would reward the stall. `--small-rate R` makes the small client ask
//! R requests a second (open loop) against every server, so that each serves it the
//! same work and the downloads' MiB/s compare fairly. `--probe-fifo` runs the small
//! client at `SCHED_FIFO` (with `--small-rate`, or it keeps its core to itself), so
//! that on a machine the downloads' clients keep busy its own wait for a core does
//! not count as the server's latency. The last two columns are the time the
//! machine itself stopped during each phase (`stall.rs`: a capped virtual machine
//! stops both its CPUs while its disk is read), in which no server can answer.
//!
//! Needs `--docroot` on this machine (it writes the files there and evicts them).
//! Costs: [`DOWNLOADS`] × [`FILE_SIZE`] of disk, written once.

use super::common::{finish, split_url, write_file, ExpOptions, Report, Target};
use crate::report::{Summary, Table};
use crate::stall::{StallWatch, Stalls};
use crate::workload::Workload;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Concurrent downloads of big files (the issue measured four).
pub const DOWNLOADS: usize = 4;
/// Each download's file: large enough that one download outlasts many small requests.
pub const FILE_SIZE: u64 = 512 << 20;

pub(super) fn run(o: &ExpOptions) -> Result<String, String> {
    let dir = o
        .docroot
        .as_ref()
        .map(|d| d.join("sluice-bench"))
        .ok_or("cold-files needs --docroot (it writes big files there and evicts them)")?;
    let files: Vec<PathBuf> = (0..DOWNLOADS)
        .map(|i| dir.join(format!("cold-{i}.bin")))
        .collect();
    for f in &files {
        write_big(f)?;
    }
    write_file(&dir.join("size-1024.bin"), 1024)?;
    let mut t = Table::new(&[
        "target",
        "p99_us_cached",
        "p99_us_cold",
        "ratio",
        "downloads_MiB_per_s_cached",
        "downloads_MiB_per_s_cold",
        "small_req_per_s_cached",
        "small_req_per_s_cold",
        "stall_ms_cached",
        "stall_ms_cold",
    ]);
    for tg in &o.targets {
        let warm = phase(tg, o, &files, false)?;
        let cold = phase(tg, o, &files, true)?;
        t.push(vec![
            tg.name.clone(),
            warm.0.to_string(),
            cold.0.to_string(),
            format!("{:.2}", cold.0 as f64 / warm.0.max(1) as f64),
            format!("{:.1}", warm.1),
            format!("{:.1}", cold.1),
            format!("{:.0}", warm.2),
            format!("{:.0}", cold.2),
            Stalls::ms(warm.3),
            Stalls::ms(cold.3),
        ]);
    }
    finish(o, &Report::table("cold-files", &t))
}

/// One run: (the small client's p99 in µs, the downloads' MiB/s, the small
/// client's req/s, the machine's stalls meanwhile).
fn phase(
    tg: &Target,
    o: &ExpOptions,
    files: &[PathBuf],
    cold: bool,
) -> Result<(u64, f64, f64, Option<Stalls>), String> {
    for f in files {
        if cold {
            evict(f)?;
        } else {
            // Read it once so every page is cached.
            let mut r = std::fs::File::open(f).map_err(|e| format!("{}: {e}", f.display()))?;
            std::io::copy(&mut r, &mut std::io::sink())
                .map_err(|e| format!("{}: {e}", f.display()))?;
        }
    }
    let (addr, host, path) = split_url(&tg.url)?;
    let base = path.trim_end_matches('/').to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let loaders: Vec<_> = files
        .iter()
        .map(|f| {
            let url_path = format!(
                "{base}/sluice-bench/{}",
                f.file_name().unwrap_or_default().to_string_lossy()
            );
            let (f, host, stop, bytes) = (f.clone(), host.clone(), stop.clone(), bytes.clone());
            std::thread::spawn(move || {
                download_loop(addr, &host, &url_path, &f, cold, &stop, &bytes)
            })
        })
        .collect();
    // Let the downloads get going before the small client starts.
    std::thread::sleep(Duration::from_millis(500));
    let opts = crate::options::Options {
        addr,
        host: host.clone(),
        connections: o.connections,
        threads: 1,
        duration: o.duration,
        rate: o.small_rate,
        ..crate::options::Options::default()
    };
    let w = Workload::single(&format!("{base}/sluice-bench/size-1024.bin"), &opts);
    // `--probe-fifo`: the small client in a thread of its own at `SCHED_FIFO`, the
    // downloads (started above) at ordinary priority.
    let fifo = o.probe_fifo;
    let watch = StallWatch::start();
    let small = std::thread::spawn(move || {
        if fifo {
            super::common::measuring_client_fifo()?;
        }
        crate::engine::run(&opts, &w).map_err(|e| e.to_string())
    })
    .join()
    .map_err(|_| "the small-file client panicked".to_string())
    .and_then(|r| r)
    .map_err(|e| format!("small-file client: {e}"));
    let stalls = watch.map(StallWatch::finish);
    stop.store(true, Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    let mut failed = None;
    for l in loaders {
        if let Ok(Err(e)) = l.join() {
            failed = Some(e);
        }
    }
    if let Some(e) = failed {
        return Err(format!("{}: download: {e}", tg.name));
    }
    let small = Summary::new(&tg.url, o.connections, 1, &small?);
    Ok((
        small.latency_us.p99,
        bytes.load(Ordering::Relaxed) as f64 / secs / 1048576.0,
        small.requests_per_s,
        stalls,
    ))
}

/// Download `path` again and again until `stop`, evicting `file` before each when
/// `cold`; every body byte read is added to `bytes`.
fn download_loop(
    addr: std::net::SocketAddr,
    host: &str,
    path: &str,
    file: &Path,
    cold: bool,
    stop: &AtomicBool,
    bytes: &AtomicU64,
) -> Result<(), String> {
    let mut buf = vec![0u8; 256 * 1024];
    while !stop.load(Ordering::Relaxed) {
        if cold {
            evict(file)?;
        }
        let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .map_err(|e| e.to_string())?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .map_err(|e| format!("send: {e}"))?;
        let mut head_done = false;
        let mut head = Vec::new();
        loop {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let n = match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    continue
                }
                Err(e) => return Err(format!("read: {e}")),
            };
            if head_done {
                bytes.fetch_add(n as u64, Ordering::Relaxed);
                continue;
            }
            head.extend_from_slice(&buf[..n]);
            if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                if !head.starts_with(b"HTTP/1.1 200") && !head.starts_with(b"HTTP/1.0 200") {
                    let line = String::from_utf8_lossy(&head[..head.len().min(40)]).into_owned();
                    return Err(format!("{path}: {line}"));
                }
                bytes.fetch_add((head.len() - i - 4) as u64, Ordering::Relaxed);
                head_done = true;
            }
        }
    }
    Ok(())
}

/// Drop `file`'s pages from the page cache.
fn evict(file: &Path) -> Result<(), String> {
    let f = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    // SAFETY: advice on an open descriptor; no memory is passed.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        return Err(format!("{}: posix_fadvise: error {r}", file.display()));
    }
    Ok(())
}

/// Write `FILE_SIZE` bytes that do not compress or dedupe to nothing (a sparse or
/// zero file would be "read" without the disk), unless the file is already there.
fn write_big(path: &Path) -> Result<(), String> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == FILE_SIZE) {
        return Ok(());
    }
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let mut f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ path.as_os_str().len() as u64;
    let mut block = vec![0u8; 1 << 20];
    for _ in 0..FILE_SIZE >> 20 {
        for b in block.chunks_exact_mut(8) {
            // xorshift64: cheap bytes that differ everywhere.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&block)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    f.sync_all().map_err(|e| format!("{}: {e}", path.display()))
}
