//! Writing a response to a socket: the head and memory chunks with one `send` or
//! `sendmsg` (a small response is one syscall; `wire.rs`), file chunks with the
//! configured I/O mode.
//!
//! - `sendfile`: zero-copy from the page cache; the default.
//! - `read`: `pread` up to `buffer_size` bytes into the connection's write buffer,
//!   then the same `sendmsg` path. Seed 003 showed the buffer size matters; it is
//!   the knob `buffer_size` turns.
//! - `mmap`: map a window of the file and send from it, up to `MAP_SEND` per
//!   call. Only the kernel reads the mapping (inside `send`), so a file truncated
//!   while mapped makes that `send` fail with `EFAULT` and the connection close, as
//!   a short `sendfile` does; the process never touches the bytes and gets no
//!   SIGBUS (checked: `tests/io_modes.rs`, the truncation test).
//! - `auto`: per response, `sendfile` until the socket takes a whole turn at once,
//!   then, for a reader on this machine ([`peer_is_local`]) of a file of at most
//!   `MAP_MAX`, `mmap` sends until a flush blocks after little; see
//!   [`Outgoing::flush`]. Costs a fast local 1 MiB download about half the CPU of
//!   `sendfile` (docs/BENCHMARKS.md), while slow and remote readers, and files too
//!   big to stay in the CPU's caches, keep zero-copy sends that reference the page
//!   cache.
//!
//! Raw libc calls: the product's hot path, with flags (`MSG_MORE`, `MSG_NOSIGNAL`)
//! and offsets above 2^32 that std does not expose. Bandwidth limits: `pace.rs`.
//!
//! Where the bytes go is a [`Wire`]: the socket itself ([`Plain`]), or a TLS
//! session in front of it (`crate::tls::TlsWire`). A wire that is not zero-copy
//! (user-space TLS) gets file bodies the `read` way whatever `io` says, since
//! the bytes must pass through the process to be encrypted.

use sluice_config::IoMode;
use sluice_http::response::Chunk;
use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
mod pace;
mod window;
mod wire;
pub use pace::{Pace, PaceStep, PaceTurn};
pub use window::forget_recent as forget_recent_windows;
use window::MapWindow;
pub use wire::{Plain, Wire};

/// Result of pushing bytes until the socket is full or the response is done.
#[derive(Debug, PartialEq, Eq)]
pub enum Flush {
    Done,
    Blocked,
    /// This call's share (`turn` body bytes) is sent; the socket may take more.
    Yield,
    /// The next file bytes, `[off, off + len)` of the front chunk's file, are not
    /// in the page cache: sending them now would wait on the disk (see `disk.rs`).
    /// `rest` is how many bytes the chunk has from `off` on (`len` and after).
    Cold {
        off: u64,
        len: u64,
        rest: u64,
    },
}

/// The most of a file mapped at once.
const MAP_WINDOW: u64 = 4 << 20;
/// The most one send from a mapping takes (`mmap`, and `auto` for a fast reader):
/// one call and one turn for a 1 MiB file. On this machine's loopback the cost of a
/// download is set by how many calls (each a push that wakes the reader) carry it:
/// 1 MiB calls cost a fast 1 MiB download half the CPU that 256 KiB calls or
/// `sendfile` do (docs/BENCHMARKS.md, "`io = "auto"`").
const MAP_SEND: u64 = 1 << 20;
/// `auto` sends fewer bytes than this by `sendfile`, fast reader or not.
const MAP_MIN: u64 = 64 << 10;
/// `auto` sends a file chunk larger than this by `sendfile`, fast reader or not.
/// A copy from a mapping is cheap while the file's pages stay in the CPU's caches
/// (many readers of one 1 MiB file); a file streamed once from memory costs the
/// copy more than it saves: one 100 MB loopback download took 23 ms of server CPU
/// mapped against 17 ms by `sendfile` (docs/BENCHMARKS.md, "`io = "auto"` and
/// large files"). 32 MiB is this machine's last-level cache.
const MAP_MAX: u64 = 32 << 20;
/// `sendfile` calls end where the stream (head and body) reaches a multiple of
/// this, and a turn ends there too: a response's bytes then leave in whole 256 KiB
/// calls after the first, never a full call followed by a few hundred bytes (the
/// head's length) in a call of their own. Measured on one 100 MB loopback download:
/// see docs/BENCHMARKS.md "Downloads".
const TURN_EDGE: u64 = 256 * 1024;

