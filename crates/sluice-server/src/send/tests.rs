//! The send path's own tests: `io = "auto"` switching between `sendfile` and mapped
//! sends as the reader speeds up and slows down, over a real TCP connection.

use super::wire::GATHER_MAX;
use super::*;
use crate::disk::tests::{evict, until_found_cold};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;

fn set_sndbuf(fd: i32, bytes: i32) {
    // SAFETY: an int option on an open socket. FORCE: past wmem_max (tests run as
    // root; the plain option is the fallback).
    unsafe {
        let v = &bytes as *const i32 as *const libc::c_void;
        let n = std::mem::size_of::<i32>() as libc::socklen_t;
        if libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, v, n) != 0 {
            libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, v, n);
        }
    }
}

/// Read until `got` holds `total` bytes.
fn take(b: &mut TcpStream, got: &mut Vec<u8>, total: u64) {
    let at = got.len();
    got.resize(total as usize, 0);
    b.read_exact(&mut got[at..]).unwrap();
}

/// `io = "auto"`: the first turn goes by `sendfile`; a socket that took it whole
/// gets the next bytes from a mapping, in one call of up to `MAP_SEND`; once a
/// flush blocks after a few KiB, the rest goes by `sendfile` again. The bytes
/// arrive whole and in order through every switch.
/// A file of `len` patterned bytes, the two ends of a loopback connection (the
/// sender's non-blocking with a large send buffer; the reader's window small and
/// fixed, set before connecting, so what the sender's socket takes is set by its own
/// send buffer), and a response of the whole file.
struct Setup {
    dir: std::path::PathBuf,
    data: Vec<u8>,
    file: Rc<std::fs::File>,
    reader: TcpStream,
    sender: TcpStream,
    out: Outgoing,
}

fn setup(name: &str, len: u32) -> Setup {
    let dir = std::env::temp_dir().join(format!("sluice-send-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("f");
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4093) as u8).collect();
    std::fs::write(&p, &data).unwrap();
    let file = Rc::new(std::fs::File::open(&p).unwrap());
    file.sync_all().unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    c.set_recv_buffer_size(64 << 10).unwrap();
    c.connect(&l.local_addr().unwrap().into()).unwrap();
    let (sender, _) = l.accept().unwrap();
    sender.set_nonblocking(true).unwrap();
    set_sndbuf(sender.as_raw_fd(), 8 << 20);
    let mut out = Outgoing::default();
    out.chunks
        .push_back(Chunk::File(file.clone(), 0, data.len() as u64));
    Setup {
        dir,
        data,
        file,
        reader: c.into(),
        sender,
        out,
    }
}

