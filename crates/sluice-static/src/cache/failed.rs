//! What a failed lookup means, and what the caches do when the process runs out of
//! descriptors. A file that is absent is a 404 and one the server may not serve a
//! 403, both kept for `cache_validity`; a lookup that failed for a reason of the
//! server's (out of descriptors or memory, a disk error) says nothing about the
//! file ([`Entry::Unavailable`](super::Entry::Unavailable): a 503, never kept). Out of descriptors, every
//! cache of the process gives back the ones no response is sending from
//! ([`FileCache::shed_descriptors`](super::FileCache::shed_descriptors)): the one
//! that met `EMFILE` at once, the others at their next sweep, told by [`SHED`].
//! Costs nothing until a lookup fails; one relaxed load per cache per sweep.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bumped by a cache that ran out of descriptors opening a file: every cache of
/// the process (other workers', other sites') gives back its idle descriptors at
/// its next [`FileCache::expire`](super::FileCache::expire). The descriptor table is the process's, so the
/// signal is too.
pub(super) static SHED: AtomicU32 = AtomicU32::new(0);

/// Have every cache of the process give back its idle descriptors at its next
/// [`FileCache::expire`](super::FileCache::expire) (the caller sheds its own at once).
pub(super) fn shed_everywhere() {
    SHED.fetch_add(1, Ordering::Relaxed);
}

/// The process or the system is out of descriptors.
pub(super) fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// An error that says nothing about the file: out of descriptors, the kernel
/// out of memory, the disk failing. Answering 403 (and keeping it) would tell a
/// client, and an apt or a browser cache, that the file may never be had.
pub fn unavailable(e: &io::Error) -> bool {
    out_of_descriptors(e)
        || matches!(
            e.raw_os_error(),
            Some(libc::ENOMEM | libc::ENOBUFS | libc::EIO)
        )
}
