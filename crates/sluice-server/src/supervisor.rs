//! The process: [`serve`] binds the listeners (or takes systemd's, or those of the
//! server it replaces: `upgrade`), opens the logs, drops root and maps the shared
//! counters ([`Start`]); then [`run_process`] starts one worker thread per core and
//! waits for signals: SIGHUP reloads (a config with errors keeps the old snapshot
//! serving), SIGUSR1 reopens the access logs, SIGTERM/SIGINT drain and stop
//! (`shutdown_grace`), SIGQUIT drains for `upgrade_grace`, SIGUSR2 starts a new
//! binary on the listeners and quits once it serves. A worker that panics is logged
//! and replaced; too many deaths in a minute stop the process for systemd (or the
//! master) to restart.
//! With `server.processes > 1`, `processes` forks that many serving processes from
//! the prepared [`Start`], each running [`run_process`] for its share of the workers.
//!
//! The main thread sleeps until something happens: signals reach it from a thread of
//! their own on the channel the workers report on, and it wakes by itself once a
//! second for the status page's rate sample (every 100 ms while a new binary starts
//! on its sockets). Setting `stop` wakes the workers (`Shared::wake_workers`), whose
//! idle sleep is up to a second.

use crate::settings::{load_config, raise_nofile_limit, Overrides};
use crate::shared::Shared;
use crate::shm::Region;
use crate::snapshot::Snapshot;
use crate::start::{connection_limit, Deaths, Part, Start};
use crate::worker_threads::{all_ready, finish_workers, spawn_worker, Event, WorkerSpawn};
use crate::{accesslog, listener, privileges, systemd, upgrade};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Run the server until SIGTERM/SIGINT. SIGHUP reloads `config_path`; SIGUSR1 reopens
/// the access log (log rotation).
pub fn serve(config_path: Option<PathBuf>, ov: Overrides) -> Result<(), String> {
    // Before anything else (and before any thread): sockets systemd passed us, or
    // the server this one replaces (`upgrade`), and how this process was started
    // (the program file a later upgrade starts).
    let activated = systemd::listen_fds()?;
    let handed = upgrade::inherited()?;
    if !activated.is_empty() && !handed.is_empty() {
        return Err("sockets passed both by systemd (LISTEN_FDS) and by an upgrade".into());
    }
    let program = upgrade::Program::this();
    let nofile = raise_nofile_limit();
    let cfg = load_config(config_path.as_deref(), &ov)?;
    crate::logging::apply(&cfg.log.level);
    let workers = cfg.worker_count();
    let processes = cfg.process_count();
    if processes > workers {
        return Err(format!(
            "server.processes = {processes} is more than the {workers} workers: each process runs at least one worker"
        ));
    }
    // The counters, cap tables and rate cells every serving process shares (one
    // process: they are simply this process's). Before the rules are compiled: their
    // rate conditions count in it.
    let region = Region::map(workers, processes).map_err(|e| format!("shared memory: {e}"))?;
    let snap = Snapshot::build(cfg, Some(region.rates))?;
    // HTTP and HTTPS listeners side by side; a worker tells them apart by address.
    let tls_addrs: Vec<SocketAddr> = snap.config.tls.listen.clone();
    let mut addrs: Vec<SocketAddr> = snap
        .config
        .server
        .listen
        .iter()
        .copied()
        .chain(tls_addrs.iter().copied())
        .collect();
    if ov.from.is_some() {
        // A backend of a front process: every connection comes from it.
        addrs.clear();
    }
    if let Some(summary) = &snap.tls_summary {
        tracing::info!(%summary, "HTTPS");
        match sluice_tls::probe_kernel_tls(snap.config.tls.ktls) {
            sluice_tls::KernelTls::Available => tracing::info!(
                "kernel TLS is available, but sluice does not hand sessions to it yet: records are encrypted in user space"
            ),
            sluice_tls::KernelTls::Unavailable(why) => tracing::info!(
                %why,
                "kernel TLS unavailable: records are encrypted in user space (file bodies read, not sendfile)"
            ),
        }
    }

    // Bind everything before spawning, so a taken port is one clear error.
    // Never longer than the head deadline it stands in front of.
    let defer = snap
        .config
        .condition
        .defer_accept
        .initial_secs(snap.config.http.header_timeout);
    // `defer_accept = "auto"` switches deferral on the listeners sluice binds or
    // an upgrade hands over (systemd's sockets keep what their unit says).
    let from_upgrade = !handed.is_empty();
    let auto_defer = (activated.is_empty()
        && snap.config.condition.defer_accept == sluice_config::DeferAccept::Auto
        && defer > 0)
        .then_some(defer);
    // Every socket starts at the start bound; `Worker::fit_unsent` raises a fast reader's.
    let unsent_max = sluice_condition::slowread::unsent_start(snap.config.condition.unsent_max);
    let inherited = if activated.is_empty() {
        handed
    } else {
        activated
    };
    let (per_worker, addrs) = if inherited.is_empty() {
        (bind_all(&addrs, workers, &snap, defer, unsent_max)?, addrs)
    } else {
        // Sockets passed in (server.listen is not used): by systemd, or by the
        // server this one replaces.
        let passed = listener::deal_out(inherited, workers, unsent_max)?;
        tracing::info!(
            addresses = passed.1.len(),
            from = if from_upgrade {
                "the server this one replaces"
            } else {
                "systemd"
            },
            "serving on the passed sockets"
        );
        passed
    };
    let logs = open_logs(&snap)?;
    set_scheduling(&snap)?;
    // Everything that needs root (ports below 1024, log files in /var/log) is open:
    // become the serving user before any worker exists.
    drop_root(&snap)?;
    let root_display = std::fs::canonicalize(&snap.config.server.root)
        .unwrap_or_else(|_| snap.config.server.root.clone());
    let start = Start {
        program,
        auto_defer,
        config_path,
        ov,
        snap: Arc::new(snap),
        nofile,
        workers,
        processes,
        per_worker,
        logs,
        addrs,
        tls_addrs,
        root_display,
        region,
    };
    if processes == 1 {
        let mut start = start;
        return run_process(&mut start, Part::whole(workers), None);
    }
    crate::processes::run(start, run_process)
}

