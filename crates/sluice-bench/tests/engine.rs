//! The engine against tiny servers started in the test: counts and error classes
//! must be exact.

use sluice_bench::workload::Workload;
use sluice_bench::{run, Options};
use std::io::{Read, Write};
use std::net::IpAddr;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A keep-alive server whose answer to the n-th request (1-based, across all
/// connections) is `answer(n, path)`.
fn serve(answer: impl Fn(u64, &str) -> Vec<u8> + Send + Sync + 'static) -> std::net::SocketAddr {
    serve_recording(answer).0
}

/// As [`serve`], also recording the peer address of every connection.
fn serve_recording(
    answer: impl Fn(u64, &str) -> Vec<u8> + Send + Sync + 'static,
) -> (std::net::SocketAddr, Arc<Mutex<Vec<IpAddr>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let answer = Arc::new(answer);
    let n = Arc::new(AtomicU64::new(0));
    let peers = Arc::new(Mutex::new(Vec::new()));
    let seen = peers.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            if let Ok(p) = s.peer_addr() {
                seen.lock().unwrap().push(p.ip());
            }
            let answer = answer.clone();
            let n = n.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_string();
                        buf.drain(..end + 4);
                        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                        let k = n.fetch_add(1, Ordering::SeqCst) + 1;
                        if s.write_all(&answer(k, &path)).is_err() {
                            return;
                        }
                        if head.contains("Connection: close") {
                            return;
                        }
                    }
                    match s.read(&mut tmp) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&tmp[..k]),
                    }
                }
            });
        }
    });
    (addr, peers)
}

/// SO_LINGER with a zero timeout: closing `s` sends RST instead of FIN.
fn reset_on_close(s: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on our own socket with a correctly sized struct.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(s),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
}

/// A server that accepts and reads, then does `then` with each connection.
fn serve_raw(then: fn(TcpStream)) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut b = [0u8; 4096];
                let _ = s.read(&mut b);
                then(s)
            });
        }
    });
    addr
}

fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn opts(addr: std::net::SocketAddr) -> Options {
    Options {
        addr,
        connections: 1,
        threads: 1,
        duration: Duration::from_secs(20),
        max_requests: Some(300),
        ..Options::default()
    }
}

#[test]
fn every_third_500_gives_availability_two_thirds() {
    let addr = serve(|k, _| {
        if k % 3 == 0 {
            b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n".to_vec()
        } else {
            ok("hello")
        }
    });
    for pipeline in [1, 3] {
        let o = Options {
            pipeline,
            ..opts(addr)
        };
        let r = run(&o, &Workload::single("/x", &o)).unwrap();
        let c = &r.counts;
        assert_eq!(r.latency.len(), 300, "pipeline {pipeline}");
        assert_eq!(
            c.status_5xx * 3,
            r.latency.len(),
            "pipeline {pipeline}: {c:?}"
        );
        assert_eq!(c.status_2xx, 2 * c.status_5xx, "{c:?}");
        assert_eq!(c.attempted, 300, "{c:?}");
        assert_eq!(c.succeeded as f64 / c.attempted as f64, 2.0 / 3.0);
    }
}

#[test]
fn refused_connections_are_connect_errors() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap(); // bound, then dropped: nothing listens
    let o = Options {
        duration: Duration::from_millis(300),
        max_requests: None,
        ..opts(addr)
    };
    let r = run(&o, &Workload::single("/", &o)).unwrap();
    assert!(r.counts.err_connect > 0, "{:?}", r.counts);
    assert_eq!(r.counts.succeeded, 0);
    assert_eq!(r.latency.len(), 0);
}

