//! Child `sluice bench` processes: load and attackers that must not share this
//! process's descriptors, CPU accounting or scheduling priority.

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
