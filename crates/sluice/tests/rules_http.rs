//! The rules engine wired into `sluice serve`: Apache files loaded as they are.

use sluice_testkit::*;
use std::process::Command;

#[test]
fn apache_redirects_and_rewrites_over_http() {
    let dir = docroot();
    let rules = dir.path().join(".rules-http.conf");
    std::fs::write(
        &rules,
        "# seed-style file\n\
         Redirect 301 /old /hello.txt\n\
         RedirectMatch 302 ^/item/([0-9]+)$ /items?id=$1\n\
         RewriteEngine On\n\
         RewriteRule ^/alias\\.txt$ /hello.txt [L]\n\
         RewriteRule ^/private/ - [F]\n\
         RewriteRule ^/retired$ - [G]\n\
         RewriteCond %{HTTP_USER_AGENT} BadBot [NC]\n\
         RewriteRule ^/ - [F]\n",
    )
    .unwrap();
    let srv = Server::start_in(dir, &["--rules", rules.to_str().unwrap()]);
    let r = srv.get("GET /old/x?y=1 HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/hello.txt/x?y=1"))
    );
    let r = srv.get("GET /item/42 HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(
        (r.status, r.header("location")),
        (302, Some("/items?id=42"))
    );
    let r = srv.get("GET /alias.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "hello world\n"));
    assert_eq!(
        srv.get("GET /private/x HTTP/1.1\r\nHost: a\r\n\r\n").status,
        403
    );
    assert_eq!(
        srv.get("GET /retired HTTP/1.1\r\nHost: a\r\n\r\n").status,
        410
    );
    assert_eq!(
        srv.get("GET /hello.txt HTTP/1.1\r\nHost: a\r\nUser-Agent: xbadbotx\r\n\r\n")
            .status,
        403
    );
    assert_eq!(
        srv.get("GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n").status,
        200
    );
    let _ = std::fs::remove_file(rules);
}

