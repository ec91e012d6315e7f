//! Deferred accept: `TCP_DEFER_ACCEPT` on the listening sockets (`condition.defer_accept`,
//! fixed, or switched by [`AutoDefer`] while the kernel reports SYN-queue overflows),
//! and its guard on the sockets they accept: a 1 s cap on the retransmission
//! timeout ([`set_rto_guard`]) that the worker takes off once a connection no longer
//! needs it ([`lift_rto_guard`]). Why deferral, what it costs and how the guard
//! answers that: docs/CONDITIONING.md; the switching policy is
//! `sluice_condition::defer`'s, this module only reads the counters and sets options.
//!
//! Owns: the socket options of deferral and its guard, and the reading of
//! `/proc/net/netstat`. Must not: decide when to switch (`DeferSwitch` does) or
//! keep per-connection state (the worker's `Outgoing::guard_next` says whether, and
//! from when, a response's block asks about its guard). Costs: nothing per request;
//! per response that blocks, one `getsockopt` (and where the guard is on, one of
//! `TCP_INFO` and two `setsockopt`s when lifted); a response whose estimate stays at
//! the cap (a path whose real timeout is 1 s or more) asks again at a block at most
//! every [`GUARD_ASK_EVERY_MS`], two `getsockopt`s each time, until its first rate
//! window ends, or to its end with `min_send_rate = 0`; one `/proc/net/netstat` read
//! per 100 ms for the whole server. Connections a `sluice condition` front hands to
//! another server keep the guard: nothing on that server's side lifts it.

use crate::io::{get_tcp, get_tcp_int, set_tcp_int};
use sluice_condition::defer::{DeferSwitch, SharedReading, Take};
use std::io;
use std::os::fd::RawFd;

/// TCP_DEFER_ACCEPT on a listening socket, in seconds (0: off), with its guard
/// ([`set_rto_guard`]) on while it is on. Linux applies both to connections that
/// complete their handshake from then on.
pub fn set_defer_accept(fd: RawFd, secs: u64) -> io::Result<()> {
    set_tcp_int(
        fd,
        libc::TCP_DEFER_ACCEPT,
        secs.min(i32::MAX as u64) as libc::c_int,
    )?;
    if let Err(e) = set_rto_guard(fd, secs > 0) {
        // Kernels before 6.14 have no TCP_RTO_MAX_MS: deferral works, unguarded.
        tracing::debug!(error = %e, "TCP_RTO_MAX_MS not set; deferral without its guard");
    }
    Ok(())
}

/// The most a deferred connection's retransmission timeout may reach.
pub const DEFERRED_RTO_MAX_MS: libc::c_int = 1000;
/// With the guard on, unacknowledged data is given up after this long: about when
/// the kernel's default (15 retransmissions backing off to 120 s) gives up.
pub const DEFERRED_USER_TIMEOUT_MS: libc::c_int = 900_000;
/// `TCP_RTO_MAX_MS` (Linux 6.14; not in the libc crate yet).
const TCP_RTO_MAX_MS: libc::c_int = 44;

/// What a socket has without the guard: the machine's `net.ipv4.tcp_rto_max_ms`
/// (Linux's own `TCP_RTO_MAX`, 120 s, unless an operator changed it).
/// Read once per process: lifting the guard from a connection must not cost a file read.
fn kernel_rto_max_ms() -> libc::c_int {
    static MS: std::sync::OnceLock<libc::c_int> = std::sync::OnceLock::new();
    *MS.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rto_max_ms")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(120_000)
    })
}

