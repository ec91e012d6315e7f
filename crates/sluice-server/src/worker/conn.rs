//! A connection's record ([`Conn`]) and the small types around it: where it is in
//! its life ([`Phase`]), its yes/no states in one byte ([`Flags`]), what only some
//! connections carry behind one pointer ([`Via`]: a TLS session, a front process's
//! id), how it counts against the range caps ([`Cap`]). The bottom of the worker:
//! it depends on nothing else in it. Memory matters here: an idle keep-alive
//! connection is this record and little else (see the test at the end).

use crate::accesslog::Pending;
use crate::io::{send_some, unread_bytes_waiting};
use crate::send::Outgoing;
use crate::tls;
use mio::net::TcpStream;
use sluice_condition::CloseReason;
use std::net::IpAddr;

/// Milliseconds since the worker started: connection times are stored this way
/// (8 bytes, not 16) because an idle connection's record is most of its memory.
pub(super) type Ms = u64;
pub(super) const NEVER: Ms = u64::MAX;

/// How many times one request may wait for the disk pool's lookups (a directory,
/// then its index file, then that file's sibling) before the worker makes the
/// next one itself: the pages read for it can be evicted again before it asks.
pub(super) const MAX_DISK_ROUNDS: u32 = 3;

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Waiting for (more of) a request head since `started`; first skipping
    /// `discard` bytes of the last request's body (u32: `http.max_body_discard` is
    /// at most 2^30). The count lives here, in the enum's padding, not in `Conn`.
    Head { started: Ms, discard: u32 },
    /// A complete request head (in `rbuf`, not yet parsed for good) waiting for its
    /// turn to be answered: in the conditioner's `Class::Ready` tree until
    /// `Worker::run_ready` picks it; the head's total deadline still runs from
    /// `started`, and past it the request is answered 503 (`CloseReason::Busy`).
    Ready { started: Ms },
    /// A complete request (in `rbuf`) whose answer needs the disk: a path, or a
    /// small file's bytes, not in the kernel's caches (`sluice_static::cold`). A
    /// disk thread makes the lookup meanwhile; then `Worker::disk_ready` asks it
    /// again from the start. `rounds`: how many times this request has waited so
    /// (after [`MAX_DISK_ROUNDS`] the worker makes the next lookup itself).
    Disk { started: Ms, rounds: u32 },
    /// Sending a response; `last` is the last time bytes moved.
    Send { last: Ms },
    /// Keep-alive, nothing buffered.
    Idle { since: Ms },
    /// The last response is written and our side is shut down; reading and
    /// discarding what the client still sends (bounded in time and bytes) so that
    /// closing does not send a RST that destroys the response's tail (RFC 9112 §9.6).
    /// At most `left` more bytes are read and thrown away.
    Linger { since: Ms, left: u32 },
    /// Answering an errant client slowly (`tarpit`, `oversize`) until `until`; the
    /// rest of its state is in `Worker::drips`. Holds no buffers.
    Drip { until: Ms },
}

impl Phase {
    /// When the request head being read began, or `now` outside `Head`.
    pub(super) fn head_started_or(self, now: Ms) -> Ms {
        match self {
            Phase::Head { started, .. } => started,
            _ => now,
        }
    }
}

pub(super) struct Conn {
    pub(super) sock: TcpStream,
    pub(super) peer: IpAddr,
    pub(super) gen: u32,
    pub(super) phase: Phase,
    pub(super) rbuf: Vec<u8>,
    /// The response being sent; `None` between responses (pooled, so an idle
    /// connection does not carry it).
    pub(super) out: Option<Box<Outgoing>>,
    pub(super) requests: u32,
    /// Eight yes/no facts about the connection in one byte (see [`Flags`]): an
    /// idle connection's record is most of what it costs.
    pub(super) flags: Flags,
    /// How the per-range caps see it (over its cap: its request gets 503).
    pub(super) cap: Cap,
    /// Why it will close once its last response is written.
    pub(super) why: CloseReason,
    /// How it came: `None` for plain HTTP from a listener (most connections, so
    /// the rest costs them one pointer).
    pub(super) via: Option<Box<Via>>,
    pub(super) deadline: Ms,
    /// When this connection's live wheel entry comes up (`NEVER` if none).
    pub(super) wheel_at: Ms,
}

