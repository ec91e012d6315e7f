//! Compile time and memory for large rule sets: `cargo run --release -p sluice-rules
//! --example scale [N] [KIND]` (default 1,000,000, every kind) prints, per kind, the
//! time to parse and index N rules and the resident memory they hold, per rule.
//! Each kind runs in its own process, so memory freed by one cannot hide another's.

use sluice_rules::{LoadOptions, RuleSet};
use std::time::Instant;

#[path = "../benches/lookup.rs"]
#[allow(dead_code)]
mod gen;

fn rss() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<usize>().ok())
        .unwrap_or(0)
        * 1024
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let Some(kind) = std::env::args().nth(2) else {
        // Each kind in a fresh process: memory freed by one run cannot hide another's.
        println!("| kind | rules | compile s | MiB held | bytes per rule |");
        println!("|---|---|---|---|---|");
        for kind in ["exact", "prefix", "regex", "rewrite", "mix"] {
            let exe = std::env::current_exe().expect("own path");
            let ok = std::process::Command::new(exe)
                .arg(n.to_string())
                .arg(kind)
                .status()
                .map(|s| s.success());
            if !ok.unwrap_or(false) {
                eprintln!("{kind}: failed");
            }
        }
        return;
    };
    // Measured before the text exists: the text is freed (returned to the system)
    // before the second reading, and must not be subtracted.
    let before = rss();
    let (text, fmt, _) = gen::rules(&kind, n);
    let t = Instant::now();
    let set = RuleSet::from_str(&text, "scale", fmt, &LoadOptions::default())
        .expect("generated rules load");
    let secs = t.elapsed().as_secs_f64();
    drop(text);
    let held = rss().saturating_sub(before);
    println!(
        "| {kind} | {} | {secs:.2} | {:.0} | {:.0} |",
        set.len(),
        held as f64 / (1 << 20) as f64,
        held as f64 / set.len() as f64
    );
}
