//! One load thread: a mio event loop over its share of the connections, the
//! schedule (closed loop, or open loop woken by the alarm), request sending, and
//! response reading (one `httparse` pass per head; bodies counted, never kept).

use super::conn::{Body, Conn, Pending};
use super::response::{chunk_step, extract, same_server_path, ChunkState};
use crate::alarm::Alarm;
use crate::options::Options;
use crate::outcome::{new_histogram, Counts};
use crate::workload::Workload;
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The open-loop alarm's token (connections use their index).
const ALARM: Token = Token(usize::MAX);

pub(super) struct Thread {
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
    pub(super) fn new(
        o: Options,
        w: Workload,
        seed: u64,
        done_total: Arc<AtomicU64>,
    ) -> io::Result<Thread> {
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

    pub(super) fn run(mut self) -> io::Result<(Counts, Histogram<u64>, Histogram<u64>)> {
        let mut events = Events::with_capacity(1024);
        // Open loop: wake at each due time exactly, not at mio's next millisecond.
        let mut alarm = match self.next_due {
            Some(_) => Some(Alarm::new(self.poll.registry(), ALARM)?),
            None => None,
        };
        for i in 0..self.conns.len() {
            self.connect(i, Instant::now());
        }
        self.out_of_step(Instant::now());
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

    /// `read_stagger`: slow readers started together get a random head start and a
    /// rate window at a random phase, so that they neither refill nor end together.
    fn out_of_step(&mut self, now: Instant) {
        use rand::Rng;
        let max = self.o.read_stagger;
        if self.o.read_rate.is_none() || max == 0 {
            return;
        }
        for c in &mut self.conns {
            c.budget = c.budget.saturating_add(self.rng.gen_range(0..=max));
            c.refill_at = now + Duration::from_micros(self.rng.gen_range(1..=1_000_000));
        }
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
        let sock = match crate::socket::open(self.o.addr, &self.o.source_addrs, c.src) {
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
