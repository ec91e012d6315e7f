//! Text kept inside the record that owns it: a cached file's path ([`Key`], inline
//! up to 62 bytes, which most mirror paths fit) and its head lines ([`Inline`],
//! written once by [`head_lines`]), so a cache hit reads them from the record it
//! reads anyway. No allocation for a short path; one for a long one.

/// Up to `N` bytes of text kept inside its owner.
#[derive(Clone, Copy)]
pub(super) struct Inline<const N: usize> {
    len: u8,
    bytes: [u8; N],
}

impl<const N: usize> Inline<N> {
    pub(super) fn new(s: &str) -> Option<Self> {
        if s.len() > N || N > u8::MAX as usize {
            return None;
        }
        let mut bytes = [0u8; N];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Some(Inline {
            len: s.len() as u8,
            bytes,
        })
    }

    pub(super) fn as_str(&self) -> &str {
        let b = &self.bytes[..self.len as usize];
        // SAFETY: `new` copied exactly these bytes from a `&str`, whole.
        unsafe { std::str::from_utf8_unchecked(b) }
    }
}

impl<const N: usize> std::fmt::Debug for Inline<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

/// A cached path: kept inline up to 62 bytes (most mirror paths), else on the heap.
#[derive(Debug)]
pub(super) enum Key {
    Short(Inline<62>),
    Long(Box<str>),
}

impl Key {
    pub(super) fn new(s: &str) -> Key {
        Inline::new(s).map_or_else(|| Key::Long(s.into()), Key::Short)
    }
    pub(super) fn as_str(&self) -> &str {
        match self {
            Key::Short(k) => k.as_str(),
            Key::Long(k) => k,
        }
    }
}

/// `Last-Modified: ` + an HTTP date (29 bytes) + `\r\n` + `ETag: `.
pub(super) const LM_AT: usize = 15;
pub(super) const ETAG_AT: usize = LM_AT + 29 + 2 + 6;

/// The lines kept in [`FileInfo::lines`](super::FileInfo), and the ETag's and the whole set's ends.
pub(super) fn head_lines(
    last_modified: &str,
    etag: &str,
    mime: &str,
    len: u64,
) -> (Inline<255>, u8, u8) {
    use std::fmt::Write;
    debug_assert_eq!(last_modified.len(), 29);
    let mut s = String::with_capacity(256);
    let _ = write!(s, "Last-Modified: {last_modified}\r\nETag: {etag}");
    let etag_end = s.len();
    s.push_str("\r\n");
    let validators = s.len();
    let _ = write!(
        s,
        "Accept-Ranges: bytes\r\nContent-Type: {mime}\r\nContent-Length: {len}\r\n"
    );
    match Inline::new(&s) {
        Some(lines) => (lines, etag_end as u8, s.len() as u8),
        // At most 98 bytes: an HTTP date and a 44-byte ETag.
        None => (
            Inline::new(&s[..validators]).expect("the validators' lines fit in 255 bytes"),
            etag_end as u8,
            0,
        ),
    }
}