#[test]
fn followed_redirect_is_one_transaction() {
    let addr = serve(|_, path| {
        if path == "/old" {
            b"HTTP/1.1 302 Found\r\nLocation: /new\r\nContent-Length: 0\r\n\r\n".to_vec()
        } else {
            ok("new")
        }
    });
    let o = Options {
        follow_redirects: true,
        max_requests: Some(50),
        ..opts(addr)
    };
    let r = run(&o, &Workload::single("/old", &o)).unwrap();
    assert_eq!(r.counts.attempted, 50, "{:?}", r.counts);
    assert_eq!(r.counts.status_2xx, 50);
    assert_eq!(r.counts.redirects_followed, 50);
    assert_eq!(r.counts.status_3xx, 0);
    // Without following, the 302 itself is the (successful) answer.
    let o = Options {
        max_requests: Some(50),
        ..opts(addr)
    };
    let r = run(&o, &Workload::single("/old", &o)).unwrap();
    assert_eq!((r.counts.status_3xx, r.counts.redirects_followed), (50, 0));
}

#[test]
fn chunked_and_connection_close_responses() {
    let addr = serve(|k, _| {
        if k % 2 == 0 {
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec()
        } else {
            ok("plain")
        }
    });
    let o = Options {
        max_requests: Some(100),
        ..opts(addr)
    };
    let r = run(&o, &Workload::single("/", &o)).unwrap();
    assert_eq!(r.counts.status_2xx, 100, "{:?}", r.counts);
    assert_eq!(r.counts.err_parse + r.counts.err_reset, 0);

    let addr = serve(|_, _| {
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok".to_vec()
    });
    let o = Options {
        keepalive: false,
        connections: 4,
        max_requests: Some(100),
        ..opts(addr)
    };
    let r = run(&o, &Workload::single("/", &o)).unwrap();
    assert_eq!(r.counts.status_2xx, 100, "{:?}", r.counts);
}

#[test]
fn open_loop_keeps_the_rate() {
    let addr = serve(|_, _| ok("x"));
    let o = Options {
        rate: Some(500.0),
        connections: 4,
        duration: Duration::from_secs(2),
        max_requests: None,
        ..opts(addr)
    };
    let r = run(&o, &Workload::single("/", &o)).unwrap();
    let n = r.latency.len();
    assert!((850..=1010).contains(&n), "{n} requests in 2 s at 500/s");
}

#[test]
fn slow_reader_is_slow() {
    let big = "z".repeat(64 * 1024);
    let addr = serve(move |_, _| ok(&big));
    let o = Options {
        read_rate: Some(64 * 1024),
        max_requests: Some(3),
        ..opts(addr)
    };
    let t = std::time::Instant::now();
    let r = run(&o, &Workload::single("/", &o)).unwrap();
    assert_eq!(r.counts.status_2xx, 3);
    // 3 x 64 KiB at 64 KiB/s: at least two full refill periods.
    assert!(
        t.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        t.elapsed()
    );
}

/// `read_stagger`: readers started together neither refill nor end together. Each of
/// 16 connections reads a 64 KiB response at 32 KiB/s. In step, every one needs its
/// second rate window, a full second after the start; out of step, each has a random
/// head start and its own window phase within the first second, so at least half end
/// well inside it (the median fails only if 8 of 16 drew both a short head start
/// and a phase past 0.9 s, p ≈ 10⁻⁷).
#[test]
fn staggered_slow_readers_end_apart() {
    let big = "z".repeat(64 * 1024);
    let addr = serve(move |_, _| ok(&big));
    let run_with = |stagger: u64| {
        let o = Options {
            connections: 16,
            read_rate: Some(32 * 1024),
            read_stagger: stagger,
            max_requests: Some(16),
            ..opts(addr)
        };
        run(&o, &Workload::single("/", &o)).unwrap()
    };
    let in_step = run_with(0);
    assert_eq!(in_step.counts.status_2xx, 16);
    assert!(
        in_step.latency.min() >= 950_000,
        "in step, the quickest response took {} µs",
        in_step.latency.min()
    );
    let apart = run_with(64 * 1024);
    assert_eq!(apart.counts.status_2xx, 16);
    let median = apart.latency.value_at_quantile(0.5);
    assert!(median < 900_000, "out of step, the median took {median} µs");
}