/// Deferral's guard, inherited by accepted sockets: `TCP_RTO_MAX_MS` capped at
/// [`DEFERRED_RTO_MAX_MS`], and `TCP_USER_TIMEOUT` so that the cap does not shorten
/// the time a dead peer is given. Why: with deferral the kernel drops the
/// handshake's bare ACK, so a connection's first RTT sample is taken from its
/// request, and a client that was slow to send it starts with seconds of "RTT" and
/// a retransmission timeout of 7 s; at 19,000 downloads every loss then stalled a
/// download that long (5,851 done in the step against 19,215–27,238 without
/// deferral). With the cap: 19,307 (docs/BENCHMARKS.md). What it costs: a peer that
/// stops acknowledging is sent a retransmission every second rather than ever more
/// rarely, and one whose window is closed a probe every second; the worker lifts the
/// guard as soon as the estimate no longer needs it ([`lift_rto_guard`]).
/// From Linux 6.19 the cap also times the SYN-ACKs of connections waiting
/// in the SYN queue, which shortens a deferral of 10 s to about 4 (docs/CONDITIONING.md).
pub fn set_rto_guard(fd: RawFd, on: bool) -> io::Result<()> {
    let (rto_max, user_timeout) = if on {
        (DEFERRED_RTO_MAX_MS, DEFERRED_USER_TIMEOUT_MS)
    } else {
        (kernel_rto_max_ms(), 0)
    };
    set_tcp_int(fd, libc::TCP_USER_TIMEOUT, user_timeout)?;
    set_tcp_int(fd, TCP_RTO_MAX_MS, rto_max)
}

/// While the kernel's estimate stays at the guard's cap, a response's blocks ask
/// again at most this often (each ask: two `getsockopt`s). A path whose timeout
/// is a second or more takes seconds to settle anyway; asking at every block of a
/// fast reader behind a long path would cost ~10 system calls a second for nothing.
pub const GUARD_ASK_EVERY_MS: u64 = 250;

/// What [`lift_rto_guard`] found on a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The socket has no guard (never had, or it was lifted before).
    Absent,
    /// The guard was on and is now off.
    Lifted,
    /// The guard is on and stays: asked to lift only a settled estimate, the
    /// kernel's retransmission timeout still sits at the guard's cap.
    Kept,
}

/// Take deferral's guard ([`set_rto_guard`]) off one accepted connection, if it
/// has it. The guard is for a connection's start: it bounds what the inflated
/// first RTT sample can cost until the reader's ACKs have replaced it. Once they
/// have, its cost would run on for the rest of the download: a reader whose window
/// is closed is probed once a second instead of ever more rarely (2,000 stalled
/// readers drew 2,000 zero-window probes a second against nginx's 200), and a peer
/// that vanishes mid-download is sent a retransmission every second until
/// `send_timeout`.
///
/// With `settled_only`, the guard is lifted only if the kernel's own timeout
/// (`tcpi_rto`, which the guard caps) is already below the cap: the estimate no
/// longer needs it, and from here a loss or a closed window backs off as the
/// kernel's default does. The worker asks so when a response's socket blocks, at
/// most every [`GUARD_ASK_EVERY_MS`] (on loopback and on any path whose first ACKs
/// are in, the first block finds it settled),
/// and without `settled_only` when a response's first rate window ends (30 s by
/// default), whatever the estimate then says. Costs one `getsockopt` of an int;
/// where the guard is on, one of `TCP_INFO` (~230 bytes), and two `setsockopt`s
/// where it is lifted.
pub fn lift_rto_guard(fd: RawFd, settled_only: bool) -> io::Result<Guard> {
    if get_tcp_int(fd, TCP_RTO_MAX_MS) != Some(DEFERRED_RTO_MAX_MS) {
        return Ok(Guard::Absent);
    }
    if settled_only {
        let cap_us = DEFERRED_RTO_MAX_MS as u32 * 1000;
        match tcp_rto_us(fd) {
            Some(rto) if rto < cap_us => {}
            _ => return Ok(Guard::Kept),
        }
    }
    set_rto_guard(fd, false)?;
    Ok(Guard::Lifted)
}

/// The socket's current retransmission timeout (`tcpi_rto`, µs).
fn tcp_rto_us(fd: RawFd) -> Option<u32> {
    get_tcp::<libc::tcp_info>(fd, libc::TCP_INFO).map(|i| i.tcpi_rto)
}

