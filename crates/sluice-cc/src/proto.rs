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
//! Sockets are socket2's; the messages are hand-written with libc because neither
//! std nor socket2 builds `SCM_RIGHTS` control messages, and they are the product's
//! own wire format.

use socket2::{Domain, SockAddr, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
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
    // SAFETY: accept4 on our listening socket; no address wanted.
    let fd = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor from accept4.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
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
    loop {
        // SAFETY: send from a stack buffer on a socket we hold.
        let n = unsafe { libc::send(sock, m.as_ptr().cast(), m.len(), libc::MSG_NOSIGNAL) };
        if n == m.len() as isize {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if n < 0 && e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return Err(if n < 0 {
            e
        } else {
            io::ErrorKind::WriteZero.into()
        });
    }
}

/// Read one control message: `Ok(None)` at EOF (the downstream process is gone).
pub fn recv_ctl(sock: RawFd) -> io::Result<Option<(u8, u64)>> {
    let mut m = [0u8; CTL_LEN];
    loop {
        // SAFETY: recv into a stack buffer of its length.
        let n = unsafe { libc::recv(sock, m.as_mut_ptr().cast(), m.len(), 0) };
        if n == 0 {
            return Ok(None);
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n as usize != CTL_LEN || m[1] != VERSION || ![ASK, KEEP, CLOSE].contains(&m[0]) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bad control message",
            ));
        }
        let id = u64::from_le_bytes(m[4..12].try_into().expect("8 bytes"));
        return Ok(Some((m[0], id)));
    }
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
    let mut iov = [
        libc::iovec {
            iov_base: h.as_ptr() as *mut _,
            iov_len: h.len(),
        },
        libc::iovec {
            iov_base: request.as_ptr() as *mut _,
            iov_len: request.len(),
        },
    ];
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = [0u64; 4]; // 32 bytes, aligned; CMSG_SPACE(4) is 24
    debug_assert!(space <= std::mem::size_of_val(&cbuf));
    // SAFETY: msghdr is plain data; the pointers below stay valid for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = 2;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer has room for one cmsg carrying one descriptor.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), client);
    }
    loop {
        // SAFETY: msg is fully initialised above.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receive one handoff (blocking or not, as the socket is). `Ok(None)` at EOF.
pub fn recv_handoff(sock: RawFd, buf: &mut Vec<u8>) -> io::Result<Option<Handoff>> {
    buf.clear();
    buf.resize(HEADER_LEN + MAX_REQUEST, 0);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data; the buffers outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    let n = loop {
        // SAFETY: recvmsg into the buffers described by msg.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    // Take ownership of every descriptor that came, first, so none can leak.
    let mut fds: Vec<OwnedFd> = Vec::new();
    // SAFETY: walking the control messages the kernel filled in.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad handoff: truncated",
        ));
    }
    if fds.len() != 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad handoff: descriptor count",
        ));
    }
    let (id, peer) = decode(&buf[..n])?;
    Ok(Some(Handoff {
        id,
        peer,
        request: buf[HEADER_LEN..n].to_vec(),
        fd: fds.pop().expect("one descriptor"),
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
    use std::os::fd::AsRawFd;

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
