//! Reading rules files: format detection, errors with file and line, warnings,
//! and the collection of parsed rules in load order.

use crate::model::*;
use crate::Maps;
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
    file_name: Option<(String, Arc<str>)>,
}

impl Ctx {
    pub fn new(lenient: bool) -> Ctx {
        Ctx {
            lenient,
            rules: Vec::new(),
            maps: Maps::default(),
            warnings: Vec::new(),
            file_name: None,
        }
    }

    fn file_arc(&mut self, file: &Path) -> Arc<str> {
        let s = file.display().to_string();
        match &self.file_name {
            Some((k, a)) if *k == s => a.clone(),
            _ => {
                let a: Arc<str> = s.clone().into();
                self.file_name = Some((s, a.clone()));
                a
            }
        }
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
            file: self.file_arc(file),
            line: line as u32,
        };
        self.rules.push(Rule {
            source,
            class,
            pattern,
            host,
            conds,
            action,
            flags,
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
