//! `defer_accept = "auto"` and `listen_sockets` over real TCP: connections that send
//! nothing sit in the kernel's SYN queue (deferred accept); when the queue of a
//! listening socket overflows, the kernel answers with SYN cookies and sluice turns
//! deferral off. More listening sockets per worker give the burst room.
//!
//! One test in its own binary: the kernel's overflow counters are the machine's,
//! and another test overflowing a queue at the same time would blur them.

use sluice_testkit::*;
use std::net::TcpStream;
use std::time::Duration;

/// Open `n` connections that send nothing (each blocking connect returns once the
/// handshake is done from the client's side, deferred or answered by a cookie).
fn silent(addr: &str, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|i| TcpStream::connect(addr).unwrap_or_else(|e| panic!("connection {i} of {n}: {e}")))
        .collect()
}

fn offs(srv: &Server) -> u64 {
    srv.status_json()["defer_accept_offs_total"]
        .as_u64()
        .expect("defer_accept_offs_total on the status page")
}

fn raise_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    assert!(lim.rlim_cur >= 12_000, "needs 12,000 descriptors: {lim:?}");
}

#[test]
fn a_syn_queue_overflow_turns_deferral_off_and_more_sockets_prevent_it() {
    raise_nofile();
    let cookies = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_syncookies").unwrap();
    assert_eq!(
        cookies.trim(),
        "1",
        "this test needs SYN cookies for overflows (net.ipv4.tcp_syncookies = 1, the kernel's default)"
    );
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // sluice asks for a backlog of 4096; the kernel caps it at somaxconn.
    let queue = somaxconn.min(4096);
    let burst = queue + queue / 4;

    // Four sockets: the burst spreads over four SYN queues and none overflows, so
    // deferral stays on and the silent connections never reach sluice.
    let srv = Server::start_with_config(
        docroot(),
        "[server]\nlisten_sockets = 4\n[condition]\ndefer_accept = \"auto\"\n",
        &["--workers", "1"],
    );
    let held = silent(&srv.addr, burst);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(offs(&srv), 0, "{}", srv.stderr());
    // Deferred: none of them reached sluice (only the status requests did).
    let accepted = srv.status_json()["connections_accepted_total"]
        .as_u64()
        .unwrap();
    assert!(accepted < 10, "{accepted} accepted of {burst} silent");
    drop(held);
    drop(srv);

    // One socket: the same burst overflows its queue, the kernel sends cookies,
    // and sluice switches deferral off within a check or two.
    let srv = Server::start_with_config(
        docroot(),
        "[server]\nlisten_sockets = 1\n[condition]\ndefer_accept = \"auto\"\n",
        &["--workers", "1"],
    );
    let held = silent(&srv.addr, burst);
    wait_until(
        || offs(&srv) > 0,
        || format!("deferral never switched off; log:\n{}", srv.stderr()),
    );
    assert!(
        srv.stderr().contains("TCP_DEFER_ACCEPT off"),
        "{}",
        srv.stderr()
    );
    // Ordinary requests go on being answered.
    let r = srv.get("GET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    drop(held);
}