/// Become `server.user` (or stay root only with `allow_root`), then check that the
/// tree is readable as that user: one that is not would answer 403 to everything.
fn drop_root(snap: &Snapshot) -> Result<(), String> {
    if let Some(acct) = privileges::plan(
        snap.config.server.user.as_deref(),
        snap.config.server.allow_root,
    )? {
        privileges::switch_to(&acct).map_err(|e| format!("dropping root: {e}"))?;
        tracing::info!(user = %acct.name, uid = acct.uid, gid = acct.gid, "serving as an unprivileged user");
        // A tree the user cannot read would answer 403 to everything: say so now.
        if let Err(e) = std::fs::read_dir(&snap.config.server.root) {
            return Err(format!(
                "root {}: {e} (as user {}; make the tree readable to it, name another with server.user, or set allow_root = true)",
                snap.config.server.root.display(),
                acct.name
            ));
        }
    }
    Ok(())
}

/// Bind every worker's listening sockets: `listen_sockets` per address per worker,
/// each with its own SYN and accept queues (each capped by net.core.somaxconn).
/// Every address is checked free first, so a taken port is one clear error.
fn bind_all(
    addrs: &[SocketAddr],
    workers: usize,
    snap: &Snapshot,
    defer: u64,
    unsent_max: u32,
) -> Result<Vec<Vec<mio::net::TcpListener>>, String> {
    for a in addrs {
        listener::ensure_free(*a).map_err(|e| format!("cannot listen on {a}: {e}"))?;
    }
    let mut per_worker = Vec::with_capacity(workers);
    for _ in 0..workers {
        let mut ls = Vec::new();
        for a in addrs {
            for _ in 0..snap.config.server.listen_sockets {
                ls.push(
                    listener::bind(*a, 4096, defer, unsent_max)
                        .map_err(|e| format!("cannot listen on {a}: {e}"))?,
                );
            }
        }
        per_worker.push(ls);
    }
    Ok(per_worker)
}

