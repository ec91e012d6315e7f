//! Time in the worker: what a timer does when it fires (close, or resume a held
//! connection), turns for waiting requests (`run_ready`), send turns (by address range, least recently served first) and
//! their 125 µs passes, disk-pool wake-ups, the minimum send rate, deadlines,
//! [`Worker::close`], where every connection ends with a reason, and how long a
//! turn with nothing to do sleeps (`Worker::sleep_for`).

use super::answer::release;
use super::conn::*;
use super::*;
use crate::accesslog::Pending;
use crate::io::{abort_on_close, recycle};
use sluice_condition::slowread::RateVerdict;
use sluice_condition::{Class, CloseReason};
use sluice_http::response::HeaderBuf;
use sluice_status::Counters;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Refused cold ranges asked again per retry pass (`Worker::disk_retry_due`):
/// 256 every 50 ms: at most about 5,000 asks a second, each a one-byte probe,
/// an `fstat` and a look at the queue.
const RETRY_BATCH: usize = 256;

impl Worker {
    pub(super) fn on_timer(&mut self, key: usize, gen: u32) {
        let now = self.now_ms;
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if c.gen != gen {
            return;
        }
        if c.deadline <= now {
            let reason = match c.phase {
                Phase::Head { .. } => CloseReason::HeaderTimeout,
                Phase::Idle { .. } => CloseReason::IdleTimeout,
                Phase::Send { last } => {
                    // Two limits share this deadline: no progress for send_timeout,
                    // and the minimum rate over a window (slow-read prevention).
                    if now >= self.deadline_of(Phase::Send { last }) {
                        self.missed_by(key, CloseReason::SendTimeout)
                    } else {
                        match self.check_rate(key) {
                            None => self.missed_by(key, CloseReason::SlowRead),
                            Some(d) => {
                                // Still fine: re-arm below for the next check.
                                self.conns[key].deadline = d;
                                self.rearm(key, gen);
                                return;
                            }
                        }
                    }
                }
                Phase::Linger { .. } => {
                    // The lingering period is over: a normal end, not a timeout.
                    self.close(key, CloseReason::Done);
                    return;
                }
                Phase::Drip { .. } => {
                    self.drip_turn(key);
                    return;
                }
                Phase::Ready { started } | Phase::Disk { started, .. } => {
                    // Waited behind `max_active` for the head's whole deadline
                    // ("server busy"), or for the disk pool as long as a send may
                    // stall ("disk busy"): answered 503 with Retry-After, then
                    // closed.
                    c.why = match c.phase {
                        Phase::Ready { .. } => CloseReason::Busy,
                        _ => CloseReason::DiskStalled,
                    };
                    c.phase = Phase::Head {
                        started,
                        discard: 0,
                    };
                    let peer = c.peer;
                    self.cond.park(key as u32, peer, Class::Active);
                    self.drive(key);
                    return;
                }
            };
            let c = &mut self.conns[key];
            tracing::debug!(peer = %c.peer, why = reason.as_str(), "timeout");
            Counters::add(&self.shared.stats[self.id].timeouts, 1);
            if matches!(c.phase, Phase::Head { .. }) && c.out.is_none() && !c.rbuf.is_empty() {
                // Part of a head arrived, and the rest did not in time: say so
                // (best effort, one non-blocking send) and log it. A connection that
                // sent nothing at all is closed silently. No site was named yet:
                // the default site's `always` headers.
                const LINE: &[u8] = b"HTTP/1.1 408 Request Timeout\r\n";
                const REST: &[u8] = b"Connection: close\r\nContent-Length: 0\r\n\r\n";
                let default = self.snap.hosts.default_site();
                let mut always = HeaderBuf::default();
                self.snap.sites[default].add_always(&mut always);
                conn_send(c, &[LINE, always.as_bytes(), REST].concat());
                always.recycle();
                if self.log.enabled() {
                    let p = Pending::rejected(&c.rbuf, 408, self.site_log[default]);
                    let took = now.saturating_sub(c.phase.head_started_or(now));
                    self.log.line(self.date.secs(), c.peer, &p, 0, Some(took));
                }
            }
            self.close(key, reason);
            return;
        }
        self.rearm(key, gen);
    }

    /// After a timer fired early (the deadline moved later), put the connection's
    /// one wheel entry back at its deadline.
    pub(super) fn rearm(&mut self, key: usize, gen: u32) {
        let c = &mut self.conns[key];
        if c.wheel_at <= self.now_ms || c.wheel_at == NEVER {
            c.wheel_at = self.wheel.insert(c.deadline, (key as u32, gen));
        }
    }

