//! The Apache file's lexical layer: logical lines (with `\\` continuations joined),
//! tokens (whitespace-separated, `"..."` quoted), and `[flag,flag]` lists.
//!
//! Owns no directive meaning; the directive files above it decide what tokens mean.
//! [`Line`] (one logical line's place, directive and arguments) is defined here so
//! every directive file can name it without depending on the dispatcher.
//! Cost: one pass over the text, one `String` per token.

use crate::loader::LoadError;
use std::path::Path;

/// One logical line: where it is (for errors and warnings), its directive as
/// written, and its arguments.
pub(super) struct Line<'a> {
    pub file: &'a Path,
    pub lineno: usize,
    pub directive: &'a str,
    pub args: &'a [String],
}

impl Line<'_> {
    pub fn err(&self, msg: impl Into<String>) -> LoadError {
        LoadError::at(self.file, self.lineno, msg.into())
    }
}

/// Lines with `\` continuations joined, numbered by their first physical line.
pub(super) fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    for (i, l) in text.lines().enumerate() {
        if cur.is_empty() {
            start = i + 1;
        }
        if let Some(s) = l.strip_suffix('\\') {
            cur.push_str(s);
            cur.push(' ');
        } else {
            cur.push_str(l);
            out.push((start, std::mem::take(&mut cur)));
        }
    }
    if !cur.is_empty() {
        out.push((start, cur));
    }
    out
}

/// Split on whitespace; `"..."` is one token with `\"` and `\\` escapes.
pub fn tokenize(s: &str) -> Result<Vec<String>, String> {
    let mut toks = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut t = String::new();
        if c == '"' {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' if matches!(chars.peek(), Some('"') | Some('\\')) => {
                        t.push(chars.next().unwrap_or('\\'))
                    }
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => t.push(c),
                }
            }
            if !closed {
                return Err("unclosed quote".into());
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                t.push(c);
                chars.next();
            }
        }
        toks.push(t);
    }
    Ok(toks)
}

pub(super) fn flag_list(f: &str) -> Result<Vec<String>, String> {
    let inner = f
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .ok_or_else(|| format!("flags must look like [R=301,L], got {f:?}"))?;
    Ok(inner
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens() {
        assert_eq!(
            super::tokenize(r#"Redirect 301 "/a b" /c"#).unwrap(),
            ["Redirect", "301", "/a b", "/c"]
        );
        assert!(super::tokenize("\"open").is_err());
    }
}
