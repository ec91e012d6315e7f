//! Rates over the last 1 s, 10 s and 60 s: the main thread samples the summed
//! counters once a second into a ring of 61 samples; a rate is the difference
//! between the newest sample and the one `window` seconds older. Reading costs a
//! lock held for a copy; the workers never touch it.

use std::collections::VecDeque;
use std::time::Instant;

/// What is sampled each second.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    pub requests: u64,
    pub bytes: u64,
    /// Responses by class: 1xx … 5xx.
    pub classes: [u64; 5],
    pub redirects: u64,
    pub rule_hits: u64,
}

#[derive(Debug)]
pub struct Ring {
    samples: VecDeque<(Instant, Sample)>,
}

/// Per-second rates over one window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    pub window_s: u64,
    pub requests: f64,
    pub bytes: f64,
    pub classes: [f64; 5],
    pub redirects: f64,
    pub rule_hits: f64,
}

pub const WINDOWS: [u64; 3] = [1, 10, 60];

impl Default for Ring {
    fn default() -> Self {
        Ring {
            samples: VecDeque::with_capacity(62),
        }
    }
}

impl Ring {
    pub fn push(&mut self, at: Instant, s: Sample) {
        if self.samples.len() == 61 {
            self.samples.pop_front();
        }
        self.samples.push_back((at, s));
    }

    /// Rates over each of [`WINDOWS`] (shorter history: over what there is).
    pub fn rates(&self) -> Vec<Rates> {
        WINDOWS.iter().map(|w| self.over(*w)).collect()
    }

    fn over(&self, window: u64) -> Rates {
        let n = self.samples.len();
        if n < 2 {
            return Rates {
                window_s: window,
                ..Default::default()
            };
        }
        let (t1, new) = self.samples[n - 1];
        let (t0, old) = self.samples[n - 1 - (window as usize).min(n - 1)];
        let dt = t1.duration_since(t0).as_secs_f64().max(1e-3);
        let r = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
        let mut classes = [0.0; 5];
        for (i, c) in classes.iter_mut().enumerate() {
            *c = r(new.classes[i], old.classes[i]);
        }
        Rates {
            window_s: window,
            requests: r(new.requests, old.requests),
            bytes: r(new.bytes, old.bytes),
            classes,
            redirects: r(new.redirects, old.redirects),
            rule_hits: r(new.rule_hits, old.rule_hits),
        }
    }

    /// The last `n` per-second request and byte rates (for the page's charts).
    pub fn series(&self, n: usize) -> Vec<(f64, f64)> {
        let v: Vec<_> = self.samples.iter().collect();
        v.windows(2)
            .rev()
            .take(n)
            .rev()
            .map(|w| {
                let dt = w[1].0.duration_since(w[0].0).as_secs_f64().max(1e-3);
                (
                    w[1].1.requests.saturating_sub(w[0].1.requests) as f64 / dt,
                    w[1].1.bytes.saturating_sub(w[0].1.bytes) as f64 / dt,
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    #[test]
    fn rates_over_windows() {
        let mut r = Ring::default();
        let t0 = Instant::now();
        for i in 0..100u64 {
            r.push(
                t0 + Duration::from_secs(i),
                Sample {
                    requests: i * 10,
                    bytes: i * i,
                    ..Default::default()
                },
            );
        }
        let rates = r.rates();
        assert_eq!(rates[0].requests, 10.0);
        assert_eq!(rates[1].requests, 10.0);
        assert_eq!(rates[0].bytes, (99.0 * 99.0 - 98.0 * 98.0));
        assert_eq!(rates[2].window_s, 60);
        assert_eq!(r.series(5).len(), 5);
    }
}