    /// Give each queued response one more turn (at most [`SEND_TURN`] bytes) for at
    /// most [`SENDQ_BUDGET`] of wall time; what is left waits for the next loop
    /// turn, after new events. Turns go by address range, least recently served
    /// first (`Conditioner::next_waiting`, the paper's recency-based fairness): 200
    /// downloads from one /24 share that range's turns, so a response for a client
    /// elsewhere is next, not 201st. A response with more to send queues again
    /// behind the ranges that have not had their turn.
    pub(super) fn run_sendq(&mut self) {
        let n = self.cond.waiting();
        if n == 0 {
            return;
        }
        let start = Instant::now();
        for i in 0..n {
            let Some(id) = self.cond.next_waiting() else {
                break;
            };
            let key = id as usize;
            match self.conns.get_mut(key) {
                Some(c) if c.flags.has(Flags::QUEUED) => c.flags.set(Flags::QUEUED, false),
                _ => continue,
            }
            self.drive(key);
            if i + 1 < n && start.elapsed() >= SENDQ_BUDGET {
                break;
            }
        }
    }

    /// Answer the complete requests that wait (`Phase::Ready`), least recently
    /// served address range first (`Conditioner::next_ready`, the paper's
    /// recency-based choice), while this loop turn's share
    /// (`condition.ready_per_turn`) and the cap on active responses
    /// (`condition.max_active`) allow; the rest wait for the next turn, or for a
    /// response to finish. Requests wait only under load: while a turn answers
    /// fewer than its share and nobody waits, they are answered as they arrive.
    pub(super) fn run_ready(&mut self) {
        while self.cond.ready() > 0
            && self.answered < self.ready_per_turn
            && self.active < self.max_active
        {
            let Some(id) = self.cond.next_ready() else {
                break;
            };
            let key = id as usize;
            let Some(c) = self.conns.get_mut(key) else {
                continue;
            };
            let Phase::Ready { started } = c.phase else {
                continue;
            };
            self.answer_parked(key, started);
        }
    }

    /// Answer, from the start and now, a complete request that was parked with
    /// its bytes since `started` (`Phase::Ready`, `Phase::Disk`): its turn is
    /// taken, whatever this loop turn's share (`admit_one`).
    fn answer_parked(&mut self, key: usize, started: Ms) {
        self.conns[key].phase = Phase::Head {
            started,
            discard: 0,
        };
        self.admit_one = true;
        self.drive(key);
        self.admit_one = false;
    }

    /// Responses whose cold range the disk pool has read take their next send
    /// turn (they stayed `QUEUED` while parked, so nothing else queued them);
    /// requests whose lookup it has made are answered, from the start.
    pub(super) fn disk_ready(&mut self) {
        let mut keys = std::mem::take(&mut self.disk_keys);
        self.disk_done.take(&mut keys);
        for who in keys.drain(..) {
            // A listing build's requests: the one it was queued for, then those
            // that waited for the same page (`herd.rs`), all in this turn.
            let joined = self.herds.finished(who);
            self.resume_from_disk(who);
            for who in joined.into_iter().flatten() {
                self.resume_from_disk(who);
            }
        }
        self.disk_keys = keys;
    }

    /// A response's cold range was refused by the pool (`disk::Refused`): it
    /// waits, out of the send queue, and asks again at the next retry
    /// (`disk_retry_due`). Its phase stays `Send { last }`, so its
    /// `send_timeout` runs from its last progress, not from this wait, and its
    /// rate window goes on (a disk stuck past it ends the download, counted as
    /// `disk_stalled` as a wait for a disk thread is: `Worker::missed_by`).
    pub(super) fn retry_disk(&mut self, key: usize) {
        if self.disk_retry.is_empty() {
            self.disk_retry_at = self.now_ms + crate::disk::RETRY_MS;
        }
        self.disk_retry.push((key as u32, self.conns[key].gen));
        Counters::add(&self.shared.stats[self.id].disk_retries, 1);
        self.hold_send(key, Class::Active);
    }

    /// The refused responses' wait is over: the first [`RETRY_BATCH`] in the
    /// order they were refused take a send turn again (and ask the pool again if
    /// their range is still cold; refused again, they go to the back). The rest
    /// wait for the next pass, so a dead disk under thousands of downloads costs
    /// at most that many asks per [`crate::disk::RETRY_MS`].
    pub(super) fn disk_retry_due(&mut self) {
        let n = self.disk_retry.len().min(RETRY_BATCH);
        let due: Vec<_> = self.disk_retry.drain(..n).collect();
        if !self.disk_retry.is_empty() {
            self.disk_retry_at = self.now_ms + crate::disk::RETRY_MS;
        }
        for who in due {
            self.resume_from_disk(who);
        }
    }

