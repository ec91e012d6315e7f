//! One load connection's state: its socket, what it has sent, the transactions in
//! flight on it, and how far it is through the current response. Types only.

use super::response::ChunkState;
use mio::net::TcpStream;
use std::collections::VecDeque;
use std::time::Instant;

/// A transaction in flight on a connection.
#[derive(Clone, Copy)]
pub(super) struct Pending {
    /// When the transaction counts from (intended send time in open loop).
    pub(super) start: Instant,
    /// Workload index of the request (for following redirects: 0 hops so far).
    pub(super) hops: u8,
    pub(super) head: bool,
}

pub(super) enum Body {
    /// Reading a response head (partial bytes kept in `Conn::head`).
    Head,
    Length(u64),
    Chunked(ChunkState),
    UntilClose,
}

pub(super) struct Conn {
    pub(super) sock: Option<TcpStream>,
    pub(super) connecting: bool,
    pub(super) out: Vec<u8>,
    pub(super) opos: usize,
    pub(super) inflight: VecDeque<Pending>,
    pub(super) head: Vec<u8>,
    pub(super) body: Body,
    pub(super) status: u16,
    pub(super) close_after: bool,
    pub(super) location: Option<String>,
    /// Slow reader: bytes we may still read this second, and when it refills.
    pub(super) budget: u64,
    pub(super) refill_at: Instant,
    /// Data may be waiting that we chose not to read yet (budget or cap).
    pub(super) read_pending: bool,
    pub(super) src: usize,
    /// Next time this connection may try to reconnect (after a failure).
    pub(super) retry_at: Option<Instant>,
}
