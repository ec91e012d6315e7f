//! Response status lines and header text.
//!
//! Handlers write header lines with [`HeaderBuf`]; the server adds the status line,
//! `Server`, `Date` and `Connection`. Keeping the head as bytes (not a map) means a
//! small response is one buffer and one `writev`.

pub type Status = u16;

/// The reason phrase sluice sends for a status code.
pub fn reason(status: Status) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        410 => "Gone",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// Header lines under construction (`Name: value\r\n` each).
#[derive(Default, Debug)]
pub struct HeaderBuf(pub Vec<u8>);

impl HeaderBuf {
    pub fn clear(&mut self) {
        self.0.clear();
    }
    pub fn add(&mut self, name: &str, value: &str) -> &mut Self {
        self.0.extend_from_slice(name.as_bytes());
        self.0.extend_from_slice(b": ");
        self.0.extend_from_slice(value.as_bytes());
        self.0.extend_from_slice(b"\r\n");
        self
    }
    pub fn add_u64(&mut self, name: &str, value: u64) -> &mut Self {
        let mut b = itoa::Buffer::new();
        self.add(name, b.format(value))
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Append `HTTP/1.1 <code> <reason>\r\n` to `out`.
pub fn write_status_line(out: &mut Vec<u8>, status: Status) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(b.format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
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
    fn status_line() {
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

/// A response as a handler produces it. The server renders the status line and the
/// connection-level headers around `headers`, and drops the body for HEAD.
#[derive(Debug, Default)]
pub struct Response {
    pub status: Status,
    pub headers: HeaderBuf,
    /// Body pieces in order; `Content-Length` (set by the handler) must equal their sum.
    pub body: Vec<Chunk>,
    /// Close the connection after this response (e.g. after a framing error).
    pub close: bool,
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

    /// A redirect with a small body naming the target.
    pub fn redirect(status: Status, location: &str) -> Self {
        let mut r = Response::new(status);
        let body = format!("{status} {}: {location}\n", reason(status));
        r.headers.add("Location", location);
        r.headers.add("Content-Type", "text/plain; charset=utf-8");
        r.headers.add_u64("Content-Length", body.len() as u64);
        r.body.push(Chunk::Owned(body.into_bytes()));
        r
    }

    pub fn body_len(&self) -> u64 {
        self.body.iter().map(Chunk::len).sum()
    }
}
