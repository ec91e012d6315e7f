//! The handoff protocol between a conditioning stage and the process after it.
//!
//! One `SOCK_SEQPACKET` Unix-domain connection per downstream process (a backend or
//! a relay). Sequenced packets keep message boundaries and make each `sendmsg` and
//! `recvmsg` atomic, so a descriptor and the request that goes with it always
//! arrive together, in one message, even when several processes of a pre-forked
//! server share the connection.
//!
//! Downstream → upstream, 12 bytes each:
//! - `ASK`: "give me one connection" (the paper's sentinel byte): one per
//!   `cc_accept`, so a backend that is busy is never handed work it cannot take.
//! - `KEEP id`: done with this request; the stage upstream keeps the client and
//!   hands the connection over again when its next request is complete (the
//!   persistent-connection split).
//! - `CLOSE id`: done, and close the client for everyone.
//!
//! Upstream → downstream, one message per handoff: a 40-byte header (kind, version,
//! address family, request length, id, peer address and port) then exactly one
//! complete request (head and any body), with the client's socket in an
//! `SCM_RIGHTS` control message.
//!
//! Sockets are socket2's; `sendmsg`/`recvmsg` with their `SCM_RIGHTS` control
//! messages are rustix's (neither std nor socket2 builds control messages, and
//! rustix's receive buffer closes any descriptor nobody takes). The messages'
//! bytes are the product's own wire format, written here. libc remains for the one
//! call on a descriptor number that may name nothing any more ([`send_done`]).

use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use socket2::{Domain, SockAddr, Socket, Type};
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::path::Path;

pub const ASK: u8 = b'A';
pub const KEEP: u8 = b'K';
pub const CLOSE: u8 = b'C';
pub const HANDOFF: u8 = b'R';
const VERSION: u8 = 1;
pub const CTL_LEN: usize = 12;
pub const HEADER_LEN: usize = 40;
/// Largest request a handoff carries (head and body); the front refuses bigger.
pub const MAX_REQUEST: usize = 128 * 1024;

/// A client connection handed downstream.
#[derive(Debug)]
pub struct Handoff {
    /// The upstream stage's name for this connection (echoed in `KEEP`/`CLOSE`).
    pub id: u64,
    pub peer: SocketAddr,
    /// Exactly one complete request.
    pub request: Vec<u8>,
    pub fd: OwnedFd,
}

/// `unix:PATH` or `PATH` → PATH.
pub fn unix_path(s: &str) -> &Path {
    Path::new(s.strip_prefix("unix:").unwrap_or(s))
}

fn seqpacket(nonblocking: bool) -> io::Result<Socket> {
    // socket2 sets close-on-exec.
    let s = Socket::new(Domain::UNIX, Type::SEQPACKET, None)?;
    s.set_nonblocking(nonblocking)?;
    Ok(s)
}

/// The error, with the socket's path in it.
fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Connect to a stage's socket (blocking).
pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    let s = seqpacket(false)?;
    s.connect(&SockAddr::unix(path)?).map_err(|e| at(path, e))?;
    Ok(s.into())
}

/// Connect (waiting for the connection), then make the socket non-blocking, for an
/// event loop.
pub fn connect_nonblocking(path: &Path) -> io::Result<OwnedFd> {
    let s = seqpacket(false)?;
    s.connect(&SockAddr::unix(path)?).map_err(|e| at(path, e))?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Listen on a stage's socket (non-blocking). A stale socket file left by a
/// process that died is replaced; anything else at the path is an error.
pub fn listen(path: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: exists and is not a socket", path.display()),
            ));
        }
        if connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{}: another process listens there", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let s = seqpacket(true)?;
    s.bind(&SockAddr::unix(path)?).map_err(|e| at(path, e))?;
    s.listen(128).map_err(|e| at(path, e))?;
    Ok(s.into())
}

/// Accept a downstream process on a listening stage socket (non-blocking).
pub fn accept(listener: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: the caller holds its listening socket open for the call.
    let l = unsafe { BorrowedFd::borrow_raw(listener) };
    Ok(rustix::net::accept_with(
        l,
        rustix::net::SocketFlags::NONBLOCK | rustix::net::SocketFlags::CLOEXEC,
    )?)
}

