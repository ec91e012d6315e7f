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

use crate::alarm::Alarm;
use crate::workload::Workload;
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
            source_addrs: Vec::new(),
            max_requests: None,
            progress: false,
        }
    }
}

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

/// Run a load test to completion (duration or `max_requests`).
pub fn run(opts: &Options, workload: &Workload) -> io::Result<RunResult> {
    let threads = opts.threads.max(1).min(opts.connections.max(1));
    let progress = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..threads {
        let mut o = opts.clone();
        o.connections = opts.connections / threads + usize::from(t < opts.connections % threads);
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

pub fn new_histogram() -> Histogram<u64> {
    // 1 µs .. 1 hour, 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static bounds")
}

/// A transaction in flight on a connection.
#[derive(Clone, Copy)]
struct Pending {
    /// When the transaction counts from (intended send time in open loop).
    start: Instant,
    /// Workload index of the request (for following redirects: 0 hops so far).
    hops: u8,
    head: bool,
}

enum Body {
    /// Reading a response head (partial bytes kept in `Conn::head`).
    Head,
    Length(u64),
    Chunked(ChunkState),
    UntilClose,
}

#[derive(Clone, Copy)]
enum ChunkState {
    /// Reading a size line (digits so far).
    Size(u64, bool),
    /// In a chunk's data (bytes left), then its CRLF.
    Data(u64),
    DataEnd,
    /// After the last chunk: skipping trailers until an empty line.
    Trailer(u8),
}

struct Conn {
    sock: Option<TcpStream>,
    connecting: bool,
    out: Vec<u8>,
    opos: usize,
    inflight: VecDeque<Pending>,
    head: Vec<u8>,
    body: Body,
    status: u16,
    close_after: bool,
    location: Option<String>,
    /// Slow reader: bytes we may still read this second, and when it refills.
    budget: u64,
    refill_at: Instant,
    /// Data may be waiting that we chose not to read yet (budget or cap).
    read_pending: bool,
    src: usize,
    /// Next time this connection may try to reconnect (after a failure).
    retry_at: Option<Instant>,
}

struct Thread {
    o: Options,
    w: Workload,
    poll: Poll,
    conns: Vec<Conn>,
    counts: Counts,
    lat: Histogram<u64>,
    ttfb: Histogram<u64>,
    scratch: Vec<u8>,
    rng: rand::rngs::SmallRng,
    /// Open loop: due requests waiting for a free connection.
    backlog: VecDeque<Instant>,
    next_due: Option<Instant>,
    interval: Duration,
    idle: VecDeque<usize>,
    done_total: Arc<AtomicU64>,
    completed: u64,
    deadline: Instant,
}

impl Thread {
    fn new(o: Options, w: Workload, seed: u64, done_total: Arc<AtomicU64>) -> io::Result<Thread> {
        use rand::SeedableRng;
        let now = Instant::now();
        let interval = o
            .rate
            .map(|r| Duration::from_secs_f64(1.0 / r.max(1e-6)))
            .unwrap_or_default();
        let budget = o.read_rate.unwrap_or(u64::MAX);
        let conns = (0..o.connections)
            .map(|i| Conn {
                sock: None,
                connecting: false,
                out: Vec::new(),
                opos: 0,
                inflight: VecDeque::new(),
                head: Vec::new(),
                body: Body::Head,
                status: 0,
                close_after: false,
                location: None,
                budget,
                refill_at: now + Duration::from_secs(1),
                read_pending: false,
                src: i,
                retry_at: None,
            })
            .collect();
        Ok(Thread {
            deadline: now + o.duration,
            next_due: o.rate.map(|_| now),
            interval,
            o,
            w,
            poll: Poll::new()?,
            conns,
            counts: Counts::default(),
            lat: new_histogram(),
            ttfb: new_histogram(),
            scratch: vec![0u8; 256 * 1024],
            rng: rand::rngs::SmallRng::seed_from_u64(
                seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed,
            ),
            backlog: VecDeque::new(),
            idle: VecDeque::new(),
            done_total,
            completed: 0,
        })
    }

    fn finished(&self, now: Instant) -> bool {
        now >= self.deadline || self.o.max_requests.is_some_and(|m| self.completed >= m)
    }

    fn run(mut self) -> io::Result<(Counts, Histogram<u64>, Histogram<u64>)> {
        let mut events = Events::with_capacity(1024);
        // Open loop: wake at each due time exactly, not at mio's next millisecond.
        let mut alarm = match self.next_due {
            Some(_) => Some(Alarm::new(self.poll.registry(), ALARM)?),
            None => None,
        };
        for i in 0..self.conns.len() {
            self.connect(i, Instant::now());
        }
        let mut last_sweep = Instant::now();
        loop {
            let now = Instant::now();
            if self.finished(now) {
                break;
            }
            let mut wait = self.deadline - now;
            if let Some(d) = self.next_due {
                wait = wait.min(d.saturating_duration_since(now));
            }
            if self.o.read_rate.is_some() || self.conns.iter().any(|c| c.retry_at.is_some()) {
                wait = wait.min(Duration::from_millis(10));
            }
            wait = wait.min(Duration::from_millis(100));
            if let (Some(a), Some(d)) = (alarm.as_mut(), self.next_due) {
                if d > now && d - now <= wait {
                    a.arm(d);
                }
            }
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            let now = Instant::now();
            for ev in events.iter() {
                let i = ev.token().0;
                if ev.token() == ALARM {
                    if let Some(a) = alarm.as_mut() {
                        a.clear();
                    }
                    continue;
                }
                if ev.is_writable() && self.conns[i].connecting {
                    self.on_connected(i, now);
                }
                if ev.is_writable() {
                    self.flush(i, now);
                }
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    self.conns[i].read_pending = true;
                    self.read(i, now);
                }
            }
            self.schedule(now);
            if now.duration_since(last_sweep) >= Duration::from_millis(10) {
                last_sweep = now;
                self.sweep(now);
            }
        }
        // Transactions still in flight at the end are neither successes nor failures.
        for c in &self.conns {
            let open = c.inflight.iter().filter(|p| p.hops == 0).count() as u64;
            self.counts.attempted -= open.min(self.counts.attempted);
        }
        Ok((self.counts, self.lat, self.ttfb))
    }

    /// Periodic work: reconnect after failures, timeouts, slow-reader refills.
    fn sweep(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            let c = &mut self.conns[i];
            if c.retry_at.is_some_and(|t| now >= t) {
                c.retry_at = None;
                self.connect(i, now);
                continue;
            }
            if let Some(p) = c.inflight.front() {
                if now.duration_since(p.start) > self.o.timeout {
                    let n = c.inflight.len() as u64;
                    self.counts.err_timeout += n;
                    self.ended(n);
                    self.reset_conn(i, now, false);
                    continue;
                }
            }
            let c = &mut self.conns[i];
            if self.o.read_rate.is_some() && now >= c.refill_at {
                c.budget = self.o.read_rate.unwrap_or(u64::MAX);
                c.refill_at = now + Duration::from_secs(1);
            }
            if c.read_pending && c.budget > 0 {
                self.read(i, now);
            }
        }
    }

    /// Open loop: issue requests that are due.
    fn schedule(&mut self, now: Instant) {
        let Some(mut due) = self.next_due else { return };
        while due <= now {
            self.backlog.push_back(due);
            due += self.interval;
        }
        self.next_due = Some(due);
        while !self.backlog.is_empty() {
            let Some(i) = self.idle.pop_front() else {
                break;
            };
            if self.conns[i].sock.is_none()
                || !self.conns[i].inflight.is_empty()
                || self.conns[i].connecting
            {
                continue;
            }
            let start = self.backlog.pop_front().expect("checked non-empty");
            self.send(i, start, 0, None, now);
        }
    }

    fn connect(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        c.sock = None;
        c.head.clear();
        c.body = Body::Head;
        c.inflight.clear();
        c.out.clear();
        c.opos = 0;
        let sock = match open_socket(self.o.addr, &self.o.source_addrs, c.src) {
            Ok(s) => s,
            Err(_) => {
                self.counts.attempted += 1;
                self.counts.err_connect += 1;
                self.ended(1);
                self.conns[i].retry_at = Some(now + Duration::from_millis(10));
                return;
            }
        };
        let mut sock = TcpStream::from_std(sock);
        if self
            .poll
            .registry()
            .register(&mut sock, Token(i), Interest::READABLE | Interest::WRITABLE)
            .is_err()
        {
            self.counts.attempted += 1;
            self.counts.err_connect += 1;
            self.ended(1);
            self.conns[i].retry_at = Some(now + Duration::from_millis(10));
            return;
        }
        let c = &mut self.conns[i];
        c.sock = Some(sock);
        c.connecting = true;
        // The transaction clock starts now for a closed loop: connecting is part of it.
        c.refill_at = now + Duration::from_secs(1);
    }

    fn on_connected(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        let Some(s) = &c.sock else { return };
        match s.take_error() {
            Ok(None) => {}
            _ => {
                self.counts.attempted += 1;
                self.counts.err_connect += 1;
                self.ended(1);
                self.conns[i].sock = None;
                self.conns[i].retry_at = Some(now + Duration::from_millis(10));
                return;
            }
        }
        if s.peer_addr().is_err() {
            return; // still connecting
        }
        c.connecting = false;
        let _ = s.set_nodelay(true);
        if self.o.rate.is_some() {
            self.idle.push_back(i);
            self.schedule(now);
        } else {
            for _ in 0..self.o.pipeline.max(1) {
                self.send(i, now, 0, None, now);
            }
        }
    }

    /// Queue one request on connection `i`; `path` overrides the workload (redirects).
    fn send(&mut self, i: usize, start: Instant, hops: u8, path: Option<&str>, now: Instant) {
        if self.finished(now) {
            return;
        }
        let req: &[u8] = match path {
            Some(p) => {
                let r = self.w.render_path(p, &self.o);
                self.conns[i].out.extend_from_slice(&r);
                &[]
            }
            None => {
                let k = self.w.pick(&mut self.rng);
                self.w.request(k)
            }
        };
        let c = &mut self.conns[i];
        c.out.extend_from_slice(req);
        if hops == 0 {
            self.counts.attempted += 1;
        }
        c.inflight.push_back(Pending {
            start,
            hops,
            head: self.o.method == "HEAD",
        });
        self.flush(i, now);
    }

    fn flush(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        let Some(s) = c.sock.as_mut() else { return };
        if c.connecting {
            return;
        }
        while c.opos < c.out.len() {
            match s.write(&c.out[c.opos..]) {
                Ok(n) => c.opos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    let n = c.inflight.len() as u64;
                    self.counts.err_reset += n;
                    self.ended(n);
                    self.reset_conn(i, now, false);
                    return;
                }
            }
        }
        c.out.clear();
        c.opos = 0;
    }

    /// Drop a connection's state and reconnect (counts are the caller's business).
    fn reset_conn(&mut self, i: usize, now: Instant, immediately: bool) {
        let c = &mut self.conns[i];
        c.sock = None;
        c.inflight.clear();
        if immediately {
            self.connect(i, now);
        } else {
            c.retry_at = Some(now);
        }
    }

    fn read(&mut self, i: usize, now: Instant) {
        loop {
            let c = &mut self.conns[i];
            let Some(s) = c.sock.as_mut() else { return };
            if c.connecting {
                return;
            }
            let want = (self.scratch.len() as u64).min(c.budget) as usize;
            if want == 0 {
                return; // slow reader: wait for the next refill
            }
            match s.read(&mut self.scratch[..want]) {
                Ok(0) => {
                    c.read_pending = false;
                    self.on_eof(i, now);
                    return;
                }
                Ok(n) => {
                    if self.o.read_rate.is_some() {
                        c.budget -= n as u64;
                    }
                    self.counts.bytes += n as u64;
                    let data = std::mem::take(&mut self.scratch);
                    let closed = self.feed(i, &data[..n], now);
                    self.scratch = data;
                    if closed {
                        return;
                    }
                    if n < want {
                        self.conns[i].read_pending = false;
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.read_pending = false;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    let n = self.conns[i].inflight.len() as u64;
                    self.counts.err_reset += n;
                    self.ended(n);
                    self.reset_conn(i, now, true);
                    return;
                }
            }
        }
    }

    fn on_eof(&mut self, i: usize, now: Instant) {
        let c = &mut self.conns[i];
        if matches!(c.body, Body::UntilClose) && !c.inflight.is_empty() {
            self.complete(i, now);
        }
        let n = self.conns[i].inflight.len() as u64;
        self.counts.err_reset += n;
        self.ended(n);
        self.reset_conn(i, now, true);
    }

    /// Parse response bytes; returns true if the connection was closed or replaced.
    fn feed(&mut self, i: usize, mut data: &[u8], now: Instant) -> bool {
        while !data.is_empty() {
            let c = &mut self.conns[i];
            match &mut c.body {
                Body::Head => {
                    let mut hs = [httparse::EMPTY_HEADER; 48];
                    let (parsed, from_head) = if c.head.is_empty() {
                        let mut r = httparse::Response::new(&mut hs);
                        (r.parse(data).map(|st| (st, extract(&r))), false)
                    } else {
                        c.head.extend_from_slice(data);
                        let mut r = httparse::Response::new(&mut hs);
                        (r.parse(&c.head).map(|st| (st, extract(&r))), true)
                    };
                    match parsed {
                        Ok((httparse::Status::Partial, _)) => {
                            if !from_head {
                                c.head.extend_from_slice(data);
                            }
                            if c.head.len() > 64 * 1024 {
                                let n = c.inflight.len() as u64;
                                self.counts.err_parse += n;
                                self.ended(n);
                                self.reset_conn(i, now, true);
                                return true;
                            }
                            return false;
                        }
                        Ok((httparse::Status::Complete(n), info)) => {
                            let head_req = c.inflight.front().is_some_and(|p| p.head);
                            if let Some(p) = c.inflight.front().filter(|p| p.hops == 0) {
                                let us = now.duration_since(p.start).as_micros().max(1) as u64;
                                let _ = self.ttfb.record(us.min(3_600_000_000));
                            }
                            c.status = info.status;
                            c.close_after = info.close || !self.o.keepalive;
                            c.location = info.location;
                            c.body = if head_req
                                || info.status == 204
                                || info.status == 304
                                || info.status < 200
                            {
                                Body::Length(0)
                            } else if info.chunked {
                                Body::Chunked(ChunkState::Size(0, false))
                            } else if let Some(l) = info.length {
                                Body::Length(l)
                            } else {
                                Body::UntilClose
                            };
                            if from_head {
                                let rest_from = n.saturating_sub(c.head.len() - data.len());
                                c.head.clear();
                                data = &data[rest_from.min(data.len())..];
                            } else {
                                data = &data[n..];
                            }
                        }
                        Err(_) => {
                            let n = c.inflight.len() as u64;
                            self.counts.err_parse += n;
                            self.ended(n);
                            self.reset_conn(i, now, true);
                            return true;
                        }
                    }
                }
                Body::Length(left) => {
                    let k = (*left).min(data.len() as u64);
                    *left -= k;
                    data = &data[k as usize..];
                }
                Body::Chunked(st) => {
                    let (used, next, done) = chunk_step(*st, data);
                    data = &data[used..];
                    *st = next;
                    if done {
                        c.body = Body::Length(0);
                    }
                    if used == 0 && !done {
                        return false;
                    }
                }
                Body::UntilClose => return false,
            }
            if matches!(self.conns[i].body, Body::Length(0)) && self.complete(i, now) {
                return true;
            }
        }
        // A zero-length body completes without more data.
        if matches!(self.conns[i].body, Body::Length(0)) && !self.conns[i].inflight.is_empty() {
            return self.complete(i, now);
        }
        false
    }

    /// `n` transactions ended in failure: they count towards `max_requests` like
    /// completed ones (a run against a server that only fails still ends).
    fn ended(&mut self, n: u64) {
        self.completed += n;
        self.done_total.fetch_add(n, Ordering::Relaxed);
    }

    /// A response is complete; returns true if the connection was replaced.
    fn complete(&mut self, i: usize, now: Instant) -> bool {
        let c = &mut self.conns[i];
        c.body = Body::Head;
        let Some(p) = c.inflight.pop_front() else {
            return false;
        };
        if self.o.max_requests.is_some_and(|m| self.completed >= m) {
            // Past the requested count (other connections' responses in the same
            // batch): neither counted nor attempted.
            if p.hops == 0 {
                self.counts.attempted -= 1;
            }
            return false;
        }
        let status = c.status;
        let close = c.close_after;
        let location = c.location.take();
        // Follow a redirect on the same keep-alive connection, as one transaction.
        // (If the server is closing the connection, the 3xx is the answer.)
        if self.o.follow_redirects && !close && (300..400).contains(&status) && p.hops < 10 {
            if let Some(path) = location
                .as_deref()
                .and_then(|l| same_server_path(l, &self.o.host))
            {
                self.counts.redirects_followed += 1;
                let path = path.to_string();
                self.send(i, p.start, p.hops + 1, Some(&path), now);
                return false;
            }
        }
        match status {
            200..=299 => self.counts.status_2xx += 1,
            300..=399 => self.counts.status_3xx += 1,
            400..=499 => self.counts.status_4xx += 1,
            _ => self.counts.status_5xx += 1,
        }
        if (200..400).contains(&status) {
            self.counts.succeeded += 1;
        }
        let us = now.duration_since(p.start).as_micros().max(1) as u64;
        let _ = self.lat.record(us.min(3_600_000_000));
        self.completed += 1;
        self.done_total.fetch_add(1, Ordering::Relaxed);
        if close {
            self.reset_conn(i, now, true);
            return true;
        }
        if self.o.rate.is_some() {
            if self.conns[i].inflight.is_empty() {
                if let Some(start) = self.backlog.pop_front() {
                    self.send(i, start, 0, None, now);
                } else {
                    self.idle.push_back(i);
                }
            }
        } else {
            self.send(i, now, 0, None, now);
        }
        false
    }
}

