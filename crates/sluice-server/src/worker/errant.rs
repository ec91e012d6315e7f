//! The answers for errant clients that outlast their request: `drop`, and `tarpit`
//! and `oversize`, which drip bytes on the connection's timer
//! ([`Worker::errant_answer`], [`Worker::drip_turn`]).
//!
//! Owns: a dripping connection from its request to its close. Must not: count it
//! against conditioning (it leaves the address tree and the range caps when it
//! starts). Costs: one timer and one `send` per piece, one shared piece for every
//! oversize answer.

use super::conn::*;
use super::*;
use crate::accesslog::Pending;
use sluice_condition::CloseReason;
use std::sync::atomic::Ordering;

impl Worker {
    /// Carry out `drop`, `tarpit` or `oversize` for the request just parsed.
    /// Tarpits and oversize answers leave conditioning's accounting (no range cap,
    /// no eviction, not in `open`), hold no buffers, and are capped server-wide by
    /// `rules.tarpit_max`; past the cap they are dropped.
    pub(super) fn errant_answer(
        &mut self,
        key: usize,
        e: sluice_rules::classify::Errant,
        log: Option<Pending>,
    ) -> Step {
        use sluice_rules::classify::Errant;
        const OVERSIZE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nServer: sluice\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000000000000000\r\nConnection: close\r\n\r\n";
        const TARPIT_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nServer: sluice\r\nContent-Type: text/plain; charset=utf-8\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
        /// An oversize body goes out 4 KiB every 250 ms: 16 KiB/s, 1 MiB in 64 s.
        const OVERSIZE_PIECE: usize = 4096;
        let full = self.shared.drips_open() >= self.snap.config.rules.tarpit_max;
        let (head, piece, every, budget, for_ms): (&[u8], std::sync::Arc<[u8]>, Ms, u64, u64) =
            match e {
                Errant::Tarpit {
                    text,
                    every_ms,
                    for_ms,
                } if !full => {
                    let mut line = text.as_bytes().to_vec();
                    line.push(b'\n');
                    (TARPIT_HEAD, line.into(), every_ms, u64::MAX, for_ms)
                }
                Errant::Oversize { bytes, for_ms } if !full => {
                    // One block shared by every oversize answer: a connection holds
                    // a reference, not 4 KiB of its own.
                    static PIECE: std::sync::OnceLock<std::sync::Arc<[u8]>> =
                        std::sync::OnceLock::new();
                    let piece = PIECE.get_or_init(|| vec![b'0'; OVERSIZE_PIECE].into());
                    (OVERSIZE_HEAD, piece.clone(), 250, bytes, for_ms)
                }
                _ => {
                    // drop (asked for, or over the tarpit cap): no response at all.
                    let c = &mut self.conns[key];
                    if let Some(p) = log {
                        self.log.line(
                            self.date.secs(),
                            c.peer,
                            &p.with_status(444).with_note("drop"),
                            0,
                            None,
                        );
                    }
                    c.why = CloseReason::Errant;
                    return Step::Close;
                }
            };
        let now = self.now_ms;
        let c = &mut self.conns[key];
        let (peer, cap) = (c.peer, c.cap);
        let started = c.phase.head_started_or(now);
        c.cap = Cap::Exempt;
        c.rbuf = Vec::new();
        c.phase = Phase::Drip {
            until: now + for_ms,
        };
        let sent = conn_send(c, head);
        self.release_range(peer, cap);
        self.cond.forget(key as u32, peer);
        self.shared.open.fetch_sub(1, Ordering::Relaxed);
        self.shared.drips.fetch_add(1, Ordering::Relaxed);
        self.drips.insert(
            key,
            Drip {
                piece,
                every,
                budget,
                sent: sent as u64,
                log,
                started,
            },
        );
        self.set_deadline(key, (now + every).min(now + for_ms));
        Step::Parked
    }

    /// A dripping connection's timer: send the next piece, or end it.
    pub(super) fn drip_turn(&mut self, key: usize) {
        let now = self.now_ms;
        let Phase::Drip { until } = self.conns[key].phase else {
            return;
        };
        let Some(d) = self.drips.get_mut(&key) else {
            self.close(key, CloseReason::Errant);
            return;
        };
        if now >= until || d.budget == 0 {
            self.close(key, CloseReason::Errant);
            return;
        }
        let n = (d.piece.len() as u64).min(d.budget) as usize;
        let sent = conn_send(&mut self.conns[key], &d.piece[..n]);
        if sent < 0 {
            self.close(key, CloseReason::ClientGone);
            return;
        }
        d.sent += sent as u64;
        d.budget -= sent as u64;
        let next = (now + d.every).min(until);
        // This runs from the timer that just fired: re-arm like any other deadline.
        let c = &mut self.conns[key];
        c.deadline = next;
        let gen = c.gen;
        self.rearm(key, gen);
    }
}
