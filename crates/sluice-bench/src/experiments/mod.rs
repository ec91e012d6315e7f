//! The seeds' experiments: one file each, registered in [`ALL`] (the one list of
//! names; `sluice bench run` and its help read it).
//!
//! Every experiment is built from the same pieces (`common`): a list of targets, the
//! engine, a [`crate::report::Table`] (printed with ratios to the first target, and
//! written as CSV) and, for sweeps, a chart (SVG and PNG). Several targets are run
//! point by point, interleaved. Experiments that need files write them under
//! `--docroot` (the directory the servers under test serve), in `sluice-bench/`, so
//! every server gets the same files.
//!
//! To add one: a file here with `pub(super) fn run(&ExpOptions) -> Result<String,
//! String>` ending in `common::finish`, and a line in [`ALL`].

mod attacks;
mod buffer_sweep;
mod cold_files;
mod common;
mod concurrency;
mod heavy_range;
mod incomplete_sweep;
mod random_files;
mod redirects;
mod single_download;
mod small_files;
mod specweb;

pub use common::{split_url, write_file, ExpOptions, Target};

/// One experiment: its name on the command line, the seed it reproduces, its body.
pub struct Experiment {
    pub name: &'static str,
    pub about: &'static str,
    run: fn(&ExpOptions) -> Result<String, String>,
}

/// Every experiment, in the order `sluice bench run --help` lists them.
pub const ALL: &[Experiment] = &[
    Experiment {
        name: "small-files",
        about: "seed 004 figs. 4-5: req/s by file size, keep-alive and not",
        run: small_files::run,
    },
    Experiment {
        name: "random-files",
        about: "seed 002: 10,000 random 1 KiB files",
        run: random_files::run,
    },
    Experiment {
        name: "specweb",
        about: "seed 004 figs. 6-7: a SpecWeb99-like file set by data-set size",
        run: specweb::run,
    },
    Experiment {
        name: "concurrency",
        about: "seed 000: rate-capped downloads stepped up to --max-concurrency",
        run: concurrency::run,
    },
    Experiment {
        name: "single-download",
        about: "seed 000: one large download's MB/s",
        run: single_download::run,
    },
    Experiment {
        name: "redirects",
        about: "seeds 001/002: what declared rules cost, time per redirect",
        run: redirects::run,
    },
    Experiment {
        name: "buffer-sweep",
        about: "seed 003: read throughput by buffer size",
        run: buffer_sweep::run,
    },
    Experiment {
        name: "incomplete",
        about: "seed 004: silent connections (default 16,000)",
        run: |o| attacks::run(o, "incomplete", "silent", 16_000),
    },
    Experiment {
        name: "half-heads",
        about: "seed 004: half request heads (default 8,000)",
        run: |o| attacks::run(o, "half-heads", "half", 8_000),
    },
    Experiment {
        name: "slowloris",
        about: "seed 004: a header line every 5 s (default 4,000)",
        run: |o| attacks::run(o, "slowloris", "slowloris", 4_000),
    },
    Experiment {
        name: "persistent-hold",
        about: "seed 004: keep-alive held after one request (default 10,000)",
        run: |o| attacks::run(o, "persistent-hold", "hold", 10_000),
    },
    Experiment {
        name: "slow-read",
        about: "seed 004: readers of a 16 MiB file at 16 B/s (default 1,000)",
        run: |o| attacks::run(o, "slow-read", "slow-read", 1_000),
    },
    Experiment {
        name: "heavy-range",
        about: "seed 004 Figure 11: an infrequent client beside 200 heavy downloaders",
        run: heavy_range::run,
    },
    Experiment {
        name: "request-flood",
        about:
            "issue 8: an infrequent client beside 200 clients asking for 1 KiB files back to back",
        run: heavy_range::run_flood,
    },
    Experiment {
        name: "incomplete-sweep",
        about: "seed 004 Figure 10: req/s against 100 to 32,000 incomplete connections",
        run: incomplete_sweep::run,
    },
    Experiment {
        name: "cold-files",
        about: "issue 11: small-file p99 while big files are read from the disk",
        run: cold_files::run,
    },
];

/// Run one experiment by name; returns the report text (also written to `out_dir`).
pub fn run(name: &str, o: &ExpOptions) -> Result<String, String> {
    let Some(e) = ALL.iter().find(|e| e.name == name) else {
        let names: Vec<&str> = ALL.iter().map(|e| e.name).collect();
        return Err(format!(
            "unknown experiment {name:?}; one of: {}",
            names.join(", ")
        ));
    };
    std::fs::create_dir_all(&o.out_dir).map_err(|e| format!("{}: {e}", o.out_dir.display()))?;
    if name != "buffer-sweep" && o.targets.is_empty() {
        return Err(format!("{name} needs at least one --target URL"));
    }
    let before = common::softnet_drops();
    let mut text = (e.run)(o)?;
    // Packets lost in the kernel's input backlog (loopback bursts) show up as the
    // servers' latency; say so. `concurrency` names its own steps.
    if let (Some(b), Some(a), false) = (before, common::softnet_drops(), name == "concurrency") {
        if a > b {
            text += &common::softnet_note(&[(format!("the whole {name} run"), a - b)]);
        }
    }
    let report = o.out_dir.join(format!("{name}.txt"));
    std::fs::write(&report, &text).map_err(|e| format!("{}: {e}", report.display()))?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_unknown_names_list_them() {
        let mut names: Vec<&str> = ALL.iter().map(|e| e.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        let err = run("nope", &ExpOptions::default()).unwrap_err();
        assert!(
            err.contains("cold-files") && err.contains("small-files"),
            "{err}"
        );
    }
}