/// The send-side state of one response.
#[derive(Default)]
pub struct Outgoing {
    /// Head (and, in `read` mode, file bytes) waiting to be written: `wbuf[wpos..]`.
    pub wbuf: Vec<u8>,
    pub wpos: usize,
    pub chunks: VecDeque<Chunk>,
    /// Progress inside the front chunk (bytes written, or for `read` mode bytes read).
    pub off: u64,
    pub map: Option<std::rc::Rc<MapWindow>>,
    /// Body bytes the socket has taken so far (for the access log, also when the
    /// client goes away mid-transfer).
    pub sent: u64,
    /// `wbuf` holds file bytes (`read` mode) rather than the head: count them in
    /// `sent` when they are written, not when they are read.
    wbuf_is_body: bool,
    /// The connection is closed (or shut down for writing) as soon as this response
    /// is written, by this process: the response's last bytes from memory go with
    /// `MSG_MORE`, so the kernel holds their segment and the FIN that `close` or
    /// `shutdown` sends leaves in it, as nginx's `tcp_nopush` makes happen. One
    /// packet and one wake-up of the client fewer per `Connection: close` request
    /// (docs/BENCHMARKS.md, "New connections: the FIN rides with the answer"). Never
    /// set where the socket stays open (keep-alive, or a front process holding it):
    /// there the held bytes would wait for the kernel's probe timer.
    pub fin_follows: bool,
    /// This response has asked epoll for its socket's writable edges
    /// (`Worker::arm_writable`): once per response that blocks, since a new
    /// connection is registered for readable edges only.
    pub armed: bool,
    /// When the request's head began (worker ms): a request body still being
    /// discarded after the response keeps this as its total deadline's start.
    pub head_started: u64,
    /// When the response was ready to send (worker ms): time to first byte.
    pub ready_at: u64,
    /// Bytes of the response head (stream offset of the body's first byte).
    pub head_len: u64,
    /// Slow-read prevention: the current rate window of this response.
    pub rate: sluice_condition::slowread::RateWindow,
    /// The access-log record, written when the response is done.
    pub log: Option<crate::accesslog::Pending>,
    /// Request-body bytes to read and throw away after this response (then they
    /// move to `Phase::Head`).
    pub discard_after: u32,
    /// Bandwidth limits: this response's switch to its rate (`send/pace.rs`).
    pub pace: Pace,
    /// File offset (in the front chunk) up to which the pages were found cached.
    warm_to: u64,
    /// This response has met a cold range: check the next ones densely.
    was_cold: bool,
    /// `io = "auto"`: the reader took a whole turn at once; file bytes go out
    /// copied from a mapping until it slows down (see [`Outgoing::flush`]).
    fast: bool,
    /// `io = "auto"`: is the socket's peer on this machine? (`None`: not asked yet.)
    local: Option<bool>,
    /// Its reader has taken `slowread::UNSENT_PROVEN` bytes: its socket may keep
    /// `unsent_max` unsent (`Worker::fit_unsent`).
    pub proven: bool,
    /// When a block may next ask whether deferral's RTO guard can come off this
    /// socket (ms since the worker started; 0: at the first block). `u64::MAX`
    /// once it is off or was never on: lifted at a block that found the kernel's
    /// estimate settled (`Worker::send_response`, which asks again at most every
    /// `deferral::GUARD_ASK_EVERY_MS` while it is not), or at the end of the
    /// first rate window whatever it found (`Worker::check_rate`).
    pub guard_next: u64,
}

