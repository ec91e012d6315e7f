//! Any Apache-syntax text either loads or gives an error; a loaded set answers the
//! same through the compiled index as through the linear reference.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_rules::{Format, LoadOptions, Request, RuleSet};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let (rules, path) = s.split_once('\u{1}').unwrap_or((s, "/a/b.html"));
    if !path.starts_with('/') {
        return;
    }
    if let Ok(set) = RuleSet::from_str(rules, "fuzz.conf", Format::Apache, &LoadOptions { lenient: true }) {
        let req = Request { path, ..Default::default() };
        assert_eq!(set.lookup(&req), set.lookup_linear(&req));
    }
});
