//! A config error ([`ConfigError`]: `file:line: key: what`), and where keys are in
//! the file ([`Source`]), so checks made after parsing can still name a line.

use std::fmt;

/// A configuration error, already phrased for the operator (`file: line N: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ConfigError {}

/// Where each key of a config file is: `server.listen`, `site[2].names`,
/// `tls.sni[1]` (arrays of tables counted from 1, as messages count them) → line.
/// Read once from the text at parse time; a config built in code has none, and its
/// messages name the origin and the key only.
#[derive(Clone, Debug, Default)]
pub struct Source {
    pub origin: String,
    keys: Vec<(String, usize)>,
}

/// An array of tables nested in the last of another (`[[site.alias]]` after the
/// second `[[site]]`) as messages name it: `site[2].alias`, counted within it.
fn qualified(name: &str, counts: &[(String, usize)]) -> String {
    if let Some((outer, inner)) = name.split_once('.') {
        if let Some((_, c)) = counts.iter().find(|(n, _)| n == outer) {
            return format!("{outer}[{c}].{inner}");
        }
    }
    name.to_string()
}

impl Source {
    pub fn index(origin: &str, text: &str) -> Source {
        let mut keys = Vec::new();
        let mut prefix = String::new();
        let mut counts: Vec<(String, usize)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let l = raw.trim();
            let line = i + 1;
            if let Some(name) = l.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
                let name = qualified(name.trim(), &counts);
                let k = match counts.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, c)) => {
                        *c += 1;
                        *c
                    }
                    None => {
                        counts.push((name.clone(), 1));
                        1
                    }
                };
                prefix = format!("{name}[{k}]");
                keys.push((prefix.clone(), line));
            } else if let Some(name) = l.strip_prefix('[').and_then(|r| r.split(']').next()) {
                prefix = name.trim().to_string();
                keys.push((prefix.clone(), line));
            } else if let Some((k, _)) = l.split_once('=') {
                let k = k.trim().trim_matches('"');
                if !k.is_empty() && !k.starts_with('#') {
                    let full = if prefix.is_empty() {
                        k.to_string()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    keys.push((full, line));
                }
            }
        }
        Source {
            origin: origin.to_string(),
            keys,
        }
    }

    /// The line of `key`, or of the nearest enclosing table that is in the file
    /// (`server.alias[2].root` written inline as `alias = [...]`: that line).
    pub fn line(&self, key: &str) -> Option<usize> {
        let mut k = key;
        loop {
            if let Some((_, l)) = self.keys.iter().find(|(n, _)| n == k) {
                return Some(*l);
            }
            k = match k.strip_suffix(']').and_then(|s| s.rfind('[')) {
                Some(i) => &k[..i],
                None => &k[..k.rfind('.')?],
            };
        }
    }

    /// `origin:line: ` for `key` (`origin: ` when the file does not have it;
    /// nothing for a config built in code): for a message that names its own
    /// subject, such as a root directory that is not there.
    pub fn at(&self, key: &str) -> String {
        match (self.origin.as_str(), self.line(key)) {
            ("", _) => String::new(),
            (o, Some(l)) => format!("{o}:{l}: "),
            (o, None) => format!("{o}: "),
        }
    }

    /// The key set on `line` (`key = value`), if one is; for errors that know only
    /// a position (the TOML parser's).
    pub fn key_at(&self, line: usize) -> Option<&str> {
        self.keys
            .iter()
            .rev()
            .find(|(k, l)| *l == line && !k.ends_with(']'))
            .map(|(k, _)| k.as_str())
    }

    /// `origin:line: key: msg` (without the line when the file does not have the key).
    pub fn error(&self, key: &str, msg: impl fmt::Display) -> ConfigError {
        ConfigError(format!("{}{key}: {msg}", self.at(key)))
    }
}