impl Outgoing {
    /// The head's buffer, once the head is out and the rest goes without it (a file
    /// by `sendfile` or from a mapping: `copies_body` false): the worker gives it back
    /// to its pool, so a download in flight holds no buffer. With one each, 19,000
    /// slow downloads held 4 KiB apiece (5.6 KB of RSS per download against 1.6).
    pub fn spare_buffer(&mut self, copies_body: bool) -> Option<Vec<u8>> {
        let spare = !copies_body && self.wbuf.is_empty() && self.wbuf.capacity() > 0;
        spare.then(|| std::mem::take(&mut self.wbuf))
    }

    /// A small body from memory goes into `wbuf` behind the head when it fits the
    /// buffer as it is: head and body then leave in one `send` of one buffer,
    /// copied once, with no body chunk queued (`advance_memory` counts the bytes
    /// past `head_len` in `sent` as they are written). ~4% of a keep-alive 1 KiB
    /// request's user-space instructions (`bench/user_instr.sh`).
    pub fn append_small_body(&mut self, body: &[u8]) -> bool {
        let fits = !self.wbuf_is_body
            && self.wpos == 0
            && self.wbuf.len() as u64 == self.head_len
            && self.wbuf.capacity() - self.wbuf.len() >= body.len();
        if fits {
            self.wbuf.extend_from_slice(body);
        }
        fits
    }

    pub fn is_idle(&self) -> bool {
        self.wpos >= self.wbuf.len() && self.chunks.is_empty()
    }

    pub fn reset(&mut self) {
        self.wbuf.clear();
        self.wpos = 0;
        self.chunks.clear();
        self.off = 0;
        self.map = None;
        self.sent = 0;
        self.wbuf_is_body = false;
        self.fin_follows = false;
        self.armed = false;
        self.head_started = 0;
        self.ready_at = 0;
        self.rate = Default::default();
        self.log = None;
        self.discard_after = 0;
        self.pace = Pace::default();
        self.head_len = 0;
        self.warm_to = 0;
        self.was_cold = false;
        self.fast = false;
        self.local = None;
        self.proven = false;
        self.guard_next = 0;
    }

    /// The file the next body bytes come from, if they come from a file.
    pub fn front_file(&self) -> Option<&std::fs::File> {
        match self.chunks.front() {
            Some(Chunk::File(f, ..)) => Some(f),
            _ => None,
        }
    }

    /// Send up to `to` (a file offset of the front chunk) without asking whether
    /// it is cached: the disk pool could not take it.
    pub fn assume_warm(&mut self, to: u64) {
        self.warm_to = to;
    }

    /// Write as much as the socket takes, but at most about `turn` body bytes
    /// (then [`Flush::Yield`]), so one big response cannot hold the worker while
    /// others wait. The head is not counted. With `check_cold`, file bodies of
    /// [`crate::disk::COLD_CHECK_MIN`] or more stop at bytes not in the page cache
    /// ([`Flush::Cold`]) instead of waiting for the disk.
    ///
    /// With [`IoMode::Auto`] this is also where a response learns whether its reader
    /// is fast: a turn the socket took (at least half of it) at once makes the next
    /// file bytes go out copied from a mapping; a flush that blocked after less than
    /// a quarter turn sends them with `sendfile` again.
    pub fn flush(
        &mut self,
        wire: &mut impl Wire,
        mode: IoMode,
        buffer_size: usize,
        turn: u64,
        check_cold: bool,
    ) -> io::Result<Flush> {
        let before = self.sent;
        let r = self.flush_turn(wire, mode, buffer_size, turn, check_cold);
        // Every page a mapped send touched counts in the process's RSS until its
        // window is unmapped, and the next flush may be far off: on loopback a
        // reader's first turns go at once whether or not it reads (its socket takes
        // a megabyte or so), so 2,000 readers that then stopped held 1.4 GiB of RSS
        // in windows kept between flushes. A worker keeps at most 64 (`window.rs`)
        // between flushes; past that a flush gives its window up (the next mapped
        // send maps again). Dropping every window after every flush cost fast local
        // downloads 4% CPU (docs/BENCHMARKS.md).
        if self.map.is_some() && window::over_kept() {
            self.map = None;
        }
        match r {
            // A turn ends early at a stream edge (after a blocked flush resumed
            // mid-way): only most of a turn taken at once says "fast".
            Ok(Flush::Yield) if self.sent - before >= turn / 2 => self.fast = true,
            Ok(Flush::Blocked) if self.sent - before < turn / 4 => self.fast = false,
            _ => {}
        }
        r
    }