#[test]
fn auto_maps_for_a_reader_that_takes_whole_turns_and_not_for_a_slow_one() {
    let Setup {
        dir,
        data,
        reader: mut b,
        sender: a,
        mut out,
        ..
    } = setup("switch", 6 << 20);
    let mut wire = Plain(a.as_raw_fd());
    let turn = 256 << 10;
    let mut got = Vec::new();

    // Turn 1: sendfile, taken whole (into the large send buffer).
    let r = out.flush(&mut wire, IoMode::Auto, 0, turn, false).unwrap();
    assert_eq!(
        (r, out.sent, out.map.is_some()),
        (Flush::Yield, turn, false)
    );
    assert!(out.fast, "a whole turn taken at once marks the reader fast");

    // Turn 2: from a mapping, one call of MAP_SEND.
    let r = out.flush(&mut wire, IoMode::Auto, 0, turn, false).unwrap();
    assert_eq!(r, Flush::Yield);
    assert!(
        out.map.is_some(),
        "a fast reader's bytes come from a mapping"
    );
    assert_eq!(out.sent, turn + MAP_SEND, "one mapped call of MAP_SEND");
    take(&mut b, &mut got, out.sent);

    // The reader slows down (stops reading; a small send buffer): the socket
    // takes its window's worth and blocks.
    set_sndbuf(a.as_raw_fd(), 4096);
    let before = out.sent;
    let r = out.flush(&mut wire, IoMode::Auto, 0, turn, false).unwrap();
    assert_eq!(r, Flush::Blocked);
    assert!(
        out.sent - before < turn / 4,
        "{} B taken",
        out.sent - before
    );
    assert!(
        !out.fast,
        "a flush that blocked after little ends the fast mode"
    );

    // The rest goes by sendfile and arrives whole.
    loop {
        take(&mut b, &mut got, out.sent);
        match out.flush(&mut wire, IoMode::Auto, 0, turn, false).unwrap() {
            Flush::Done => break,
            r @ (Flush::Yield | Flush::Blocked) => {
                assert!(!out.fast, "{r:?} at {}", out.sent)
            }
            Flush::Cold { .. } => unreachable!("not checked"),
        }
    }
    take(&mut b, &mut got, out.sent);
    assert_eq!(got.len(), data.len());
    assert!(got == data, "bytes differ");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `io = "auto"` with a fast reader and a file that is not in the page cache: the
/// bytes go by `sendfile` (whose reads start the kernel's readahead), never from a
/// mapping (whose copies start none: each MiB would wait on the disk in turn).
/// Here without the disk threads (`check_cold` off): `auto` asks the page cache
/// itself.
#[test]
fn auto_sends_a_cold_file_by_sendfile_even_to_a_fast_reader() {
    let turn = 256 << 10;
    let Setup {
        dir,
        data,
        reader: mut b,
        sender: a,
        mut out,
        ..
    } = until_found_cold(|| {
        let mut s = setup("cold", 4 << 20);
        let out = &mut s.out;
        let mut wire = Plain(s.sender.as_raw_fd());
        evict(&s.file, 0, 4 << 20);
        let r = out.flush(&mut wire, IoMode::Auto, 0, turn, false).unwrap();
        assert_eq!((r, out.fast), (Flush::Yield, true));
        // What the first turn's reads brought in (readahead) goes too; the pages
        // the socket still holds are behind `sent`.
        let from = out.sent.next_multiple_of(4096);
        evict(&s.file, from, (4 << 20) - from);
        let r = out.flush(&mut wire, IoMode::Auto, 0, turn, false).unwrap();
        assert_eq!(r, Flush::Yield);
        if !out.was_cold {
            std::fs::remove_dir_all(&s.dir).unwrap();
            return None;
        }
        assert!(out.map.is_none(), "cold bytes were sent from a mapping");
        Some(s)
    });
    let mut wire = Plain(a.as_raw_fd());
    let mut got = Vec::new();
    loop {
        take(&mut b, &mut got, out.sent);
        match out.flush(&mut wire, IoMode::Auto, 0, turn, false).unwrap() {
            Flush::Done => break,
            _ => assert!(out.map.is_none(), "mapped at {}", out.sent),
        }
    }
    take(&mut b, &mut got, out.sent);
    assert!(got == data, "bytes differ");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A checked `sendfile` stops where the bytes found cached end, though its turn
/// edge (which counts the head) lies further on: the first 2 MiB are cached, the
/// rest evicted, and the response must report the rest cold at exactly 2 MiB, not read
/// into it on the worker (before the fix it sent on to the next edge, 256 KiB less
/// the head past the checked bytes, and waited on the disk for them).
#[test]
fn a_checked_sendfile_stops_at_the_bytes_found_cached() {
    until_found_cold(|| {
        let Setup {
            dir,
            data,
            file,
            reader: mut b,
            sender: a,
            mut out,
        } = setup("clamp", 4 << 20);
        std::fs::read(dir.join("f")).unwrap();
        evict(&file, 2 << 20, 2 << 20);
        out.head_len = 300;
        let mut wire = Plain(a.as_raw_fd());
        let mut got = Vec::new();
        let cold_at = loop {
            match out
                .flush(&mut wire, IoMode::Sendfile, 0, 8 << 20, true)
                .unwrap()
            {
                Flush::Cold { off, .. } => break Some(off),
                Flush::Done => break None,
                _ => take(&mut b, &mut got, out.sent),
            }
        };
        std::fs::remove_dir_all(&dir).unwrap();
        // Found cold past 2 MiB is what the fixed bug did, and what a probe that
        // read its page in does: try again, and fail if every try finds it so.
        if cold_at != Some(2 << 20) {
            return None;
        }
        assert_eq!(out.sent, 2 << 20);
        take(&mut b, &mut got, out.sent);
        assert!(got[..] == data[..2 << 20], "bytes differ");
        Some(())
    });
}

/// Which readers `auto` may map for: those on this machine.
#[test]
fn only_loopback_peers_are_local() {
    for (ip, local) in [
        ("127.0.0.1", true),
        ("127.88.0.1", true),
        ("::1", true),
        ("::ffff:127.0.0.1", true),
        ("10.0.0.1", false),
        ("192.0.2.7", false),
        ("2001:db8::1", false),
        ("::ffff:192.0.2.7", false),
    ] {
        assert_eq!(is_local(ip.parse().unwrap()), local, "{ip}");
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    assert!(peer_is_local(c.as_raw_fd()));
    // Not a connected socket: not local (and not a panic).
    assert!(!peer_is_local(l.as_raw_fd()));
}

/// Once its head is out, a download that sends its file by `sendfile` gives the
/// head's buffer up (the worker pools it); one that copies its body through the
/// buffer (`read`, TLS) keeps it, and so does one whose head is still going out.
#[test]
fn a_download_gives_up_its_head_buffer_once_the_head_is_out() {
    let Setup {
        dir,
        reader: _b,
        sender: a,
        mut out,
        ..
    } = setup("spare", 4 << 20);
    out.wbuf = Vec::with_capacity(crate::io::READ_CHUNK);
    out.wbuf
        .extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 4194304\r\n\r\n");
    assert!(out.spare_buffer(false).is_none(), "the head is not out yet");
    let mut wire = Plain(a.as_raw_fd());
    let r = out
        .flush(&mut wire, IoMode::Sendfile, 0, 256 << 10, false)
        .unwrap();
    assert_eq!(r, Flush::Yield, "more of the file to send");
    assert!(
        out.spare_buffer(true).is_none(),
        "kept when the body is copied through it"
    );
    let spare = out.spare_buffer(false).expect("given up");
    assert_eq!(spare.capacity(), crate::io::READ_CHUNK);
    assert_eq!(out.wbuf.capacity(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `Plain::send`: pieces that fit [`GATHER_MAX`] are gathered into one `send`,
/// larger ones go by `sendmsg`; either way the bytes arrive whole and in order.
#[test]
fn small_pieces_are_gathered_and_large_ones_sent_as_a_vector() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut reader = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (sender, _) = l.accept().unwrap();
    let mut wire = Plain(sender.as_raw_fd());
    for sizes in [
        &[200usize, 1024, 3][..],
        &[300, GATHER_MAX],
        &[GATHER_MAX],
        &[7],
    ] {
        let pieces: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 31 + j) as u8).collect())
            .collect();
        let iov: Vec<io::IoSlice<'_>> = pieces.iter().map(|p| io::IoSlice::new(p)).collect();
        let total: usize = sizes.iter().sum();
        assert_eq!(wire.send(&iov, false).unwrap(), total, "{sizes:?}");
        let mut got = vec![0u8; total];
        reader.read_exact(&mut got).unwrap();
        assert_eq!(got, pieces.concat(), "{sizes:?}");
    }
}

/// A wire that takes at most `per_call` bytes a call and then, once, none.
struct Trickle {
    per_call: usize,
    got: Vec<u8>,
    calls: usize,
}

impl Wire for Trickle {
    fn fd(&self) -> i32 {
        -1
    }
    fn zero_copy(&self) -> bool {
        true
    }
    fn send(&mut self, iov: &[io::IoSlice<'_>], _more: bool) -> io::Result<usize> {
        self.calls += 1;
        if self.calls.is_multiple_of(3) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut n = 0;
        for s in iov {
            let take = (self.per_call - n).min(s.len());
            self.got.extend_from_slice(&s[..take]);
            n += take;
            if n == self.per_call {
                break;
            }
        }
        Ok(n)
    }
    fn drain(&mut self) -> io::Result<bool> {
        Ok(true)
    }
}

/// A small body behind the head in the head's buffer: the bytes leave in order,
/// and `sent` (the access log's and the slow-read window's count) counts only the
/// body's, as far as they are written, whatever the socket takes at a time.
#[test]
fn a_small_body_behind_the_head_counts_only_its_own_bytes_as_sent() {
    for per_call in [1, 3, 7, 19, 1000] {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n";
        let mut out = Outgoing {
            wbuf: Vec::with_capacity(64),
            ..Default::default()
        };
        out.wbuf.extend_from_slice(head);
        out.head_len = head.len() as u64;
        assert!(out.append_small_body(b"hello world"));
        assert!(
            !out.append_small_body(&[0u8; 64]),
            "past the buffer's capacity"
        );
        let mut wire = Trickle {
            per_call,
            got: Vec::new(),
            calls: 0,
        };
        loop {
            let before = wire.got.len();
            let r = out
                .flush(&mut wire, IoMode::Auto, 4096, 1 << 20, false)
                .unwrap();
            let body_out = wire.got.len().saturating_sub(head.len());
            assert_eq!(
                out.sent, body_out as u64,
                "per call {per_call}, from {before}"
            );
            match r {
                Flush::Done => break,
                Flush::Blocked => continue,
                other => panic!("{per_call}: {:?}", std::mem::discriminant(&other)),
            }
        }
        assert_eq!(wire.got, [&head[..], b"hello world"].concat());
        assert_eq!(out.sent, 11);
    }
}

/// `limit_rate_after`: the switch waits for the threshold to leave the socket
/// while the socket takes bytes, watches once when it blocks, and is made at once
/// when the response has nothing more to give or waits for the disk.
#[test]
fn the_pacing_switch_waits_for_the_threshold_to_leave_the_socket() {
    let mut o = Outgoing::default();
    o.pace.switch = Some((1000, 5000));
    let never = || -> u64 { panic!("unsent asked before the threshold is in the socket") };
    o.sent = 999;
    assert_eq!(
        o.pace.due(o.sent, PaceTurn::Blocked, never),
        PaceStep::Nothing
    );
    o.sent = 1500;
    // 600 unsent of 1500: only 900 have left.
    assert_eq!(
        o.pace.due(o.sent, PaceTurn::Yielded, || 600),
        PaceStep::Nothing
    );
    assert_eq!(
        o.pace.due(o.sent, PaceTurn::Blocked, || 600),
        PaceStep::Watch(500)
    );
    assert_eq!(
        o.pace.due(o.sent, PaceTurn::Blocked, || 600),
        PaceStep::Nothing,
        "one watch"
    );
    // 400 unsent: 1100 have left.
    assert_eq!(
        o.pace.due(o.sent, PaceTurn::Blocked, || 400),
        PaceStep::Switch(5000, true)
    );
    assert_eq!(
        o.pace.due(o.sent, PaceTurn::Ended, || 0),
        PaceStep::Nothing,
        "switched once"
    );
    assert!(!o.pace.watching);

    let mut o = Outgoing {
        sent: 4000,
        ..Default::default()
    };
    o.pace.switch = Some((1000, 5000));
    assert_eq!(
        o.pace.due(o.sent, PaceTurn::Ended, || panic!("not asked")),
        PaceStep::Switch(5000, false),
        "the last bytes are in: what the socket holds is paced"
    );
}
