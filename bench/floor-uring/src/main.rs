//! The kernel floor for a keep-alive small answer through io_uring: the io_uring twin
//! of `../shared/bench/floor.c` (issue 11, target B), to learn what io_uring would
//! buy a server on this kernel before any server is built on it.
//!
//! What it does, per thread (each with its own `SO_REUSEPORT` listener and its own
//! ring): one multishot accept; one multishot recv per connection, its bytes landing
//! in a ring of provided buffers (`IORING_REGISTER_PBUF_RING`), each buffer handed
//! back as soon as its bytes are counted; per request (a `\r\n\r\n`) one send of a
//! prebuilt response, queued with `IOSQE_CQE_SKIP_SUCCESS` so a successful send
//! posts no completion. One `io_uring_enter` per loop turn submits every queued
//! send and re-arm and waits for the next completion. Like floor.c: no parsing, no
//! file, no date, partial sends ignored (a 1 KiB answer fits the socket buffer).
//!
//! `floor-uring PORT THREADS [BODY_BYTES] [plain|defer|fixed]`: `defer` (the
//! default) sets up the ring with `SINGLE_ISSUER | DEFER_TASKRUN` (completions are
//! run when the thread enters the kernel to wait, not by interrupting it); `plain`
//! uses no setup flags; `fixed` is `defer` with every connection in the ring's
//! registered file table (accepted straight into it; `TCP_NODELAY` and close
//! through the ring too), so no operation looks a descriptor up: the most io_uring
//! offers here. `bench/floor_uring.sh` measures them beside floor.c.
//!
//! Hand-written, not a library: it is a measuring stick (about 200 lines), and the
//! `io-uring` crate is the thin, well-kept binding it needs.

use io_uring::types::{BufRingEntry, Fd, Fixed};
use io_uring::{cqueue, opcode, squeue, IoUring};
use std::os::fd::RawFd;

