//! `RuleSet::lookup_kept`: which decisions follow from the request's bytes alone
//! (and so may be kept by the server and answered again without the rules), and
//! which read the client's address, a count, the file system or chance.

use sluice_rules::{FileTests, Format, LoadOptions, Outcome, Request, RuleSet};

fn apache(text: &str) -> RuleSet {
    RuleSet::from_str(text, "kept.conf", Format::Apache, &LoadOptions::default()).unwrap()
}

fn native(text: &str) -> RuleSet {
    RuleSet::from_str(text, "kept.rules", Format::Native, &LoadOptions::default()).unwrap()
}

fn get<'a>(path: &'a str, addr: &str) -> Request<'a> {
    Request {
        path,
        host: Some("mirror.example"),
        user_agent: Some("curl/8"),
        remote_addr: Some(addr.parse().unwrap()),
        method: "GET",
        ..Default::default()
    }
}

/// (outcome is a pass, kept) for `path` from 10.0.0.1.
fn kept(s: &RuleSet, path: &str) -> (bool, bool) {
    let (o, _, k) = s.lookup_kept(&get(path, "10.0.0.1"));
    (o == Outcome::Pass, k)
}

#[test]
fn decisions_on_the_request_alone_are_kept() {
    let s = apache(
        "Redirect 301 /old /new\n\
         RewriteEngine On\n\
         RewriteCond %{HTTP_HOST} ^mirror\\.example$\n\
         RewriteCond %{HTTP_USER_AGENT} !wget\n\
         RewriteRule ^/a/(.*)$ /b/$1 [R=302]\n",
    );
    assert_eq!(kept(&s, "/f.bin"), (true, true), "a pass");
    assert_eq!(kept(&s, "/old/x"), (false, true), "a redirect");
    assert_eq!(
        kept(&s, "/a/x"),
        (false, true),
        "a redirect after two conditions"
    );
    // The same for `lookup_rule`, which it stands behind.
    let (o, rule, _) = s.lookup_kept(&get("/old/x", "10.0.0.1"));
    assert_eq!((o, rule), s.lookup_rule(&get("/old/x", "10.0.0.1")));
}

#[test]
fn the_clients_address_is_not_the_request() {
    // A condition on the address: not kept where that rule is tried, kept where
    // it is not a candidate.
    let s = apache(
        "RewriteEngine On\n\
         RewriteCond %{REMOTE_ADDR} ^10\\.\n\
         RewriteRule ^/inside/ /staff.html [R=302]\n\
         Redirect 301 /old /new\n",
    );
    assert_eq!(kept(&s, "/inside/x"), (false, false));
    let (o, _, k) = s.lookup_kept(&get("/inside/x", "192.0.2.1"));
    assert_eq!(
        (o, k),
        (Outcome::Pass, false),
        "a miss on the address is not kept either"
    );
    assert_eq!(kept(&s, "/f.bin"), (true, true));
    assert_eq!(kept(&s, "/old"), (false, true));
    // A target that names the address.
    let s = apache("RewriteEngine On\nRewriteRule ^/who$ /seen/%{REMOTE_ADDR} [R=302]\n");
    assert_eq!(kept(&s, "/who"), (false, false));
    assert_eq!(kept(&s, "/else"), (true, true));
    // `addr=` rules are found by the address: then every decision depends on who
    // asks, since another address has other candidates.
    let s = native("prefix / deny addr=10.0.0.0/8\nexact /old 301 /new\n");
    assert_eq!(kept(&s, "/f.bin"), (false, false));
    let (o, _, k) = s.lookup_kept(&get("/f.bin", "192.0.2.1"));
    assert_eq!((o, k), (Outcome::Pass, false));
    // `ua=` rules are found by the User-Agent: part of the request.
    let s = native("prefix / deny ua=BadBot\n");
    assert_eq!(kept(&s, "/f.bin"), (true, true));
}

