//! A disk thread's priority, lowered while it does CPU work for a listing (the
//! directory's stats and the page) and given back after, so that the workers get
//! the CPU first. Per thread: Linux keeps the nice value per thread.

/// How much lower than its own a disk thread's priority (nice value) is while it
/// reads a directory and builds its listing page.
pub(super) const LISTING_NICE: i32 = 10;

/// The calling thread's nice value raised by some steps (at most 19) while this
/// lives; a `getpriority` and two `setpriority` calls. Linux keeps the value per
/// thread, and `who = 0` names the calling thread.
pub(super) struct Lowered(Option<i32>);

impl Lowered {
    pub(super) fn by(steps: i32) -> Lowered {
        // -1 is a valid nice value: errno tells an error apart (and then nothing
        // is changed).
        unsafe { *libc::__errno_location() = 0 };
        let was = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        if was == -1 && unsafe { *libc::__errno_location() } != 0 {
            return Lowered(None);
        }
        let lower = (was + steps).min(19);
        let ok = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, lower) } == 0;
        Lowered(ok.then_some(was))
    }
}

impl Drop for Lowered {
    fn drop(&mut self) {
        if let Some(was) = self.0 {
            // Raising it back is allowed by the thread's RLIMIT_NICE (root, or the
            // value the server started at); if refused, the thread stays lower.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, was) };
        }
    }
}
