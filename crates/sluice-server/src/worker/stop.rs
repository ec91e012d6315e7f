//! Stopping a worker: SIGTERM (`shutdown_grace`) and SIGQUIT (`upgrade_grace`, an
//! upgrade) decide here which connections close at once, which are answered first
//! (a request already on its way or in its socket), and which finish their
//! response in flight. Owns nothing but that choice, made once per stop (and once
//! more when a SIGTERM hurries a quit); the event loop ends the worker when the
//! connections are gone or the grace is over. Costs: one pass over the worker's
//! connections per call.

use super::conn::*;
use super::*;
use sluice_condition::CloseReason;
use std::sync::atomic::Ordering;

impl Worker {
    /// SIGTERM during a quit: what is left of the grace is `shutdown_grace` from
    /// now at most, and the idle keep-alive connections kept for the quit close,
    /// by `begin_stop`'s rule: one whose next request already waits in its socket
    /// is answered (with `Connection: close`), not dropped.
    pub(super) fn hurry_stop(&mut self) {
        self.quitting = false;
        let by = self.now + self.snap.config.server.shutdown_grace;
        self.stopping = self.stopping.map(|d| d.min(by));
        let idle: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.phase, Phase::Idle { .. }) && c.asks_nothing())
            .map(|(k, _)| k)
            .collect();
        for k in idle {
            self.close(k, CloseReason::Shutdown);
        }
    }

    pub(super) fn begin_stop(&mut self) {
        self.quitting = self.shared.quit.load(Ordering::Relaxed);
        let server = &self.snap.config.server;
        let grace = if self.quitting {
            server.upgrade_grace
        } else {
            server.shutdown_grace
        };
        self.stopping = Some(self.now + grace);
        for mut l in self.listeners.drain(..) {
            let _ = self.poll.registry().deregister(&mut l);
        }
        // Nothing asked on them: on SIGTERM idle keep-alive connections close now
        // (a client retries a request it sends on one, as after any keep-alive
        // timeout), and so do connections silent since they were accepted a second
        // or more ago. Kept, and answered with `Connection: close`: one whose next
        // request is already in its socket (a busy keep-alive client; one peek each,
        // once); one accepted within the last second, whose request is on the way
        // (the old server of an upgrade accepted it while the new one started),
        // until a second after its accept; and on SIGQUIT (an upgrade) every idle
        // keep-alive connection, until its next request or its keep-alive timeout,
        // so that no request a client sends on one is lost to the upgrade.
        let fresh_until = self.now_ms.saturating_sub(JUST_ACCEPTED_MS);
        let (mut idle, mut fresh) = (Vec::new(), Vec::new());
        for (k, c) in self.conns.iter() {
            // On a quit, idle ones stay (no peek needed).
            if (self.quitting && matches!(c.phase, Phase::Idle { .. })) || !c.asks_nothing() {
                continue;
            }
            match c.phase {
                Phase::Head {
                    started,
                    discard: 0,
                } if started > fresh_until => fresh.push((k, started + JUST_ACCEPTED_MS)),
                _ => idle.push(k),
            }
        }
        for k in idle {
            self.close(k, CloseReason::Shutdown);
        }
        for (k, d) in fresh {
            let d = d.min(self.conns[k].deadline);
            self.set_deadline(k, d);
        }
        for (_, c) in self.conns.iter_mut() {
            // A request already complete and waiting for its turn, still arriving
            // with no response before it, or waiting in the socket of an idle one
            // kept above, is answered (with `Connection: close`: `stopping` turns
            // keep-alive off), within its head (or keep-alive) deadline. The rest
            // close once their response in flight is out.
            if matches!(c.phase, Phase::Ready { .. } | Phase::Idle { .. })
                || (matches!(c.phase, Phase::Head { .. }) && c.out.is_none())
            {
                continue;
            }
            c.flags.set(Flags::CLOSE_AFTER, true);
            c.why = CloseReason::Shutdown;
        }
    }
}
