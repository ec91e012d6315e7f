//! Dropping root: bind port 80 as root, then serve every byte as an unprivileged user.
//!
//! Owns the decision (who to become) and the switch itself. Called once by
//! [`crate::supervisor::serve`] after the listeners are bound and the access logs opened, and
//! before any worker thread exists, so no thread ever serves a request as root. The
//! conditioning front and each of its `pass` relays drop root the same way, once
//! their Unix socket is bound and given to the user ([`give_socket_and_switch`]).
//! glibc's `setuid`/`setgid`/`setgroups` apply to every thread of the process anyway
//! (it signals each one), so the log writer thread started earlier is switched too;
//! the integration test reads `/proc/PID/task/*/status` to prove it.
//!
//! The rule (docs/OPERATIONS.md): started as root, sluice switches to `server.user`
//! (`--user`), or to `nobody` when none is named, as h2o does; it keeps root only when
//! the config says `allow_root = true` (`--allow-root`). Started as anyone else it
//! stays who it is (naming a different user is then an error).
//!
//! The serving processes' scheduling priority (`server.priority`) is set here too,
//! just before the switch: raising it needs root, and it is inherited by every
//! thread and forked process started after it. Linux keeps a nice value per
//! thread, so [`set_priority`] sets it on each thread that exists already (the
//! access log writers).
//!
//! The scheduler slice (`server.sched_slice`) is set the same way, with
//! `sched_setattr`.
//!
//! Written by hand on libc: it is a handful of system calls; the crates that wrap them
//! (`privdrop`, `nix`) would add more code than they save.

use std::ffi::CString;

/// Who the server becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// The user a root-started server switches to when the config names none.
pub const DEFAULT_USER: &str = "nobody";

/// Decide, from the config and who we are, whom to become (`None`: stay).
pub fn plan(user: Option<&str>, allow_root: bool) -> Result<Option<Account>, String> {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return match user {
            Some(u) => {
                let a = lookup(u)?;
                if a.uid == euid {
                    Ok(None)
                } else {
                    Err(format!(
                        "server.user {u:?}: cannot switch users when not started as root"
                    ))
                }
            }
            None => Ok(None),
        };
    }
    match user {
        Some(u) => {
            let a = lookup(u)?;
            if a.uid == 0 && !allow_root {
                return Err(format!(
                    "server.user {u:?} is root: set allow_root = true (--allow-root) to really serve as root"
                ));
            }
            Ok((a.uid != 0).then_some(a))
        }
        None if allow_root => Ok(None),
        None => lookup(DEFAULT_USER).map(Some).map_err(|e| {
            format!("{e}; started as root with no server.user: name one, or set allow_root = true")
        }),
    }
}

