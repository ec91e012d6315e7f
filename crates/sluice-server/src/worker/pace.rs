//! Bandwidth limits on a worker's sockets: carries out what
//! `sluice_condition::pace` decides (which `SO_MAX_PACING_RATE` calls a response
//! needs) and remembers which sockets are not at their base.
//!
//! Owns: the calls, and one bit per connection slot ([`Repaced`]) that says a
//! socket was given a rate other than its base by a response. Must not: decide
//! rates (the `pace` module and the config do) or keep anything in the
//! connection record (an idle connection's memory is a target: the bit lives in
//! a side table, 1/8 byte per slot).
//!
//! A socket goes back to its base lazily: when its next response wants the base,
//! not when a paced response ends. A paced response is done when its last bytes
//! are in the socket, not when they have left it; going back at once would send
//! that tail unpaced. A connection handed back to a front process goes back at
//! once, since the next response is not this worker's.
//!
//! Cost: nothing for a server with one limit for everyone (or none); otherwise a
//! bit test per response and per kept answer, and the calls `pace::plan` counts.

use super::Worker;
use crate::send::PaceStep;
use sluice_condition::pace::{self, Plan};
use std::os::fd::{AsRawFd, RawFd};

/// One bit per connection slot: set while the socket is not at its base.
#[derive(Default)]
pub(super) struct Repaced(Vec<u64>);

impl Repaced {
    pub(super) fn has(&self, key: usize) -> bool {
        self.0
            .get(key / 64)
            .is_some_and(|w| w & (1 << (key % 64)) != 0)
    }

    pub(super) fn set(&mut self, key: usize, on: bool) {
        let (i, bit) = (key / 64, 1u64 << (key % 64));
        if on {
            if self.0.len() <= i {
                self.0.resize(i + 1, 0);
            }
            self.0[i] |= bit;
        } else if let Some(w) = self.0.get_mut(i) {
            *w &= !bit;
        }
    }
}

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
            repaced.set(key, rate != base);
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
        let want = plan.start.unwrap_or(base);
        if plan.start.is_some() || self.repaced.has(key) {
            set(self.conns[key].sock.as_raw_fd(), want);
            self.repaced.set(key, want != base);
        }
    }

    /// `key`'s socket leaves this worker: to a front process (back to its base
    /// first), or closed (the slot's bit cleared for its next connection).
    pub(super) fn pace_leave(&mut self, key: usize, socket_stays_open: bool) {
        if self.repaced.has(key) {
            if socket_stays_open {
                self.pace_start(key, &Plan::default());
            }
            self.repaced.set(key, false);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_slot_bit_is_set_cleared_and_grows_on_demand() {
        let mut r = super::Repaced::default();
        assert!(!r.has(5000));
        r.set(5000, false);
        assert!(r.0.is_empty(), "clearing never allocates");
        r.set(5000, true);
        r.set(63, true);
        assert!(r.has(5000) && r.has(63) && !r.has(64) && !r.has(4999));
        r.set(5000, false);
        assert!(!r.has(5000) && r.has(63));
    }
}
