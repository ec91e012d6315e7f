//! A complete request head → a response on the connection ([`Worker::next_request`]:
//! limits, body framing, the request phases, the access log), in three parts: the
//! answer decided (`respond_to`, or `bad_request`), then put on the wire
//! (`start_response`). The same bytes as a kept answer's request get that answer
//! instead (`kept.rs`); the answers for errant clients that drip bytes on a timer are
//! in `errant.rs`.

use super::conn::*;
use super::*;
use crate::accesslog::Pending;
use crate::disk::Refused;
use crate::io::{keep_bytes, recycle, take_buffer};
use crate::phases::{self, PhaseCtx};
use crate::send::Outgoing;
use sluice_condition::slowread::{unsent_bound, RateWindow, UNSENT_MIN};
use sluice_condition::{pace, CloseReason};
use sluice_http::response::{write_status_line, Chunk, Response};
use sluice_http::{parse_head, BodyFraming, Method, ParseError, Parsed, RequestHead};
use sluice_static::answers::Probe;
use sluice_static::cold::DiskWait;
use sluice_status::Counters;

/// A request's answer, decided (`respond_to`, `bad_request`) and not yet on the
/// wire (`start_response`).
pub(super) struct Answered {
    pub(super) resp: Response,
    /// The request's bytes in the buffer: its head.
    pub(super) consumed: usize,
    pub(super) keep_alive: bool,
    /// HTTP/1.0 keep-alive must be announced; 1.1 is persistent by default.
    pub(super) announce_keep_alive: bool,
    /// A HEAD: the body's length is answered, none of its bytes.
    pub(super) head_only: bool,
    pub(super) log: Option<Pending>,
    /// An errant-client rule's answer (`worker/errant.rs`) instead.
    pub(super) errant: Option<sluice_rules::classify::Errant>,
    /// A request body to read and throw away once the response is out.
    pub(super) discard_body: u32,
    pub(super) head_started: Ms,
    /// Bandwidth limits: the pacing calls this response needs (`pace::plan`).
    pub(super) pace: pace::Plan,
}

impl Worker {
    /// The request at the start of the connection's buffer, if its head is whole:
    /// answered from a kept answer, parked to wait for its turn or for the disk,
    /// or answered (`respond_to`) and its response started (`start_response`).
    pub(super) fn next_request(&mut self, key: usize) -> Step {
        // The fair choice among ready requests (`run_ready`): a complete request
        // waits if this turn has answered its share, if others already wait, or if
        // the server sends all the responses it may; unless `run_ready` chose it.
        let must_wait = !self.admit_one
            && (self.answered >= self.ready_per_turn
                || self.cond.ready() > 0
                || self.active >= self.max_active);
        let c = &mut self.conns[key];
        if let Phase::Ready { .. } | Phase::Disk { .. } = c.phase {
            // Already waiting for its turn, or for the disk; what else arrives
            // stays buffered.
            return Step::Parked;
        }
        if c.rbuf.is_empty() || c.flags.has(Flags::CLOSE_AFTER) {
            return if c.flags.has(Flags::CLOSE_AFTER) && c.out.is_none() {
                Step::Close
            } else {
                Step::NeedMore
            };
        }
        // How many times this request has waited for the disk (`disk_ready` sets
        // it for the parked request it asks again); whatever follows it on the
        // connection is a new request.
        let rounds = std::mem::take(&mut self.disk_rounds);
        // The same bytes as a kept answer's request: answered from it. Only a
        // request answered now; one that must wait is parked like any other.
        // Otherwise where its head ends and its hash, for the offer below.
        let probe = match must_wait {
            true => None,
            false => match self.reuse_answer(key) {
                Ok(()) => return Step::Responded,
                Err(p) => p,
            },
        };
        let c = &mut self.conns[key];
        let rbuf = std::mem::take(&mut c.rbuf);
        let answered = match parse_head(&rbuf, &self.limits) {
            Ok(Parsed::Partial) => {
                // Waits for the rest keeping only its bytes (slowloris and half
                // heads would each hold a 4 KiB buffer otherwise).
                c.rbuf = keep_bytes(&mut self.pool, rbuf);
                return Step::NeedMore;
            }
            Err(e) => self.bad_request(key, &rbuf, e),
            // (503s and the status page never wait: an operator can see a server
            // that is at `max_active`.)
            Ok(Parsed::Complete(ref h))
                if must_wait
                    && c.cap != Cap::Over
                    && !matches!(c.why, CloseReason::Busy | CloseReason::DiskStalled)
                    && !crate::status::is_status_path(&self.snap, h.path) =>
            {
                // Parsed again when its turn comes (only requests that wait pay
                // for a second parse).
                let started = c.phase.head_started_or(self.now_ms);
                // It keeps only its bytes: the pooled 4 KiB buffer goes back (20,000
                // held keep-alives asking at once would hold 80 MiB of them).
                c.rbuf = keep_bytes(&mut self.pool, rbuf);
                c.phase = Phase::Ready { started };
                return Step::Wait;
            }
            Ok(Parsed::Complete(ref head)) => {
                match self.respond_to(key, head, &rbuf, probe, rounds) {
                    Some(a) => a,
                    None => {
                        // The answer needs the disk (a path or a small file not in the
                        // kernel's caches): a disk thread makes the lookup while the
                        // request waits with its bytes, to be asked again (`disk_ready`).
                        let c = &mut self.conns[key];
                        let started = c.phase.head_started_or(self.now_ms);
                        c.rbuf = keep_bytes(&mut self.pool, rbuf);
                        c.phase = Phase::Disk {
                            started,
                            rounds: rounds + 1,
                        };
                        return Step::Wait;
                    }
                }
            }
        };
        self.shared.stats[self.id].response(answered.resp.status);
        if let Some(e) = answered.errant {
            recycle(&mut self.pool, rbuf);
            return self.errant_answer(key, e, answered.log);
        }
        self.start_response(key, rbuf, answered)
    }

