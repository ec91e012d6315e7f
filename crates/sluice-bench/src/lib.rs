//! `sluice bench`: a load generator as fast as wrk, and the seeds' experiments.
//!
//! - [`engine`]: the event-driven client (closed loop, open loop at a fixed rate with
//!   latency from the intended send time, pipelining, keep-alive on/off, slow
//!   readers, several source addresses, redirect following as one transaction);
//! - [`workload`]: what to request (one URL, URL lists random or in order, Zipf);
//! - [`report`]: the human summary, the JSON schema, tables and CSV;
//! - [`experiments`]: the seeds' measurements as one command each, with SVG plots;
//! - [`plot`]: line charts;
//! - `cold_files`: the `cold-files` experiment (small-file latency while big files
//!   are read from the disk);
//! - [`attack`]: the conditioning experiments' attackers (silent, half heads,
//!   slowloris, held keep-alives), several processes past one's descriptor limit.
//!
//! It works against any HTTP/1.1 server; nothing in it knows about sluice.

mod alarm;
pub mod attack;
mod cold_files;
pub mod engine;
pub mod experiments;
pub mod plot;
pub mod report;
pub mod workload;

pub use engine::{run, Options, RunResult};

/// A `sluice bench` child process (more load, attackers) at ordinary scheduling
/// priority: when the measuring process runs at a real-time priority
/// (`bench/attack_runs.py --isolate`), the load it starts must not inherit it.
pub fn load_process() -> Result<std::process::Command, String> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    // SAFETY: only an async-signal-safe system call runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let p = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_OTHER, &p);
            Ok(())
        });
    }
    Ok(cmd)
}
pub use report::Summary;
pub use workload::{Pick, Workload};