/// Every access log any site names (the main log first), each opened once, while
/// the server may still be root (log files in /var/log).
fn open_logs(snap: &Snapshot) -> Result<Vec<(String, accesslog::LogFile)>, String> {
    let mut logs: Vec<(String, accesslog::LogFile)> = Vec::new();
    for site in &snap.sites {
        if let Some(p) = &site.conf.access_log {
            if !logs.iter().any(|(q, _)| q == p) {
                let f = accesslog::LogFile::open(PathBuf::from(p))
                    .map_err(|e| format!("access log {p}: {e}"))?;
                logs.push((p.clone(), f));
            }
        }
    }
    Ok(logs)
}

/// `server.priority` and `server.sched_slice`, set once before any worker exists:
/// every worker and process inherits them. A raised priority needs root; a custom
/// slice needs no privilege, and a kernel before 6.12 has none (a warning).
fn set_scheduling(snap: &Snapshot) -> Result<(), String> {
    if snap.config.server.priority != 0 {
        privileges::set_priority(snap.config.server.priority)?;
        tracing::info!(
            priority = snap.config.server.priority,
            "serving at this scheduling priority"
        );
    }
    let slice = snap.config.server.sched_slice;
    if !slice.is_zero() {
        if privileges::set_sched_slice(slice)? {
            tracing::info!(
                ?slice,
                "serving threads ask the scheduler for this time slice"
            );
        } else {
            tracing::warn!(
                ?slice,
                "server.sched_slice has no effect on this kernel (custom slices came with Linux 6.12's EEVDF scheduler)"
            );
        }
    }
    Ok(())
}

