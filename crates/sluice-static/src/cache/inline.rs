//! Text kept inside the record that owns it: a cached file's path ([`Key`], inline
//! up to 62 bytes, which most mirror paths fit) and its head lines ([`Inline`]),
//! so a cache hit reads them from the record it reads anyway. No allocation for
//! a short path; one for a long one.

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