    /// A head that cannot be parsed: its error's status, then the connection is
    /// closed (lingering: whatever else the client sends is drained, never
    /// parsed, because the framing can no longer be trusted).
    fn bad_request(&mut self, key: usize, rbuf: &[u8], e: ParseError) -> Answered {
        let c = &mut self.conns[key];
        tracing::debug!(peer = %c.peer, error = e.as_str(), "bad request");
        let mut resp = Response::text(e.status(), Some(e.as_str()));
        resp.close = true;
        c.why = CloseReason::BadRequest;
        c.flags.set(Flags::LINGER, true);
        // No site was named: the default site's, as for the log.
        let default = self.snap.hosts.default_site();
        self.snap.sites[default].add_always(&mut resp.headers);
        let default_log = self.site_log[default];
        let log = self
            .log
            .enabled()
            .then(|| Pending::rejected(rbuf, e.status(), default_log));
        Answered {
            resp,
            consumed: rbuf.len(),
            keep_alive: false,
            announce_keep_alive: false,
            head_only: false,
            log,
            errant: None,
            discard_body: 0,
            head_started: self.now_ms,
            pace: pace::Plan::default(),
        }
    }

    /// The answer to a whole head: the request phases (`phases::respond`) for its
    /// site, or a 503 for a range over its cap or a request that waited past its
    /// deadline; counted, logged, and offered for reuse. `None`: the answer needs
    /// the disk and a pool thread now makes its lookup (the caller parks it).
    fn respond_to(
        &mut self,
        key: usize,
        head: &RequestHead<'_>,
        rbuf: &[u8],
        probe: Option<Probe>,
        rounds: u32,
    ) -> Option<Answered> {
        if self.panic_path.as_deref() == Some(head.path) {
            panic!("test hook: SLUICE_TEST_PANIC_PATH requested");
        }
        let c = &mut self.conns[key];
        // Virtual hosts: the Host header picks the site (its root, settings,
        // rules and log); unknown or missing hosts get the default site.
        let site = self.snap.hosts.find(head.host);
        // Stop short of the disk while the disk pool can wait for it.
        let pool = self.shared.disk.as_ref();
        let disk = match pool {
            Some(p) if rounds < MAX_DISK_ROUNDS => DiskWait::Threads { busy: p.busy() },
            _ => DiskWait::May,
        };
        self.files[site].set_disk(disk);
        let mut ctx = PhaseCtx {
            snap: &self.snap,
            shared: &self.shared,
            site: &self.snap.sites[site],
            files: &mut self.files[site],
            peer: c.peer,
            now: self.now,
            again: rounds > 0,
            https: matches!(c.via.as_deref(), Some(super::conn::Via::Tls(_))),
            rule: None,
            errant: None,
        };
        let mut resp = if c.cap == Cap::Over {
            // Slow-read prevention: this address range holds more than its
            // share of the server's connections. Say so, and when to retry.
            let mut r = Response::text(503, Some("too many connections from your network"));
            r.headers.add("Retry-After", "10");
            r.close = true;
            c.why = CloseReason::RangeCap;
            ctx.site.add_always(&mut r.headers);
            r
        } else if matches!(c.why, CloseReason::Busy | CloseReason::DiskStalled) {
            // It waited behind `condition.max_active` past its deadline, or for
            // a disk thread's lookup past `send_timeout`.
            let text = if c.why == CloseReason::Busy {
                "server busy"
            } else {
                Counters::add(&self.shared.stats[self.id].disk_busy, 1);
                "disk busy"
            };
            let mut r = Response::text(503, Some(text));
            r.headers.add("Retry-After", "5");
            r.close = true;
            ctx.site.add_always(&mut r.headers);
            r
        } else {
            phases::respond(&mut ctx, head)
        };
        // A lookup that needs the disk goes to a pool thread; when the pool has
        // none, the worker makes it, waiting.
        if let Some(cold) = ctx.files.take_cold() {
            let who = (key as u32, c.gen);
            let stats = &self.shared.stats[self.id];
            // A listing page another request of this worker is waiting for:
            // this one waits for the same build (`herd.rs`).
            let listing = cold.listing_key();
            if listing
                .as_ref()
                .is_some_and(|l| self.herds.join(site, l, who))
            {
                Counters::add(&stats.disk_lookups, 1);
                return None;
            }
            match pool.map(|p| p.submit_lookup(cold, who, &self.disk_done)) {
                Some(Ok(())) => {
                    Counters::add(&stats.disk_lookups, 1);
                    if let Some(l) = listing {
                        Counters::add(&stats.listing_builds, 1);
                        self.herds.lead(site, l, who);
                    }
                    return None;
                }
                Some(Err(why)) => {
                    // More listings waiting than the listing threads will build
                    // soon (a big page would stall the worker), or the disk
                    // threads' queue full, or this disk's share of it (slow or
                    // failing: the worker would wait on it with every other
                    // client). Not made on the worker: a 503 to come back later.
                    let text = if why == Refused::ListingsFull {
                        "too many listings being built"
                    } else {
                        Counters::add(&stats.disk_busy, 1);
                        "disk busy"
                    };
                    resp = Response::text(503, Some(text));
                    resp.headers.add("Retry-After", "5");
                    ctx.site.add_always(&mut resp.headers);
                }
                None => {
                    ctx.files.set_disk(DiskWait::May);
                    ctx.again = true;
                    resp = phases::respond(&mut ctx, head);
                }
            }
        }
        let rule = ctx.rule;
        let errant = ctx.errant.take();
        let mut discard_body = 0u32;
        match head.framing() {
            BodyFraming::None => {}
            BodyFraming::Length(n) if n <= self.snap.config.http.max_body_discard => {
                discard_body = n as u32 // bounded by max_body_discard ≤ 2^30
            }
            // Too big to skip, or chunked: answer, then close (lingering, so
            // the unread body does not turn the close into a RST), and never
            // parse the body as a request.
            _ => {
                resp.close = true;
                c.flags.set(Flags::LINGER, true);
            }
        }
        c.requests += 1;
        // Status page: top URLs (by requests, and by bytes answered) and the
        // request rate per address range.
        // (A HEAD answers the body's length, but none of its bytes.)
        let is_head = head.method() == Method::Head;
        let body_len = if is_head { 0 } else { resp.body_len() };
        self.talkers.answered(c.peer, head.path, body_len);
        if let Some((rule, action)) = rule {
            Counters::add(&self.shared.stats[self.id].rule_actions[action], 1);
            self.talkers.rule(
                site as u16,
                rule,
                sluice_status::counters::ACTIONS[action],
                body_len,
            );
        }
        if u64::from(c.requests) >= self.snap.config.http.keepalive_requests {
            resp.close = true;
        }
        let host = self.log.wants_host();
        let log = self
            .log
            .enabled()
            .then(|| {
                Pending::new(head, resp.status, self.site_log[site], host).with_length(body_len)
            })
            .map(|p| match rule {
                // Errant-client answers say which in the log line.
                Some((_, a)) if a >= 4 => p.with_note(sluice_status::counters::ACTIONS[a]),
                _ => p,
            });
        // HTTP/1.0 keep-alive must be announced; 1.1 is persistent by default.
        let keep = head.keep_alive && self.stopping.is_none();
        // Bandwidth limits: the file's path rule's (`rate_limits`), else the
        // site's, for this body's length.
        let conf = &self.snap.sites[site].conf;
        let (rate, after) = resp
            .limit
            .unwrap_or((conf.limit_rate, conf.limit_rate_after));
        let pace = pace::plan(
            rate,
            after,
            body_len,
            super::pace::base(&self.snap.config.http),
        );
        let answered = Answered {
            resp,
            consumed: head.head_len,
            keep_alive: keep,
            announce_keep_alive: keep && head.minor == 0,
            head_only: is_head,
            log,
            errant,
            discard_body,
            head_started: c.phase.head_started_or(self.now_ms),
            pace,
        };
        if let Some(p) = probe {
            self.offer_kept(
                rbuf,
                p,
                head,
                &answered,
                rule.map(|(r, a)| (site as u16, r, a)),
            );
        }
        Some(answered)
    }