struct HeadInfo {
    status: u16,
    length: Option<u64>,
    chunked: bool,
    close: bool,
    location: Option<String>,
}

fn extract(r: &httparse::Response) -> HeadInfo {
    let mut h = HeadInfo {
        status: r.code.unwrap_or(0),
        length: None,
        chunked: false,
        close: false,
        location: None,
    };
    if r.version == Some(0) {
        h.close = true;
    }
    for hd in r.headers.iter() {
        let n = hd.name;
        if n.eq_ignore_ascii_case("content-length") {
            h.length = std::str::from_utf8(hd.value)
                .ok()
                .and_then(|v| v.trim().parse().ok());
        } else if n.eq_ignore_ascii_case("transfer-encoding") {
            h.chunked = hd
                .value
                .windows(7)
                .any(|w| w.eq_ignore_ascii_case(b"chunked"));
        } else if n.eq_ignore_ascii_case("connection") {
            let v = String::from_utf8_lossy(hd.value).to_ascii_lowercase();
            if v.contains("close") {
                h.close = true;
            } else if v.contains("keep-alive") {
                h.close = false;
            }
        } else if n.eq_ignore_ascii_case("location") {
            h.location = Some(String::from_utf8_lossy(hd.value).into_owned());
        }
    }
    h
}

/// Advance a chunked-body parser over `data`: (bytes used, new state, body done).
fn chunk_step(mut st: ChunkState, data: &[u8]) -> (usize, ChunkState, bool) {
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        match st {
            ChunkState::Size(n, in_ext) => {
                i += 1;
                match b {
                    b'\n' => {
                        st = if n == 0 {
                            ChunkState::Trailer(0)
                        } else {
                            ChunkState::Data(n)
                        };
                    }
                    b'\r' => {}
                    b';' => st = ChunkState::Size(n, true),
                    _ if in_ext => {}
                    _ => {
                        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                        st = ChunkState::Size(n.saturating_mul(16).saturating_add(d), false);
                    }
                }
            }
            ChunkState::Data(left) => {
                let k = (left as usize).min(data.len() - i);
                i += k;
                st = if left as usize == k {
                    ChunkState::DataEnd
                } else {
                    ChunkState::Data(left - k as u64)
                };
            }
            ChunkState::DataEnd => {
                i += 1;
                if b == b'\n' {
                    st = ChunkState::Size(0, false);
                }
            }
            ChunkState::Trailer(col) => {
                i += 1;
                match b {
                    b'\n' if col == 0 => return (i, ChunkState::Size(0, false), true),
                    b'\n' => st = ChunkState::Trailer(0),
                    b'\r' => {}
                    _ => st = ChunkState::Trailer(col.saturating_add(1)),
                }
            }
        }
    }
    (i, st, false)
}

