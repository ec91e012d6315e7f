//! Apache behaviours, case by case (data-driven): what each directive and flag does
//! to the location, the query string and the status.

use sluice_rules::{Format, LoadOptions, Outcome, Request, RuleSet};

fn run(rules: &str, path: &str, query: Option<&str>, host: Option<&str>) -> Outcome {
    let set = RuleSet::from_str(rules, "t.conf", Format::Apache, &LoadOptions::default()).unwrap();
    let req = Request {
        path,
        query,
        host,
        ..Default::default()
    };
    let fast = set.lookup(&req);
    assert_eq!(fast, set.lookup_linear(&req));
    fast
}

fn redirect(status: u16, loc: &str) -> Outcome {
    Outcome::Redirect {
        status,
        location: loc.into(),
    }
}

#[test]
fn cases() {
    let on = "RewriteEngine On\n";
    // (rules, path, query, host, expected)
    type Case<'a> = (String, &'a str, Option<&'a str>, Option<&'a str>, Outcome);
    let cases: Vec<Case> = vec![
        ("Redirect /old /new".into(), "/old/a/b", None, None, redirect(302, "/new/a/b")),
        ("Redirect permanent /old http://x.example/new".into(), "/old", Some("q=1"), None, redirect(301, "http://x.example/new?q=1")),
        ("Redirect 301 /old /new".into(), "/older", None, None, Outcome::Pass),
        ("RedirectPermanent /a /b".into(), "/a", None, None, redirect(301, "/b")),
        ("RedirectTemp /a /b".into(), "/a", None, None, redirect(302, "/b")),
        ("Redirect gone /dead".into(), "/dead/x", None, None, Outcome::Gone),
        ("Redirect 410 /dead".into(), "/dead", None, None, Outcome::Gone),
        ("RedirectMatch 301 ^/img/(.*)\\.gif$ /png/$1.png".into(), "/img/a/b.gif", None, None, redirect(301, "/png/a/b.png")),
        ("RedirectMatch ^/x$ /y".into(), "/x", None, None, redirect(302, "/y")),
        (format!("{on}RewriteRule ^/a$ /b [R=301,L]"), "/a", Some("k=v"), None, redirect(301, "/b?k=v")),
        (format!("{on}RewriteRule ^/a$ /b?n=1 [R]"), "/a", Some("k=v"), None, redirect(302, "/b?n=1")),
        (format!("{on}RewriteRule ^/a$ /b?n=1 [R,QSA]"), "/a", Some("k=v"), None, redirect(302, "/b?n=1&k=v")),
        (format!("{on}RewriteRule ^/a$ /b? [R]"), "/a", Some("k=v"), None, redirect(302, "/b")),
        (format!("{on}RewriteRule ^/a$ /b [L]"), "/a", Some("k=v"), None, Outcome::Rewrite { path: "/b".into(), query: Some("k=v".into()) }),
        (format!("{on}RewriteRule ^/a$ http://o.example/b [L]"), "/a", None, None, redirect(302, "http://o.example/b")),
        (format!("{on}RewriteRule ^/A$ /b [NC,R=308]"), "/a", None, None, redirect(308, "/b")),
        (format!("{on}RewriteRule ^/a$ /b [R=308]"), "/A", None, None, Outcome::Pass),
        (format!("{on}RewriteRule ^/s/(.*)$ /t/$1 [R]"), "/s/a%20b", None, None, redirect(302, "/t/a%2520b")),
        (format!("{on}RewriteRule ^/s/(.*)$ /t/$1 [R,NE]"), "/s/a%20b", None, None, redirect(302, "/t/a%20b")),
        (format!("{on}RewriteRule ^/p - [F]"), "/p/x", None, None, Outcome::Forbidden),
        (format!("{on}RewriteRule ^/g - [G]"), "/g", None, None, Outcome::Gone),
        (format!("{on}RewriteRule ^/keep - [L]\nRewriteRule ^/keep /other [R]"), "/keep", None, None, Outcome::Pass),
        (format!("{on}RewriteRule ^old/(.*)$ /new/$1 [R=301]"), "/old/x", None, None, redirect(301, "/new/x")),
        // Conditions: AND, OR, negation, %N back-references.
        (format!("{on}RewriteCond %{{HTTP_HOST}} ^www\\.(.*)$ [NC]\nRewriteRule ^/(.*)$ http://%1/$1 [R=301]"), "/p", None, Some("WWW.example.org"), redirect(301, "http://example.org/p")),
        (format!("{on}RewriteCond %{{HTTP_HOST}} ^www\\. [NC]\nRewriteRule ^/(.*)$ /w [R]"), "/p", None, Some("example.org"), Outcome::Pass),
        (format!("{on}RewriteCond %{{QUERY_STRING}} a=1 [OR]\nRewriteCond %{{QUERY_STRING}} b=2\nRewriteRule ^/q$ /hit [R]"), "/q", Some("b=2"), None, redirect(302, "/hit?b=2")),
        (format!("{on}RewriteCond %{{QUERY_STRING}} a=1 [OR]\nRewriteCond %{{QUERY_STRING}} b=2\nRewriteRule ^/q$ /hit [R]"), "/q", Some("c=3"), None, Outcome::Pass),
        (format!("{on}RewriteCond %{{QUERY_STRING}} !^$\nRewriteRule ^/q$ /hit? [R]"), "/q", Some("x"), None, redirect(302, "/hit")),
        (format!("{on}RewriteCond %{{QUERY_STRING}} !^$\nRewriteRule ^/q$ /hit? [R]"), "/q", None, None, Outcome::Pass),
        // mod_rewrite runs before mod_alias whatever the file order.
        (format!("Redirect /a /alias\n{on}RewriteRule ^/a$ /rewrite [R]"), "/a", None, None, redirect(302, "/rewrite")),
        // RewriteEngine off (the default): RewriteRules are ignored, as Apache does.
        ("RewriteRule ^/a$ /b [R]".into(), "/a", None, None, Outcome::Pass),
        // Maps.
        (format!("{on}RewriteMap lc int:tolower\nRewriteRule ^/(.*)$ /${{lc:$1}} [R]"), "/ABC", None, None, redirect(302, "/abc")),
    ];
    for (i, (rules, path, q, host, want)) in cases.into_iter().enumerate() {
        assert_eq!(run(&rules, path, q, host), want, "case {i}: {rules}");
    }
}

