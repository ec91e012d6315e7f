//! What a load run counts: [`Counts`] (per thread, merged), the latency histograms
//! and the merged [`RunResult`]. Types only, at the bottom of the crate with
//! `options`; the engine fills them, `report` prints them, `fanout` merges them.

use hdrhistogram::Histogram;
use std::time::Duration;

/// Counters of one run (or one thread's share of it).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    /// Transactions started (a followed redirect is part of its transaction).
    pub attempted: u64,
    /// Transactions that ended in 2xx or 3xx.
    pub succeeded: u64,
    pub status_2xx: u64,
    pub status_3xx: u64,
    pub status_4xx: u64,
    pub status_5xx: u64,
    pub err_connect: u64,
    pub err_timeout: u64,
    pub err_reset: u64,
    pub err_parse: u64,
    /// Response bytes read (heads and bodies).
    pub bytes: u64,
    /// Redirects followed inside transactions.
    pub redirects_followed: u64,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.attempted += o.attempted;
        self.succeeded += o.succeeded;
        self.status_2xx += o.status_2xx;
        self.status_3xx += o.status_3xx;
        self.status_4xx += o.status_4xx;
        self.status_5xx += o.status_5xx;
        self.err_connect += o.err_connect;
        self.err_timeout += o.err_timeout;
        self.err_reset += o.err_reset;
        self.err_parse += o.err_parse;
        self.bytes += o.bytes;
        self.redirects_followed += o.redirects_followed;
    }
}

/// The merged result of a run.
pub struct RunResult {
    pub counts: Counts,
    /// Transaction latency in microseconds.
    pub latency: Histogram<u64>,
    /// Time to the first response head of each transaction, microseconds: how long
    /// the server took to answer, apart from how long the body took to arrive.
    pub ttfb: Histogram<u64>,
    pub elapsed: Duration,
}

pub fn new_histogram() -> Histogram<u64> {
    // 1 µs .. 1 hour, 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static bounds")
}
