//! Lookup cost against rule count: a miss (ordinary traffic) and a hit on the last
//! rule, for each rule kind at 10, 10K, 100K and 1M rules, and a realistic mix
//! (90% exact, 10% regex). The target: 1M rules within 2x of 10 rules.
//!
//! `cargo bench -p sluice-rules --bench lookup`; set SLUICE_BENCH_QUICK=1 to stop at 100K.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use sluice_rules::{Format, LoadOptions, Outcome, Request, RuleSet};

pub fn rules(kind: &str, n: usize) -> (String, Format, String) {
    let mut s = String::with_capacity(n * 48);
    let mut last = String::new();
    let fmt = if kind == "exact" {
        Format::Native
    } else {
        Format::Apache
    };
    if kind == "rewrite" || kind == "mix" {
        s.push_str("RewriteEngine On\n");
    }
    for i in 0..n {
        match kind {
            "exact" => {
                s.push_str(&format!("exact /old/{i}/page.html 301 /new/{i}.html\n"));
                last = format!("/old/{i}/page.html");
            }
            "prefix" => {
                s.push_str(&format!("Redirect 301 /dir{i} /moved/{i}\n"));
                last = format!("/dir{i}/file.iso");
            }
            "regex" => {
                s.push_str(&format!("RedirectMatch 301 ^/r{i}/(.*)\\.html$ /n{i}/$1\n"));
                last = format!("/r{i}/a/b.html");
            }
            "rewrite" => {
                s.push_str(&format!("RewriteRule ^/w{i}/(.*)$ /x{i}/$1 [R=301,L]\n"));
                last = format!("/w{i}/file");
            }
            "mix" => {
                if i % 10 == 9 {
                    s.push_str(&format!("RewriteRule ^/w{i}/(.*)$ /x{i}/$1 [R=301,L]\n"));
                    last = format!("/w{i}/file");
                } else {
                    s.push_str(&format!(
                        "RewriteRule ^/old/{i}\\.html$ /new/{i}.html [R=301,L]\n"
                    ));
                    last = format!("/old/{i}.html");
                }
            }
            _ => unreachable!(),
        }
    }
    (s, fmt, last)
}

fn bench(c: &mut Criterion) {
    let quick = std::env::var("SLUICE_BENCH_QUICK").is_ok();
    let sizes: &[usize] = if quick {
        &[10, 10_000, 100_000]
    } else {
        &[10, 10_000, 100_000, 1_000_000]
    };
    for kind in ["exact", "prefix", "regex", "rewrite", "mix"] {
        let mut g = c.benchmark_group(format!("lookup/{kind}"));
        for &n in sizes {
            let (text, fmt, last) = rules(kind, n);
            let set = RuleSet::from_str(&text, "bench", fmt, &LoadOptions::default()).unwrap();
            drop(text);
            let miss = Request {
                path: "/pub/debian/pool/main/l/linux/linux-image_6.1.iso",
                ..Default::default()
            };
            assert_eq!(set.lookup(&miss), Outcome::Pass);
            let hit = Request {
                path: &last,
                ..Default::default()
            };
            assert!(
                matches!(set.lookup(&hit), Outcome::Redirect { .. }),
                "{kind} {n}: {last}"
            );
            g.bench_with_input(BenchmarkId::new("miss", n), &n, |b, _| {
                b.iter(|| set.lookup(black_box(&miss)))
            });
            g.bench_with_input(BenchmarkId::new("hit-last", n), &n, |b, _| {
                b.iter(|| set.lookup(black_box(&hit)))
            });
        }
        g.finish();
    }
}

