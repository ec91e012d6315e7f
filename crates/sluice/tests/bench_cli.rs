//! `sluice bench` against `sluice serve`, through the command line.
mod common;
use common::*;
use std::process::{Command, Output};

/// Run `sluice` with these arguments and wait for it.
fn sluice(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
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

    let target = format!("sluice={}", srv.url("/"));
    let o = sluice(&[
        "bench",
        "run",
        "random-files",
        "--target",
        &target,
        "--docroot",
        srv.root().to_str().unwrap(),
        "--out",
        out.path().to_str().unwrap(),
        "-d",
        "1s",
        "-c",
        "4",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("sluice"))
        .expect(&text);
    // availability column: every random file exists, so 1.0000
    assert!(row.contains("1.0000"), "{text}");
}

#[test]
fn several_processes_merge_their_results() {
    let srv = Server::start(&[]);
    let o = sluice(&[
        "bench",
        &srv.url("/hello.txt"),
        "-c",
        "6",
        "-d",
        "1s",
        "-t",
        "1",
        "--processes",
        "3",
        "--json",
    ]);
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