    /// Ask a request parked in `Phase::Disk` again (if its connection is still
    /// the one that parked it).
    fn resume_from_disk(&mut self, (key, gen): (u32, u32)) {
        let Some(c) = self.conns.get_mut(key as usize) else {
            return;
        };
        if c.gen != gen {
            return;
        }
        if c.flags.has(Flags::QUEUED) {
            self.cond.park(key, c.peer, Class::Waiting);
        } else if let Phase::Disk { started, rounds } = c.phase {
            // Its turn was taken when it first came: not queued again.
            self.disk_rounds = rounds;
            self.answer_parked(key as usize, started);
            self.disk_rounds = 0;
        }
    }

    /// Who missed a response's send deadline (`send_timeout`, or the minimum
    /// rate over its window, named by `client`): the disk, if the response is
    /// waiting for it now (parked `QUEUED` as [`Class::Active`]: a disk thread
    /// has its range, or it waits to ask again), else the client.
    fn missed_by(&self, key: usize, client: CloseReason) -> CloseReason {
        let queued = self.conns[key].flags.has(Flags::QUEUED);
        if queued && self.cond.class_of(key as u32) == Class::Active {
            CloseReason::DiskStalled
        } else {
            client
        }
    }

    /// Slow-read check of a connection in SEND: `None` if its client read below the
    /// minimum rate over a whole window, else the deadline to arm (the earlier of the
    /// send timeout and the window's end).
    pub(super) fn check_rate(&mut self, key: usize) -> Option<Ms> {
        let cond = &self.snap.config.condition;
        let (min_rate, window) = (cond.min_send_rate, ms(cond.send_rate_window));
        let now = self.now_ms;
        let Phase::Send { last } = self.conns[key].phase else {
            return Some(self.conns[key].deadline);
        };
        let stall = self.deadline_of(Phase::Send { last });
        let c = &mut self.conns[key];
        let Some(out) = c.out.as_mut() else {
            return Some(stall);
        };
        match out.rate.check(now, out.sent, min_rate, window) {
            RateVerdict::TooSlow => None,
            RateVerdict::CheckAt(t) => Some(stall.min(t)),
            RateVerdict::Renewed => {
                // After the first window, deferral's guard has done its work
                // whatever the estimate says (a block that found it settled has
                // lifted it already): the reader's ACKs have measured its RTT for
                // a whole window, so a loss or a closed window from now on backs
                // off as the kernel means it to (deferral::lift_rto_guard).
                if std::mem::replace(&mut out.guard_next, NEVER) != NEVER {
                    let _ = crate::deferral::lift_rto_guard(c.sock.as_raw_fd(), false);
                }
                // Once a window: the share of the unsent budget may have shrunk
                // since this response began.
                let proven = out.proven;
                self.fit_unsent(key, proven);
                Some(stall.min(now + window))
            }
        }
    }

    /// Close a connection, for `why` (counted per reason for the status page).
    pub(super) fn close(&mut self, key: usize, why: CloseReason) {
        if let Some(d) = self.drips.remove(&key) {
            // It left `open` when it began to drip; `open` is decremented below.
            self.shared.open.fetch_add(1, Ordering::Relaxed);
            self.shared.drips.fetch_sub(1, Ordering::Relaxed);
            if let (Some(p), Some(c)) = (d.log, self.conns.get(key)) {
                let took = self.now_ms.saturating_sub(d.started);
                self.log
                    .line(self.date.secs(), c.peer, &p, d.sent, Some(took));
            }
            Counters::add(&self.shared.stats[self.id].bytes, d.sent);
        }
        self.pace_leave(key, false);
        if let Some(mut c) = self.conns.try_remove(key) {
            let cut = match why {
                CloseReason::SlowRead | CloseReason::SendTimeout => true,
                // A download the disk could not feed (parked for it:
                // `Worker::missed_by`); not a lookup's 503, which must reach
                // its client.
                CloseReason::DiskStalled => c.flags.has(Flags::QUEUED),
                _ => false,
            };
            if cut {
                // Abortive close (RST): a plain close would leave the kernel sending
                // the megabytes still queued for a client that reads a few bytes a
                // second, and the connection, seen from the client, would stay open.
                abort_on_close(&c.sock);
            }
            match why {
                CloseReason::EvictedIdle | CloseReason::EvictedIncomplete => {
                    self.talkers.evicted(c.peer)
                }
                CloseReason::RangeCap => self.talkers.refused(c.peer),
                _ => {}
            }
            if c.front_id() != 0 {
                // Handed over by a front process: it closes the client too, and this
                // worker asks for the next connection.
                if let Some(f) = &self.front {
                    let _ = sluicecc::proto::send_ctl(
                        f.as_raw_fd(),
                        sluicecc::proto::CLOSE,
                        c.front_id(),
                    );
                    let _ = sluicecc::proto::send_ctl(f.as_raw_fd(), sluicecc::proto::ASK, 0);
                }
                // Another descriptor (the front's) shares the socket: remove it here.
                let _ = self.poll.registry().deregister(&mut c.sock);
            }
            // No epoll_ctl(DEL): closing the socket (its only descriptor) removes it.
            self.cond.forget(key as u32, c.peer);
            self.release_range(c.peer, c.cap);
            recycle(&mut self.pool, std::mem::take(&mut c.rbuf));
            if let Some(mut out) = c.out.take() {
                // A response cut short (client gone, send timeout, shutdown grace
                // over) is logged too, with the bytes that did go out: on a mirror
                // these aborted downloads are the lines an operator looks for.
                if let Some(p) = out.log.take() {
                    let took = self.now_ms.saturating_sub(out.head_started);
                    self.log
                        .line(self.date.secs(), c.peer, &p, out.sent, Some(took));
                }
                Counters::add(&self.shared.stats[self.id].bytes, out.sent);
                release(out, &mut self.pool, &mut self.out_pool);
                self.active -= 1;
            }
            self.shared.open.fetch_sub(1, Ordering::Relaxed);
            let st = &self.shared.stats[self.id];
            Counters::add(&st.closed, 1);
            Counters::add(&st.closes[why.index()], 1);
        }
    }

