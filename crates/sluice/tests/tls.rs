//! HTTPS: the real binary with a throwaway CA made here with the `openssl` command,
//! talked to by curl and `openssl s_client` (TLS 1.2 and 1.3, SNI, ALPN,
//! resumption), ranges and resume, a large download byte for byte, reload with a
//! broken key, and a handshake that never finishes.

use sluice_testkit::*;
use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A test CA and certificates signed by it, in their own directory.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A CA, and one certificate (with its key) per name; each is valid for its
    /// name and for 127.0.0.1.
    fn new(names: &[&str]) -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let run = |args: &[&str]| {
            let o = Command::new("openssl")
                .args(args)
                .current_dir(d)
                .output()
                .expect("openssl");
            assert!(
                o.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=sluice test CA",
        ]);
        run(&ca);
        for n in names {
            let (key, csr, ext, pem) = (
                format!("{n}.key"),
                format!("{n}.csr"),
                format!("{n}.ext"),
                format!("{n}.pem"),
            );
            let subj = format!("/CN={n}");
            let mut req = vec!["req"];
            req.extend(ec);
            req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
            run(&req);
            std::fs::write(
                d.join(&ext),
                format!("subjectAltName=DNS:{n},IP:127.0.0.1\n"),
            )
            .unwrap();
            run(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &ext,
            ]);
        }
        Pki { dir }
    }
    fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }
    fn s(&self, f: &str) -> String {
        self.path(f).to_str().unwrap().to_string()
    }
}

/// A config with `before` (other sections), then `[tls]` on a fresh port with the
/// localhost certificate and `extra` lines: the HTTPS address and the TOML.
fn tls_toml(pki: &Pki, before: &str, extra: &str) -> (String, String) {
    let tls = format!("127.0.0.1:{}", free_port());
    let toml = format!(
        "{before}[tls]\nlisten = \"{tls}\"\ncert = \"{}\"\nkey = \"{}\"\n{extra}",
        pki.s("localhost.pem"),
        pki.s("localhost.key"),
    );
    (tls, toml)
}

/// A server with HTTP on its usual port and HTTPS on `tls`.
fn https_server(dir: tempfile::TempDir, pki: &Pki, extra: &[&str]) -> (Server, String) {
    let tls = format!("127.0.0.1:{}", free_port());
    let (cert, key) = (pki.s("localhost.pem"), pki.s("localhost.key"));
    let mut args = vec!["--tls-listen", &tls, "--tls-cert", &cert, "--tls-key", &key];
    args.extend_from_slice(extra);
    (Server::start_in(dir, &args), tls)
}

/// curl against `https://localhost:PORT/path`, trusting the test CA.
fn curl_tls(pki: &Pki, tls: &str, extra: &[&str], path: &str) -> std::process::Output {
    let port = tls.rsplit(':').next().unwrap();
    let resolve = format!("localhost:{port}:127.0.0.1");
    let url = format!("https://localhost:{port}{path}");
    let ca = pki.s("ca.pem");
    let mut args = vec!["--cacert", &ca, "--resolve", &resolve];
    args.extend_from_slice(extra);
    args.push(&url);
    curl(&args)
}