#[test]
fn several_source_addresses() {
    let (addr, peers) = serve_recording(|_, _| ok("x"));
    let o = Options {
        connections: 4,
        source_addrs: vec!["127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap()],
        max_requests: Some(40),
        ..opts(addr)
    };
    let r = run(&o, &Workload::single("/", &o)).unwrap();
    assert_eq!(r.counts.status_2xx, 40, "{:?}", r.counts);
    let mut seen: Vec<IpAddr> = peers.lock().unwrap().clone();
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen,
        [
            "127.0.0.2".parse::<IpAddr>().unwrap(),
            "127.0.0.3".parse().unwrap()
        ],
        "connections came from {seen:?}"
    );
}

#[test]
fn silent_servers_count_as_timeouts() {
    let addr = serve_raw(|s| {
        std::thread::sleep(Duration::from_secs(3));
        drop(s)
    });
    let o = Options {
        timeout: Duration::from_millis(300),
        max_requests: Some(3),
        ..opts(addr)
    };
    let r = run(&o, &Workload::single("/", &o)).unwrap();
    assert_eq!(r.counts.err_timeout, 3, "{:?}", r.counts);
    assert_eq!(r.counts.succeeded, 0);
}

#[test]
fn resets_count_as_resets() {
    let addr = serve_raw(|s| {
        reset_on_close(&s);
        drop(s)
    });
    let o = Options {
        max_requests: Some(5),
        ..opts(addr)
    };
    let r = run(&o, &Workload::single("/", &o)).unwrap();
    assert_eq!(r.counts.err_reset, 5, "{:?}", r.counts);
    assert_eq!(r.counts.succeeded, 0);
}

#[test]
fn open_loop_latency_counts_from_the_intended_send_time() {
    // The server takes 100 ms per request; 1 connection asked for 20 requests/s can
    // only do 10/s, so requests queue. Measured from when each request was due (not
    // when the busy connection got round to sending it), latency grows by ~50 ms per
    // request: far above the 100 ms service time. A closed-loop measurement of the
    // same server would say ~100 ms.
    let addr = serve(|_, _| {
        std::thread::sleep(Duration::from_millis(100));
        ok("x")
    });
    let o = Options {
        rate: Some(20.0),
        connections: 1,
        duration: Duration::from_secs(2),
        max_requests: None,
        ..opts(addr)
    };
    let r = run(&o, &Workload::single("/", &o)).unwrap();
    let p90 = r.latency.value_at_quantile(0.9);
    assert!(p90 >= 400_000, "p90 {p90} us: queueing delay not counted");
    let closed = Options {
        rate: None,
        max_requests: Some(8),
        ..o.clone()
    };
    let r = run(&closed, &Workload::single("/", &closed)).unwrap();
    let p90 = r.latency.value_at_quantile(0.9);
    assert!((90_000..250_000).contains(&p90), "closed loop p90 {p90} us");
}

#[test]
fn availability_counts_every_refused_connection_exactly() {
    // Every third connection is reset before it is answered; without keep-alive each
    // transaction is one connection, so exactly a third of them fail.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for (k, s) in l.incoming().enumerate() {
            let Ok(mut s) = s else { continue };
            if k % 3 == 2 {
                reset_on_close(&s);
                continue; // dropped: RST
            }
            let mut b = [0u8; 4096];
            let _ = s.read(&mut b);
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx");
        }
    });
    let o = Options {
        keepalive: false,
        max_requests: Some(60),
        ..opts(addr)
    };
    let r = run(&o, &Workload::single("/", &o)).unwrap();
    assert_eq!(r.counts.attempted, 60, "{:?}", r.counts);
    assert_eq!(r.counts.succeeded, 40, "{:?}", r.counts);
    assert_eq!(
        r.counts.err_reset + r.counts.err_connect,
        20,
        "{:?}",
        r.counts
    );
}
