//! Which settings a reload cannot change: those read once when the server starts
//! (its sockets, threads, processes, privileges, descriptor budget and the kernel
//! options set on the listeners). A reload still applies everything else and
//! names these, so an operator who edits one is told it waits for a restart
//! instead of finding it silently ignored.
//!
//! Owns: the list, next to the settings it names (a key added to `sections` that
//! is read only at start belongs here). Must not: decide anything about serving.
//! Costs: a comparison of two configs per reload.

use crate::sections::Config;

impl Config {
    /// The keys whose new value (`new`) differs from this config's and takes
    /// effect only after a restart, in the order of the sections. Access log paths are the
    /// server's concern (a site's log may be new), not listed here.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<&'static str> {
        let (a, b) = (self, new);
        let (s, t) = (&a.server, &b.server);
        let (c, d) = (&a.condition, &b.condition);
        [
            ("server.listen", s.listen != t.listen),
            ("server.workers", s.workers != t.workers),
            ("server.processes", s.processes != t.processes),
            (
                "server.listen_sockets",
                s.listen_sockets != t.listen_sockets,
            ),
            ("server.priority", s.priority != t.priority),
            ("server.sched_slice", s.sched_slice != t.sched_slice),
            ("server.user", s.user != t.user),
            ("server.allow_root", s.allow_root != t.allow_root),
            (
                "server.proxy_protocol",
                s.proxy_protocol != t.proxy_protocol,
            ),
            (
                "files.disk_threads",
                a.files.disk_threads != b.files.disk_threads,
            ),
            (
                "files.listing_threads",
                a.files.listing_threads != b.files.listing_threads,
            ),
            (
                "condition.max_connections",
                c.max_connections != d.max_connections,
            ),
            (
                "condition.max_incomplete",
                c.max_incomplete != d.max_incomplete,
            ),
            // Its value follows a reload; whether addresses are counted at all
            // does not (the connections open when it is turned on were not).
            (
                "condition.cap_address (turning it on)",
                c.cap_address == 0 && d.cap_address > 0,
            ),
            ("condition.unsent_max", c.unsent_max != d.unsent_max),
            ("condition.unsent_total", c.unsent_total != d.unsent_total),
            ("condition.defer_accept", c.defer_accept != d.defer_accept),
            ("tls.listen", a.tls.listen != b.tls.listen),
            ("tls.ktls", a.tls.ktls != b.tls.ktls),
        ]
        .into_iter()
        .filter_map(|(k, changed)| changed.then_some(k))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::sections::Config;

    fn parse(text: &str) -> Config {
        Config::parse_raw(text, "t.toml").unwrap()
    }

    #[test]
    fn start_only_keys_are_named_and_live_ones_are_not() {
        let old = parse("[condition]\ncap_address = 0\ncap_24 = 0.1\n");
        let same = parse("[condition]\ncap_24 = 0.1\n");
        assert!(old.restart_only_changes(&same).is_empty());
        // Caps, timeouts and file settings follow a reload.
        let live = parse(
            "[condition]\ncap_24 = 0.05\nmax_active = 8\n[http]\nheader_timeout = \"5s\"\n[files]\nlisting = false\n",
        );
        assert!(old.restart_only_changes(&live).is_empty());
        let new = parse(
            "[server]\nworkers = 7\n[files]\ndisk_threads = 2\n[condition]\ncap_address = 16\nmax_connections = 100\n",
        );
        assert_eq!(
            old.restart_only_changes(&new),
            [
                "server.workers",
                "files.disk_threads",
                "condition.max_connections",
                "condition.cap_address (turning it on)"
            ]
        );
        // Once on, its value follows a reload; turning it off does too.
        let on = parse("[condition]\ncap_address = 16\n");
        assert!(on
            .restart_only_changes(&parse("[condition]\ncap_address = 4\n"))
            .is_empty());
        assert!(on.restart_only_changes(&old).is_empty());
    }
}