    /// `io = "auto"`: may the bytes at `pos` go out from a mapping? Only for a fast
    /// reader on this machine (see [`peer_is_local`]), at least [`MAP_MIN`] of
    /// them, and only bytes known to be in the page cache, of a response that has
    /// not met a cold range: copying from a mapping triggers none of the
    /// kernel's readahead that `sendfile` does, so a cold file sent that way would
    /// wait on the disk once per MiB. Without the disk check (`disk_threads = 0`)
    /// this asks the page cache itself ([`Outgoing::cached_ahead`], as the check does).
    fn mapped_ok(
        &mut self,
        sock: i32,
        file: &std::fs::File,
        pos: u64,
        remaining: u64,
        chunk: u64,
    ) -> bool {
        // A short tail (a 256 KiB file's last head-length bytes after its first
        // turn) is cheaper as one `sendfile` than as a mapping made for it.
        if !self.fast || self.was_cold || remaining < MAP_MIN || chunk > MAP_MAX {
            return false;
        }
        // Asked once per response, when it first could be mapped.
        if !*self.local.get_or_insert_with(|| peer_is_local(sock)) {
            return false;
        }
        self.cached_ahead(file, pos, remaining)
    }

    /// Are the bytes at `pos` in the page cache? Known up to `warm_to`; past it the
    /// next [`crate::disk::PREFETCH`] bytes are asked for (densely once the response
    /// has met a cold range) and `warm_to` moves on, or the response is marked cold.
    fn cached_ahead(&mut self, file: &std::fs::File, pos: u64, remaining: u64) -> bool {
        if pos < self.warm_to {
            return true;
        }
        let span = remaining.min(crate::disk::PREFETCH);
        if crate::disk::resident(file.as_raw_fd(), pos, span, self.was_cold) {
            self.warm_to = pos + span;
            true
        } else {
            self.was_cold = true;
            false
        }
    }

