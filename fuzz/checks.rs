//! What each fuzz target asserts, one function per target, shared by the fuzz targets
//! (`fuzz_targets/*.rs`) and by `cargo test` (`crates/sluice/tests/fuzz_regressions.rs`),
//! which replays every input kept under `fuzz/regressions/TARGET/`. An input that
//! once failed goes there, named after what it guards, so it can never fail again.
#![allow(dead_code)]

use sluice_http::proxy::{parse, Proxied, V2_MAX};
use sluice_http::range::{evaluate, RangeResult};
use sluice_http::{Limits, Parsed};
use sluice_rules::{Format, LoadOptions, Request, RuleSet};
use sluicecc::proto::{decode, HEADER_LEN, MAX_REQUEST};

/// Any text as a config file: reading it never panics, and a refusal names the
/// file (`f.toml:LINE: key: why`, or `f.toml: ...` for what has no line), so an
/// operator is always told where to look. An accepted config's caps and
/// fractions are in their bounds.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match sluice_config::Config::parse(text, "f.toml") {
        Ok(c) => {
            let k = &c.condition;
            for f in [k.cap_8, k.cap_16, k.cap_24, k.max_incomplete] {
                assert!(f > 0.0 && f <= 1.0, "{f}");
            }
            assert!(!c.server.listen.is_empty());
        }
        Err(e) => {
            let m = e.to_string();
            assert!(m.starts_with("f.toml"), "{m:?}");
        }
    }
    // The same text as a `types_file` (mime.types): every pair it gives is an
    // extension the table can hold and a type that is one header value; an error
    // names a line of the text.
    match sluice_config::types_file::parse(text) {
        Ok(pairs) => {
            for (ext, ty) in pairs {
                assert!((1..=32).contains(&ext.len()), "{ext:?}");
                assert!(ext
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'/' && b != b'.'));
                assert!(!ext.bytes().any(|b| b.is_ascii_uppercase()), "{ext:?}");
                assert!(
                    ty.contains('/') && ty.bytes().all(|b| (0x20..0x7f).contains(&b)),
                    "{ty:?}"
                );
            }
        }
        Err((line, _)) => assert!(line >= 1 && line <= text.lines().count(), "{line}"),
    }
}

/// Any bytes as a handoff message from a front process (`sluice serve --from`
/// decodes these): never a panic; a message accepted is exactly a header and the
/// request length it declares, within the protocol's bound.
pub fn handoff(data: &[u8]) {
    if decode(data).is_ok() {
        assert!(data.len() >= HEADER_LEN && data.len() - HEADER_LEN <= MAX_REQUEST);
        let declared = u32::from_le_bytes(data[4..8].try_into().unwrap()) as usize;
        assert_eq!(declared, data.len() - HEADER_LEN);
    }
}

/// The request-head parser must never panic, and a complete head must fit the input.
pub fn parse_head(data: &[u8]) {
    if let Ok(Parsed::Complete(h)) = sluice_http::parse_head(data, &Limits::default()) {
        assert!(h.head_len <= data.len());
        assert!(h.path.starts_with('/') || h.path == "*");
        // No fragment, space or control reaches a target (the rest of visible
        // ASCII may: browsers send it).
        assert!(
            !h.target
                .bytes()
                .any(|b| b == b'#' || b <= b' ' || b == 0x7f),
            "{:?}",
            h.target
        );
        // Repeated negotiation fields are joined from the raw lines.
        let _ = (h.accept(), h.accept_encoding());
    }
}

/// Path normalization never yields a climbing path; Range evaluation never yields a
/// range outside the representation, nor parts that overlap or add up to more than
/// the file; a generated `Location` is never a network-path reference and never holds
/// a byte a header may not.
pub fn path_range(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(n) = sluice_static::path::normalize(s, true) {
        assert!(!n.rel.starts_with('/'));
        assert!(!n.rel.split('/').any(|x| x == ".." || x == "."));
        // What reaches the kernel: the bytes of the text form, with the same
        // guarantees, and no NUL (a backslash is a name's byte on Linux).
        let b = sluice_static::path::fs_bytes(&n.rel);
        assert!(!b.starts_with(b"/"));
        assert!(!b.split(|&c| c == b'/').any(|x| x == b".." || x == b"."));
        assert!(!b.contains(&0), "{b:?}");
    }
    let len = data.len() as u64 * 977;
    if let RangeResult::Partial(rs) = evaluate(s, len, 16) {
        let mut total = 0u64;
        for (i, r) in rs.iter().enumerate() {
            assert!(r.start <= r.end && r.end < len);
            if i > 0 {
                assert!(r.start > rs[i - 1].end, "parts overlap: {rs:?}");
            }
            total += r.len();
        }
        assert!(total <= len, "ranges amplify: {rs:?}");
    }
    let loc = sluice_http::response::safe_location(s);
    assert!(!loc.starts_with("//") && !loc.starts_with("/\\"), "{loc}");
    assert!(loc.bytes().all(|b| b > b' ' && b < 0x7f), "{loc:?}");
}

