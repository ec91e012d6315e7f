//! Socket reads and writes the worker, the TLS layer and the front process share,
//! and the pool of read buffers: [`read_into`] (bounded reads into a pooled
//! buffer), [`recycle`] (a buffer back to the pool, so idle connections hold none),
//! one-shot `send`, draining and peeking input, and the reset-on-close option.
//! Raw libc where std has no call for it (`MSG_PEEK`, `SO_LINGER` 0).

use mio::net::TcpStream;
use std::io;
use std::os::fd::AsRawFd;

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
    if buf.capacity() == 0 {
        *buf = pool.pop().unwrap_or_else(|| Vec::with_capacity(READ_CHUNK));
    }
    loop {
        if buf.len() >= limit {
            return Ok(ReadOutcome::Full);
        }
        if buf.capacity() - buf.len() < 512 {
            buf.reserve(READ_CHUNK);
        }
        let old = buf.len();
        let room = (buf.capacity() - old).min(limit - old);
        // SAFETY: recv writes at most `room` bytes into the spare capacity, and
        // set_len only covers what it wrote.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().add(old).cast(), room, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(ReadOutcome::Blocked),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        if n == 0 {
            return Ok(ReadOutcome::Eof);
        }
        let n = n as usize;
        // SAFETY: the kernel initialized these n bytes.
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

/// Give a buffer back to the worker's pool (bounded), so idle connections hold none.
pub fn recycle(pool: &mut Vec<Vec<u8>>, mut buf: Vec<u8>) {
    if buf.capacity() > 0 && buf.capacity() <= 64 * 1024 && pool.len() < POOL_MAX {
        buf.clear();
        pool.push(buf);
    }
}
