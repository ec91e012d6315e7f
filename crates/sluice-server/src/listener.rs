//! Listening sockets: one per worker per address, with `SO_REUSEPORT`, so the
//! kernel spreads new connections over workers without a shared accept lock.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;

/// Is anyone else listening on `addr`? `SO_REUSEPORT` lets any process of the same
/// user bind a port that is already served, and the kernel then splits new
/// connections between the two servers without a word: a second `sluice serve` (or
/// another server started with `reuseport`) would silently take half the traffic. A
/// bind without `SO_REUSEPORT` fails where a listener exists, so try one first.
pub fn ensure_free(addr: SocketAddr) -> io::Result<()> {
    let sock = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.cloexec(),
        Some(Protocol::TCP),
    )?;
    // Connections of an earlier run in TIME_WAIT do not count.
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    match sock.bind(&addr.into()) {
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(io::Error::new(
            e.kind(),
            "address already in use: another server listens there (sluice would otherwise share its connections with it)",
        )),
        r => r,
    }
}

/// `defer_accept_s`: TCP_DEFER_ACCEPT in seconds (0 = off).
pub fn bind(
    addr: SocketAddr,
    backlog: i32,
    defer_accept_s: u64,
) -> io::Result<mio::net::TcpListener> {
    let sock = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.bind(&addr.into())?;
    // Accepted sockets inherit TCP_NODELAY from their listener (Linux copies the
    // listener's TCP state into each child): set once here, not once per connection
    // (a system call saved on every new connection).
    sock.set_nodelay(true)?;
    if defer_accept_s > 0 {
        // Request packaging in the kernel: a connection that has sent no byte is not
        // handed to accept() for this long, so silent connections (the paper's
        // "incomplete" attack) hold no descriptor and no slot in the server.
        let secs = defer_accept_s as libc::c_int;
        // SAFETY: setsockopt with an int on our own socket.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&sock),
                libc::IPPROTO_TCP,
                libc::TCP_DEFER_ACCEPT,
                (&secs as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    sock.listen(backlog)?;
    Ok(mio::net::TcpListener::from_std(sock.into()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn accepted_sockets_inherit_nodelay_from_the_listener() {
        let l = super::bind("127.0.0.1:0".parse().unwrap(), 16, 0).unwrap();
        let addr = l.local_addr().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let accepted = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(5))
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert!(accepted.nodelay().unwrap(), "TCP_NODELAY not inherited");
    }
}
