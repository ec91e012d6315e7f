//! The front's signals: a handler per signal sets a flag the loop reads (what
//! came) and writes a byte to a socket pair the loop polls (that something came),
//! so that a signal landing just before `epoll_wait` does not wait for the loop's
//! sleep to end. Owns the handlers' registration and nothing else; costs nothing
//! until a signal comes.

use std::io::{self, Read};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What the signals ask of the front's loop, set by their handlers.
pub(super) struct Signals {
    /// SIGTERM, SIGINT: stop.
    pub(super) stop: Arc<AtomicBool>,
    /// SIGHUP: read the config file again.
    pub(super) reload: Arc<AtomicBool>,
    /// SIGUSR2: start a new binary and hand it everything (`handover`).
    pub(super) upgrade: Arc<AtomicBool>,
    /// SIGUSR1: nothing to do here; say so.
    pub(super) ignored: Arc<AtomicBool>,
    /// Every handler also writes a byte here (the `SIGNAL` token), so that a signal
    /// that lands just before `epoll_wait` still ends its sleep, which is up to
    /// [`IDLE_SWEEP`] long.
    pub(super) wake: std::os::unix::net::UnixStream,
}

impl Signals {
    pub(super) fn register() -> io::Result<Signals> {
        let (wake, tx) = std::os::unix::net::UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        let s = Signals {
            stop: Arc::default(),
            reload: Arc::default(),
            upgrade: Arc::default(),
            ignored: Arc::default(),
            wake,
        };
        for (sig, flag) in [
            (signal_hook::consts::SIGTERM, &s.stop),
            (signal_hook::consts::SIGINT, &s.stop),
            (signal_hook::consts::SIGHUP, &s.reload),
            (signal_hook::consts::SIGUSR1, &s.ignored),
            (signal_hook::consts::SIGUSR2, &s.upgrade),
        ] {
            // The flag first: by the time the byte wakes the loop, it is set.
            signal_hook::flag::register(sig, flag.clone())?;
            signal_hook::low_level::pipe::register(sig, tx.try_clone()?)?;
        }
        Ok(s)
    }

    /// Empty the wake-up socket (the flags say what came).
    pub(super) fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!((&self.wake).read(&mut buf), Ok(n) if n > 0) {}
    }
}
