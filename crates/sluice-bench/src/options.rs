//! What one load run does: [`Options`], every field with the default a `wrk`-like
//! run needs. The bottom of the crate: the engine, the workload and the experiments
//! read it; it depends on nothing here.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// What one run does. Every field has the default a `wrk`-like run needs.
#[derive(Clone, Debug)]
pub struct Options {
    pub addr: SocketAddr,
    /// `Host` header value.
    pub host: String,
    pub connections: usize,
    pub threads: usize,
    pub duration: Duration,
    /// Open loop: total requests per second across all threads.
    pub rate: Option<f64>,
    pub keepalive: bool,
    /// Requests in flight per connection (1 = no pipelining).
    pub pipeline: usize,
    pub method: String,
    /// Extra header lines, `Name: value`.
    pub headers: Vec<String>,
    /// A request with no complete response after this long is a timeout error.
    pub timeout: Duration,
    pub follow_redirects: bool,
    /// Slow reader: at most this many bytes per second per connection.
    pub read_rate: Option<u64>,
    /// Slow readers out of step: each connection's one-second rate window starts at a
    /// random point of its first second, and it first reads a random head start of up
    /// to this many bytes at once, as if it had joined a download already under way.
    /// Without it, readers started together refill together and downloads of one
    /// size end together, in bursts no mirror's clients make. 0: off.
    pub read_stagger: u64,
    /// Spread connections over these local addresses (many 127.0.0.x for >28K).
    pub source_addrs: Vec<IpAddr>,
    /// Stop after this many ended transactions, successful or not (for tests and
    /// sweeps).
    pub max_requests: Option<u64>,
    /// Print a progress line to stderr once a second.
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            addr: "127.0.0.1:8080".parse().expect("literal"),
            host: "127.0.0.1".into(),
            connections: 10,
            threads: 1,
            duration: Duration::from_secs(10),
            rate: None,
            keepalive: true,
            pipeline: 1,
            method: "GET".into(),
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
            follow_redirects: false,
            read_rate: None,
            read_stagger: 0,
            source_addrs: Vec::new(),
            max_requests: None,
            progress: false,
        }
    }
}

/// Part `k` of `n` of `total` (the first `total % n` parts get one more).
pub fn share(total: usize, k: usize, n: usize) -> usize {
    total / n + usize::from(k < total % n)
}
