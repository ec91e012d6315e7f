//! What parsing a request head costs: a curl-like GET and a browser-like GET with a
//! dozen headers. `cargo bench -p sluice-http --bench parse`.
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use sluice_http::{parse_head, Limits, Parsed};

const CURL: &[u8] = b"GET /pub/debian/dists/stable/Release HTTP/1.1\r\nHost: mirror.example.org\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n";
const BROWSER: &[u8] = b"GET /pub/linux/kernel/v6.x/linux-6.12.tar.xz?sort=date&order=desc HTTP/1.1\r\nHost: mirror.example.org\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36\r\nAccept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8\r\nAccept-Language: en-US,en;q=0.9\r\nAccept-Encoding: gzip, deflate, br, zstd\r\nReferer: https://mirror.example.org/pub/linux/kernel/v6.x/\r\nConnection: keep-alive\r\nUpgrade-Insecure-Requests: 1\r\nSec-Fetch-Dest: document\r\nSec-Fetch-Mode: navigate\r\nSec-Fetch-Site: same-origin\r\nIf-None-Match: \"6745a1b2.0-8c2f1a0\"\r\nIf-Modified-Since: Tue, 26 Nov 2024 10:00:00 GMT\r\n\r\n";

fn parse(c: &mut Criterion) {
    let limits = Limits::default();
    for (name, req) in [("curl", CURL), ("browser", BROWSER)] {
        c.bench_function(&format!("parse_head/{name}"), |b| {
            b.iter(|| match parse_head(black_box(req), &limits) {
                Ok(Parsed::Complete(h)) => h.head_len,
                _ => unreachable!(),
            })
        });
    }
}

criterion_group!(benches, parse);
criterion_main!(benches);
