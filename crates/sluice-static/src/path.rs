//! Turning a request path into a safe relative path under the document root.
//!
//! Order matters: percent-decode first, then remove dot segments, so `%2e%2e` and
//! `%2f` cannot smuggle a `..` or a separator past the check. NUL (raw or encoded)
//! is refused outright. A backslash is an ordinary byte of a Linux file name, served
//! as nginx and Apache serve it (`a%5Cb.txt` is the file `a\b.txt`, as the listing
//! links it); it is never a separator here, and every `Location` sluice writes
//! encodes it (`sluice_http::response::safe_location`), so `/\evil.com` cannot
//! become a network-path reference. The result never starts with `/` and never
//! contains `.` or `..` segments; symlink escapes are the opener's job
//! (`open.rs`), because only the kernel knows what a component is at open time.
//!
//! A normalized path is text, and a file name is bytes. The two meet in
//! [`text_of`] and [`fs_bytes`]: a name that is UTF-8 without a `%` (nearly every
//! name) is its own text; otherwise its `%` and the bytes of each invalid sequence
//! are written `%XX`. So a mirror's Latin-1 `caf\xe9.txt` is served (as `caf%E9.txt`
//! in the cache and the logs of the handler) and cannot be confused with a file
//! literally named `caf%E9.txt` (`caf%25E9.txt`). Only the system calls turn the
//! text back into bytes (`open.rs`, `listing::read`).

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum PathError {
    /// Not origin-form, bad escape, NUL (400).
    Bad,
    /// Tries to climb above the root (400).
    Escape,
    /// A hidden (dot) segment while hidden files are not served (404).
    Hidden,
}

/// A normalized path: `rel` is relative to the root (`""` for the root itself).
#[derive(Debug, PartialEq, Eq)]
pub struct Normalized<'a> {
    pub rel: std::borrow::Cow<'a, str>,
    /// The request path ended in `/` (directory form).
    pub trailing_slash: bool,
}

/// Decode and normalize `raw` (the still-encoded path of the request target).
pub fn normalize(raw: &str, allow_hidden: bool) -> Result<Normalized<'_>, PathError> {
    if !raw.starts_with('/') {
        return Err(PathError::Bad);
    }
    // Fast path, the common case: nothing to decode, no empty or dot segments, so the
    // path is already normal and can be borrowed.
    // One pass: a byte that needs decoding or is refused, or a slash followed by
    // another or by a dot (an empty, dot or hidden segment), or a trailing slash.
    let b = raw.as_bytes();
    let mut clean = b.len() == 1 || b[b.len() - 1] != b'/';
    let mut after_slash = false;
    for &c in b {
        if c == b'%' || c == 0 || (after_slash && (c == b'/' || c == b'.')) {
            clean = false;
            break;
        }
        after_slash = c == b'/';
    }
    if clean {
        return Ok(Normalized {
            rel: std::borrow::Cow::Borrowed(&raw[1..]),
            trailing_slash: raw.len() == 1,
        });
    }
    let decoded = percent_decode(raw.as_bytes()).ok_or(PathError::Bad)?;
    if decoded.contains(&0) {
        return Err(PathError::Bad);
    }
    let mut text = String::with_capacity(decoded.len());
    text_of(&decoded, &mut text);
    let decoded = text;
    // As RFC 3986's remove_dot_segments: a last segment `.` or `..` leaves the
    // path in directory form (`/a.txt/.` is `/a.txt/`, not `/a.txt`).
    let last = decoded.rsplit('/').next().unwrap_or("");
    let trailing_slash = matches!(last, "" | "." | "..");
    let mut segs: Vec<&str> = Vec::new();
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if segs.pop().is_none() {
                    return Err(PathError::Escape);
                }
            }
            s => {
                if !allow_hidden && s.starts_with('.') {
                    return Err(PathError::Hidden);
                }
                segs.push(s);
            }
        }
    }
    Ok(Normalized {
        rel: segs.join("/").into(),
        trailing_slash,
    })
}

/// Append the text form of file-system bytes (module doc): UTF-8 as it is, but a
/// `%` as `%25` and each byte of an invalid sequence as `%XX`. It never writes a
/// `/` or a `.` the bytes did not have.
pub fn text_of(bytes: &[u8], out: &mut String) {
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid();
        if valid.contains('%') {
            for c in valid.chars() {
                match c {
                    '%' => out.push_str("%25"),
                    c => out.push(c),
                }
            }
        } else {
            out.push_str(valid);
        }
        for &b in chunk.invalid() {
            sluice_http::response::push_percent(out, b);
        }
    }
}

/// The file-system bytes of a normalized path's text ([`text_of`]'s inverse):
/// borrowed when the text holds no `%`, the common case.
pub fn fs_bytes(rel: &str) -> std::borrow::Cow<'_, [u8]> {
    if !rel.contains('%') {
        return std::borrow::Cow::Borrowed(rel.as_bytes());
    }
    // A text that is not `text_of`'s (a name from the config with a stray `%`)
    // is taken as it is.
    match percent_decode(rel.as_bytes()) {
        Some(b) => std::borrow::Cow::Owned(b),
        None => std::borrow::Cow::Borrowed(rel.as_bytes()),
    }
}

