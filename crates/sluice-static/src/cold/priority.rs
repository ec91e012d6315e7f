//! A listing thread's priority: lowered once, at its start, for its whole life,
//! so that the workers get the CPU first when both want it. Per thread: Linux
//! keeps the nice value per thread, and `who = 0` names the calling thread.
//! Never raised back: an unprivileged server could not (RLIMIT_NICE), which is
//! why listings have threads of their own rather than lowering a disk thread
//! for each build (a disk thread left lower would read cold files at nice +10).

/// How much lower than the process's a listing thread's priority (nice value) is.
pub const LISTING_NICE: i32 = 10;

/// Lower the calling thread's nice value by [`LISTING_NICE`] (to 19 at most): a
/// `getpriority` and a `setpriority`. Nothing happens if either fails.
pub fn lower_this_thread() {
    // -1 is a valid nice value: errno tells an error apart (and then nothing
    // is changed).
    // SAFETY: errno is this thread's; getpriority/setpriority take no pointers.
    unsafe {
        *libc::__errno_location() = 0;
        let was = libc::getpriority(libc::PRIO_PROCESS, 0);
        if was == -1 && *libc::__errno_location() != 0 {
            return;
        }
        libc::setpriority(libc::PRIO_PROCESS, 0, (was + LISTING_NICE).min(19));
    }
}
