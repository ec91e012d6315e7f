//! Bandwidth limits (`limit_rate`, `limit_rate_after`, in `[http]` and per site):
//! what a response's socket should be paced at, and when that changes.
//!
//! The kernel paces a socket (`SO_MAX_PACING_RATE`), so a limited response costs
//! no timer and no CPU per byte; what costs is the `setsockopt` that changes it.
//! This module decides, per response, which of those calls are needed, and holds
//! the table a worker keeps of its sockets that are not at their base
//! ([`Repaced`]); it touches no socket (`sluice-server`'s `worker/pace.rs` makes
//! the calls).
//!
//! A socket's *base* is the rate `[http] limit_rate` set when the connection was
//! taken, or none ([`base`]). A response whose site and length want the base
//! costs nothing, which is every response of a server with one limit for
//! everyone and no `limit_rate_after`. Otherwise:
//! - a response that wants another rate from its first byte: one call before it
//!   (a site with its own `limit_rate`; the next response of the same site on
//!   that connection needs none, since a socket goes back to its base only when
//!   a response wants the base);
//! - a response longer than its `limit_rate_after`: unpaced from the first byte
//!   (a call, unless the socket is unpaced already), paced once that many body
//!   bytes have left the socket (a call; `send::Pace::due` says when).
//!
//! A response whose plan is not [`Plan::is_nothing`] is never a kept answer
//! (`sluice_static::answers`), since a kept answer goes out with no call.

use std::collections::HashMap;

/// The value that tells the kernel "no limit" (`~0U`).
pub const UNPACED: u32 = u32::MAX;

/// A socket's pacing between responses: `[http] limit_rate` from the first byte
/// when it has no `limit_rate_after`, else none (a response past its threshold is
/// paced on its own).
pub fn base(limit_rate: u64, limit_rate_after: u64) -> u32 {
    if limit_rate == 0 || limit_rate_after > 0 {
        UNPACED
    } else {
        to_kernel(limit_rate)
    }
}

fn to_kernel(rate: u64) -> u32 {
    // 0 is "no limit" in the config; the kernel's "no limit" is ~0U, and a rate
    // just below that is as good as none.
    if rate == 0 {
        UNPACED
    } else {
        rate.min(u64::from(UNPACED - 1)) as u32
    }
}

/// The pacing calls one response needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Set this before the first byte.
    pub start: Option<u32>,
    /// Once this many body bytes are sent, set this rate.
    pub switch: Option<(u64, u32)>,
}

impl Plan {
    /// No call at all: the socket's base is what this response wants throughout.
    pub fn is_nothing(&self) -> bool {
        self.start.is_none() && self.switch.is_none()
    }
}

/// The calls a response of `body` bytes needs, on a site limited to `rate`
/// bytes/s (0: none) after its first `after` body bytes, on a socket at `base`.
/// A response with no body (a HEAD, a 304) is never paced: its head is all it
/// sends.
pub fn plan(rate: u64, after: u64, body: u64, base: u32) -> Plan {
    if body == 0 {
        return Plan::default();
    }
    let (first, switch) = if rate == 0 || body <= after {
        (UNPACED, None)
    } else if after == 0 {
        (to_kernel(rate), None)
    } else {
        (UNPACED, Some((after, to_kernel(rate))))
    };
    Plan {
        start: (first != base).then_some(first),
        switch,
    }
}

/// One worker's sockets (by connection slot) not at their base, with the rate
/// each has ([`UNPACED`]: none).
/// Empty on a server with one limit for everyone (or none), so a kept answer
/// pays one emptiness test; an entry costs ~24 bytes while its socket is off its
/// base.
#[derive(Debug, Default)]
pub struct Repaced(HashMap<usize, u32>);

impl Repaced {
    /// The rate `key`'s socket has: its own, or the base.
    pub fn rate(&self, key: usize, base: u32) -> u32 {
        if self.0.is_empty() {
            return base;
        }
        self.0.get(&key).copied().unwrap_or(base)
    }

    pub fn set(&mut self, key: usize, rate: u32, base: u32) {
        if rate == base {
            self.0.remove(&key);
        } else {
            self.0.insert(key, rate);
        }
    }

    /// `key`'s connection is gone: its slot starts at the base again.
    pub fn forget(&mut self, key: usize) {
        if !self.0.is_empty() {
            self.0.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_limit_for_everyone_costs_no_call_per_response() {
        let b = base(1_000_000, 0);
        assert_eq!(b, 1_000_000);
        for body in [0, 1, 100 << 20] {
            assert!(plan(1_000_000, 0, body, b).is_nothing());
        }
        let none = base(0, 0);
        assert_eq!(none, UNPACED);
        assert!(plan(0, 0, 100 << 20, none).is_nothing());
    }

    #[test]
    fn a_threshold_paces_only_past_it() {
        let b = base(500_000, 10 << 20);
        assert_eq!(
            b, UNPACED,
            "a threshold leaves the socket unpaced between responses"
        );
        assert!(
            plan(500_000, 10 << 20, 10 << 20, b).is_nothing(),
            "at the threshold: fast"
        );
        assert_eq!(
            plan(500_000, 10 << 20, (10 << 20) + 1, b),
            Plan {
                start: None,
                switch: Some((10 << 20, 500_000))
            }
        );
        // On a socket paced by [http] (a site with its own threshold): unpaced first.
        assert_eq!(
            plan(500_000, 1000, 5000, 800_000),
            Plan {
                start: Some(UNPACED),
                switch: Some((1000, 500_000))
            }
        );
    }

    #[test]
    fn a_site_with_its_own_rate_sets_and_a_site_without_clears() {
        assert_eq!(plan(300_000, 0, 1, UNPACED).start, Some(300_000));
        assert_eq!(plan(0, 0, 1, 300_000).start, Some(UNPACED));
        assert_eq!(plan(300_000, 0, 1, 300_000).start, None);
        assert!(
            plan(0, 0, 0, 300_000).is_nothing(),
            "no body: nothing to pace"
        );
    }

    #[test]
    fn rates_the_kernel_cannot_take_are_clamped_not_wrapped() {
        assert_eq!(plan(u64::MAX, 0, 1, UNPACED).start, Some(UNPACED - 1));
        assert_eq!(base(1 << 40, 0), UNPACED - 1);
    }

    #[test]
    fn a_socket_off_its_base_is_remembered_with_its_rate() {
        let mut r = Repaced::default();
        assert_eq!(r.rate(7, 100), 100);
        r.set(7, 300, 100);
        assert_eq!((r.rate(7, 100), r.rate(8, 100)), (300, 100));
        r.set(7, 100, 100);
        assert!(r.0.is_empty(), "back at its base: forgotten");
        r.set(9, 300, 100);
        r.forget(9);
        assert_eq!(r.rate(9, 100), 100);
    }
}
