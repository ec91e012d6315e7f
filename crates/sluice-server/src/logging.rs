//! The server's own log on stderr, and the filter `[log] level` sets for it.
//!
//! Owns: the process's `tracing` subscriber (a `fmt` layer under an `EnvFilter`
//! that can be replaced while serving), installed once by [`init`] before the
//! config is read, then set from `[log] level` at start and by every reload
//! ([`apply`]). `SLUICE_LOG`, when set, is the filter for the process's whole life
//! and `[log] level` is ignored (so a test or a debugging session can turn detail
//! on without editing the config). A level is checked when the config is loaded
//! ([`check`]), so a bad one is a `file:line` error at start, in `sluice check`
//! and on a reload (which then keeps the old config), never a silent default.
//!
//! Must not: log anything itself, or be called on a request's path.
//! Costs: nothing per request (nothing on the request path logs); an event that
//! passes its call site's cached interest takes one uncontended read lock.
//! Written on `tracing-subscriber`'s `reload` layer; nothing here is hand-made but
//! the wiring.

use std::sync::OnceLock;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// The replaceable filter, when [`init`] installed one and `SLUICE_LOG` is unset.
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Install the subscriber with `level` until the config says otherwise (or
/// `SLUICE_LOG`, for good): the one setup of every `sluice` command's log. A
/// second call does nothing.
pub fn init(level: &str) {
    let from_env = EnvFilter::try_from_env("SLUICE_LOG").ok();
    let fixed = from_env.is_some();
    let (filter, handle) = reload::Layer::new(from_env.unwrap_or_else(|| EnvFilter::new(level)));
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_target(false),
        )
        .try_init()
        .is_ok();
    if installed && !fixed {
        let _ = FILTER.set(handle);
    }
}

/// The levels a bare word may name.
const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// Whether `level` is a filter `tracing` understands (`"info"`,
/// `"warn,sluice_server=debug"`, ...): the reason if not. A word without `=` must
/// be a level: `tracing` would read `"debg"` as a target's name and then log
/// nothing else, which is never what a typo meant (a target is named with its
/// level: `sluice_server=debug`).
pub fn check(level: &str) -> Result<(), String> {
    let help = "a level (trace, debug, info, warn, error, off) or target=level, comma-separated";
    for d in level.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if !d.contains(['=', '[']) && !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(d)) {
            return Err(format!("{d:?} is not a level: {help}"));
        }
    }
    EnvFilter::builder()
        .parse(level)
        .map(|_| ())
        .map_err(|e| format!("{e}: {help}"))
}

/// Filter the server's log by `level` from now on (a checked level: [`check`]).
/// Nothing changes when `SLUICE_LOG` is set or [`init`] did not run.
pub fn apply(level: &str) {
    if let (Some(h), Ok(f)) = (FILTER.get(), EnvFilter::builder().parse(level)) {
        if h.reload(f).is_err() {
            tracing::warn!("log.level could not be applied");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn levels_and_filters_pass_and_nonsense_does_not() {
        for ok in ["info", "warn", "off", "warn,sluice_server=debug"] {
            assert!(check(ok).is_ok(), "{ok}");
        }
        for bad in ["loud", "info,debg", "sluice_server=verbose", "[span"] {
            assert!(check(bad).is_err(), "{bad}");
        }
    }
}
