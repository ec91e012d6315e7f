//! Any native-syntax text (with the errant-client options) either loads or gives an
//! error naming the line; a loaded set answers the same through the compiled indexes
//! (path, user agent, address) as through the linear reference. No `substitute`
//! file can be read: it names nothing that exists, so such lines fail to load.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_rules::{Format, LoadOptions, Request, RuleSet};

fuzz_target!(|data: &[u8]| {
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
});
