//! Where a response's bytes go: the [`Wire`] trait, and [`Plain`], the socket as it
//! is (TLS is the other wire, `crate::tls::TlsWire`). Owns how memory bytes reach
//! the kernel: `send` for one piece or a few KiB gathered, `sendmsg` past that,
//! through rustix. Must not decide what to send or when (`Outgoing` does).

use std::io;

/// Where a response's bytes go.
pub trait Wire {
    /// The socket (for `sendfile` and `mmap` sends, used only if [`Wire::zero_copy`]).
    fn fd(&self) -> i32;
    /// Can file bodies go from the page cache to `fd` untouched?
    fn zero_copy(&self) -> bool;
    /// Take some of these bytes; how many were taken. `more`: more follows at once.
    fn send(&mut self, iov: &[io::IoSlice<'_>], more: bool) -> io::Result<usize>;
    /// Push out what the wire itself holds (TLS records); `Ok(true)` when nothing is
    /// left, `Ok(false)` when the socket is full.
    fn drain(&mut self) -> io::Result<bool>;
}

/// The socket, as it is: bytes go out with `send` or `sendmsg`, files with
/// `sendfile`.
pub struct Plain(pub i32);

/// Up to this many bytes in several pieces are copied together and sent by `send`.
pub(super) const GATHER_MAX: usize = 4096;

thread_local! {
    static GATHER: std::cell::RefCell<Vec<u8>> =
        std::cell::RefCell::new(Vec::with_capacity(GATHER_MAX));
}

impl Wire for Plain {
    fn fd(&self) -> i32 {
        self.0
    }
    fn zero_copy(&self) -> bool {
        true
    }
    fn send(&mut self, iov: &[io::IoSlice<'_>], more: bool) -> io::Result<usize> {
        use rustix::net::{sendmsg, SendAncillaryBuffer, SendFlags};
        // rustix makes the system call itself: libc's `sendmsg` is a thread
        // cancellation point, and its bookkeeping around every call was ~1% of the
        // server's CPU on keep-alive 1 KiB answers (docs/BENCHMARKS.md).
        let mut flags = SendFlags::NOSIGNAL;
        if more {
            flags |= SendFlags::MORE;
        }
        // SAFETY: the worker owns the socket and keeps it open across this call.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.0) };
        // A small answer (a head and a cached body) goes out gathered into one
        // buffer by `send`: the kernel's `sendmsg` path (copying in the message
        // header, importing the vector) costs more than copying a few KiB here.
        if iov.len() == 1 {
            return Ok(rustix::net::send(fd, &iov[0], flags)?);
        }
        if iov.iter().map(|s| s.len()).sum::<usize>() <= GATHER_MAX {
            return GATHER.with_borrow_mut(|buf| {
                // Kept per thread and reused: no zeroing, no allocation per send.
                buf.clear();
                for s in iov {
                    buf.extend_from_slice(s);
                }
                Ok(rustix::net::send(fd, buf, flags)?)
            });
        }
        Ok(sendmsg(
            fd,
            iov,
            &mut SendAncillaryBuffer::default(),
            flags,
        )?)
    }
    fn drain(&mut self) -> io::Result<bool> {
        Ok(true)
    }
}
