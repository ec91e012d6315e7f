//! What serving starts from ([`Start`]): everything `supervisor::serve` prepares
//! once (listeners, logs, the compiled snapshot, the shared region) before any worker
//! or serving process exists, which workers one process runs ([`Part`]), and the
//! restart budget both supervisors keep ([`Deaths`]), and how many connections a
//! process may hold ([`connection_limit`]). Data only: `supervisor` runs a process
//! from it, `processes` forks several.

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
        match crate::upgrade::start(program, &self.listener_fds(), &[]) {
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
    /// Its slot in the shared memory (`shm::Region::procs`): `process`, or
    /// `process + processes` for the other generation (a reload that forks new
    /// serving processes while the old ones finish, `processes.rs`).
    pub slot: usize,
}

impl Part {
    pub fn whole(workers: usize) -> Part {
        Part {
            process: 0,
            first: 0,
            count: workers,
            slot: 0,
        }
    }

    /// Process `p` of `n`: the workers split as evenly as they go.
    pub fn of(p: usize, n: usize, workers: usize) -> Part {
        let first = p * workers / n;
        Part {
            process: p,
            first,
            count: (p + 1) * workers / n - first,
            slot: p,
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

/// How many connections one serving process holds at most (`max_conns`: one count
/// for all its workers). Its descriptors are `nofile`, less 64 for files and logs, 64
/// per worker of the server (`all_workers`), and its `listener_fds`; a configured
/// `max_connections` (0: none) is the server's, shared over its `processes`. Never
/// under 16 per worker of this process (`workers`). The count is the process's, not
/// a share per worker: `SO_REUSEPORT` does not spread connections exactly evenly, and
/// a per-worker share would make one worker evict while the process still has
/// descriptors to spare.
pub(crate) fn connection_limit(
    nofile: u64,
    all_workers: usize,
    listener_fds: usize,
    configured: usize,
    processes: usize,
    workers: usize,
) -> usize {
    let fd_room = nofile.saturating_sub(64 + 64 * all_workers as u64 + listener_fds as u64);
    let fd_room = usize::try_from(fd_room).unwrap_or(usize::MAX);
    let wanted = match configured {
        0 => fd_room,
        n => n.div_ceil(processes.max(1)).min(fd_room),
    };
    wanted.max(16 * workers)
}

#[cfg(test)]
mod tests {
    use super::connection_limit;

    #[test]
    fn a_process_holds_what_its_descriptors_leave_room_for() {
        // 20,000 descriptors, two workers in two processes, 4 listening sockets per
        // worker: this process holds 8 originals and its worker's 4 copies.
        let room = 20_000 - (64 + 2 * 64 + 12);
        assert_eq!(connection_limit(20_000, 2, 12, 0, 2, 1), room);
        // A configured limit is the server's, split over its processes...
        assert_eq!(connection_limit(20_000, 2, 12, 30_000, 2, 1), 15_000);
        // ...and never more than the descriptors allow.
        assert_eq!(connection_limit(20_000, 2, 12, 100_000, 2, 1), room);
        // A tiny descriptor limit still leaves each worker of the process 16.
        assert_eq!(connection_limit(100, 2, 12, 0, 1, 2), 32);
    }
}
