//! Bandwidth limits on a worker's sockets: carries out what
//! `sluice_condition::pace` decides (which `SO_MAX_PACING_RATE` calls a response
//! needs) and remembers which sockets are not at their base.
//!
//! Owns: the calls, and the worker's [`Repaced`] table of the sockets a response gave
//! a rate other than their base, with that rate. Must not: decide rates (the
//! `pace` module and the config do) or keep anything in the connection record
//! (an idle connection's memory is a target: the table holds only sockets off
//! their base, and is empty unless a site's limit differs from `[http]`'s or
//! `limit_rate_after` is set).
//!
//! A socket goes back to its base lazily: when its next response wants the base,
//! not when a paced response ends. A paced response is done when its last bytes
//! are in the socket, not when they have left it; going back at once would send
//! that tail unpaced. A connection handed back to a front process goes back at
//! once, since the next response is not this worker's.
//!
//! Cost: an emptiness test per response and per kept answer for a server with
//! one limit for everyone (or none); otherwise a hash lookup, and the calls
//! `pace::plan` counts (a socket already at the rate a response wants gets none).

use super::Worker;
use crate::send::PaceStep;
use sluice_condition::pace::{self, Plan, Repaced};
use std::os::fd::{AsRawFd, RawFd};

/// Carry out a send turn's [`PaceStep`] on `fd`, `key`'s socket: the rate set
/// (and the unsent bound given back, `bound`), or the bound lowered to watch.
pub(super) fn apply(
    fd: RawFd,
    step: PaceStep,
    base: u32,
    bound: u32,
    repaced: &mut Repaced,
    key: usize,
) {
    match step {
        PaceStep::Nothing => {}
        PaceStep::Switch(rate, watched) => {
            set(fd, rate);
            repaced.set(key, rate, base);
            if watched {
                let _ = crate::listener::set_unsent_max(fd, bound);
            }
        }
        PaceStep::Watch(bytes) => {
            let _ = crate::listener::set_unsent_max(fd, bytes);
        }
    }
}

/// The unsent bound a response's socket has outside a watch: what
/// `Worker::fit_unsent` would give it now, or the start bound every socket
/// inherits when that leaves it alone.
pub(super) fn unsent_bound_now(
    shared: &crate::shared::Shared,
    snap: &crate::snapshot::Snapshot,
    proven: bool,
) -> u32 {
    use sluice_condition::slowread::{unsent_bound, unsent_start};
    let max = snap.config.condition.unsent_max;
    unsent_bound(shared.unsent_budget, shared.open_total(), max, proven)
        .unwrap_or(unsent_start(max))
}

/// Give `key`'s socket (`fd`) the rate `want` if the table says it has another,
/// and record it: the one place a response's rate is set.
pub(super) fn ensure(repaced: &mut Repaced, key: usize, fd: RawFd, want: u32, base: u32) {
    if repaced.rate(key, base) != want {
        set(fd, want);
        repaced.set(key, want, base);
    }
}

/// The pacing a socket has between responses (`pace::base`).
pub(super) fn base(http: &sluice_config::HttpSection) -> u32 {
    pace::base(http.limit_rate, http.limit_rate_after)
}

/// One `SO_MAX_PACING_RATE` call (`pace::UNPACED`: none); a refusal (a kernel
/// without TCP pacing) leaves the socket as it was and is only logged.
pub(super) fn set(fd: RawFd, v: u32) {
    if let Err(e) = crate::listener::set_pacing(fd, v) {
        tracing::debug!(error = %e, "SO_MAX_PACING_RATE refused");
    }
}

impl Worker {
    /// A response of `key` starts with this plan: its first bytes' rate set, if
    /// that is not what the socket has.
    pub(super) fn pace_start(&mut self, key: usize, plan: &Plan) {
        let base = base(&self.snap.config.http);
        let fd = self.conns[key].sock.as_raw_fd();
        ensure(&mut self.repaced, key, fd, plan.start.unwrap_or(base), base);
    }

    /// `key`'s socket leaves this worker: to a front process (back to its base
    /// first), or closed (the slot's bit cleared for its next connection).
    pub(super) fn pace_leave(&mut self, key: usize, socket_stays_open: bool) {
        if socket_stays_open {
            self.pace_start(key, &Plan::default());
        }
        self.repaced.forget(key);
    }
}
