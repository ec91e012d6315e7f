//! TLS on a worker's connections: moving records between a connection's
//! `rustls::ServerConnection` and its non-blocking socket, from the worker's own
//! event loop. The configuration (certificates, SNI, versions) is `sluice-tls`'s.
//!
//! Owns: reading (ciphertext in, plaintext into the connection's request buffer),
//! the [`TlsWire`] a response is flushed through, and the few one-shot writes the
//! worker makes outside a response (a 408, an errant client's drip, close_notify).
//! Must not: decide anything about the connection. Deadlines, conditioning classes
//! and closing stay in `worker/`; a handshake in progress is simply a connection
//! in its first `Head` phase, so it has the head's total deadline and counts as
//! incomplete in the address tree like any connection that has not yet sent a
//! request.
//!
//! The buffered rustls API (`read_tls`/`process_new_packets`/`write_tls`) is used,
//! not the unbuffered one: it is the proven path with edge-triggered mio, and its
//! buffers are empty between requests (rustls frees a record buffer once it is
//! written, and the worker pulls every plaintext byte into its own pooled buffer),
//! so an idle keep-alive connection holds no plaintext. The unbuffered API would
//! save one copy of each record; that copy was not measured to matter next to the
//! AES-GCM work on the same bytes, and it would make this module own the record
//! buffers and their reuse.
//!
//! Costs: each read is one `recv` into rustls's buffer, decryption in place, and
//! one copy of the plaintext into the request buffer; each response chunk is one
//! copy into a record and one `send`. Records in flight are bounded by rustls's
//! buffer limit (64 KiB by default), so a slow TLS reader costs what a slow plain
//! reader does plus at most that.

use crate::io::ReadOutcome;
use crate::send::Wire;
use mio::net::TcpStream;
use rustls::ServerConnection;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;

/// Write what rustls holds (handshake flights, records, alerts) to the socket:
/// `Ok(true)` when all of it went, `Ok(false)` when the socket is full.
pub fn push(sock: &TcpStream, tls: &mut ServerConnection) -> io::Result<bool> {
    while tls.wants_write() {
        match tls.write_tls(&mut &*sock) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Read what the client sent: ciphertext from the socket through rustls (which
/// also answers handshake messages), plaintext into `buf` up to `limit` bytes.
/// Same outcomes as the plain read: `Blocked` only once the socket said EAGAIN
/// and rustls holds no plaintext, so an edge-triggered poll will wake us.
pub(crate) fn read_into(
    sock: &TcpStream,
    tls: &mut ServerConnection,
    buf: &mut Vec<u8>,
    pool: &mut Vec<Vec<u8>>,
    limit: usize,
    chunk: usize,
) -> io::Result<ReadOutcome> {
    let mut eof = false;
    loop {
        // Plaintext rustls already decrypted comes first.
        if buf.len() >= limit {
            return Ok(ReadOutcome::Full);
        }
        crate::io::pooled(buf, pool, chunk);
        if buf.capacity() - buf.len() < 512 {
            buf.reserve(chunk);
        }
        let old = buf.len();
        let room = (buf.capacity() - old).min(limit - old);
        buf.resize(old + room, 0);
        let got = tls.reader().read(&mut buf[old..]);
        buf.truncate(old + *got.as_ref().unwrap_or(&0));
        match got {
            Ok(0) => return Ok(ReadOutcome::Eof), // close_notify
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !eof => {}
            // TCP EOF without close_notify (a careless client, or a truncation
            // attempt): either way the connection is over.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::UnexpectedEof | io::ErrorKind::WouldBlock
                ) =>
            {
                return Ok(ReadOutcome::Eof)
            }
            Err(e) => return Err(e),
        }
        // Nothing decrypted is waiting: more ciphertext.
        match tls.read_tls(&mut &*sock) {
            // EOF: rustls processes what it has; the plaintext is handed out above.
            Ok(0) => eof = true,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if buf.is_empty() {
                    // Nothing to parse: do not keep a buffer while waiting.
                    crate::io::recycle(pool, std::mem::take(buf));
                }
                return Ok(ReadOutcome::Blocked);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if let Err(e) = tls.process_new_packets() {
            return Err(refused(sock, tls, e));
        }
        // Handshake flights and session tickets: out now if the socket takes them,
        // else when it is writable again (the worker pushes before anything else).
        if !eof {
            push(sock, tls)?;
        }
    }
}

/// Ciphertext already read off the socket (what followed a PROXY protocol header
/// on an HTTPS listener: the start of the handshake) handed to rustls as if it had
/// just arrived, and whatever it answers pushed out. Every byte is taken or the
/// connection is bad (`InvalidData`).
pub(crate) fn feed(
    sock: &TcpStream,
    tls: &mut ServerConnection,
    mut bytes: &[u8],
) -> io::Result<()> {
    while !bytes.is_empty() {
        tls.read_tls(&mut bytes)?;
        if let Err(e) = tls.process_new_packets() {
            return Err(refused(sock, tls, e));
        }
    }
    push(sock, tls).map(|_| ())
}

/// The body a plain HTTP request on an HTTPS port is answered with.
const PLAIN_ON_TLS: &str = "This port speaks HTTPS: ask for the https:// URL.\n";

/// The connection sent what rustls refused: tell the client why, best effort, and
/// give the worker the error that closes it. A first record of no TLS content type
/// during the handshake is a client speaking plain HTTP to the HTTPS port (`curl
/// http://host:443/`): it gets a plain 400 saying so, as nginx answers, rather
/// than a TLS alert it cannot read and an empty reply. Anything else gets the
/// alert rustls queued.
fn refused(sock: &TcpStream, tls: &mut ServerConnection, e: rustls::Error) -> io::Error {
    let plain = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
    if tls.is_handshaking() && e == plain {
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{PLAIN_ON_TLS}",
            PLAIN_ON_TLS.len()
        );
        let _ = (&*sock).write(answer.as_bytes());
    } else {
        let _ = push(sock, tls);
    }
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// One best-effort write outside a response (a 408, a tarpit's line): bytes of
/// `msg` taken (0 while earlier records wait), or -1 if the connection is gone.
pub fn send_some(sock: &TcpStream, tls: &mut ServerConnection, msg: &[u8]) -> isize {
    match push(sock, tls) {
        Ok(true) => {}
        Ok(false) => return 0,
        Err(_) => return -1,
    }
    let n = match tls.writer().write(msg) {
        Ok(n) => n,
        Err(_) => return -1,
    };
    match push(sock, tls) {
        Err(_) => -1,
        Ok(_) => n as isize,
    }
}

/// A response's path through TLS: plaintext in, records out.
pub struct TlsWire<'a> {
    pub sock: &'a TcpStream,
    pub tls: &'a mut ServerConnection,
}

impl Wire for TlsWire<'_> {
    fn fd(&self) -> i32 {
        self.sock.as_raw_fd()
    }
    fn zero_copy(&self) -> bool {
        false
    }
    fn send(&mut self, iov: &[io::IoSlice<'_>], _more: bool) -> io::Result<usize> {
        // Earlier records first: plaintext is taken only when the socket has
        // drained them, so at most one batch of records is held per connection.
        if !push(self.sock, self.tls)? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.tls.writer().write_vectored(iov)?;
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        // Out now if the socket takes it; what stays is pushed by the next call.
        push(self.sock, self.tls)?;
        Ok(n)
    }
    fn drain(&mut self) -> io::Result<bool> {
        push(self.sock, self.tls)
    }
}
