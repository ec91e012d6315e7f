//! Request-head parsing and validation.
//!
//! [`parse_head`] returns [`Parsed::Partial`] ("need more bytes") as a value, not an
//! error, so the caller can keep reading under its own *total* header deadline.
//! Everything it returns borrows from the caller's buffer: no allocation per request.
//!
//! Refused shapes (each is a [`ParseError`] with its status code):
//! - request line longer than [`Limits::max_request_line`] (414), head longer than
//!   [`Limits::max_head`] or more than [`Limits::max_headers`] headers (431);
//! - a request-target holding a raw `#`, a space or controls (400; the other
//!   characters RFC 3986 never allows raw are served, as browsers send them:
//!   `line::target_table`), a version other than `HTTP/1.d` (505 for another
//!   major version, 400 for anything else; HTTP/1.2–1.9 are answered as 1.1);
//! - obs-fold, bad tokens, bare CR in header lines (httparse: 400);
//! - `Content-Length` together with `Transfer-Encoding`, duplicate or malformed
//!   `Content-Length` (400, these are the request-smuggling shapes), a
//!   `Transfer-Encoding` other than `chunked` alone (501);
//! - HTTP/1.1 without `Host`, with more than one, or with a value that is not a
//!   `uri-host[:port]` (400; userinfo, markup, two ports, open IPv6 literals and
//!   an empty host).
//!
//! The request line is parsed in [`line`] (a table lookup per byte), the header block by
//! `httparse::parse_headers` (SIMD); cost is one pass over the head plus one pass
//! over its headers.

use memchr::memchr;

mod error;
mod line;
pub use error::ParseError;
pub use line::valid_authority;
use line::{authority_host, is_tchar, parse_request_line, strip_scheme, text, MAX_METHOD};

/// Size limits on a request head. Defaults are nginx-like.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest request line (method, target, version), bytes. Default 8 KiB.
    pub max_request_line: usize,
    /// Longest whole head (request line + headers + blank line), bytes. Default 16 KiB.
    pub max_head: usize,
    /// Most header fields. Default 64.
    pub max_headers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: 8 * 1024,
            max_head: 16 * 1024,
            max_headers: 64,
        }
    }
}

/// The methods sluice knows by name; anything else is `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Patch,
    Trace,
    Connect,
    Other,
}

impl Method {
    fn from_bytes(m: &str) -> Method {
        match m {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            "TRACE" => Method::Trace,
            "CONNECT" => Method::Connect,
            _ => Method::Other,
        }
    }
}

/// How the request's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// A parsed request head; every slice borrows the input buffer.
#[derive(Debug, Default)]
pub struct RequestHead<'a> {
    pub method: Option<Method>,
    pub method_str: &'a str,
    /// The request target as sent (origin-form, absolute-form or `*`).
    pub target: &'a str,
    /// Path part of the target, still percent-encoded, always starting with `/` (or `*`).
    pub path: &'a str,
    /// Query after `?`, without the `?`.
    pub query: Option<&'a str>,
    /// The digit after `HTTP/1.`: 0 for HTTP/1.0, 1 for HTTP/1.1; 2–9 (answered as
    /// 1.1, RFC 9110 §2.5) are kept so the log shows what was sent.
    pub minor: u8,
    /// Host from absolute-form, else the `Host` header, port stripped.
    pub host: Option<&'a str>,
    pub keep_alive: bool,
    pub body: Option<BodyFraming>,
    /// The first `If-Match` / `If-None-Match` line; with `lists_repeated`, the
    /// list is the one of every line together (`conditional::Conditions`).
    pub if_match: Option<&'a str>,
    pub if_none_match: Option<&'a str>,
    /// `If-Match` or `If-None-Match` came in more than one line.
    pub lists_repeated: bool,
    pub if_unmodified_since: Option<&'a str>,
    pub if_modified_since: Option<&'a str>,
    pub if_range: Option<&'a str>,
    pub range: Option<&'a str>,
    /// The last `Accept` / `Accept-Encoding` line; with `negotiation_repeated`,
    /// read them with [`RequestHead::accept`] and [`RequestHead::accept_encoding`].
    pub accept: Option<&'a str>,
    pub accept_encoding: Option<&'a str>,
    /// `Accept` or `Accept-Encoding` came in more than one line (one list, RFC 9110
    /// §5.3, as Apache reads them).
    pub negotiation_repeated: bool,
    /// Raw bytes: obs-text (≥ 0x80) is legal here and must reach the log escaped.
    pub user_agent: Option<&'a [u8]>,
    pub referer: Option<&'a [u8]>,
    /// Length of the head in bytes (the body, if any, starts here).
    pub head_len: usize,
    /// The header lines as received (`Name: value\r\n`...), for rules that match
    /// arbitrary headers.
    pub raw_headers: &'a [u8],
}

