//! `server.processes > 1`: the master. It forks the serving processes from the
//! prepared [`Start`] (listeners bound, logs open, root dropped, rules compiled:
//! every process shares the compiled snapshot copy-on-write), forwards signals to
//! them, and replaces one that dies.
//!
//! Why processes at all: a process's descriptor limit (here 20,000, not raisable)
//! caps the connections one process holds; two processes hold twice as many, as
//! nginx's worker processes do. The listeners are `SO_REUSEPORT` sockets, one set per
//! worker, bound here and inherited, so the kernel spreads connections over every
//! process's workers and a dead process's backlog waits for its replacement. The
//! counters and the range-cap tables are in shared memory (`shm`), so the status page
//! and the caps are the whole server's. What stays per process: the descriptor
//! limit and `max_connections` (split evenly), the conditioning trees (a range's
//! connections spread over all workers, as with threads), the status page's top
//! lists and `process` block (the answering process's).
//!
//! The master serves nothing and runs no thread that could hold a lock when it
//! forks: it blocks the signals it handles and takes them with `sigtimedwait`, so
//! a fork never copies a signal handler's state. Its one other thread is the last
//! reload's compile thread, parked on a channel with nothing held
//! (`rebuild::build_parked`: it keeps that compile's malloc arena from the next
//! compile). A forked process registers its own handlers and then unblocks the
//! signals ([`unblock_signals`]).
//!
//! Signals to the master: SIGHUP checks the configuration (an error is logged and
//! nothing changes; otherwise the master keeps the new snapshot for processes it
//! forks later) and passes SIGHUP on, so each process reloads as a single process
//! does, and tells systemd `READY=1` once every process has confirmed it in its
//! shared slot (`shm::ProcSlot::reload_done`), so `systemctl reload` returns when
//! the whole server serves the new configuration. A reload that compiled at least
//! `server.reload_fork_rules` rules instead forks a new generation of serving
//! processes from the new snapshot, into the other half of the process slots
//! (`shm::generations`), and sends the old generation SIGQUIT
//! ([`fork_generation`]); the old processes finish their responses and are reaped,
//! not replaced. SIGUSR1 is passed on (each process reopens its logs), and the
//! master reopens its own copies, which processes forked later start from;
//! SIGTERM/SIGINT are passed on as SIGTERM, and the
//! master waits for every process to finish (SIGQUIT: passed on as SIGQUIT,
//! responses in flight get `upgrade_grace`); SIGUSR2 starts a new binary on the
//! listeners (`upgrade`), and once it serves this server quits. A process that
//! exits on its own is forked again (more than five times in a minute stops the
//! server). A serving process whose master is killed gets SIGTERM
//! (`PR_SET_PDEATHSIG`) and drains.
//!
//! Cost: nothing on the request path. Memory: the processes share the master's
//! compiled rules (the master sorts its allocator's free lists before it forks,
//! `rebuild::settle_heap`, or each process's own allocations would unshare them),
//! and go on sharing them across reloads that leave the rules files as they were.
//! A reload that changes them compiles in the master (on a thread at nice +10,
//! `rebuild`). Below `reload_fork_rules` each process then compiles them too and
//! holds a copy of its own; at or above it, a new generation shares the master's
//! compile and the old one's memory goes when it exits. Why the threshold: a fork
//! costs the processes their caches and their idle keep-alive connections, and an
//! old generation holds its memory until its last download ends (up to
//! `upgrade_grace`); compiling a few thousand rules costs each process less. Why
//! two generations and not more: the slots are fixed in the shared mapping, so a
//! third would reuse a draining process's; such a reload compiles in place.

use crate::start::{Deaths, Part, Start};
use crate::systemd;
use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long the master waits for every serving process to make a reload before
/// it tells systemd the reload is done anyway (a process stuck longer is logged).
/// A million regex rules compile in about 11 s on an idle core, and each process
/// compiles them at nice +10 (`rebuild`): 90–118 s here beside a busy client
/// (docs/BENCHMARKS.md, "The fortieth session: reloading a million rules").
const RELOAD_WAIT: Duration = Duration::from_secs(300);