    fn flush_turn(
        &mut self,
        wire: &mut impl Wire,
        mode: IoMode,
        buffer_size: usize,
        turn: u64,
        check_cold: bool,
    ) -> io::Result<Flush> {
        let fd = wire.fd();
        let mode = if wire.zero_copy() { mode } else { IoMode::Read };
        let sent_before = self.sent;
        let mut at_edge = false;
        loop {
            if (at_edge || self.sent - sent_before >= turn) && !self.chunks.is_empty() {
                return Ok(Flush::Yield);
            }
            // Bytes in the write buffer go first, then the chunks in order: memory
            // ones by `send_memory`, a file's below.
            let head_left = self.wpos < self.wbuf.len();
            let (file, start, len) = match self.chunks.front() {
                Some(Chunk::File(f, s, l)) if !head_left => (f.clone(), *s, *l),
                None if !head_left => {
                    self.wbuf.clear();
                    self.wpos = 0;
                    // Done means on the socket, not in a TLS record buffer.
                    return Ok(if wire.drain()? {
                        Flush::Done
                    } else {
                        Flush::Blocked
                    });
                }
                _ => {
                    let n = match self.send_memory(wire) {
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            return Ok(Flush::Blocked)
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e),
                    };
                    self.advance_memory(n);
                    continue;
                }
            };
            if self.off >= len {
                self.chunks.pop_front();
                self.off = 0;
                self.map = None;
                self.warm_to = 0;
                continue;
            }
            let remaining = len - self.off;
            let pos = start + self.off;
            let checked = check_cold && len >= crate::disk::COLD_CHECK_MIN;
            if checked && !self.cached_ahead(&file, pos, remaining) {
                return Ok(Flush::Cold {
                    off: pos,
                    len: remaining.min(crate::disk::PREFETCH),
                    rest: remaining,
                });
            }
            let how = match mode {
                IoMode::Auto if self.mapped_ok(fd, &file, pos, remaining, len) => IoMode::Mmap,
                IoMode::Auto => IoMode::Sendfile,
                m => m,
            };
            // Zero-copy and mapped sends go up to the next TURN_EDGE of the stream
            // (head included).
            let to_edge = TURN_EDGE - (self.head_len + self.sent) % TURN_EDGE;
            // Bytes from `pos` found cached (`cached_ahead`). A checked response reads
            // no further, whichever way it reads: a call's own bound (the turn edge,
            // which counts the head; the buffer size) can end past them, in pages
            // nobody asked about, and the worker would wait on the disk for them.
            let cached = self.warm_to.saturating_sub(pos).max(1);
            match how {
                // (`Auto` is resolved just above; sendfile is its safe reading.)
                IoMode::Sendfile | IoMode::Auto => {
                    let mut want = remaining.min(to_edge);
                    if checked {
                        want = want.min(cached);
                    }
                    let mut o = pos as libc::off_t;
                    // SAFETY: both fds are open; o is a valid pointer for the call.
                    let n = unsafe { libc::sendfile(fd, file.as_raw_fd(), &mut o, want as usize) };
                    if n < 0 {
                        let e = io::Error::last_os_error();
                        match e.kind() {
                            io::ErrorKind::WouldBlock => return Ok(Flush::Blocked),
                            io::ErrorKind::Interrupted => continue,
                            _ => return Err(e),
                        }
                    }
                    if n == 0 {
                        return Err(truncated());
                    }
                    self.off += n as u64;
                    self.sent += n as u64;
                    if n as u64 == to_edge {
                        // A whole turn's worth ends here: let others have theirs.
                        at_edge = true;
                    }
                }
                IoMode::Read => {
                    // Fill the write buffer from the file; the memory path sends it.
                    let mut want = remaining.min(buffer_size as u64);
                    if checked {
                        want = want.min(cached);
                    }
                    let want = want as usize;
                    self.wbuf.clear();
                    self.wpos = 0;
                    self.wbuf.resize(want, 0);
                    // SAFETY: wbuf has `want` initialized bytes; fd is open.
                    let n = unsafe {
                        libc::pread(
                            file.as_raw_fd(),
                            self.wbuf.as_mut_ptr().cast(),
                            want,
                            pos as libc::off_t,
                        )
                    };
                    if n <= 0 {
                        self.wbuf.clear();
                        return Err(if n == 0 {
                            truncated()
                        } else {
                            io::Error::last_os_error()
                        });
                    }
                    self.wbuf.truncate(n as usize);
                    self.wbuf_is_body = true; // counted in `sent` as it is written
                    self.off += n as u64;
                    if self.off >= len {
                        // All of it is in wbuf now; the memory path sends it next.
                        self.chunks.pop_front();
                        self.off = 0;
                    }
                }
                IoMode::Mmap => {
                    // The mapped window holding `pos`, or a new one from it (the old
                    // one unmapped first).
                    let m = match &mut self.map {
                        Some(m) if pos >= m.base && pos < m.base + m.len as u64 => &*m,
                        slot => {
                            *slot = None;
                            let base = pos & !4095;
                            let maplen = (start + len - base).min(MAP_WINDOW) as usize;
                            &*slot.insert(window::window_for(&file, base, maplen)?)
                        }
                    };
                    let delta = (pos - m.base) as usize;
                    // Up to the window's end and MAP_SEND, and never past the
                    // bytes found cached (a fault on a cold page would hold the
                    // worker as a `sendfile` would).
                    let mut want = remaining.min(MAP_SEND);
                    if checked || mode == IoMode::Auto {
                        want = want.min(cached);
                    }
                    let avail = (m.len - delta).min(want as usize);
                    m.populate(delta, delta + avail);
                    // SAFETY: [delta, delta+avail) lies inside the mapping.
                    let n = unsafe {
                        libc::send(
                            fd,
                            m.ptr.cast::<u8>().add(delta).cast(),
                            avail,
                            libc::MSG_NOSIGNAL,
                        )
                    };
                    if n < 0 {
                        let e = io::Error::last_os_error();
                        match e.kind() {
                            io::ErrorKind::WouldBlock => return Ok(Flush::Blocked),
                            io::ErrorKind::Interrupted => continue,
                            _ => return Err(e),
                        }
                    }
                    self.off += n as u64;
                    self.sent += n as u64;
                }
            }
        }
    }

    /// One send of `wbuf[wpos..]` and the leading memory chunks.
    fn send_memory(&mut self, wire: &mut impl Wire) -> io::Result<usize> {
        let mut iov = [io::IoSlice::new(&[]); 16];
        let mut n = 0;
        if self.wpos < self.wbuf.len() {
            iov[0] = io::IoSlice::new(&self.wbuf[self.wpos..]);
            n = 1;
        }
        let mut more = false;
        for (i, c) in self.chunks.iter().enumerate() {
            let skip = if i == 0 { self.off as usize } else { 0 };
            let s: &[u8] = match c {
                Chunk::Shared(d, a, b) => &d[*a..*b],
                Chunk::Owned(v) => v,
                Chunk::File(..) => {
                    more = true;
                    break;
                }
            };
            if n == iov.len() {
                more = true;
                break;
            }
            let s = &s[skip.min(s.len())..];
            if s.is_empty() {
                continue;
            }
            iov[n] = io::IoSlice::new(s);
            n += 1;
        }
        if n == 0 {
            return Ok(0);
        }
        // Nothing follows these bytes but the FIN: let it join their segment.
        if self.fin_follows {
            more = true;
        }
        wire.send(&iov[..n], more)
    }

    fn advance_memory(&mut self, mut n: usize) {
        let pending = self.wbuf.len() - self.wpos;
        let from_buf = n.min(pending);
        let was = self.wpos;
        self.wpos += from_buf;
        if self.wbuf_is_body {
            self.sent += from_buf as u64;
        } else {
            // The head, then perhaps a small body (`append_small_body`).
            let head = self.head_len as usize;
            self.sent += self.wpos.saturating_sub(was.max(head)) as u64;
        }
        n -= from_buf;
        if self.wpos >= self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
            self.wbuf_is_body = false;
        }
        // Drop memory chunks that are now fully written (including empty ones).
        while let Some(c) = self.chunks.front() {
            let len = match c {
                Chunk::Shared(_, a, b) => b - a,
                Chunk::Owned(v) => v.len(),
                Chunk::File(..) => break,
            };
            let left = len - (self.off as usize).min(len);
            if n >= left {
                n -= left;
                self.sent += left as u64;
                self.chunks.pop_front();
                self.off = 0;
            } else {
                self.off += n as u64;
                self.sent += n as u64;
                break;
            }
        }
    }
}

fn truncated() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being sent")
}

/// Is the socket's peer on this machine (a loopback address, IPv4-mapped too)?
/// `io = "auto"` maps only for such readers: what makes `sendfile` dear here is
/// that each of its pushes wakes the reading process and runs its receive path on
/// this machine's CPUs, which only happens when the reader is local (a cache, a
/// proxy or TLS terminator in front of sluice, a benchmark). For a reader across a
/// network the push is only a transmit, and `sendfile` saves the copy: the path
/// every file server takes for remote clients. The socket's own peer, not the
/// client a PROXY header names: behind a local load balancer the reader is local.
pub fn peer_is_local(sock: i32) -> bool {
    // SAFETY: the caller's open socket, borrowed for this call only.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(sock) };
    socket2::SockRef::from(&fd)
        .peer_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .is_some_and(|a| is_local(a.ip()))
}

fn is_local(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests;
