//! Replays every input kept under `fuzz/regressions/TARGET/` through the same check
//! the fuzz target runs (`fuzz/checks.rs`), so an input that once failed (or guards a
//! bug fixed by hand: smuggling shapes, dot segments, amplifying ranges, network-path
//! redirects) fails `cargo test` if it ever fails again.

#[path = "../../../fuzz/checks.rs"]
mod checks;

use std::path::Path;

/// A target's check: panics on an input that breaks what the target asserts.
type Check = fn(&[u8]);

/// Every fuzz target, by the name of its directory under `fuzz/regressions/`.
const TARGETS: &[(&str, Check)] = &[
    ("config", checks::config),
    ("handoff", checks::handoff),
    ("kept_answers", checks::kept_answers),
    ("parse_head", checks::parse_head),
    ("path_range", checks::path_range),
    ("proxy_header", checks::proxy_header),
    ("rules_apache", checks::rules_apache),
    ("rules_native", checks::rules_native),
];

#[test]
fn every_kept_fuzz_input_passes_its_target_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    for (name, check) in TARGETS {
        let dir = root.join(name);
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.unwrap().path();
            let data = std::fs::read(&p).unwrap();
            let r = std::panic::catch_unwind(|| check(&data));
            assert!(r.is_ok(), "{} fails its check again", p.display());
            n += 1;
        }
        assert!(n > 0, "{}: no inputs kept", dir.display());
    }
}

#[test]
fn every_fuzz_target_has_a_regressions_directory() {
    let targets = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/fuzz_targets");
    for e in std::fs::read_dir(targets).unwrap() {
        let p = e.unwrap().path();
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        assert!(
            TARGETS.iter().any(|(n, _)| *n == stem),
            "fuzz target {stem} is not replayed here"
        );
    }
}
