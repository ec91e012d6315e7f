//! A complete request head → a response on the connection ([`Worker::next_request`]:
//! limits, body framing, the request phases, the access log; or, for the same bytes
//! as a kept answer's request, that answer: `reuse_answer`). The answers for errant
//! clients that drip bytes on a timer are in `errant.rs`.

use super::conn::*;
use super::*;
use crate::accesslog::Pending;
use crate::io::{keep_bytes, recycle, take_buffer};
use crate::phases::{self, PhaseCtx};
use crate::send::{Outgoing, Plain, Wire};
use sluice_condition::slowread::{unsent_bound, RateWindow, UNSENT_MIN};
use sluice_condition::CloseReason;
use sluice_http::response::{write_status_line, Chunk, Response};
use sluice_http::{parse_head, BodyFraming, Method, Parsed};
use sluice_static::answers::{Answer, Probe};
use sluice_static::cold::DiskWait;
use sluice_status::Counters;

impl Worker {
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
        let mut head_started = self.now_ms;
        let parsed = parse_head(&rbuf, &self.limits);
        let mut errant: Option<sluice_rules::classify::Errant> = None;
        // A request body to read and throw away once the response is out.
        let mut discard_body = 0u32;
        let (mut resp, consumed, keep_alive, announce_keep_alive, head_only, log) = match parsed {
            Ok(Parsed::Partial) => {
                // Waits for the rest keeping only its bytes (slowloris and half
                // heads would each hold a 4 KiB buffer otherwise).
                self.conns[key].rbuf = keep_bytes(&mut self.pool, rbuf);
                return Step::NeedMore;
            }
            Err(e) => {
                tracing::debug!(peer = %c.peer, error = e.as_str(), "bad request");
                let mut r = Response::text(e.status(), Some(e.as_str()));
                r.close = true;
                c.why = CloseReason::BadRequest;
                // The framing can no longer be trusted: whatever else the client
                // sends is drained after the answer, never parsed.
                c.flags.set(Flags::LINGER, true);
                let log = self.log.enabled().then(|| {
                    Pending::rejected(
                        &rbuf,
                        e.status(),
                        self.site_log[self.snap.hosts.default_site()],
                    )
                });
                (r, rbuf.len(), false, false, false, log)
            }
            // (503s and the status page never wait: an operator can see a server
            // that is at `max_active`.)
            Ok(Parsed::Complete(ref h))
                if must_wait
                    && c.cap != Cap::Over
                    && c.why != CloseReason::Busy
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
                if self.panic_path.as_deref() == Some(head.path) {
                    panic!("test hook: SLUICE_TEST_PANIC_PATH requested");
                }
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
                    r
                } else if c.why == CloseReason::Busy {
                    // It waited behind `condition.max_active` past its deadline.
                    let mut r = Response::text(503, Some("server busy"));
                    r.headers.add("Retry-After", "5");
                    r.close = true;
                    r
                } else {
                    phases::respond(&mut ctx, head)
                };
                // The answer needs the disk (a path or a small file not in the
                // kernel's caches): a disk thread makes the lookup while the request
                // waits with its bytes, to be asked again (`disk_ready`). When the
                // pool cannot take it, the worker makes it, waiting.
                if let Some(cold) = ctx.files.take_cold() {
                    let who = (key as u32, c.gen);
                    if pool.is_some_and(|p| p.submit_lookup(cold, who, &self.disk_done)) {
                        Counters::add(&self.shared.stats[self.id].disk_lookups, 1);
                        let started = c.phase.head_started_or(self.now_ms);
                        c.rbuf = keep_bytes(&mut self.pool, rbuf);
                        c.phase = Phase::Disk {
                            started,
                            rounds: rounds + 1,
                        };
                        return Step::Wait;
                    }
                    ctx.files.set_disk(DiskWait::May);
                    ctx.again = true;
                    resp = phases::respond(&mut ctx, head);
                }
                let rule = ctx.rule;
                errant = ctx.errant.take();
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
                let log = self
                    .log
                    .enabled()
                    .then(|| Pending::new(head, resp.status, self.site_log[site]))
                    .map(|p| match rule {
                        // Errant-client answers say which in the log line.
                        Some((_, a)) if a >= 4 => p.with_note(sluice_status::counters::ACTIONS[a]),
                        _ => p,
                    });
                // HTTP/1.0 keep-alive must be announced; 1.1 is persistent by default.
                let keep = head.keep_alive && self.stopping.is_none();
                let announce = keep && head.minor == 0;
                // An answer its handler (a whole small file, a 304, a whole file's
                // HEAD) or the rules (a redirect) promised is the same for the same
                // bytes (`reuse_until`; `phases` withdraws the promise when the rules
                // read more), closed after it only if the client asked, with no body
                // to skip: offered for reuse (`reuse_answer` does per request what is
                // left here, the rule's counters included).
                if let (Some(p), Some(until)) = (probe, resp.reuse_until) {
                    let plain = p.end == head.head_len
                        && errant.is_none()
                        && resp.date.is_none()
                        && self.stopping.is_none()
                        && !resp.close
                        && matches!(head.method(), Method::Get | Method::Head)
                        && matches!(head.framing(), BodyFraming::None)
                        && (is_head
                            || matches!(
                                resp.body.as_slice(),
                                [] | [Chunk::Shared(..)] | [Chunk::Owned(_)]
                            ));
                    if plain {
                        let date = self.date.text();
                        self.answers.offer(&rbuf, p, until, self.now, || {
                            let mut whole = Vec::new();
                            let date = write_head_start(&mut whole, resp.status, date);
                            whole.extend_from_slice(resp.headers.as_bytes());
                            if !keep {
                                whole.extend_from_slice(b"Connection: close\r\n");
                            } else if announce {
                                whole.extend_from_slice(b"Connection: keep-alive\r\n");
                            }
                            whole.extend_from_slice(b"\r\n");
                            let body = match resp.body.as_slice() {
                                _ if is_head => None,
                                [Chunk::Shared(d, a, b)] => Some((d.clone(), *a, *b)),
                                [Chunk::Owned(v)] => Some((v[..].into(), 0, v.len())),
                                _ => None,
                            };
                            let kept = Kept {
                                // Its log line's fields escaped once, here.
                                log: log.clone().map(|p| p.rendered_for(body_len)),
                                rule: rule.map(|(r, a)| (site as u16, r, a)),
                                close: !keep,
                            };
                            Answer::new(resp.status, whole, date, body, head.path.into(), kept)
                        });
                    }
                }
                head_started = c.phase.head_started_or(self.now_ms);
                (resp, head.head_len, keep, announce, is_head, log)
            }
        };
        self.shared.stats[self.id].response(resp.status);
        if let Some(e) = errant {
            recycle(&mut self.pool, rbuf);
            return self.errant_answer(key, e, log);
        }
        let bodyless = head_only || resp.status == 304 || resp.status == 204;
        if !bodyless && resp.body_len() > u64::from(UNSENT_MIN) {
            self.fit_unsent(key, false);
        }
        let c = &mut self.conns[key];
        let mut rbuf = rbuf;
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

    /// Answer the request at the start of the connection's buffer from the
    /// worker's kept answers (`sluice_static::answers`), when one is kept for
    /// exactly its bytes and the connection is where the full path would answer
    /// it the same way: not over a range cap, not out of time behind
    /// `max_active`, not its last request, the server not stopping. Does per
    /// request what `next_request` does for every answer: the keep-alive count,
    /// the status counters and top lists, the deciding rule's counters, the
    /// access log's record. `Err`: nothing done, the full path answers; with the
    /// head's end and hash when its answer could be offered.
    fn reuse_answer(&mut self, key: usize) -> Result<(), Option<Probe>> {
        let c = &mut self.conns[key];
        if c.cap == Cap::Over
            || c.why == CloseReason::Busy
            || self.stopping.is_some()
            || u64::from(c.requests) + 1 >= self.snap.config.http.keepalive_requests
        {
            // The full path closes or refuses: nothing it answers is offered.
            return Err(None);
        }
        let (p, a) = self.answers.lookup(&c.rbuf, self.now)?;
        c.requests += 1;
        let body_len = a.body_len() as u64;
        self.talkers.answered(c.peer, &a.path, body_len);
        let st = &self.shared.stats[self.id];
        if let Some((site, rule, action)) = a.extra.rule {
            Counters::add(&st.rule_actions[action], 1);
            self.talkers.rule(
                site,
                rule,
                sluice_status::counters::ACTIONS[action],
                body_len,
            );
        }
        st.response(a.status);
        Counters::add(&st.answers_reused, 1);
        let head_started = c.phase.head_started_or(self.now_ms);
        c.rbuf.drain(..p.end);
        // The client asked to close after this answer: as on the full path.
        let close = a.extra.close;
        let fin_follows = c.close_after(close);
        self.answered += 1;
        self.admit_one = false;
        // The answer goes out from where it is kept (its `Date` brought up to the
        // clock's), at once on a plain connection: most in this one `send`, with
        // no copy and no `Outgoing` taken from the pool and given back. What the
        // socket does not take (or all of it, through TLS or for a front
        // process's connection) waits in an `Outgoing` like any response's
        // remainder.
        a.set_date(self.date.secs(), self.date.text().as_bytes());
        let log = a.extra.log.clone();
        let head_len = a.head_len();
        let (kept, rest) = a.wire();
        let total = kept.len() + rest.len();
        let took = match c.via {
            None => {
                let iov = [std::io::IoSlice::new(kept), std::io::IoSlice::new(rest)];
                let n = if rest.is_empty() { 1 } else { 2 };
                // An error shows again in the remainder's flush.
                Plain(c.sock.as_raw_fd())
                    .send(&iov[..n], false)
                    .unwrap_or(0)
            }
            Some(_) => 0,
        };
        let now_ms = self.now_ms;
        if took < total {
            self.active += 1;
            let out = start_outgoing(&mut self.out_pool, &mut self.pool, c, now_ms, head_started);
            out.fin_follows = fin_follows;
            if took < kept.len() {
                out.wbuf.extend_from_slice(&kept[took..]);
                out.wbuf.extend_from_slice(rest);
            } else {
                out.wbuf.extend_from_slice(&rest[took - kept.len()..]);
            }
            // Counted as `drive` counts any response: body bytes past the head.
            out.head_len = head_len.saturating_sub(took) as u64;
            out.sent = took.saturating_sub(head_len) as u64;
            out.log = log;
            c.phase = Phase::Send { last: now_ms };
        } else {
            // Done: a kept-alive connection waits for its next request.
            c.phase = if c.rbuf.is_empty() {
                Phase::Idle { since: now_ms }
            } else {
                Phase::Head {
                    started: now_ms,
                    discard: 0,
                }
            };
            let peer = c.peer;
            self.response_done(peer, log, body_len, head_started, now_ms);
            if close {
                // Gone, or lingering: `drive` finds which when it looks again.
                self.finish_closing(key);
            }
        }
        Ok(())
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
            self.log.line(self.wall, peer, &p, sent);
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
fn start_outgoing<'a>(
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

/// The head's first lines, the same for every answer: the status line, `Server`
/// and `Date`. Returns where the `Date` value lies in `buf` (a kept answer's is
/// brought up to the clock's there).
fn write_head_start(buf: &mut Vec<u8>, status: u16, date: &str) -> std::ops::Range<usize> {
    write_status_line(buf, status);
    buf.extend_from_slice(b"Server: sluice\r\nDate: ");
    let at = buf.len();
    buf.extend_from_slice(date.as_bytes());
    buf.extend_from_slice(b"\r\n");
    at..at + date.len()
}
