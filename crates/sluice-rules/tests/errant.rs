//! Errant-client classification (issue 9): conditions, answers, rates, explain.

use sluice_rules::classify::Errant;
use sluice_rules::{Format, LoadOptions, Outcome, Request, RuleSet};

fn set(text: &str) -> RuleSet {
    RuleSet::from_str(
        text,
        "errant.rules",
        Format::Native,
        &LoadOptions::default(),
    )
    .unwrap()
}

fn req<'a>(path: &'a str, ua: &'a str, addr: &str) -> Request<'a> {
    Request {
        path,
        user_agent: Some(ua),
        remote_addr: Some(addr.parse().unwrap()),
        method: "GET",
        ..Default::default()
    }
}

fn answer(o: Outcome) -> Option<Errant> {
    match o {
        Outcome::Answer { errant, .. } => errant,
        other => panic!("not an answer: {other:?}"),
    }
}

#[test]
fn conditions_all_hold_and_order_decides() {
    let s = set(r#"
# mirror checkers first: never touched by what follows
prefix /debian/project/trace  pass  ua="^MirrorManager"
prefix /  deny   ua="BadBot" addr=10.0.0.0/8,2001:db8::/32
prefix /  drop   method=POST,PUT
regex  \.iso$  loop  header=X-Loop:^yes$
prefix /  tarpit ua="wget" text="please contact the mirror admin" every=2s for=30s
"#);
    assert_eq!(
        set_lookup(&s, req("/x", "a BadBot/1.0", "10.9.9.9")),
        Some(Errant::Deny)
    );
    assert_eq!(
        set_lookup(&s, req("/x", "badbot", "2001:db8::1")),
        Some(Errant::Deny),
        "ua is case-insensitive"
    );
    assert!(
        matches!(s.lookup(&req("/x", "BadBot", "11.0.0.1")), Outcome::Pass),
        "addr not in list"
    );
    let mut post = req("/x", "curl", "1.2.3.4");
    post.method = "POST";
    assert_eq!(set_lookup(&s, post), Some(Errant::Drop));
    let mut h = req("/a.iso", "curl", "1.2.3.4");
    h.headers = b"Host: x\r\nx-loop: yes\r\n";
    assert_eq!(set_lookup(&s, h), Some(Errant::Loop));
    match set_lookup(&s, req("/pub/", "Wget/1.21", "1.2.3.4")) {
        Some(Errant::Tarpit {
            text,
            every_ms,
            for_ms,
        }) => {
            assert_eq!(
                (&*text, every_ms, for_ms),
                ("please contact the mirror admin", 2000, 30_000)
            )
        }
        o => panic!("{o:?}"),
    }
    // pass first: the checker is served normally even though it says wget.
    assert_eq!(
        set_lookup(
            &s,
            req("/debian/project/trace/x", "MirrorManager wget", "10.0.0.1")
        ),
        None
    );
}

fn set_lookup(s: &RuleSet, r: Request) -> Option<Errant> {
    let fast = s.lookup(&r);
    assert_eq!(fast, s.lookup_linear(&r));
    match fast {
        Outcome::Pass => None,
        o => answer(o),
    }
}

#[test]
fn rates_limit_and_repeat() {
    let s = set("prefix /api limit rate=3/10s\nprefix / deny repeat=2/1m\n");
    let r = req("/api/x", "c", "192.0.2.1");
    for _ in 0..3 {
        assert_eq!(answer(s.lookup(&r)), None, "under the rate: served");
    }
    assert_eq!(
        answer(s.lookup(&r)),
        Some(Errant::Limited { retry_after_s: 10 })
    );
    // Another address has its own count.
    assert_eq!(answer(s.lookup(&req("/api/x", "c", "192.0.2.2"))), None);
    // repeat: the same URL a third time within a minute is denied; others are not.
    let a = req("/pool/a.deb", "c", "192.0.2.9");
    assert!(matches!(s.lookup(&a), Outcome::Pass));
    assert!(matches!(s.lookup(&a), Outcome::Pass));
    assert_eq!(answer(s.lookup(&a)), Some(Errant::Deny));
    assert!(matches!(
        s.lookup(&req("/pool/b.deb", "c", "192.0.2.9")),
        Outcome::Pass
    ));
    assert_eq!(s.rate_memory(), 8 << 20);
}

/// A request the server asks the rules again (it waited for the disk) is counted
/// once: asked again, a rate condition looks without counting.
#[test]
fn a_request_asked_again_is_counted_once() {
    let s = set("prefix /api limit rate=2/10s\n");
    let first = req("/api/x", "c", "192.0.2.1");
    let again = Request {
        counted: true,
        ..first
    };
    for _ in 0..2 {
        assert_eq!(answer(s.lookup(&first)), None);
        for _ in 0..3 {
            assert_eq!(answer(s.lookup(&again)), None, "asked again, not counted");
        }
    }
    assert_eq!(
        answer(s.lookup(&first)),
        Some(Errant::Limited { retry_after_s: 10 })
    );
    assert_eq!(
        answer(s.lookup(&again)),
        Some(Errant::Limited { retry_after_s: 10 }),
        "looking sees the count"
    );
}

#[test]
fn substitute_with_a_fixed_date_and_explain_says_why() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("ntp.txt"), b"use a real NTP server\n").unwrap();
    let rules = d.path().join("e.rules");
    std::fs::write(
        &rules,
        "exact / substitute ntp.txt ua=\"^$\" date=\"Fri, 31 Dec 1999 23:59:59 GMT\"\nprefix / deny ua=evil\n",
    )
    .unwrap();
    let s = RuleSet::load_files(&[rules], &LoadOptions::default()).unwrap();
    match s.lookup(&req("/", "", "1.1.1.1")) {
        Outcome::Answer {
            errant: Some(Errant::Substitute { body, ctype }),
            date,
        } => {
            assert_eq!(&*body, b"use a real NTP server\n");
            assert_eq!(ctype, "text/plain; charset=utf-8");
            assert_eq!(date.as_deref(), Some("Fri, 31 Dec 1999 23:59:59 GMT"));
        }
        o => panic!("{o:?}"),
    }
    let e = s.explain(&req("/", "curl", "1.1.1.1"));
    assert!(e.contains("no: ua does not match"), "{e}");
    // A reload keeps this set only while the substitute's bytes are the same
    // (`inputs`), and the rules file's, and the options.
    let opts = LoadOptions::default();
    let files = [d.path().join("e.rules")];
    assert!(s.inputs().unchanged(&files, &opts));
    let salted = LoadOptions {
        rate_salt: 1,
        ..opts
    };
    assert!(!s.inputs().unchanged(&files, &salted));
    std::fs::write(d.path().join("ntp.txt"), b"use a real NTP server!\n").unwrap();
    assert!(!s.inputs().unchanged(&files, &opts));
}