/// A connection's yes/no state, one bit each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Flags(pub(super) u8);

impl Flags {
    /// Close once the response in flight is written.
    pub(super) const CLOSE_AFTER: u8 = 1;
    /// The socket said EAGAIN on read; wait for the next readable edge.
    pub(super) const READ_BLOCKED: u8 = 2;
    /// The socket said EAGAIN on write; wait for the next writable edge.
    pub(super) const WRITE_BLOCKED: u8 = 4;
    /// The client shut its sending side; answer what is buffered, then close.
    pub(super) const PEER_CLOSED: u8 = 8;
    /// epoll reported RDHUP: do not trust a short read to mean "drained".
    pub(super) const RDHUP: u8 = 16;
    /// Request bytes may be left unread when we close (a refused head, a body we
    /// do not read): close by lingering, not at once.
    pub(super) const LINGER: u8 = 32;
    /// Waiting in the worker's send queue for its next turn.
    pub(super) const QUEUED: u8 = 64;
    /// Waiting for a PROXY protocol header (a `server.proxy_protocol` listener).
    pub(super) const PROXY_PENDING: u8 = 128;

    pub(super) fn has(self, f: u8) -> bool {
        self.0 & f != 0
    }
    pub(super) fn set(&mut self, f: u8, on: bool) {
        if on {
            self.0 |= f;
        } else {
            self.0 &= !f;
        }
    }
}

/// A connection that is not plain HTTP from a listener (boxed in `Conn::via`, so
/// the size difference between the variants costs nothing per connection).
#[allow(clippy::large_enum_variant)]
pub(super) enum Via {
    /// HTTPS: its TLS session (`tls.rs`).
    Tls(rustls::ServerConnection),
    /// Handed over by a `sluice condition` front process, with its id there. It
    /// carries exactly one request; its socket is not read here.
    Front(u64),
}

/// The TLS session of an HTTPS connection (a function of the field, not of the
/// whole `Conn`, so the socket can be borrowed beside it).
pub(super) fn tls_of(via: &mut Option<Box<Via>>) -> Option<&mut rustls::ServerConnection> {
    match via.as_deref_mut() {
        Some(Via::Tls(t)) => Some(t),
        _ => None,
    }
}

impl Conn {
    /// The front process's id for a handed-over connection, 0 otherwise.
    pub(super) fn front_id(&self) -> u64 {
        match self.via.as_deref() {
            Some(Via::Front(id)) => *id,
            _ => 0,
        }
    }

    /// Whether the connection closes after the response now starting (both the
    /// full path and a kept answer say it here). Anything pipelined behind a
    /// closing response is drained, never parsed (lingering). Returns whether our
    /// FIN follows the response: a front process holds its own copy of the socket,
    /// so this process's close sends none.
    pub(super) fn close_after(&mut self, close: bool) -> bool {
        self.flags.set(Flags::CLOSE_AFTER, close);
        if close && !self.rbuf.is_empty() {
            self.flags.set(Flags::LINGER, true);
        }
        close && self.front_id() == 0
    }

    /// Nothing asked on it: no response in flight, no request bytes read, and
    /// none waiting in its socket (one `recv(MSG_PEEK)`: a busy keep-alive
    /// client's next request may have arrived since the worker last read). The
    /// one rule by which a stop (SIGTERM, or SIGTERM during an upgrade's quit)
    /// closes a connection at once rather than answering what it asked.
    pub(super) fn asks_nothing(&self) -> bool {
        self.out.is_none() && self.rbuf.is_empty() && !unread_bytes_waiting(&self.sock)
    }
}