/// `-f` and `-d` see what the server would serve: a percent-encoded name as the
/// file it names, a directory, never a hidden file or a symlink out of the root
/// (the root's policies), and a file that appears after the first miss once the
/// cache's entry for it has expired.
#[test]
fn file_tests_see_what_the_server_serves() {
    let dir = docroot();
    let root = dir.path().to_path_buf();
    std::os::unix::fs::symlink("/etc/hostname", root.join("out.txt")).unwrap();
    let rules = root.join(".rules-f.conf");
    std::fs::write(
        &rules,
        "RewriteEngine On\n\
         RewriteCond %{REQUEST_FILENAME} !-f\n\
         RewriteCond %{REQUEST_FILENAME} !-d\n\
         RewriteRule ^/(.*)$ /hello.txt?missing=$1 [R=302]\n",
    )
    .unwrap();
    let srv = Server::start_with_config(
        dir,
        "[files]\ncache_validity = \"1s\"\n",
        // One worker: one file cache, whose entries the test follows.
        &["--workers", "1", "--rules", rules.to_str().unwrap()],
    );
    let get = |path: &str| srv.get(&format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n"));
    let missing = |path: &str| {
        let r = get(path);
        (r.status == 302).then(|| r.header("location").unwrap_or("").to_string())
    };
    assert_eq!(get("/hello.txt").status, 200);
    assert_eq!(
        get("/list/b%20b.txt").text(),
        "bb",
        "a percent-encoded name"
    );
    assert_eq!(get("/sub").status, 301, "a directory: -d");
    assert_eq!(
        missing("/hello.txt/"),
        Some("/hello.txt?missing=hello.txt/".into()),
        "a file named as a directory is neither"
    );
    assert_eq!(
        missing("/nothing"),
        Some("/hello.txt?missing=nothing".into())
    );
    assert_eq!(
        missing("/.secret"),
        Some("/hello.txt?missing=.secret".into())
    );
    assert_eq!(
        missing("/out.txt"),
        Some("/hello.txt?missing=out.txt".into()),
        "a symlink out of the root is not a file here"
    );
    assert_eq!(missing("/%2e%2e/etc/hostname").map(|_| ()), Some(()));
    // A file made after its miss was cached (and the redirect decided on it kept,
    // from its second sighting): seen once the entry expires.
    for _ in 0..3 {
        assert!(missing("/late.txt").is_some());
    }
    std::fs::write(root.join("late.txt"), b"late").unwrap();
    let t = std::time::Instant::now();
    loop {
        let r = get("/late.txt");
        if r.status == 200 {
            assert_eq!(r.text(), "late");
            break;
        }
        assert_eq!(r.status, 302);
        assert!(t.elapsed().as_secs() < 10, "the new file is never seen");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `sluice rules explain` on a config asks the site's file handler for `-f`, as
/// the server does: the decoded path, the root's hidden-file policy.
#[test]
fn explain_tests_files_as_the_server_does() {
    let dir = docroot();
    let root = dir.path();
    let rules = root.join(".rules-x.conf");
    std::fs::write(
        &rules,
        "RewriteEngine On\n\
         RewriteCond %{REQUEST_FILENAME} !-f\n\
         RewriteRule ^/(.*)$ /missing [R=302]\n",
    )
    .unwrap();
    let cfg = root.join(".x.toml");
    std::fs::write(
        &cfg,
        format!(
            "[server]\nroot = \"{}\"\n[rules]\nfiles = [\"{}\"]\n",
            root.display(),
            rules.display()
        ),
    )
    .unwrap();
    let explain = |url: &str| {
        let o = Command::new(bin())
            .args(["rules", "explain", cfg.to_str().unwrap(), url])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = explain("/list/b%20b.txt");
    assert!(
        out.contains("condition #1 fails"),
        "an existing file: {out}"
    );
    let out = explain("/.secret");
    assert!(out.contains("MATCH"), "a hidden file is not served: {out}");
    let out = explain("/nothing");
    assert!(out.contains("MATCH"), "{out}");
}

#[test]
fn explain_names_the_rule_and_the_reason() {
    let d = tempfile::tempdir().unwrap();
    let rules = d.path().join("r.rules");
    std::fs::write(
        &rules,
        "exact /a 301 /b host=example.org\nregex ^/a 302 /c\n",
    )
    .unwrap();
    let o = Command::new(bin())
        .args([
            "rules",
            "explain",
            rules.to_str().unwrap(),
            "/a",
            "--host",
            "other.example",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    assert!(
        out.contains("r.rules:1:") && out.contains("host differs"),
        "{out}"
    );
    assert!(out.contains("r.rules:2:") && out.contains("MATCH"), "{out}");
    assert!(out.contains("302 redirect to /c"), "{out}");
}

/// A rule without `L` hands its rewrite on: explain shows each step, the path the
/// next step asks with, and the rule that decided.
#[test]
fn explain_shows_each_step_of_a_chain() {
    let d = tempfile::tempdir().unwrap();
    let rules = d.path().join("r.conf");
    std::fs::write(
        &rules,
        "RewriteEngine On\nRewriteRule ^/a/(.*)$ /b/$1\nRewriteRule ^/a/ /never [L]\n\
         RewriteCond %{REQUEST_URI} ^/a/\nRewriteRule ^/b/(.*)$ /c/$1 [R=301,L]\n",
    )
    .unwrap();
    let o = Command::new(bin())
        .args(["rules", "explain", rules.to_str().unwrap(), "/a/x"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    assert!(out.contains("r.conf:2:") && out.contains("no [L]"), "{out}");
    assert!(out.contains("candidates for \"/b/x\""), "{out}");
    assert!(
        !out.contains("r.conf:3:"),
        "a rule before the step is not asked: {out}"
    );
    assert!(
        out.contains("r.conf:5:") && out.contains("301 redirect to /c/x"),
        "{out}"
    );
}

#[test]
fn explain_uses_user_agent_and_address() {
    let d = tempfile::tempdir().unwrap();
    let rules = d.path().join("r.conf");
    std::fs::write(
        &rules,
        "RewriteEngine On\n\
         RewriteCond %{HTTP_USER_AGENT} ^Wget [NC]\n\
         RewriteRule ^/a$ /for-wget [R=302]\n\
         RewriteCond %{REMOTE_ADDR} ^10\\.\n\
         RewriteRule ^/a$ /for-lan [R=302]\n",
    )
    .unwrap();
    let explain = |extra: &[&str]| {
        let o = Command::new(bin())
            .args(["rules", "explain", rules.to_str().unwrap(), "/a"])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = explain(&["--ua", "wget/1.21"]);
    assert!(out.contains("302 redirect to /for-wget"), "{out}");
    let out = explain(&["--ua", "curl/8", "--addr", "10.1.2.3"]);
    assert!(out.contains("302 redirect to /for-lan"), "{out}");
    let out = explain(&["--ua", "curl/8", "--addr", "192.0.2.1"]);
    assert!(!out.contains("redirect to"), "{out}");
}

#[test]
fn reload_swaps_rules_and_keeps_them_when_the_new_file_is_broken() {
    let dir = docroot();
    let base = dir.path().parent().unwrap().to_path_buf();
    let rules = base.join(format!("reload-rules-{}.conf", std::process::id()));
    let cfg = base.join(format!("reload-rules-{}.toml", std::process::id()));
    std::fs::write(&rules, "Redirect 301 /a /first\n").unwrap();
    std::fs::write(
        &cfg,
        format!("[rules]\nfiles = [{:?}]\n", rules.to_str().unwrap()),
    )
    .unwrap();
    let srv = Server::start_in(dir, &["--config", cfg.to_str().unwrap()]);
    let loc = |srv: &Server| {
        srv.get("GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
            .header("location")
            .map(str::to_string)
    };
    assert_eq!(loc(&srv).as_deref(), Some("/first"));

    std::fs::write(&rules, "Redirect 301 /a /second\n").unwrap();
    // Until every serving process has reloaded (each does on its own): one that
    // answers with the new rules says nothing of the other.
    srv.reload();
    for _ in 0..8 {
        assert_eq!(
            loc(&srv).as_deref(),
            Some("/second"),
            "new rules not applied"
        );
    }

    std::fs::write(
        &rules,
        "Redirect 301 /a /third\nRewriteEngine On\nRewriteRule ^/a /x [P]\n",
    )
    .unwrap();
    srv.signal(libc::SIGHUP);
    wait_for_stderr(&srv, "reload failed");
    for _ in 0..8 {
        assert_eq!(
            loc(&srv).as_deref(),
            Some("/second"),
            "a broken rules file must leave the old rules serving"
        );
    }
    let err = srv.stderr();
    assert!(
        err.contains("reload failed") && err.contains(":3:"),
        "{err}"
    );
    let _ = std::fs::remove_file(rules);
    let _ = std::fs::remove_file(cfg);
}

/// A reload compiles the rules again only if it would read other bytes: the rules
/// files, and the files they name (a `RewriteMap`'s), are compared by their bytes.
/// Unchanged, the compiled set is kept (a million rules need not compile again
/// for a change to a log setting); a map changed alone is read again.
#[test]
fn a_reload_keeps_unchanged_rules_and_reads_a_changed_map() {
    let dir = docroot();
    let rules = dir.path().join(".rules.conf");
    let map = dir.path().join(".map.txt");
    std::fs::write(
        &rules,
        "RewriteEngine On\n\
         RewriteMap where txt:.map.txt\n\
         RewriteRule ^/m/(.*)$ ${where:$1} [R=302,L]\n",
    )
    .unwrap();
    std::fs::write(&map, "a /one\n").unwrap();
    let srv = Server::start_in(dir, &["--rules", rules.to_str().unwrap()]);
    let location = |path: &str| {
        let r = srv.get(&format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n"));
        r.header("location").map(str::to_string)
    };
    let count = |what: &str| srv.stderr().matches(what).count();
    assert_eq!(location("/m/a").as_deref(), Some("/one"));
    let (compiled, kept) = (count("rules compiled"), count("rules unchanged"));

    srv.reload();
    assert_eq!(count("rules compiled"), compiled, "{}", srv.stderr());
    assert!(count("rules unchanged") > kept, "{}", srv.stderr());
    assert_eq!(location("/m/a").as_deref(), Some("/one"));

    // The same length, other bytes: the map alone changed.
    std::fs::write(&map, "a /two\n").unwrap();
    srv.reload();
    assert!(count("rules compiled") > compiled, "{}", srv.stderr());
    assert_eq!(location("/m/a").as_deref(), Some("/two"));

    // The rules file changed.
    let compiled = count("rules compiled");
    std::fs::write(
        &rules,
        "RewriteEngine On\n\
         RewriteMap where txt:.map.txt\n\
         RewriteRule ^/n/(.*)$ ${where:$1} [R=301,L]\n",
    )
    .unwrap();
    srv.reload();
    assert!(count("rules compiled") > compiled, "{}", srv.stderr());
    let r = srv.get("GET /n/a HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!((r.status, r.header("location")), (301, Some("/two")));
}

/// An answer a rule decided because of a request header names that header in
/// `Vary`, as Apache's mod_rewrite does, so a cache in front of the mirror does
/// not hand one client's redirect or refusal to another: the fields a
/// `RewriteCond` reads (`%{HTTP_USER_AGENT}`, `%{HTTP:Name}`), a native rule's
/// `ua=` and `header=`; not a condition's with `[NV]`, none for a rule that reads no header,
/// and none when the condition failed and the file is served.
#[test]
fn an_answer_a_header_decided_varies_by_that_header() {
    let dir = docroot();
    let apache = dir.path().join(".vary.conf");
    std::fs::write(
        &apache,
        "RewriteEngine On\n\
         RewriteCond %{HTTP_USER_AGENT} ^Wget\n\
         RewriteRule ^/hello\\.txt$ /mirrors.txt [R=302,L]\n\
         RewriteCond %{HTTP:Accept-Language} ^de [OR]\n\
         RewriteCond %{HTTP_USER_AGENT} deutsch\n\
         RewriteCond %{HTTP:accept-language} .\n\
         RewriteRule ^/start$ /de/start [R=302,L]\n\
         RewriteCond %{HTTP_REFERER} spam [NV]\n\
         RewriteCond %{HTTP:X-Mode} ^$\n\
         RewriteRule ^/quiet$ - [F]\n\
         RewriteCond %{HTTP:X-Mirror} ^near$\n\
         RewriteRule ^/chain/(.*)$ /chain2/$1\n\
         RewriteCond %{HTTP:Accept-Language} ^de\n\
         RewriteRule ^/chain2/ /hello.txt [R=302,L]\n\
         Redirect 301 /old /hello.txt\n",
    )
    .unwrap();
    let native = dir.path().join(".vary.rules");
    std::fs::write(
        &native,
        "prefix /bots deny ua=crawler\n\
         prefix /api deny header=X-Token:^bad\n",
    )
    .unwrap();
    let srv = Server::start_in(
        dir,
        &[
            "--rules",
            apache.to_str().unwrap(),
            "--rules",
            native.to_str().unwrap(),
        ],
    );
    let get = |path: &str, header: &str| {
        srv.get(&format!(
            "GET {path} HTTP/1.1\r\nHost: a\r\n{header}Connection: close\r\n\r\n"
        ))
    };
    let r = get("/hello.txt", "User-Agent: Wget/1.21\r\n");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("vary"), Some("User-Agent"));
    // The condition failed: the file, and no Vary of the rules'.
    let r = get("/hello.txt", "User-Agent: curl/8\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("vary"), None);
    // Each field once, in the order the conditions name them.
    let r = get("/start", "Accept-Language: de-DE\r\n");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("vary"), Some("Accept-Language, User-Agent"));
    let r = get("/quiet", "Referer: http://spam.example/\r\n");
    assert_eq!((r.status, r.header("vary")), (403, Some("X-Mode")));
    let r = get("/old", "User-Agent: Wget/1.21\r\n");
    assert_eq!((r.status, r.header("vary")), (301, None));
    let r = get("/bots/x", "User-Agent: crawler/2\r\n");
    assert_eq!((r.status, r.header("vary")), (403, Some("User-Agent")));
    let r = get("/api/x", "X-Token: bad1\r\n");
    assert_eq!((r.status, r.header("vary")), (403, Some("X-Token")));
    // A rule that handed the request on names its fields too, as the one
    // that decided does (Apache names every matching rule's).
    let r = get("/chain/x", "X-Mirror: near\r\nAccept-Language: de\r\n");
    assert_eq!(
        (r.status, r.header("vary")),
        (302, Some("X-Mirror, Accept-Language"))
    );
    let r = get("/chain2/x", "X-Mirror: near\r\nAccept-Language: de\r\n");
    assert_eq!((r.status, r.header("vary")), (302, Some("Accept-Language")));
    // A kept answer (the same request bytes, asked again) keeps its Vary.
    for _ in 0..3 {
        let r = get("/hello.txt", "User-Agent: Wget/1.21\r\n");
        assert_eq!((r.status, r.header("vary")), (302, Some("User-Agent")));
    }
}

/// `T=` and `CO=` on the wire, from the real server: the type replaces the
/// file's own on a whole file, a HEAD and a single range, and not a multipart
/// answer's (its parts carry the file's type) nor a 404; the cookies go on
/// every answer the rule decided, a redirect's too, and both hold for a kept
/// answer asked again (the server keeps a small file's answer for its bytes).
#[test]
fn a_rule_sets_the_type_and_cookies_of_its_answer() {
    let dir = docroot();
    let rules = dir.path().join(".fx.conf");
    std::fs::write(
        &rules,
        "RewriteEngine On\n\
         RewriteRule ^/hello\\.txt$ - [T=application/x-greeting,CO=seen:1:a.example]\n\
         RewriteRule ^/big\\.bin$ - [T=application/x-big]\n\
         RewriteRule ^/missing$ - [T=text/x-none]\n\
         RewriteRule ^/go/(.*)$ /hello.txt?who=$1 [B,R=302,CO=from:$1:a.example:10,L]\n",
    )
    .unwrap();
    let srv = Server::start_in(dir, &["--rules", rules.to_str().unwrap()]);
    let ask = |method: &str, path: &str, more: &str| {
        srv.get(&format!(
            "{method} {path} HTTP/1.1\r\nHost: a\r\n{more}Connection: close\r\n\r\n"
        ))
    };
    for _ in 0..3 {
        let r = ask("GET", "/hello.txt", "");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("application/x-greeting"));
        assert_eq!(
            r.header("set-cookie"),
            Some("seen=1; path=/; domain=a.example")
        );
        assert_eq!(r.body, b"hello world\n");
    }
    let r = ask("HEAD", "/hello.txt", "");
    assert_eq!(r.header("content-type"), Some("application/x-greeting"));
    let r = ask("GET", "/big.bin", "Range: bytes=0-9\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-type"), Some("application/x-big"));
    let r = ask("GET", "/big.bin", "Range: bytes=0-9,200000-200009\r\n");
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap_or_default();
    assert!(ct.starts_with("multipart/byteranges"), "{ct}");
    let body = String::from_utf8_lossy(&r.body);
    assert!(!body.contains("application/x-big"), "{body}");
    let r = ask("GET", "/missing", "");
    assert_eq!(r.status, 404);
    assert_ne!(r.header("content-type"), Some("text/x-none"));
    for _ in 0..2 {
        let r = ask("GET", "/go/a%20b&c", "");
        assert_eq!(r.status, 302);
        assert_eq!(r.header("location"), Some("/hello.txt?who=a+b%26c"));
        assert_eq!(
            r.header("set-cookie"),
            Some("from=a%20b&c; path=/; domain=a.example; Max-Age=600")
        );
    }
}