#[test]
fn bad_lines_name_file_line_and_what() {
    for (text, want) in [
        ("prefix / deny ua=\"(\"\n", "bad regex"),
        ("prefix / limit\n", "limit needs a rate"),
        ("prefix / deny rate=5\n", "N/WINDOW"),
        ("prefix / deny addr=1.2.3.4/40\n", "prefix length"),
        ("prefix / deny date=yesterday\n", "HTTP date"),
        (
            "prefix / 301 /x ua=bot\n",
            "go with the errant-client actions",
        ),
        ("prefix / tarpit text=\"unterminated\n", "unterminated"),
        ("prefix / deny colour=red\n", "unknown option"),
    ] {
        let e = RuleSet::from_str(text, "e.rules", Format::Native, &LoadOptions::default())
            .err()
            .unwrap_or_else(|| panic!("accepted {text:?}"))
            .to_string();
        assert!(
            e.starts_with("e.rules:1:") && e.contains(want),
            "{text:?}: {e}"
        );
    }
}

/// The user-agent and address indexes find exactly what trying every rule in order
/// finds, whatever the mix of rules and requests.
#[test]
fn class_index_agrees_with_the_linear_lookup() {
    let mut text = String::new();
    let agents = [
        "BadBot",
        "wget",
        "curl",
        "Mozilla",
        "python-requests",
        "Go-http",
        "libwww",
        "Java",
    ];
    for i in 0..400 {
        match i % 5 {
            0 => text.push_str(&format!(
                "prefix / deny ua=\"{}/{}\"\n",
                agents[i % 8],
                i % 7
            )),
            1 => text.push_str(&format!(
                "prefix /p{} drop addr=10.{}.0.0/16\n",
                i % 3,
                i % 50
            )),
            2 => text.push_str(&format!(
                "regex ^/r{}/ loop ua=\"^{}\" \n",
                i % 4,
                agents[(i / 5) % 8]
            )),
            3 => text.push_str(&format!(
                "prefix / deny addr=2001:db8:{:x}::/48,192.0.2.{}\n",
                i,
                i % 200
            )),
            _ => text.push_str(&format!("exact /e{} 301 /f{}\n", i % 9, i)),
        }
    }
    let s = set(&text);
    assert!(
        s.summary().contains("found by user agent or address"),
        "{}",
        s.summary()
    );
    let mut checked = 0;
    for i in 0..3000u32 {
        let path = ["/", "/p0/x", "/p1/y", "/r2/z", "/e3", "/r1/", "/p2"][(i % 7) as usize];
        let ua = format!("{}/{} (x)", agents[(i % 8) as usize], i % 9);
        let addr = match i % 4 {
            0 => format!("10.{}.3.4", i % 60),
            1 => format!("2001:db8:{:x}::9", i % 450),
            2 => format!("192.0.2.{}", i % 250),
            _ => "203.0.113.7".to_string(),
        };
        let r = req(path, &ua, &addr);
        assert_eq!(s.lookup(&r), s.lookup_linear(&r), "{path} {ua} {addr}");
        checked += 1;
    }
    assert_eq!(checked, 3000);
}

/// The shipped example loads, and its exemptions come before its countermeasures.
#[test]
fn the_example_file_loads_and_exempts_checkers_first() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/errant.rules");
    let s = RuleSet::load_files(&[path], &LoadOptions::default()).unwrap();
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    // A MirrorManager HEAD, even from a range that is dropped, is served.
    assert!(matches!(
        s.lookup(&req("/fedora/x.rpm", "MirrorManager/1.0", "198.51.100.7")),
        Outcome::Answer { errant: None, .. }
    ));
    // apt's InRelease, even from wget, is served.
    assert!(matches!(
        s.lookup(&req(
            "/debian/dists/bookworm/InRelease",
            "Wget/1.21",
            "203.0.113.1"
        )),
        Outcome::Answer { errant: None, .. }
    ));
    assert_eq!(
        answer(s.lookup(&req("/x", "curl", "198.51.100.7"))),
        Some(Errant::Drop)
    );
    assert_eq!(
        answer(s.lookup(&req("/x", "EvilScraper/2", "203.0.113.1"))),
        Some(Errant::Deny)
    );
}