/// A connection and the per-range caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cap {
    /// From an exempt range: not counted.
    Exempt,
    /// Counted against its ranges.
    Counted,
    /// Counted, and its range was over a cap when it connected.
    Over,
}

pub(super) enum Step {
    /// A response is queued; drive again to send it.
    Responded,
    /// Need more bytes from the client.
    NeedMore,
    Close,
    /// The connection left the request cycle (an errant-client answer took it),
    /// or it is already waiting in `Phase::Ready`.
    Parked,
    /// A complete request now waits for its turn (`Phase::Ready`).
    Wait,
}

/// A connection answered slowly (`tarpit`, `oversize`): what to send each turn.
pub(super) struct Drip {
    /// Sent every `every` ms: a tarpit's line, or a block of an oversize body.
    pub(super) piece: std::sync::Arc<[u8]>,
    pub(super) every: Ms,
    /// Bytes still allowed.
    pub(super) budget: u64,
    pub(super) sent: u64,
    pub(super) log: Option<Pending>,
    /// When the request's head began (its log line's `request_time`).
    pub(super) started: Ms,
}

/// What a kept answer's request still counts and does each time
/// (`kept::reuse_answer`): its access-log record, the rule that decided it (site,
/// rule, action) for the status page's per-rule counters, and whether the
/// connection closes after it (the client asked: `Connection: close`, HTTP/1.0).
pub(super) struct Kept {
    pub(super) log: Option<Pending>,
    pub(super) rule: Option<(u16, u32, usize)>,
    pub(super) close: bool,
}

/// One non-blocking send outside a response (a 408 before closing, an errant
/// client's drip), through TLS on an HTTPS connection: bytes taken (0 if the
/// socket is full), or -1 if the connection is gone.
pub(super) fn conn_send(c: &mut Conn, msg: &[u8]) -> isize {
    match tls_of(&mut c.via) {
        Some(t) => tls::send_some(&c.sock, t, msg),
        None => send_some(&c.sock, msg),
    }
}

#[cfg(test)]
mod tests {
    /// An idle keep-alive connection costs its `Conn` record plus one 8-byte wheel
    /// entry (docs/BENCHMARKS.md measures its RSS). Keep the record small: anything
    /// only needed while a response is in flight belongs in `Outgoing`, anything
    /// only some connections need behind `via` (TLS, handed over by a front
    /// process: one pointer for everyone else), yes/no state in `flags`. 120 in a
    /// debug build, where mio's TcpStream carries a selector id; 104 in release.
    #[test]
    fn idle_connection_record_stays_small() {
        let size = std::mem::size_of::<super::Conn>();
        assert!(size <= 120, "Conn grew to {size} bytes");
        assert_eq!(std::mem::size_of::<crate::wheel::Key>(), 8);
    }

    /// A stop closes an idle connection only if nothing was asked on it, and a
    /// request waiting unread in its socket counts as asked.
    #[test]
    fn a_request_waiting_in_the_socket_is_asked() {
        use super::*;
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        s.set_nonblocking(true).unwrap();
        let mut c = Conn {
            sock: TcpStream::from_std(s),
            peer: peer.ip(),
            gen: 0,
            phase: Phase::Idle { since: 0 },
            rbuf: Vec::new(),
            out: None,
            requests: 1,
            flags: Flags(Flags::READ_BLOCKED),
            cap: Cap::Counted,
            why: CloseReason::Done,
            via: None,
            deadline: NEVER,
            wheel_at: NEVER,
        };
        assert!(c.asks_nothing());
        c.rbuf.extend_from_slice(b"GET / HT");
        assert!(!c.asks_nothing(), "bytes read and not yet answered");
        c.rbuf.clear();
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let t = std::time::Instant::now();
        while c.asks_nothing() {
            assert!(t.elapsed().as_secs() < 5, "the request never showed");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Peeked, not taken: the request is still there to be answered.
        assert!(!c.asks_nothing());
    }
}
