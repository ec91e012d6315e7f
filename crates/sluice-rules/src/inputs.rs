//! What a compiled rule set was made from: every file the loader read (rules
//! files, `RewriteMap` files, `substitute` bodies), in order, each with a stamp of
//! its bytes, and the options it was compiled with. A reload asks
//! [`Inputs::unchanged`] before compiling again: when loading the same files with
//! the same options would read the same bytes, the set it has is the set it would
//! make, and it keeps it. A million regex rules take about 11 s to compile on
//! this machine and a gigabyte per copy; a reload that changes a log setting or a
//! limit, the common case, then costs one read of the files, and serving
//! processes keep sharing the pages they were forked with.
//!
//! Owns: the options a set is compiled with ([`LoadOptions`]), the stamps and the
//! comparison. Must not: decide on file times (a file
//! rewritten within the same second, or copied with its old time, would be missed);
//! the stamp is of the bytes. Costs: a hash of each file's bytes at load (SipHash,
//! about 30 ms for a million rules' 60 MB), and a read and hash of each again per
//! reload.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

/// How rules files are compiled: with the files' bytes, all a compiled set
/// depends on.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    /// Skip unsupported directives and flags with a warning instead of failing.
    pub lenient: bool,
    /// Where rate conditions count (`None`: a table of this rule set's own, made
    /// only if a rule has a rate condition).
    pub rates: Option<crate::rates::SharedRates>,
    /// Keeps this rule set's rate keys apart from other rule sets' in shared
    /// cells (e.g. the site's index).
    pub rate_salt: u32,
}

/// A file's length and two independent 64-bit hashes of its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    hash: [u64; 2],
}

/// The two hashers of a [`Stamp`], fed in pieces (SipHash streams: pieces give
/// the hash of the whole).
#[allow(deprecated)] // SipHasher: keyed, and stable across Rust versions.
struct Hashing([std::hash::SipHasher; 2], u64);

#[allow(deprecated)]
impl Hashing {
    fn new() -> Hashing {
        let h = |key| std::hash::SipHasher::new_with_keys(key, 0x736c_7569_6365);
        Hashing([h(0), h(1)], 0)
    }

    fn add(&mut self, bytes: &[u8]) {
        for h in &mut self.0 {
            h.write(bytes);
        }
        self.1 += bytes.len() as u64;
    }

    fn stamp(&self) -> Stamp {
        Stamp {
            len: self.1,
            hash: [self.0[0].finish(), self.0[1].finish()],
        }
    }
}

impl Stamp {
    pub fn of(bytes: &[u8]) -> Stamp {
        let mut h = Hashing::new();
        h.add(bytes);
        h.stamp()
    }

    /// The stamp of a file's bytes as it is now, read 64 KiB at a time: a reload
    /// in a serving process must not allocate the file's size (60 MB for a
    /// million rules) in a heap whose pages it shares with the master.
    pub fn of_file(path: &Path) -> std::io::Result<Stamp> {
        use std::io::Read;
        let mut f = std::fs::File::open(path)?;
        let mut buf = vec![0u8; 64 << 10];
        let mut h = Hashing::new();
        loop {
            match f.read(&mut buf) {
                Ok(0) => return Ok(h.stamp()),
                Ok(n) => h.add(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Everything a rule set's compile read, and how it was asked to compile.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// The rules files it was asked to load, in order.
    rules_files: Vec<PathBuf>,
    /// Every file read, rules files and the files they name, in the order read.
    read: Vec<(PathBuf, Stamp)>,
    lenient: bool,
    rate_salt: u32,
    shared_rates: bool,
}

impl Inputs {
    pub(crate) fn new(rules_files: &[PathBuf], opts: &LoadOptions) -> Inputs {
        Inputs {
            rules_files: rules_files.to_vec(),
            read: Vec::new(),
            lenient: opts.lenient,
            rate_salt: opts.rate_salt,
            shared_rates: opts.rates.is_some(),
        }
    }

    /// Record a file the loader read.
    pub(crate) fn note(&mut self, path: &Path, bytes: &[u8]) {
        self.read.push((path.to_path_buf(), Stamp::of(bytes)));
    }

    /// Whether loading `rules_files` with `opts` would read exactly the bytes this
    /// set was compiled from (each file read again now), and so make the same set.
    /// A set made from text ([`crate::RuleSet::from_str`]) read no file: never.
    pub fn unchanged(&self, rules_files: &[PathBuf], opts: &LoadOptions) -> bool {
        !self.rules_files.is_empty()
            && self.rules_files == rules_files
            && self.lenient == opts.lenient
            && self.rate_salt == opts.rate_salt
            && self.shared_rates == opts.rates.is_some()
            && self
                .read
                .iter()
                .all(|(p, stamp)| Stamp::of_file(p).is_ok_and(|s| s == *stamp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_read_in_pieces_has_the_stamp_of_its_bytes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.conf");
        // Longer than one read, and not a multiple of it.
        let text: Vec<u8> = (0..200_001u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &text).unwrap();
        assert_eq!(Stamp::of_file(&p).unwrap(), Stamp::of(&text));
    }

    #[test]
    fn a_stamp_tells_bytes_apart_and_not_times() {
        assert_eq!(
            Stamp::of(b"Redirect /a /b\n"),
            Stamp::of(b"Redirect /a /b\n")
        );
        assert_ne!(
            Stamp::of(b"Redirect /a /b\n"),
            Stamp::of(b"Redirect /a /c\n")
        );
        assert_ne!(Stamp::of(b""), Stamp::of(b"\n"));
    }
}
