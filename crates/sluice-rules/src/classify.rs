//! Errant-client classification (seed 000's countermeasures): the extra conditions
//! a native rule line may carry (`ua=`, `addr=`, `method=`, `header=`, `rate=`,
//! `rate24=`, `repeat=`) and the answers it may give (`deny`, `drop`, `substitute`,
//! `tarpit`, `loop`, `oversize`, `limit`, `pass`). docs/RULES.md has the syntax.
//!
//! Owns checking the conditions against a request and describing the answer; the
//! server carries the answers out (it owns sockets and timers). Conditions are
//! checked cheapest first, and rate conditions last, so a request is counted only
//! by the rules whose other conditions it meets. Rules without these options pay
//! one `Option` test.

use crate::pattern::RegexPattern;
use crate::rates::RateTable;
use crate::request::Request;
use sluice_condition::addr::{addr_bits, prefix_mask};
use sluice_condition::Cidr;
use std::sync::Arc;

/// What a rate condition counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `rate=`: requests by this client address.
    Addr,
    /// `rate24=`: by its /24 (IPv6: /64).
    Net,
    /// `repeat=`: the same URL by the same address.
    Repeat,
}

#[derive(Debug, Clone)]
pub struct RateCond {
    pub scope: Scope,
    /// More than this many in the window: the condition holds.
    pub max: u64,
    pub window_ms: u64,
    /// Distinguishes this rule's counts from every other rule's.
    pub seed: u32,
}

/// The classification conditions of one rule.
#[derive(Debug, Default)]
pub struct Classify {
    pub ua: Option<Box<RegexPattern>>,
    pub addrs: Vec<Cidr>,
    pub methods: Vec<String>,
    pub headers: Vec<(String, Box<RegexPattern>)>,
    pub rates: Vec<RateCond>,
    pub table: Option<Arc<RateTable>>,
    /// Found through [`crate::classindex`], not the path index.
    pub indexed: bool,
}

/// Why a classification did not hold, for `sluice rules explain`.
pub type Why = &'static str;

/// The result of the conditions: `Err(why)` if one fails, else whether the rate
/// conditions (if any) were exceeded.
impl Classify {
    pub fn check(&self, req: &Request) -> Result<bool, Why> {
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m == req.method) {
            return Err("method differs");
        }
        if !self.addrs.is_empty() {
            match req.remote_addr {
                Some(a) if self.addrs.iter().any(|n| n.contains(a)) => {}
                _ => return Err("addr not in the list"),
            }
        }
        if let Some(re) = &self.ua {
            let ua = req.user_agent.unwrap_or("");
            if !re.regex().is_some_and(|r| r.is_match(ua.as_bytes())) {
                return Err("ua does not match");
            }
        }
        for (name, re) in &self.headers {
            let v = req.header(name).unwrap_or("");
            if !re.regex().is_some_and(|r| r.is_match(v.as_bytes())) {
                return Err("header does not match");
            }
        }
        if self.rates.is_empty() {
            return Ok(false);
        }
        let Some(table) = &self.table else {
            return Ok(false);
        };
        let ip = req.remote_addr.map(addr_bits).unwrap_or((0, true));
        let mut exceeded = true;
        // A request asked again (it waited for the disk) was counted the first time.
        let add = !req.counted;
        for r in &self.rates {
            let n = match r.scope {
                Scope::Addr => table.hit((r.seed, ip), r.window_ms, add),
                Scope::Net => {
                    let net = ip.0 & prefix_mask(if ip.1 { 24 } else { 64 }, ip.1);
                    table.hit((r.seed, net, ip.1), r.window_ms, add)
                }
                Scope::Repeat => table.hit((r.seed, ip, req.path, req.query), r.window_ms, add),
            };
            exceeded &= n > r.max;
        }
        Ok(exceeded)
    }
}

/// An answer to an errant client. Every one is bounded in time and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Errant {
    /// 403 with a short body.
    Deny,
    /// Close without any response.
    Drop,
    /// 200 with these bytes instead of the resource.
    Substitute {
        body: Arc<[u8]>,
        ctype: &'static str,
    },
    /// 200, then `text` + newline every `every_ms`, for at most `for_ms`.
    Tarpit {
        text: Arc<str>,
        every_ms: u64,
        for_ms: u64,
    },
    /// 302 to the same path with a fresh random query.
    Loop,
    /// A head promising `Content-Length: 10^15`, then a slow body cut at `bytes` or
    /// `for_ms`, whichever comes first.
    Oversize { bytes: u64, for_ms: u64 },
    /// 429 with Retry-After (the window, in seconds).
    Limited { retry_after_s: u64 },
}

pub fn parse_window(v: &str) -> Result<(u64, u64), String> {
    let (n, w) = v
        .split_once('/')
        .ok_or_else(|| format!("{v:?}: expected N/WINDOW, e.g. 100/10s"))?;
    let n: u64 = n.parse().map_err(|_| format!("{v:?}: N is not a number"))?;
    let w = parse_ms(w)?;
    if w == 0 {
        return Err(format!("{v:?}: the window must be longer than 0"));
    }
    Ok((n, w))
}

/// `500ms`, `10s`, `5m`, `1h`, or a number of seconds.
pub fn parse_ms(v: &str) -> Result<u64, String> {
    let (num, mult) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1000)
    } else if let Some(n) = v.strip_suffix('m') {
        (n, 60_000)
    } else if let Some(n) = v.strip_suffix('h') {
        (n, 3_600_000)
    } else {
        (v, 1000)
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|ms| *ms <= 86_400_000)
        .ok_or_else(|| format!("{v:?}: a duration like 500ms, 10s, 5m (at most a day)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn nets() {
        let n = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(n.contains("10.1.200.3".parse().unwrap()));
        assert!(!n.contains("10.2.0.1".parse().unwrap()));
        assert!(n.contains("::ffff:10.1.0.9".parse().unwrap()));
        let n = Cidr::parse("2001:db8::/32").unwrap();
        assert!(n.contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!n.contains("10.1.0.1".parse().unwrap()));
        assert!(Cidr::parse("1.2.3.4")
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("9.9.9.9".parse().unwrap()));
        assert!(Cidr::parse("1.2.3.4/33").is_err());
        assert_eq!(parse_window("100/10s"), Ok((100, 10_000)));
        assert!(parse_window("100").is_err());
        assert_eq!(parse_ms("250ms"), Ok(250));
    }
}