impl<'a> RequestHead<'a> {
    pub fn method(&self) -> Method {
        self.method.unwrap_or(Method::Other)
    }
    pub fn framing(&self) -> BodyFraming {
        self.body.unwrap_or(BodyFraming::None)
    }

    /// `Accept`: the one line's value, or every line's joined when it came in more
    /// than one (a rare request, which pays for the join).
    pub fn accept(&self) -> Option<std::borrow::Cow<'a, str>> {
        self.list(self.accept, "accept")
    }

    /// `Accept-Encoding`, as [`RequestHead::accept`].
    pub fn accept_encoding(&self) -> Option<std::borrow::Cow<'a, str>> {
        self.list(self.accept_encoding, "accept-encoding")
    }

    fn list(&self, last: Option<&'a str>, name: &str) -> Option<std::borrow::Cow<'a, str>> {
        let last = last?;
        if !self.negotiation_repeated {
            return Some(std::borrow::Cow::Borrowed(last));
        }
        let mut all = String::new();
        for v in field_values(self.raw_headers, name) {
            if !all.is_empty() {
                all.push_str(", ");
            }
            all.push_str(&String::from_utf8_lossy(trim_ows(v)));
        }
        Some(std::borrow::Cow::Owned(all))
    }
}

/// The result of feeding bytes to the parser. Returned by value once per request
/// and never stored, so the size difference costs nothing; boxing would allocate.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Parsed<'a> {
    /// A whole head; the body (if any) starts at `head.head_len`.
    Complete(RequestHead<'a>),
    /// Not enough bytes yet; read more (under the caller's deadline) and call again.
    Partial,
}