    /// Put an answer on the wire: its head written into a pooled `Outgoing`
    /// (with the body behind it when small and in memory, else queued), the
    /// request's bytes consumed, and the connection in `Send`.
    fn start_response(&mut self, key: usize, mut rbuf: Vec<u8>, a: Answered) -> Step {
        let Answered {
            mut resp,
            consumed,
            keep_alive,
            announce_keep_alive,
            head_only,
            log,
            discard_body,
            head_started,
            pace,
            ..
        } = a;
        let bodyless = head_only || resp.status == 304 || resp.status == 204;
        // Bandwidth limits: this response's first rate, if not the socket's.
        self.pace_start(key, &pace);
        if !bodyless && resp.body_len() > u64::from(UNSENT_MIN) {
            self.fit_unsent(key, false);
        }
        let c = &mut self.conns[key];
        rbuf.drain(..consumed.min(rbuf.len()));
        c.rbuf = rbuf;
        let close = resp.close || !keep_alive;
        let fin_follows = c.close_after(close);
        // A response in flight: counted against this turn's share and the cap.
        self.answered += 1;
        self.active += 1;
        self.admit_one = false;
        // An errant-client rule's fixed Date (`date=`), or the clock's.
        let date = resp.date.as_deref().unwrap_or(self.date.text());
        let out = start_outgoing(
            &mut self.out_pool,
            &mut self.pool,
            c,
            self.now_ms,
            head_started,
        );
        let _ = write_head_start(&mut out.wbuf, resp.status, date);
        out.pace.switch = pace.switch;
        out.fin_follows = fin_follows;
        out.log = log;
        out.discard_after = discard_body;
        let wbuf = &mut out.wbuf;
        wbuf.extend_from_slice(resp.headers.as_bytes());
        resp.headers.recycle();
        if close {
            wbuf.extend_from_slice(b"Connection: close\r\n");
        } else if announce_keep_alive {
            wbuf.extend_from_slice(b"Connection: keep-alive\r\n");
        }
        wbuf.extend_from_slice(b"\r\n");
        out.head_len = wbuf.len() as u64;
        if !bodyless {
            // Behind the head when small and in memory, else into the pooled
            // queue, which keeps its capacity between responses.
            out.chunks.clear();
            let small = match resp.body.as_slice() {
                [Chunk::Shared(d, a, b)] => Some(&d[*a..*b]),
                [Chunk::Owned(v)] => Some(&v[..]),
                _ => None,
            };
            if !small.is_some_and(|b| out.append_small_body(b)) {
                out.chunks.extend(resp.body);
            }
        }
        c.phase = Phase::Send { last: self.now_ms };
        Step::Responded
    }

