//! The client side of a test: read one HTTP/1.1 response (framed by
//! Content-Length, bytes past it kept for the next, so pipelining works), watch for
//! the server's close, read to EOF, and run curl.
//!
//! Deliberately small and strict: a response this cannot frame is a test failure,
//! not something to be lenient about. It must not know how a server is started
//! (`server.rs` does).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A connection that keeps bytes read past one response for the next (pipelining).
pub struct Client {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn new(s: TcpStream) -> Client {
        Client { s, buf: Vec::new() }
    }

    pub fn send(&mut self, raw: &[u8]) {
        self.s.write_all(raw).unwrap();
    }

    /// Read one response (framed by Content-Length); `None` on EOF before a head.
    pub fn response(&mut self, head_only: bool) -> Option<Resp> {
        let mut tmp = [0u8; 65536];
        loop {
            let mut hs = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Response::new(&mut hs);
            if let Ok(httparse::Status::Complete(n)) = r.parse(&self.buf) {
                let status = r.code.unwrap();
                let headers: Vec<(String, String)> = r
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                let len: usize = headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .map(|(_, v)| v.parse().unwrap())
                    .unwrap_or(0);
                let body_len = if head_only || status == 304 { 0 } else { len };
                while self.buf.len() < n + body_len {
                    let k = self.s.read(&mut tmp).ok()?;
                    if k == 0 {
                        break;
                    }
                    self.buf.extend_from_slice(&tmp[..k]);
                }
                let end = (n + body_len).min(self.buf.len());
                let body = self.buf[n..end].to_vec();
                self.buf.drain(..end);
                return Some(Resp {
                    status,
                    headers,
                    body,
                });
            }
            let k = self.s.read(&mut tmp).ok()?;
            if k == 0 {
                return None;
            }
            self.buf.extend_from_slice(&tmp[..k]);
        }
    }
}

pub fn read_response(s: &mut TcpStream, head_only: bool) -> Option<Resp> {
    Client::new(s.try_clone().unwrap()).response(head_only)
}

/// True if the peer closed the connection (EOF) within `within`.
pub fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// `n` keep-alive connections to `addr`, each after one answered request for
/// `/hello.txt`, opened `every` apart (so their deadlines spread over that much
/// time, whatever the server's own clock phase is), with when each answer came.
pub fn hold_keepalives(addr: &str, n: usize, every: Duration) -> Vec<(Client, Instant)> {
    let mut held = Vec::new();
    for i in 0..n {
        if i > 0 {
            std::thread::sleep(every);
        }
        let mut c = Client::new(TcpStream::connect(addr).unwrap());
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(c.response(false).expect("an answer").status, 200);
        held.push((c, Instant::now()));
    }
    held
}

/// Asserts that the server closes each of `held` (from [`hold_keepalives`]) within
/// `slack` after `timeout` from its answer: not early, and not a timer's
/// resolution (a second) late.
pub fn assert_closed_on_time(held: Vec<(Client, Instant)>, timeout: Duration, slack: Duration) {
    for (mut c, answered) in held {
        let wait = (timeout + slack + Duration::from_secs(1)).saturating_sub(answered.elapsed());
        assert!(
            closed_within(&mut c.s, wait),
            "not closed {:?} after its answer",
            answered.elapsed()
        );
        let d = answered.elapsed();
        assert!(
            d >= timeout.saturating_sub(Duration::from_millis(100)) && d < timeout + slack,
            "an idle keep-alive connection was closed {d:?} after its answer (timeout {timeout:?})"
        );
    }
}

/// Read until EOF (or reset/timeout); returns the bytes and whether it ended cleanly.
pub fn read_to_end(s: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut b = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut b) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&b[..n]),
            Err(_) => return (out, false),
        }
    }
}

/// Read a response head byte by byte and stop exactly at its blank line, so what
/// is read next is the body.
pub fn read_head(s: &mut TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "EOF inside a head");
        head.push(b[0]);
    }
    head
}

pub fn curl_available() -> bool {
    Command::new("curl").arg("--version").output().is_ok()
}

pub fn curl(args: &[&str]) -> std::process::Output {
    Command::new("curl")
        .args(["-s", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl")
}

/// Wait until `path` holds at least `n` lines for which `pred` is true (the access log
/// is flushed at least once a second); returns the whole text. Panics after `within`.
pub fn wait_for_lines(
    path: &Path,
    n: usize,
    within: Duration,
    pred: impl Fn(&str) -> bool,
) -> String {
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().filter(|l| pred(l)).count() >= n {
            return text;
        }
        assert!(
            t.elapsed() < within,
            "wanted {n} matching lines in {}, have:\n{text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A PROXY protocol v2 header (as HAProxy's `send-proxy-v2` writes it) for a TCP
/// client at `src:sport` that connected to `127.0.0.1:dport`.
pub fn proxy_v2(src: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0, 12]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&[127, 0, 0, 1]);
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    h
}

/// The DOM headless Chromium has after loading `url` and running its scripts for
/// `budget_ms` of virtual time (`--dump-dom`). Panics if Chromium is missing
/// (scripts/test.sh installs Debian's `chromium`).
pub fn chromium_dom(url: &str, budget_ms: u32) -> String {
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .expect("chromium is needed (scripts/test.sh installs Debian's chromium)");
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            &format!("--virtual-time-budget={budget_ms}"),
            "--dump-dom",
            url,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}
