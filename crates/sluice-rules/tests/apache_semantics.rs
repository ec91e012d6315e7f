//! Apache behaviours, case by case (data-driven): what each directive and flag does
//! to the location, the query string and the status.

use sluice_rules::{Format, LoadOptions, Outcome, Request, RuleSet};

fn redirect(status: u16, loc: &str) -> Outcome {
    Outcome::Redirect {
        status,
        location: loc.into(),
    }
}

// Directive-by-directive cases (flags, conditions, hook order, maps) are data:
// testdata/rules/*.conf with *.expect, run by tests/testdata.rs. What needs files
// on disk, an address or a random choice stays here.

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
fn lenient_skips_a_rule_with_its_conditions() {
    // Strict refusals and their file:line messages are data: testdata/rules-bad/.
    // Lenient: skipped with a warning, the rest loads.
    let set = RuleSet::from_str(
        "ProxyPass / http://x/\nRewriteEngine On\nRewriteCond %{HTTP_HOST} x [NV]\nRewriteRule ^/a /b [R]\nRedirect /c /d\n",
        "x.conf",
        Format::Apache,
        &LoadOptions {
            lenient: true,
            ..Default::default()
        },
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
