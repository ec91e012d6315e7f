//! The source tree's shape, checked: no file in `crates/*/src` over 600 lines unless its
//! module doc says why, no import cycle between the modules of one crate, and a binary
//! `main.rs` of at most 300 lines (argument parsing and calls into the libraries).
//!
//! Module dependencies are read from the text: `crate::a::b`, `super::x`, `self::x`, the
//! names of a module's own children (`child::Item`), with `use` braces expanded. A
//! path ending at a crate-root item follows the root's `pub use` to the module that
//! defines it; a root that only declares modules and re-exports depends on nothing.
//! Test modules (`#[cfg(test)]` to the end of the file) are not the architecture and
//! are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 600;
const MAX_MAIN_LINES: usize = 300;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src/lib.rs` → "", `src/a/mod.rs` → "a", `src/a/b.rs` → "a::b".
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The file's text without its test module and without comment lines.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        let t = l.trim_start();
        if t.starts_with("#[cfg(test)]") {
            if lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod "))
            {
                break;
            }
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parse the path that starts at `s` (after a `prefix::`), expanding `{a, b::c}` groups.
fn paths_at(s: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let b = s.as_bytes();
    let mut i = 0;
    let mut cur = prefix;
    loop {
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        if i < b.len() && b[i] == b'{' {
            i += 1;
            loop {
                while i < b.len() && (b[i] == b' ' || b[i] == b'\n' || b[i] == b',') {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    i += 1;
                    return i;
                }
                i += paths_at(&s[i..], cur.clone(), out);
            }
        }
        let start = i;
        while i < b.len() && is_ident(b[i] as char) {
            i += 1;
        }
        if start == i {
            out.push(cur);
            return i;
        }
        cur.push(s[start..i].to_string());
        if s[i..].starts_with("::") {
            i += 2;
        } else {
            out.push(cur);
            // skip `as name`
            return i;
        }
    }
}

struct Crate {
    modules: BTreeSet<String>,
    /// crate-root name → the module the root re-exports it from
    reexports: BTreeMap<String, String>,
}

impl Crate {
    /// The deepest existing module a path from the crate root names.
    fn resolve(&self, path: &[String]) -> String {
        for n in (1..=path.len()).rev() {
            let m = path[..n].join("::");
            if self.modules.contains(&m) {
                return m;
            }
        }
        match path.first().and_then(|n| self.reexports.get(n)) {
            Some(m) => m.clone(),
            None => String::new(),
        }
    }
}

fn parent(m: &str) -> Vec<String> {
    let mut p: Vec<String> = m
        .split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    p.pop();
    p
}

fn deps(krate: &Crate, module: &str, code: &str) -> BTreeSet<String> {
    let here: Vec<String> = module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let children: BTreeSet<String> = krate
        .modules
        .iter()
        .filter_map(|m| {
            let p = parent(m);
            (p == here && !m.is_empty()).then(|| m.rsplit("::").next().unwrap().to_string())
        })
        .collect();
    let mut found = BTreeSet::new();
    for line in code.lines() {
        let t = line.trim_start();
        // Declarations, and the crate root's re-exports, are a face, not a use.
        let reexport = t.starts_with("pub use ") || t.starts_with("pub(crate) use ");
        if t.starts_with("mod ")
            || t.starts_with("pub mod ")
            || t.starts_with("pub(crate) mod ")
            || (reexport && module.is_empty())
        {
            continue;
        }
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if !is_ident(b[i] as char)
                || (i > 0 && (is_ident(b[i - 1] as char) || b[i - 1] == b':'))
            {
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && is_ident(b[i] as char) {
                i += 1;
            }
            let word = &line[start..i];
            if !line[i..].starts_with("::") {
                continue;
            }
            let base: Vec<String> = match word {
                "crate" => vec![],
                "super" => parent(module),
                "self" => here.clone(),
                w if children.contains(w) => {
                    let mut p = here.clone();
                    p.push(w.to_string());
                    p
                }
                _ => continue,
            };
            let mut paths = Vec::new();
            let used = paths_at(&line[i + 2..], base, &mut paths);
            i += 2 + used;
            for p in paths {
                let m = krate.resolve(&p);
                if m != module {
                    found.insert(m);
                }
            }
        }
    }
    found
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(ws) = t.g.get(v) {
            for w in ws {
                let w = w.as_str();
                if !t.g.contains_key(w) {
                    continue;
                }
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn crates() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(workspace().join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    v.sort();
    v
}

#[test]
fn no_source_file_over_600_lines_unless_its_doc_says_why() {
    let mut long = Vec::new();
    for c in crates() {
        let mut files = Vec::new();
        rust_files(&c.join("src"), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let n = text.lines().count();
            let doc: String = text
                .lines()
                .take_while(|l| l.starts_with("//!") || l.trim().is_empty())
                .collect();
            if n > MAX_LINES && !doc.contains("600 lines") {
                long.push(format!("{} ({n} lines)", f.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines whose module doc does not say why: {long:#?}"
    );
}

#[test]
fn the_binary_is_glue() {
    let main = workspace().join("crates/sluice/src/main.rs");
    let n = std::fs::read_to_string(&main).unwrap().lines().count();
    assert!(
        n <= MAX_MAIN_LINES,
        "{} has {n} lines (at most {MAX_MAIN_LINES})",
        main.display()
    );
}

#[test]
fn no_module_import_cycle_inside_a_crate() {
    let mut found = Vec::new();
    for c in crates() {
        let src = c.join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let texts: Vec<(String, String)> = files
            .iter()
            .map(|f| {
                (
                    module_of(&src, f),
                    code_of(&std::fs::read_to_string(f).unwrap()),
                )
            })
            .collect();
        let modules: BTreeSet<String> = texts.iter().map(|(m, _)| m.clone()).collect();
        let mut reexports = BTreeMap::new();
        if let Some((_, root)) = texts.iter().find(|(m, _)| m.is_empty()) {
            for line in root.lines() {
                let t = line.trim_start();
                let Some(rest) = t.strip_prefix("pub use ") else {
                    continue;
                };
                let mut paths = Vec::new();
                paths_at(rest, vec![], &mut paths);
                for p in paths {
                    let from = p
                        .iter()
                        .take(p.len().saturating_sub(1))
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("::");
                    if let (Some(name), true) = (p.last(), modules.contains(&from)) {
                        reexports.insert(name.clone(), from);
                    }
                }
            }
        }
        let krate = Crate { modules, reexports };
        let graph: BTreeMap<String, BTreeSet<String>> = texts
            .iter()
            .map(|(m, code)| (m.clone(), deps(&krate, m, code)))
            .collect();
        for comp in cycles(&graph) {
            let name = c.file_name().unwrap().to_string_lossy().into_owned();
            let shown: Vec<String> = comp
                .iter()
                .map(|m| {
                    if m.is_empty() {
                        "(root)".into()
                    } else {
                        m.clone()
                    }
                })
                .collect();
            let edges: Vec<String> = comp
                .iter()
                .flat_map(|m| {
                    graph[m]
                        .iter()
                        .filter(|d| comp.contains(d))
                        .map(move |d| format!("{m:?} -> {d:?}"))
                })
                .collect();
            found.push(format!(
                "{name}: {} [{}]",
                shown.join(", "),
                edges.join("; ")
            ));
        }
    }
    assert!(found.is_empty(), "module import cycles: {found:#?}");
}

#[test]
fn the_dependency_reader_sees_braces_children_and_reexports() {
    let krate = Crate {
        modules: ["", "a", "b", "b::c", "d"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        reexports: [("Thing".to_string(), "d".to_string())]
            .into_iter()
            .collect(),
    };
    let code = "use crate::{a::X, Thing};\nfn f() { c::go(); super::y(); }\n";
    let got = deps(&krate, "b", code);
    let want: BTreeSet<String> = ["a", "b::c", "d", ""]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(got, want);
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), ["b".to_string()].into_iter().collect()),
        ("b".to_string(), ["a".to_string()].into_iter().collect()),
        ("d".to_string(), ["a".to_string()].into_iter().collect()),
    ]
    .into_iter()
    .collect();
    assert_eq!(cycles(&g), vec![vec!["a".to_string(), "b".to_string()]]);
}