/// Errant-client classification rules (issue 9): 40% user-agent regexes, 40%
/// address ranges, 20% rate rules on their own paths, all on `prefix /` or the
/// rate rule's path; an ordinary request (a browser, an unlisted address, a
/// package path) against 10 and 10,000 of them. Target: 10,000 within 2× of 10.
fn classify(c: &mut Criterion) {
    let mut g = c.benchmark_group("lookup/classify");
    for n in [10usize, 10_000] {
        let mut text = String::new();
        for i in 0..n {
            match i % 5 {
                0 | 1 => text.push_str(&format!("prefix / deny ua=\"^badbot{i}/[0-9]+\"\n")),
                2 | 3 => text.push_str(&format!(
                    "prefix / drop addr=10.{}.{}.0/24\n",
                    (i / 256) % 256,
                    i % 256
                )),
                _ => text.push_str(&format!("exact /api/{i} limit rate=100/10s\n")),
            }
        }
        let set =
            RuleSet::from_str(&text, "bench", Format::Native, &LoadOptions::default()).unwrap();
        let ordinary = Request {
            path: "/pub/debian/pool/main/l/linux/linux-image_6.1.iso",
            user_agent: Some(
                "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
            ),
            remote_addr: Some("198.51.100.23".parse().unwrap()),
            method: "GET",
            ..Default::default()
        };
        assert_eq!(set.lookup(&ordinary), Outcome::Pass);
        g.bench_with_input(BenchmarkId::new("ordinary", n), &n, |b, _| {
            b.iter(|| set.lookup(black_box(&ordinary)))
        });
        let bot = Request {
            user_agent: Some("badbot0/1.0"),
            ..ordinary
        };
        assert!(matches!(set.lookup(&bot), Outcome::Answer { .. }));
        g.bench_with_input(BenchmarkId::new("bot", n), &n, |b, _| {
            b.iter(|| set.lookup(black_box(&bot)))
        });
    }
    g.finish();
}

/// An "always" rule (issue 11): every request asks a `RewriteMap txt:` whether its
/// path has moved, as in Apache's `RewriteCond ${map:%{REQUEST_URI}}`; an ordinary
/// request (not in the map) and a moved one, with 10,000 and 1,000,000 entries.
/// Target: the lookup under 1% of a request's server CPU (bench/compare.py's 1 KiB
/// request costs ~4.8 µs, so under ~48 ns).
fn always_map(c: &mut Criterion) {
    let mut g = c.benchmark_group("lookup/always-map");
    let dir = std::env::temp_dir().join(format!("sluice-bench-map-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for n in [10_000usize, 1_000_000] {
        let mut map = String::with_capacity(n * 40);
        for i in 0..n {
            map.push_str(&format!("/old/{i}/page.html /new/{i}.html\n"));
        }
        std::fs::write(dir.join("moved.txt"), map).unwrap();
        let conf = dir.join("always.conf");
        std::fs::write(
            &conf,
            "RewriteEngine On\nRewriteMap moved txt:moved.txt\n\
             RewriteCond ${moved:%{REQUEST_URI}} !^$\n\
             RewriteRule ^ ${moved:%{REQUEST_URI}} [R=301,L]\n",
        )
        .unwrap();
        let set = RuleSet::load_files(&[conf], &LoadOptions::default()).unwrap();
        let ordinary = Request {
            path: "/pub/debian/pool/main/l/linux/linux-image_6.1.iso",
            ..Default::default()
        };
        assert_eq!(set.lookup(&ordinary), Outcome::Pass);
        let moved = Request {
            path: "/old/4242/page.html",
            ..Default::default()
        };
        assert!(
            matches!(set.lookup(&moved), Outcome::Redirect { ref location, .. } if location == "/new/4242.html"),
            "{:?}",
            set.lookup(&moved)
        );
        g.bench_with_input(BenchmarkId::new("ordinary", n), &n, |b, _| {
            b.iter(|| set.lookup(black_box(&ordinary)))
        });
        g.bench_with_input(BenchmarkId::new("moved", n), &n, |b, _| {
            b.iter(|| set.lookup(black_box(&moved)))
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = bench, classify, always_map
}
criterion_main!(benches);
