//! A non-blocking client socket to the server under test, from one of several
//! source addresses (loopback runs past one address's ephemeral ports).

use std::io;
use std::net::{IpAddr, SocketAddr};

/// Open connection `n`, from `sources[n % len]` if any; the connect is in progress.
pub fn open(addr: SocketAddr, sources: &[IpAddr], n: usize) -> io::Result<std::net::TcpStream> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    if !sources.is_empty() {
        let src = sources[n % sources.len()];
        // Let connect() choose the port from the whole 4-tuple: a bind() to port 0
        // reserves a port for every destination and draws from only half the
        // ephemeral range, so ~14,000 connections from one address already failed.
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on our own socket with an int option.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        s.bind(&SocketAddr::new(src, 0).into())?;
    }
    match s.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(s.into())
}
