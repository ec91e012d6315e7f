//! Listening sockets: `server.listen_sockets` (4 by default) per worker per address,
//! with `SO_REUSEPORT`, so the kernel spreads new connections over workers without a
//! shared accept lock (and each socket has its own SYN and accept queues), options the
//! accepted sockets inherit (`TCP_NODELAY`, the unsent bound), and `TCP_DEFER_ACCEPT`
//! on them as `crate::deferral` sets it; sockets passed in by systemd or an upgrade are
//! dealt out to the workers (`deal_out`).

use crate::deferral::set_defer_accept;
use crate::io::set_tcp_int;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};

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

/// `defer_accept_s`: TCP_DEFER_ACCEPT in seconds (0 = off); `unsent_max`: see
/// [`set_inherited`].
pub fn bind(
    addr: SocketAddr,
    backlog: i32,
    defer_accept_s: u64,
    unsent_max: u32,
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
    set_inherited(sock.as_raw_fd(), unsent_max)?;
    if defer_accept_s > 0 {
        // Request packaging in the kernel: a connection that has sent no byte is not
        // handed to accept() for this long, so silent connections (the paper's
        // "incomplete" attack) hold no descriptor and no slot in the server.
        set_defer_accept(sock.as_raw_fd(), defer_accept_s)?;
    }
    sock.listen(backlog)?;
    Ok(mio::net::TcpListener::from_std(sock.into()))
}

/// What every accepted socket inherits from its listener (Linux copies the
/// listener's TCP state into each child), set once here instead of once per
/// connection (a system call saved on every new connection): TCP_NODELAY, and
/// TCP_NOTSENT_LOWAT = `unsent_max` bytes (`condition.unsent_max`; 0 leaves the
/// kernel's bound, the whole send buffer). Past that many unsent bytes a socket
/// takes no more (`sendfile` and `write` stop short, `EAGAIN`) and is not writable,
/// so a reader that stops reading holds at most this much of the kernel's memory
/// beyond its own receive window.
pub fn set_inherited(fd: RawFd, unsent_max: u32) -> io::Result<()> {
    set_tcp_int(fd, libc::TCP_NODELAY, 1)?;
    set_unsent_max(fd, unsent_max)
}

/// TCP_NOTSENT_LOWAT = `bytes` on one socket (0: leave the kernel's).
pub fn set_unsent_max(fd: RawFd, bytes: u32) -> io::Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    set_tcp_int(
        fd,
        libc::TCP_NOTSENT_LOWAT,
        bytes.min(i32::MAX as u32) as libc::c_int,
    )
}