/// What a completion is for: the kind in the top byte of `user_data`, the fd below.
const ACCEPT: u64 = 1 << 56;
const RECV: u64 = 2 << 56;
const SEND: u64 = 3 << 56;
/// Provided buffers per thread, and their size (a request is ~100 bytes; floor.c
/// reads into 16 KiB).
const BUFS: u16 = 512;
const BUF_LEN: usize = 16 * 1024;
const GROUP: u16 = 0;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: floor-uring PORT THREADS [BODY_BYTES] [plain|defer]");
        std::process::exit(2);
    }
    let port: u16 = args[1].parse().expect("PORT");
    let threads: usize = args[2].parse().expect("THREADS");
    let body: usize = args.get(3).map_or(1024, |b| b.parse().expect("BODY_BYTES"));
    let mode = match args.get(4).map_or("defer", |m| m.as_str()) {
        "plain" => Mode::Plain,
        "defer" => Mode::Defer,
        "fixed" => Mode::Fixed,
        m => {
            eprintln!("floor-uring: unknown mode {m:?} (plain, defer, fixed)");
            std::process::exit(2);
        }
    };
    let mut resp = format!(
        "HTTP/1.1 200 OK\r\nServer: floor\r\nContent-Type: application/octet-stream\r\nContent-Length: {body}\r\n\r\n"
    )
    .into_bytes();
    resp.resize(resp.len() + body, b'x');
    // Shared by every thread for the whole run: sends point into it.
    let resp: &'static [u8] = Box::leak(resp.into_boxed_slice());
    let handles: Vec<_> = (0..threads)
        .map(|_| std::thread::spawn(move || run(port, resp, mode)))
        .collect();
    for h in handles {
        if let Err(e) = h.join().unwrap() {
            eprintln!("floor-uring: {e}");
            std::process::exit(1);
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    Defer,
    Fixed,
}

/// Slots in a `fixed` ring's file table (more than a thread's connections).
const FIXED_SLOTS: u32 = 16_384;

/// Build an operation on connection `n`: a descriptor, or a file-table slot.
macro_rules! on {
    ($fixed:expr, $n:expr, $op:ident :: new ( _ $(, $arg:expr)* )) => {
        if $fixed {
            opcode::$op::new(Fixed($n as u32) $(, $arg)*)
        } else {
            opcode::$op::new(Fd($n as RawFd) $(, $arg)*)
        }
    };
}

fn listener(port: u16) -> std::io::Result<RawFd> {
    // SAFETY: plain socket calls on a descriptor this function owns.
    unsafe {
        let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        let one: libc::c_int = 1;
        let size = std::mem::size_of_val(&one) as libc::socklen_t;
        for opt in [libc::SO_REUSEPORT, libc::SO_REUSEADDR] {
            libc::setsockopt(l, libc::SOL_SOCKET, opt, (&one as *const i32).cast(), size);
        }
        let mut a: libc::sockaddr_in = std::mem::zeroed();
        a.sin_family = libc::AF_INET as libc::sa_family_t;
        a.sin_port = port.to_be();
        a.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
        let alen = std::mem::size_of_val(&a) as libc::socklen_t;
        if libc::bind(l, (&a as *const libc::sockaddr_in).cast(), alen) != 0
            || libc::listen(l, 4096) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok(l)
    }
}

/// The provided-buffer ring: `BUFS` entries the kernel takes buffers from, and the
/// buffers themselves. A buffer goes back by writing its entry at the tail.
struct BufRing {
    entries: *mut BufRingEntry,
    bufs: Vec<u8>,
    tail: u16,
}

impl BufRing {
    fn new(ring: &IoUring) -> std::io::Result<BufRing> {
        let bytes = usize::from(BUFS) * std::mem::size_of::<BufRingEntry>();
        // SAFETY: an anonymous mapping, page-aligned as the kernel requires; it
        // lives as long as the thread (never unmapped: the process ends first).
        let entries = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if entries == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let mut r = BufRing {
            entries: entries.cast(),
            bufs: vec![0u8; usize::from(BUFS) * BUF_LEN],
            tail: 0,
        };
        // SAFETY: the mapping above holds BUFS entries and outlives the ring.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(entries as u64, BUFS, GROUP, 0)?
        };
        for bid in 0..BUFS {
            r.give_back(bid);
        }
        Ok(r)
    }

    /// Hand buffer `bid` back to the kernel.
    fn give_back(&mut self, bid: u16) {
        let slot = usize::from(self.tail & (BUFS - 1));
        // SAFETY: slot < BUFS; the entry is ours until the tail passes it.
        unsafe {
            let e = &mut *self.entries.add(slot);
            e.set_addr(self.bufs.as_ptr().add(usize::from(bid) * BUF_LEN) as u64);
            e.set_len(BUF_LEN as u32);
            e.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field of the ring's first entry; a release store so the
        // kernel sees the entry before the new tail.
        unsafe {
            let t = BufRingEntry::tail(self.entries) as *const std::sync::atomic::AtomicU16;
            (*t).store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }

    fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        &self.bufs[usize::from(bid) * BUF_LEN..][..len]
    }
}

fn run(port: u16, resp: &'static [u8], mode: Mode) -> std::io::Result<()> {
    let l = listener(port)?;
    let fixed = mode == Mode::Fixed;
    let mut b = IoUring::builder();
    if mode != Mode::Plain {
        b.setup_single_issuer().setup_defer_taskrun();
    }
    let mut ring = b.build(4096)?;
    if fixed {
        ring.submitter().register_files_sparse(FIXED_SLOTS)?;
    }
    let mut bufs = BufRing::new(&ring)?;
    let mut queued: Vec<squeue::Entry> = Vec::with_capacity(1024);
    let accept = || {
        opcode::AcceptMulti::new(Fd(l))
            .allocate_file_index(fixed)
            .build()
            .user_data(ACCEPT | l as u64)
    };
    queued.push(accept());
    let recv = |n: i32| {
        on!(fixed, n, RecvMulti::new(_, GROUP))
            .build()
            .user_data(RECV | n as u64)
    };
    let one: libc::c_int = 1;
    loop {
        // Everything queued since the last turn goes in with the wait: one
        // io_uring_enter per loop turn while the submission queue has room.
        {
            let mut sq = ring.submission();
            let mut i = 0;
            while i < queued.len() {
                // SAFETY: every entry points at memory that outlives the operation
                // (the static response, the registered buffer ring).
                if unsafe { sq.push(&queued[i]) }.is_err() {
                    break;
                }
                i += 1;
            }
            drop(sq);
            queued.drain(..i);
        }
        ring.submit_and_wait(1)?;
        let cq: Vec<cqueue::Entry> = ring.completion().collect();
        for cqe in cq {
            let data = cqe.user_data();
            let fd = (data & 0xffff_ffff) as RawFd;
            let res = cqe.result();
            match data & (0xff << 56) {
                ACCEPT => {
                    if res >= 0 && fixed {
                        // `one` lives for the whole loop: the option is read when
                        // the operation runs.
                        let nodelay = opcode::SetSockOpt::new(
                            Fixed(res as u32),
                            libc::IPPROTO_TCP as u32,
                            libc::TCP_NODELAY as u32,
                            (&one as *const i32).cast(),
                            std::mem::size_of_val(&one) as u32,
                        );
                        queued.push(nodelay.build().flags(squeue::Flags::SKIP_SUCCESS));
                        queued.push(recv(res));
                    } else if res >= 0 {
                        // SAFETY: setsockopt on the descriptor just accepted.
                        unsafe {
                            libc::setsockopt(
                                res,
                                libc::IPPROTO_TCP,
                                libc::TCP_NODELAY,
                                (&one as *const i32).cast(),
                                std::mem::size_of_val(&one) as libc::socklen_t,
                            )
                        };
                        queued.push(recv(res));
                    }
                    if !cqueue::more(cqe.flags()) {
                        queued.push(accept());
                    }
                }
                RECV => {
                    if res > 0 {
                        let bid = cqueue::buffer_select(cqe.flags()).expect("a provided buffer");
                        let got = bufs.bytes(bid, res as usize);
                        let reqs = got.windows(4).filter(|w| w == b"\r\n\r\n").count();
                        bufs.give_back(bid);
                        for _ in 0..reqs {
                            queued.push(
                                on!(fixed, fd, Send::new(_, resp.as_ptr(), resp.len() as u32))
                                    .flags(libc::MSG_NOSIGNAL)
                                    .build()
                                    .flags(squeue::Flags::SKIP_SUCCESS)
                                    .user_data(SEND | fd as u64),
                            );
                        }
                        if !cqueue::more(cqe.flags()) {
                            queued.push(recv(fd));
                        }
                    } else if res == -libc::ENOBUFS {
                        // Every buffer was in use: ask again.
                        queued.push(recv(fd));
                    } else {
                        // EOF or an error: the connection is done.
                        if fixed {
                            queued.push(
                                opcode::Close::new(Fixed(fd as u32))
                                    .build()
                                    .flags(squeue::Flags::SKIP_SUCCESS),
                            );
                        } else {
                            // SAFETY: closing a descriptor this thread accepted.
                            unsafe { libc::close(fd) };
                        }
                    }
                }
                // A failed send (the client went away): its recv sees the end.
                _ => {}
            }
        }
    }
}