/// `KEEP id` or `CLOSE id` for a connection handed over earlier, sent on `sock`
/// only if it still is a stage socket (`SOCK_SEQPACKET`). A backend keeps the
/// front's socket by number; after the front went away and the program closed
/// that socket, the number may name another descriptor, and a TCP client's socket
/// there would receive the 12 bytes as data. (Another stage socket there, a new
/// front's, is harmless: a front's ids are its own, so it ignores the message.)
/// One `getsockopt` more per connection, only in the library's calls; the
/// server's own workers hold their front socket themselves and use [`send_ctl`].
pub fn send_done(sock: RawFd, kind: u8, id: u64) -> io::Result<()> {
    // A raw getsockopt, not socket2's: the number may name nothing any more, and a
    // `BorrowedFd` must name an open descriptor; here EBADF is an answer.
    let mut ty: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into a local int of the given length.
    let r = unsafe {
        libc::getsockopt(
            sock,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut ty as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r != 0 || ty != libc::SOCK_SEQPACKET {
        return Err(io::Error::new(
            io::ErrorKind::NotConnected,
            "the conditioning front process this connection came from is gone",
        ));
    }
    send_ctl(sock, kind, id)
}

/// A stage socket's error as a backend should see it: the peer process gone
/// (`EPIPE`, `ECONNRESET`, `ENOTCONN`) becomes `ECONNABORTED`, what a receive
/// reports when it meets the peer's EOF, so one error says "connect again".
pub fn front_gone(e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN) => {
            io::Error::from_raw_os_error(libc::ECONNABORTED)
        }
        _ => e,
    }
}

/// Send `ASK`, `KEEP id` or `CLOSE id`.
pub fn send_ctl(sock: RawFd, kind: u8, id: u64) -> io::Result<()> {
    let mut m = [0u8; CTL_LEN];
    m[0] = kind;
    m[1] = VERSION;
    m[4..12].copy_from_slice(&id.to_le_bytes());
    // SAFETY: the caller holds its stage socket open for the call.
    let sock = unsafe { BorrowedFd::borrow_raw(sock) };
    loop {
        match rustix::net::send(sock, &m, SendFlags::NOSIGNAL) {
            Ok(n) if n == m.len() => return Ok(()),
            Ok(_) => return Err(io::ErrorKind::WriteZero.into()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Read one control message: `Ok(None)` at EOF (the downstream process is gone).
pub fn recv_ctl(sock: RawFd) -> io::Result<Option<(u8, u64)>> {
    let mut m = [0u8; CTL_LEN];
    // SAFETY: the caller holds its stage socket open for the call.
    let sock = unsafe { BorrowedFd::borrow_raw(sock) };
    let n = loop {
        match rustix::net::recv(sock, &mut m, RecvFlags::empty()) {
            Ok((n, _)) => break n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    if n == 0 {
        return Ok(None);
    }
    if n != CTL_LEN || m[1] != VERSION || ![ASK, KEEP, CLOSE].contains(&m[0]) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad control message",
        ));
    }
    let id = u64::from_le_bytes(m[4..12].try_into().expect("8 bytes"));
    Ok(Some((m[0], id)))
}

/// Hand a client socket and its request downstream (one atomic message).
pub fn send_handoff(
    sock: RawFd,
    client: RawFd,
    id: u64,
    peer: SocketAddr,
    request: &[u8],
) -> io::Result<()> {
    if request.len() > MAX_REQUEST {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "request too large to hand off",
        ));
    }
    let mut h = [0u8; HEADER_LEN];
    h[0] = HANDOFF;
    h[1] = VERSION;
    h[4..8].copy_from_slice(&(request.len() as u32).to_le_bytes());
    h[8..16].copy_from_slice(&id.to_le_bytes());
    match peer.ip() {
        IpAddr::V4(a) => {
            h[2] = 4;
            h[16..20].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            h[2] = 6;
            h[16..32].copy_from_slice(&a.octets());
        }
    }
    h[32..34].copy_from_slice(&peer.port().to_le_bytes());
    // SAFETY: the caller holds both descriptors open for the call.
    let (sock, client) = unsafe { (BorrowedFd::borrow_raw(sock), BorrowedFd::borrow_raw(client)) };
    let fds = [client];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let pushed = control.push(SendAncillaryMessage::ScmRights(&fds));
    debug_assert!(pushed, "the buffer is sized for one descriptor");
    let iov = [IoSlice::new(&h), IoSlice::new(request)];
    loop {
        match rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receive one handoff (blocking or not, as the socket is). `Ok(None)` at EOF.
pub fn recv_handoff(sock: RawFd, buf: &mut Vec<u8>) -> io::Result<Option<Handoff>> {
    buf.clear();
    buf.resize(HEADER_LEN + MAX_REQUEST, 0);
    // SAFETY: the caller holds its stage socket open for the call.
    let sock = unsafe { BorrowedFd::borrow_raw(sock) };
    // Room for more than the one descriptor a handoff carries: a message with a few
    // more is refused for its count, a larger one as cut short (`MSG_CTRUNC`; the
    // kernel closes what did not fit). Either way none stays open here.
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = loop {
        let mut iov = [IoSliceMut::new(buf)];
        match rustix::net::recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(m) => break m,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    // Take every descriptor that came, first: the one kept is owned from here, and
    // any other is closed as it drops (as is any left in `control`).
    let (mut fd, mut count) = (None, 0usize);
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            for f in fds {
                count += 1;
                fd.get_or_insert(f);
            }
        }
    }
    let n = msg.bytes;
    if n == 0 && count == 0 {
        return Ok(None);
    }
    if msg
        .flags
        .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad handoff: truncated",
        ));
    }
    let (Some(fd), 1) = (fd, count) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad handoff: descriptor count",
        ));
    };
    let (id, peer) = decode(&buf[..n])?;
    Ok(Some(Handoff {
        id,
        peer,
        request: buf[HEADER_LEN..n].to_vec(),
        fd,
    }))
}

