//! `sluice bench --processes N`: one run split over N child processes of this same
//! binary (each has its own descriptor limit, so together they hold more
//! connections than one process may), their counts and histograms merged.
//!
//! The protocol: the parent starts each child with its own arguments and
//! [`CHILD_ENV`] = `k/n`; a child takes its share of the connections and rate
//! (`options::share`, the same split the engine makes over threads) and prints one
//! [`ChildReport`] as JSON (the `--json` summary with both histograms, HDR V2 in hex).

use crate::options::{share, Options};
use crate::outcome::{new_histogram, Counts, RunResult};
use crate::report::{histogram_from_hex, Latency, Summary};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Set in a child's environment: `k/n`, its index and the number of children.
pub const CHILD_ENV: &str = "SLUICE_BENCH_CHILD";

/// This process's place among its siblings, if it is a child: `(k, n)`.
pub fn child_index() -> Option<(usize, usize)> {
    let v = std::env::var(CHILD_ENV).ok()?;
    let (k, n) = v.split_once('/')?;
    let (k, n) = (k.parse().ok()?, n.parse().ok()?);
    (n > 0 && k < n).then_some((k, n))
}

/// A child's options: its share of the connections (at least one) and of the rate.
pub fn child_options(o: &Options, k: usize, n: usize) -> Options {
    let mut c = o.clone();
    c.connections = share(o.connections, k, n).max(1);
    c.rate = o.rate.map(|r| r / n as f64);
    c.progress = false;
    c
}

/// What a child prints (the fields of the `--json` summary the parent reads).
#[derive(serde::Deserialize)]
pub struct ChildReport {
    pub counts: Counts,
    pub duration_s: f64,
    pub ttfb_us: Latency,
    pub histogram_v2_hex: Option<String>,
    pub ttfb_histogram_v2_hex: Option<String>,
}

impl ChildReport {
    pub fn parse(stdout: &[u8]) -> Result<ChildReport, String> {
        serde_json::from_slice(stdout).map_err(|e| format!("a bench process's JSON: {e}"))
    }
}

/// A child's summary, with the histograms a parent needs to merge it.
pub fn child_summary(url: &str, o: &Options, r: &RunResult) -> Summary {
    let mut s = Summary::new(url, o.threads.min(o.connections), o.connections, r);
    s.histogram_v2_hex = Some(crate::report::histogram_to_hex(&r.latency));
    s.ttfb_histogram_v2_hex = Some(crate::report::histogram_to_hex(&r.ttfb));
    s
}

/// Run this process's own command line in `n` children and merge what they report.
pub fn run(n: usize) -> Result<RunResult, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let children: Vec<std::process::Child> = (0..n)
        .map(|k| {
            Command::new(&exe)
                .args(&args)
                .env(CHILD_ENV, format!("{k}/{n}"))
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|e| format!("a bench process: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let mut merged = RunResult {
        counts: Counts::default(),
        latency: new_histogram(),
        ttfb: new_histogram(),
        elapsed: Duration::ZERO,
    };
    for c in children {
        let out = c
            .wait_with_output()
            .map_err(|e| format!("a bench process: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "a bench process failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let part = ChildReport::parse(&out.stdout)?;
        merged.counts.add(&part.counts);
        for (hex, into) in [
            (&part.histogram_v2_hex, &mut merged.latency),
            (&part.ttfb_histogram_v2_hex, &mut merged.ttfb),
        ] {
            let h = hex
                .as_deref()
                .and_then(histogram_from_hex)
                .ok_or("a bench process sent no histogram")?;
            into.add(&h).map_err(|e| format!("{e:?}"))?;
        }
        merged.elapsed = merged
            .elapsed
            .max(Duration::from_secs_f64(part.duration_s.max(0.0)));
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_and_differ_by_at_most_one() {
        for total in [0, 1, 7, 100, 19_999] {
            for n in 1..6 {
                let parts: Vec<usize> = (0..n).map(|k| share(total, k, n)).collect();
                assert_eq!(parts.iter().sum::<usize>(), total);
                assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1);
            }
        }
    }

    #[test]
    fn a_child_report_is_read_from_the_summary_json() {
        let r = RunResult {
            counts: Counts {
                attempted: 3,
                ..Counts::default()
            },
            latency: new_histogram(),
            ttfb: new_histogram(),
            elapsed: Duration::from_millis(1500),
        };
        let s = child_summary("http://x/", &Options::default(), &r);
        let back = ChildReport::parse(serde_json::to_string(&s).unwrap().as_bytes()).unwrap();
        assert_eq!(back.counts.attempted, 3);
        assert!((back.duration_s - 1.5).abs() < 1e-9);
        assert!(back
            .histogram_v2_hex
            .as_deref()
            .and_then(histogram_from_hex)
            .is_some());
        assert!(ChildReport::parse(b"{}").is_err());
    }
}
