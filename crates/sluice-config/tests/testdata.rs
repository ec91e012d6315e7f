//! Bad configs as data (`testdata/config-bad/NAME.toml` with the message it must
//! get in `NAME.err`; see `testdata/README.md`). Each file is parsed under its own
//! name, so the message must begin `NAME.toml:LINE: key: ...`.

use sluice_config::Config;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/config-bad")
}

#[test]
fn every_bad_config_gets_its_message_with_file_and_line() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for e in std::fs::read_dir(dir()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let want = std::fs::read_to_string(path.with_extension("err"))
            .unwrap_or_else(|_| panic!("{name} has no .err beside it"));
        let want = want.lines().next().unwrap_or("").to_string();
        assert!(!want.is_empty(), "{name}: empty .err");
        let text = std::fs::read_to_string(&path).unwrap();
        match Config::parse(&text, &name) {
            Ok(_) => failures.push(format!("{name}: accepted, want {want:?}")),
            Err(e) if !e.0.starts_with(&want) => {
                failures.push(format!("{name}: got {:?}, want {want:?}", e.0))
            }
            Err(_) => {}
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} cases found in {:?}", dir());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
