//! Rules cases as data (`testdata/rules/` and `testdata/rules-bad/`; the format is in
//! `testdata/README.md`). Every request is looked up by the compiled index and by
//! the linear reference matcher, which must agree with each other and with the
//! file; every bad file must be refused with its `file:line:` message.

use sluice_rules::{outcome_text, Effects, Format, LoadOptions, Outcome, Request, RuleSet};
use std::path::{Path, PathBuf};

fn testdata(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(sub)
}

fn format_of(path: &Path) -> Option<Format> {
    match path.extension()?.to_str()? {
        "conf" => Some(Format::Apache),
        "rules" => Some(Format::Native),
        _ => None,
    }
}

/// Files in `dir` with a rules extension, sorted, with their format and text.
fn rules_files(dir: &Path) -> Vec<(PathBuf, String, Format, String)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            let f = format_of(&p)?;
            let name = p.file_name()?.to_str()?.to_string();
            let text = std::fs::read_to_string(&p).ok()?;
            Some((p, name, f, text))
        })
        .collect();
    v.sort_by(|a, b| a.1.cmp(&b.1));
    v
}

/// One `.expect` line: `PATH[?QUERY] [host=H] [addr=IP]  =>  OUTCOME`.
struct Case {
    line: usize,
    path: String,
    query: Option<String>,
    host: Option<String>,
    addr: Option<std::net::IpAddr>,
    want: String,
}

fn cases(text: &str, file: &str) -> Vec<Case> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let (req, want) = l
            .split_once("=>")
            .unwrap_or_else(|| panic!("{file}:{}: no \"=>\"", i + 1));
        let mut words = req.split_whitespace();
        let target = words.next().expect("a path");
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p.to_string(), Some(q.to_string())),
            None => (target.to_string(), None),
        };
        let (mut host, mut addr) = (None, None);
        for w in words {
            match w.split_once('=') {
                Some(("host", h)) => host = Some(h.to_string()),
                Some(("addr", a)) => addr = Some(a.parse().expect("an IP address")),
                _ => panic!("{file}:{}: unknown word {w:?}", i + 1),
            }
        }
        out.push(Case {
            line: i + 1,
            path,
            query,
            host,
            addr,
            want: want.trim().to_string(),
        });
    }
    out
}

#[test]
fn every_case_in_testdata_rules_holds_for_both_matchers() {
    let dir = testdata("rules");
    let mut checked = 0;
    let mut failures = Vec::new();
    for (path, name, format, text) in rules_files(&dir) {
        let set = RuleSet::from_str(&text, &name, format, &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let expect_name = path.with_extension("expect");
        let expect = std::fs::read_to_string(&expect_name)
            .unwrap_or_else(|_| panic!("{name} has no .expect beside it"));
        let ename = expect_name
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for c in cases(&expect, &ename) {
            // Each lookup with a record of its own of what the rules set.
            let ask = |lookup: &dyn Fn(&Request) -> Outcome| {
                let fx = std::cell::RefCell::new(Effects::default());
                let req = Request {
                    path: &c.path,
                    query: c.query.as_deref(),
                    host: c.host.as_deref(),
                    remote_addr: c.addr,
                    effects: Some(&fx),
                    ..Default::default()
                };
                let o = lookup(&req);
                with_effects(outcome_text(&o), &fx.into_inner())
            };
            let fast = ask(&|r| set.lookup(r));
            let linear = ask(&|r| set.lookup_linear(r));
            if fast != c.want || linear != c.want {
                failures.push(format!(
                    "{ename}:{}: want {:?}, index gave {fast:?}, linear gave {linear:?}",
                    c.line, c.want
                ));
            }
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} cases in {}", dir.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `outcome`, then what the matching rules set on the answer, as an `.expect`
/// line says it: ` + Content-Type: TYPE`, ` + Set-Cookie: VALUE` (each).
fn with_effects(mut outcome: String, fx: &Effects) -> String {
    if let Some(t) = &fx.content_type {
        outcome.push_str(&format!(" + Content-Type: {t}"));
    }
    for c in &fx.cookies {
        outcome.push_str(&format!(" + Set-Cookie: {c}"));
    }
    outcome
}

#[test]
fn every_file_in_testdata_rules_bad_is_refused_with_its_message() {
    let dir = testdata("rules-bad");
    let mut checked = 0;
    let mut failures = Vec::new();
    for (path, name, format, text) in rules_files(&dir) {
        let want = std::fs::read_to_string(path.with_extension("err"))
            .unwrap_or_else(|_| panic!("{name} has no .err beside it"));
        let want = want.lines().next().unwrap_or("").to_string();
        match RuleSet::from_str(&text, &name, format, &LoadOptions::default()) {
            Ok(_) => failures.push(format!("{name}: accepted, want {want:?}")),
            Err(e) if !e.to_string().starts_with(&want) => {
                failures.push(format!("{name}: got {:?}, want {want:?}", e.to_string()))
            }
            Err(_) => {}
        }
        // The parse-only check (`sluice reload --config`) refuses it the same way.
        match RuleSet::check_files(std::slice::from_ref(&path), &LoadOptions::default()) {
            Ok(_) => failures.push(format!("{name}: check_files accepted, want {want:?}")),
            Err(e) => {
                let got = e
                    .to_string()
                    .replacen(&format!("{}/", dir.display()), "", 1);
                if !got.starts_with(&want) {
                    failures.push(format!("{name}: check_files got {got:?}, want {want:?}"));
                }
            }
        }
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} cases in {}", dir.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
