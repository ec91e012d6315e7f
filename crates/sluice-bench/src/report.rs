//! Results as a person reads them (like wrk's summary) and as a program reads them
//! (`--json`, schema below; CSV for sweeps).
//!
//! JSON schema (one object):
//! ```text
//! { "url": str, "threads": int, "connections": int, "duration_s": float,
//!   "requests": int,            // completed transactions
//!   "bytes": int, "requests_per_s": float, "bytes_per_s": float,
//!   "latency_us": { "mean": float, "p50": int, "p90": int, "p99": int, "p999": int, "max": int },
//!   "ttfb_us": { same fields },   // time to the first response head
//!   "availability": float,      // succeeded / attempted, 0..1
//!   "counts": { "attempted", "succeeded", "status_2xx", "status_3xx", "status_4xx",
//!               "status_5xx", "err_connect", "err_timeout", "err_reset", "err_parse",
//!               "bytes", "redirects_followed" } }
//! ```

use crate::outcome::{Counts, RunResult};
use serde::Serialize;

#[derive(Serialize, serde::Deserialize, Debug, Clone)]
pub struct Latency {
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Latency {
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Latency {
        Latency {
            mean: if h.is_empty() { 0.0 } else { h.mean() },
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

#[derive(Serialize, Debug, Clone)]
pub struct Summary {
    pub url: String,
    pub threads: usize,
    pub connections: usize,
    pub duration_s: f64,
    pub requests: u64,
    pub bytes: u64,
    pub requests_per_s: f64,
    pub bytes_per_s: f64,
    pub latency_us: Latency,
    /// Time to the first response head (see `RunResult::ttfb`).
    pub ttfb_us: Latency,
    pub availability: f64,
    pub counts: Counts,
    /// Only for `--processes` children: the latency histogram, HDR V2 format, hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histogram_v2_hex: Option<String>,
    /// Only for `--processes` children: the time-to-first-byte histogram, as above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttfb_histogram_v2_hex: Option<String>,
}

/// Serialize a histogram for a parent process to merge (HDR V2, hex-encoded).
pub fn histogram_to_hex(h: &hdrhistogram::Histogram<u64>) -> String {
    let mut buf = Vec::new();
    let _ = hdrhistogram::serialization::Serializer::serialize(
        &mut hdrhistogram::serialization::V2Serializer::new(),
        h,
        &mut buf,
    );
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn histogram_from_hex(s: &str) -> Option<hdrhistogram::Histogram<u64>> {
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut std::io::Cursor::new(bytes?))
        .ok()
}

impl Summary {
    pub fn new(url: &str, threads: usize, connections: usize, r: &RunResult) -> Summary {
        let secs = r.elapsed.as_secs_f64().max(1e-9);
        let h = &r.latency;
        let requests = h.len();
        Summary {
            url: url.to_string(),
            threads,
            connections,
            duration_s: secs,
            requests,
            bytes: r.counts.bytes,
            requests_per_s: requests as f64 / secs,
            bytes_per_s: r.counts.bytes as f64 / secs,
            latency_us: Latency::of(h),
            ttfb_us: Latency::of(&r.ttfb),
            availability: if r.counts.attempted > 0 {
                r.counts.succeeded as f64 / r.counts.attempted as f64
            } else {
                0.0
            },
            counts: r.counts.clone(),
            histogram_v2_hex: None,
            ttfb_histogram_v2_hex: None,
        }
    }

    pub fn human(&self) -> String {
        let l = &self.latency_us;
        let c = &self.counts;
        format!(
            "Running {:.1}s test @ {}\n  {} threads and {} connections\n  Latency     mean {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}\n  {} requests in {:.2}s, {} read\n  Status      2xx {}  3xx {}  4xx {}  5xx {}\n  Errors      connect {}  timeout {}  reset {}  parse {}\nRequests/sec: {:.2}\nTransfer/sec: {}/s\nAvailability: {:.2}% ({} of {})\n",
            self.duration_s,
            self.url,
            self.threads,
            self.connections,
            us(l.mean as u64),
            us(l.p50),
            us(l.p90),
            us(l.p99),
            us(l.p999),
            us(l.max),
            self.requests,
            self.duration_s,
            bytes(self.bytes as f64),
            c.status_2xx,
            c.status_3xx,
            c.status_4xx,
            c.status_5xx,
            c.err_connect,
            c.err_timeout,
            c.err_reset,
            c.err_parse,
            self.requests_per_s,
            bytes(self.bytes_per_s),
            self.availability * 100.0,
            c.succeeded,
            c.attempted
        )
    }
}

pub fn us(v: u64) -> String {
    if v >= 1_000_000 {
        format!("{:.2}s", v as f64 / 1e6)
    } else if v >= 1000 {
        format!("{:.2}ms", v as f64 / 1e3)
    } else {
        format!("{v}us")
    }
}

pub fn bytes(v: f64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = v;
    let mut u = 0;
    while x >= 1024.0 && u < U.len() - 1 {
        x /= 1024.0;
        u += 1;
    }
    format!("{x:.2}{}", U[u])
}

/// A table for sweeps: one row per (target, x), written as CSV and printed aligned.
#[derive(Default)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(cols: &[&str]) -> Table {
        Table {
            columns: cols.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }
    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }
    pub fn csv(&self) -> String {
        let mut s = self.columns.join(",") + "\n";
        for r in &self.rows {
            s += &(r.join(",") + "\n");
        }
        s
    }
    pub fn text(&self) -> String {
        let mut w: Vec<usize> = self.columns.iter().map(String::len).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.len());
            }
        }
        let line = |cells: &[String]| {
            cells
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{:>width$}", c, width = w[i]))
                .collect::<Vec<_>>()
                .join("  ")
        };
        let mut s = line(&self.columns) + "\n";
        for r in &self.rows {
            s += &(line(r) + "\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn histogram_round_trip() {
        let mut h = crate::outcome::new_histogram();
        for v in [10u64, 200, 3000, 3000, 40_000] {
            h.record(v).unwrap();
        }
        let back = super::histogram_from_hex(&super::histogram_to_hex(&h)).unwrap();
        assert_eq!(back.len(), 5);
        assert_eq!(back.value_at_quantile(0.5), h.value_at_quantile(0.5));
        assert_eq!(back.max(), h.max());
    }

    #[test]
    fn units() {
        assert_eq!(super::us(999), "999us");
        assert_eq!(super::us(1500), "1.50ms");
        assert_eq!(super::bytes(2048.0), "2.00KiB");
    }
}