    /// A response is written: its log line (with the body bytes sent), the bytes
    /// and time counters. Every finished response passes here (`drive`, and
    /// `reuse_answer` for an answer sent whole at once).
    pub(super) fn response_done(
        &mut self,
        peer: std::net::IpAddr,
        log: Option<Pending>,
        sent: u64,
        head_started: Ms,
        ready_at: Ms,
    ) {
        if let Some(p) = log {
            let took = self.now_ms.saturating_sub(head_started);
            self.log.line(self.date.secs(), peer, &p, sent, Some(took));
        }
        let st = &self.shared.stats[self.id];
        Counters::add(&st.bytes, sent);
        st.timings(
            ready_at.saturating_sub(head_started) * 1000,
            self.now_ms.saturating_sub(head_started) * 1000,
        );
    }

    /// Slow-read prevention, for the kernel's memory: what a response's socket may
    /// keep unsent (`slowread::unsent_bound`). Every socket starts at the start
    /// bound (256 KiB, or `unsent_max` if lower: the listener's value, inherited);
    /// a reader that has taken 2 MiB of a response (`proven`) is raised to
    /// `unsent_max`; and once the connections outgrow the server's unsent budget,
    /// each large response's socket is held to its share. Called when a response
    /// larger than 16 KiB starts, when its reader is proven, and each time a
    /// sending response passes its rate window (`check_rate`), so downloads that
    /// began while the server was quiet follow the share as the connections grow.
    /// One `setsockopt` each time, and none for a response that starts while the
    /// budget covers everyone. A socket keeps what was set on it for the
    /// connection's next responses (a lowered one more wake-ups per byte, a raised
    /// one up to `unsent_max` queued), so that the record of every connection need
    /// not remember it.
    pub(super) fn fit_unsent(&mut self, key: usize, proven: bool) {
        let max = self.snap.config.condition.unsent_max;
        let open = self.shared.open_total();
        if let Some(bytes) = unsent_bound(self.shared.unsent_budget, open, max, proven) {
            let _ = crate::listener::set_unsent_max(self.conns[key].sock.as_raw_fd(), bytes);
        }
    }
}