/// Is TCP_DEFER_ACCEPT on for this listening socket?
pub fn defer_accept_is_on(fd: RawFd) -> bool {
    get_tcp_int(fd, libc::TCP_DEFER_ACCEPT).is_some_and(|v| v > 0)
}

/// `defer_accept = "auto"` for one worker's listeners: every
/// [`CHECK_MS`](sluice_condition::defer::CHECK_MS) it takes the kernel's SYN-queue
/// overflow count and switches deferral as [`DeferSwitch`] decides (the policy and
/// its reasons are in `sluice_condition::defer`). Each worker switches its own
/// listeners; all see the same counters, so they switch together. Who reads them:
/// in a server, whichever worker's check comes first in an interval reads
/// `/proc/net/netstat` and shares the count ([`SharedReading`], in the memory every
/// serving process maps); the others take that count. A front process reads for
/// itself. Cost: one read and scan (~100 µs on the project's VM, from a descriptor
/// kept open and read again from offset 0: no `open` per read) per interval for the
/// whole server; before, one per worker per interval, and an idle two-worker server
/// spent 0.53% of a core, most of it on these reads (0.30% now; docs/BENCHMARKS.md).
pub struct AutoDefer {
    fds: Vec<RawFd>,
    secs: u64,
    switch: DeferSwitch,
    next_ms: u64,
    /// `/proc/net/netstat`, opened with the switch and kept.
    file: Option<std::fs::File>,
    /// The file's text, read into the same buffer every time.
    text: Vec<u8>,
    /// The reading shared with the server's other workers (`None`: read alone).
    shared: Option<&'static SharedReading>,
}

impl AutoDefer {
    /// `fds`: the listeners to switch (the worker's own, bound by sluice; never
    /// systemd's); `secs`: the deferral when on. What they have now is read back,
    /// so a worker that replaces a dead one carries on from where it left them.
    pub fn new(
        fds: Vec<RawFd>,
        secs: u64,
        now_ms: u64,
        shared: Option<&'static SharedReading>,
    ) -> AutoDefer {
        let on = fds.first().is_some_and(|&fd| defer_accept_is_on(fd));
        AutoDefer {
            fds,
            secs,
            switch: DeferSwitch::new(on, now_ms),
            next_ms: now_ms,
            // Opened now, not at the first read: which worker reads first is the
            // luck of its timing, and a descriptor that appeared later would look,
            // from outside, like one a connection left behind.
            file: std::fs::File::open(NETSTAT).ok(),
            text: Vec::with_capacity(8192),
            shared,
        }
    }

    /// Called from the worker's (or the front's) loop; does something at most
    /// every `CHECK_MS`. Returns the new state when it switched, and says so in the
    /// log.
    pub fn poll(&mut self, now_ms: u64) -> Option<bool> {
        if now_ms < self.next_ms {
            return None;
        }
        self.next_ms = now_ms + sluice_condition::defer::CHECK_MS;
        let overflows = match self.shared {
            None => self.read()?,
            Some(r) => match r.take(machine_ms()) {
                Take::Fresh(n) => n,
                Take::Skip => return None,
                Take::Read => {
                    let n = self.read()?;
                    r.publish(n);
                    n
                }
            },
        };
        let on = self.switch.observe(overflows, now_ms)?;
        for &fd in &self.fds {
            if let Err(e) = set_defer_accept(fd, if on { self.secs } else { 0 }) {
                tracing::warn!(error = %e, "cannot switch TCP_DEFER_ACCEPT");
            }
        }
        tracing::info!(
            "TCP_DEFER_ACCEPT {} (defer_accept = \"auto\": {})",
            if on { "on" } else { "off" },
            if on {
                "no SYN-queue overflow for a minute"
            } else {
                "the kernel reports SYN-queue overflows"
            }
        );
        Some(on)
    }

