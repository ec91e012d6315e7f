//! Content-Type by file extension: a fixed table of what mirrors and static sites
//! serve. Unknown extensions are `application/octet-stream` (downloads, not guesses).

pub fn for_path(path: &str) -> &'static str {
    let ext = match path.rsplit_once('.') {
        Some((_, e)) if !e.contains('/') => e,
        _ => return "application/octet-stream",
    };
    let mut lower = [0u8; 8];
    if ext.len() > lower.len() {
        return "application/octet-stream";
    }
    for (d, s) in lower.iter_mut().zip(ext.bytes()) {
        *d = s.to_ascii_lowercase();
    }
    match &lower[..ext.len()] {
        b"html" | b"htm" => "text/html; charset=utf-8",
        b"css" => "text/css; charset=utf-8",
        b"js" | b"mjs" => "text/javascript; charset=utf-8",
        b"json" => "application/json",
        b"txt" | b"asc" | b"sig" | b"md5" | b"sha1" | b"sha256" | b"sha512" => {
            "text/plain; charset=utf-8"
        }
        b"md" => "text/markdown; charset=utf-8",
        b"xml" | b"rss" => "application/xml",
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
        b"bz2" => "application/x-bzip2",
        b"xz" => "application/x-xz",
        b"zst" => "application/zstd",
        b"tar" => "application/x-tar",
        b"7z" => "application/x-7z-compressed",
        b"iso" | b"img" => "application/x-iso9660-image",
        b"deb" => "application/vnd.debian.binary-package",
        b"rpm" => "application/x-rpm",
        b"torrent" => "application/x-bittorrent",
        _ => "application/octet-stream",
    }
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
        assert_eq!(
            super::for_path("x.verylongextension"),
            "application/octet-stream"
        );
    }
}