    /// The deadline of a connection in `phase`, the one place it is computed: a
    /// request head, and a complete one waiting for its turn, `header_timeout`
    /// from the head's first byte (from accept for a connection's first); an idle
    /// keep-alive connection `keepalive_timeout` from its last response; a
    /// response `send_timeout` from its last progress (the minimum rate may cut
    /// it sooner: `check_rate`); a request waiting for the disk pool as long as a
    /// send may stall, from now (asked as it starts waiting); lingering
    /// [`LINGER_MS`]; an errant client's drip until its end.
    pub(super) fn deadline_of(&self, phase: Phase) -> Ms {
        let http = &self.snap.config.http;
        match phase {
            Phase::Head { started, .. } | Phase::Ready { started } => {
                started + ms(http.header_timeout)
            }
            Phase::Disk { .. } => self.now_ms + ms(http.send_timeout),
            Phase::Idle { since } => since + ms(http.keepalive_timeout),
            Phase::Send { last } => last + ms(http.send_timeout),
            Phase::Linger { since, .. } => since + LINGER_MS,
            Phase::Drip { until } => until,
        }
    }

    pub(super) fn set_deadline(&mut self, key: usize, d: Ms) {
        let c = &mut self.conns[key];
        c.deadline = d;
        // One live wheel entry per connection; add another only if it must fire sooner.
        if d < c.wheel_at {
            c.wheel_at = self.wheel.insert(d, (key as u32, c.gen));
        }
    }

    /// How long a turn with nothing waiting sleeps in `epoll_wait` at most: until
    /// the first of the next wheel entry's slot (the earliest deadline of any
    /// connection), the once-a-second housekeeping and the access log's next flush.
    /// So a worker with no connection wakes once a second, and one whose
    /// connections are all idle keep-alives (deadlines up to `keepalive_timeout`
    /// away) not more often, where it used to wake every tick. A new connection, an
    /// event on an open one or a stop wakes it at once; a reload is read by the
    /// turn the next request starts, as always. While a stop is under way or
    /// accepting is paused: one tick, as those are checked every turn.
    pub(super) fn sleep_for(&self) -> Duration {
        let tick = self.wheel.tick();
        if self.stopping.is_some() || self.accept_paused_until.is_some() {
            return tick;
        }
        let mut ms = self
            .next_expire_ms
            .saturating_sub(self.now_ms)
            .min(IDLE_SLEEP_MS);
        if let Some(at) = self.wheel.next_due() {
            ms = ms.min(at.saturating_sub(self.now_ms));
        }
        if !self.disk_retry.is_empty() {
            ms = ms.min(self.disk_retry_at.saturating_sub(self.now_ms));
        }
        if let Some(at) = self.log.next_flush() {
            ms = ms.min(at.saturating_duration_since(self.now).as_millis() as Ms);
        }
        // At least 1 ms: `now_ms` is this turn's start, so a slot can read as due
        // already; the next turn's `advance` reports it either way.
        Duration::from_millis(ms.max(1))
    }
}