#[test]
fn counts_files_and_chance_are_not_the_request() {
    // A rate condition counts every request it sees: kept, the count would stop.
    let s = native("prefix /api limit rate=3/10s\nprefix /dl deny repeat=50/1m\n");
    assert_eq!(kept(&s, "/api/x"), (false, false));
    assert_eq!(kept(&s, "/dl/x"), (true, false));
    assert_eq!(
        kept(&s, "/f.bin"),
        (true, true),
        "no rate rule is a candidate"
    );
    // `-f` reads the disk, whose answer may change without a reload: kept only
    // where the server's file cache answers it (and bounds the answer kept).
    let s = apache(
        "RewriteEngine On\n\
         RewriteCond %{REQUEST_FILENAME} !-f\n\
         RewriteRule ^/pages/(.*)$ /index.html [R=302]\n\
         RewriteCond %{REQUEST_FILENAME} -f\n\
         RewriteCond %{REMOTE_ADDR} ^10\\.\n\
         RewriteRule ^/inside/ /staff.html [R=302]\n",
    );
    assert_eq!(kept(&s, "/pages/a"), (false, false));
    assert_eq!(kept(&s, "/f.bin"), (true, true));
    #[derive(Debug)]
    struct Nothing;
    impl FileTests for Nothing {
        fn is(&self, _: &str, _: bool) -> bool {
            false
        }
    }
    let with_files = |path| {
        let req = Request {
            files: Some(&Nothing),
            root: Some(std::path::Path::new("/srv")),
            ..get(path, "10.0.0.1")
        };
        let (o, _, k) = s.lookup_kept(&req);
        (o == Outcome::Pass, k)
    };
    assert_eq!(
        with_files("/pages/a"),
        (false, true),
        "bounded by the files"
    );
    assert_eq!(
        with_files("/inside/x"),
        (true, false),
        "a rule reading the address besides the files"
    );
    // A `rnd:` map picks at random; a `txt:` map is fixed until a reload.
    let d = std::env::temp_dir().join(format!("sluice-kept-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("m.txt"), "/moved /new\n").unwrap();
    std::fs::write(d.join("m.rnd"), "m a.example|b.example\n").unwrap();
    let conf = d.join("r.conf");
    std::fs::write(
        &conf,
        "RewriteEngine On\nRewriteMap moved txt:m.txt\nRewriteMap mirrors rnd:m.rnd\n\
         RewriteCond ${moved:%{REQUEST_URI}} !^$\n\
         RewriteRule ^ ${moved:%{REQUEST_URI}} [R=301]\n\
         RewriteRule ^/dl/(.*)$ http://${mirrors:m}/$1 [R]\n",
    )
    .unwrap();
    let s = RuleSet::load_files(&[conf], &LoadOptions::default()).unwrap();
    assert_eq!(kept(&s, "/moved"), (false, true), "a txt: map's redirect");
    assert_eq!(kept(&s, "/f.bin"), (true, true), "the always rule, missed");
    assert_eq!(
        kept(&s, "/dl/x.iso"),
        (false, false),
        "a rnd: map's redirect"
    );
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn explain_says_whether_and_why_not() {
    let s = apache(
        "RewriteEngine On\n\
         RewriteCond %{REQUEST_FILENAME} !-f\n\
         RewriteRule ^/pages/(.*)$ /index.html [R=302]\n\
         Redirect 301 /old /new\n",
    );
    let out = s.explain(&get("/pages/a", "10.0.0.1"));
    assert!(
        out.contains("kept answers: yes, while `sluice serve`'s file cache trusts")
            && out.contains("kept.conf:3:")
            && out.contains("looks at the disk"),
        "{out}"
    );
    let out = s.explain(&get("/old", "10.0.0.1"));
    assert!(out.contains("kept answers: yes"), "{out}");
    let s = native("prefix / deny addr=10.0.0.0/8\n");
    let out = s.explain(&get("/f", "192.0.2.1"));
    assert!(
        out.contains("kept answers: no: some rule is found by the client's address"),
        "{out}"
    );
    let s = native("exact /api limit rate=3/10s\n");
    assert!(s
        .explain(&get("/api", "10.0.0.1"))
        .contains("counts requests"));
}

const PATHS: &[&str] = &["/a", "/b", "/a/b", "/c"];

fn apache_rule(kind: u8, p: usize) -> String {
    let p = PATHS[p % PATHS.len()];
    match kind % 6 {
        0 => format!("Redirect 301 {p} /to"),
        1 => format!("RewriteCond %{{REMOTE_ADDR}} ^10\\.\nRewriteRule ^{p} /lan [R=302]"),
        2 => format!("RewriteCond %{{HTTP_HOST}} ^a$\nRewriteRule ^{p} /host [R=302]"),
        3 => format!("RewriteRule ^{p}(.*)$ /who/%{{REMOTE_ADDR}}$1 [R=302]"),
        4 => format!("RedirectMatch 302 ^{p}(.*)$ /m$1"),
        _ => format!("RewriteCond %{{REMOTE_ADDR}} !^10\\.\nRewriteRule ^{p}$ - [F]"),
    }
}

fn native_rule(kind: u8, p: usize) -> String {
    let p = PATHS[p % PATHS.len()];
    match kind % 4 {
        0 => format!("prefix {p} 301 /to"),
        1 => format!("prefix {p} deny addr=10.0.0.0/8"),
        2 => format!("prefix {p} deny ua=BadBot"),
        _ => format!("exact {p} 410"),
    }
}

/// What a decision is, for comparing two lookups.
fn decide(s: &RuleSet, path: &str, host: &str, addr: &str) -> (Outcome, Option<u32>, bool) {
    let mut r = get(path, addr);
    r.host = Some(host);
    s.lookup_kept(&r)
}

proptest::proptest! {
    /// The soundness of keeping: a decision said to follow from the request alone
    /// is the decision every other client gets for the same request.
    #[test]
    fn a_kept_decision_is_every_clients_decision(
        rules in proptest::collection::vec((0u8..6, 0usize..4), 1..8),
        path in 0usize..4,
        tail in proptest::bool::ANY,
        host in proptest::bool::ANY,
    ) {
        let path = format!("{}{}", PATHS[path], if tail { "/x" } else { "" });
        let host = if host { "a" } else { "b" };
        let (apache_text, native_text): (Vec<_>, Vec<_>) = rules
            .iter()
            .map(|&(k, p)| (apache_rule(k, p), native_rule(k, p)))
            .unzip();
        for s in [
            apache(&(apache_text.join("\n") + "\n").replacen("Rewrite", "RewriteEngine On\nRewrite", 1)),
            native(&(native_text.join("\n") + "\n")),
        ] {
            let mine = decide(&s, &path, host, "10.0.0.1");
            let theirs = decide(&s, &path, host, "192.0.2.1");
            if mine.2 {
                proptest::prop_assert_eq!((&mine.0, mine.1), (&theirs.0, theirs.1));
            }
            if theirs.2 {
                proptest::prop_assert_eq!((&mine.0, mine.1), (&theirs.0, theirs.1));
            }
        }
    }
}

/// `%{TIME…}` reads the clock: a decision on it is not kept, and what it reads is
/// the time now in UTC, field by field, as the HTTP date says it.
#[test]
fn the_clock_is_read_and_not_kept() {
    let s = apache(
        "RewriteEngine On\n\
         RewriteCond %{TIME_YEAR} >2000\n\
         RewriteRule ^/year$ /y/%{TIME_YEAR}-%{TIME_MON}-%{TIME_DAY}/%{TIME_WDAY} [R=302,L]\n\
         RewriteRule ^/time$ /t/%{TIME} [R=302,L]\n",
    );
    assert_eq!(kept(&s, "/year"), (false, false));
    let before = httpdate::fmt_http_date(std::time::SystemTime::now());
    let Outcome::Redirect { location, .. } = s.lookup(&get("/year", "10.0.0.1")) else {
        panic!("the year is past 2000");
    };
    let after = httpdate::fmt_http_date(std::time::SystemTime::now());
    // `Tue, 08 Dec 2026 05:10:32 GMT` gives `/y/2026-12-08/2`.
    let want = |date: &str| {
        let f: Vec<&str> = date.split([' ', ',']).filter(|s| !s.is_empty()).collect();
        let mon = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ]
        .iter()
        .position(|m| *m == f[2])
        .unwrap()
            + 1;
        let wday = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
            .iter()
            .position(|d| *d == f[0])
            .unwrap();
        format!("/y/{}-{mon:02}-{}/{wday}", f[3], f[1])
    };
    assert!(
        location == want(&before) || location == want(&after),
        "{location} at {before}"
    );
    let Outcome::Redirect { location, .. } = s.lookup(&get("/time", "10.0.0.1")) else {
        panic!("no redirect");
    };
    let t = location.strip_prefix("/t/").unwrap();
    assert!(
        t.len() == 14 && t.bytes().all(|b| b.is_ascii_digit()),
        "{t}"
    );
    assert!(t.starts_with(&want(&after)[3..7]), "{t}");
}