/// SO_MAX_PACING_RATE = `v` bytes/s on one connection (`limit_rate`;
/// `sluice_condition::pace::UNPACED` is the kernel's "no limit"): the kernel paces
/// what the socket sends (its own TCP pacing since Linux 4.13, or the `fq` qdisc),
/// so a limited download costs no CPU and no timer here, and the socket is simply
/// writable less often. Set only when a limit is configured (`pace::plan` says
/// when): a socket that never had one is not paced at all.
pub fn set_pacing(fd: RawFd, v: u32) -> io::Result<()> {
    // SAFETY: setsockopt with a u32 on a socket the caller owns.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&v as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Bytes a TCP socket holds that it has not sent yet (`SIOCOUTQNSD`); 0 if the
/// kernel will not say.
pub fn unsent_bytes(fd: RawFd) -> u64 {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQNSD writes one int for a socket the caller owns.
    let r = unsafe { libc::ioctl(fd, libc::SIOCOUTQNSD, &mut n as *mut libc::c_int) };
    if r == 0 {
        n.max(0) as u64
    } else {
        0
    }
}

/// Each worker's listening sockets, and the addresses they listen on.
pub(crate) type Dealt = (Vec<Vec<mio::net::TcpListener>>, Vec<SocketAddr>);

/// Listening sockets passed in (by systemd, or by the server an upgrade replaces),
/// dealt out to `workers`. Per address, as many sockets as workers or more (the
/// `SO_REUSEPORT` sets sluice binds, handed over by an upgrade) go a set to each
/// worker, as when bound here; fewer (systemd's one) are shared: every worker polls
/// its own duplicate and the kernel hands each connection to one accept.
pub(crate) fn deal_out(
    passed: Vec<std::os::fd::OwnedFd>,
    workers: usize,
    unsent_max: u32,
) -> Result<Dealt, String> {
    let mut by_addr: Vec<(SocketAddr, Vec<mio::net::TcpListener>)> = Vec::new();
    for fd in passed {
        let l = std::net::TcpListener::from(fd);
        let a = l.local_addr().map_err(|e| format!("passed socket: {e}"))?;
        l.set_nonblocking(true)
            .map_err(|e| format!("passed socket {a}: {e}"))?;
        // Inherited by every accepted socket.
        set_inherited(l.as_raw_fd(), unsent_max).map_err(|e| format!("passed socket {a}: {e}"))?;
        let l = mio::net::TcpListener::from_std(l);
        match by_addr.iter_mut().find(|(b, _)| *b == a) {
            Some((_, v)) => v.push(l),
            None => by_addr.push((a, vec![l])),
        }
    }
    let mut per_worker: Vec<Vec<mio::net::TcpListener>> =
        (0..workers).map(|_| Vec::new()).collect();
    let mut addrs = Vec::with_capacity(by_addr.len());
    for (a, ls) in by_addr {
        addrs.push(a);
        if ls.len() >= workers {
            for (j, l) in ls.into_iter().enumerate() {
                per_worker[j % workers].push(l);
            }
        } else {
            for w in per_worker.iter_mut() {
                for l in &ls {
                    w.push(clone_listener(l).map_err(|e| format!("passed socket {a}: {e}"))?);
                }
            }
        }
    }
    Ok((per_worker, addrs))
}

/// Another descriptor for the same listening socket (a worker's own copy).
pub(crate) fn clone_listener(l: &mio::net::TcpListener) -> std::io::Result<mio::net::TcpListener> {
    use std::os::fd::AsFd;
    let fd = l.as_fd().try_clone_to_owned()?;
    Ok(mio::net::TcpListener::from_std(
        std::net::TcpListener::from(fd),
    ))
}

/// The next connection `l` accepts, waiting for it (tests).
#[cfg(test)]
pub(crate) fn accept_next(l: &mio::net::TcpListener) -> mio::net::TcpStream {
    loop {
        match l.accept() {
            Ok((s, _)) => return s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;

    #[test]
    fn accepted_sockets_inherit_nodelay_from_the_listener() {
        let l = super::bind("127.0.0.1:0".parse().unwrap(), 16, 0, 0).unwrap();
        let addr = l.local_addr().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let accepted = accept_next(&l);
        assert!(accepted.nodelay().unwrap(), "TCP_NODELAY not inherited");
    }

    fn passed(addr: SocketAddr, n: usize) -> (SocketAddr, Vec<OwnedFd>) {
        let first = bind(addr, 16, 0, 0).unwrap();
        let addr = first.local_addr().unwrap();
        let mut v = vec![OwnedFd::from(std::net::TcpListener::from(first))];
        for _ in 1..n {
            let l = bind(addr, 16, 0, 0).unwrap();
            v.push(OwnedFd::from(std::net::TcpListener::from(l)));
        }
        (addr, v)
    }

    #[test]
    fn passed_sockets_are_dealt_a_set_per_worker_or_shared() {
        // An upgrade's: 4 sockets per worker for one address; systemd's: one for another.
        let (a, mut fds) = passed("127.0.0.1:0".parse().unwrap(), 8);
        let (b, one) = passed("127.0.0.1:0".parse().unwrap(), 1);
        fds.extend(one);
        let (per_worker, addrs) = deal_out(fds, 2, 0).unwrap();
        assert_eq!(addrs, vec![a, b]);
        for ls in &per_worker {
            let mine: Vec<SocketAddr> = ls.iter().map(|l| l.local_addr().unwrap()).collect();
            assert_eq!(mine.iter().filter(|x| **x == a).count(), 4, "{mine:?}");
            assert_eq!(mine.iter().filter(|x| **x == b).count(), 1, "{mine:?}");
        }
        // Each of the 8 is one worker's; the one socket is both workers'.
        let ino = |l: &mio::net::TcpListener| {
            // SAFETY: fstat into a zeroed struct on an open descriptor.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            assert_eq!(unsafe { libc::fstat(l.as_raw_fd(), &mut st) }, 0);
            st.st_ino
        };
        let sockets = |w: usize, addr| -> Vec<u64> {
            per_worker[w]
                .iter()
                .filter(|l| l.local_addr().unwrap() == addr)
                .map(ino)
                .collect()
        };
        let (a0, a1) = (sockets(0, a), sockets(1, a));
        assert!(a0.iter().all(|i| !a1.contains(i)), "{a0:?} {a1:?}");
        assert_eq!(sockets(0, b), sockets(1, b));
    }
}
