//! What a worker publishes about once a second for the status page: its
//! connections by state, its top lists, its longest loop turn, its wait for a
//! CPU, and its process's disk lanes. Reads the worker's state, never changes a
//! connection.

use super::conn::*;
use super::*;

impl Worker {
    /// The CPU wait published is counted from this thread's own start: a
    /// replacement after a panic adds on.
    pub(super) fn start_cpu_wait(&mut self) {
        self.cpu_wait_ns = cpu_wait_ns().unwrap_or(0);
    }

    /// Once a second: connections by state, and the top lists, for the status page.
    /// O(connections of this worker), one hash lookup each: under a millisecond
    /// at 15,000 (`bench/held_turns.py`).
    pub(super) fn publish_status(&mut self) {
        let secs = self.now.duration_since(self.last_publish).as_secs_f64();
        self.last_publish = self.now;
        // One pass over the connections: states counted while the top lists read
        // each connection's address.
        let mut states = [0u64; sluice_status::counters::STATES.len()];
        let conns = self.conns.iter().map(|(_, c)| {
            let i = match c.phase {
                Phase::Head { .. } => 0,
                // Waiting for its next send turn (`Class::Waiting`).
                Phase::Send { .. } if c.flags.has(Flags::QUEUED) => 4,
                Phase::Send { .. } => 1,
                Phase::Idle { .. } => 2,
                Phase::Linger { .. } => 3,
                Phase::Drip { .. } => 5,
                Phase::Ready { .. } => 6,
                // Waiting for the disk pool's lookup (`Phase::Disk`).
                Phase::Disk { .. } => 7,
            };
            states[i] += 1;
            (
                c.peer,
                matches!(c.phase, Phase::Head { .. }) && c.out.is_none(),
            )
        });
        let sites = &self.snap.sites;
        let name = |site: u16, i: u32| {
            let s = &sites[usize::from(site)];
            let origin = s.rules.as_ref().map_or("?".into(), |r| r.rule_origin(i));
            if sites.len() > 1 {
                format!("{} {origin}", s.conf.label)
            } else {
                origin
            }
        };
        let list = self.talkers.publish(conns, secs, name);
        let st = &self.shared.stats[self.id];
        if let Some(ns) = cpu_wait_ns() {
            let us = (ns / 1000).saturating_sub(self.cpu_wait_ns / 1000);
            Counters::add(&st.cpu_wait_us, us);
            self.cpu_wait_ns = ns;
        }
        if let Some(pool) = &self.shared.disk {
            pool.publish(self.shared.disk_slots);
        }
        // A worker finishing its responses (stopping, or replaced by a reload that
        // forked new processes, `processes.rs`) leaves its id's gauges and top
        // lists to its successor, which writes them too: its connections still
        // count in its process's `open`.
        if self.stopping.is_some() {
            return;
        }
        for (a, n) in st.states.iter().zip(states) {
            a.store(n, Ordering::Relaxed);
        }
        st.turn_longest_us
            .store(std::mem::take(&mut self.turn_longest_us), Ordering::Relaxed);
        self.shared.board.publish(self.id, &list);
    }
}

/// This thread's time runnable but waiting for a CPU, ns: the second field of
/// `/proc/thread-self/schedstat` (`None` without schedstats in the kernel).
fn cpu_wait_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    schedstat_wait(&s)
}

fn schedstat_wait(s: &str) -> Option<u64> {
    s.split_ascii_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cpu_wait_is_schedstat_s_second_field() {
        assert_eq!(super::schedstat_wait("5120334 88112 97\n"), Some(88112));
        assert_eq!(super::schedstat_wait("5120334\n"), None);
        // The running thread's own file, where the kernel has it.
        if std::path::Path::new("/proc/thread-self/schedstat").exists() {
            assert!(super::cpu_wait_ns().is_some());
        }
    }
}
