//! Scripted hostile and slow clients: a connection from another loopback address
//! (so conditioning sees another range), one request on a held keep-alive
//! connection, and a trickler that sends a little every so often until the server
//! closes or a bound passes.
//!
//! Every script is bounded in time and count (tests stop by themselves); none of
//! them asserts anything: they report what happened and the test decides.

use crate::client::read_response;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Connect to `to` from the source address `from` (any 127.x.y.z works on Linux
/// loopback), with a 10 s read timeout.
pub fn connect_from(from: &str, to: &str) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let to: SocketAddr = to.parse().expect("a socket address");
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    let src: SocketAddr = format!("{from}:0").parse().expect("an IPv4 address");
    s.bind(&src.into())?;
    s.connect(&to.into())?;
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    Ok(s)
}

/// One GET on a keep-alive connection, which stays open; the status, or `None` if
/// the connection was closed.
pub fn keepalive_get(s: &mut TcpStream, path: &str) -> Option<u16> {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
        .ok()?;
    read_response(s, false).map(|r| r.status)
}

/// Send `piece(i)` every `every` (the first at once) until a write fails, which
/// means the server closed the connection, or until `bound` passes. Returns how long
/// after the start the server closed it, or `None` if it was still open at `bound`.
pub fn trickle(
    s: &mut TcpStream,
    every: Duration,
    bound: Duration,
    mut piece: impl FnMut(usize) -> Vec<u8>,
) -> Option<Duration> {
    let t = Instant::now();
    let mut i = 0;
    while t.elapsed() < bound {
        if s.write_all(&piece(i)).is_err() {
            return Some(t.elapsed());
        }
        i += 1;
        std::thread::sleep(every);
    }
    None
}
