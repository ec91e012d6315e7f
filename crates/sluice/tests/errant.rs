//! Errant-client countermeasures (issue 9) with real clients: curl and wget against
//! each answer, the tarpit cap, the access log and status page, and reload.

use sluice_testkit::*;
use std::process::Command;
use std::time::{Duration, Instant};

const RULES: &str = r#"
# checkers first
exact  /trace      pass        ua="^MirrorManager" date="Sat, 01 Jan 2000 00:00:00 GMT"
prefix /deny       deny
prefix /drop       drop
exact  /ntp        substitute  ntp.txt  date="Fri, 31 Dec 1999 23:59:59 GMT"
prefix /tarpit     tarpit      text="please contact the mirror admin" every=300ms for=30s
prefix /loop       loop
prefix /oversize   oversize    bytes=20000 for=20s
prefix /api        limit       rate=5/10s
prefix /           deny        ua="EvilBot"
"#;

fn start(extra_toml: &str) -> Server {
    let d = docroot();
    std::fs::write(d.path().join("trace"), b"trace file\n").unwrap();
    std::fs::write(d.path().join("api"), b"api answer\n").unwrap();
    std::fs::write(d.path().join(".ntp.txt"), b"use a real NTP server\n").unwrap();
    let rules = RULES.replace("ntp.txt", ".ntp.txt");
    std::fs::write(d.path().join(".errant.rules"), rules).unwrap();
    let toml = format!("[rules]\nfiles = [\".errant.rules\"]\n{extra_toml}");
    Server::start_with_config(d, &toml, &[])
}

