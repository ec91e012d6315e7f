//! What a response head says (status, length, chunked, close, redirect target), and
//! where a chunked body ends, fed in pieces as they arrive. No I/O.

#[derive(Clone, Copy)]
pub(super) enum ChunkState {
    /// Reading a size line (digits so far).
    Size(u64, bool),
    /// In a chunk's data (bytes left), then its CRLF.
    Data(u64),
    DataEnd,
    /// After the last chunk: skipping trailers until an empty line.
    Trailer(u8),
}

/// What a response head says, as the client acts on it.
pub(super) struct HeadInfo {
    pub(super) status: u16,
    pub(super) length: Option<u64>,
    pub(super) chunked: bool,
    pub(super) close: bool,
    pub(super) location: Option<String>,
}

pub(super) fn extract(r: &httparse::Response) -> HeadInfo {
    let mut h = HeadInfo {
        status: r.code.unwrap_or(0),
        length: None,
        chunked: false,
        close: false,
        location: None,
    };
    if r.version == Some(0) {
        h.close = true;
    }
    for hd in r.headers.iter() {
        let n = hd.name;
        if n.eq_ignore_ascii_case("content-length") {
            h.length = std::str::from_utf8(hd.value)
                .ok()
                .and_then(|v| v.trim().parse().ok());
        } else if n.eq_ignore_ascii_case("transfer-encoding") {
            h.chunked = hd
                .value
                .windows(7)
                .any(|w| w.eq_ignore_ascii_case(b"chunked"));
        } else if n.eq_ignore_ascii_case("connection") {
            let v = String::from_utf8_lossy(hd.value).to_ascii_lowercase();
            if v.contains("close") {
                h.close = true;
            } else if v.contains("keep-alive") {
                h.close = false;
            }
        } else if n.eq_ignore_ascii_case("location") {
            h.location = Some(String::from_utf8_lossy(hd.value).into_owned());
        }
    }
    h
}

/// Advance a chunked-body parser over `data`: (bytes used, new state, body done).
pub(super) fn chunk_step(mut st: ChunkState, data: &[u8]) -> (usize, ChunkState, bool) {
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        match st {
            ChunkState::Size(n, in_ext) => {
                i += 1;
                match b {
                    b'\n' => {
                        st = if n == 0 {
                            ChunkState::Trailer(0)
                        } else {
                            ChunkState::Data(n)
                        };
                    }
                    b'\r' => {}
                    b';' => st = ChunkState::Size(n, true),
                    _ if in_ext => {}
                    _ => {
                        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                        st = ChunkState::Size(n.saturating_mul(16).saturating_add(d), false);
                    }
                }
            }
            ChunkState::Data(left) => {
                let k = (left as usize).min(data.len() - i);
                i += k;
                st = if left as usize == k {
                    ChunkState::DataEnd
                } else {
                    ChunkState::Data(left - k as u64)
                };
            }
            ChunkState::DataEnd => {
                i += 1;
                if b == b'\n' {
                    st = ChunkState::Size(0, false);
                }
            }
            ChunkState::Trailer(col) => {
                i += 1;
                match b {
                    b'\n' if col == 0 => return (i, ChunkState::Size(0, false), true),
                    b'\n' => st = ChunkState::Trailer(0),
                    b'\r' => {}
                    _ => st = ChunkState::Trailer(col.saturating_add(1)),
                }
            }
        }
    }
    (i, st, false)
}

/// The path of a redirect target on the same server (relative, or absolute to our host).
pub(super) fn same_server_path<'a>(loc: &'a str, host: &str) -> Option<&'a str> {
    if loc.starts_with('/') {
        return Some(loc);
    }
    let rest = loc.strip_prefix("http://")?;
    let slash = rest.find('/').unwrap_or(rest.len());
    if rest[..slash].eq_ignore_ascii_case(host) {
        Some(if slash < rest.len() {
            &rest[slash..]
        } else {
            "/"
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_parsing_across_splits() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\n";
        for split in 0..body.len() {
            let (a, b) = body.split_at(split);
            let (u1, st, d1) = chunk_step(ChunkState::Size(0, false), a);
            assert_eq!(u1, a.len());
            if d1 {
                assert_eq!(split, body.len());
                continue;
            }
            let (u2, _, d2) = chunk_step(st, b);
            assert!(d2, "split {split}");
            assert_eq!(u2, b.len());
        }
    }

    #[test]
    fn redirect_targets() {
        assert_eq!(same_server_path("/a", "h"), Some("/a"));
        assert_eq!(same_server_path("http://H/x?y", "h"), Some("/x?y"));
        assert_eq!(same_server_path("http://h", "h"), Some("/"));
        assert_eq!(same_server_path("http://other/x", "h"), None);
        assert_eq!(same_server_path("https://h/x", "h"), None);
    }
}
