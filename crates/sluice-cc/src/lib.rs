//! Connection conditioning for any server (seed 004, Park & Pai): the server's side
//! of `sluice condition`.
//!
//! `sluice condition` owns the TCP listener and runs the conditioning stages; a
//! backend (any server, in any style) connects to its Unix-domain socket and asks
//! for connections. Each arrives as the client's own socket plus one complete
//! request; the backend answers on the socket, then says whether the front keeps
//! the client for its next request ([`Conn::keep`]) or closes it
//! ([`Conn::close`]). Idle keep-alive connections therefore never reach a backend.
//!
//! Owns: the wire protocol ([`proto`]), the safe Rust API below, and the C library
//! (`capi`, `include/sluicecc.h`, built as `libsluicecc.so` and `libsluicecc.a`).
//! Must not: condition anything itself. The policies run in the front process
//! (`sluice-server/src/front/`), with the same code as `sluice serve`.
//!
//! Cost per request for a backend: one 12-byte `send` (the ask) and one `recvmsg`
//! (descriptor and request together), one 12-byte `send` when done, and a `close`.

pub mod capi;
pub mod proto;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;

/// A backend's connection to the conditioning front process.
pub struct Front {
    sock: OwnedFd,
    buf: Vec<u8>,
}

impl Front {
    /// Connect to `sluice condition --to unix:PATH` (`PATH` or `unix:PATH`).
    pub fn connect(path: impl AsRef<Path>) -> io::Result<Front> {
        let p = path.as_ref().to_string_lossy().to_string();
        Ok(Front {
            sock: proto::connect(proto::unix_path(&p))?,
            buf: Vec::new(),
        })
    }

    /// Wait for the next connection with a complete request (blocking). Fails with
    /// `ConnectionAborted` when the front process went away: [`Front::connect`]
    /// again (to a restarted front). Connections accepted before stay usable;
    /// their [`Conn::keep`] and [`Conn::close`] then fail and tell nobody.
    pub fn accept(&mut self) -> io::Result<Conn> {
        proto::send_ctl(self.sock.as_raw_fd(), proto::ASK, 0).map_err(proto::front_gone)?;
        match proto::recv_handoff(self.sock.as_raw_fd(), &mut self.buf)
            .map_err(proto::front_gone)?
        {
            Some(h) => Ok(Conn {
                id: h.id,
                peer: h.peer,
                request: h.request,
                pos: 0,
                stream: TcpStream::from(h.fd),
                front: self.sock.as_raw_fd(),
                done: false,
            }),
            None => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the conditioning front process went away",
            )),
        }
    }
}

impl AsRawFd for Front {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// One client connection with its request, handed over by the front process.
/// Reading gives the request first, then whatever the client sends next; writing
/// goes straight to the client. Dropped without [`Conn::keep`], it is closed for
/// everyone (as [`Conn::close`]).
pub struct Conn {
    id: u64,
    peer: SocketAddr,
    request: Vec<u8>,
    pos: usize,
    stream: TcpStream,
    front: RawFd,
    done: bool,
}

impl Conn {
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }
    /// The complete request the front process read (head and any body).
    pub fn request(&self) -> &[u8] {
        &self.request
    }
    /// The client's socket (non-blocking: its flags are shared with the front's copy,
    /// so they must not be changed).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }
    /// Done with this request; the front keeps the client and hands the connection
    /// over again with its next request (keep-alive without holding it here).
    pub fn keep(mut self) -> io::Result<()> {
        self.done = true;
        proto::send_done(self.front, proto::KEEP, self.id)
    }
    /// Done, and close the client's connection everywhere.
    pub fn close(mut self) -> io::Result<()> {
        self.done = true;
        proto::send_done(self.front, proto::CLOSE, self.id)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if !self.done {
            let _ = proto::send_done(self.front, proto::CLOSE, self.id);
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < self.request.len() {
            let n = buf.len().min(self.request.len() - self.pos);
            buf[..n].copy_from_slice(&self.request[self.pos..self.pos + n]);
            self.pos += n;
            return Ok(n);
        }
        self.stream.read(buf)
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