#[test]
fn txt_and_rnd_maps_from_files() {
    let d = std::env::temp_dir().join(format!("sluice-maps-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("m.txt"),
        "# comment\nold new-page\nold second\nx y\n",
    )
    .unwrap();
    std::fs::write(d.join("m.rnd"), "mirror a.example|b.example\n").unwrap();
    let conf = d.join("r.conf");
    std::fs::write(
        &conf,
        "RewriteEngine On\nRewriteMap pages txt:m.txt\nRewriteMap mirrors rnd:m.rnd\n\
         RewriteRule ^/p/(.*)$ /${pages:$1|missing} [R=301]\n\
         RewriteRule ^/dl/(.*)$ http://${mirrors:mirror}/$1 [R]\n",
    )
    .unwrap();
    let set = RuleSet::load_files(&[conf], &LoadOptions::default()).unwrap();
    let get = |p: &str| {
        set.lookup(&Request {
            path: p,
            ..Default::default()
        })
    };
    assert_eq!(get("/p/old"), redirect(301, "/new-page"));
    assert_eq!(get("/p/zzz"), redirect(301, "/missing"));
    // rnd: both choices come up, in roughly equal shares (400 draws: each side's
    // count is far from 0 and from 400 unless the choice is not random).
    let (mut a, mut b) = (0, 0);
    for _ in 0..400 {
        match get("/dl/f.iso") {
            Outcome::Redirect { location, .. } if location == "http://a.example/f.iso" => a += 1,
            Outcome::Redirect { location, .. } if location == "http://b.example/f.iso" => b += 1,
            o => panic!("{o:?}"),
        }
    }
    assert!(a > 120 && b > 120, "rnd choices: a {a}, b {b}");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn errors_name_file_and_line() {
    let opts = LoadOptions::default();
    let e = RuleSet::from_str(
        "RewriteEngine On\n\nRewriteRule ^/a /b [P]\n",
        "x.conf",
        Format::Apache,
        &opts,
    )
    .err()
    .unwrap();
    assert_eq!(
        e.to_string(),
        "x.conf:3: RewriteRule flag [p] is not supported (use --lenient to skip it with a warning)"
    );
    let e = RuleSet::from_str("ProxyPass / http://x/\n", "x.conf", Format::Apache, &opts)
        .err()
        .unwrap();
    assert!(
        e.to_string().starts_with("x.conf:1: directive ProxyPass"),
        "{e}"
    );
    let e = RuleSet::from_str(
        "RedirectMatch 301 ^/(a /b\n",
        "x.conf",
        Format::Apache,
        &opts,
    )
    .err()
    .unwrap();
    assert!(e.to_string().starts_with("x.conf:1: bad regex"), "{e}");
    let e = RuleSet::from_str("exact /a 299 /b\n", "x.rules", Format::Native, &opts)
        .err()
        .unwrap();
    assert!(e.to_string().starts_with("x.rules:1:"), "{e}");
    // Lenient: skipped with a warning, the rest loads.
    let set = RuleSet::from_str(
        "ProxyPass / http://x/\nRewriteEngine On\nRewriteCond %{HTTP_HOST} x [NV]\nRewriteRule ^/a /b [R]\nRedirect /c /d\n",
        "x.conf",
        Format::Apache,
        &LoadOptions { lenient: true },
    )
    .unwrap();
    assert_eq!(
        set.len(),
        1,
        "the rule whose condition was skipped is skipped too"
    );
    assert_eq!(set.warnings.len(), 3, "{:?}", set.warnings);
}

#[test]
fn file_tests_remote_addr_and_end() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("exists.html"), "x").unwrap();
    std::fs::create_dir(root.path().join("dir")).unwrap();
    let rules = "RewriteEngine On\n\
        RewriteCond %{REQUEST_FILENAME} -f\n\
        RewriteRule ^/(.*)\\.html$ /file/$1 [R]\n\
        RewriteCond %{REQUEST_FILENAME} -d\n\
        RewriteRule ^/(.*)$ /dir/$1 [R]\n\
        RewriteCond %{REQUEST_FILENAME} !-f\n\
        RewriteCond %{REMOTE_ADDR} ^192\\.0\\.2\\.\n\
        RewriteRule ^/(.*)$ /lab/$1 [R]\n\
        RewriteRule ^/stop$ - [END]\n\
        RewriteRule ^/stop$ /never [R]\n";
    let set = RuleSet::from_str(rules, "t.conf", Format::Apache, &LoadOptions::default()).unwrap();
    let run = |path: &str, addr: &str| {
        let req = Request {
            path,
            remote_addr: Some(addr.parse().unwrap()),
            root: Some(root.path()),
            ..Default::default()
        };
        let fast = set.lookup(&req);
        assert_eq!(fast, set.lookup_linear(&req), "{path}");
        fast
    };
    assert_eq!(
        run("/exists.html", "10.0.0.1"),
        redirect(302, "/file/exists")
    );
    assert_eq!(run("/missing.html", "10.0.0.1"), Outcome::Pass);
    assert_eq!(run("/dir", "10.0.0.1"), redirect(302, "/dir/dir"));
    assert_eq!(run("/nothing", "192.0.2.7"), redirect(302, "/lab/nothing"));
    assert_eq!(run("/nothing", "192.0.3.7"), Outcome::Pass);
    // -f/-d never look outside the root.
    assert_eq!(run("/../../etc/passwd.html", "10.0.0.1"), Outcome::Pass);
    assert_eq!(run("/stop", "10.0.0.1"), Outcome::Pass);
}