/// Any bytes at the start of a PROXY-protocol connection: the parser never panics,
/// never claims more bytes than it was given, and a complete header's length fits
/// the format's bounds.
pub fn proxy_header(data: &[u8]) {
    if let Ok(Proxied::Done { len, .. }) = parse(data) {
        assert!(len <= data.len() && len <= V2_MAX);
    }
    // Fed a byte at a time, the answer for the whole never changes once complete.
    if let Ok(Proxied::Done { len, source }) = parse(data) {
        assert_eq!(parse(&data[..len]), Ok(Proxied::Done { len, source }));
    }
}

/// Any Apache-syntax text either loads or gives an error; a loaded set answers the
/// same through the compiled index as through the linear reference.
pub fn rules_apache(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let (rules, path) = s.split_once('\u{1}').unwrap_or((s, "/a/b.html"));
    if !path.starts_with('/') {
        return;
    }
    if let Ok(set) = RuleSet::from_str(
        rules,
        "fuzz.conf",
        Format::Apache,
        &LoadOptions {
            lenient: true,
            ..Default::default()
        },
    ) {
        // Each lookup with a record of its own of what the rules set (`E=`,
        // `T=`, `CO=`; `%{ENV:…}` reads it): both must set the same.
        let ask = |linear: bool| {
            let fx = std::cell::RefCell::new(sluice_rules::Effects::default());
            let req = Request {
                path,
                effects: Some(&fx),
                ..Default::default()
            };
            let o = if linear {
                set.lookup_linear(&req)
            } else {
                set.lookup(&req)
            };
            (o, format!("{:?}", fx.into_inner()))
        };
        assert_eq!(ask(false), ask(true));
    }
}

/// Any native-syntax text (with the errant-client options) either loads or gives an
/// error naming the line; a loaded set answers the same through the compiled indexes
/// (path, user agent, address) as through the linear reference. No `substitute`
/// file can be read: it names nothing that exists, so such lines fail to load.
pub fn rules_native(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = s.split('\u{1}');
    let rules = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("/a/b.html");
    let ua = parts.next().unwrap_or("Wget/1.21");
    if !path.starts_with('/') || rules.contains("substitute") {
        return;
    }
    if let Ok(set) = RuleSet::from_str(rules, "fuzz.rules", Format::Native, &LoadOptions::default())
    {
        // Rate conditions count each lookup, so compare on a set without them.
        if rules.contains("rate") || rules.contains("repeat=") {
            let _ = set.lookup(&Request {
                path,
                user_agent: Some(ua),
                ..Default::default()
            });
            return;
        }
        for addr in ["10.1.2.3", "2001:db8::1", "192.0.2.9"] {
            let req = Request {
                path,
                user_agent: Some(ua),
                remote_addr: addr.parse().ok(),
                method: "GET",
                ..Default::default()
            };
            assert_eq!(set.lookup(&req), set.lookup_linear(&req));
        }
    }
}

/// Any bytes as requests against kept answers (`sluice_static::answers`): the input
/// is several buffers split at 0xff bytes, each looked up and, on a miss, offered
/// twice (admitted). Never a panic, and an answer comes back only for a buffer that
/// starts with exactly the head it was kept for (each answer carries its key here):
/// a client's bytes can never be answered with another request's answer.
pub fn kept_answers(data: &[u8]) {
    use sluice_static::answers::{Answer, AnswerCache};
    let now = std::time::Instant::now();
    let until = now + std::time::Duration::from_secs(1);
    let mut c: AnswerCache<Vec<u8>> = AnswerCache::new(4);
    for buf in data.split(|&b| b == 0xff) {
        match c.lookup(buf, now) {
            Ok((p, a)) => {
                assert!(p.end <= buf.len());
                assert_eq!(&a.extra[..], &buf[..p.end]);
                assert_eq!(a.wire().0, b"HTTP/1.1 200 OK\r\n\r\n");
            }
            Err(Some(p)) => {
                assert!(p.end <= buf.len() && buf[..p.end].ends_with(b"\r\n\r\n"));
                for _ in 0..2 {
                    c.offer(buf, p, until, now, || {
                        let head = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
                        Answer::new(200, head, 0..0, None, "/".into(), buf[..p.end].to_vec())
                    });
                }
            }
            Err(None) => {}
        }
    }
}