    /// The overflow count, from `/proc/net/netstat`: plain positioned reads into a
    /// kept buffer from a kept descriptor (procfs makes the text anew for a read
    /// at offset 0; `read_to_string` would also ask the size, with a `statx` and an
    /// `lseek` that /proc answers with 0 anyway).
    fn read(&mut self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        if self.file.is_none() {
            self.file = std::fs::File::open(NETSTAT).ok();
        }
        let f = self.file.as_ref()?;
        self.text.clear();
        let mut chunk = [0u8; 8192];
        loop {
            match f.read_at(&mut chunk, self.text.len() as u64) {
                Ok(0) => break,
                Ok(n) => self.text.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.file = None;
                    return None;
                }
            }
        }
        let text = std::str::from_utf8(&self.text).ok()?;
        sluice_condition::defer::syn_queue_overflows(text)
    }
}

/// Where the kernel's `TcpExt` counters are.
const NETSTAT: &str = "/proc/net/netstat";

/// Milliseconds of `CLOCK_MONOTONIC`, which every process of the machine shares
/// (a worker's own clock counts from its start). Never 0.
fn machine_ms() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000).max(1)
}

#[cfg(test)]
mod tests {
    use crate::listener::accept_next;

    #[test]
    fn deferral_is_set_at_bind_and_switched_on_a_listening_socket() {
        use std::os::fd::AsRawFd;
        let l = crate::listener::bind("127.0.0.1:0".parse().unwrap(), 16, 10, 0).unwrap();
        let fd = l.as_raw_fd();
        assert!(super::defer_accept_is_on(fd));
        super::set_defer_accept(fd, 0).unwrap();
        assert!(!super::defer_accept_is_on(fd));
        // A worker built now carries on from "off".
        let a = super::AutoDefer::new(vec![fd], 10, 0, None);
        assert!(!a.switch.is_on());
        super::set_defer_accept(fd, 10).unwrap();
        assert!(super::defer_accept_is_on(fd));
        let plain = crate::listener::bind("127.0.0.1:0".parse().unwrap(), 16, 0, 0).unwrap();
        assert!(!super::defer_accept_is_on(plain.as_raw_fd()));
    }

    #[test]
    fn workers_share_one_netstat_read_per_interval_from_a_kept_descriptor() {
        use std::os::fd::AsRawFd;
        let l = crate::listener::bind("127.0.0.1:0".parse().unwrap(), 16, 10, 0).unwrap();
        let shared: &'static super::SharedReading = Box::leak(Box::default());
        let mut a = super::AutoDefer::new(vec![l.as_raw_fd()], 10, 0, Some(shared));
        let mut b = super::AutoDefer::new(vec![l.as_raw_fd()], 10, 0, Some(shared));
        // The first worker due reads; the second, in the same interval, takes its
        // count without reading the file.
        assert_eq!(a.poll(0), None);
        let read_bytes = |d: &super::AutoDefer| d.text.len();
        assert!(read_bytes(&a) > 0, "the first worker read the counters");
        assert_eq!(b.poll(0), None);
        assert_eq!(read_bytes(&b), 0, "the second read them again");
        // Each holds its descriptor from the start (none appears later).
        assert!(a.file.is_some() && b.file.is_some());
        // The kept descriptor reads the text anew from offset 0, every time.
        let first = a.read().expect("overflow count");
        let again = a.read().expect("overflow count, read again");
        assert!(again >= first);
        let text = std::fs::read_to_string("/proc/net/netstat").unwrap();
        let lines = |t: &[u8]| t.iter().filter(|&&c| c == b'\n').count();
        assert_eq!(
            lines(&a.text),
            lines(text.as_bytes()),
            "the whole text, read again"
        );
    }

