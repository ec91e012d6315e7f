//! The status page (issue 10): exact counters over TCP, Prometheus parsed by
//! prometheus_client (strict OpenMetrics and lenient text), Apache `?auto`, access
//! control, no shadowing of files, and the HTML page's charts drawn in Chromium.

use sluice_testkit::*;
use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

/// 990 hits and 10 misses, over 10 keep-alive connections.
fn traffic(srv: &Server) {
    for conn in 0..10 {
        let mut c = srv.client();
        for i in 0..100 {
            let path = if i == 0 {
                format!("/missing-{conn}")
            } else {
                "/hello.txt".into()
            };
            c.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
            c.response(false).unwrap();
        }
    }
}

fn python(code: &str, input: &str) -> String {
    let mut p = Command::new("python3")
        .args(["-c", code])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn counters_are_exact_in_json_auto_and_prometheus() {
    let srv = Server::start(&[]);
    traffic(&srv);
    let j = srv.status_json();
    assert_eq!(j["requests_total"], 1000, "{j}");
    assert_eq!(j["responses_by_status"]["200"], 990);
    assert_eq!(j["responses_by_status"]["404"], 10);
    assert!(j["bytes_sent_total"].as_u64().unwrap() > 990 * 12);
    assert!(j["connections"].is_object() && j["top_ranges"].is_array());

    // Apache's machine-readable form: the JSON request is now counted too.
    let a = srv.get("GET /server-status?auto HTTP/1.0\r\n\r\n").text();
    assert!(a.contains("Total Accesses: 1001\n"), "{a}");
    for key in [
        "Total kBytes: ",
        "Uptime: ",
        "ReqPerSec: ",
        "BusyWorkers: ",
        "IdleWorkers: ",
        "ConnsTotal: ",
    ] {
        assert!(a.contains(key), "{key} missing: {a}");
    }

    // Prometheus text, parsed leniently by prometheus_client's text parser.
    let text = srv.get("GET /server-status/metrics HTTP/1.0\r\n\r\n");
    assert!(text
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let lenient = python(
        r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
v = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    for s in f.samples:
        v[(s.name, tuple(sorted(s.labels.items())))] = s.value
print(int(v[('sluice_requests_total', ())]), int(v[('sluice_responses_total', (('code', '200'),))]),
      int(v[('sluice_responses_total', (('code', '404'),))]))
"#,
        &text.text(),
    );
    assert_eq!(lenient.trim(), "1002 992 10", "{}", text.text());

    // OpenMetrics, parsed strictly.
    let mut c = srv.client();
    c.send(b"GET /server-status/metrics HTTP/1.1\r\nHost: t\r\nAccept: application/openmetrics-text; version=1.0.0\r\nConnection: close\r\n\r\n");
    let om = c.response(false).unwrap();
    assert!(om
        .header("content-type")
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let strict = python(
        r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
v = {}
types = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    types[f.name] = f.type
    for s in f.samples:
        v[(s.name, tuple(sorted(s.labels.items())))] = s.value
assert types['sluice_time_to_first_byte_seconds'] == 'histogram', types
assert types['sluice_requests'] == 'counter', types
assert types['sluice_loop_turn_seconds'] == 'histogram', types
assert v[('sluice_loop_turn_seconds_count', ())] >= 1
assert v[('sluice_cpu_wait_seconds_total', ())] >= 0
assert v[('sluice_build_info', (('version', '0.1.0'),))] == 1
print(int(v[('sluice_requests_total', ())]), int(v[('sluice_responses_total', (('code', '404'),))]),
      int(v[('sluice_time_to_first_byte_seconds_count', ())]) >= 1000)
"#,
        &om.text(),
    );
    assert_eq!(strict.trim(), "1003 10 True", "{}", om.text());
}

/// A worker busy in one turn (here: listing a directory of 3,000 files, done on the
/// worker: without disk threads, listings are not built off it) shows as that
/// worker's longest turn of the second, and in the turn histogram past 1 ms; the
/// time it waited for a CPU is a per-worker counter.
#[test]
fn a_long_loop_turn_shows_on_the_page() {
    let d = docroot();
    std::fs::create_dir(d.path().join("big")).unwrap();
    for i in 0..3000 {
        std::fs::write(d.path().join(format!("big/file-{i:05}.txt")), b"").unwrap();
    }
    let cfg = d.path().join(".no-disk-threads.toml");
    std::fs::write(&cfg, "[files]\ndisk_threads = 0\n").unwrap();
    let cfg = cfg.to_str().unwrap().to_string();
    let srv = Server::start_in(d, &["--workers", "1", "--config", &cfg]);
    let j = srv.status_json();
    let slow = |j: &serde_json::Value| -> u64 {
        let c = j["loop_turn_seconds"]["counts"].as_array().unwrap();
        c[1..].iter().map(|n| n.as_u64().unwrap()).sum()
    };
    let slow_before = slow(&j);
    let t = Instant::now();
    let r = srv.get("GET /big/ HTTP/1.0\r\n\r\n");
    let took = t.elapsed();
    assert_eq!(r.status, 200);
    assert!(r.text().contains("file-02999.txt"));
    assert!(
        took >= Duration::from_millis(2),
        "the listing took only {took:?}"
    );
    // The gauge is the longest turn of the second before each publish: read the
    // page until the publish after the listing.
    let mut longest = 0.0f64;
    let mut j = j;
    while longest < 1e-3 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
        j = srv.status_json();
        longest = j["workers"][0]["longest_turn_seconds"].as_f64().unwrap();
    }
    assert!(
        longest >= 1e-3,
        "longest turn {longest} s after a {took:?} listing: {j}"
    );
    assert!(slow(&j) > slow_before, "no turn past 100 µs counted: {j}");
    assert_eq!(j["workers"].as_array().unwrap().len(), 1, "{j}");
    assert!(j["workers"][0]["cpu_wait_seconds_total"].as_f64().unwrap() >= 0.0);
    let html = srv.get("GET /server-status HTTP/1.0\r\n\r\n").text();
    assert!(html.contains("<th>longest turn (1 s)</th>"), "{html}");
}

#[test]
fn top_lists_show_the_hot_url_and_the_busy_range() {
    let srv = Server::start(&[]);
    // Connections held open, idle, from 127.0.0.1: a range with open connections.
    let held: Vec<_> = (0..20)
        .map(|_| {
            // A request first: a connection that sends nothing is not even accepted
            // (deferred accept) and would not show.
            let mut c = srv.client();
            c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
            c.response(false).unwrap();
            c
        })
        .collect();
    let mut c = srv.client();
    for i in 0..300 {
        let p = if i % 3 == 0 { "/big.bin" } else { "/hello.txt" };
        c.send(format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        c.response(false).unwrap();
    }
    // Lists are published once a second by each worker.
    let t = Instant::now();
    loop {
        let j = srv.status_json();
        let urls = j["top_urls_by_requests"].as_array().unwrap();
        let bytes = j["top_urls_by_bytes"].as_array().unwrap();
        let ranges = j["top_ranges"].as_array().unwrap();
        let r8 = ranges.iter().find(|r| r["range"] == "127.0.0.0/8");
        if !urls.is_empty() && r8.is_some_and(|r| r["open"].as_u64().unwrap() >= 20) {
            assert_eq!(urls[0]["path"], "/hello.txt", "{j}");
            assert_eq!(
                urls[0]["requests"], 220,
                "200 here and one from each held connection"
            );
            assert_eq!(bytes[0]["path"], "/big.bin", "{j}");
            assert_eq!(bytes[0]["bytes"], 100 * 300_000);
            assert!(ranges.iter().any(|r| r["range"] == "127.0.0.0/24"));
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{j}");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(held);
}

#[test]
fn only_allowed_addresses_see_it_and_files_win() {
    let d = docroot();
    std::fs::create_dir(d.path().join("site-b")).unwrap();
    std::fs::write(d.path().join("site-b/server-status"), b"a real file\n").unwrap();
    let toml = r#"
[status]
allow = ["127.0.0.1/32"]
[[site]]
names = ["b.test"]
root = "site-b"
"#;
    let srv = Server::start_with_config(d, toml, &[]);
    assert_eq!(srv.get("GET /server-status HTTP/1.0\r\n\r\n").status, 200);
    // From 127.0.0.2: not in the list.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(
        &"127.0.0.2:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    sock.connect(&srv.addr.parse::<std::net::SocketAddr>().unwrap().into())
        .unwrap();
    let mut s: std::net::TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /server-status/metrics HTTP/1.0\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 403);
    // A file with the status path wins on its site.
    let r = srv.get("GET /server-status HTTP/1.1\r\nHost: b.test\r\nConnection: close\r\n\r\n");
    assert_eq!(r.text(), "a real file\n");
    wait_for_stderr(&srv, "the file is served, not the status page");
}

#[test]
fn the_html_page_draws_and_updates_its_charts_in_chromium() {
    let srv = Server::start(&[]);
    // Some traffic over a few seconds, so the per-second series has points.
    for _ in 0..3 {
        traffic_small(&srv);
        std::thread::sleep(Duration::from_millis(1000));
    }
    let page = srv.get("GET /server-status HTTP/1.0\r\n\r\n");
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let html = page.text();
    assert!(
        html.contains("data-k=\"requests_total\""),
        "figures are in the markup"
    );
    let dom = chromium_dom(&srv.url("/server-status"), 5000);
    let updates: u32 = dom
        .split("data-updates=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no data-updates in DOM: {dom}"));
    assert!(
        updates >= 2,
        "the page refetched only {updates} times: {dom}"
    );
    let points = dom
        .split("<polyline points=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or("");
    assert!(points.split(' ').count() >= 2, "chart not drawn: {dom}");
    assert!(dom.contains("data-points="), "{dom}");
}

fn traffic_small(srv: &Server) {
    let mut c = srv.client();
    for _ in 0..50 {
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        c.response(false).unwrap();
    }
}

#[test]
fn rules_are_counted_per_action_and_per_rule() {
    let d = docroot();
    let rules = d.path().join(".rules.conf");
    std::fs::write(
        &rules,
        "Redirect 301 /old /hello.txt\nRedirect gone /gone\nRedirectMatch ^/huge/([ab]{1000}){1000} /x\n",
    )
    .unwrap();
    let rules = rules.to_str().unwrap().to_string();
    let srv = Server::start_in(d, &["--rules", &rules]);
    // A regex that loads but is too big to compile: counted once, never matches.
    for _ in 0..2 {
        assert_eq!(srv.get("GET /huge/ab HTTP/1.0\r\n\r\n").status, 404);
    }
    // Counted in memory every serving process shares, as it fails: whichever
    // process answers the page, at once and every time.
    for _ in 0..6 {
        assert_eq!(srv.status_json()["rule_regex_failures_total"], 1);
    }
    let mut c = srv.client();
    for i in 0..7 {
        let p = if i < 5 { "/old" } else { "/gone/x" };
        c.send(format!("GET {p} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        c.response(false).unwrap();
    }
    let t = Instant::now();
    loop {
        let j = srv.status_json();
        assert_eq!(j["rule_actions"]["redirect"], 5, "{j}");
        assert_eq!(j["rule_actions"]["gone"], 2, "{j}");
        let top = j["top_rules"].as_array().unwrap();
        if top.len() == 2 {
            assert!(
                top[0]["rule"].as_str().unwrap().ends_with(".rules.conf:1"),
                "{j}"
            );
            assert_eq!(
                (top[0]["matches"].as_u64(), top[0]["action"].as_str()),
                (Some(5), Some("redirect"))
            );
            assert_eq!(
                (top[1]["matches"].as_u64(), top[1]["action"].as_str()),
                (Some(2), Some("gone"))
            );
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{j}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let m = srv
        .get("GET /server-status/metrics HTTP/1.0\r\n\r\n")
        .text();
    assert!(
        m.contains("sluice_rule_actions_total{action=\"redirect\"} 5\n")
            && m.contains("sluice_rule_regex_failures_total 1\n"),
        "{m}"
    );
}
