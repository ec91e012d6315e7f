//! Reading rules files: format detection, errors with file and line, warnings,
//! and the collection of parsed rules in load order.

use crate::model::*;
use crate::request::Maps;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// A rules file that cannot be used, phrased `file:line: message`.
#[derive(Debug, Clone)]
pub struct LoadError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl LoadError {
    pub fn at(file: &Path, line: usize, message: String) -> LoadError {
        LoadError {
            file: file.display().to_string(),
            line,
            message,
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        } else {
            write!(f, "{}: {}", self.file, self.message)
        }
    }
}
impl std::error::Error for LoadError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Native,
    Apache,
}

/// Which syntax a file is in: `.rules` is native; `.conf`/`.htaccess` Apache; else
/// the first directive decides.
pub fn detect(path: &Path, text: &str) -> Format {
    match path.extension().and_then(|e| e.to_str()) {
        Some("rules") => return Format::Native,
        Some("conf") | Some("htaccess") => return Format::Apache,
        _ => {}
    }
    if path.file_name().and_then(|n| n.to_str()) == Some(".htaccess") {
        return Format::Apache;
    }
    for l in text.lines() {
        let t = l.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let first = t.split_whitespace().next().unwrap_or("");
        return if matches!(first, "exact" | "prefix" | "regex") {
            Format::Native
        } else {
            Format::Apache
        };
    }
    Format::Native
}

/// Collects rules and warnings while files are parsed.
pub struct Ctx {
    pub lenient: bool,
    pub rules: Vec<Rule>,
    pub maps: Maps,
    pub warnings: Vec<String>,
    /// Rule sources name files by their index here.
    pub files: Vec<Arc<str>>,
    /// Every file read so far, with its bytes' stamp.
    pub inputs: crate::inputs::Inputs,
}

impl Ctx {
    pub fn new(lenient: bool) -> Ctx {
        Ctx {
            lenient,
            rules: Vec::new(),
            maps: Maps::default(),
            warnings: Vec::new(),
            files: Vec::new(),
            inputs: Default::default(),
        }
    }

    /// The file's number in the file table (added on first use).
    fn file_index(&mut self, file: &Path) -> u16 {
        let s = file.display().to_string();
        if let Some(i) = self.files.iter().rposition(|f| **f == *s) {
            return i as u16;
        }
        self.files.push(s.into());
        (self.files.len() - 1).min(u16::MAX as usize) as u16
    }

    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        file: &Path,
        line: usize,
        class: Class,
        pattern: Pattern,
        host: Option<String>,
        conds: Vec<Cond>,
        action: Action,
        flags: Flags,
    ) {
        let source = Source {
            file: self.file_index(file),
            line: line as u32,
        };
        self.rules.push(Rule {
            source,
            class,
            pattern,
            host: host.map(String::into_boxed_str),
            conds: conds.into_boxed_slice(),
            action,
            flags,
            classify: None,
            extra: None,
        });
    }

    pub fn warn(&mut self, file: &Path, line: usize, msg: &str) {
        self.warnings
            .push(LoadError::at(file, line, msg.to_string()).to_string());
    }

    /// An unsupported directive or flag: an error, or with `lenient` a warning and skip.
    pub fn unsupported(&mut self, file: &Path, line: usize, what: String) -> Result<(), LoadError> {
        if self.lenient {
            self.warn(
                file,
                line,
                &format!("{what} is not supported; skipped (--lenient)"),
            );
            Ok(())
        } else {
            Err(LoadError::at(
                file,
                line,
                format!("{what} is not supported (use --lenient to skip it with a warning)"),
            ))
        }
    }
}