/// The path of a redirect target on the same server (relative, or absolute to our host).
fn same_server_path<'a>(loc: &'a str, host: &str) -> Option<&'a str> {
    if loc.starts_with('/') {
        return Some(loc);
    }
    let rest = loc.strip_prefix("http://")?;
    let slash = rest.find('/').unwrap_or(rest.len());
    if rest[..slash].eq_ignore_ascii_case(host) {
        Some(if slash < rest.len() {
            &rest[slash..]
        } else {
            "/"
        })
    } else {
        None
    }
}

/// The open-loop alarm's token (connections use their index).
const ALARM: Token = Token(usize::MAX);

pub(crate) fn open_socket(
    addr: SocketAddr,
    sources: &[IpAddr],
    n: usize,
) -> io::Result<std::net::TcpStream> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    if !sources.is_empty() {
        let src = sources[n % sources.len()];
        // Let connect() choose the port from the whole 4-tuple: a bind() to port 0
        // reserves a port for every destination and draws from only half the
        // ephemeral range, so ~14,000 connections from one address already failed.
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on our own socket with an int option.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        s.bind(&SocketAddr::new(src, 0).into())?;
    }
    match s.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(s.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_parsing_across_splits() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\n";
        for split in 0..body.len() {
            let (a, b) = body.split_at(split);
            let (u1, st, d1) = chunk_step(ChunkState::Size(0, false), a);
            assert_eq!(u1, a.len());
            if d1 {
                assert_eq!(split, body.len());
                continue;
            }
            let (u2, _, d2) = chunk_step(st, b);
            assert!(d2, "split {split}");
            assert_eq!(u2, b.len());
        }
    }

    #[test]
    fn redirect_targets() {
        assert_eq!(same_server_path("/a", "h"), Some("/a"));
        assert_eq!(same_server_path("http://H/x?y", "h"), Some("/x?y"));
        assert_eq!(same_server_path("http://h", "h"), Some("/"));
        assert_eq!(same_server_path("http://other/x", "h"), None);
        assert_eq!(same_server_path("https://h/x", "h"), None);
    }
}
