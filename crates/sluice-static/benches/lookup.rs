//! The open-file cache on a hit, as `random10k` uses it: a worker caching 10,000
//! small files, asked for them in random order (more than the CPU's second-level
//! cache holds), reading what a response reads (the validators, the length, the
//! type, a count on the bytes).
//!
//!     cargo bench -p sluice-static --bench lookup

use criterion::{criterion_group, criterion_main, Criterion};
use sluice_config::SymlinkPolicy;
use sluice_static::cache::{Entry, FileCache};
use sluice_static::Root;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn random_hits(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("sluice-bench-cache-{}", std::process::id()));
    let mut paths = Vec::new();
    for i in 0..10_000 {
        let sub = dir.join(format!("r/{:02}", i % 100));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("{i:05}.bin")), vec![i as u8; 1024]).unwrap();
        paths.push(format!("r/{:02}/{i:05}.bin", i % 100));
    }
    // A fixed shuffle (an LCG), so every run asks in the same order.
    let mut x = 12345u64;
    for i in (1..paths.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        paths.swap(i, (x >> 33) as usize % (i + 1));
    }
    let root = Root::new(&dir, SymlinkPolicy::InsideRoot).unwrap();
    let mut cache = FileCache::new(Duration::from_secs(3600), 20_000, 16 * 1024);
    let now = Instant::now();
    for p in &paths {
        cache.lookup(&root, p, now);
    }
    let mut i = 0;
    c.bench_function("cache/random-hit-10k", |b| {
        b.iter(|| {
            i = (i + 1) % paths.len();
            match cache.lookup(&root, &paths[i], now) {
                Entry::File(f) => {
                    let d = f.data.clone();
                    black_box((f.len, f.mime, f.etag().len(), f.last_modified().len(), d))
                }
                _ => unreachable!(),
            };
        })
    });
    let _ = std::fs::remove_dir_all(dir);
}

criterion_group!(benches, random_hits);
criterion_main!(benches);
