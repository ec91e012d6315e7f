//! Apache behaviours, case by case (data-driven): what each directive and flag does
//! to the location, the query string and the status.

use sluice_rules::{FileTests, Format, LoadOptions, Outcome, Request, RuleSet};

fn redirect(status: u16, loc: &str) -> Outcome {
    Outcome::Redirect {
        status,
        location: loc.into(),
    }
}

/// The rules in `conf`, loaded from a directory that holds `files` (name,
/// contents) beside it: maps are read at load, so the directory goes after.
fn load_with_files(files: &[(&str, &str)], conf: &str) -> RuleSet {
    let d = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(d.path().join(name), text).unwrap();
    }
    let path = d.path().join("r.conf");
    std::fs::write(&path, conf).unwrap();
    RuleSet::load_files(&[path], &LoadOptions::default()).unwrap()
}

/// What `set` decides for a request that is only `path`.
fn path_only(set: &RuleSet, path: &str) -> Outcome {
    set.lookup(&Request {
        path,
        ..Default::default()
    })
}

// Directive-by-directive cases (flags, conditions, hook order, maps) are data:
// testdata/rules/*.conf with *.expect, run by tests/testdata.rs. What needs files
// on disk, an address or a random choice stays here.

#[test]
fn txt_and_rnd_maps_from_files() {
    let set = load_with_files(
        &[
            ("m.txt", "# comment\nold new-page\nold second\nx y\n"),
            ("m.rnd", "mirror a.example|b.example\n"),
        ],
        "RewriteEngine On\nRewriteMap pages txt:m.txt\nRewriteMap mirrors rnd:m.rnd\n\
         RewriteRule ^/p/(.*)$ /${pages:$1|missing} [R=301]\n\
         RewriteRule ^/dl/(.*)$ http://${mirrors:mirror}/$1 [R]\n",
    );
    let get = |p: &str| path_only(&set, p);
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
}

/// A map defined twice under one name: every rule reads the last definition, also
/// a rule written between the two (Apache looks maps up by name when a request
/// comes; sluice finds the map's slot at load, and a new definition takes the slot).
#[test]
fn a_map_defined_again_is_read_by_every_rule() {
    let set = load_with_files(
        &[("one.txt", "k /first\n"), ("two.txt", "k /second\n")],
        "RewriteEngine On\nRewriteMap m txt:one.txt\n\
         RewriteRule ^/a$ ${m:k} [R=301,L]\n\
         RewriteMap m txt:two.txt\n\
         RewriteRule ^/b$ ${m:k} [R=302,L]\n",
    );
    let get = |p: &str| path_only(&set, p);
    assert_eq!(get("/a"), redirect(301, "/second"));
    assert_eq!(get("/b"), redirect(302, "/second"));
}

