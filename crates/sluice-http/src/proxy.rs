//! The PROXY protocol (HAProxy's, versions 1 and 2): the header a load balancer
//! puts before the client's bytes to say who the client is.
//!
//! Owns parsing one header from the start of a connection's buffer; the server
//! decides which listeners expect it and which sources are trusted to send it. Must
//! not allocate or read past the header. A v1 header is at most 107 bytes; a v2
//! header is 16 bytes plus its length field, bounded here by [`V2_MAX`] (the
//! addresses plus any TLVs a balancer adds). Written by hand: it is a fixed, small
//! format, and the crates for it pull in more than they parse.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const V1_MAX: usize = 107;
const V2_SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// Largest v2 header accepted (16 + addresses + TLVs).
pub const V2_MAX: usize = 16 + 1024;

#[derive(Debug, PartialEq, Eq)]
pub enum Proxied {
    /// Not all of the header is here yet.
    Partial,
    /// The header is `len` bytes; the client is `source` (`None`: `LOCAL` or
    /// `UNKNOWN`, the connection is the balancer's own, use the socket's address).
    Done {
        len: usize,
        source: Option<SocketAddr>,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub struct ProxyError(pub &'static str);

pub fn parse(buf: &[u8]) -> Result<Proxied, ProxyError> {
    if buf.is_empty() {
        return Ok(Proxied::Partial);
    }
    if buf[0] == b'P' {
        return v1(buf);
    }
    if buf[0] == b'\r' {
        return v2(buf);
    }
    Err(ProxyError("no PROXY header"))
}

fn v1(buf: &[u8]) -> Result<Proxied, ProxyError> {
    let n = buf.len().min(6);
    if buf[..n] != b"PROXY "[..n] {
        return Err(ProxyError("no PROXY header"));
    }
    let Some(end) = buf[..buf.len().min(V1_MAX)]
        .windows(2)
        .position(|w| w == b"\r\n")
    else {
        return if buf.len() >= V1_MAX {
            Err(ProxyError("PROXY v1 header too long"))
        } else {
            Ok(Proxied::Partial)
        };
    };
    let line = std::str::from_utf8(&buf[6..end]).map_err(|_| ProxyError("PROXY v1: not text"))?;
    let f: Vec<&str> = line.split(' ').collect();
    let len = end + 2;
    match f.first().copied() {
        Some("UNKNOWN") => Ok(Proxied::Done { len, source: None }),
        Some(fam @ ("TCP4" | "TCP6")) if f.len() == 5 => {
            let ip: IpAddr = f[1]
                .parse()
                .map_err(|_| ProxyError("PROXY v1: bad source address"))?;
            let _dst: IpAddr = f[2]
                .parse()
                .map_err(|_| ProxyError("PROXY v1: bad destination address"))?;
            if (fam == "TCP4") != ip.is_ipv4() {
                return Err(ProxyError("PROXY v1: address does not match the family"));
            }
            let sport = port(f[3]).ok_or(ProxyError("PROXY v1: bad source port"))?;
            port(f[4]).ok_or(ProxyError("PROXY v1: bad destination port"))?;
            Ok(Proxied::Done {
                len,
                source: Some(SocketAddr::new(ip, sport)),
            })
        }
        _ => Err(ProxyError("PROXY v1: bad header")),
    }
}

/// A decimal port without sign or leading zeros.
fn port(s: &str) -> Option<u16> {
    if s.is_empty()
        || s.len() > 5
        || (s.len() > 1 && s.starts_with('0'))
        || !s.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    s.parse().ok()
}

fn v2(buf: &[u8]) -> Result<Proxied, ProxyError> {
    let n = buf.len().min(12);
    if buf[..n] != V2_SIG[..n] {
        return Err(ProxyError("no PROXY header"));
    }
    if buf.len() < 16 {
        return Ok(Proxied::Partial);
    }
    let (ver_cmd, fam) = (buf[12], buf[13]);
    let body = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if ver_cmd >> 4 != 2 {
        return Err(ProxyError("PROXY v2: bad version"));
    }
    if 16 + body > V2_MAX {
        return Err(ProxyError("PROXY v2: header too long"));
    }
    if buf.len() < 16 + body {
        return Ok(Proxied::Partial);
    }
    let len = 16 + body;
    let a = &buf[16..len];
    match ver_cmd & 0x0f {
        0 => return Ok(Proxied::Done { len, source: None }), // LOCAL
        1 => {}
        _ => return Err(ProxyError("PROXY v2: bad command")),
    }
    let source = match fam {
        0x11 | 0x12 if a.len() >= 12 => Some(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
            u16::from_be_bytes([a[8], a[9]]),
        )),
        0x21 | 0x22 if a.len() >= 36 => {
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&a[..16]);
            Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(ip)),
                u16::from_be_bytes([a[32], a[33]]),
            ))
        }
        0x00 => None, // UNSPEC: the socket's own address
        0x11 | 0x12 | 0x21 | 0x22 => return Err(ProxyError("PROXY v2: address block too short")),
        _ => return Err(ProxyError("PROXY v2: unsupported address family")),
    };
    Ok(Proxied::Done { len, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_forms() {
        let h = b"PROXY TCP4 203.0.113.9 192.0.2.1 56324 80\r\nGET / HTTP/1.1\r\n";
        assert_eq!(
            parse(h),
            Ok(Proxied::Done {
                len: 43,
                source: Some("203.0.113.9:56324".parse().unwrap())
            })
        );
        let h = b"PROXY TCP6 2001:db8::9 2001:db8::1 1 443\r\n";
        assert_eq!(
            parse(h).unwrap(),
            Proxied::Done {
                len: h.len(),
                source: Some("[2001:db8::9]:1".parse().unwrap())
            }
        );
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n").unwrap(),
            Proxied::Done {
                len: 15,
                source: None
            }
        );
        for partial in [&b"PRO"[..], b"PROXY TCP4 1.2.3.4", b"\r\n\r\n\0\r\nQU"] {
            assert_eq!(parse(partial), Ok(Proxied::Partial), "{partial:?}");
        }
        for bad in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
            b"PROXY TCP4 2001:db8::1 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 70000 2\r\n",
            b"PROXY SCTP 1.2.3.4 5.6.7.8 1 2\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let long = [b"PROXY ".to_vec(), vec![b'x'; 200]].concat();
        assert!(parse(&long).is_err());
    }

    #[test]
    fn v2_forms() {
        let mut h = V2_SIG.to_vec();
        h.extend_from_slice(&[
            0x21, 0x11, 0, 12, 203, 0, 113, 9, 192, 0, 2, 1, 0xdc, 0x04, 0, 80,
        ]);
        h.extend_from_slice(b"GET /");
        assert_eq!(
            parse(&h),
            Ok(Proxied::Done {
                len: 28,
                source: Some("203.0.113.9:56324".parse().unwrap())
            })
        );
        assert_eq!(parse(&h[..20]), Ok(Proxied::Partial));
        // LOCAL (a health check from the balancer itself).
        let mut l = V2_SIG.to_vec();
        l.extend_from_slice(&[0x20, 0x00, 0, 0]);
        assert_eq!(
            parse(&l),
            Ok(Proxied::Done {
                len: 16,
                source: None
            })
        );
        // TLVs after the addresses are skipped with the header.
        let mut t = V2_SIG.to_vec();
        t.extend_from_slice(&[
            0x21, 0x11, 0, 17, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2, 0x04, 0, 2, b'h', b'i',
        ]);
        assert_eq!(
            parse(&t).unwrap(),
            Proxied::Done {
                len: 33,
                source: Some("1.2.3.4:1".parse().unwrap())
            }
        );
        let mut bad = V2_SIG.to_vec();
        bad.extend_from_slice(&[0x21, 0x11, 0, 4, 1, 2, 3, 4]);
        assert!(parse(&bad).is_err(), "short address block");
        let mut huge = V2_SIG.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        assert!(parse(&huge).is_err());
    }
}
