//! What serving starts from ([`Start`]): everything `supervisor::serve` prepares
//! once (listeners, logs, the compiled snapshot, the shared region) before any worker
//! or serving process exists, which workers one process runs ([`Part`]), and the
//! restart budget both supervisors keep ([`Deaths`]). Data only: `supervisor` runs a
//! process from it, `processes` forks several.

use crate::accesslog;
use crate::settings::Overrides;
use crate::shm::Region;
use crate::snapshot::Snapshot;
use crate::systemd;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Everything the serving processes start from, prepared once (as root, before
/// privileges are dropped) by `supervisor::serve`. With `server.processes > 1` each forked
/// process inherits it: the compiled snapshot is shared copy-on-write.
pub(crate) struct Start {
    /// The program file and arguments this server started with (what SIGUSR2
    /// starts: `upgrade`).
    pub program: Option<crate::upgrade::Program>,
    pub config_path: Option<PathBuf>,
    pub ov: Overrides,
    /// The configuration to serve (replaced by the master on a good reload, so a
    /// process forked later serves the current one).
    pub snap: Arc<Snapshot>,
    pub nofile: u64,
    /// Workers in the whole server, and the processes they are split over.
    pub workers: usize,
    pub processes: usize,
    /// Every worker's listening sockets (by global worker id), owned here so a
    /// worker (or a process) that dies does not close them.
    pub per_worker: Vec<Vec<mio::net::TcpListener>>,
    /// `defer_accept = "auto"` on listeners sluice bound: the deferral when on.
    pub auto_defer: Option<u64>,
    pub logs: Vec<(String, accesslog::LogFile)>,
    pub addrs: Vec<SocketAddr>,
    pub tls_addrs: Vec<SocketAddr>,
    pub root_display: PathBuf,
    pub region: Region,
}

impl Start {
    /// The lines a supervisor (and a person) reads to know the server is up.
    pub fn announce(&self) {
        // Not println!: a closed stdout (a supervisor that read the first line and
        // went away) must not take the server down.
        use std::io::Write;
        let (workers, root) = (self.workers, self.root_display.display());
        let procs = match self.processes {
            1 => String::new(),
            n => format!(" in {n} processes"),
        };
        let mut out = std::io::stdout().lock();
        for a in &self.addrs {
            let scheme = if self.tls_addrs.contains(a) {
                "https"
            } else {
                "http"
            };
            let _ = writeln!(
                out,
                "sluice: serving {root} on {scheme}://{a}/ ({workers} workers{procs})"
            );
        }
        if let Some(f) = &self.ov.from {
            let _ = writeln!(
                out,
                "sluice: serving {root} from {f} ({workers} workers{procs})"
            );
        }
        let _ = out.flush();
        systemd::notify(&format!(
            "READY=1\nSTATUS=serving on {} address(es), {workers} workers{procs}",
            self.addrs.len()
        ));
        // Started by an upgrade: the old server may stop taking connections now.
        crate::upgrade::announce_ready();
    }

    /// Every listening socket's descriptor (what an upgrade hands over).
    pub fn listener_fds(&self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.per_worker
            .iter()
            .flatten()
            .map(|l| l.as_raw_fd())
            .collect()
    }

    /// SIGUSR2: start the program this server started as on its sockets, unless
    /// one is already starting; a start that fails at once is logged.
    pub fn start_upgrade(&self, upgrading: &mut Option<crate::upgrade::Pending>) {
        if upgrading.is_some() {
            tracing::warn!("upgrade: one is already starting");
            return;
        }
        let Some(program) = &self.program else {
            tracing::error!("upgrade: the program file this server started from is unknown");
            return;
        };
        match crate::upgrade::start(program, &self.listener_fds()) {
            Ok(p) => {
                tracing::info!(program = %program.exe.display(), "upgrade: starting the new server on this server's sockets");
                *upgrading = Some(p);
            }
            Err(e) => tracing::error!("upgrade: {e}; still serving"),
        }
    }
}

/// Which of the server's workers one process runs: global ids `first..first+count`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Part {
    /// The process's index (0 when there is one).
    pub process: usize,
    pub first: usize,
    pub count: usize,
}

impl Part {
    pub fn whole(workers: usize) -> Part {
        Part {
            process: 0,
            first: 0,
            count: workers,
        }
    }

    /// Process `p` of `n`: the workers split as evenly as they go.
    pub fn of(p: usize, n: usize, workers: usize) -> Part {
        let first = p * workers / n;
        Part {
            process: p,
            first,
            count: (p + 1) * workers / n - first,
        }
    }
}

/// How often something that is restarted when it dies (a worker thread, a serving
/// process) may die: more than [`Deaths::MAX`] deaths within a minute means something
/// is badly wrong, and the supervisor stops instead of restarting again.
#[derive(Default)]
pub(crate) struct Deaths(std::collections::VecDeque<std::time::Instant>);

impl Deaths {
    pub const MAX: usize = 5;

    /// Count one death now. `Some(n)`: `n` deaths within the last minute, too many.
    pub fn record(&mut self) -> Option<usize> {
        let now = std::time::Instant::now();
        self.0.retain(|t| now.duration_since(*t).as_secs() < 60);
        self.0.push_back(now);
        (self.0.len() > Self::MAX).then_some(self.0.len())
    }
}
