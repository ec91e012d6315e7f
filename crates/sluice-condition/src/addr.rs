//! Address ranges as paths of 4-bit digits (nibbles), the keys of the 16-ary trees.
//!
//! IPv4: the 8 nibbles of the address, most significant first, so a node at depth 2
//! is a /8, at depth 4 a /16, at depth 6 a /24 and a leaf one host.
//! IPv6: the 16 nibbles of the /64. A /64 is what one subscriber (or one host, with
//! privacy addresses) gets, so a single customer rotating through its 2^64
//! addresses is one leaf, not 2^64; the levels /32 (depth 8), /48 (depth 12) and
//! /64 (depth 16) play the roles of /8, /16 and /24. An IPv4-mapped IPv6 address
//! (`::ffff:a.b.c.d`) is treated as the IPv4 address.
//!
//! The two families are separate subtrees of one root (digit 0 for IPv4, 1 for
//! IPv6), so their counts never mix.

use std::net::IpAddr;

/// A nibble path: `len` digits in `digits[..len]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RangeKey {
    pub family: u8,
    pub len: u8,
    pub digits: [u8; 16],
}

impl RangeKey {
    pub fn of(ip: IpAddr) -> RangeKey {
        let ip = match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            },
            v4 => v4,
        };
        let mut digits = [0u8; 16];
        match ip {
            IpAddr::V4(v4) => {
                for (i, b) in v4.octets().iter().enumerate() {
                    digits[2 * i] = b >> 4;
                    digits[2 * i + 1] = b & 15;
                }
                RangeKey {
                    family: 0,
                    len: 8,
                    digits,
                }
            }
            IpAddr::V6(v6) => {
                for (i, b) in v6.octets()[..8].iter().enumerate() {
                    digits[2 * i] = b >> 4;
                    digits[2 * i + 1] = b & 15;
                }
                RangeKey {
                    family: 1,
                    len: 16,
                    digits,
                }
            }
        }
    }

    pub fn digits(&self) -> &[u8] {
        &self.digits[..self.len as usize]
    }

    /// The three cap levels (/8, /16, /24 for IPv4; /32, /48, /64 for IPv6) as
    /// (level index, prefix value) pairs, for the shared counters in `caps.rs`.
    pub fn cap_prefixes(&self) -> [(usize, u64); 3] {
        let depths: [usize; 3] = if self.family == 0 {
            [2, 4, 6]
        } else {
            [8, 12, 16]
        };
        let mut out = [(0usize, 0u64); 3];
        for (level, d) in depths.iter().enumerate() {
            let mut v: u64 = u64::from(self.family) << 63;
            for &x in &self.digits[..*d] {
                v = (v << 4) | u64::from(x);
            }
            // Keep the depth in the value so a /16 and a /24 never share a slot.
            out[level] = (level, v ^ ((*d as u64) << 56));
        }
        out
    }

    /// The address itself as one value (IPv4: the host; IPv6: its /64, all 64
    /// bits, so the family is mixed in rather than given a bit), for the cap on
    /// one address in `caps.rs`.
    pub fn address_value(&self) -> u64 {
        let v = self
            .digits()
            .iter()
            .fold(0u64, |v, &x| (v << 4) | u64::from(x));
        v ^ u64::from(self.family).wrapping_mul(0xA5A5_5A5A_C3C3_3C3D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_nibbles_and_mapped_addresses() {
        let k = RangeKey::of("192.168.1.2".parse().unwrap());
        assert_eq!(k.digits(), [12, 0, 10, 8, 0, 1, 0, 2]);
        let m = RangeKey::of("::ffff:192.168.1.2".parse().unwrap());
        assert_eq!(k, m);
    }

    #[test]
    fn v6_is_aggregated_to_its_64() {
        let a = RangeKey::of("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = RangeKey::of("2001:db8:1:2:ffff::9".parse().unwrap());
        assert_eq!(a, b);
        assert_eq!(a.len, 16);
        assert_ne!(a, RangeKey::of("2001:db8:1:3::1".parse().unwrap()));
    }

    #[test]
    fn cap_prefixes_differ_by_level_and_family() {
        let k = RangeKey::of("10.1.2.3".parse().unwrap());
        let p = k.cap_prefixes();
        assert_ne!(p[0].1, p[1].1);
        let j = RangeKey::of("10.1.9.9".parse().unwrap());
        assert_eq!(k.cap_prefixes()[1], j.cap_prefixes()[1]); // same /16
        assert_ne!(k.cap_prefixes()[2], j.cap_prefixes()[2]); // other /24
    }
}

/// An address range written `ADDR/LEN` (IPv4 or IPv6), or a single address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: u128,
    len: u8,
    v4: bool,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let ip: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: not ADDR/LEN"))?;
        let (bits, v4) = bits(ip);
        let max = if v4 { 32 } else { 128 };
        let len = match l {
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| format!("{s:?}: prefix length must be 0..={max}"))?,
            None => max,
        };
        Ok(Cidr {
            net: bits & mask(len, v4),
            len,
            v4,
        })
    }

    /// A setting's list of ranges; errors name the setting (`what: "x": ...`).
    pub fn parse_list(list: &[String], what: &str) -> Result<Vec<Cidr>, String> {
        list.iter()
            .map(|c| Cidr::parse(c).map_err(|e| format!("{what}: {e}")))
            .collect()
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let (bits, v4) = bits(ip);
        v4 == self.v4 && bits & mask(self.len, v4) == self.net
    }

    /// (prefix length, is IPv4, masked address): a key for indexing ranges.
    pub fn parts(&self) -> (u8, bool, u128) {
        (self.len, self.v4, self.net)
    }
}

/// An address as a number and whether it is IPv4 (IPv4-mapped IPv6 counts as
/// IPv4), for code that keys or masks addresses the way [`Cidr`] does.
pub fn addr_bits(ip: IpAddr) -> (u128, bool) {
    bits(ip)
}

/// The mask of a `len`-bit prefix of an IPv4 (`v4`) or IPv6 address.
pub fn prefix_mask(len: u8, v4: bool) -> u128 {
    mask(len, v4)
}

/// An address as a number and whether it is IPv4 (IPv4-mapped IPv6 counts as IPv4).
fn bits(ip: IpAddr) -> (u128, bool) {
    match ip {
        IpAddr::V4(v) => (u128::from(u32::from(v)), true),
        IpAddr::V6(v) => match v.to_ipv4_mapped() {
            Some(v4) => (u128::from(u32::from(v4)), true),
            None => (u128::from(v), false),
        },
    }
}

/// The network mask of a `len`-bit prefix, in the low 32 bits for IPv4.
fn mask(len: u8, v4: bool) -> u128 {
    let max = if v4 { 32 } else { 128 };
    if len == 0 {
        0
    } else {
        (u128::MAX << (max - len)) & if v4 { 0xffff_ffff } else { u128::MAX }
    }
}

#[cfg(test)]
mod cidr_tests {
    use super::*;

    #[test]
    fn cidrs() {
        let c = Cidr::parse("127.0.0.0/8").unwrap();
        assert!(c.contains("127.66.1.2".parse().unwrap()));
        assert!(c.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!c.contains("128.0.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let one = Cidr::parse("::1").unwrap();
        assert!(one.contains("::1".parse().unwrap()));
        assert!(!one.contains("::2".parse().unwrap()));
        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("nonsense/8").is_err());
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
    }
}
