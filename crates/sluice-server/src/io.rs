//! Socket reads and writes the worker, the TLS layer and the front process share,
//! and the pool of read buffers: [`read_into`] (bounded reads into a pooled
//! buffer), [`recycle`] (a buffer back to the pool, so idle connections hold none),
//! [`keep_bytes`] (a waiting connection keeps its few bytes, not a pooled buffer),
//! one-shot `send`, draining and peeking input, the reset-on-close option, and
//! TCP-level socket options by number (`set_tcp_int`, `get_tcp`).
//! The hot `recv` goes through rustix (a system call without libc's cancellation-point
//! bookkeeping); raw libc where neither std nor that matters (`MSG_PEEK`, `SO_LINGER` 0).

use mio::net::TcpStream;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// What one read asks for, and a new buffer's capacity.
pub const READ_CHUNK: usize = 4096;
/// Most buffers a worker keeps for reuse.
pub const POOL_MAX: usize = 256;

pub enum ReadOutcome {
    /// The socket is drained (a short read means the next byte will raise a new edge).
    Blocked,
    /// The buffer reached its limit; parse before reading more.
    Full,
    Eof,
}

pub fn read_into(
    sock: &mut TcpStream,
    buf: &mut Vec<u8>,
    pool: &mut Vec<Vec<u8>>,
    limit: usize,
    until_eof: bool,
) -> io::Result<ReadOutcome> {
    pooled(buf, pool, READ_CHUNK);
    loop {
        if buf.len() >= limit {
            return Ok(ReadOutcome::Full);
        }
        if buf.capacity() - buf.len() < 512 {
            buf.reserve(READ_CHUNK);
        }
        let old = buf.len();
        let room = (buf.capacity() - old).min(limit - old);
        // rustix makes the system call itself (libc's `recv` is a cancellation
        // point, with bookkeeping around every call; see `send::Plain`).
        let spare = &mut buf.spare_capacity_mut()[..room];
        let n = match rustix::net::recv(&*sock, spare, rustix::net::RecvFlags::empty()) {
            Ok(((got, _), _)) => got.len(),
            Err(rustix::io::Errno::AGAIN) => return Ok(ReadOutcome::Blocked),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            return Ok(ReadOutcome::Eof);
        }
        // SAFETY: recv initialized these n bytes of the spare capacity.
        unsafe { buf.set_len(old + n) };
        if n < room && !until_eof {
            return Ok(ReadOutcome::Blocked);
        }
    }
}

