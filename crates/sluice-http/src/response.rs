//! Response status lines and header text.
//!
//! Handlers write header lines with [`HeaderBuf`]; the server adds the status line,
//! `Server`, `Date` and `Connection`. Keeping the head as bytes (not a map) means a
//! small response is one buffer and one `writev`.

pub type Status = u16;

/// The status codes sluice sends, each with its reason phrase: one table, from
/// which both [`reason`] and [`write_status_line`] read.
macro_rules! statuses {
    ($($code:literal $phrase:literal,)*) => {
        /// The whole status line of a known status code.
        fn known_line(status: Status) -> Option<&'static str> {
            match status {
                $($code => Some(concat!("HTTP/1.1 ", $code, " ", $phrase, "\r\n")),)*
                _ => None,
            }
        }
    };
}

statuses! {
    200 "OK",
    204 "No Content",
    206 "Partial Content",
    301 "Moved Permanently",
    302 "Found",
    303 "See Other",
    304 "Not Modified",
    307 "Temporary Redirect",
    308 "Permanent Redirect",
    400 "Bad Request",
    403 "Forbidden",
    404 "Not Found",
    405 "Method Not Allowed",
    408 "Request Timeout",
    410 "Gone",
    412 "Precondition Failed",
    413 "Content Too Large",
    414 "URI Too Long",
    416 "Range Not Satisfiable",
    431 "Request Header Fields Too Large",
    500 "Internal Server Error",
    501 "Not Implemented",
    503 "Service Unavailable",
    505 "HTTP Version Not Supported",
}

/// `HTTP/1.1 ` and a three-digit code and a space.
const PHRASE_AT: usize = 13;

/// The reason phrase sluice sends for a status code.
pub fn reason(status: Status) -> &'static str {
    known_line(status).map_or("Unknown", |l| &l[PHRASE_AT..l.len() - 2])
}

/// Header lines under construction (`Name: value\r\n` each).
///
/// The buffer comes from a spare the thread keeps and goes back to it with
/// [`HeaderBuf::recycle`] once the server has copied the lines into the response
/// head: a response's headers cost no allocation.
#[derive(Default, Debug)]
pub struct HeaderBuf(pub Vec<u8>);