/// The signals the master handles (blocked in it, and in a process until that
/// process has its own handlers).
fn handled() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set; sigaddset only adds valid numbers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGQUIT,
            libc::SIGCHLD,
        ] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

fn mask(how: libc::c_int) {
    let set = handled();
    // SAFETY: a valid set; the old mask is not wanted.
    unsafe { libc::pthread_sigmask(how, &set, std::ptr::null_mut()) };
}

/// Keep the handled signals out of the calling thread and of every thread it
/// starts from now on: a serving process's workers, disk threads and log
/// writers. Its signal thread alone lets them in ([`unblock_signals`]).
pub(crate) fn block_signals() {
    mask(libc::SIG_BLOCK);
}

/// Let the handled signals into the calling thread (a serving process's signal
/// thread). Harmless where they were never blocked.
pub(crate) fn unblock_signals() {
    mask(libc::SIG_UNBLOCK);
}

/// One serving process as the master sees it.
struct Child {
    pid: libc::pid_t,
    part: Part,
}

/// How a forked process serves its part (`supervisor::run_process`): it reports on
/// the socket that it is ready, or why it cannot start.
pub(crate) type Serve = fn(&mut Start, Part, Option<UnixStream>) -> Result<(), String>;

/// Run the master until SIGTERM/SIGINT.
pub(crate) fn run(mut start: Start, serve: Serve) -> Result<(), String> {
    let n = start.processes;
    mask(libc::SIG_BLOCK);
    let mut children: Vec<Child> = Vec::with_capacity(n);
    // What the compile freed is sorted here, once, not in each process (`rebuild`).
    crate::rebuild::settle_heap();
    for p in 0..n {
        let part = Part::of(p, n, start.workers);
        match fork_serving(&mut start, part, serve) {
            Ok(pid) => children.push(Child { pid, part }),
            Err(e) => {
                stop_all(&children);
                return Err(e);
            }
        }
    }
    start.announce();

    let mut deaths = Deaths::default();
    let mut failure: Option<String> = None;
    let set = handled();
    // A new binary starting on our sockets (SIGUSR2), until it serves or fails; and
    // how the processes are told to stop (SIGQUIT: with `upgrade_grace`).
    let mut upgrading: Option<crate::upgrade::Pending> = None;
    let mut handed_over = false;
    let mut stop_with = libc::SIGTERM;
    // Reloads asked of the serving processes so far, and the one not yet made by
    // all of them with how long the master waits for it (`READY=1` waits too).
    let mut reloads = 0u64;
    // The parked thread whose arena holds the snapshot in use (`rebuild::build_parked`).
    let mut compiled_by = crate::rebuild::Parked::none();
    // Processes a reload replaced (`fork_generation`), finishing their responses.
    let mut draining: Vec<Child> = Vec::new();
    let mut confirming: Option<(u64, std::time::Instant, crate::reloaded::Began)> = None;
    'main: loop {
        let within = match (&upgrading, &confirming) {
            (_, Some(_)) => Duration::from_millis(20),
            (Some(_), None) => Duration::from_millis(100),
            (None, None) => Duration::from_secs(1),
        };
        let sig = wait_signal(&set, within);
        match sig {
            Some(libc::SIGHUP) => {
                systemd::reloading();
                let began = crate::reloaded::Began::now();
                let rates = Some(start.region.rates);
                let previous = Arc::clone(&start.snap);
                let (built, thread) = crate::rebuild::build_parked(
                    start.config_path.as_deref(),
                    &start.ov,
                    rates,
                    previous,
                );
                match built {
                    Ok(snap) => {
                        start.snap.warn_restart_only(&snap);
                        crate::logging::apply(&snap.config.log.level);
                        let compiled = snap.rules_compiled_since(&start.snap);
                        let fork = compiled > 0 && compiled >= snap.config.server.reload_fork_rules;
                        // The master alone holds its snapshot (each process has its
                        // own copy): the old one goes now, and its memory with it.
                        let old = std::mem::replace(&mut start.snap, Arc::new(snap));
                        crate::rebuild::drop_beside(vec![old], true);
                        // Its compile's thread can go now, and this one's is kept
                        // (`rebuild::build_parked`: the next compile, another arena).
                        drop(std::mem::replace(&mut compiled_by, thread));
                        // Processes forked from now on share the new snapshot.
                        crate::rebuild::settle_heap();
                        reloads += 1;
                        for p in start.region.procs {
                            p.reload_asked.store(reloads, Ordering::Release);
                        }
                        // Many rules compiled: new processes share the master's
                        // compile, rather than each process compiling its own copy.
                        let forked = fork
                            && match fork_generation(
                                &mut start,
                                &mut children,
                                &mut draining,
                                serve,
                            ) {
                                Ok(()) => {
                                    tracing::info!(rules = compiled, "reloaded: new serving processes forked; the old ones finish their responses in flight (upgrade_grace)");
                                    true
                                }
                                Err(e) => {
                                    tracing::warn!(rules = compiled, "{e}; each serving process compiles the rules itself instead");
                                    false
                                }
                            };
                        if forked {
                            began.tell(&Ok(()));
                        } else {
                            signal_all(&children, libc::SIGHUP);
                            confirming =
                                Some((reloads, std::time::Instant::now() + RELOAD_WAIT, began));
                        }
                    }
                    Err(e) => {
                        tracing::error!(
                            "reload failed, still serving the previous configuration: {e}"
                        );
                        began.tell(&Err(e));
                    }
                }
                if confirming.is_none() {
                    systemd::notify("READY=1");
                }
            }
            Some(libc::SIGUSR1) => {
                // Processes forked from now on (a reload's, a replacement) write
                // to the files now at the logs' paths too.
                for (_, f) in &mut start.logs {
                    f.reopen();
                }
                signal_all(&children, libc::SIGUSR1);
                signal_all(&draining, libc::SIGUSR1);
            }
            Some(libc::SIGUSR2) => start.start_upgrade(&mut upgrading),
            Some(libc::SIGQUIT) => {
                tracing::info!("quitting: finishing in-flight responses (upgrade_grace)");
                stop_with = libc::SIGQUIT;
                break 'main;
            }
            Some(libc::SIGTERM) | Some(libc::SIGINT) => {
                tracing::info!("stopping: finishing in-flight responses");
                break 'main;
            }
            _ => {}
        }
        if let Some((n, until, began)) = confirming {
            let behind: Vec<libc::pid_t> = children
                .iter()
                .filter(|c| {
                    start.region.procs[c.part.slot]
                        .reload_done
                        .load(Ordering::Acquire)
                        < n
                })
                .map(|c| c.pid)
                .collect();
            if behind.is_empty() || std::time::Instant::now() >= until {
                if behind.is_empty() {
                    began.tell(&Ok(()));
                } else {
                    tracing::warn!(pids = ?behind, "serving processes have not reloaded within {RELOAD_WAIT:?}; telling systemd the reload is done");
                    began.tell(&Err(format!(
                        "serving processes {behind:?} have not reloaded within {RELOAD_WAIT:?}"
                    )));
                }
                systemd::notify("READY=1");
                confirming = None;
            }
        }
        if crate::upgrade::served(&mut upgrading, crate::upgrade::FINISHING) {
            handed_over = true;
            stop_with = libc::SIGQUIT;
            break 'main;
        }
        // Reap: a serving process that exited while the server runs is replaced;
        // one an earlier reload replaced has finished its responses.
        while let Some((pid, how)) = reap(libc::WNOHANG) {
            if let Some(i) = draining.iter().position(|c| c.pid == pid) {
                let old = draining.remove(i);
                start.region.procs[old.part.slot].clear();
                tracing::info!(
                    pid,
                    "a serving process a reload replaced has finished ({how})"
                );
                continue;
            }
            let Some(i) = children.iter().position(|c| c.pid == pid) else {
                continue;
            };
            let part = children.remove(i).part;
            if let Some(n) = deaths.record() {
                tracing::error!(
                    pid,
                    "serving process {how}; {n} deaths within a minute: stopping the server"
                );
                failure = Some(format!(
                    "serving processes died {n} times within a minute (last: {how})"
                ));
                break 'main;
            }
            tracing::error!(pid, workers = ?(part.first..part.first + part.count), "serving process {how}; starting another");
            if let Some(s) = start.region.stats.get(part.first) {
                s.restarts
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            match fork_serving(&mut start, part, serve) {
                Ok(pid) => children.push(Child { pid, part }),
                Err(e) => {
                    failure = Some(format!("cannot restart a serving process: {e}"));
                    break 'main;
                }
            }
        }
    }
    if !handed_over {
        systemd::notify("STOPPING=1");
        if let Some(p) = upgrading.take() {
            // Stopped while a new binary was starting on our sockets: it stops too
            // (before, it went on serving, a server nobody had asked to keep).
            p.cancel();
        }
    }
    signal_all(&children, stop_with);
    // Those a reload replaced are quitting already: SIGTERM shortens their grace.
    if stop_with == libc::SIGTERM {
        signal_all(&draining, libc::SIGTERM);
    }
    children.append(&mut draining);
    // Close the master's copies of the listeners, so that once the processes close
    // theirs new connections are refused instead of queueing.
    start.per_worker.clear();
    // Wait for every serving process (each leaves `children` once reaped);
    // SIGTERM/SIGINT during a quit pass SIGTERM on, which shortens their grace to
    // `shutdown_grace`, and SIGUSR1 is passed on (log rotation while an old server
    // finishes its downloads).
    while !children.is_empty() {
        match wait_signal(&set, Duration::from_millis(200)) {
            Some(libc::SIGTERM | libc::SIGINT) if stop_with == libc::SIGQUIT => {
                tracing::info!("stopping sooner: responses in flight get shutdown_grace");
                stop_with = libc::SIGTERM;
                signal_all(&children, libc::SIGTERM);
            }
            Some(libc::SIGUSR1) => signal_all(&children, libc::SIGUSR1),
            _ => {}
        }
        children.retain(|c| {
            let mut status = 0;
            // SAFETY: waiting for our own child, without blocking.
            if unsafe { libc::waitpid(c.pid, &mut status, libc::WNOHANG) } != c.pid {
                return true;
            }
            if failure.is_none() && !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                failure = Some(format!("serving process {} {}", c.pid, describe(status)));
            }
            false
        });
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A reload that compiled many rules (`server.reload_fork_rules`): fork a serving
/// process for every part from the master's new snapshot, in the other
/// generation's slots, then have the ones they replace quit (SIGQUIT: no more
/// accepts, responses in flight finish within `upgrade_grace`, as after an
/// upgrade). Both hold the same listening sockets, so no connection waiting in a
/// backlog is lost. `Err` (and the processes serving as they were) while an
/// earlier generation is still finishing, whose slots these would take, or if a
/// new process cannot start.
fn fork_generation(
    start: &mut Start,
    children: &mut Vec<Child>,
    draining: &mut Vec<Child>,
    serve: Serve,
) -> Result<(), String> {
    if !draining.is_empty() {
        return Err(format!(
            "the serving processes an earlier reload replaced ({:?}) are still finishing their responses",
            draining.iter().map(|c| c.pid).collect::<Vec<_>>()
        ));
    }
    let slots = start.region.procs.len();
    let mut fresh: Vec<Child> = Vec::with_capacity(children.len());
    for c in children.iter() {
        let mut part = c.part;
        part.slot = (part.slot + start.processes) % slots;
        match fork_serving(start, part, serve) {
            Ok(pid) => fresh.push(Child { pid, part }),
            Err(e) => {
                stop_all(&fresh);
                for f in &fresh {
                    start.region.procs[f.part.slot].clear();
                }
                return Err(format!("cannot fork new serving processes: {e}"));
            }
        }
    }
    signal_all(children, libc::SIGQUIT);
    draining.extend(std::mem::replace(children, fresh));
    Ok(())
}

/// Fork one serving process for `part` and wait until it reports that it serves
/// (or why it cannot).
fn fork_serving(start: &mut Start, part: Part, serve: Serve) -> Result<libc::pid_t, String> {
    // It starts from the master's newest snapshot: every reload asked is made.
    let slot = &start.region.procs[part.slot];
    slot.reload_done
        .store(slot.reload_asked.load(Ordering::Acquire), Ordering::Release);
    let (mut ours, theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    // SAFETY: the master's only other thread, a reload's parked compile thread,
    // holds no lock the child could need (it waits on a channel the child never
    // touches; glibc's fork takes malloc's locks itself), so the child may run any
    // code.
    let master = unsafe { libc::getpid() };
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(ours);
        // SAFETY: plain system calls in the new process.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() != master {
                libc::_exit(1); // the master died before prctl took effect
            }
        }
        let report = theirs.try_clone().ok();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            serve(start, part, Some(theirs))
        }));
        let code = match run {
            Ok(Ok(())) => 0,
            Ok(Err(e)) => {
                tracing::error!("serving process: {e}");
                if let Some(mut r) = report {
                    use std::io::Write;
                    let _ = r.write_all(format!("E{e}").as_bytes());
                }
                1
            }
            Err(_) => 101,
        };
        std::process::exit(code);
    }
    drop(theirs);
    let _ = ours.set_read_timeout(Some(Duration::from_secs(120)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        match ours.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(k) => {
                buf.extend_from_slice(&chunk[..k]);
                if buf.first() == Some(&b'R') {
                    return Ok(pid);
                }
            }
        }
    }
    // It did not start: collect it and say why.
    // SAFETY: our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    let why = match buf.strip_prefix(b"E") {
        Some(m) => String::from_utf8_lossy(m).into_owned(),
        None => "exited during start-up".to_string(),
    };
    Err(format!(
        "serving process for workers {}..{}: {why}",
        part.first,
        part.first + part.count
    ))
}

