//! Compile time and memory for large rule sets: `cargo run --release -p sluice-rules
//! --example scale [N]` (default 1,000,000) prints, per kind, the time to parse and
//! index N rules and the resident memory they hold, per rule.

use sluice_rules::{Format, LoadOptions, RuleSet};
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
    println!("| kind | rules | compile s | MiB held | bytes per rule |");
    println!("|---|---|---|---|---|");
    for kind in ["exact", "prefix", "regex", "rewrite", "mix"] {
        let (text, fmt, _) = gen::rules(kind, n);
        let _ = Format::Native;
        let before = rss();
        let t = Instant::now();
        let set = RuleSet::from_str(&text, "scale", fmt, &LoadOptions::default()).unwrap();
        let secs = t.elapsed().as_secs_f64();
        drop(text);
        let held = rss().saturating_sub(before);
        println!(
            "| {kind} | {} | {secs:.2} | {:.0} | {:.0} |",
            set.len(),
            held as f64 / (1 << 20) as f64,
            held as f64 / set.len() as f64
        );
        drop(set);
    }
}