/// Check a handoff message's bytes (header and request): its id and the peer, or
/// why it is not one. The request is `msg[HEADER_LEN..]`.
pub fn decode(msg: &[u8]) -> io::Result<(u64, SocketAddr)> {
    let bad = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad handoff: {why}"),
        ))
    };
    if msg.len() < HEADER_LEN || msg[0] != HANDOFF || msg[1] != VERSION {
        return bad("header");
    }
    let len = u32::from_le_bytes(msg[4..8].try_into().expect("4 bytes")) as usize;
    if msg.len() != HEADER_LEN + len || len > MAX_REQUEST {
        return bad("length");
    }
    let id = u64::from_le_bytes(msg[8..16].try_into().expect("8 bytes"));
    let port = u16::from_le_bytes([msg[32], msg[33]]);
    let ip = match msg[2] {
        4 => IpAddr::V4(Ipv4Addr::new(msg[16], msg[17], msg[18], msg[19])),
        6 => IpAddr::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(&msg[16..32]).expect("16 bytes"),
        )),
        _ => return bad("address family"),
    };
    Ok((id, SocketAddr::new(ip, port)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::{AsFd, AsRawFd};

    #[test]
    fn malformed_handoffs_are_refused() {
        let mut good = vec![0u8; HEADER_LEN + 3];
        good[0] = HANDOFF;
        good[1] = VERSION;
        good[2] = 4;
        good[4..8].copy_from_slice(&3u32.to_le_bytes());
        good[8..16].copy_from_slice(&9u64.to_le_bytes());
        good[16..20].copy_from_slice(&[10, 0, 0, 1]);
        good[32..34].copy_from_slice(&80u16.to_le_bytes());
        assert_eq!(decode(&good).unwrap(), (9, "10.0.0.1:80".parse().unwrap()));
        let mut cases = Vec::new();
        cases.push(good[..HEADER_LEN - 1].to_vec()); // short
        cases.push(good[..HEADER_LEN + 2].to_vec()); // body shorter than declared
        let mut c = good.clone();
        c[0] = ASK; // not a handoff
        cases.push(c);
        let mut c = good.clone();
        c[1] = 2; // unknown version
        cases.push(c);
        let mut c = good.clone();
        c[2] = 5; // no such family
        cases.push(c);
        let mut c = good.clone();
        c[4..8].copy_from_slice(&u32::MAX.to_le_bytes()); // absurd length
        cases.push(c);
        for c in cases {
            assert!(decode(&c).is_err(), "{c:?}");
        }
    }

    /// A handoff with two descriptors (or none) is refused, every descriptor that
    /// came with it is closed (none leaks into the backend), and the next, good
    /// handoff on the same socket is read as usual.
    #[test]
    fn a_handoff_with_the_wrong_descriptors_is_refused_and_leaks_none() {
        use std::os::unix::net::UnixStream;
        let (up, down) = UnixStream::pair().unwrap(); // stands in for a stage socket
        let mut h = [0u8; HEADER_LEN];
        h[0] = HANDOFF;
        h[1] = VERSION;
        h[2] = 4;
        h[16..20].copy_from_slice(&[127, 0, 0, 1]);
        let send_with = |fds: &[BorrowedFd<'_>]| {
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            if !fds.is_empty() {
                assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
            }
            rustix::net::sendmsg(&up, &[IoSlice::new(&h)], &mut control, SendFlags::empty())
                .unwrap();
        };
        let (a1, mut b1) = UnixStream::pair().unwrap();
        let (a2, mut b2) = UnixStream::pair().unwrap();
        send_with(&[a1.as_fd(), a2.as_fd()]);
        drop((a1, a2)); // the only copies left are the ones in flight
        let mut buf = Vec::new();
        let e = recv_handoff(down.as_raw_fd(), &mut buf).unwrap_err();
        assert!(e.to_string().contains("descriptor count"), "{e}");
        for b in [&mut b1, &mut b2] {
            b.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            assert_eq!(
                b.read(&mut [0u8; 1]).unwrap(),
                0,
                "a passed descriptor was kept open"
            );
        }
        send_with(&[]);
        let e = recv_handoff(down.as_raw_fd(), &mut buf).unwrap_err();
        assert!(e.to_string().contains("descriptor count"), "{e}");
        let (a3, _b3) = UnixStream::pair().unwrap();
        send_with(&[a3.as_fd()]);
        let got = recv_handoff(down.as_raw_fd(), &mut buf).unwrap().unwrap();
        assert_eq!((got.id, got.peer), (0, "127.0.0.1:0".parse().unwrap()));
    }

    #[test]
    fn a_socket_and_its_request_arrive_together() {
        let dir = std::env::temp_dir().join(format!("sluicecc-proto-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let l = listen(&dir).unwrap();
        let down = connect(&dir).unwrap();
        let up = loop {
            match accept(l.as_raw_fd()) {
                Ok(s) => break s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => panic!("{e}"),
            }
        };
        // A connected TCP pair stands in for a client.
        let tl = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(tl.local_addr().unwrap()).unwrap();
        let (server_side, peer) = tl.accept().unwrap();
        send_ctl(down.as_raw_fd(), ASK, 0).unwrap();
        assert_eq!(recv_ctl(up.as_raw_fd()).unwrap(), Some((ASK, 0)));
        let req = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        send_handoff(up.as_raw_fd(), server_side.as_raw_fd(), 42, peer, req).unwrap();
        drop(server_side); // the upstream copy may go; the passed one keeps the socket
        let mut buf = Vec::new();
        let h = recv_handoff(down.as_raw_fd(), &mut buf).unwrap().unwrap();
        assert_eq!((h.id, h.peer, &h.request[..]), (42, peer, &req[..]));
        let mut s = std::net::TcpStream::from(h.fd);
        s.write_all(b"hi").unwrap();
        let mut got = [0u8; 2];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
        send_ctl(down.as_raw_fd(), KEEP, 42).unwrap();
        assert_eq!(recv_ctl(up.as_raw_fd()).unwrap(), Some((KEEP, 42)));
        drop(down);
        // Another test in this process forks (the C API's `cc_fork`): its child may
        // hold a copy of `down` for a moment, so wait for the EOF, bounded.
        let mut p = libc::pollfd {
            fd: up.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 5000) }, 1, "no EOF");
        assert_eq!(recv_ctl(up.as_raw_fd()).unwrap(), None);
        let _ = std::fs::remove_file(&dir);
    }
}