    #[test]
    fn a_deferring_listener_caps_the_rto_of_the_sockets_it_accepts() {
        use super::{get_tcp_int, TCP_RTO_MAX_MS};
        use std::os::fd::AsRawFd;
        let l = crate::listener::bind("127.0.0.1:0".parse().unwrap(), 16, 10, 0).unwrap();
        if get_tcp_int(l.as_raw_fd(), TCP_RTO_MAX_MS).is_none() {
            eprintln!("this kernel has no TCP_RTO_MAX_MS (before 6.14): nothing to check");
            return;
        }
        let accepted = |l: &mio::net::TcpListener| {
            let addr = l.local_addr().unwrap();
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            // Deferred: the connection reaches accept with its first bytes.
            std::io::Write::write_all(&mut c, b"GET / HTTP/1.1\r\n\r\n").unwrap();
            (accept_next(l), c)
        };
        let (s, _c) = accepted(&l);
        let fd = s.as_raw_fd();
        assert_eq!(
            get_tcp_int(fd, TCP_RTO_MAX_MS),
            Some(super::DEFERRED_RTO_MAX_MS)
        );
        assert_eq!(
            get_tcp_int(fd, libc::TCP_USER_TIMEOUT),
            Some(super::DEFERRED_USER_TIMEOUT_MS)
        );
        // A client that sent its request at once: the first RTT sample is the
        // loopback's, the kernel's timeout already below the cap, so the guard
        // goes at the first ask that wants a settled estimate: the kernel's own
        // bounds, and the listener keeps its guard for the next ones.
        let (lifted, _c2) = accepted(&l);
        assert_eq!(
            super::lift_rto_guard(lifted.as_raw_fd(), true).unwrap(),
            super::Guard::Lifted
        );
        let kernel = super::kernel_rto_max_ms();
        assert_eq!(
            get_tcp_int(lifted.as_raw_fd(), TCP_RTO_MAX_MS),
            Some(kernel)
        );
        assert_eq!(
            get_tcp_int(lifted.as_raw_fd(), libc::TCP_USER_TIMEOUT),
            Some(0)
        );
        assert_eq!(
            super::lift_rto_guard(lifted.as_raw_fd(), false).unwrap(),
            super::Guard::Absent
        );
        assert_eq!(
            get_tcp_int(fd, TCP_RTO_MAX_MS),
            Some(super::DEFERRED_RTO_MAX_MS)
        );
        // A client that waited 0.6 s before its request (under the SYN-ACK's first
        // 1 s timer): its first sample is 0.6 s, the kernel's timeout three times
        // that, held at the cap. Asked for a settled estimate, the guard stays;
        // asked unconditionally (a first rate window's end), it goes.
        let addr = l.local_addr().unwrap();
        let mut slow = std::net::TcpStream::connect(addr).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(600));
        std::io::Write::write_all(&mut slow, b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let inflated = accept_next(&l);
        assert_eq!(
            super::tcp_rto_us(inflated.as_raw_fd()),
            Some(super::DEFERRED_RTO_MAX_MS as u32 * 1000),
            "the inflated estimate should sit at the cap"
        );
        assert_eq!(
            super::lift_rto_guard(inflated.as_raw_fd(), true).unwrap(),
            super::Guard::Kept
        );
        assert_eq!(
            get_tcp_int(inflated.as_raw_fd(), TCP_RTO_MAX_MS),
            Some(super::DEFERRED_RTO_MAX_MS)
        );
        assert_eq!(
            super::lift_rto_guard(inflated.as_raw_fd(), false).unwrap(),
            super::Guard::Lifted
        );
        assert_eq!(
            get_tcp_int(inflated.as_raw_fd(), TCP_RTO_MAX_MS),
            Some(kernel)
        );
        // Deferral switched off (`auto`): the guard goes with it.
        super::set_defer_accept(l.as_raw_fd(), 0).unwrap();
        let (s, _c) = accepted(&l);
        assert_eq!(get_tcp_int(s.as_raw_fd(), TCP_RTO_MAX_MS), Some(kernel));
        assert_eq!(get_tcp_int(s.as_raw_fd(), libc::TCP_USER_TIMEOUT), Some(0));
        // A listener that never deferred has no guard.
        let plain = crate::listener::bind("127.0.0.1:0".parse().unwrap(), 16, 0, 0).unwrap();
        let (s, _c) = accepted(&plain);
        assert_eq!(get_tcp_int(s.as_raw_fd(), TCP_RTO_MAX_MS), Some(kernel));
    }
}
