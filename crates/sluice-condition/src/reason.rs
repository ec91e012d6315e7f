//! Why a connection was closed. Every close in the server names one, and each
//! worker counts them (the status page shows the counts).

/// The reasons, in the order of their counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// The response was the last one (Connection: close, HTTP/1.0, request limit).
    Done,
    /// The client closed, or the socket failed.
    ClientGone,
    /// A request head (or a body being skipped) was not complete in time.
    HeaderTimeout,
    /// Keep-alive connection idle for keepalive_timeout.
    IdleTimeout,
    /// A response made no progress for send_timeout.
    SendTimeout,
    /// A response's client read below the minimum rate for a whole window.
    SlowRead,
    /// Closed to make room: the oldest idle connection of the heaviest range.
    EvictedIdle,
    /// Closed to make room: the oldest incomplete connection of the heaviest range.
    EvictedIncomplete,
    /// Refused: at the connection limit with nothing to evict.
    AtLimit,
    /// Answered 503: its address range (or, with `cap_address`, its address) is
    /// over its cap.
    RangeCap,
    /// The request was refused (malformed, too large) and the connection closed.
    BadRequest,
    /// Shutdown: idle, or still busy when the grace period ended.
    Shutdown,
    /// An errant-client rule's answer ended it: `drop`, or a tarpit or oversize
    /// answer that ran its course (or was over the tarpit cap).
    Errant,
    /// Answered 503: its complete request waited for a turn (behind
    /// `condition.max_active`) longer than `http.header_timeout`.
    Busy,
    /// A response waiting for the disk (a disk thread reading its range, or its
    /// range refused by a full queue and waiting to ask again) ran out of
    /// `send_timeout` or of its minimum rate, or a request's lookup waited for a
    /// disk thread past `send_timeout` (answered 503 "disk busy"): the disk, not
    /// the client, was too slow. Counted apart so that a stuck disk does not
    /// pass for slow readers.
    DiskStalled,
}

impl CloseReason {
    pub const ALL: [CloseReason; 15] = [
        CloseReason::Done,
        CloseReason::ClientGone,
        CloseReason::HeaderTimeout,
        CloseReason::IdleTimeout,
        CloseReason::SendTimeout,
        CloseReason::SlowRead,
        CloseReason::EvictedIdle,
        CloseReason::EvictedIncomplete,
        CloseReason::AtLimit,
        CloseReason::RangeCap,
        CloseReason::BadRequest,
        CloseReason::Shutdown,
        CloseReason::Errant,
        CloseReason::Busy,
        CloseReason::DiskStalled,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Done => "done",
            CloseReason::ClientGone => "client_gone",
            CloseReason::HeaderTimeout => "header_timeout",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::SendTimeout => "send_timeout",
            CloseReason::SlowRead => "slow_read",
            CloseReason::EvictedIdle => "evicted_idle",
            CloseReason::EvictedIncomplete => "evicted_incomplete",
            CloseReason::AtLimit => "at_limit",
            CloseReason::RangeCap => "range_cap",
            CloseReason::BadRequest => "bad_request",
            CloseReason::Shutdown => "shutdown",
            CloseReason::Errant => "errant",
            CloseReason::Busy => "busy",
            CloseReason::DiskStalled => "disk_stalled",
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn indexes_match_the_table() {
        for (i, r) in super::CloseReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i, "{}", r.as_str());
        }
    }
}