/// Look a user up in the password database (`getpwnam_r`), or take a numeric uid.
pub fn lookup(name: &str) -> Result<Account, String> {
    let c = CString::new(name).map_err(|_| format!("user {name:?}: bad name"))?;
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to live storage of the given size.
    let rc =
        unsafe { libc::getpwnam_r(c.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc == 0 && !out.is_null() {
        return Ok(Account {
            name: name.to_string(),
            uid: pw.pw_uid,
            gid: pw.pw_gid,
        });
    }
    if let Ok(uid) = name.parse::<u32>() {
        // A bare uid with no passwd entry: its group is the same number.
        return Ok(Account {
            name: name.to_string(),
            uid,
            gid: uid,
        });
    }
    Err(format!("user {name:?}: no such user"))
}

/// Give the Unix socket at `path` (bound as root) to `a`, then become `a`: the way a
/// conditioning process (the front, each `pass` relay) drops root, so the process
/// after it, serving as that user, may connect.
pub fn give_socket_and_switch(path: &std::path::Path, a: &Account) -> Result<(), String> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: a NUL in the path", path.display()))?;
    // SAFETY: chown of a path with a valid C string.
    if unsafe { libc::chown(c.as_ptr(), a.uid, a.gid) } != 0 {
        return Err(format!(
            "{}: giving the socket to {}: {}",
            path.display(),
            a.name,
            std::io::Error::last_os_error()
        ));
    }
    switch_to(a).map_err(|e| format!("dropping root: {e}"))
}

/// Become `a`: supplementary groups → its primary group only, then gid, then uid;
/// then check that root cannot be regained.
pub fn switch_to(a: &Account) -> Result<(), String> {
    // SAFETY: plain system calls on integers and a one-element array.
    unsafe {
        let groups = [a.gid as libc::gid_t];
        if libc::setgroups(1, groups.as_ptr()) != 0 {
            return Err(format!(
                "setgroups({}): {}",
                a.gid,
                std::io::Error::last_os_error()
            ));
        }
        if libc::setgid(a.gid) != 0 {
            return Err(format!(
                "setgid({}): {}",
                a.gid,
                std::io::Error::last_os_error()
            ));
        }
        if libc::setuid(a.uid) != 0 {
            return Err(format!(
                "setuid({}): {}",
                a.uid,
                std::io::Error::last_os_error()
            ));
        }
        if libc::setuid(0) == 0 || libc::geteuid() != a.uid || libc::getegid() != a.gid {
            return Err("privileges were not dropped completely".into());
        }
    }
    Ok(())
}

/// Call `f` with the id of every thread of this process; a thread that ended between
/// the listing and the call (`ESRCH`) is skipped.
fn each_thread(
    what: &str,
    mut f: impl FnMut(u32) -> Result<(), std::io::Error>,
) -> Result<(), String> {
    let tasks = std::fs::read_dir("/proc/self/task")
        .map_err(|e| format!("{what}: /proc/self/task: {e}"))?;
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        match f(tid) {
            Err(e) if e.raw_os_error() != Some(libc::ESRCH) => return Err(format!("{what}: {e}")),
            _ => {}
        }
    }
    Ok(())
}

/// Give every thread of this process the nice value `prio` (threads and processes
/// started later inherit it from the thread that starts them).
pub fn set_priority(prio: i32) -> Result<(), String> {
    each_thread(&format!("server.priority = {prio}"), |tid| {
        // SAFETY: plain system call on a thread id of this process.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, prio) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    })
    .map_err(|e| {
        format!("{e} (a priority above the one sluice was started with needs root or CAP_SYS_NICE)")
    })
}

/// Ask the scheduler for a time slice of `slice` for every thread of this process
/// (inherited like the nice value). `sched_setattr` has no libc wrapper: the
/// `struct sched_attr` of include/uapi/linux/sched/types.h is laid out here. For an
/// ordinary (`SCHED_OTHER`) thread its runtime field is the slice (Linux 6.12's
/// EEVDF); the nice value travels in the same call, so each thread's own is read
/// first and passed back unchanged. Returns false when the kernel accepted the call
/// but kept its own slice (kernels before 6.12 ignore the field).
pub fn set_sched_slice(slice: std::time::Duration) -> Result<bool, String> {
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        policy: u32,
        flags: u64,
        nice: i32,
        priority: u32,
        runtime: u64,
        deadline: u64,
        period: u64,
        util_min: u32,
        util_max: u32,
    }
    let ns = slice.as_nanos() as u64;
    each_thread(&format!("server.sched_slice = {slice:?}"), |tid| {
        // SAFETY: plain system calls on a thread id of this process; `attr` is a
        // live, fully initialised struct whose size is passed in its first field.
        unsafe {
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
            if nice == -1 && *libc::__errno_location() != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let attr = SchedAttr {
                size: std::mem::size_of::<SchedAttr>() as u32,
                policy: libc::SCHED_OTHER as u32,
                flags: 0,
                nice,
                priority: 0,
                runtime: ns,
                deadline: 0,
                period: 0,
                util_min: 0,
                util_max: 0,
            };
            if libc::syscall(libc::SYS_sched_setattr, tid, &attr, 0u32) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    })?;
    // Whether it took: the kernel reports each thread's slice in its sched file.
    let now = std::fs::read_to_string("/proc/thread-self/sched").unwrap_or_default();
    Ok(now
        .lines()
        .find_map(|l| l.strip_prefix("se.slice"))
        .and_then(|v| v.trim_start_matches([' ', ':']).trim().parse::<u64>().ok())
        == Some(ns))
}
