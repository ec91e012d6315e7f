//! Content-Type by file extension: a fixed table of what mirrors and static sites
//! serve, and the operator's own (`[files] types`, [`Types`]) over it. Unknown
//! extensions are `application/octet-stream` (downloads, not guesses).
//!
//! Costs: nothing per request; a file's type is looked up once, when it enters the
//! file cache (one more hash lookup there when the operator's table is not empty).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

/// The extension of `path`'s last segment, lowercased into `buf`, if it has one
/// that fits there.
fn lower_ext<'b>(path: &str, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    let (_, e) = path.rsplit_once('.')?;
    if e.contains('/') || e.len() > buf.len() {
        return None;
    }
    let out = &mut buf[..e.len()];
    for (d, s) in out.iter_mut().zip(e.bytes()) {
        *d = s.to_ascii_lowercase();
    }
    Some(out)
}

pub fn for_path(path: &str) -> &'static str {
    let mut buf = [0u8; 8];
    let Some(ext) = lower_ext(path, &mut buf) else {
        return "application/octet-stream";
    };
    match ext {
        b"html" | b"htm" => "text/html; charset=utf-8",
        b"css" => "text/css; charset=utf-8",
        b"js" | b"mjs" => "text/javascript; charset=utf-8",
        b"json" => "application/json",
        // Armored (`.asc`) signatures and checksums are text a browser may show;
        // a `.sig` is most often a binary detached signature.
        b"txt" | b"asc" | b"md5" | b"sha1" | b"sha256" | b"sha512" => "text/plain; charset=utf-8",
        b"md" => "text/markdown; charset=utf-8",
        b"xml" | b"rss" => "application/xml",
        b"atom" => "application/atom+xml",
        b"csv" => "text/csv; charset=utf-8",
        b"svg" => "image/svg+xml",
        b"png" => "image/png",
        b"jpg" | b"jpeg" => "image/jpeg",
        b"gif" => "image/gif",
        b"webp" => "image/webp",
        b"ico" => "image/x-icon",
        b"avif" => "image/avif",
        b"woff" => "font/woff",
        b"woff2" => "font/woff2",
        b"pdf" => "application/pdf",
        b"wasm" => "application/wasm",
        b"mp4" => "video/mp4",
        b"webm" => "video/webm",
        b"mp3" => "audio/mpeg",
        b"ogg" => "audio/ogg",
        b"zip" => "application/zip",
        b"gz" | b"tgz" => "application/gzip",
        b"bz2" | b"tbz2" => "application/x-bzip2",
        b"xz" | b"txz" => "application/x-xz",
        b"lz" => "application/x-lzip",
        b"lzma" => "application/x-lzma",
        b"zst" => "application/zstd",
        b"tar" => "application/x-tar",
        b"7z" => "application/x-7z-compressed",
        // Not `.img`: a raw disk image is no ISO 9660 file system.
        b"iso" => "application/x-iso9660-image",
        b"deb" => "application/vnd.debian.binary-package",
        b"rpm" => "application/x-rpm",
        b"torrent" => "application/x-bittorrent",
        b"sig" => "application/pgp-signature",
        b"jar" => "application/java-archive",
        b"apk" => "application/vnd.android.package-archive",
        _ => "application/octet-stream",
    }
}

/// The built-in table with the operator's types (`[files] types`) over it.
#[derive(Debug, Default)]
pub struct Types {
    /// Lowercase extension → type.
    own: HashMap<Box<[u8]>, &'static str>,
}

impl Types {
    /// From `[files] types` (extensions lowercase, as the config keeps them;
    /// types checked by it).
    pub fn new(own: &BTreeMap<String, String>) -> Types {
        Types {
            own: own
                .iter()
                .map(|(e, t)| (e.as_bytes().into(), intern(t)))
                .collect(),
        }
    }

    pub fn for_path(&self, path: &str) -> &'static str {
        if !self.own.is_empty() {
            let mut buf = [0u8; 32];
            if let Some(t) = lower_ext(path, &mut buf).and_then(|e| self.own.get(e)) {
                return t;
            }
        }
        for_path(path)
    }
}

/// The one `'static` copy of an operator's type string: a file's cache entry holds
/// its type as `&'static str`, as it does the built-in ones. Each distinct string
/// is allocated once for the life of the process, so a reload that reads the same
/// table again takes no more memory.
fn intern(t: &str) -> &'static str {
    static KNOWN: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = known.get(t) {
        return k;
    }
    let k: &'static str = Box::leak(t.into());
    known.insert(k);
    k
}

/// Files that are compressed already (archives and packages): they are served as
/// they are, never as a `Content-Encoding` of something else, and never looked for
/// precompressed siblings.
pub fn is_compressed(path: &str) -> bool {
    let Some((_, ext)) = path.rsplit_once('.') else {
        return false;
    };
    const EXTS: [&str; 14] = [
        "gz", "tgz", "br", "zst", "xz", "txz", "bz2", "tbz2", "lz", "lzma", "zip", "7z", "deb",
        "rpm",
    ];
    EXTS.iter().any(|e| ext.eq_ignore_ascii_case(e))
}

#[cfg(test)]
mod tests {
    #[test]
    fn table() {
        assert_eq!(super::for_path("a/index.HTML"), "text/html; charset=utf-8");
        assert_eq!(
            super::for_path("debian-12.iso"),
            "application/x-iso9660-image"
        );
        assert_eq!(super::for_path("a.b/noext"), "application/octet-stream");
        assert_eq!(super::for_path("raspios.img"), "application/octet-stream");
        assert_eq!(
            super::for_path("SHA256SUMS.sig"),
            "application/pgp-signature"
        );
        assert_eq!(
            super::for_path("SHA256SUMS.asc"),
            "text/plain; charset=utf-8"
        );
        assert_eq!(
            super::for_path("x.verylongextension"),
            "application/octet-stream"
        );
    }

    #[test]
    fn the_operators_types_go_over_the_table() {
        let own = [
            ("webmanifest", "application/manifest+json"),
            ("iso", "application/vnd.efi.iso"),
            ("verylongextension", "text/x-long"),
        ]
        .map(|(e, t)| (e.to_string(), t.to_string()));
        let t = super::Types::new(&own.into_iter().collect());
        assert_eq!(
            t.for_path("/m/site.WebManifest"),
            "application/manifest+json"
        );
        assert_eq!(t.for_path("/d/debian-12.iso"), "application/vnd.efi.iso");
        assert_eq!(t.for_path("x.verylongextension"), "text/x-long");
        // The rest is the built-in table's.
        assert_eq!(t.for_path("a/index.html"), "text/html; charset=utf-8");
        assert_eq!(t.for_path("a.webmanifest/x"), "application/octet-stream");
        // The same string configured again (a reload) is the same allocation.
        let again = super::Types::new(&[("x".to_string(), "text/x-long".to_string())].into());
        assert!(std::ptr::eq(
            again.for_path("a.x"),
            t.for_path("x.verylongextension")
        ));
    }
}