thread_local! {
    /// The thread's spare header buffer (empty, with capacity), or an empty `Vec`.
    static SPARE_HEADERS: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A spare header buffer larger than this is dropped rather than kept.
const SPARE_HEADERS_MAX: usize = 4096;

impl HeaderBuf {
    pub fn clear(&mut self) {
        self.0.clear();
    }
    /// The thread's spare buffer, the first time a line is added.
    fn ready(&mut self) {
        if self.0.capacity() == 0 {
            self.0 = SPARE_HEADERS.take();
            // A file's headers are ~150–250 bytes: one allocation, not a chain
            // of five reallocations from empty (≈1% of server CPU on 1 KiB files).
            self.0.reserve(256);
        }
    }
    pub fn add(&mut self, name: &str, value: &str) -> &mut Self {
        self.ready();
        self.0.extend_from_slice(name.as_bytes());
        self.0.extend_from_slice(b": ");
        self.0.extend_from_slice(value.as_bytes());
        self.0.extend_from_slice(b"\r\n");
        self
    }
    /// Append whole header lines (`Name: value\r\n`...) written earlier by the
    /// caller, who vouches for their syntax.
    pub fn add_lines(&mut self, lines: &[u8]) -> &mut Self {
        self.ready();
        self.0.extend_from_slice(lines);
        self
    }
    /// Whether a line for `name` (any case) is already here. One pass over the
    /// lines; used only where a config makes a header conditional on another.
    pub fn has(&self, name: &str) -> bool {
        crate::request::field_values(&self.0, name).next().is_some()
    }
    /// Puts `value` in place of the first line for `name` (any case), keeping
    /// the lines' order; adds it if there is none. One pass over the lines; for
    /// what a rule sets on an answer (`T=`), not for every response.
    pub fn replace(&mut self, name: &str, value: &str) -> &mut Self {
        let mut at = 0;
        while at < self.0.len() {
            let end = self.0[at..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .map_or(self.0.len(), |e| at + e + 2);
            let line = &self.0[at..end];
            let named = line.len() > name.len()
                && line[name.len()] == b':'
                && line[..name.len()].eq_ignore_ascii_case(name.as_bytes());
            if named {
                let mut new = Vec::with_capacity(name.len() + value.len() + 4);
                new.extend_from_slice(&line[..name.len()]);
                new.extend_from_slice(b": ");
                new.extend_from_slice(value.as_bytes());
                new.extend_from_slice(b"\r\n");
                self.0.splice(at..end, new);
                return self;
            }
            at = end;
        }
        self.add(name, value)
    }
    pub fn add_u64(&mut self, name: &str, value: u64) -> &mut Self {
        let mut b = itoa::Buffer::new();
        self.add(name, b.format(value))
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
    /// Hand the buffer back to the thread's spare (the lines are gone afterwards).
    pub fn recycle(&mut self) {
        let mut v = std::mem::take(&mut self.0);
        if v.capacity() != 0 && v.capacity() <= SPARE_HEADERS_MAX {
            v.clear();
            SPARE_HEADERS.set(v);
        }
    }
}

/// Whether `v` may go in a header field as it is: no control byte (a tab
/// aside), so no value a rule expanded from the request can split a line.
pub fn safe_value(v: &str) -> bool {
    v.bytes().all(|c| c == b'\t' || (c >= b' ' && c != 0x7f))
}

/// Append `HTTP/1.1 <code> <reason>\r\n` to `out`.
pub fn write_status_line(out: &mut Vec<u8>, status: Status) {
    if let Some(line) = known_line(status) {
        out.extend_from_slice(line.as_bytes());
        return;
    }
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(b.format(status).as_bytes());
    out.extend_from_slice(b" Unknown\r\n");
}

/// Make a redirect target safe to send:
/// - a path that starts with two or more `/` or `\` (a network-path reference such as
///   `//evil.com/`, which browsers follow to another host; `/\evil.com` is read the same
///   way) gets one `/`: a same-origin path stays on the origin even when a rule
///   template's `$1` brought the extra slashes from the request;
/// - controls, spaces, bytes ≥ 0x80 and the characters RFC 3986 never allows raw are
///   percent-encoded, so no header can be split and no raw byte is echoed back.
///
/// Absolute URLs (`https://mirror.example/…`) that an operator wrote pass unchanged
/// apart from the encoding.
pub fn safe_location(loc: &str) -> std::borrow::Cow<'_, str> {
    let b = loc.as_bytes();
    let lead = b.iter().take_while(|&&c| c == b'/' || c == b'\\').count();
    let needs_encoding = |c: u8| c <= b' ' || c >= 0x7f || b"\"<>\\^`{|}".contains(&c);
    let rest = &b[lead..];
    if lead <= 1 && !b.iter().any(|&c| c == b'\\' || needs_encoding(c)) {
        return std::borrow::Cow::Borrowed(loc);
    }
    let mut out = String::with_capacity(loc.len() + 8);
    if lead > 0 {
        out.push('/');
    }
    for &c in rest {
        if needs_encoding(c) {
            push_percent(&mut out, c);
        } else {
            out.push(c as char);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Append `%XX` (upper-case hex) for byte `b`.
pub fn push_percent(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[(b >> 4) as usize]));
    out.push(char::from(HEX[(b & 15) as usize]));
}

/// Escape text for an HTML body (listings, error pages).
pub fn html_escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_redirect_names_its_target_in_header_and_body() {
        let r = Response::redirect(308, "/new path");
        let head = std::str::from_utf8(r.headers.as_bytes()).unwrap();
        assert!(head.starts_with("Location: /new%20path\r\n"), "{head}");
        let body = b"308 Permanent Redirect: /new%20path\n";
        assert!(
            head.contains(&format!("Content-Length: {}\r\n", body.len())),
            "{head}"
        );
        assert!(matches!(&r.body[..], [Chunk::Owned(b)] if b == body));
    }

    #[test]
    fn a_replaced_header_keeps_its_place_and_the_others() {
        let mut h = HeaderBuf::default();
        h.add("X-Content-Type", "a")
            .add("content-type", "text/plain")
            .add("Content-Length", "5");
        h.replace("Content-Type", "application/x-demo");
        assert_eq!(
            h.as_bytes(),
            b"X-Content-Type: a\r\ncontent-type: application/x-demo\r\nContent-Length: 5\r\n"
        );
        h.replace("Set-Cookie", "a=b");
        assert!(h
            .as_bytes()
            .ends_with(b"Content-Length: 5\r\nSet-Cookie: a=b\r\n"));
    }

    #[test]
    fn a_recycled_header_buffer_serves_the_next_response_empty() {
        let mut a = HeaderBuf::default();
        a.add("Content-Length", "1");
        let ptr = a.0.as_ptr();
        a.recycle();
        assert!(a.as_bytes().is_empty());
        let mut b = HeaderBuf::default();
        b.add("X", "y");
        assert_eq!(b.as_bytes(), b"X: y\r\n");
        assert_eq!(b.0.as_ptr(), ptr, "the spare was not reused");
        // One grown past the bound is not kept.
        b.add("Big", &"v".repeat(SPARE_HEADERS_MAX));
        b.recycle();
        let mut c = HeaderBuf::default();
        c.add("X", "y");
        assert_eq!(c.0.capacity(), 256);
    }

    #[test]
    fn a_header_is_found_by_its_whole_name_in_any_case() {
        let mut h = HeaderBuf::default();
        assert!(!h.has("X-Frame-Options"));
        h.add("Content-Length", "3").add("x-frame-options", "DENY");
        assert!(h.has("X-Frame-Options") && h.has("content-length"));
        assert!(!h.has("X-Frame") && !h.has("Frame-Options") && !h.has("DENY"));
    }

    #[test]
    fn locations_stay_on_the_origin() {
        assert_eq!(safe_location("//evil.com/x/"), "/evil.com/x/");
        assert_eq!(safe_location("/\\evil.com"), "/evil.com");
        assert_eq!(safe_location("\\\\evil.com"), "/evil.com");
        assert_eq!(safe_location("///a"), "/a");
        assert_eq!(safe_location("/a//b/"), "/a//b/");
        assert_eq!(
            safe_location("/a b\r\nSet-Cookie: x"),
            "/a%20b%0D%0ASet-Cookie:%20x"
        );
        assert_eq!(safe_location("/caf\u{e9}"), "/caf%C3%A9");
        assert_eq!(safe_location("/a\\b"), "/a%5Cb");
        assert_eq!(
            safe_location("https://mirror.example/p?q=1#f"),
            "https://mirror.example/p?q=1#f"
        );
        let r = Response::redirect(301, "//evil.com/..%2fsub/");
        let h = String::from_utf8(r.headers.0).unwrap();
        assert!(h.contains("Location: /evil.com/..%2fsub/\r\n"), "{h}");
    }

    #[test]
    fn status_line() {
        for status in [200, 206, 304] {
            let mut v = Vec::new();
            write_status_line(&mut v, status);
            assert_eq!(
                v,
                format!("HTTP/1.1 {status} {}\r\n", reason(status)).as_bytes()
            );
        }
        let mut v = Vec::new();
        write_status_line(&mut v, 416);
        assert_eq!(v, b"HTTP/1.1 416 Range Not Satisfiable\r\n");
        let mut h = HeaderBuf::default();
        h.add("A", "b").add_u64("Content-Length", 42);
        assert_eq!(h.as_bytes(), b"A: b\r\nContent-Length: 42\r\n");
        let mut s = String::new();
        html_escape("<a href=\"x\">&'", &mut s);
        assert_eq!(s, "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }
}

/// One piece of a response body. File pieces are sent with `sendfile` (or the
/// configured I/O mode) by the server; memory pieces with `writev`.
#[derive(Debug, Clone)]
pub enum Chunk {
    /// Shared bytes (e.g. a cached small file): `data[start..end]`.
    Shared(std::rc::Rc<[u8]>, usize, usize),
    /// Bytes made for this response (listings, error pages, multipart separators).
    Owned(Vec<u8>),
    /// `len` bytes of `file` from `offset`.
    File(std::rc::Rc<std::fs::File>, u64, u64),
}

impl Chunk {
    pub fn len(&self) -> u64 {
        match self {
            Chunk::Shared(_, s, e) => (e - s) as u64,
            Chunk::Owned(v) => v.len() as u64,
            Chunk::File(_, _, l) => *l,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A response's body pieces.
pub type Body = smallvec::SmallVec<[Chunk; 1]>;

/// A response as a handler produces it. The server renders the status line and the
/// connection-level headers around `headers`, and drops the body for HEAD.
#[derive(Debug, Default)]
pub struct Response {
    pub status: Status,
    pub headers: HeaderBuf,
    /// Body pieces in order; `Content-Length` (set by the handler) must equal their sum.
    /// Most bodies are one piece (a file, a cached file's bytes, a message), held
    /// in place; multipart ranges spill to the heap.
    pub body: Body,
    /// Close the connection after this response (e.g. after a framing error).
    pub close: bool,
    /// A fixed `Date` header instead of the clock's (an operator's answer to clients
    /// that read the time from it; errant-client rules, `date=`).
    pub date: Option<std::sync::Arc<str>>,
    /// The handler's promise that the same request bytes get a byte-identical
    /// answer (its `Date` aside) until then: set only for a whole small file
    /// from memory, a 304 or a whole file's HEAD, whose answer read nothing but
    /// the request and that file, for as long as the file's cache entry is
    /// trusted; or for a redirect the rules decided on the request alone (and
    /// cleared when the rules read more: `sluice-server`'s phases). It is the one
    /// thing that says which statuses may be kept: the worker keeps such an
    /// answer for reuse (`sluice_static::answers`) without a list of its own.
    pub reuse_until: Option<std::time::Instant>,
    /// The bandwidth limit a path rule gives this answer, `(bytes/s, after)` (0:
    /// none), in place of its site's (`[[files.rate_limits]]`); `None`: the site's.
    pub limit: Option<(u64, u64)>,
}

impl Response {
    pub fn new(status: Status) -> Self {
        Response {
            status,
            ..Default::default()
        }
    }

    /// A short text/plain answer: `"<code> <reason>\n"` unless `msg` is given.
    pub fn text(status: Status, msg: Option<&str>) -> Self {
        let mut r = Response::new(status);
        let body = match msg {
            Some(m) => format!("{status} {}: {m}\n", reason(status)),
            None => format!("{status} {}\n", reason(status)),
        };
        r.headers.add("Content-Type", "text/plain; charset=utf-8");
        r.headers.add_u64("Content-Length", body.len() as u64);
        r.body.push(Chunk::Owned(body.into_bytes()));
        r
    }

    /// A redirect with a small body naming the target. Every `Location` sluice sends
    /// goes through here and [`safe_location`], so none can leave the origin by
    /// accident or carry bytes a header may not hold.
    pub fn redirect(status: Status, location: &str) -> Self {
        let mut r = Response::new(status);
        let location = safe_location(location);
        // `<code> <reason>: <location>\n`, built at its final size (a `format!`
        // grows its string two or three times: a redirect is a hot path, seed 001).
        let reason = reason(status);
        let mut body = Vec::with_capacity(3 + 1 + reason.len() + 2 + location.len() + 1);
        body.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        body.push(b' ');
        body.extend_from_slice(reason.as_bytes());
        body.extend_from_slice(b": ");
        body.extend_from_slice(location.as_bytes());
        body.push(b'\n');
        r.headers.add("Location", &location);
        r.headers.add("Content-Type", "text/plain; charset=utf-8");
        r.headers.add_u64("Content-Length", body.len() as u64);
        r.body.push(Chunk::Owned(body));
        r
    }

    pub fn body_len(&self) -> u64 {
        self.body.iter().map(Chunk::len).sum()
    }
}
