//! The worker threads of one serving process: starting one ([`spawn_worker`]),
//! waiting for all of them to build at start-up ([`all_ready`]), what they and the
//! signal thread report to the main thread ([`Event`], on one channel), and
//! waiting for them to finish at the end ([`finish_workers`]). The decisions
//! (restart a worker that died, reload, stop) are the supervisor's. Costs: nothing
//! while they serve.

use crate::shared::Shared;
use crate::{accesslog, worker};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Start-up: every worker must build (its file handler opens the root), or the
/// server does not start at all.
pub(crate) fn all_ready(
    exits: &std::sync::mpsc::Receiver<Event>,
    workers: usize,
) -> Result<(), String> {
    let mut ready = 0;
    while ready < workers {
        match exits.recv() {
            Ok(Event::Ready(_)) => ready += 1,
            Ok(Event::Failed(id, e)) | Ok(Event::Panicked(id, e)) => {
                return Err(format!("worker {id}: {e}"))
            }
            // (Signals are passed on only once every worker is ready.)
            Ok(Event::Signal(_)) => {}
            Err(_) => return Err("a worker exited during start-up".into()),
        }
    }
    Ok(())
}

/// Wait for the workers to finish their responses and join them. Meanwhile SIGTERM
/// and SIGINT still shorten a quit's long grace to `shutdown_grace` (the workers
/// watch `quit`), and SIGUSR1 still reopens the logs (a rotation during an old
/// server's hour of downloads).
pub(crate) fn finish_workers(
    threads: Vec<Option<std::thread::JoinHandle<()>>>,
    events: &std::sync::mpsc::Receiver<Event>,
    shared: &Shared,
    reopen_logs: impl Fn(),
) {
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
    // A worker that ends normally reports nothing: look every 50 ms.
    while threads.iter().flatten().any(|t| !t.is_finished()) {
        let Ok(Event::Signal(sig)) = events.recv_timeout(std::time::Duration::from_millis(50))
        else {
            continue;
        };
        match sig {
            SIGTERM | SIGINT if shared.quit.swap(false, Ordering::Relaxed) => {
                tracing::info!("stopping sooner: responses in flight get shutdown_grace");
                shared.wake_workers();
            }
            SIGUSR1 => reopen_logs(),
            _ => {}
        }
    }
    for t in threads.into_iter().flatten() {
        let _ = t.join();
    }
}

/// What the main thread waits for: a worker's report, or a signal.
pub(crate) enum Event {
    /// Built and serving.
    Ready(usize),
    /// Could not build, or its event loop failed (an I/O error from epoll).
    Failed(usize, String),
    /// Panicked, with the panic message.
    Panicked(usize, String),
    /// A signal, passed on by the signal thread.
    Signal(std::ffi::c_int),
}

pub(crate) struct WorkerSpawn {
    pub(crate) id: usize,
    pub(crate) listeners: Vec<mio::net::TcpListener>,
    /// `defer_accept = "auto"`: the deferral in seconds when on.
    pub(crate) auto_defer: Option<u64>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) logs: Vec<(String, accesslog::Handle)>,
    pub(crate) max_conns: usize,
    pub(crate) exits: std::sync::mpsc::Sender<Event>,
}

/// Start one worker thread. Workers own Rc-based caches, so each is built on its own
/// thread; that it is ready, or how it ended, comes back on `exits`.
pub(crate) fn spawn_worker(w: WorkerSpawn) -> Result<std::thread::JoinHandle<()>, String> {
    let id = w.id;
    std::thread::Builder::new()
        .name(format!("sluice-w{id}"))
        .spawn(move || {
            let exits = w.exits.clone();
            // Unwind safety: everything the closure owns dies with it; the only
            // shared state is atomics and the snapshot mutex (poison-tolerant).
            let body = std::panic::AssertUnwindSafe(move || {
                let wl = accesslog::WorkerLog::new(w.logs);
                let worker =
                    worker::Worker::new(id, w.listeners, w.auto_defer, w.shared, wl, w.max_conns)
                        .map_err(|e| e.to_string())?;
                let _ = w.exits.send(Event::Ready(id));
                worker.run().map_err(|e| e.to_string())
            });
            let exit = match std::panic::catch_unwind(body) {
                Ok(Ok(())) => return,
                Ok(Err(e)) => Event::Failed(id, e),
                Err(payload) => Event::Panicked(id, panic_message(payload.as_ref())),
            };
            let _ = exits.send(exit);
        })
        .map_err(|e| format!("spawn: {e}"))
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    let what = if let Some(s) = p.downcast_ref::<&str>() {
        s
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.as_str()
    } else {
        "?"
    };
    format!("panicked: {what}")
}
