//! `include = [...]`: which files a pattern names.
//!
//! Owns expanding one pattern, relative to the including file's directory, into
//! the files it names: a plain path is one file that must exist; a `*` in the file
//! name (never in a directory) matches any run of characters, and every match but
//! hidden files (`.name`, editors' and package managers' leftovers such as
//! `.www.toml.swp`) is read, in byte order of the names, so the order of sites is
//! the same on every machine. No match is not an error (a `sites-enabled/`
//! directory may be empty). Written here rather than with a glob crate: a `*` in
//! the last component is all an operator's `sites.d/*.toml` needs, and it is a
//! dozen lines. Must not parse anything; cost: one directory read per pattern.

use std::path::{Path, PathBuf};

/// The files `pattern` names, or why it names none that can be read.
pub(crate) fn expand(base: &Path, pattern: &str) -> Result<Vec<PathBuf>, String> {
    let path = base.join(pattern);
    let (Some(name), Some(dir)) = (path.file_name().and_then(|n| n.to_str()), path.parent()) else {
        return Err("not a file name".into());
    };
    if Path::new(pattern)
        .parent()
        .is_some_and(|d| d.to_string_lossy().contains('*'))
    {
        return Err("a * may be in the file name only".into());
    }
    if !name.contains('*') {
        return if path.is_file() {
            Ok(vec![path])
        } else {
            Err(format!("{} is not a file", path.display()))
        };
    }
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            !n.starts_with('.') && matches(name, &n) && e.path().is_file()
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    Ok(found)
}

/// Does `name` match `pattern`, where each `*` stands for any run of characters?
fn matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if name.len() < first.len() + last.len() || !name.starts_with(first) || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn stars_match_runs_of_characters() {
        assert!(matches("*.toml", "www.toml"));
        assert!(matches("*.toml", ".toml"));
        assert!(!matches("*.toml", "www.toml.bak"));
        assert!(matches("site-*-*.toml", "site-a-b.toml"));
        assert!(!matches("site-*-*.toml", "site-ab.toml"));
        assert!(matches("*", "anything"));
        assert!(!matches("a*a", "a"));
    }
}
