//! Bandwidth limits in the send path: when a response past its
//! `limit_rate_after` is switched to its rate ([`Pace::due`]). The calls
//! themselves are the worker's (`worker/pace.rs`); the decision of which rates a
//! response wants is `sluice_condition::pace`'s. No system call here but the
//! `unsent` question the caller answers.

/// A response's pending switch to its rate.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pace {
    /// Past this many body bytes, pace the socket at this rate.
    pub switch: Option<(u64, u32)>,
    /// The socket's unsent bound was lowered to wake this response when the
    /// threshold has left the socket ([`PaceStep::Watch`]): set it back when
    /// the switch is made.
    pub watching: bool,
}

/// How a send turn ended, for [`Pace::due`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaceTurn {
    /// The socket took the turn's share and may take more.
    Yielded,
    /// The socket is full: the next turn comes with a writable edge.
    Blocked,
    /// The response's last bytes are in the socket, or it waits for the disk.
    Ended,
}

/// What [`Pace::due`] asks of the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaceStep {
    Nothing,
    /// Pace it at this rate now; `true`: also set its unsent bound back.
    Switch(u32, bool),
    /// Set its unsent bound to this, so that its writable edge comes when the
    /// threshold has left it.
    Watch(u32),
}

impl Pace {
    /// Bandwidth limits, after a send turn: what to do about a response's
    /// `limit_rate_after`, with `sent` of its body bytes given to the socket
    /// (`turn`: how the turn ended).
    ///
    /// Bytes a socket still holds unsent are paced too once the rate is set, and
    /// a socket whose congestion window is small (after a paced response) can
    /// hold much of the threshold unsent; switching as soon as the threshold is
    /// *in* the socket would pace the fast part. So the switch waits for the
    /// threshold to have *left* the socket (`unsent`, asked only once the
    /// response has given it the threshold). While the socket keeps taking
    /// bytes the next turn looks again; a turn that blocks asks the kernel to
    /// wake it when it has (`Watch`: the unsent bound to set). A response whose
    /// last bytes are in the socket, or that waits for the disk, switches at
    /// once (`Switch`): there may be no next turn to look from, and the limit
    /// is the operator's, a fast start only the client's.
    pub fn due(&mut self, sent: u64, turn: PaceTurn, unsent: impl FnOnce() -> u64) -> PaceStep {
        let Some((at, rate)) = self.switch else {
            return PaceStep::Nothing;
        };
        if sent < at {
            return PaceStep::Nothing;
        }
        let beyond = sent - at;
        if turn != PaceTurn::Ended && unsent() > beyond {
            // The threshold has not left yet: it has once less than `beyond`
            // is unsent.
            return match turn {
                PaceTurn::Blocked if !self.watching => {
                    self.watching = true;
                    PaceStep::Watch(beyond.clamp(1, u64::from(u32::MAX)) as u32)
                }
                _ => PaceStep::Nothing,
            };
        }
        self.switch = None;
        PaceStep::Switch(rate, std::mem::take(&mut self.watching))
    }
}
