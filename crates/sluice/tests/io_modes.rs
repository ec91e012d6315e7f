//! `files.io = "sendfile" | "mmap" | "read" | "auto"` send the same bytes, for whole files,
//! ranges that straddle the read buffer, the mmap window and 4 GiB, and multipart
//! answers; and each mode is really the one used (told apart by the server's own
//! read counters in /proc/PID/io).

use sluice_testkit::*;
use std::os::unix::fs::FileExt;

const BUF: u64 = 1000;
const WINDOW: u64 = 4 << 20; // send.rs MAP_WINDOW
const FOUR_GIB: u64 = 1 << 32;

fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

fn get(srv: &Server, path: &str, extra: &str) -> Resp {
    let mut s = srv.connect();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    std::io::Write::write_all(
        &mut s,
        format!("GET {path} HTTP/1.1\r\nHost: a\r\n{extra}Connection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    read_response(&mut s, false).expect("no response")
}

/// (rchar, syscr) of a process: bytes read through read-like calls and their count.
/// `sendfile` adds to both; `pread` adds to both, once per call; pages of an mmap
/// add to neither.
/// Bytes read and read calls of the serving processes, summed.
fn proc_io(srv: &Server) -> (u64, u64) {
    let (mut bytes, mut calls) = (0, 0);
    for pid in srv.serving_pids() {
        let t = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
        let field = |k: &str| -> u64 {
            t.lines()
                .find_map(|l| l.strip_prefix(k))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        bytes += field("rchar:");
        calls += field("syscr:");
    }
    (bytes, calls)
}

/// Split a multipart/byteranges body into (Content-Range, bytes) parts.
fn multipart(r: &Resp) -> Vec<(String, Vec<u8>)> {
    let ct = r.header("content-type").unwrap();
    let boundary = ct.split("boundary=").nth(1).expect("boundary");
    let delim = format!("\r\n--{boundary}");
    let body = &r.body;
    let mut parts = Vec::new();
    let mut pos = 0;
    let find = |from: usize, pat: &[u8]| {
        body[from..]
            .windows(pat.len())
            .position(|w| w == pat)
            .map(|i| i + from)
    };
    while let Some(start) = find(pos, delim.as_bytes()) {
        let after = start + delim.len();
        if body[after..].starts_with(b"--") {
            assert_eq!(
                &body[after..],
                b"--\r\n",
                "trailing bytes after the last part"
            );
            return parts;
        }
        let head_end = find(after, b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&body[after..head_end]).into_owned();
        let cr = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .unwrap()
            .to_string();
        let (a, b) = cr
            .trim_start_matches("bytes ")
            .split('/')
            .next()
            .unwrap()
            .split_once('-')
            .unwrap();
        let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
        let data_start = head_end + 4;
        parts.push((
            cr.clone(),
            body[data_start..data_start + (b - a + 1)].to_vec(),
        ));
        pos = data_start + (b - a + 1);
    }
    panic!("no closing delimiter");
}

#[test]
fn every_io_mode_sends_the_same_bytes_and_is_the_one_used() {
    let len = 9 << 20; // more than two mmap windows
    let data = pattern(len);
    for mode in ["sendfile", "mmap", "read", "auto"] {
        let dir = docroot();
        std::fs::write(dir.path().join("nine.bin"), &data).unwrap();
        // A sparse file past 4 GiB with a marker across the 2^32 boundary.
        let f = std::fs::File::create(dir.path().join("huge.iso")).unwrap();
        f.set_len(FOUR_GIB + (64 << 20)).unwrap();
        f.write_all_at(b"ACROSS-4GIB!", FOUR_GIB - 6).unwrap();
        drop(f);
        let srv = Server::start_with_config(
            dir,
            &format!("[files]\nio = \"{mode}\"\nbuffer_size = {BUF}\nsmall_file_max = 0\n"),
            &[],
        );

        let (rc0, sc0) = proc_io(&srv);
        let r = get(&srv, "/nine.bin", "");
        assert_eq!(r.body.len() as u64, len, "{mode}");
        assert!(r.body == data, "{mode}: bytes differ");
        let (rc1, sc1) = proc_io(&srv);
        let (read_bytes, read_calls) = (rc1 - rc0, sc1 - sc0);
        match mode {
            // sendfile counts the file's bytes in a handful of calls (2 MiB each).
            "sendfile" => assert!(
                read_bytes >= len && read_calls < len / BUF / 10,
                "{mode}: {read_bytes} B in {read_calls} calls"
            ),
            // read: one pread per buffer.
            "read" => assert!(
                read_bytes >= len && read_calls >= len / BUF,
                "{mode}: {read_bytes} B in {read_calls} calls"
            ),
            // auto: the first turn (256 KiB of stream, head included) by sendfile;
            // this reader takes whole turns, so most of the rest comes from a
            // mapping, never "read".
            "auto" => assert!(
                read_bytes >= (256 << 10) - 4096 && read_bytes < len / 2,
                "{mode}: {read_bytes} B read"
            ),
            // mmap: the file's pages are never "read".
            _ => assert!(read_bytes < len / 10, "{mode}: {read_bytes} B read"),
        }

        // Single ranges across the read buffer, the mmap window and 4 GiB.
        for (a, b) in [
            (BUF - 1, BUF + 1),
            (3 * BUF - 7, 7 * BUF + 3),
            (WINDOW - 5, WINDOW + 5),
            (WINDOW - 1, 2 * WINDOW + 1),
            (len - 10, len - 1),
        ] {
            let r = get(&srv, "/nine.bin", &format!("Range: bytes={a}-{b}\r\n"));
            assert_eq!(r.status, 206, "{mode} {a}-{b}");
            assert!(
                r.body == data[a as usize..=b as usize],
                "{mode} {a}-{b}: bytes differ"
            );
        }
        let (a, b) = (FOUR_GIB - 6, FOUR_GIB + 5);
        let r = get(&srv, "/huge.iso", &format!("Range: bytes={a}-{b}\r\n"));
        assert_eq!(
            (r.status, r.text().as_str()),
            (206, "ACROSS-4GIB!"),
            "{mode}"
        );

        // Multipart: every part's bytes and Content-Range.
        let r = get(
            &srv,
            "/nine.bin",
            &format!("Range: bytes=5-15,{}-{},{}-\r\n", BUF - 2, BUF + 2, len - 3),
        );
        assert_eq!(r.status, 206, "{mode}");
        let parts = multipart(&r);
        let want = [(5, 15), (BUF - 2, BUF + 2), (len - 3, len - 1)];
        assert_eq!(parts.len(), want.len(), "{mode}");
        for ((cr, bytes), (a, b)) in parts.iter().zip(want) {
            assert_eq!(cr, &format!("bytes {a}-{b}/{len}"), "{mode}");
            assert!(
                bytes[..] == data[a as usize..=b as usize],
                "{mode} part {cr}"
            );
        }
        assert_eq!(
            r.header("content-length")
                .unwrap()
                .parse::<usize>()
                .unwrap(),
            r.body.len(),
            "{mode}"
        );
    }
}

/// A body that is not in the page cache is read by the disk threads (counted on the
/// status page as `disk_waits_total`) while the worker goes on, and is still sent
/// byte for byte — whole and as a range starting mid-file — in every I/O mode. With
/// `disk_threads = 0` the worker reads it itself and nothing is counted.
#[test]
fn cold_files_are_read_off_the_worker_and_sent_whole() {
    use std::os::fd::AsRawFd;
    let data = pattern((3 << 20) + 12345);
    for (mode, threads) in [
        ("sendfile", 2),
        ("mmap", 2),
        ("read", 2),
        ("auto", 2),
        ("sendfile", 0),
    ] {
        let dir = docroot();
        let path = dir.path().join("cold.bin");
        std::fs::write(&path, &data).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        f.sync_all().unwrap();
        // Evict until the kernel says the pages are gone: pages the server still has
        // mapped (io = "mmap" releases its window only once it has seen the
        // response finish, which can be after the client read the last byte)
        // stay in the page cache despite the advice.
        // Residency is read with `mincore` over a mapping the test never touches: a
        // probe by `preadv2(RWF_NOWAIT)` starts the kernel's readahead when it
        // misses, so it brought back the pages it was checking (flaky on a fast
        // disk).
        // SAFETY: a shared read-only mapping of an open file of this length.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                data.len(),
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let srv = Server::start_with_config(
            dir,
            &format!("[files]\nio = \"{mode}\"\ndisk_threads = {threads}\n"),
            &[],
        );
        // Pages still referenced elsewhere are skipped by the advice until they are
        // freed: those in a window the server keeps mapped for about a second after
        // its responses (`mmap`, `auto`), and those in socket buffers of a finished
        // response whose freeing the kernel defers to the CPU that sent them, until
        // that CPU next handles network traffic. So wait up to 15 s, and give the
        // server a request to answer between tries (5 s was too short on a loaded
        // machine: 3 of 45 runs beside two busy loops, with the build of
        // 2026-11-24 as well as later ones).
        let evict = || {
            let mut pages = vec![0u8; data.len().div_ceil(4096)];
            for i in 0..1500 {
                if i > 0 {
                    assert_eq!(get(&srv, "/absent", "").status, 404);
                }
                // SAFETY: advice on an open descriptor.
                let r =
                    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
                assert_eq!(r, 0);
                // SAFETY: `map` spans data.len() bytes; `pages` has one byte per page.
                assert_eq!(
                    unsafe { libc::mincore(map, data.len(), pages.as_mut_ptr()) },
                    0
                );
                if pages.iter().all(|p| p & 1 == 0) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let left = pages.iter().filter(|p| *p & 1 == 1).count();
            panic!("{mode}: {left} pages of the file stay in the page cache");
        };
        let waits = || {
            srv.status_json()["disk_waits_total"]
                .as_u64()
                .expect("disk_waits_total")
        };
        // The worker's probe of a cold page starts the kernel's readahead, and on a
        // fast disk that read can finish before the probe looks at the page again
        // (the worker preempted in between, on a loaded machine): the response then
        // finds its bytes cached and never waits. A pool job's read starts the
        // kernel's readahead past its range, so a 3 MiB response usually waits once,
        // at its first probe, and that one race made it wait never (2 of 4 suite
        // runs, 2026-11-25). On this VM, too, a probe of an evicted page now and
        // then finishes within the call the read it started (~110 µs, in windows of
        // ~10 ms; sluice-static's `cold` tests), and three tries in a row all did
        // so (one suite run, 2026-11-29). So each cold request is tried up to 20
        // times, 25 ms apart; the pool must have run in one of them.
        let cold_get = |range: &str, status: u16, want: &[u8]| -> u64 {
            let mut waited = 0;
            for i in 0..20 {
                if i > 0 {
                    std::thread::sleep(std::time::Duration::from_millis(25));
                }
                evict();
                let before = waits();
                let r = get(&srv, "/cold.bin", range);
                assert_eq!(r.status, status, "{mode}");
                assert!(
                    r.body == want,
                    "{mode}/{threads}: the cold body differs ({range:?})"
                );
                waited = waits() - before;
                if waited > 0 || threads == 0 {
                    break;
                }
            }
            waited
        };
        let whole = cold_get("", 200, &data);
        let range = cold_get(
            "Range: bytes=1000000-2999999\r\n",
            206,
            &data[1_000_000..3_000_000],
        );
        if threads > 0 {
            assert!(
                whole >= 1 && range >= 1,
                "{mode}: disk waits {whole} for the cold file, {range} for the cold range \
                 (20 tries each)"
            );
        } else {
            assert_eq!(
                (whole, range),
                (0, 0),
                "no disk threads, yet disk waits were counted"
            );
        }
        // SAFETY: the mapping made above, unused from here on.
        unsafe { libc::munmap(map, data.len()) };
    }
}

/// A file cut short while it is being sent (an operator's `truncate`, a mirror sync
/// writing in place) ends that one download early, in every I/O mode: its bytes up
/// to the cut are the file's, the connection closes, and the serving processes live
/// on (a mapped page past the new end makes the kernel's copy in `send` fail with
/// `EFAULT`; the process itself never reads the mapping, so no SIGBUS). The next
/// request is answered by the same processes.
#[test]
fn a_file_truncated_while_it_is_sent_ends_that_download_only() {
    let len: u64 = 64 << 20;
    let data = pattern(len);
    for mode in ["sendfile", "mmap", "read", "auto"] {
        let dir = docroot();
        let path = dir.path().join("big.bin");
        std::fs::write(&path, &data).unwrap();
        std::fs::write(dir.path().join("small.txt"), b"still here").unwrap();
        let srv = Server::start_with_config(
            dir,
            &format!("[files]\nio = \"{mode}\"\nsmall_file_max = 0\n"),
            &[],
        );
        let pids = srv.serving_pids();
        let mut s = srv.connect();
        s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        std::io::Write::write_all(
            &mut s,
            b"GET /big.bin HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        // The head, and the first MiB of the body.
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        let body_at = loop {
            let n = std::io::Read::read(&mut s, &mut buf).unwrap();
            assert!(n > 0, "{mode}: closed before the head");
            got.extend_from_slice(&buf[..n]);
            if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        while got.len() - body_at < 1 << 20 {
            let n = std::io::Read::read(&mut s, &mut buf).unwrap();
            assert!(n > 0, "{mode}: closed early");
            got.extend_from_slice(&buf[..n]);
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(2 << 20)
            .unwrap();
        // The rest until the server closes: an error or EOF, never the whole file.
        loop {
            match std::io::Read::read(&mut s, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let body = &got[body_at..];
        assert!(
            (body.len() as u64) < len,
            "{mode}: all {len} B arrived from a file cut to 2 MiB"
        );
        // Every byte that arrived is the file's (sent before the cut, or below it).
        assert!(body == &data[..body.len()], "{mode}: bytes differ");
        let r = get(&srv, "/small.txt", "");
        assert_eq!((r.status, r.text().as_str()), (200, "still here"), "{mode}");
        assert_eq!(srv.serving_pids(), pids, "{mode}: a serving process died");
    }
}

/// How many mappings of a file whose path ends with `name` the serving processes hold.
fn mappings(srv: &Server, name: &str) -> usize {
    srv.serving_pids()
        .iter()
        .map(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/maps"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.ends_with(name))
                .count()
        })
        .sum()
}

/// `auto` copies from mapped windows of a file for readers on this machine whose
/// first turns go at once, and on loopback every reader's first turns do. Readers
/// that then stop reading must not each keep a window mapped: every page a window
/// touched counts in the serving process's RSS until it is unmapped (2,000 such
/// readers once held 1.4 GiB). A worker keeps at most 64 windows between flushes.
#[test]
fn stalled_local_readers_do_not_each_keep_a_mapped_window() {
    let dir = docroot();
    std::fs::write(dir.path().join("four.bin"), pattern(4 << 20)).unwrap();
    let srv = Server::start_with_config(
        dir,
        "[files]\nio = \"auto\"\nsmall_file_max = 0\n",
        &["--workers", "1"],
    );
    // 150 readers that ask and never read a byte.
    let held: Vec<_> = (0..150)
        .map(|_| {
            let mut s = srv.connect();
            std::io::Write::write_all(&mut s, b"GET /four.bin HTTP/1.1\r\nHost: a\r\n\r\n")
                .unwrap();
            s
        })
        .collect();
    // Until every response has filled its socket: the count stops changing.
    let (mut last, mut stable_since) = (usize::MAX, std::time::Instant::now());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let n = mappings(&srv, "/four.bin");
        if n != last {
            (last, stable_since) = (n, std::time::Instant::now());
        } else if stable_since.elapsed() > std::time::Duration::from_millis(700) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        last <= 64,
        "{last} mapped windows of four.bin kept for {} stalled readers",
        held.len()
    );
}

/// `auto` copies from a mapping only for files that fit the CPU's caches (32 MiB
/// or less): a bigger one streams from memory either way, and `sendfile` then costs
/// a local reader less (docs/BENCHMARKS.md, "`io = "auto"` and large files"). Two
/// fast local readers that stop reading: the 4 MiB file's window stays mapped while
/// its reader stalls, the 40 MiB file is never mapped.
#[test]
fn auto_maps_only_files_that_fit_the_cache() {
    let dir = docroot();
    std::fs::write(dir.path().join("four.bin"), pattern(4 << 20)).unwrap();
    std::fs::write(dir.path().join("forty.bin"), pattern(40 << 20)).unwrap();
    let srv = Server::start_with_config(
        dir,
        "[files]\nio = \"auto\"\nsmall_file_max = 0\n",
        &["--workers", "1"],
    );
    let mapped = |name: &str| mappings(&srv, name);
    let mut held = Vec::new();
    for name in ["four.bin", "forty.bin"] {
        let mut s = srv.connect();
        std::io::Write::write_all(
            &mut s,
            format!("GET /{name} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes(),
        )
        .unwrap();
        held.push(s);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut forty_seen = 0;
    while mapped("/four.bin") == 0 && std::time::Instant::now() < deadline {
        forty_seen = forty_seen.max(mapped("/forty.bin"));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Both sockets are full by now; neither reader reads.
    std::thread::sleep(std::time::Duration::from_millis(300));
    forty_seen = forty_seen.max(mapped("/forty.bin"));
    assert!(mapped("/four.bin") >= 1, "the 4 MiB file was never mapped");
    assert_eq!(forty_seen, 0, "the 40 MiB file was mapped");
}