/// Whether a `Connection` value lists `token` (case-insensitive). The common
/// one-token values (`keep-alive`, `close`) are decided without splitting.
fn eq_token_list_has(value: &str, token: &str) -> bool {
    if value.eq_ignore_ascii_case(token) {
        return true;
    }
    value.len() > token.len()
        && value
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Parse one request head from the front of `buf`.
pub fn parse_head<'a>(buf: &'a [u8], limits: &Limits) -> Result<Parsed<'a>, ParseError> {
    // Tolerate (and skip) empty lines before a request (RFC 9112 §2.2), as most servers do.
    let mut start = 0;
    while start < buf.len() && (buf[start] == b'\r' || buf[start] == b'\n') {
        start += 1;
        if start > 8 {
            return Err(ParseError::Malformed);
        }
    }
    let buf = &buf[start..];
    let nl = match memchr(b'\n', buf) {
        Some(i) if i > limits.max_request_line => return Err(ParseError::RequestLineTooLong),
        None if buf.len() > limits.max_request_line => return Err(ParseError::RequestLineTooLong),
        None => {
            // Refuse at once what cannot become a request line (binary junk, a TLS
            // hello): the method must be a short token, so a client cannot hold the
            // connection until the deadline with bytes we already know are wrong.
            let method_end = memchr(b' ', buf).unwrap_or(buf.len());
            if !buf[..method_end].iter().all(|&b| is_tchar(b)) || method_end > MAX_METHOD {
                return Err(ParseError::Malformed);
            }
            // A CR that something other than LF follows ends nothing (RFC 9112 §2.2:
            // a bare CR is invalid); waiting for a newline would hold the connection
            // until the head deadline for bytes already known to be wrong.
            if memchr(b'\r', buf).is_some_and(|i| i + 1 < buf.len()) {
                return Err(ParseError::Malformed);
            }
            return Ok(Parsed::Partial);
        }
        Some(i) => i,
    };
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let rl = parse_request_line(line)?;
    // httparse wants initialized slots, and filling 128 of them (4 KiB) was 40% of
    // this function. Most requests carry fewer than SMALL_HEADERS fields (curl 3,
    // a browser 10-18), so they get that many; a request with more is parsed again
    // with room for the configured limit.
    let max = limits.max_headers.min(MAX_HEADERS);
    let src = &buf[nl + 1..];
    let mut small = [httparse::EMPTY_HEADER; SMALL_HEADERS];
    let mut big;
    let parsed = match httparse::parse_headers(src, &mut small[..max.min(SMALL_HEADERS)]) {
        Err(httparse::Error::TooManyHeaders) if max > SMALL_HEADERS => {
            big = [httparse::EMPTY_HEADER; MAX_HEADERS];
            httparse::parse_headers(src, &mut big[..max])
        }
        r => r,
    };
    let (head_len, headers) = match parsed {
        Ok(httparse::Status::Complete((n, hs))) => (nl + 1 + n, hs),
        Ok(httparse::Status::Partial) => {
            if buf.len() > limits.max_head {
                return Err(ParseError::HeadTooLarge);
            }
            return Ok(Parsed::Partial);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(ParseError::TooManyHeaders),
        Err(_) => return Err(ParseError::Malformed),
    };
    if head_len > limits.max_head {
        return Err(ParseError::HeadTooLarge);
    }
    let (method_str, target, minor) = (rl.method, rl.target, rl.minor);
    let mut h = RequestHead {
        method: Some(Method::from_bytes(method_str)),
        method_str,
        target,
        minor,
        head_len: head_len + start,
        raw_headers: &buf[nl + 1..head_len],
        ..Default::default()
    };

    // Split the target into host (absolute-form), path and query.
    let mut path_and_query = target;
    let mut authority: Option<&str> = None;
    if !target.starts_with('/') {
        if target == "*" {
            path_and_query = "*";
        } else if let Some(rest) = strip_scheme(target) {
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            authority = Some(&rest[..end]);
            path_and_query = if end < rest.len() { &rest[end..] } else { "/" };
            if path_and_query.starts_with('?') {
                // "http://h?q": path is "/" — rare; keep the query off the path.
                path_and_query = "/";
            }
        } else {
            return Err(ParseError::Malformed);
        }
    }
    match memchr(b'?', path_and_query.as_bytes()) {
        Some(i) => {
            h.path = &path_and_query[..i];
            h.query = Some(&path_and_query[i + 1..]);
        }
        None => h.path = path_and_query,
    }

    let mut host_hdr: Option<&str> = None;
    let mut content_length: Option<u64> = None;
    let mut transfer_encoding: Option<&str> = None;
    let mut conn_close = false;
    let mut conn_keep = false;
    // Range and If-Range are single values, not lists: a second line of either
    // makes the request a plain GET (as Apache; nginx takes the first, and taking
    // the last, as before, answered a range a cache in front had not asked for).
    let mut single_repeated = false;
    for hd in headers.iter() {
        let name = hd.name;
        // Only the fields below are read; a value is turned into text only for
        // them. Referer and User-Agent are kept as bytes: obs-text is legal there,
        // and the access log escapes it rather than losing the field.
        let field = match name.len() {
            4 if name.eq_ignore_ascii_case("host") => Field::Host,
            5 if name.eq_ignore_ascii_case("range") => Field::Range,
            6 if name.eq_ignore_ascii_case("accept") => Field::Accept,
            7 if name.eq_ignore_ascii_case("referer") => Field::Referer,
            8 if name.eq_ignore_ascii_case("if-range") => Field::IfRange,
            8 if name.eq_ignore_ascii_case("if-match") => Field::IfMatch,
            10 if name.eq_ignore_ascii_case("connection") => Field::Connection,
            10 if name.eq_ignore_ascii_case("user-agent") => Field::UserAgent,
            13 if name.eq_ignore_ascii_case("if-none-match") => Field::IfNoneMatch,
            14 if name.eq_ignore_ascii_case("content-length") => Field::ContentLength,
            15 if name.eq_ignore_ascii_case("accept-encoding") => Field::AcceptEncoding,
            17 if name.eq_ignore_ascii_case("transfer-encoding") => Field::TransferEncoding,
            17 if name.eq_ignore_ascii_case("if-modified-since") => Field::IfModifiedSince,
            19 if name.eq_ignore_ascii_case("if-unmodified-since") => Field::IfUnmodifiedSince,
            _ => continue,
        };
        let raw = trim_ows(hd.value);
        match field {
            Field::Referer => {
                h.referer = Some(raw);
                continue;
            }
            Field::UserAgent => {
                h.user_agent = Some(raw);
                continue;
            }
            _ => {}
        }
        let Some(value) = text(raw) else {
            // Non-UTF-8 values are legal bytes; refuse them only where the
            // request's meaning depends on the field.
            if matches!(
                field,
                Field::Host | Field::ContentLength | Field::TransferEncoding
            ) {
                return Err(ParseError::Malformed);
            }
            continue;
        };
        match field {
            Field::Host => {
                if host_hdr.is_some() {
                    return Err(ParseError::DuplicateHost);
                }
                host_hdr = Some(value);
            }
            Field::Range => {
                single_repeated |= h.range.is_some();
                h.range = Some(value);
            }
            Field::Accept => {
                h.negotiation_repeated |= h.accept.is_some();
                h.accept = Some(value);
            }
            Field::IfRange => {
                single_repeated |= h.if_range.is_some();
                h.if_range = Some(value);
            }
            Field::IfMatch => {
                h.lists_repeated |= h.if_match.is_some();
                h.if_match.get_or_insert(value);
            }
            Field::Connection => {
                if eq_token_list_has(value, "close") {
                    conn_close = true;
                }
                if eq_token_list_has(value, "keep-alive") {
                    conn_keep = true;
                }
            }
            Field::IfNoneMatch => {
                h.lists_repeated |= h.if_none_match.is_some();
                h.if_none_match.get_or_insert(value);
            }
            Field::AcceptEncoding => {
                h.negotiation_repeated |= h.accept_encoding.is_some();
                h.accept_encoding = Some(value);
            }
            Field::ContentLength => {
                let n = parse_content_length(value)?;
                if content_length.is_some() {
                    // Even identical duplicates are refused: a proxy in front may
                    // have picked the other one.
                    return Err(ParseError::BadContentLength);
                }
                content_length = Some(n);
            }
            Field::TransferEncoding => {
                if transfer_encoding.is_some() {
                    return Err(ParseError::BadTransferEncoding);
                }
                transfer_encoding = Some(value);
            }
            Field::IfModifiedSince => h.if_modified_since = Some(value),
            Field::IfUnmodifiedSince => h.if_unmodified_since = Some(value),
            Field::Referer | Field::UserAgent => {}
        }
    }

    if single_repeated {
        h.range = None;
        h.if_range = None;
    }

    h.body = Some(match (content_length, transfer_encoding) {
        (Some(_), Some(_)) => return Err(ParseError::ConflictingFraming),
        (Some(0), None) | (None, None) => BodyFraming::None,
        (Some(n), None) => BodyFraming::Length(n),
        (None, Some(te)) => {
            if minor == 0 {
                // HTTP/1.0 has no chunked coding; a TE here is a smuggling attempt.
                return Err(ParseError::BadTransferEncoding);
            }
            // Only `chunked` alone: a coding before it (`gzip, chunked`) is one
            // sluice does not implement (RFC 9112 §6.1: 501, as nginx), and one
            // after it leaves the body's end unknown.
            if !te.trim().eq_ignore_ascii_case("chunked") {
                return Err(ParseError::BadTransferEncoding);
            }
            BodyFraming::Chunked
        }
    });

    // RFC 9112 §3.2: a Host that is not a valid uri-host[:port] is a 400, and so is
    // an absolute-form authority of that shape (userinfo included). The absolute
    // form's authority wins over the header.
    let host_of = |a: &'a str| authority_host(a).ok_or(ParseError::BadHost);
    let header_host = host_hdr.map(host_of).transpose()?;
    h.host = match authority {
        Some(a) => Some(host_of(a)?),
        None => header_host,
    };
    if minor >= 1 && host_hdr.is_none() {
        return Err(ParseError::MissingHost);
    }
    h.keep_alive = if minor >= 1 {
        !conn_close
    } else {
        conn_keep && !conn_close
    };
    Ok(Parsed::Complete(h))
}