/// Map keys that are one request field (`${map:%{REQUEST_URI}}`, the "always" rule)
/// are looked up where they are, without a copy: the same answers as a key built
/// from parts, for a hit, a miss with and without a default, an absent field (an
/// empty key), an `int:` function (which must still rewrite its copy) and `rnd:`.
#[test]
fn map_keys_that_are_one_request_field() {
    let set = load_with_files(
        &[
            (
                "moved.txt",
                "/old/a.html /new/a.html\n/c.htmlx /built/c.html\nmirror.example /by-host\n",
            ),
            ("moved.rnd", "/r /one|/two\n"),
        ],
        "RewriteEngine On\nRewriteMap moved txt:moved.txt\nRewriteMap pick rnd:moved.rnd\n\
         RewriteMap lower int:tolower\n\
         RewriteCond ${moved:%{REQUEST_URI}} !^$\n\
         RewriteRule ^ ${moved:%{REQUEST_URI}} [R=301,L]\n\
         RewriteCond ${moved:%{REQUEST_URI}x} !^$\n\
         RewriteRule ^ ${moved:%{REQUEST_URI}x} [R=302,L]\n\
         RewriteCond ${moved:%{HTTP_HOST}|none} !=none\n\
         RewriteRule ^/h ${moved:%{HTTP_HOST}} [R=307,L]\n\
         RewriteCond ${lower:%{HTTP_HOST}} =lower.example\n\
         RewriteRule ^/l /lowered [R=308,L]\n\
         RewriteRule ^/r$ ${pick:%{REQUEST_URI}} [R=303,L]\n",
    );
    let get = |path: &str, host: Option<&str>| {
        set.lookup(&Request {
            path,
            host,
            ..Default::default()
        })
    };
    // Direct key, hit; a key built from the field and a literal, hit.
    assert_eq!(get("/old/a.html", None), redirect(301, "/new/a.html"));
    assert_eq!(get("/c.html", None), redirect(302, "/built/c.html"));
    assert_eq!(get("/old/a.htm", None), Outcome::Pass);
    // Host keys: present and found, absent (an empty key: the default), and a
    // function of the host, which lowercases its own copy.
    assert_eq!(get("/h", Some("mirror.example")), redirect(307, "/by-host"));
    assert_eq!(get("/h", None), Outcome::Pass);
    assert_eq!(get("/l", Some("LOWER.Example")), redirect(308, "/lowered"));
    assert_eq!(get("/l", Some("other")), Outcome::Pass);
    // rnd with a direct key: one of the two choices.
    match get("/r", None) {
        Outcome::Redirect {
            status: 303,
            location,
        } => {
            assert!(location == "/one" || location == "/two", "{location}")
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn lenient_skips_a_rule_with_its_conditions() {
    // Strict refusals and their file:line messages are data: testdata/rules-bad/.
    // Lenient: skipped with a warning, the rest loads.
    let set = RuleSet::from_str(
        "ProxyPass / http://x/\nRewriteEngine On\nRewriteCond %{REQUEST_FILENAME} -s\nRewriteRule ^/a /b [R]\nRedirect /c /d\n",
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

/// The server's file cache answers `-f`/`-d` ([`FileTests`]): it is given the
/// subject's part after the root, with its leading `/`, and never a `..` path.
#[test]
fn file_tests_go_through_the_servers_cache_when_given_one() {
    #[derive(Debug, Default)]
    struct Asked(std::cell::RefCell<Vec<(String, bool)>>);
    impl FileTests for Asked {
        fn is(&self, path: &str, dir: bool) -> bool {
            self.0.borrow_mut().push((path.to_string(), dir));
            path == if dir { "/d" } else { "/a%20b.txt" }
        }
    }
    let rules = "RewriteEngine On\n\
        RewriteCond %{DOCUMENT_ROOT}/lit -f\n\
        RewriteRule ^/lit$ /found [R]\n\
        RewriteCond %{REQUEST_FILENAME} !-f\n\
        RewriteCond %{REQUEST_FILENAME} !-d\n\
        RewriteRule ^/(.*)$ /missing/$1 [R]\n";
    let set = RuleSet::from_str(rules, "t.conf", Format::Apache, &LoadOptions::default()).unwrap();
    let asked = Asked::default();
    let root = std::path::Path::new("/srv/www");
    let run = |path: &str| {
        let req = Request {
            path,
            root: Some(root),
            files: Some(&asked),
            ..Default::default()
        };
        set.lookup(&req)
    };
    assert_eq!(run("/a%20b.txt"), Outcome::Pass);
    assert_eq!(run("/d"), Outcome::Pass);
    assert_eq!(run("/x"), redirect(302, "/missing/x"));
    assert_eq!(
        run("/../etc/passwd"),
        redirect(302, "/missing/../etc/passwd")
    );
    assert_eq!(run("/lit"), redirect(302, "/missing/lit"));
    let seen = asked.0.borrow().clone();
    assert_eq!(
        seen,
        [
            ("/a%20b.txt", false),
            ("/d", false),
            ("/d", true),
            ("/x", false),
            ("/x", true),
            ("/lit", false),
            ("/lit", false),
            ("/lit", true),
        ]
        .map(|(p, d)| (p.to_string(), d)),
        "the `..` path never reaches the files"
    );
}

#[test]
fn native_options() {
    let rules = "exact /q 301 /t?n=1 qsa\n\
                 exact /r 301 /t?n=1\n\
                 exact /z 301 /t?\n\
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
    assert_eq!(run("/q", None), redirect(301, "/t?n=1"));
    // A target that needs no change is the Location as it is; each change still applies.
    assert_eq!(run("/case", None), redirect(302, "/c"));
    assert_eq!(run("/case", Some("k=v")), redirect(302, "/c?k=v"));
    assert_eq!(run("/case", Some("")), redirect(302, "/c"));
    assert_eq!(run("/z", Some("k=v")), redirect(301, "/t"));
    assert_eq!(run("/e/plain", None), redirect(302, "/x/plain"));
    assert_eq!(run("/CASE", None), redirect(302, "/c"));
    // A captured escape stays one escape: Apache 2.4 (which matches the decoded
    // path and escapes the target once) sends `/x/a%20b` too, not `/x/a%2520b`.
    // `tests/apache_parity.rs` in the sluice crate holds this against Debian's Apache.
    assert_eq!(run("/e/a%20b", None), redirect(302, "/x/a%20b"));
    assert_eq!(run("/e/caf%C3%A9", None), redirect(302, "/x/caf%C3%A9"));
    assert_eq!(run("/e/a%2520b", None), redirect(302, "/x/a%2520b"));
    assert_eq!(run("/e/100%", None), redirect(302, "/x/100%25"));
    assert_eq!(run("/ne/a%20b", None), redirect(302, "/x/a%20b"));
    assert_eq!(
        run("/a/b.php", Some("x=1")),
        Outcome::Rewrite {
            path: "/index.html".into(),
            query: Some("x=1".into())
        }
    );
}

/// `%{HTTP:Name}` reads the first header line of that name (any case), empty when
/// there is none; `%{SERVER_NAME}` is the host without its port, also for an IPv6
/// literal; `%{HTTP:}` is refused when the file loads.
#[test]
fn header_variables_and_server_name() {
    let set = load_with_files(
        &[],
        "RewriteEngine On\n\
         RewriteCond %{HTTP:x-forwarded-proto} =http\n\
         RewriteRule ^/s$ https://%{SERVER_NAME}/s?m=%{REQUEST_METHOD} [R=301,L]\n\
         RewriteCond %{HTTP:X-Empty} =\"\"\n\
         RewriteRule ^/e$ /empty [R=302,L]\n",
    );
    let ask = |host: &'static str, headers: &'static str| {
        set.lookup(&Request {
            path: "/s",
            host: Some(host),
            headers: headers.as_bytes(),
            method: "GET",
            ..Default::default()
        })
    };
    let proto = "Accept: */*\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Proto: https\r\n";
    assert_eq!(
        ask("m.example:8080", proto),
        redirect(301, "https://m.example/s?m=GET")
    );
    assert_eq!(
        ask("[::1]:8443", proto),
        redirect(301, "https://[::1]/s?m=GET")
    );
    assert_eq!(ask("[::1]", proto), redirect(301, "https://[::1]/s?m=GET"));
    assert_eq!(
        ask("m.example", "X-Forwarded-Proto: https\r\n"),
        Outcome::Pass
    );
    assert_eq!(path_only(&set, "/e"), redirect(302, "/empty"));
    let bad = RuleSet::from_str(
        "RewriteEngine On\nRewriteCond %{HTTP:} x\nRewriteRule ^/a$ /b [R]\n",
        "bad.conf",
        sluice_rules::Format::Apache,
        &Default::default(),
    );
    assert!(bad.is_err());
}