/// `openssl s_client` with stdin closed at once: the handshake, then it exits.
fn s_client(tls: &str, args: &[&str]) -> String {
    let o = Command::new("timeout")
        .args(["10", "openssl", "s_client", "-connect", tls])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("openssl s_client");
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `openssl s_client` sending `input`, until the server closes: its stdout.
fn s_client_talk(tls: &str, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("timeout")
        .args(["10", "openssl", "s_client", "-connect", tls])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn curl_and_openssl_over_tls_1_2_and_1_3() {
    let pki = Pki::new(&["localhost"]);
    let (srv, tls) = https_server(docroot(), &pki, &[]);
    for (flags, want) in [
        (&["--tlsv1.2", "--tls-max", "1.2"][..], "TLSv1.2"),
        (&["--tlsv1.3"][..], "TLSv1.3"),
    ] {
        let mut a = flags.to_vec();
        a.extend(["-v"]);
        let o = curl_tls(&pki, &tls, &a, "/hello.txt");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert_eq!(o.stdout, b"hello world\n");
        assert!(
            err.contains(&format!("SSL connection using {want}")),
            "{err}"
        );
        assert!(err.contains("ALPN: server accepted http/1.1"), "{err}");
    }
    let ca = pki.s("ca.pem");
    for (v, want) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
        let out = s_client(
            &tls,
            &[
                v,
                "-CAfile",
                &ca,
                "-servername",
                "localhost",
                "-alpn",
                "http/1.1",
            ],
        );
        assert!(out.contains(&format!("New, {want}, Cipher is")), "{out}");
        assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
        assert!(out.contains("ALPN protocol: http/1.1"), "{out}");
    }
    // TLS 1.1 and older are refused: the client offers 1.1 (its security level
    // lowered so that it does), the server answers with an alert.
    let out = s_client(
        &tls,
        &["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0", "-CAfile", &ca],
    );
    assert!(!out.contains("New, TLSv1.1"), "{out}");
    assert!(out.contains("SSL alert number"), "{out}");
    // The HTTP listener beside it is plain HTTP, as before.
    assert_eq!(
        srv.get("GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n").status,
        200
    );
}

#[test]
fn keep_alive_and_pipelined_requests_over_tls() {
    let pki = Pki::new(&["localhost"]);
    let (_srv, tls) = https_server(docroot(), &pki, &[]);
    // curl reuses one connection for both URLs.
    let port = tls.rsplit(':').next().unwrap();
    let second = format!("https://localhost:{port}/sub/");
    let o = curl_tls(&pki, &tls, &["-v", &second], "/hello.txt");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(o.stdout, b"<h1>sub</h1>\nhello world\n");
    assert!(err.contains("Re-using existing connection"), "{err}");
    // Three pipelined requests in one write; the last closes.
    let text = s_client_talk(
        &tls,
        &["-quiet"],
        b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\nGET /sub/ HTTP/1.1\r\nHost: a\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 3, "{text}");
    assert_eq!(text.matches("hello world").count(), 2, "{text}");
    assert!(text.contains("<h1>sub</h1>"), "{text}");
}

#[test]
fn sni_picks_the_certificate_for_the_name() {
    let pki = Pki::new(&["localhost", "other.test", "a.wild.test"]);
    let dir = docroot();
    let tls = format!("127.0.0.1:{}", free_port());
    let cfg = format!(
        "[tls]\nlisten = \"{tls}\"\ncert = \"{}\"\nkey = \"{}\"\n\n[[tls.sni]]\nnames = [\"other.test\"]\ncert = \"{}\"\nkey = \"{}\"\n\n[[tls.sni]]\nnames = [\"*.wild.test\"]\ncert = \"{}\"\nkey = \"{}\"\n",
        pki.s("localhost.pem"),
        pki.s("localhost.key"),
        pki.s("other.test.pem"),
        pki.s("other.test.key"),
        pki.s("a.wild.test.pem"),
        pki.s("a.wild.test.key"),
    );
    let _srv = Server::start_with_config(dir, &cfg, &[]);
    let ca = pki.s("ca.pem");
    let subject = |name: Option<&str>| {
        let mut a = vec!["-CAfile", ca.as_str()];
        match name {
            Some(n) => a.extend(["-servername", n]),
            None => a.push("-noservername"),
        }
        let out = s_client(&tls, &a);
        let line = out
            .lines()
            .find(|l| l.starts_with("subject="))
            .unwrap_or_else(|| panic!("no subject: {out}"))
            .to_string();
        line
    };
    assert!(subject(Some("other.test")).contains("CN = other.test"));
    assert!(subject(Some("localhost")).contains("CN = localhost"));
    assert!(subject(Some("b.wild.test")).contains("CN = a.wild.test"));
    assert!(subject(Some("unknown.example")).contains("CN = localhost"));
    assert!(subject(None).contains("CN = localhost"));
    // And curl, verifying the name against the certificate it got.
    let port = tls.rsplit(':').next().unwrap();
    let o = curl(&[
        "--cacert",
        &ca,
        "--resolve",
        &format!("other.test:{port}:127.0.0.1"),
        &format!("https://other.test:{port}/hello.txt"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, b"hello world\n");
}

/// A full handshake with protocol `v` (`-tls1_2`, `-tls1_3`) and one request, the
/// session saved to `path`; s_client's output. TLS 1.3 tickets arrive after the
/// handshake: it stays until the server closes, so s_client has read them when it
/// saves.
fn save_session(tls: &str, v: &str, ca: &str, path: &str) -> String {
    s_client_talk(
        tls,
        &["-ign_eof", v, "-CAfile", ca, "-sess_out", path],
        b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
}

#[test]
fn sessions_resume_with_tickets() {
    let pki = Pki::new(&["localhost"]);
    let (_srv, tls) = https_server(docroot(), &pki, &[]);
    let ca = pki.s("ca.pem");
    for v in ["-tls1_2", "-tls1_3"] {
        let sess = pki.path(&format!("sess{v}"));
        let s = sess.to_str().unwrap();
        let first = save_session(&tls, v, &ca, s);
        assert!(
            first.contains("New, TLS") && first.contains("hello world"),
            "{first}"
        );
        let again = s_client(&tls, &[v, "-CAfile", &ca, "-sess_in", s]);
        assert!(again.contains("Reused, TLS"), "{v}: {again}");
    }
}

#[test]
fn ranges_and_resume_over_tls() {
    let pki = Pki::new(&["localhost"]);
    let (srv, tls) = https_server(docroot(), &pki, &[]);
    let big = big_bytes();
    let o = curl_tls(&pki, &tls, &["-r", "1000-1999"], "/big.bin");
    assert_eq!(o.stdout, &big[1000..2000]);
    // A download cut at 100,000 bytes, finished by `curl -C -`.
    let part = srv
        .dir
        .path()
        .parent()
        .unwrap()
        .join(format!("part-{}", std::process::id()));
    std::fs::write(&part, &big[..100_000]).unwrap();
    let o = curl_tls(
        &pki,
        &tls,
        &["-C", "-", "-o", part.to_str().unwrap()],
        "/big.bin",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&part).unwrap() == big, "resumed file differs");
    let _ = std::fs::remove_file(part);
}

/// 100 MB over TLS, byte for byte, with `ktls = "auto"` and `"off"`. On a kernel
/// without the `tls` module both are user-space encryption (the server logs which);
/// the file goes out by `read` into records either way.
#[test]
fn a_100_mb_download_arrives_intact() {
    let pki = Pki::new(&["localhost"]);
    let dir = docroot();
    let data: Vec<u8> = (0..100_000_000u64)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(dir.path().join("large.bin"), &data).unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    std::fs::hard_link(dir.path().join("large.bin"), dir2.path().join("large.bin")).unwrap();
    for (d, ktls) in [(dir, "auto"), (dir2, "off")] {
        let (tls, cfg) = tls_toml(&pki, "", &format!("ktls = \"{ktls}\"\n"));
        let srv = Server::start_with_config(d, &cfg, &[]);
        let out = srv
            .dir
            .path()
            .parent()
            .unwrap()
            .join(format!("dl-{ktls}-{}", std::process::id()));
        let o = curl_tls(&pki, &tls, &["-o", out.to_str().unwrap()], "/large.bin");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got = std::fs::read(&out).unwrap();
        let _ = std::fs::remove_file(&out);
        assert_eq!(got.len(), data.len(), "ktls = {ktls}");
        assert!(got == data, "ktls = {ktls}: bytes differ");
        let err = srv.stderr();
        assert!(
            err.contains("kernel TLS"),
            "the probe's verdict is logged: {err}"
        );
    }
}

#[test]
fn reload_with_a_broken_key_keeps_the_old_certificate_serving() {
    let pki = Pki::new(&["localhost", "other.test"]);
    let dir = docroot();
    let (cert, key) = (pki.path("live.pem"), pki.path("live.key"));
    std::fs::copy(pki.path("localhost.pem"), &cert).unwrap();
    std::fs::copy(pki.path("localhost.key"), &key).unwrap();
    let tls = format!("127.0.0.1:{}", free_port());
    let cfg = format!(
        "[tls]\nlisten = \"{tls}\"\ncert = \"{}\"\nkey = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let srv = Server::start_with_config(dir, &cfg, &[]);
    let ca = pki.s("ca.pem");
    let cn = || {
        let out = s_client(&tls, &["-CAfile", &ca, "-noservername"]);
        out.lines()
            .find(|l| l.starts_with("subject="))
            .unwrap_or("")
            .to_string()
    };
    assert!(cn().contains("CN = localhost"));
    // A key that is not PEM: the reload fails, naming the file; the old one serves.
    std::fs::write(&key, "not a key\n").unwrap();
    srv.signal(libc::SIGHUP);
    wait_for_stderr(&srv, "reload failed");
    let err = srv.stderr();
    assert!(err.contains(key.to_str().unwrap()), "{err}");
    assert!(
        cn().contains("CN = localhost"),
        "old certificate keeps serving"
    );
    let o = curl_tls(&pki, &tls, &[], "/hello.txt");
    assert_eq!(o.stdout, b"hello world\n");
    // A key of the wrong certificate: refused too, with the reason.
    std::fs::copy(pki.path("other.test.key"), &key).unwrap();
    srv.signal(libc::SIGHUP);
    let t = Instant::now();
    while !srv.stderr().contains("does not belong") {
        assert!(t.elapsed() < Duration::from_secs(5), "{}", srv.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(cn().contains("CN = localhost"));
    // A good new pair is taken.
    std::fs::copy(pki.path("other.test.pem"), &cert).unwrap();
    srv.signal(libc::SIGHUP);
    let t = Instant::now();
    while !cn().contains("CN = other.test") {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "new certificate not served"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_handshake_that_never_finishes_is_closed_at_the_deadline() {
    let pki = Pki::new(&["localhost"]);
    let dir = docroot();
    let (tls, cfg) = tls_toml(
        &pki,
        "[http]\nheader_timeout = \"1s\"\n[condition]\ndefer_accept = \"0\"\n",
        "",
    );
    let srv = Server::start_with_config(dir, &cfg, &[]);
    // The start of a ClientHello record, and then nothing.
    let mut partial = TcpStream::connect(&tls).unwrap();
    partial.write_all(&[0x16, 0x03, 0x01, 0x02]).unwrap();
    let mut silent = TcpStream::connect(&tls).unwrap();
    let t = Instant::now();
    assert!(
        closed_within(&mut partial, Duration::from_secs(4)),
        "partial handshake not closed"
    );
    assert!(
        closed_within(&mut silent, Duration::from_secs(4)),
        "silent connection not closed"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(800),
        "closed before the deadline"
    );
    // Not TLS at all: a plain HTTP request on the HTTPS port is told so in
    // plain HTTP (as nginx does; curl showed an empty reply) and closed, and the
    // server keeps serving.
    let port = tls.rsplit(':').next().unwrap();
    let o = curl(&[
        "-sS",
        "-w",
        "%{http_code}",
        &format!("http://127.0.0.1:{port}/hello.txt"),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "This port speaks HTTPS: ask for the https:// URL.\n400"
    );
    let mut plain = TcpStream::connect(&tls).unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert!(closed_within(&mut plain, Duration::from_secs(2)));
    let o = curl_tls(&pki, &tls, &[], "/hello.txt");
    assert_eq!(o.stdout, b"hello world\n");
    assert_eq!(
        srv.get("GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n").status,
        200
    );
}

#[test]
fn check_validates_certificates_and_keys() {
    let pki = Pki::new(&["localhost", "other.test"]);
    let dir = tempfile::tempdir().unwrap();
    let check = |cfg: &str| {
        let p = dir.path().join("c.toml");
        std::fs::write(&p, cfg).unwrap();
        Command::new(bin()).arg("check").arg(&p).output().unwrap()
    };
    let root = dir.path().to_str().unwrap();
    let good = format!(
        "[server]\nroot = \"{root}\"\n[tls]\nlisten = \"127.0.0.1:8443\"\ncert = \"{}\"\nkey = \"{}\"\n",
        pki.s("localhost.pem"),
        pki.s("localhost.key")
    );
    let o = check(&good);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("https on 127.0.0.1:8443"), "{out}");
    for (cfg, want) in [
        (good.replace("localhost.key", "missing.key"), "missing.key"),
        (
            good.replace("localhost.key", "other.test.key"),
            "does not belong",
        ),
        (good.replace("localhost.pem", "ca.key"), "no CERTIFICATE"),
        (
            format!("[server]\nroot = \"{root}\"\n[tls]\nlisten = \"127.0.0.1:8443\"\n"),
            "cert and key are needed",
        ),
    ] {
        let o = check(&cfg);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(want), "{want}: {err}");
    }
}

#[test]
fn a_handshake_flood_gives_way_to_real_clients() {
    let pki = Pki::new(&["localhost"]);
    let dir = docroot();
    let (tls, cfg) = tls_toml(
        &pki,
        "[condition]\nmax_connections = 64\ndefer_accept = \"0\"\n",
        "",
    );
    let _srv = Server::start_with_config(dir, &cfg, &[]);
    // 300 connections that start a handshake and stall: far past the limit.
    let mut flood = Vec::new();
    for _ in 0..300 {
        if let Ok(mut s) = TcpStream::connect(&tls) {
            let _ = s.write_all(&[0x16, 0x03, 0x01]);
            flood.push(s);
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    // Real clients still get through: the oldest stalled handshakes make room.
    for _ in 0..5 {
        let o = curl_tls(&pki, &tls, &["--max-time", "5"], "/hello.txt");
        assert_eq!(
            o.stdout,
            b"hello world\n",
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    drop(flood);
}

/// With `server.processes = 2` the ticket key is the master's, so a ticket from one
/// serving process resumes on either: eight fresh connections (spread over both by
/// `SO_REUSEPORT`) all resume. HTTPS itself works the same on both.
#[test]
fn tickets_resume_on_every_serving_process() {
    let pki = Pki::new(&["localhost"]);
    let (srv, tls) = https_server(docroot(), &pki, &["--processes", "2"]);
    assert_eq!(srv.children().len(), 2);
    let ca = pki.s("ca.pem");
    // First, before any other handshake: a process that has issued no ticket of its
    // own must still take the other's (rustls bounds a ticket's length by the
    // longest it has encrypted; the master primes that bound before forking).
    for v in ["-tls1_2", "-tls1_3"] {
        let sess = pki.path(&format!("sess-procs{v}"));
        let s = sess.to_str().unwrap();
        let first = save_session(&tls, v, &ca, s);
        assert!(first.contains("New, TLS"), "{first}");
        for i in 0..8 {
            let again = s_client(&tls, &[v, "-CAfile", &ca, "-sess_in", s]);
            assert!(again.contains("Reused, TLS"), "{v} #{i}: {again}");
        }
    }
    for _ in 0..6 {
        let o = curl_tls(&pki, &tls, &[], "/hello.txt");
        assert_eq!(o.stdout, b"hello world\n");
    }
}

/// Python's TLS client on a connection that first sends `header` (hex): the
/// response to one GET, or what went wrong.
fn tls_after_header(tls: &str, ca: &str, header: &[u8]) -> String {
    let hex: String = header.iter().map(|b| format!("{b:02x}")).collect();
    let script = r#"
import socket, ssl, sys
host, port = sys.argv[1].rsplit(":", 1)
ctx = ssl.create_default_context(cafile=sys.argv[2])
s = socket.create_connection((host, int(port)), timeout=10)
s.sendall(bytes.fromhex(sys.argv[3]))
try:
    t = ctx.wrap_socket(s, server_hostname="localhost")
    t.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    out = b""
    while True:
        b = t.recv(65536)
        if not b:
            break
        out += b
    sys.stdout.write(out.decode("latin1"))
except (ssl.SSLError, OSError) as e:
    sys.stdout.write("failed: %r" % e)
"#;
    let o = Command::new("python3")
        .args(["-c", script, tls, ca, &hex])
        .output()
        .expect("python3");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Behind a TCP balancer that passes TLS through (HAProxy `mode tcp` with
/// `send-proxy-v2`): the PROXY header comes before the handshake, and the access
/// log sees the client it names. Without the header the connection is refused.
#[test]
fn proxy_headers_before_the_handshake_on_an_https_listener() {
    let pki = Pki::new(&["localhost"]);
    let log = log_path("tls-proxy");
    let tls = format!("127.0.0.1:{}", free_port());
    let toml = format!(
        "[server]\nproxy_protocol = [\"{tls}\"]\n[log]\naccess = \"{}\"\n[tls]\nlisten = \"{tls}\"\ncert = \"{}\"\nkey = \"{}\"\n",
        log.display(),
        pki.s("localhost.pem"),
        pki.s("localhost.key"),
    );
    let srv = Server::start_with_config(docroot(), &toml, &[]);
    let ca = pki.s("ca.pem");
    // v1, then v2 (IPv4, 198.51.100.9:40001 → 127.0.0.1:443).
    let r = tls_after_header(&tls, &ca, b"PROXY TCP4 203.0.113.7 127.0.0.1 40000 443\r\n");
    assert!(
        r.starts_with("HTTP/1.1 200") && r.ends_with("hello world\n"),
        "{r}"
    );
    let r = tls_after_header(&tls, &ca, &proxy_v2([198, 51, 100, 9], 40001, 443));
    assert!(
        r.starts_with("HTTP/1.1 200") && r.ends_with("hello world\n"),
        "{r}"
    );
    let text = wait_for_lines(&log, 2, Duration::from_secs(10), |l| {
        l.contains("GET /hello.txt")
    });
    for who in ["203.0.113.7 ", "198.51.100.9 "] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(who) && l.contains("\" 200 ")),
            "{who}: {text}"
        );
    }
    // A client talking TLS at once is not a balancer: closed, nothing served.
    let r = tls_after_header(&tls, &ca, b"");
    assert!(r.starts_with("failed"), "{r}");
    // The plain listener is not a PROXY one.
    assert_eq!(
        srv.get("GET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .status,
        200
    );
}

/// `%{HTTPS}` and `%{REQUEST_SCHEME}` tell the two listeners apart: the usual
/// "send plain HTTP to HTTPS" rule redirects only plain requests, and a rewrite by
/// scheme serves each its own file. The same request bytes over either, again and
/// again on one worker: a decision on the scheme is never kept for the bytes and
/// given to the other scheme.
#[test]
fn rules_see_whether_the_request_came_over_tls() {
    let pki = Pki::new(&["localhost"]);
    let dir = docroot();
    std::fs::create_dir(dir.path().join("secure")).unwrap();
    std::fs::write(dir.path().join("secure/x.txt"), "secret\n").unwrap();
    std::fs::write(dir.path().join("http.txt"), "by http\n").unwrap();
    std::fs::write(dir.path().join("https.txt"), "by https\n").unwrap();
    let rules = dir.path().join(".rules.conf");
    std::fs::write(
        &rules,
        "RewriteEngine On\n\
         RewriteCond %{HTTPS} off\n\
         RewriteRule ^/secure/(.*)$ https://%{SERVER_NAME}/secure/$1 [R=301,L]\n\
         RewriteRule ^/scheme$ /%{REQUEST_SCHEME}.txt [L]\n",
    )
    .unwrap();
    let rules = rules.to_str().unwrap().to_string();
    let (srv, tls) = https_server(dir, &pki, &["--rules", &rules, "--workers", "1"]);
    let ask = |path: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: localhost:9\r\nConnection: close\r\n\r\n")
    };
    for _ in 0..3 {
        let plain = srv.get(&ask("/secure/x.txt"));
        assert_eq!(plain.status, 301);
        assert_eq!(
            plain.header("location"),
            Some("https://localhost/secure/x.txt")
        );
        let over_tls = s_client_talk(&tls, &["-quiet"], ask("/secure/x.txt").as_bytes());
        assert!(
            over_tls.starts_with("HTTP/1.1 200") && over_tls.ends_with("secret\n"),
            "{over_tls}"
        );
        assert_eq!(srv.get(&ask("/scheme")).text(), "by http\n");
        let over_tls = s_client_talk(&tls, &["-quiet"], ask("/scheme").as_bytes());
        assert!(over_tls.ends_with("by https\n"), "{over_tls}");
    }
}
