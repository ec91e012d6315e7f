//! The request line (`method SP target SP HTTP/1.d`) and the authority
//! (`uri-host[:port]`, from `Host` or an absolute-form target): split and checked
//! in one pass each, a table lookup per byte. Owns the byte classes (tchar,
//! target, host); must not look at header fields (`request.rs` does).

use super::error::ParseError;
use memchr::memchr;

/// Bytes allowed raw in a request-target: visible ASCII except `#` (a fragment is
/// never sent), plus obs-text (≥ 0x80, which some clients send as raw UTF-8; it is
/// percent-encoded wherever sluice writes a URL back).
///
/// RFC 3986 never allows `"` `<` `>` `\` `^` `` ` `` `{` `|` `}` raw either, but
/// browsers send them (Chromium, following the WHATWG URL standard, leaves
/// `{ } | ^ `` ` `` `\` raw in a query), and so do curl and scripts; nginx and Apache
/// serve them. Refusing them turned such a link into a 400 and bought nothing: the
/// same bytes arrive percent-encoded and are decoded alike. Where they could matter,
/// they are handled: a `\` in the path is refused by the file handler's path check,
/// `safe_location` encodes them in every `Location`, and the log and the status
/// page escape them.
const fn target_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0x21;
    while i < 256 {
        t[i] = i != 0x7f && i != b'#' as usize;
        i += 1;
    }
    t
}
static TARGET_OK: [bool; 256] = target_table();

/// Longest method accepted (`BASELINE-CONTROL` is 16).
pub(super) const MAX_METHOD: usize = 32;
/// A byte class: the ASCII letters and digits, and `extra`.
const fn alnum_and(extra: &[u8]) -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u8).is_ascii_alphanumeric();
        i += 1;
    }
    let mut j = 0;
    while j < extra.len() {
        t[extra[j] as usize] = true;
        j += 1;
    }
    t
}

/// `tchar` (RFC 9110 §5.6.2): the bytes of a method or a header name.
static TCHAR: [bool; 256] = alnum_and(b"!#$%&'*+-.^_`|~");

pub(super) fn is_tchar(b: u8) -> bool {
    TCHAR[b as usize]
}

/// The bytes of a `reg-name` or IPv4 host (RFC 3986 §3.2.2: unreserved,
/// sub-delims, and `%` of a pct-encoding).
static HOST_OK: [bool; 256] = alnum_and(b"-._~%!$&'()*+,;=");

/// The request line, split: method, target, minor version.
pub(super) struct RequestLine<'a> {
    pub method: &'a str,
    pub target: &'a str,
    pub minor: u8,
}

/// Parse `method SP target SP HTTP/1.d` (the line, without its CRLF or LF) in one
/// pass: each byte is checked against its part's table as the line is split.
///
/// Written here rather than taken from httparse because httparse refuses
/// HTTP/1.2–1.9 (RFC 9110 §2.5 says to answer them as 1.1) and accepts a raw `#`
/// in the target.
pub(super) fn parse_request_line(line: &[u8]) -> Result<RequestLine<'_>, ParseError> {
    // The method: tchars up to the first space.
    let sp1 = line
        .iter()
        .position(|&b| !is_tchar(b))
        .unwrap_or(line.len());
    if sp1 == 0 || sp1 > MAX_METHOD || line.get(sp1) != Some(&b' ') {
        return Err(ParseError::Malformed);
    }
    // The target: allowed bytes up to the next space (which is not one of them).
    let rest = &line[sp1 + 1..];
    let mut high = 0u8;
    let mut sp2 = 0;
    while sp2 < rest.len() && TARGET_OK[rest[sp2] as usize] {
        high |= rest[sp2];
        sp2 += 1;
    }
    if sp2 == 0 || rest.get(sp2) != Some(&b' ') {
        return Err(ParseError::Malformed);
    }
    let minor = match &rest[sp2 + 1..] {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            if *major != b'1' {
                return Err(ParseError::BadVersion);
            }
            minor - b'0'
        }
        _ => return Err(ParseError::Malformed),
    };
    // The method is tchars (ASCII); the target may hold obs-text, which must be
    // valid UTF-8 to be borrowed as text. The scan has seen every byte of both.
    let method = text_of(&line[..sp1], true).ok_or(ParseError::Malformed)?;
    let target = text_of(&rest[..sp2], high < 0x80).ok_or(ParseError::Malformed)?;
    Ok(RequestLine {
        method,
        target,
        minor,
    })
}

/// `raw` as text when it is valid UTF-8. Most request bytes are ASCII, checked a
/// word at a time; only the others go through the full UTF-8 validation.
pub(super) fn text(raw: &[u8]) -> Option<&str> {
    text_of(raw, raw.is_ascii())
}

/// [`text`] for bytes the caller has already looked at: `ascii` when every one
/// is below 0x80 (the only place that borrows request bytes as text unchecked).
fn text_of(raw: &[u8], ascii: bool) -> Option<&str> {
    if ascii {
        debug_assert!(raw.is_ascii());
        // SAFETY: every byte is below 0x80, so `raw` is valid UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(raw) })
    } else {
        std::str::from_utf8(raw).ok()
    }
}

/// Is `a` a valid `uri-host [ ":" port ]` (RFC 3986 §3.2.2, RFC 9112 §3.2)? Refuses
/// userinfo (`a@b`), markup, a second colon and unclosed IPv6 literals.
pub fn valid_authority(a: &str) -> bool {
    authority_host(a).is_some()
}

/// The host of a valid `uri-host [ ":" port ]`, without the port (an IPv6
/// literal keeps its brackets); `None` when `a` is not one, or its host is empty.
pub(super) fn authority_host(a: &str) -> Option<&str> {
    let b = a.as_bytes();
    let host_end = if let Some(inner) = b.strip_prefix(b"[") {
        let close = memchr(b']', inner)?;
        let lit = &inner[..close];
        let ok = !lit.is_empty()
            && lit
                .iter()
                .all(|&c| c.is_ascii_hexdigit() || c == b':' || c == b'.');
        if !ok {
            return None;
        }
        close + 2
    } else {
        b.iter()
            .position(|&c| !HOST_OK[c as usize])
            .unwrap_or(b.len())
    };
    let port_ok = match &b[host_end..] {
        [] => true,
        [b':', digits @ ..] => digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    // An empty host (`Host:`, `:80`, `http:///x`) names nothing an `http` URI may
    // (RFC 9110 §4.2.1: a recipient MUST reject it), as nginx and Apache answer 400.
    (port_ok && host_end > 0).then(|| &a[..host_end])
}

pub(super) fn strip_scheme(t: &str) -> Option<&str> {
    let b = t.as_bytes();
    if b.len() >= 7 && b[..7].eq_ignore_ascii_case(b"http://") {
        Some(&t[7..])
    } else if b.len() >= 8 && b[..8].eq_ignore_ascii_case(b"https://") {
        Some(&t[8..])
    } else {
        None
    }
}
