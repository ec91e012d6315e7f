//! sluice's engine: listeners, per-core workers, the connection state machine,
//! timers, sending, the access log, signals and reload.
//!
//! Owns everything between the socket and the handlers. The flow of one request is
//! drawn in `docs/ARCHITECTURE.md`; in code it is `worker/` (accept, read, parse,
//! send) calling `phases::respond` (methods → rules → static files).
//!
//! Shared state is deliberately small ([`Shared`]): a stop flag, a generation counter
//! and the current [`Snapshot`] behind a mutex that workers touch only when the
//! generation changes (after a reload). Everything else is per worker.
//!
//! Modules, bottom up: `settings` (flags + config file → one config), `snapshot`
//! (what a worker serves with), `shared` (what workers share), `io` (socket reads
//! and the buffer pool), `wheel`, `accesslog`, `disk`, `tls`, `send` (bytes out),
//! `status` and `phases` (a request's answer), `worker` (the connection state
//! machine), `listener`, `systemd`, `privileges`, `logging` (the server's own log
//! and its level), `front` (`sluice condition`), `shm` (what serving processes
//! share), `start` (what serving starts from), `processes` (the master of several
//! serving processes), `worker_threads` (a process's worker threads: start, report,
//! finish) and `supervisor` (the process: workers, signals, reload) at the top.

pub mod accesslog;
pub mod deferral;
pub mod disk;
pub mod front;
pub mod io;
pub mod listener;
pub mod logging;
pub mod phases;
pub mod privileges;
pub mod reloaded;
pub mod send;
pub mod status;
pub mod systemd;
pub mod tls;
pub mod wheel;
pub mod worker;

mod processes;
mod rebuild;
mod settings;
mod shared;
mod shm;
mod snapshot;
mod start;
mod supervisor;
mod upgrade;
mod worker_threads;

pub use rebuild::lower_priority_for_compile;
pub use settings::{load_config, raise_nofile_limit, Overrides};
pub use shared::{Shared, Stats};
pub use snapshot::{static_handler, Site, Snapshot};
pub use supervisor::serve;