fn curl_status(srv: &Server, path: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let url = srv.url(path);
    let mut args = vec!["-sS", "-i"];
    args.extend_from_slice(extra);
    args.push(&url);
    let out = curl(&args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn each_answer_as_curl_and_wget_see_it() {
    assert!(curl_available(), "curl is needed");
    let log = log_path("errant");
    let srv = start(&format!("[log]\naccess = \"{}\"\n", log.display()));

    let (code, out, _) = curl_status(&srv, "/deny/x", &[]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");

    // drop: curl reports an empty reply (exit 52).
    let (code, out, err) = curl_status(&srv, "/drop/x", &[]);
    assert_eq!(code, Some(52), "{out}{err}");
    assert!(err.contains("Empty reply"), "{err}");

    // substitute with a fixed Date: the NTP client's answer.
    let (_, out, _) = curl_status(&srv, "/ntp", &[]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.contains("Date: Fri, 31 Dec 1999 23:59:59 GMT\r\n"),
        "{out}"
    );
    assert!(out.ends_with("use a real NTP server\n"), "{out}");

    // pass with date=: the file as it is, with the fixed Date; other agents the clock.
    let (_, out, _) = curl_status(&srv, "/trace", &["-A", "MirrorManager/2"]);
    assert!(
        out.contains("Date: Sat, 01 Jan 2000 00:00:00 GMT\r\n") && out.ends_with("trace file\n"),
        "{out}"
    );
    let (_, out, _) = curl_status(&srv, "/trace", &[]);
    assert!(!out.contains("2000 00:00:00"), "{out}");

    // tarpit: curl --max-time ends on time, having received drip lines.
    let t = Instant::now();
    let (code, out, _) = curl_status(&srv, "/tarpit/x", &["--max-time", "3"]);
    let took = t.elapsed();
    assert_eq!(code, Some(28), "timed out by curl: {out}");
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_secs(6),
        "{took:?}"
    );
    let lines = out.matches("please contact the mirror admin\n").count();
    assert!(
        (5..=11).contains(&lines),
        "{lines} drip lines in 3 s at one per 300 ms: {out}"
    );

    // loop: wget follows to its redirect limit and stops.
    let out = Command::new("wget")
        .args([
            "-O",
            "/dev/null",
            "--max-redirect=5",
            "--tries=1",
            "--timeout=10",
        ])
        .arg(srv.url("/loop/a.iso"))
        .output()
        .expect("wget (scripts/test.sh installs it)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("5 redirections exceeded"), "{err}");
    assert!(
        err.matches("Location: /loop/a.iso?").count() >= 5,
        "a fresh query each time: {err}"
    );

    // oversize: a huge promise, a slow body, cut at the byte budget.
    let t = Instant::now();
    let out = curl(&[
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{size_download}",
        &srv.url("/oversize"),
    ]);
    let got: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert_eq!(out.status.code(), Some(18), "partial transfer");
    assert!((16_000..=20_000).contains(&got), "{got}");
    assert!(t.elapsed() < Duration::from_secs(10));

    // limit: served under the rate, then 429 with Retry-After.
    for i in 0..5 {
        let (_, out, _) = curl_status(&srv, "/api", &[]);
        assert!(out.starts_with("HTTP/1.1 200"), "request {i}: {out}");
    }
    let (_, out, _) = curl_status(&srv, "/api", &[]);
    assert!(
        out.starts_with("HTTP/1.1 429") && out.contains("Retry-After: 10\r\n"),
        "{out}"
    );

    // A user-agent rule; others pass.
    let (_, out, _) = curl_status(&srv, "/hello.txt", &["-A", "EvilBot/1"]);
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    let (_, out, _) = curl_status(&srv, "/hello.txt", &[]);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");

    // The log says which answer was taken; the status page counts them.
    let text = wait_for_lines(&log, 1, Duration::from_secs(5), |l| {
        l.contains("errant=limit")
    });
    assert!(
        text.lines()
            .any(|l| l.contains("\"GET /drop/x HTTP/1.1\" 444") && l.ends_with("errant=drop")),
        "{text}"
    );
    assert!(
        text.contains("errant=loop") && text.contains("errant=limit"),
        "{text}"
    );
    let j = srv.status_json();
    assert_eq!(j["rule_actions"]["drop"], 1, "{j}");
    assert_eq!(j["rule_actions"]["limit"], 1, "{j}");
    assert_eq!(j["rule_actions"]["deny"], 2, "{j}");
    let _ = std::fs::remove_file(&log);
}

#[test]
fn the_tarpit_cap_holds_and_tarpits_do_not_count_as_connections() {
    let srv = start("tarpit_max = 3\n");
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = srv.connect();
        use std::io::Write;
        s.write_all(b"GET /tarpit/x HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let head = read_head(&mut s);
        assert!(
            head.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        held.push(s);
    }
    // The fourth is over the cap: dropped.
    let (code, _, err) = curl_status(&srv, "/tarpit/y", &["--max-time", "5"]);
    assert_eq!(code, Some(52), "{err}");
    let t = Instant::now();
    loop {
        let j = srv.status_json();
        if j["connections"]["tarpitted"] == 3 {
            // Tarpits are outside the connection count conditioning works with.
            assert!(j["open_connections"].as_u64().unwrap() <= 1, "{j}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{j}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Closing one frees a place.
    drop(held.pop());
    std::thread::sleep(Duration::from_millis(500));
    let (code, out, _) = curl_status(&srv, "/tarpit/z", &["--max-time", "1"]);
    assert_eq!(code, Some(28), "{out}");
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
}

#[test]
fn a_reload_that_changes_the_rules_keeps_serving_connections() {
    let srv = start("");
    let mut c = srv.client();
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 200);
    std::fs::write(srv.root().join(".errant.rules"), "exact /hello.txt deny\n").unwrap();
    srv.reload();
    // Workers pick the new rules up at their next loop turn (at most a tick).
    std::thread::sleep(Duration::from_millis(300));
    // The same keep-alive connection, now under the new rules.
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.response(false).unwrap().status, 403);
}

#[test]
fn explain_shows_the_rule_and_the_deciding_condition() {
    let d = tempfile::tempdir().unwrap();
    let rules = d.path().join("e.rules");
    std::fs::write(
        &rules,
        "prefix / deny ua=EvilBot\nprefix / drop method=POST\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["rules", "explain", rules.to_str().unwrap(), "/x"];
        args.extend_from_slice(extra);
        let out = Command::new(bin()).args(&args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let o = run(&["--ua", "curl", "--method", "POST"]);
    assert!(
        o.contains("e.rules:1: prefix / deny ua=EvilBot: no: ua does not match"),
        "{o}"
    );
    assert!(
        o.contains("e.rules:2:") && o.contains("MATCH") && o.contains("drop"),
        "{o}"
    );
}
