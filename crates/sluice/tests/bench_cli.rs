//! `sluice bench` against `sluice serve`, through the command line.

use sluice_testkit::*;
use std::process::{Command, Output};

/// Run `sluice` with these arguments and wait for it.
fn sluice(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

/// The arguments of `sluice bench run EXPERIMENT` against `srv`: its files under the
/// server's root, its tables and plots in `out`, steps of `duration`, then `extra`.
fn experiment_args(
    srv: &Server,
    out: &std::path::Path,
    name: &str,
    duration: &str,
    extra: &[&str],
) -> Vec<String> {
    let mut args: Vec<String> = ["bench", "run", name, "--target"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(format!("sluice={}", srv.url("/")));
    args.push("--docroot".into());
    args.push(srv.root().to_str().unwrap().to_string());
    args.extend(["--out".into(), out.to_str().unwrap().to_string()]);
    args.extend(["-d".into(), duration.to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// `sluice bench run EXPERIMENT` against `srv` for one second (see
/// [`experiment_args`]), waited for.
fn experiment(srv: &Server, out: &std::path::Path, name: &str, extra: &[&str]) -> Output {
    Command::new(bin())
        .args(experiment_args(srv, out, name, "1s", extra))
        .output()
        .unwrap()
}

#[test]
fn bench_json_against_sluice_serve() {
    let srv = Server::start(&[]);
    let o = sluice(&[
        "bench",
        &srv.url("/hello.txt"),
        "-c",
        "8",
        "-d",
        "1s",
        "-t",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let requests = v["requests"].as_u64().unwrap();
    assert!(requests > 100, "{v}");
    assert_eq!(v["counts"]["status_2xx"].as_u64(), Some(requests));
    assert_eq!(v["availability"].as_f64(), Some(1.0));
    assert_eq!(v["counts"]["err_reset"].as_u64(), Some(0));
    assert!(v["latency_us"]["p99"].as_u64().unwrap() >= v["latency_us"]["p50"].as_u64().unwrap());

    // A URL list, in order, with a 404 among them: counted as 4xx, not success.
    let list = srv.root().join("urls.txt");
    std::fs::write(&list, "/hello.txt\n/missing\n").unwrap();
    let o = sluice(&[
        "bench",
        &srv.url("/"),
        "-c",
        "1",
        "-t",
        "1",
        "-d",
        "1s",
        "--urls",
        list.to_str().unwrap(),
        "--in-order",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (ok, nf) = (
        v["counts"]["status_2xx"].as_u64().unwrap(),
        v["counts"]["status_4xx"].as_u64().unwrap(),
    );
    assert!(ok > 10 && ok.abs_diff(nf) <= 1, "{v}");
    assert!((v["availability"].as_f64().unwrap() - 0.5).abs() < 0.01);
}

#[test]
fn experiments_write_tables_and_plots() {
    let srv = Server::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("f.bin");
    std::fs::write(&file, vec![1u8; 1 << 20]).unwrap();
    let o = sluice(&[
        "bench",
        "run",
        "buffer-sweep",
        "--file",
        file.to_str().unwrap(),
        "--buffer-max",
        "8192",
        "--buffer-step",
        "4096",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && text.contains("best buffer:") && text.contains("buffer_size ="),
        "{o:?}"
    );
    for f in ["buffer-sweep.svg", "buffer-sweep.png", "buffer-sweep.csv"] {
        assert!(out.path().join(f).exists(), "{f} missing: {text}");
    }

    let o = experiment(&srv, out.path(), "random-files", &["-c", "4"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("sluice"))
        .expect(&text);
    // availability column: every random file exists, so 1.0000
    assert!(row.contains("1.0000"), "{text}");
}

/// `request-flood` (issue 8): the infrequent client's p99 alone and beside 200
/// clients from 127.88.0.1 asking for 1 KiB files back to back, and the flood's own
/// rate, all measured against the real server (a short run: the figures are the
/// harness's, not a target).
#[test]
fn request_flood_measures_one_client_beside_a_flooding_range() {
    let srv = Server::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let o = experiment(&srv, out.path(), "request-flood", &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    let head: Vec<&str> = text
        .lines()
        .find(|l| l.trim_start().starts_with("target"))
        .expect(&text)
        .split_whitespace()
        .collect();
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.trim_start().starts_with("sluice"))
        .expect(&text)
        .split_whitespace()
        .collect();
    let col = |name: &str| -> f64 {
        let i = head.iter().position(|h| *h == name).expect(name);
        row[i].parse().expect(name)
    };
    assert!(
        col("p99_us_alone") > 0.0 && col("p99_us_heavy") > 0.0,
        "{text}"
    );
    // 200 clients for a second and more, each asking back to back: thousands.
    assert!(col("heavy_req_per_s") > 1000.0, "{text}");
    assert!(col("heavy_MiB_per_s") > 0.0, "{text}");
}

/// Child processes of `pid` right now (from /proc/*/stat).
fn children_of(pid: u32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.ok()?.path().join("stat")).ok()?;
            // pid (comm) state ppid ...: comm may hold spaces; split after the ')'.
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == pid).then_some(())
        })
        .count()
}

#[test]
fn several_processes_merge_their_results() {
    let srv = Server::start(&[]);
    let child = std::process::Command::new(bin())
        .args([
            "bench",
            &srv.url("/hello.txt"),
            "-c",
            "6",
            "-d",
            "2s",
            "-t",
            "1",
            "--processes",
            "3",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The load really runs in three child processes.
    let t = std::time::Instant::now();
    let mut most = 0;
    while t.elapsed() < std::time::Duration::from_millis(1500) {
        most = most.max(children_of(child.id()));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(most, 3, "child processes seen");
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let requests = v["requests"].as_u64().unwrap();
    assert!(requests > 100, "{v}");
    assert_eq!(
        v["counts"]["status_2xx"].as_u64(),
        Some(requests),
        "histogram and counts agree"
    );
    assert_eq!(v["connections"].as_u64(), Some(6));
    assert!(
        v.get("histogram_v2_hex").is_none(),
        "the merged result has no child histogram"
    );
}

#[test]
fn ramp_steps_until_the_stop_condition() {
    let srv = Server::start(&[]);
    let o = sluice(&[
        "bench",
        &srv.url("/hello.txt"),
        "-d",
        "300ms",
        "-t",
        "1",
        "--ramp",
        "c:1:2:5",
        "--json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let steps: Vec<u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["summary"]["connections"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 3, 5]);
    // Every request to a missing file fails: the ramp stops after its first step.
    let o = sluice(&[
        "bench",
        &srv.url("/missing"),
        "-d",
        "300ms",
        "-t",
        "1",
        "--ramp",
        "c:1:1:5",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("availability fell below 50% at c = 1"),
        "{text}"
    );
}

#[test]
fn every_experiment_runs_against_two_targets() {
    let dir = docroot();
    std::fs::write(dir.path().join(".r.conf"), "Redirect 301 /old /hello.txt\n").unwrap();
    let rules = dir.path().join(".r.conf");
    let plain = Server::start(&[]);
    let with_rules = Server::start(&["--rules", rules.to_str().unwrap()]);
    let out = tempfile::tempdir().unwrap();
    let (a, b) = (
        format!("a={}", plain.url("/")),
        format!("b={}", plain.url("/")),
    );
    let docroot = plain.root().to_str().unwrap().to_string();
    let outp = out.path().to_str().unwrap().to_string();
    let common = [
        "--docroot",
        &docroot,
        "--out",
        &outp,
        "-d",
        "300ms",
        "-c",
        "4",
    ];
    let run = |exp: &str, extra: &[&str], targets: &[&str]| {
        let mut args = vec!["bench", "run", exp];
        for t in targets {
            args.extend_from_slice(&["--target", t]);
        }
        args.extend_from_slice(&common);
        args.extend_from_slice(extra);
        let o = sluice(&args);
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{exp}: {o:?}");
        let csv = std::fs::read_to_string(out.path().join(format!("{exp}.csv")))
            .unwrap_or_else(|_| panic!("{exp}.csv missing: {text}"));
        // A row for each target, with a number in it.
        for name in ["a", "b"] {
            assert!(
                csv.lines()
                    .skip(1)
                    .any(|l| l.starts_with(&format!("{name},"))),
                "{exp}: no row for {name}:\n{csv}"
            );
        }
        text
    };
    for exp in ["small-files", "single-download"] {
        let text = run(exp, &[], &[&a, &b]);
        assert!(text.contains("ratio"), "{exp}: no ratio column: {text}");
    }
    let text = run("specweb", &[], &[&a, &b]);
    assert!(text.contains("req_per_s"), "{text}");
    let ra = format!("a={}", with_rules.url("/"));
    let rb = format!("b={}", with_rules.url("/"));
    let base = plain.url("/");
    let text = run(
        "redirects",
        &[
            "--redirect-path",
            "/old",
            "--baseline",
            &base,
            "--baseline",
            &base,
        ],
        &[&ra, &rb],
    );
    assert!(text.contains("ms_per_redirect"), "{text}");
    // (The concurrency experiment's figures are checked in their own test below.)
    run(
        "concurrency",
        &["--max-concurrency", "200", "--download-size", "16384"],
        &[&a, &b],
    );
    for f in ["small-files.svg", "specweb.svg", "concurrency.svg"] {
        assert!(out.path().join(f).exists(), "{f} missing");
    }
}

/// A download server that holds at most `limit` connections at once; past that it
/// closes new ones at once. Every request gets `size` bytes.
fn limited_server(limit: usize, size: usize) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let active = std::sync::Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            if active.load(Ordering::SeqCst) >= limit {
                continue; // closed unanswered
            }
            active.fetch_add(1, Ordering::SeqCst);
            let active = active.clone();
            std::thread::spawn(move || {
                let body = vec![b'x'; size];
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                'conn: loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n");
                        if s.write_all(head.as_bytes()).is_err() || s.write_all(&body).is_err() {
                            break 'conn;
                        }
                    }
                    match s.read(&mut tmp) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => buf.extend_from_slice(&tmp[..k]),
                    }
                }
                active.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    addr
}

#[test]
fn concurrency_finds_the_real_breaking_point_and_no_false_one() {
    let out = tempfile::tempdir().unwrap();
    let outp = out.path().to_str().unwrap().to_string();
    // Against sluice: 8 KiB at 4 KiB/s takes a second or two, far longer than -d; a
    // step that short would see no download end. No breaking point may be reported
    // (the step is stretched to two download times).
    let srv = Server::start(&[]);
    let o = Command::new(bin())
        .args(experiment_args(
            &srv,
            out.path(),
            "concurrency",
            "300ms",
            &[
                "--download-size",
                "8192",
                "--download-rate",
                "4096",
                "--max-concurrency",
                "100",
            ],
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{o:?}");
    assert!(
        text.contains("sluice: availability stayed at or above 50% up to 100 downloads"),
        "{text}"
    );
    let csv = std::fs::read_to_string(out.path().join("concurrency.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    for col in ["ttfb_p50_ms", "ttfb_p99_ms", "probe_p50_ms", "probe_p99_ms"] {
        assert!(header.contains(col), "{header}");
    }
    for row in csv.lines().skip(1) {
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!(f[5], "1.0000", "downloads failed against sluice: {row}");
        let probe_p99: f64 = f[9].parse().unwrap();
        assert!(probe_p99 > 0.0, "no probe latency: {row}");
    }
    assert!(out.path().join("concurrency-probe.svg").exists());

    // Against a server that holds at most 150 connections: the breaking point is the
    // first step past 150 (steps are 100, 300). Each download is held for two
    // seconds (16 KiB at 8 KiB/s): unpaced, a loaded machine opened the 300 one
    // after another and never held 150 at once.
    let addr = limited_server(150, 16384);
    let target = format!("limited=http://{addr}/");
    let o = sluice(&[
        "bench",
        "run",
        "concurrency",
        "--target",
        &target,
        "--out",
        &outp,
        "-d",
        "200ms",
        "--download-size",
        "16384",
        "--download-rate",
        "8192",
        "--max-concurrency",
        "300",
    ]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{o:?}");
    assert!(
        text.contains("limited: availability fell below 50% at 300 concurrent downloads"),
        "{text}"
    );
}

/// `sluice bench run concurrency` for one step of 100 downloads of 16 KiB at
/// 8 KiB/s (4.5 s: a step lasts two download times), with `extra` (arguments
/// separated by spaces, or "").
fn one_small_concurrency_step(srv: &Server, out: &std::path::Path, extra: &str) -> Vec<String> {
    let mut args = experiment_args(
        srv,
        out,
        "concurrency",
        "300ms",
        &[
            "--download-size",
            "16384",
            "--download-rate",
            "8192",
            "--max-concurrency",
            "100",
        ],
    );
    args.extend(extra.split_whitespace().map(String::from));
    args
}

/// `--probe-fifo`: the probe runs at real-time priority and the downloads do not
/// (seen in /proc while the experiment runs), and the step still reports a probe.
#[test]
fn concurrency_probe_fifo_raises_only_the_probe() {
    let srv = Server::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let child = Command::new(bin())
        .args(one_small_concurrency_step(&srv, out.path(), "--probe-fifo"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Each thread's scheduling policy (field 41 of its stat: 0 other, 1 FIFO).
    let policies = |pid: u32| -> Vec<u32> {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return Vec::new();
        };
        tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
            .filter_map(|st| {
                let rest = &st[st.rfind(')')? + 2..];
                rest.split_whitespace().nth(38)?.parse().ok()
            })
            .collect()
    };
    let (mut fifo, mut other) = (0, 0);
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_secs(10) && (fifo == 0 || other < 2) {
        let p = policies(child.id());
        fifo = fifo.max(p.iter().filter(|&&x| x == 1).count());
        other = other.max(p.iter().filter(|&&x| x == 0).count());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(fifo >= 1, "no thread ran at SCHED_FIFO");
    assert!(
        other >= 2,
        "the downloads ran at real-time priority too ({other} ordinary threads)"
    );
    let csv = std::fs::read_to_string(out.path().join("concurrency.csv")).unwrap();
    let row = csv.lines().nth(1).expect("a step");
    let probe_p99: f64 = row.split(',').nth(9).unwrap().parse().unwrap();
    assert!(probe_p99 > 0.0, "no probe latency: {row}");
}

/// `--probe-new-connections`: the probe opens a connection per request (a new
/// client, the server's accept included in its latency), where by default it keeps
/// one alive. Counted by the server: connections accepted during each run.
#[test]
fn concurrency_probe_new_connections_connects_once_per_request() {
    let srv = Server::start(&[]);
    let out = tempfile::tempdir().unwrap();
    let accepted = || {
        srv.status_json()["connections_accepted_total"]
            .as_u64()
            .unwrap()
    };
    let mut per_run = Vec::new();
    for flag in [
        "",
        "--probe-new-connections",
        "--probe-new-connections --probe-after 2s",
    ] {
        let before = accepted();
        let o = Command::new(bin())
            .args(one_small_concurrency_step(&srv, out.path(), flag))
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        // Less the status request that reads the count.
        per_run.push(accepted() - before - 1);
    }
    // One step of at least two download times (4 s), 100 kept-alive downloads, and
    // the probe at 20 requests a second: ~80 more connections with the flag.
    let (kept, new, later) = (per_run[0], per_run[1], per_run[2]);
    assert!(
        new >= kept + 60,
        "connections accepted: {kept} with one probe connection, {new} with one per request"
    );
    // `--probe-after 2s`: the probe starts 2 s into the step, ~40 requests fewer.
    assert!(
        later + 25 <= new && later >= kept + 20,
        "connections accepted: {new} with the probe from the start, {later} from 2 s in"
    );
}

/// The conditioning experiments: attackers really hold their connections (seen on
/// the server's status page while the experiment runs), the table reports the
/// legitimate client before and under attack, and the sweep writes its plot.
#[test]
fn attack_experiments_hold_connections_and_report() {
    let srv = Server::start(&[]);
    let target = format!("sluice=http://{}/", srv.addr);
    let out = tempfile::tempdir().unwrap();
    let root = srv.root().to_str().unwrap().to_string();
    let outp = out.path().to_str().unwrap().to_string();
    let addr = srv.addr.clone();
    // Watch the status page while the experiment runs: the attack must show up as
    // 300 idle (held keep-alive) connections.
    let watcher = std::thread::spawn(move || {
        let mut most = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_secs(8) {
            if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
                use std::io::Write;
                let _ = s.write_all(b"GET /server-status?format=json HTTP/1.0\r\n\r\n");
                if let Some(r) = read_response(&mut s, false) {
                    if let Ok(j) = serde_json::from_slice::<serde_json::Value>(&r.body) {
                        most = most.max(j["connections"]["idle"].as_u64().unwrap_or(0));
                    }
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        most
    });
    // One experiment against this server (named once per `--target`), 1 s per
    // phase, 2 legitimate connections.
    let run = |experiment: &str, attackers: &str, targets: &[&str]| {
        let mut args = vec!["bench", "run", experiment];
        for t in targets {
            args.extend(["--target", *t]);
        }
        args.extend([
            "--docroot",
            root.as_str(),
            "--out",
            outp.as_str(),
            "-d",
            "1s",
            "-c",
            "2",
            "--max-concurrency",
            attackers,
        ]);
        sluice(&args)
    };
    let o = run("persistent-hold", "300", &[&target]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("sluice"))
        .unwrap_or_else(|| panic!("{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cols[1], cols[2]), ("hold", "300"), "{text}");
    // The ratio is to the mean of the runs before and after the attack.
    let num = |i: usize| -> f64 { cols[i].parse().unwrap() };
    let (before, under, after, ratio) = (num(3), num(4), num(5), num(6));
    assert!(ratio > 0.0, "{text}");
    assert!(
        (ratio - under / ((before + after) / 2.0)).abs() < 0.02,
        "{text}"
    );
    let most = watcher.join().unwrap();
    assert!(
        most >= 290,
        "the attack held {most} idle connections, not 300"
    );

    // The sweep with two targets (the same server under two names): the targets
    // take turns at each step, and each still gets its own three rows.
    let again = format!("again=http://{}/", srv.addr);
    let o = run("incomplete-sweep", "100", &[&target, &again]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    for name in ["sluice", "again"] {
        let rows: Vec<&str> = (text.lines())
            .filter(|l| l.split_whitespace().next() == Some(name))
            .collect();
        assert_eq!(rows.len(), 3, "{name}: steps 0, 100 and 0 again: {text}");
        // Each ratio is to the mean of the two runs without an attack, so theirs
        // straddle 1 (or are both 1).
        let ratio = |row: &str| -> f64 { row.split_whitespace().last().unwrap().parse().unwrap() };
        let (first, last) = (ratio(rows[0]), ratio(rows[2]));
        assert_eq!(rows[1].split_whitespace().nth(1), Some("100"), "{text}");
        assert!(rows[2].contains("0-after"), "{text}");
        assert!(
            (first - 1.0) * (last - 1.0) <= 0.0 && (first + last - 2.0).abs() < 0.02,
            "{text}"
        );
    }
    assert!(out.path().join("incomplete-sweep.svg").exists(), "{text}");
}
