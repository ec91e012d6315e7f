//! `[files] types_file`: a `mime.types` file (Apache's `TypesConfig`, the format
//! of Debian's `/etc/mime.types`), read when the config is read and on every
//! reload, and merged under `[files] types`: a type written in the config wins over
//! the file's, and the file's over sluice's built-in table.
//!
//! The format: one media type per line followed by its extensions, separated by
//! white space; `#` starts a comment; a type with no extensions is allowed (the
//! file lists many) and adds nothing; a later line for an extension wins (as in
//! Apache). An extension holding a `.` (`tar.gz`) is skipped: sluice types a file
//! by its last extension only. A bad type or extension is an error at `file:line`,
//! so a reload keeps the old config.
//!
//! Costs: read once per (re)load; nothing per request (the merged table is what
//! `sluice_static::mime::Types` reads when a file enters the cache).

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::ConfigError;

/// The most a types file may hold.
const MAX_BYTES: u64 = 4 << 20;

/// Add the types `path` gives to `types`, under those already there. `at` is
/// where the config names the file (`config.toml:7: `), for the errors that are
/// not at a line of the file itself.
pub(crate) fn merge(
    path: &Path,
    types: &mut BTreeMap<String, String>,
    at: &str,
) -> Result<(), ConfigError> {
    use std::io::Read;
    let origin = path.display().to_string();
    let cannot = |e: std::io::Error| ConfigError(format!("{at}{origin}: cannot read: {e}"));
    // Bounded: Debian's file is 60 KB; a path to a device must not hang a reload.
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(cannot)?;
    if text.len() as u64 > MAX_BYTES {
        return Err(ConfigError(format!(
            "{at}{origin}: more than {MAX_BYTES} bytes: not a mime.types file"
        )));
    }
    // A later line for the same extension replaces an earlier one, as in Apache.
    let file: BTreeMap<String, String> = parse(&text)
        .map_err(|(line, msg)| ConfigError(format!("{origin}:{line}: {msg}")))?
        .into_iter()
        .collect();
    for (ext, ty) in file {
        types.entry(ext).or_insert(ty);
    }
    Ok(())
}

/// The pairs of a `mime.types` text, in order; an error is (line, message). Public
/// for the fuzz target (`fuzz/checks.rs` `config`).
pub fn parse(text: &str) -> Result<Vec<(String, String)>, (usize, String)> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("");
        let mut words = line.split_ascii_whitespace();
        let Some(ty) = words.next() else { continue };
        for ext in words.filter(|e| !e.contains('.')) {
            out.push(crate::de::type_entry(ext, ty.to_string()).map_err(|m| (i + 1, m))?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn lines_of_a_type_and_its_extensions() {
        let text = "# comment\n\napplication/x-iso9660-image\tiso img\ntext/plain  txt asc # trailing\n\
                    application/vnd.oasis.opendocument.text\napplication/x-gtar-compressed tgz gpkg.tar TAZ\n";
        let got = parse(text).unwrap();
        let want = [
            ("iso", "application/x-iso9660-image"),
            ("img", "application/x-iso9660-image"),
            ("txt", "text/plain"),
            ("asc", "text/plain"),
            ("tgz", "application/x-gtar-compressed"),
            ("taz", "application/x-gtar-compressed"),
        ];
        assert_eq!(got, want.map(|(e, t)| (e.to_string(), t.to_string())));
    }

    #[test]
    fn a_bad_line_is_named() {
        assert_eq!(parse("text/plain txt\nnotatype x\n").unwrap_err().0, 2);
        assert_eq!(parse("text/plain t/t\n").unwrap_err().0, 1);
    }

    /// A device or a huge file is refused, not read forever.
    #[test]
    fn a_file_that_never_ends_is_refused() {
        let mut types = std::collections::BTreeMap::new();
        let e = super::merge(std::path::Path::new("/dev/zero"), &mut types, "").unwrap_err();
        assert!(e.0.starts_with("/dev/zero: "), "{}", e.0);
    }

    /// The system's own file, where it is installed, reads without an error.
    #[test]
    fn debians_mime_types_reads() {
        if let Ok(text) = std::fs::read_to_string("/etc/mime.types") {
            let got = parse(&text).unwrap();
            assert!(got.iter().any(|(e, t)| e == "deb" && t.contains("debian")));
        }
    }
}
