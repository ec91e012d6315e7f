//! Kept answers (`sluice_static::answers`): the same request bytes answered again
//! without the parse, the phases or the file cache. `reuse_answer` answers a request
//! from the worker's kept answers (most of it in one `send`, from where the answer is
//! kept); `offer_kept` offers an answer the full path (`answer.rs`) just made, when
//! its handler or the rules promised the same answer for the same bytes.
//!
//! Must not: keep anything that depends on more than the request's bytes and the
//! clock (the connection's state, a rule that reads more, an errant answer), or skip
//! what every answer does (the keep-alive count, counters, top lists, the log).
//! Costs: a hash of the request's bytes and one comparison with them per request on
//! a keep-alive connection (`answers::lookup`); an offer copies the head once.

use super::answer::{start_outgoing, write_head_start, Answered};
use super::conn::*;
use super::*;
use crate::send::{Plain, Wire};
use sluice_condition::CloseReason;
use sluice_http::response::Chunk;
use sluice_http::{BodyFraming, Method, RequestHead};
use sluice_static::answers::{Answer, Probe};
use sluice_status::Counters;

impl Worker {
    /// Answer the request at the start of the connection's buffer from the
    /// worker's kept answers (`sluice_static::answers`), when one is kept for
    /// exactly its bytes and the connection is where the full path would answer
    /// it the same way: not over a range cap, not out of time behind
    /// `max_active`, not its last request, the server not stopping. Does per
    /// request what `next_request` does for every answer: the keep-alive count,
    /// the status counters and top lists, the deciding rule's counters, the
    /// access log's record. `Err`: nothing done, the full path answers; with the
    /// head's end and hash when its answer could be offered.
    pub(super) fn reuse_answer(&mut self, key: usize) -> Result<(), Option<Probe>> {
        let c = &mut self.conns[key];
        if c.cap == Cap::Over
            || matches!(c.why, CloseReason::Busy | CloseReason::DiskStalled)
            || self.stopping.is_some()
            || u64::from(c.requests) + 1 >= self.snap.config.http.keepalive_requests
        {
            // The full path closes or refuses: nothing it answers is offered.
            return Err(None);
        }
        let (p, a) = self.answers.lookup(&c.rbuf, self.now)?;
        // Bandwidth limits: a kept answer has no plan; its socket goes at its base.
        let base = super::pace::base(&self.snap.config.http);
        super::pace::ensure(&mut self.repaced, key, c.sock.as_raw_fd(), base, base);
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

    /// An answer its handler (a whole small file, a 304, a whole file's HEAD) or
    /// the rules (a redirect) promised is the same for the same bytes
    /// (`reuse_until`; `phases` withdraws the promise when the rules read more),
    /// closed after it only if the client asked, with no body to skip: offered
    /// for reuse (`reuse_answer` does per request what is left here, the rule's
    /// counters included).
    pub(super) fn offer_kept(
        &mut self,
        rbuf: &[u8],
        p: Probe,
        head: &RequestHead<'_>,
        a: &Answered,
        rule: Option<(u16, u32, usize)>,
    ) {
        let resp = &a.resp;
        let Some(until) = resp.reuse_until else {
            return;
        };
        // A kept answer goes out with no pacing call around it: only one whose
        // socket stays at its base (`sluice_condition::pace`) is kept.
        let plain = p.end == head.head_len
            && a.errant.is_none()
            && a.pace.is_nothing()
            && resp.date.is_none()
            && self.stopping.is_none()
            && !resp.close
            && matches!(head.method(), Method::Get | Method::Head)
            && matches!(head.framing(), BodyFraming::None)
            && (a.head_only
                || matches!(
                    resp.body.as_slice(),
                    [] | [Chunk::Shared(..)] | [Chunk::Owned(_)]
                ));
        if !plain {
            return;
        }
        let date = self.date.text();
        self.answers.offer(rbuf, p, until, self.now, || {
            let body_len = if a.head_only { 0 } else { resp.body_len() };
            let mut whole = Vec::new();
            let date = write_head_start(&mut whole, resp.status, date);
            whole.extend_from_slice(resp.headers.as_bytes());
            if !a.keep_alive {
                whole.extend_from_slice(b"Connection: close\r\n");
            } else if a.announce_keep_alive {
                whole.extend_from_slice(b"Connection: keep-alive\r\n");
            }
            whole.extend_from_slice(b"\r\n");
            let body = match resp.body.as_slice() {
                _ if a.head_only => None,
                [Chunk::Shared(d, s, e)] => Some((d.clone(), *s, *e)),
                [Chunk::Owned(v)] => Some((v[..].into(), 0, v.len())),
                _ => None,
            };
            let kept = Kept {
                // Its log line's fields escaped once, here.
                log: a.log.clone().map(|p| p.rendered_for(body_len)),
                rule,
                close: !a.keep_alive,
            };
            Answer::new(resp.status, whole, date, body, head.path.into(), kept)
        });
    }
}