#[test]
fn native_options() {
    let rules = "exact /q 301 /t?n=1 qsa\n\
                 exact /r 301 /t?n=1\n\
                 exact /CaSe 302 /c nocase\n\
                 regex ^/e/(.*)$ 302 /x/$1\n\
                 regex ^/ne/(.*)$ 302 /x/$1 ne\n\
                 regex \\.php$ rewrite /index.html\n";
    let set = RuleSet::from_str(rules, "t.rules", Format::Native, &LoadOptions::default()).unwrap();
    let run = |path: &str, query: Option<&str>| {
        let req = Request {
            path,
            query,
            ..Default::default()
        };
        let fast = set.lookup(&req);
        assert_eq!(fast, set.lookup_linear(&req), "{path}");
        fast
    };
    assert_eq!(run("/q", Some("k=v")), redirect(301, "/t?n=1&k=v"));
    assert_eq!(run("/r", Some("k=v")), redirect(301, "/t?n=1"));
    assert_eq!(run("/case", None), redirect(302, "/c"));
    assert_eq!(run("/CASE", None), redirect(302, "/c"));
    assert_eq!(run("/e/a%20b", None), redirect(302, "/x/a%2520b"));
    assert_eq!(run("/ne/a%20b", None), redirect(302, "/x/a%20b"));
    assert_eq!(
        run("/a/b.php", Some("x=1")),
        Outcome::Rewrite {
            path: "/index.html".into(),
            query: Some("x=1".into())
        }
    );
}
