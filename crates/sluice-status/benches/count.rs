//! What the status page costs a request: everything a worker does per request for
//! it (status-code counter, histograms, URL sketches, /24 tally), on a realistic mix
//! of paths and peers. Compare with the ~7 µs of server CPU a 1 KiB keep-alive
//! request costs in all (docs/BENCHMARKS.md).
use criterion::{criterion_group, criterion_main, Criterion};
use sluice_status::top::Talkers;
use sluice_status::Counters;
use std::hint::black_box;
use std::net::IpAddr;

fn per_request(c: &mut Criterion) {
    let paths: Vec<String> = (0..1000)
        .map(|i| {
            format!(
                "/debian/pool/main/p/pkg{}/pkg{}_1.{}_amd64.deb",
                i % 300,
                i,
                i % 7
            )
        })
        .collect();
    let peers: Vec<IpAddr> = (0..256u32)
        .map(|i| IpAddr::from([10, (i % 7) as u8, (i % 31) as u8, i as u8]))
        .collect();
    let counters = Counters::default();
    let mut talkers = Talkers::default();
    let mut i = 0usize;
    c.bench_function("status cost per request", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            // Zipf-ish: a few hot paths, a long tail.
            let p = &paths[if i & 3 == 0 { i % 1000 } else { i % 10 }];
            let peer = peers[i % 256];
            counters.response(black_box(200));
            talkers.answered(peer, p, 1024);
            counters.timings(black_box(300), black_box(1200));
        })
    });
    c.bench_function(
        "status cost per request, one hot path (the 1 KiB benchmark)",
        |b| {
            let mut talkers = Talkers::default();
            let peer = IpAddr::from([127, 0, 0, 1]);
            b.iter(|| {
                counters.response(black_box(200));
                talkers.answered(peer, "/f.bin", 1024);
                counters.timings(black_box(300), black_box(1200));
            })
        },
    );
    c.bench_function("worker counters per request", |b| {
        b.iter(|| {
            counters.response(black_box(200));
            Counters::add(&counters.bytes, black_box(1024));
            counters.timings(black_box(300), black_box(1200));
        })
    });
    c.bench_function("status publish (1 s, 20,000 connections)", |b| {
        let conns: Vec<(IpAddr, bool)> =
            (0..20_000).map(|i| (peers[i % 256], i % 5 == 0)).collect();
        b.iter(|| black_box(talkers.publish(conns.iter().copied(), 1.0, |_, i| i.to_string())))
    });
}

criterion_group!(benches, per_request);
criterion_main!(benches);