/// The next handled signal within `within`, if any.
fn wait_signal(set: &libc::sigset_t, within: Duration) -> Option<libc::c_int> {
    let ts = libc::timespec {
        tv_sec: within.as_secs() as libc::time_t,
        tv_nsec: within.subsec_nanos() as libc::c_long,
    };
    // SAFETY: valid set and timeout; the siginfo is not wanted.
    let s = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (s > 0).then_some(s)
}

/// One exited child, if any: its pid and how it ended.
fn reap(flags: libc::c_int) -> Option<(libc::pid_t, String)> {
    let mut status = 0;
    // SAFETY: waitpid on any child of ours.
    let pid = unsafe { libc::waitpid(-1, &mut status, flags) };
    (pid > 0).then(|| (pid, describe(status)))
}

fn describe(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exited with status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("was killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("ended ({status})")
    }
}

fn signal_all(children: &[Child], sig: libc::c_int) {
    for c in children {
        // SAFETY: our own children.
        unsafe { libc::kill(c.pid, sig) };
    }
}

/// Start-up failed: stop the processes already running.
fn stop_all(children: &[Child]) {
    signal_all(children, libc::SIGTERM);
    for c in children {
        // SAFETY: our own children.
        unsafe { libc::waitpid(c.pid, std::ptr::null_mut(), 0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_every_worker_once() {
        for workers in 1..9 {
            for n in 1..=workers {
                let parts: Vec<Part> = (0..n).map(|p| Part::of(p, n, workers)).collect();
                assert_eq!(parts[0].first, 0);
                for w in parts.windows(2) {
                    assert_eq!(w[0].first + w[0].count, w[1].first);
                }
                let last = parts[n - 1];
                assert_eq!(last.first + last.count, workers);
                assert!(parts.iter().all(|p| p.count >= 1));
            }
        }
    }
}
