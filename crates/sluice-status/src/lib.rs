//! The status page and metrics: what the server is doing, for a browser, for
//! Prometheus, and for the Munin/Zabbix/collectd plugins written for Apache's
//! mod_status (docs/STATUS.md).
//!
//! Owns the counters' layout ([`counters`]), per-second rates ([`rates`]), top
//! talkers ([`top`]) and the four renderings ([`render`]). Must not touch sockets or
//! decide who may see the page: the server calls in with a [`View`] and sends what
//! comes back. Cost on the request path: a few relaxed `fetch_add`s on the worker's
//! own cache lines and two hash lookups (the URL sketches and the /24 tally);
//! everything else happens once a second or when the page is read.

pub mod counters;
pub mod rates;
pub mod render;
pub mod slot;
pub mod top;

pub use counters::{Counters, Totals};

use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Shared by the workers and the main thread: the rates ring (written once a second
/// by the main thread) and where each worker of the whole server, in any serving
/// process, publishes its top list once a second ([`slot::TopSlot`], one per
/// worker, in memory the processes share).
pub struct Board {
    pub started: Instant,
    pub started_unix: f64,
    ring: Mutex<rates::Ring>,
    tops: &'static [slot::TopSlot],
}

impl Board {
    /// `tops`: one slot per worker of the whole server, by global worker id.
    pub fn new(tops: &'static [slot::TopSlot]) -> Board {
        Board {
            started: Instant::now(),
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            ring: Mutex::new(rates::Ring::default()),
            tops,
        }
    }

    /// Main thread, once a second.
    pub fn sample(&self, t: &Totals) {
        let rule_hits = t.rule_actions.iter().sum();
        let mut classes = [0u64; 5];
        for (code, n) in &t.responses {
            let c = usize::from(code / 100).saturating_sub(1);
            if c < 5 {
                classes[c] += n;
            }
        }
        let s = rates::Sample {
            requests: t.requests,
            bytes: t.bytes,
            classes,
            redirects: t.redirects(),
            rule_hits,
        };
        self.ring
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Instant::now(), s);
    }

    /// Worker `id`, once a second.
    pub fn publish(&self, id: usize, list: &top::TopList) {
        if let Some(s) = self.tops.get(id) {
            s.write(list);
        }
    }

    /// Everything the renderings need, read now.
    pub fn view(&self, totals: Totals, process: Process, config_generation: u64) -> View {
        let (rates, series) = {
            let r = self.ring.lock().unwrap_or_else(|p| p.into_inner());
            (r.rates(), r.series(60))
        };
        let lists: Vec<top::TopList> = self.tops.iter().map(slot::TopSlot::read).collect();
        View {
            uptime_s: self.started.elapsed().as_secs_f64(),
            started_unix: self.started_unix,
            totals,
            rates,
            series,
            top: top::merge(&lists),
            process,
            config_generation,
        }
    }
}

/// Process-wide figures the server reads from the kernel.
#[derive(Clone, Debug, Default)]
pub struct Process {
    /// Serving processes summed here (`server.processes`).
    pub processes: u64,
    pub open_fds: u64,
    pub max_fds: u64,
    pub resident_bytes: u64,
    pub max_connections: u64,
    pub open_connections: u64,
    /// Rule regexes that parsed at load but failed to compile on first use (over
    /// the size limit); each never matches. Filled in by the server.
    pub rule_regex_failures: u64,
    /// The disk threads' queue, a lane per device. Filled in by the server.
    pub disks: Vec<DiskLane>,
}

/// One device's lane of the disk threads' queue, summed over the processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskLane {
    /// `major:minor`, as `/proc/self/mountinfo` and `lsblk` name it.
    pub device: String,
    /// Cold ranges and lookups waiting for a disk thread.
    pub waiting: u64,
    /// Reads of the device in progress (jobs, and reads ahead).
    pub reading: u64,
}

impl Process {
    /// The sum over the serving processes `pids` (`None`: this process), read from
    /// `/proc`; the limits and connection counts are the server's (the server fills
    /// in what it knows, already summed).
    pub fn read_all(
        pids: &[Option<u32>],
        max_fds: u64,
        max_connections: u64,
        open_connections: u64,
    ) -> Process {
        let dir = |pid: &Option<u32>| match pid {
            Some(p) => format!("/proc/{p}"),
            None => "/proc/self".to_string(),
        };
        let open_fds = pids.iter().map(|p| open_fds(&dir(p))).sum();
        let page = 4096u64;
        let resident_bytes = pids
            .iter()
            .map(|p| {
                std::fs::read_to_string(format!("{}/statm", dir(p)))
                    .ok()
                    .and_then(|s| {
                        s.split_whitespace()
                            .nth(1)
                            .and_then(|v| v.parse::<u64>().ok())
                    })
                    .map_or(0, |n| n * page)
            })
            .sum();
        Process {
            processes: pids.len() as u64,
            open_fds,
            max_fds,
            resident_bytes,
            max_connections,
            open_connections,
            rule_regex_failures: 0,
            disks: Vec::new(),
        }
    }
}

/// Open descriptors of the process whose `/proc` directory is `dir`. Linux (6.2 on)
/// gives the count as the size of `fd/`: one `stat`, where reading the directory
/// took ~15 ms at 15,000 descriptors, a stall of every connection of the worker
/// answering the status page (and of the page's every scrape). The directory is
/// read only where the size is 0 (older kernels).
fn open_fds(dir: &str) -> u64 {
    let fd = format!("{dir}/fd");
    match std::fs::metadata(&fd) {
        Ok(m) if m.len() > 0 => m.len(),
        _ => std::fs::read_dir(&fd).map_or(0, |d| d.count() as u64),
    }
}

/// A consistent reading of everything, rendered four ways.
pub struct View {
    pub uptime_s: f64,
    pub started_unix: f64,
    pub totals: Totals,
    pub rates: Vec<rates::Rates>,
    /// Last 60 s: (requests/s, bytes/s) per second.
    pub series: Vec<(f64, f64)>,
    pub top: top::TopList,
    pub process: Process,
    pub config_generation: u64,
}

#[cfg(test)]
mod tests {
    #[test]
    fn open_descriptors_are_counted_exactly() {
        // A child that stops twice: before and after opening a thousand more
        // descriptors. Each count must be the directory's own, and differ by 1,000.
        use std::io::{BufRead, Write};
        use std::process::{Command, Stdio};
        let mut c = Command::new("bash")
            .args([
                "-c",
                "ulimit -n 4096; echo a; read x; for i in $(seq 2000 2999); do eval \"exec $i</dev/null\"; done; echo b; read x",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = c.id();
        let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
        let mut counts = Vec::new();
        for _ in 0..2 {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            let n = super::Process::read_all(&[Some(pid)], 0, 0, 0).open_fds;
            let listed = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .unwrap()
                .count() as u64;
            assert_eq!(n, listed);
            counts.push(n);
            writeln!(c.stdin.as_mut().unwrap()).unwrap();
        }
        c.wait().unwrap();
        assert_eq!(counts[1] - counts[0], 1000, "{counts:?}");
    }
}