/// Serve with the workers of `part` until SIGTERM/SIGINT. `managed`: this is one
/// of several processes; it reports that it is ready (or why it cannot start) on
/// this socket to the master, which talks to systemd and prints the addresses.
pub(crate) fn run_process(
    start: &mut Start,
    part: Part,
    managed: Option<std::os::unix::net::UnixStream>,
) -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGQUIT])
            .map_err(|e| format!("signals: {e}"))?;
    // Only the signal thread (below) takes these. Every other thread of this
    // process blocks them: this one, and the workers and pools it starts inherit its
    // mask. With one thread taking them, the kernel hands them over in the order
    // they were sent, and signals pending together lowest number first (SIGUSR2
    // before SIGTERM). When any thread could take them, two signals sent back to
    // back could run their handlers on two threads in either order. A SIGTERM could
    // then end the loop before the SIGUSR2 sent just before it was seen. (A master
    // blocked them around the fork already; one that came in between, or during
    // start-up, waits for the signal thread.)
    crate::processes::block_signals();
    let workers = part.count;
    let log_writers = start
        .logs
        .iter()
        .map(|(p, f)| {
            Ok((
                p.clone(),
                f.start(&start.region.stats[part.first].log_lost)
                    .map_err(|e| format!("access log {p}: {e}"))?,
            ))
        })
        .collect::<Result<Vec<(String, accesslog::Writer)>, String>>()?;
    let ov = &start.ov;
    // Each process holds every worker's listeners as originals, and its own
    // workers' as their copies.
    let listener_fds: usize = start.per_worker.iter().map(|l| l.len()).sum::<usize>()
        + start.per_worker[part.first..part.first + part.count]
            .iter()
            .map(|l| l.len())
            .sum::<usize>();
    let max_conns = connection_limit(
        start.nofile,
        start.workers,
        listener_fds,
        start.snap.config.condition.max_connections,
        start.processes,
        workers,
    );
    let mut shared = Shared::new(
        start.snap.clone(),
        &start.region,
        part.slot,
        workers,
        max_conns,
        max_conns * start.processes,
        start.nofile,
    );
    if let Some(f) = &ov.from {
        Arc::get_mut(&mut shared).expect("not shared yet").from =
            Some(sluicecc::proto::unix_path(f).to_path_buf());
    }

    // What the main thread waits for: workers' reports, and (once all are ready)
    // signals, forwarded by a thread of their own.
    let (exit_tx, exit_rx) = std::sync::mpsc::channel::<Event>();
    // `i`: the worker's index in this process; its id is global (counters, logs).
    let spawn = |i: usize| -> Result<std::thread::JoinHandle<()>, String> {
        let id = part.first + i;
        // Each worker gets its own descriptors for the listeners; the originals stay
        // here, so a worker that dies does not close a listening socket (nor lose the
        // connections waiting in its backlog) and its replacement takes them over.
        let mut ls = Vec::with_capacity(start.per_worker[id].len());
        for l in &start.per_worker[id] {
            ls.push(listener::clone_listener(l).map_err(|e| format!("worker {id}: {e}"))?);
        }
        spawn_worker(WorkerSpawn {
            id,
            listeners: ls,
            auto_defer: start.auto_defer,
            shared: shared.clone(),
            logs: log_writers
                .iter()
                .map(|(p, w)| (p.clone(), w.handle()))
                .collect(),
            max_conns,
            exits: exit_tx.clone(),
        })
    };
    let mut threads = Vec::with_capacity(workers);
    for i in 0..workers {
        threads.push(Some(spawn(i)?));
    }
    if let Err(e) = all_ready(&exit_rx, workers) {
        shared.stop.store(true, Ordering::Relaxed);
        shared.wake_workers();
        return Err(e);
    }
    // Signals that came during start-up were kept for this thread to pass on: it
    // is the one thread that lets them in.
    let signals_handle = signals.handle();
    let tx = exit_tx.clone();
    let signal_thread = std::thread::Builder::new()
        .name("sluice-signals".into())
        .spawn(move || {
            crate::processes::unblock_signals();
            for sig in signals.forever() {
                if tx.send(Event::Signal(sig)).is_err() {
                    break;
                }
            }
        });
    let signal_thread = match signal_thread {
        Ok(t) => t,
        Err(e) => {
            shared.stop.store(true, Ordering::Relaxed);
            shared.wake_workers();
            return Err(format!("spawn: {e}"));
        }
    };
    match &managed {
        None => start.announce(),
        Some(m) => {
            use std::io::Write;
            let _ = (&*m).write_all(b"R");
        }
    }

    // The main thread's loop: signals, and worker supervision. A worker that panics
    // (a bug: nothing a client sends should do that) is logged loudly and replaced
    // at once; its connections are lost, the listeners are not. More than
    // `Deaths::MAX` deaths within a minute means something is badly wrong: the process
    // stops and exits non-zero, so a supervisor (systemd, or the master of several
    // serving processes) restarts it whole.
    let mut deaths = Deaths::default();
    let mut failure: Option<String> = None;
    let mut next_sample = std::time::Instant::now();
    // A new binary starting on our sockets (SIGUSR2), until it serves or fails.
    let mut upgrading: Option<upgrade::Pending> = None;
    let mut handed_over = false;
    // Snapshots a reload replaced, until no worker holds them (`rebuild`).
    let mut retiring = crate::rebuild::Retiring::default();
    // SIGUSR1, while serving and while finishing: every access log by its path.
    let reopen_logs = || {
        for (_, w) in &log_writers {
            w.reopen();
        }
    };
    'main: loop {
        // The status page's rates: one sample of the summed counters a second.
        let now = std::time::Instant::now();
        if now >= next_sample {
            next_sample += std::time::Duration::from_secs(1);
            retiring.sweep();
            shared
                .board
                .sample(&sluice_status::Totals::sum(shared.stats));
        }
        if upgrade::served(&mut upgrading, crate::upgrade::FINISHING) {
            handed_over = true;
            shared.quit.store(true, Ordering::Relaxed);
            break 'main;
        }
        // Asleep until the next sample, a signal or a worker's report; a new binary
        // starting on our sockets is looked at every 100 ms until it serves.
        let mut wait = next_sample.saturating_duration_since(now);
        if upgrading.is_some() {
            wait = wait.min(std::time::Duration::from_millis(100));
        }
        match exit_rx.recv_timeout(wait) {
            Ok(Event::Signal(sig)) => match sig {
                SIGHUP => {
                    if managed.is_none() {
                        systemd::reloading();
                    }
                    // Under a master: which of its reloads this is (it wrote that
                    // before its signal; two signals may arrive as one), confirmed
                    // once made, so that its `READY=1` waits for every process.
                    let slot = &start.region.procs[part.slot];
                    let asked = slot.reload_asked.load(Ordering::Acquire);
                    let began = crate::reloaded::Began::now();
                    let made = reload(
                        &shared,
                        start.config_path.as_deref(),
                        ov,
                        managed.is_none(),
                        &mut retiring,
                    );
                    slot.reload_done.store(asked, Ordering::Release);
                    if managed.is_none() {
                        systemd::notify("READY=1");
                        // (Under a master, the master answers `sluice reload`.)
                        began.tell(&made);
                    }
                }
                SIGUSR1 => reopen_logs(),
                SIGUSR2 if managed.is_some() => {
                    tracing::warn!("SIGUSR2 upgrades the whole server: send it to the master")
                }
                SIGUSR2 => start.start_upgrade(&mut upgrading),
                SIGQUIT => {
                    tracing::info!("quitting: finishing in-flight responses (upgrade_grace)");
                    shared.quit.store(true, Ordering::Relaxed);
                    break 'main;
                }
                _ => {
                    tracing::info!("stopping: finishing in-flight responses");
                    break 'main;
                }
            },
            Ok(Event::Panicked(id, msg)) | Ok(Event::Failed(id, msg)) => {
                shared.stats[id].restarts.fetch_add(1, Ordering::Relaxed);
                let i = id - part.first;
                if let Some(t) = threads[i].take() {
                    let _ = t.join();
                }
                if let Some(n) = deaths.record() {
                    tracing::error!(
                        worker = id,
                        "worker died ({msg}); {n} deaths within a minute: stopping the server"
                    );
                    failure = Some(format!(
                        "workers died {n} times within a minute (last: {msg})"
                    ));
                    break 'main;
                }
                tracing::error!(worker = id, "worker died ({msg}); restarting it");
                match spawn(i) {
                    Ok(t) => threads[i] = Some(t),
                    Err(e) => {
                        failure = Some(format!("cannot restart worker {id}: {e}"));
                        break 'main;
                    }
                }
            }
            Ok(Event::Ready(id)) => tracing::warn!(worker = id, "worker restarted"),
            // The next sample, or a look at an upgrade.
            Err(_) => {}
        }
    }
    if managed.is_none() && !handed_over {
        systemd::notify("STOPPING=1");
    }
    if !handed_over {
        if let Some(p) = upgrading.take() {
            // Stopped while a new binary was starting on our sockets: it stops too
            // (before, it went on serving, a server nobody had asked to keep).
            p.cancel();
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    shared.wake_workers();
    // Close our copies of the listening sockets now, so that once the workers close
    // theirs new connections are refused instead of queueing in a backlog nobody reads.
    start.per_worker.clear();
    finish_workers(threads, &exit_rx, &shared, reopen_logs);
    signals_handle.close();
    let _ = signal_thread.join();
    for (_, w) in log_writers {
        w.finish();
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// SIGHUP in a serving process: the new config, or the old one if the new is bad
/// (then `Err` with why).
/// `tell` (false in a process a master runs: the master has said it) warns about
/// what waits for a restart.
/// The snapshot it replaces goes to `retiring` (`rebuild`: dropped and its memory
/// returned once no worker holds it).
fn reload(
    shared: &Shared,
    path: Option<&Path>,
    ov: &Overrides,
    tell: bool,
    retiring: &mut crate::rebuild::Retiring,
) -> Result<(), String> {
    let (old, _) = shared.current();
    let result = crate::rebuild::build_beside(path, ov, Some(shared.rates), Arc::clone(&old));
    match result {
        Ok(snap) => {
            if tell {
                old.warn_restart_only(&snap);
            }
            crate::logging::apply(&snap.config.log.level);
            let c = &snap.config.condition;
            shared
                .caps
                .set_limits(crate::shared::cap_limits(c, shared.server_connections));
            if let Some(pool) = &shared.disk {
                pool.know(&snap.devices);
            }
            shared.replace(snap);
            retiring.push(old);
            tracing::info!("reloaded configuration");
            Ok(())
        }
        Err(e) => {
            tracing::error!("reload failed, still serving the previous configuration: {e}");
            Err(e)
        }
    }
}