/// A response starts on `c`: its `Outgoing` from the pool (a reused one keeps its
/// buffers; a new one takes a pooled head buffer), timed from `head_started`. Both
/// ways of answering start one here (`next_request`; `reuse_answer` for what the
/// socket did not take at once). (The pool holds boxes on purpose: see
/// `Worker::out_pool`.)
#[allow(clippy::vec_box)]
pub(super) fn start_outgoing<'a>(
    out_pool: &mut Vec<Box<Outgoing>>,
    pool: &mut Vec<Vec<u8>>,
    c: &'a mut Conn,
    now_ms: Ms,
    head_started: Ms,
) -> &'a mut Outgoing {
    let out = c.out.insert(out_pool.pop().unwrap_or_default());
    if out.wbuf.capacity() == 0 {
        out.wbuf = take_buffer(pool);
    }
    out.head_started = head_started;
    out.ready_at = now_ms;
    out.rate = RateWindow::start(now_ms, 0);
    out
}

/// Return a finished response's send state (and its write buffer) to the pools.
/// The pool keeps at most `OUT_POOL_MAX`: past that (the end of a peak of
/// thousands of downloads) a state is freed, so a worker does not hold its peak's
/// worth for the rest of its life.
#[allow(clippy::vec_box)] // the pool of boxes the worker keeps (see `Worker::out_pool`)
pub(super) fn release(
    mut out: Box<Outgoing>,
    pool: &mut Vec<Vec<u8>>,
    out_pool: &mut Vec<Box<Outgoing>>,
) {
    recycle(pool, std::mem::take(&mut out.wbuf));
    if out_pool.len() < OUT_POOL_MAX {
        out.reset();
        out_pool.push(out);
    }
}

/// Response states a worker keeps for reuse (as `io::POOL_MAX` buffers).
pub(super) const OUT_POOL_MAX: usize = crate::io::POOL_MAX;

/// The head's first lines, the same for every answer: the status line, `Server`
/// and `Date`. Returns where the `Date` value lies in `buf` (a kept answer's is
/// brought up to the clock's there).
pub(super) fn write_head_start(
    buf: &mut Vec<u8>,
    status: u16,
    date: &str,
) -> std::ops::Range<usize> {
    write_status_line(buf, status);
    buf.extend_from_slice(b"Server: sluice\r\nDate: ");
    let at = buf.len();
    buf.extend_from_slice(date.as_bytes());
    buf.extend_from_slice(b"\r\n");
    at..at + date.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After a peak (here 1,000 responses ending at once) the worker keeps
    /// `OUT_POOL_MAX` response states for reuse and frees the rest.
    #[test]
    fn the_pool_of_response_states_keeps_a_bounded_number() {
        let (mut pool, mut out_pool) = (Vec::new(), Vec::new());
        for _ in 0..1000 {
            release(Box::default(), &mut pool, &mut out_pool);
        }
        assert_eq!(out_pool.len(), OUT_POOL_MAX);
    }
}
