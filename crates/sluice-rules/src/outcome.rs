//! What the rules decided ([`Outcome`]), and its one-line text for `explain` and logs.

use crate::classify;

/// What the rules decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No rule applies (or a `-` rule matched): serve the request as it is.
    Pass,
    Redirect {
        status: u16,
        location: String,
    },
    /// Serve this path (and query) instead.
    Rewrite {
        path: String,
        query: Option<String>,
    },
    Forbidden,
    Gone,
    /// An errant-client rule decided (`classify`): its answer (`None`: serve the
    /// request normally, e.g. `pass date=...`) and a fixed `Date` header, if set.
    Answer {
        errant: Option<classify::Errant>,
        date: Option<std::sync::Arc<str>>,
    },
}
