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
    /// The rules went round more often than a rule's `N=rounds` allows (500,
    /// as Apache answers it).
    LoopLimit,
    /// An errant-client rule decided (`classify`): its answer (`None`: serve the
    /// request normally, e.g. `pass date=...`) and a fixed `Date` header, if set.
    Answer {
        errant: Option<classify::Errant>,
        date: Option<std::sync::Arc<str>>,
    },
}

/// The one-line text of an outcome, as `explain` prints it.
pub fn outcome_text(o: &Outcome) -> String {
    match o {
        Outcome::Pass => "pass (served as it is)".into(),
        Outcome::Redirect { status, location } => format!("{status} redirect to {location}"),
        Outcome::Rewrite {
            path,
            query: Some(q),
        } => format!("internal rewrite to {path}?{q}"),
        Outcome::Rewrite { path, query: None } => format!("internal rewrite to {path}"),
        Outcome::Forbidden => "403 Forbidden".into(),
        Outcome::Gone => "410 Gone".into(),
        Outcome::LoopLimit => {
            "500 Internal Server Error (a rule's [N] went round too often)".into()
        }
        Outcome::Answer { errant, date } => {
            use crate::classify::Errant as E;
            let what = match errant {
                None => "pass (served as it is)".to_string(),
                Some(E::Deny) => "deny (403)".into(),
                Some(E::Drop) => "drop (close, no response)".into(),
                Some(E::Substitute { body, .. }) => {
                    format!("substitute ({} bytes, 200)", body.len())
                }
                Some(E::Tarpit {
                    text,
                    every_ms,
                    for_ms,
                }) => {
                    format!("tarpit ({text:?} every {every_ms} ms for {for_ms} ms)")
                }
                Some(E::Loop) => "loop (302 to itself, fresh query)".into(),
                Some(E::Oversize { bytes, for_ms }) => {
                    format!("oversize (cut at {bytes} bytes or {for_ms} ms)")
                }
                Some(E::Limited { retry_after_s }) => {
                    format!("limit exceeded (429, Retry-After: {retry_after_s})")
                }
            };
            match date {
                Some(d) => format!("{what}, Date: {d}"),
                None => what,
            }
        }
    }
}
