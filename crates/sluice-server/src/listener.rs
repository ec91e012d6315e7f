//! Listening sockets: one per worker per address, with `SO_REUSEPORT`, so the
//! kernel spreads new connections over workers without a shared accept lock.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;

pub fn bind(addr: SocketAddr, backlog: i32) -> io::Result<mio::net::TcpListener> {
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
    sock.listen(backlog)?;
    Ok(mio::net::TcpListener::from_std(sock.into()))
}
