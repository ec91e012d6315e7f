//! The load generator: one mio event loop per thread, each owning a share of the
//! connections (and of the rate, in open loop).
//!
//! Per response it does one `httparse` pass over the head and counts body bytes as
//! they are read into a per-thread scratch buffer (bodies are never copied or kept),
//! then records latency in an HDR histogram. Requests are rendered once, up front.
//!
//! Schedules:
//! - **closed loop** (`rate = None`): each connection sends its next request as soon
//!   as the previous response is complete (wrk, ab, siege);
//! - **open loop** (`rate = Some(r)`): requests are due at fixed intervals; a due
//!   request waits for a free connection, and its latency is measured from when it
//!   was due, not when it was sent, so a stalled server is not hidden (wrk2's
//!   correction for coordinated omission).
//!
//! Transactions: with `follow_redirects`, a 3xx with `Location` on the same server is
//! followed on the same connection and counted as one transaction (siege's definition).
//! Availability = successful transactions / attempted transactions, where a failed
//! connect, a reset, a timeout and a 4xx/5xx each count as attempted and failed.
//!
//! Files: `client` (one thread's event loop and its connections), `response` (what
//! a response head says and how a chunked body ends). Sockets are opened by
//! `crate::socket::open`.

mod client;
mod conn;
mod response;

use crate::options::Options;
use crate::outcome::{new_histogram, Counts, RunResult};
use crate::workload::Workload;
use client::Thread;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Run a load test to completion (duration or `max_requests`).
pub fn run(opts: &Options, workload: &Workload) -> io::Result<RunResult> {
    let threads = opts.threads.max(1).min(opts.connections.max(1));
    let progress = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..threads {
        let mut o = opts.clone();
        o.connections = crate::options::share(opts.connections, t, threads);
        o.rate = opts.rate.map(|r| r / threads as f64);
        o.max_requests = opts
            .max_requests
            .map(|m| m / threads as u64 + u64::from((t as u64) < m % threads as u64));
        let w = workload.clone();
        let p = progress.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("bench-{t}"))
                .spawn(move || Thread::new(o, w, t as u64, p).and_then(|th| th.run()))?,
        );
    }
    let ticker = opts.progress.then(|| {
        let p = progress.clone();
        let total = opts.duration;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let h = std::thread::spawn(move || {
            let mut last = 0;
            while !s2.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                let el = start.elapsed();
                if el.as_millis() / 1000 != last {
                    last = el.as_millis() / 1000;
                    let done = p.load(Ordering::Relaxed);
                    let frac = (el.as_secs_f64() / total.as_secs_f64()).min(1.0);
                    let bar: String = (0..30)
                        .map(|i| if (i as f64) < frac * 30.0 { '=' } else { ' ' })
                        .collect();
                    eprint!(
                        "\r  [{bar}] {:>4.0}s  {done} requests  {:.0} req/s ",
                        el.as_secs_f64(),
                        done as f64 / el.as_secs_f64()
                    );
                }
            }
            eprint!("\r{:78}\r", "");
        });
        (stop, h)
    });
    let mut counts = Counts::default();
    let mut latency = new_histogram();
    let mut ttfb = new_histogram();
    for h in handles {
        let (c, l, f) = h
            .join()
            .map_err(|_| io::Error::other("a load thread panicked"))??;
        counts.add(&c);
        latency
            .add(&l)
            .map_err(|e| io::Error::other(format!("{e:?}")))?;
        ttfb.add(&f)
            .map_err(|e| io::Error::other(format!("{e:?}")))?;
    }
    let elapsed = start.elapsed();
    if let Some((stop, h)) = ticker {
        stop.store(true, Ordering::Relaxed);
        let _ = h.join();
    }
    Ok(RunResult {
        counts,
        latency,
        ttfb,
        elapsed,
    })
}
