//! PROXY protocol (issue 8, behind a load balancer): v1 and v2 headers on an opt-in
//! listener, trusted sources only; the access log, rule conditions and per-range
//! caps see the real client. With curl `--haproxy-protocol` and Debian's haproxy
//! (`send-proxy-v2`) in front of two sluice instances.

use sluice_testkit::*;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `n` distinct free addresses (held together while chosen, so no two are equal:
/// listeners use SO_REUSEPORT, so a port chosen twice would be shared silently).
fn free_addrs(n: usize) -> Vec<String> {
    let ls: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect()
}

fn free_addr() -> String {
    free_addrs(1).remove(0)
}

struct Proxied {
    child: std::process::Child,
    plain: String,
    proxy: String,
    log: TempLog,
    _dir: tempfile::TempDir,
}

impl Drop for Proxied {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// sluice with two listeners from its config (the harness's `--listen` would
/// replace them): a plain one and a PROXY one.
fn start(tag: &str, extra: &str) -> Proxied {
    let d = docroot();
    std::fs::write(
        d.path().join(".rules"),
        "prefix / deny addr=203.0.113.0/24\n",
    )
    .unwrap();
    let mut a = free_addrs(2);
    let (plain, proxy) = (a.remove(0), a.remove(0));
    let log = log_path(&format!("proxy-{tag}"));
    let toml = format!(
        "[server]\nlisten = [\"{plain}\", \"{proxy}\"]\nworkers = 2\nproxy_protocol = [\"{proxy}\"]\n{extra}\n[rules]\nfiles = [\".rules\"]\n[log]\naccess = \"{}\"\n",
        log.display()
    );
    let cfg = d.path().join(".test-config.toml");
    std::fs::write(&cfg, &toml).unwrap();
    let mut child = Command::new(bin())
        .arg("serve")
        .arg(d.path())
        .args(["--allow-root", "--config", cfg.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let line = first_stdout_line(&mut child);
    assert!(line.contains("serving"), "{line:?}");
    // Both listeners print a line; the second may still be on its way.
    let t = Instant::now();
    while TcpStream::connect(&proxy).is_err() {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
    }
    Proxied {
        child,
        plain,
        proxy,
        log,
        _dir: d,
    }
}

fn send(addr: &str, bytes: &[u8]) -> Option<Resp> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    read_response(&mut s, false)
}

#[test]
fn headers_name_the_real_client_for_log_rules_and_caps() {
    let p = start("main", "");
    let get = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    // v1 from a denied range: the rule sees the real client.
    let r = send(
        &p.proxy,
        &[&b"PROXY TCP4 203.0.113.9 127.0.0.1 5555 80\r\n"[..], get].concat(),
    )
    .unwrap();
    assert_eq!(r.status, 403);
    let r = send(
        &p.proxy,
        &[&b"PROXY TCP4 198.51.100.7 127.0.0.1 5555 80\r\n"[..], get].concat(),
    )
    .unwrap();
    assert_eq!(r.text(), "hello world\n");
    // v2, binary.
    let r = send(
        &p.proxy,
        &[proxy_v2([192, 0, 2, 44], 40000, 80), get.to_vec()].concat(),
    )
    .unwrap();
    assert_eq!(r.status, 200);
    // No header on the PROXY listener: closed, nothing answered.
    assert!(send(&p.proxy, get).is_none());
    // The plain listener serves as before, and a PROXY line there is not HTTP.
    assert_eq!(send(&p.plain, get).unwrap().status, 200);
    assert_eq!(
        send(
            &p.plain,
            &[&b"PROXY TCP4 203.0.113.9 127.0.0.1 5555 80\r\n"[..], get].concat()
        )
        .unwrap()
        .status,
        400
    );
    // curl's own --haproxy-protocol (v1, its real addresses).
    let out = curl(&[
        "-sS",
        "--haproxy-protocol",
        &format!("http://{}/hello.txt", p.proxy),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello world\n");
    let text = wait_for_lines(&p.log, 4, Duration::from_secs(5), |l| {
        l.contains("/hello.txt")
    });
    assert!(
        text.lines()
            .any(|l| l.starts_with("203.0.113.9 ") && l.contains("\" 403 ")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("198.51.100.7 ")),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("192.0.2.44 ")), "{text}");
    let _ = std::fs::remove_file(&p.log);
}

#[test]
fn only_trusted_sources_may_send_headers() {
    let p = start("trust", "proxy_trusted = [\"127.0.0.2/32\"]");
    let get = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    // From 127.0.0.1: not trusted, closed at once.
    assert!(send(
        &p.proxy,
        &[&b"PROXY TCP4 198.51.100.7 127.0.0.1 5555 80\r\n"[..], get].concat()
    )
    .is_none());
    // From 127.0.0.2: trusted.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&"127.0.0.2:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    sock.connect(&p.proxy.parse::<SocketAddr>().unwrap().into())
        .unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[&b"PROXY TCP4 198.51.100.7 127.0.0.1 5555 80\r\n"[..], get].concat())
        .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
    let _ = std::fs::remove_file(&p.log);
}

#[test]
fn per_range_caps_count_the_real_clients() {
    // 100 connections at most, 5% per /24: the sixth connection from one real /24
    // is answered 503; another /24 is not affected. Loopback (the balancer) is not
    // exempt here, but it is never counted: only the clients behind it are.
    let p = start(
        "caps",
        "[condition]\nmax_connections = 100\ncap_24 = 0.05\ncap_exempt = []",
    );
    let mut held = Vec::new();
    for i in 0..5 {
        let mut s = TcpStream::connect(&p.proxy).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(format!("PROXY TCP4 198.51.100.{i} 127.0.0.1 5555 80\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes()).unwrap();
        assert_eq!(
            read_response(&mut s, false).unwrap().status,
            200,
            "connection {i}"
        );
        held.push(s);
    }
    let get = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let r = send(
        &p.proxy,
        &[&b"PROXY TCP4 198.51.100.99 127.0.0.1 5555 80\r\n"[..], get].concat(),
    )
    .unwrap();
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("10"));
    let r = send(
        &p.proxy,
        &[&b"PROXY TCP4 192.0.2.1 127.0.0.1 5555 80\r\n"[..], get].concat(),
    )
    .unwrap();
    assert_eq!(r.status, 200);
    drop(held);
    let _ = std::fs::remove_file(&p.log);
}

#[test]
fn haproxy_in_front_of_two_instances_with_send_proxy_v2() {
    let haproxy = "/usr/sbin/haproxy";
    assert!(
        std::path::Path::new(haproxy).exists(),
        "haproxy is needed (scripts/test.sh installs Debian's haproxy)"
    );
    let (a, b) = (start("ha-a", ""), start("ha-b", ""));
    let front = free_addr();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n  maxconn 100\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend f\n  bind {front}\n  default_backend b\n\
             backend b\n  balance roundrobin\n  server a {} send-proxy-v2\n  server b {} send-proxy-v2\n",
            a.proxy, b.proxy
        ),
    )
    .unwrap();
    let mut child = Command::new(haproxy)
        .args(["-db", "-f", cfg.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let _guard = {
        let t = Instant::now();
        while TcpStream::connect(&front).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "haproxy never listened"
            );
            if let Ok(Some(st)) = child.try_wait() {
                panic!("haproxy exited: {st}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        KillOnDrop(child)
    };
    // Clients from 127.0.0.5, through haproxy (whose own address is 127.0.0.1).
    for _ in 0..6 {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(&"127.0.0.5:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        sock.connect(&front.parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let mut s: TcpStream = sock.into();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        assert_eq!(
            read_response(&mut s, false).unwrap().text(),
            "hello world\n"
        );
    }
    for p in [&a, &b] {
        let text = wait_for_lines(&p.log, 1, Duration::from_secs(5), |l| {
            l.contains("/hello.txt")
        });
        assert!(
            text.lines().all(|l| l.starts_with("127.0.0.5 ")),
            "the real client, not haproxy: {text}"
        );
        let _ = std::fs::remove_file(&p.log);
    }
}

use std::os::unix::process::CommandExt;
