//! What to request: one URL, a URL list (random or in order, like `siege -f -i`),
//! or a file set with Zipf-distributed popularity (SpecWeb99-like). Requests are
//! rendered to bytes once; picking one costs a random number at most.

use crate::options::Options;
use rand::Rng;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    Random,
    Sequential,
    Zipf,
}

#[derive(Clone)]
pub struct Workload {
    reqs: Arc<Vec<Vec<u8>>>,
    pub paths: Arc<Vec<String>>,
    pick: Pick,
    /// Cumulative probabilities for Zipf picking.
    cdf: Arc<Vec<f64>>,
    next: usize,
}

pub fn render(path: &str, o: &Options) -> Vec<u8> {
    let mut r = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: sluice-bench\r\n",
        o.method, path, o.host
    );
    for h in &o.headers {
        r.push_str(h);
        r.push_str("\r\n");
    }
    if !o.keepalive {
        r.push_str("Connection: close\r\n");
    }
    r.push_str("\r\n");
    r.into_bytes()
}

impl Workload {
    pub fn new(paths: Vec<String>, pick: Pick, o: &Options) -> Workload {
        assert!(!paths.is_empty(), "a workload needs at least one path");
        let reqs = paths.iter().map(|p| render(p, o)).collect();
        Workload {
            reqs: Arc::new(reqs),
            paths: Arc::new(paths),
            pick,
            cdf: Arc::new(Vec::new()),
            next: 0,
        }
    }

    pub fn single(path: &str, o: &Options) -> Workload {
        Workload::new(vec![path.to_string()], Pick::Sequential, o)
    }

    /// Paths in popularity order (most popular first), picked with Zipf exponent `s`.
    pub fn zipf(paths: Vec<String>, s: f64, o: &Options) -> Workload {
        let mut w = Workload::new(paths, Pick::Zipf, o);
        w.cdf = Arc::new(zipf_cdf(w.paths.len(), s));
        w
    }

    pub fn len(&self) -> usize {
        self.reqs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn pick(&mut self, rng: &mut impl Rng) -> usize {
        match self.pick {
            _ if self.reqs.len() == 1 => 0,
            Pick::Sequential => {
                let k = self.next % self.reqs.len();
                self.next = self.next.wrapping_add(1);
                k
            }
            Pick::Random => rng.gen_range(0..self.reqs.len()),
            Pick::Zipf => {
                let u: f64 = rng.gen();
                self.cdf
                    .partition_point(|&c| c < u)
                    .min(self.reqs.len() - 1)
            }
        }
    }

    pub fn request(&self, k: usize) -> &[u8] {
        &self.reqs[k]
    }

    pub fn render_path(&self, path: &str, o: &Options) -> Vec<u8> {
        render(path, o)
    }
}

/// P(rank ≤ k) for ranks 1..=n with weight 1/k^s.
pub fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let w: Vec<f64> = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).collect();
    let total: f64 = w.iter().sum();
    let mut acc = 0.0;
    w.iter()
        .map(|x| {
            acc += x / total;
            acc
        })
        .collect()
}

/// Read a URL list: one path (or full URL) per line, `#` comments.
pub fn read_list(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.strip_prefix("http://") {
            Some(rest) => rest
                .find('/')
                .map(|i| rest[i..].to_string())
                .unwrap_or_else(|| "/".into()),
            None => l.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn zipf_is_skewed_and_complete() {
        let cdf = zipf_cdf(1000, 1.0);
        assert!((cdf[999] - 1.0).abs() < 1e-9);
        let o = Options::default();
        let paths: Vec<String> = (0..1000).map(|i| format!("/f{i}")).collect();
        let mut w = Workload::zipf(paths, 1.0, &o);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[w.pick(&mut rng)] += 1;
        }
        // With s = 1 the top item gets 1/H(1000) ≈ 13.4% of requests; rank 10 ≈ 1.3%.
        assert!((12_000..15_000).contains(&counts[0]), "{}", counts[0]);
        assert!((1_000..1_700).contains(&counts[9]), "{}", counts[9]);
        assert!(counts[0] > counts[1] && counts[1] > counts[50]);
    }

    #[test]
    fn lists_and_orders() {
        let l = read_list("# c\n/a\nhttp://h:1/b?x\n\nhttp://h\n");
        assert_eq!(l, ["/a", "/b?x", "/"]);
        let o = Options::default();
        let mut w = Workload::new(l, Pick::Sequential, &o);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let ks: Vec<usize> = (0..4).map(|_| w.pick(&mut rng)).collect();
        assert_eq!(ks, [0, 1, 2, 0]);
        assert!(String::from_utf8_lossy(w.request(1))
            .starts_with("GET /b?x HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
    }
}