/// Are request bytes waiting in the socket (one `recv(MSG_PEEK)`)? EOF and errors
/// count as "no": there is nothing to protect the response from.
pub fn unread_bytes_waiting(sock: &TcpStream) -> bool {
    let mut b = 0u8;
    // SAFETY: peek one byte into a local.
    let n = unsafe {
        libc::recv(
            sock.as_raw_fd(),
            (&mut b as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// SO_LINGER {on, 0}: closing the socket resets it and drops what is queued.
pub fn abort_on_close(sock: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on our own socket with a correctly sized struct.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
}

/// One non-blocking send: bytes sent (0 if the socket is full), or -1 if the
/// connection is gone.
pub fn send_some(sock: &TcpStream, msg: &[u8]) -> isize {
    // SAFETY: send from a valid slice on our own socket.
    let n = unsafe {
        libc::send(
            sock.as_raw_fd(),
            msg.as_ptr().cast(),
            msg.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n >= 0 {
        return n;
    }
    match io::Error::last_os_error().kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => 0,
        _ => -1,
    }
}

/// Read and discard whatever is waiting; false on EOF or error.
pub fn drain_input(sock: &TcpStream) -> bool {
    let mut scratch = [0u8; 4096];
    loop {
        // SAFETY: recv into a stack buffer of the given length.
        let n = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                scratch.as_mut_ptr().cast(),
                scratch.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            continue;
        }
        if n == 0 {
            return false;
        }
        return matches!(
            io::Error::last_os_error().kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        );
    }
}

/// Before a read: a buffer of at least `chunk` bytes, from the pool, holding what
/// `buf` held (nothing, or the bytes [`keep_bytes`] kept).
pub fn pooled(buf: &mut Vec<u8>, pool: &mut Vec<Vec<u8>>, chunk: usize) {
    if buf.capacity() < chunk {
        let mut big = pool.pop().unwrap_or_else(|| Vec::with_capacity(chunk));
        big.extend_from_slice(buf);
        *buf = big;
    }
}

/// What a connection that waits (a head still arriving, a complete request waiting
/// its turn) keeps: its bytes in a buffer their size, the pooled one given back if
/// it is mostly empty. 16,000 half heads would otherwise hold 64 MiB of 4 KiB
/// buffers for a few dozen bytes each. Costs one small copy per wait; the next read
/// takes a pooled buffer again ([`pooled`]).
pub fn keep_bytes(pool: &mut Vec<Vec<u8>>, buf: Vec<u8>) -> Vec<u8> {
    if buf.capacity() > 2 * buf.len() {
        let bytes = buf.to_vec();
        recycle(pool, buf);
        bytes
    } else {
        buf
    }
}

/// A buffer for a response's head: from the pool, or a new read-sized one, so that
/// [`recycle`] keeps it afterwards. One grown from empty (to a head's ~256 bytes)
/// would be too small to keep, and a pool that ran empty once would stay empty:
/// five reallocations and a free on every request (≈3% of the server's CPU on
/// keep-alive 1 KiB answers, docs/BENCHMARKS.md).
pub fn take_buffer(pool: &mut Vec<Vec<u8>>) -> Vec<u8> {
    pool.pop().unwrap_or_else(|| Vec::with_capacity(READ_CHUNK))
}

/// Give a buffer back to the worker's pool (bounded), so idle connections hold none.
/// Only read-sized buffers are kept: a small one ([`keep_bytes`]'s) is freed, or
/// the pool would hand it out to be grown again.
pub fn recycle(pool: &mut Vec<Vec<u8>>, mut buf: Vec<u8>) {
    if buf.capacity() >= READ_CHUNK && buf.capacity() <= 64 * 1024 && pool.len() < POOL_MAX {
        buf.clear();
        pool.push(buf);
    }
}

pub(crate) fn set_tcp_int(fd: RawFd, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: setsockopt with an int on a socket the caller owns.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(crate) fn get_tcp_int(fd: RawFd, opt: libc::c_int) -> Option<libc::c_int> {
    get_tcp::<libc::c_int>(fd, opt)
}

/// A TCP-level option read into a `T`: a `c_int` or a `tcp_info`, plain integers
/// for which all-zero bytes are a valid value (a shorter answer leaves the rest 0).
pub(crate) fn get_tcp<T: Copy>(fd: RawFd, opt: libc::c_int) -> Option<T> {
    // SAFETY: T is one of the plain-integer types above: zeroed is a valid value.
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`, which has that many.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            opt,
            (&mut v as *mut T).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_head_keeps_its_bytes_and_the_next_read_gets_a_pooled_buffer() {
        let mut pool = Vec::new();
        let mut buf = Vec::with_capacity(READ_CHUNK);
        buf.extend_from_slice(b"GET / HTTP/1.1\r\nHo");
        let kept = keep_bytes(&mut pool, buf);
        assert_eq!(kept, b"GET / HTTP/1.1\r\nHo");
        assert!(
            kept.capacity() < 64,
            "kept {} bytes of room",
            kept.capacity()
        );
        assert_eq!(pool.len(), 1, "the 4 KiB buffer went back");
        let mut buf = kept;
        pooled(&mut buf, &mut pool, READ_CHUNK);
        assert_eq!(buf, b"GET / HTTP/1.1\r\nHo");
        assert!(buf.capacity() >= READ_CHUNK);
        assert!(pool.is_empty(), "taken from the pool");
        // A buffer mostly full stays as it is.
        let mut full = Vec::with_capacity(READ_CHUNK);
        full.resize(3000, b'x');
        let p = full.as_ptr();
        let kept = keep_bytes(&mut pool, full);
        assert_eq!(kept.as_ptr(), p);
    }

    #[test]
    fn a_head_buffer_taken_from_an_empty_pool_goes_back_to_it() {
        let mut pool = Vec::new();
        let mut head = take_buffer(&mut pool);
        head.extend_from_slice(&[b'h'; 250]);
        let p = head.as_ptr();
        recycle(&mut pool, head);
        assert_eq!(pool.len(), 1, "kept for the next response");
        let again = take_buffer(&mut pool);
        assert_eq!(again.as_ptr(), p, "the same allocation, reused");
        assert!(again.is_empty());
    }
}