/// Percent-decode; `None` on a malformed escape.
pub fn percent_decode(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let h = hex(*s.get(i + 1)?)?;
            let l = hex(*s.get(i + 2)?)?;
            out.push(h << 4 | l);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Some(out)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-encode a path for a URL (listings, redirects): keeps unreserved
/// characters and `/`, encodes the rest.
pub fn percent_encode_path(s: &str, out: &mut String) {
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            sluice_http::response::push_percent(out, b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> String {
        normalize(raw, false).unwrap().rel.into_owned()
    }

    #[test]
    fn normal_paths() {
        assert_eq!(ok("/"), "");
        assert_eq!(ok("/a/b.txt"), "a/b.txt");
        assert_eq!(ok("//a///b/./c/"), "a/b/c");
        assert_eq!(ok("/a/b/../c"), "a/c");
        assert_eq!(ok("/a%20b"), "a b");
        assert_eq!(ok("/a%2fb"), "a/b");
        assert!(normalize("/dir/", false).unwrap().trailing_slash);
    }

    #[test]
    fn a_last_dot_segment_leaves_directory_form() {
        for (raw, rel) in [
            ("/a.txt/.", "a.txt"),
            ("/a/b/..", "a"),
            ("/a/%2e", "a"),
            ("/a/.", "a"),
            ("/.", ""),
        ] {
            let n = normalize(raw, false).unwrap();
            assert_eq!((n.rel.as_ref(), n.trailing_slash), (rel, true), "{raw}");
        }
        for raw in ["/a/b", "/a/./b", "/a/b/../c", "/a/.b"] {
            let n = normalize(raw, true).unwrap();
            assert!(!n.trailing_slash, "{raw}");
        }
    }

    #[test]
    fn escapes_are_refused() {
        for raw in [
            "/..",
            "/../etc/passwd",
            "/a/../../b",
            "/%2e%2e/x",
            "/%2E%2E%2Fx",
            "/a/%2e%2e/%2e%2e/b",
        ] {
            assert_eq!(normalize(raw, false), Err(PathError::Escape), "{raw}");
        }
        for raw in ["/a%00b", "/%zz", "/%4", "relative", "*"] {
            assert_eq!(normalize(raw, false), Err(PathError::Bad), "{raw}");
        }
        // A backslash is a name's byte, never a separator: no climbing with it.
        assert_eq!(ok("/a\\b"), "a\\b");
        assert_eq!(ok("/a%5cb"), "a\\b");
        for (raw, rel) in [
            ("/..%5C..%5Cetc/passwd", "..\\..\\etc/passwd"),
            ("/x/..\\../y", "x/..\\../y"),
        ] {
            assert_eq!(normalize(raw, true).unwrap().rel, rel, "{raw}");
            // With hidden names refused, such a segment is a hidden name.
            assert_eq!(normalize(raw, false), Err(PathError::Hidden), "{raw}");
        }
    }

    #[test]
    fn names_that_are_not_utf8_have_a_text_form() {
        // Latin-1 é, a literal `%`, and UTF-8 é: three different files, three texts.
        assert_eq!(ok("/caf%E9.txt"), "caf%E9.txt");
        assert_eq!(ok("/caf%25E9.txt"), "caf%25E9.txt");
        assert_eq!(ok("/caf%C3%A9.txt"), "café.txt");
        assert_eq!(ok("/d%ff/../x%80y/z"), "x%80y/z");
        for (text, bytes) in [
            ("caf%E9.txt", &b"caf\xe9.txt"[..]),
            ("caf%25E9.txt", b"caf%E9.txt"),
            ("café.txt", "café.txt".as_bytes()),
            ("a/b", b"a/b"),
        ] {
            assert_eq!(&*fs_bytes(text), bytes, "{text}");
            let mut back = String::new();
            text_of(bytes, &mut back);
            assert_eq!(back, text);
        }
    }

    #[test]
    fn hidden_policy() {
        assert_eq!(normalize("/.git/config", false), Err(PathError::Hidden));
        assert_eq!(normalize("/a/.env", false), Err(PathError::Hidden));
        assert_eq!(normalize("/%2egit", false), Err(PathError::Hidden));
        assert_eq!(normalize("/.git/config", true).unwrap().rel, ".git/config");
    }

    proptest::proptest! {
        #[test]
        fn text_form_round_trips(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let mut text = String::new();
            text_of(&bytes, &mut text);
            proptest::prop_assert_eq!(&*fs_bytes(&text), &bytes[..]);
            proptest::prop_assert_eq!(text.matches('/').count(), bytes.iter().filter(|&&b| b == b'/').count());
            proptest::prop_assert_eq!(text.matches('.').count(), bytes.iter().filter(|&&b| b == b'.').count());
        }

        #[test]
        fn result_never_climbs(raw in "/[a-z./%25e2fE]{0,40}") {
            if let Ok(n) = normalize(&raw, true) {
                proptest::prop_assert!(!n.rel.starts_with('/'));
                proptest::prop_assert!(!n.rel.split('/').any(|s| s == ".." || s == "."));
            }
        }
    }
}