/// The value (after the colon, untrimmed) of every line of the field `name` (any
/// case) in header lines `raw` (`Name: value\r\n`...): a head's `raw_headers`, or a
/// response's.
pub fn field_values<'a>(raw: &'a [u8], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    raw.split(|&b| b == b'\n').filter_map(move |line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .eq_ignore_ascii_case(name.as_bytes())
            .then(|| &line[colon + 1..])
    })
}

fn trim_ows(v: &[u8]) -> &[u8] {
    let s = v
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(v.len());
    let e = v
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(s, |i| i + 1);
    &v[s..e.max(s)]
}

/// The header fields the parser reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Host,
    Range,
    Accept,
    Referer,
    IfRange,
    IfMatch,
    Connection,
    UserAgent,
    IfNoneMatch,
    ContentLength,
    AcceptEncoding,
    TransferEncoding,
    IfModifiedSince,
    IfUnmodifiedSince,
}

/// Header fields a request may carry at most, whatever `max_headers` says.
const MAX_HEADERS: usize = 128;
/// Header slots tried first (see `parse_head`).
const SMALL_HEADERS: usize = 24;

fn parse_content_length(v: &str) -> Result<u64, ParseError> {
    // RFC 9110 allows a list of identical values; we refuse it (ambiguity is the attack).
    if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::BadContentLength);
    }
    v.parse::<u64>().map_err(|_| ParseError::BadContentLength)
}

#[cfg(test)]
mod tests;
