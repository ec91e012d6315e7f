//! Virtual hosts (issue 14): `[[site]]` sections over TCP, per-site rules and logs,
//! and `sluice check` / `sluice rules explain` on a config with sites.

use sluice_testkit::*;
use std::process::Command;
use std::time::Duration;

struct Sites {
    srv: Server,
    main_log: TempLog,
    mirror_log: TempLog,
    cfg: std::path::PathBuf,
}

/// Main site (the docroot), `mirror.example.org` + `*.example.org` with its own root,
/// rules and log, and `static.example.net` with listings off.
fn start_sites(tag: &str) -> Sites {
    let d = docroot();
    let base = d.path();
    for (dir, text) in [("mirror", "mirror root\n"), ("static", "static root\n")] {
        std::fs::create_dir(base.join(dir)).unwrap();
        std::fs::write(base.join(dir).join("who.txt"), text).unwrap();
        std::fs::create_dir(base.join(dir).join("pool")).unwrap();
        std::fs::write(base.join(dir).join("pool/x.deb"), b"deb").unwrap();
    }
    std::fs::write(base.join("who.txt"), "main root\n").unwrap();
    std::fs::write(
        base.join(".mirror-rules.conf"),
        "RedirectMatch 302 ^/old/(.*)$ /pool/$1\n",
    )
    .unwrap();
    std::fs::write(
        base.join(".main-rules.conf"),
        "Redirect 301 /gone-main /who.txt\n",
    )
    .unwrap();
    let main_log = log_path(&format!("sites-main-{tag}"));
    let mirror_log = log_path(&format!("sites-mirror-{tag}"));
    let toml = format!(
        r#"
[log]
access = "{}"
[rules]
files = [".main-rules.conf"]

[[site]]
names = ["mirror.example.org", "*.example.org"]
root = "mirror"
rules = [".mirror-rules.conf"]
access_log = "{}"

[[site]]
names = ["static.example.net"]
root = "static"
listing = false
"#,
        main_log.display(),
        mirror_log.display()
    );
    let cfg = base.join(".test-config.toml");
    let srv = Server::start_with_config(d, &toml, &[]);
    Sites {
        srv,
        main_log,
        mirror_log,
        cfg,
    }
}

fn get(srv: &Server, host: Option<&str>, path: &str) -> Resp {
    let host = host.map_or(String::new(), |h| format!("Host: {h}\r\n"));
    let v = if host.is_empty() { "1.0" } else { "1.1" };
    srv.get(&format!(
        "GET {path} HTTP/{v}\r\n{host}Connection: close\r\n\r\n"
    ))
}

/// curl's whole answer (`-i`: status line, headers, body) for `path` with this
/// `Host`, line ends as `\n`; `extra` are more curl arguments.
fn curl_site(srv: &Server, host: &str, path: &str, extra: &[&str]) -> String {
    let url = srv.url(path);
    let hh = format!("Host: {host}");
    let mut args = vec!["-s", "-i", "-H", hh.as_str()];
    args.extend_from_slice(extra);
    args.push(url.as_str());
    String::from_utf8_lossy(&curl(&args).stdout).replace("\r\n", "\n")
}

#[test]
fn each_site_answers_from_its_own_root_with_its_own_rules() {
    let s = start_sites("roots");
    let srv = &s.srv;
    assert_eq!(
        get(srv, Some("mirror.example.org"), "/who.txt").text(),
        "mirror root\n"
    );
    assert_eq!(
        get(srv, Some("MIRROR.Example.org:8080"), "/who.txt").text(),
        "mirror root\n"
    );
    assert_eq!(
        get(srv, Some("ftp.example.org"), "/who.txt").text(),
        "mirror root\n"
    );
    assert_eq!(
        get(srv, Some("static.example.net"), "/who.txt").text(),
        "static root\n"
    );
    // Unknown and missing hosts: the main (top-level) site.
    assert_eq!(
        get(srv, Some("example.org"), "/who.txt").text(),
        "main root\n"
    );
    assert_eq!(get(srv, None, "/who.txt").text(), "main root\n");
    // Absolute-form targets choose by their host too.
    let r = srv.get(
        "GET http://mirror.example.org/who.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.text(), "mirror root\n");

    // Rules apply to their own site only.
    let r = get(srv, Some("mirror.example.org"), "/old/x.deb");
    assert_eq!((r.status, r.header("location")), (302, Some("/pool/x.deb")));
    assert_eq!(get(srv, None, "/old/x.deb").status, 404);
    assert_eq!(
        get(srv, Some("static.example.net"), "/old/x.deb").status,
        404
    );
    let r = get(srv, None, "/gone-main");
    assert_eq!(r.status, 301);
    assert_eq!(
        get(srv, Some("mirror.example.org"), "/gone-main").status,
        404
    );

    // Per-site settings: listings off on the static site only.
    assert_eq!(get(srv, Some("static.example.net"), "/pool/").status, 403);
    assert_eq!(get(srv, Some("mirror.example.org"), "/pool/").status, 200);
    // A site's root is its own: the main site's files are not reachable from it.
    assert_eq!(
        get(srv, Some("mirror.example.org"), "/hello.txt").status,
        404
    );
    assert_ne!(
        get(srv, Some("mirror.example.org"), "/../hello.txt").status,
        200
    );

    // Logs: the mirror's requests in its own log, everything else in the main log.
    let mirror = wait_for_lines(&s.mirror_log, 1, Duration::from_secs(5), |l| {
        l.contains("/old/x.deb")
    });
    let main = wait_for_lines(&s.main_log, 1, Duration::from_secs(5), |l| {
        l.contains("/gone-main")
    });
    assert!(!mirror.contains("/gone-main HTTP/1.0"), "{mirror}");
    assert!(
        mirror
            .lines()
            .all(|l| !l.contains("\"GET /who.txt HTTP/1.0\"")),
        "{mirror}"
    );
    assert!(!main.contains("/old/x.deb HTTP/1.1\" 302"), "{main}");

    // SIGUSR1 reopens the per-site log too (logrotate's `mv`, then USR1).
    let rotated = s.mirror_log.with_extension("log.1");
    std::fs::rename(&s.mirror_log, &rotated).unwrap();
    srv.signal(libc::SIGUSR1);
    wait_for_stderr(srv, "access log reopened");
    get(srv, Some("mirror.example.org"), "/who.txt?after-rotation");
    wait_for_lines(&s.mirror_log, 1, Duration::from_secs(5), |l| {
        l.contains("after-rotation")
    });
    assert!(!std::fs::read_to_string(&rotated)
        .unwrap()
        .contains("after-rotation"));
    let _ = std::fs::remove_file(&rotated);
    let _ = std::fs::remove_file(&s.main_log);
    let _ = std::fs::remove_file(&s.mirror_log);
}

#[test]
fn check_and_explain_understand_sites() {
    let s = start_sites("check");
    let cfg = s.cfg.to_str().unwrap();
    let out = Command::new(bin()).args(["check", cfg]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("site mirror.example.org: names mirror.example.org *.example.org"),
        "{text}"
    );
    assert!(text.contains("site (main) (default)"), "{text}");
    assert_eq!(text.matches("  site ").count(), 3, "{text}");

    let explain = |host: &str| {
        let out = Command::new(bin())
            .args(["rules", "explain", cfg, "/old/a.deb", "--host", host])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let m = explain("www.example.org:80");
    assert!(m.contains("site: mirror.example.org"), "{m}");
    assert!(m.contains("/pool/a.deb"), "{m}");
    let o = explain("other.test");
    assert!(o.contains("site: (main)"), "{o}");
    assert!(!o.contains("/pool/a.deb"), "{o}");

    // A broken site is named in the error, and reload keeps the old sites serving.
    std::fs::write(
        &s.cfg,
        "[[site]]\nnames = [\"a.test\"]\nroot = \"/nonexistent-sluice\"\n",
    )
    .unwrap();
    let out = Command::new(bin()).args(["check", cfg]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("site a.test: root /nonexistent-sluice"),
        "{err}"
    );
    s.srv.signal(libc::SIGHUP);
    wait_for_stderr(&s.srv, "reload failed");
    assert_eq!(
        get(&s.srv, Some("mirror.example.org"), "/who.txt").text(),
        "mirror root\n"
    );
    let _ = std::fs::remove_file(&s.main_log);
    let _ = std::fs::remove_file(&s.mirror_log);
}

/// docs/OPERATIONS.md's example config and rules file, with their paths moved into a
/// temporary directory, pass `sluice check` without a warning: the document cannot
/// drift from what the server accepts.
#[test]
fn the_operations_example_passes_check() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/OPERATIONS.md"
    ))
    .unwrap();
    let block = |lang: &str| {
        let start = doc.find(&format!("```{lang}\n")).unwrap() + lang.len() + 4;
        doc[start..start + doc[start..].find("```").unwrap()].to_string()
    };
    let d = tempfile::tempdir().unwrap();
    let t = d.path().to_str().unwrap();
    for dir in [
        "srv/www/default",
        "srv/mirror",
        "srv/www/example.org/.errors",
        "etc/tls",
    ] {
        std::fs::create_dir_all(d.path().join(dir)).unwrap();
    }
    // The static site's 404 page (`sluice check` warns of a page that is not there).
    std::fs::write(
        d.path().join("srv/www/example.org/.errors/404.html"),
        "<h1>Not here</h1>\n",
    )
    .unwrap();
    // The example's certificates: self-signed, made here (sluice check reads them).
    for name in ["www", "mirror"] {
        let o = Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args([
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}.example.org"),
            ])
            .arg("-keyout")
            .arg(d.path().join(format!("etc/tls/{name}.key")))
            .arg("-out")
            .arg(d.path().join(format!("etc/tls/{name}.pem")))
            .output()
            .expect("openssl");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/errant.rules"),
        d.path().join("etc/errant.rules"),
    )
    .unwrap();
    let toml = block("toml")
        .replace("/srv/", &format!("{t}/srv/"))
        .replace("/etc/sluice/", &format!("{t}/etc/"))
        .replace("/var/log/sluice/", &format!("{t}/"));
    std::fs::write(d.path().join("sluice.toml"), toml).unwrap();
    std::fs::write(d.path().join("etc/mirror-redirects.conf"), block("apache")).unwrap();
    std::fs::write(
        d.path().join("etc/www-redirects.conf"),
        "Redirect 301 /old /new\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["check", &format!("{t}/sluice.toml")])
        .output()
        .unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{so}{se}");
    assert!(!se.contains("warning"), "{se}");
    assert_eq!(so.matches("  site ").count(), 3, "{so}");
    assert!(so.contains("https on 0.0.0.0:443 [::]:443"), "{so}");
    assert!(so.contains("3 SNI name(s)"), "{so}");
}

/// `[files] error_pages` with curl: each site's 404 is its own root's page (kept
/// in a hidden directory, so it cannot be asked for by itself), with the 404
/// status, the page's type and no validators; a rule's 403 takes the 403 page;
/// a HEAD gets the head alone; a range or a conditional does not turn an error
/// into a 206 or 304; a site whose page is missing answers with sluice's text.
#[test]
fn error_pages_per_site_with_their_status() {
    if !curl_available() {
        panic!("curl is needed (scripts/test.sh installs it)");
    }
    let d = docroot();
    let base = d.path();
    std::fs::create_dir_all(base.join(".errors")).unwrap();
    std::fs::write(base.join(".errors/404.html"), "<p>main: not here</p>\n").unwrap();
    std::fs::write(base.join(".errors/403.html"), "<p>main: not for you</p>\n").unwrap();
    std::fs::create_dir_all(base.join("mirror/.errors")).unwrap();
    std::fs::write(
        base.join("mirror/.errors/404.html"),
        "<p>mirror: not here</p>\n",
    )
    .unwrap();
    std::fs::create_dir_all(base.join("bare")).unwrap();
    std::fs::write(
        base.join(".rules.conf"),
        "RewriteEngine On\nRewriteRule ^/private/ - [F]\n",
    )
    .unwrap();
    let toml = r#"
[files]
error_pages = { 404 = "/.errors/404.html", 403 = "/.errors/403.html" }
[rules]
files = [".rules.conf"]

[[site]]
names = ["mirror.example.org"]
root = "mirror"

[[site]]
names = ["bare.example.org"]
root = "bare"
"#;
    let srv = Server::start_with_config(d, toml, &[]);
    let ask = |host: &str, path: &str, extra: &[&str]| curl_site(&srv, host, path, extra);
    let r = ask("a", "/missing.iso", &[]);
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    assert!(
        r.contains("content-type: text/html") || r.contains("Content-Type: text/html"),
        "{r}"
    );
    assert!(r.ends_with("\n\n<p>main: not here</p>\n"), "{r}");
    assert!(!r.contains("ETag") && !r.contains("Last-Modified"), "{r}");
    // The page cannot be asked for by itself: it is hidden, so that is a 404 too.
    let r = ask("a", "/.errors/404.html", &[]);
    assert!(
        r.starts_with("HTTP/1.1 404") && r.ends_with("<p>main: not here</p>\n"),
        "{r}"
    );
    // A range or a conditional changes nothing for an error.
    let r = ask(
        "a",
        "/missing.iso",
        &["-r", "0-3", "-H", "If-None-Match: *"],
    );
    assert!(
        r.starts_with("HTTP/1.1 404") && r.ends_with("<p>main: not here</p>\n"),
        "{r}"
    );
    // HEAD: the same head, no body.
    let r = ask("a", "/missing.iso", &["-I"]);
    assert!(
        r.starts_with("HTTP/1.1 404") && r.contains("Content-Length: 22"),
        "{r}"
    );
    assert!(r.ends_with("\n\n"), "{r}");
    // A rule's 403, twice (the second from a kept answer).
    for _ in 0..2 {
        let r = ask("a", "/private/key", &[]);
        assert!(
            r.starts_with("HTTP/1.1 403") && r.ends_with("<p>main: not for you</p>\n"),
            "{r}"
        );
    }
    // Each site its own root's page; a site without the page: sluice's text.
    let r = ask("mirror.example.org", "/missing.iso", &[]);
    assert!(
        r.starts_with("HTTP/1.1 404") && r.ends_with("<p>mirror: not here</p>\n"),
        "{r}"
    );
    let r = ask("bare.example.org", "/missing.iso", &[]);
    assert!(
        r.starts_with("HTTP/1.1 404") && r.ends_with("\n\n404 Not Found\n"),
        "{r}"
    );
}

#[test]
fn a_site_has_its_own_index_types_headers_pages_and_symlinks() {
    if !curl_available() {
        panic!("curl is needed (scripts/test.sh installs it)");
    }
    let d = docroot();
    let base = d.path();
    let www = base.join("www");
    for dir in [base.to_path_buf(), www.clone()] {
        std::fs::create_dir_all(dir.join(".errors")).unwrap();
        std::fs::create_dir_all(dir.join("assets")).unwrap();
        std::fs::write(dir.join("a.deb"), b"deb").unwrap();
        std::fs::write(dir.join("notes.adoc"), b"= notes\n").unwrap();
        std::fs::write(dir.join("assets/app.js"), b"app();\n").unwrap();
        std::fs::write(dir.join("x.txt"), b"plain text, plain text, plain\n").unwrap();
        std::fs::write(dir.join("x.txt.gz"), b"\x1f\x8b pretend gzip").unwrap();
        std::os::unix::fs::symlink("x.txt", dir.join("link.txt")).unwrap();
        std::fs::write(dir.join("index.html"), b"an index.html\n").unwrap();
    }
    std::fs::write(base.join(".errors/404.html"), "main 404\n").unwrap();
    std::fs::write(www.join(".errors/403.html"), "www 403\n").unwrap();
    std::fs::write(www.join(".errors/gone.html"), "www 404\n").unwrap();
    std::fs::write(www.join("index.xhtml"), b"www's own index\n").unwrap();
    let toml = r#"
[files]
index = ["index.html"]
types = { deb = "application/x-deb" }
error_pages = { 404 = "/.errors/404.html", 403 = "/.errors/403.html" }
[[files.cache_control]]
suffix = ".deb"
value = "max-age=86400"
[[files.headers]]
name = "Access-Control-Allow-Origin"
value = "*"
[[files.headers]]
name = "Strict-Transport-Security"
value = "max-age=63072000"
always = true

[[site]]
names = ["www.example.org"]
root = "www"
listing = false
index = ["index.xhtml"]
symlinks = "never"
precompressed = false
types = { deb = "application/vnd.debian.binary-package", adoc = "text/asciidoc" }
error_pages = { 404 = "/.errors/gone.html" }
[[site.cache_control]]
prefix = "/assets/"
value = "public, max-age=31536000, immutable"
[[site.headers]]
prefix = "/assets/"
name = "X-Robots-Tag"
value = "noindex"
"#;
    let srv = Server::start_with_config(d, toml, &[]);
    // Header names in any case: compared lowercased.
    let ask = |host: &str, path: &str, extra: &[&str]| {
        curl_site(&srv, host, path, extra).to_ascii_lowercase()
    };
    let (m, w) = ("main.example.org", "www.example.org");
    // The index: each site's own list.
    assert!(ask(m, "/", &[]).ends_with("\n\nan index.html\n"));
    assert!(ask(w, "/", &[]).ends_with("\n\nwww's own index\n"));
    // Types: the site's over the main's, the main's others kept (none here).
    assert!(ask(m, "/a.deb", &[]).contains("content-type: application/x-deb\n"));
    let r = ask(w, "/a.deb", &[]);
    assert!(
        r.contains("content-type: application/vnd.debian.binary-package\n"),
        "{r}"
    );
    assert!(ask(w, "/notes.adoc", &[]).contains("content-type: text/asciidoc\n"));
    assert!(!ask(m, "/notes.adoc", &[]).contains("content-type: text/asciidoc"));
    // Cache-Control: the site's list replaces the main's.
    assert!(ask(m, "/a.deb", &[]).contains("cache-control: max-age=86400\n"));
    assert!(!ask(w, "/a.deb", &[]).contains("cache-control"));
    let r = ask(w, "/assets/app.js", &[]);
    assert!(
        r.contains("cache-control: public, max-age=31536000, immutable\n"),
        "{r}"
    );
    assert!(!ask(m, "/assets/app.js", &[]).contains("cache-control"));
    // Other headers: on a file's own answers (200, 206, 304, HEAD), not on errors
    // or listings; the site's list replaces the main's.
    let cors = "access-control-allow-origin: *\n";
    assert!(ask(m, "/a.deb", &[]).contains(cors));
    assert!(ask(m, "/a.deb", &["-I"]).contains(cors));
    assert!(ask(m, "/a.deb", &["-r", "0-1"]).contains(cors));
    let r = ask(
        m,
        "/a.deb",
        &["-H", "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT"],
    );
    assert!(r.starts_with("http/1.1 304") && r.contains(cors), "{r}");
    assert!(!ask(m, "/missing", &[]).contains("access-control"));
    assert!(!ask(w, "/a.deb", &[]).contains("access-control"));
    let r = ask(w, "/assets/app.js", &[]);
    assert!(
        r.contains("x-robots-tag: noindex\n") && !r.contains("access-control"),
        "{r}"
    );
    // An `always` rule: on every answer of the site (a file's once, a listing, a
    // 404, a redirect to a directory), not on the site whose list replaces it.
    let hsts = "strict-transport-security: max-age=63072000\n";
    for (path, status) in [
        ("/a.deb", "200"),
        ("/assets/", "200"),
        ("/missing", "404"),
        ("/assets", "301"),
    ] {
        let r = ask(m, path, &[]);
        assert!(r.starts_with(&format!("http/1.1 {status}")), "{path}: {r}");
        assert_eq!(r.matches(hsts).count(), 1, "{path}: {r}");
    }
    assert!(!ask(w, "/a.deb", &[]).contains("strict-transport"));
    // Error pages: merged; the site's 404, the main's 403 path in the site's root.
    let r = ask(w, "/missing", &[]);
    assert!(
        r.starts_with("http/1.1 404") && r.ends_with("\n\nwww 404\n"),
        "{r}"
    );
    let r = ask(w, "/assets/", &[]);
    assert!(
        r.starts_with("http/1.1 403") && r.ends_with("\n\nwww 403\n"),
        "{r}"
    );
    let r = ask(m, "/missing", &[]);
    assert!(
        r.starts_with("http/1.1 404") && r.ends_with("\n\nmain 404\n"),
        "{r}"
    );
    // Precompressed siblings: off on the site only.
    let gz = ["-H", "Accept-Encoding: gzip"];
    assert!(ask(m, "/x.txt", &gz).contains("content-encoding: gzip\n"));
    let r = ask(w, "/x.txt", &gz);
    assert!(
        !r.contains("content-encoding") && r.ends_with("\n\nplain text, plain text, plain\n"),
        "{r}"
    );
    // Symlinks: the main site follows one inside its root, the site follows none.
    assert!(ask(m, "/link.txt", &[]).starts_with("http/1.1 200"));
    let r = ask(w, "/link.txt", &[]);
    assert!(
        !r.starts_with("http/1.1 200") && !r.contains("plain text"),
        "{r}"
    );
}

/// A path rule and an `always` rule for one name: the first rule for the name wins,
/// on fresh and on kept answers, and each answer carries the name once.
#[test]
fn the_first_rule_for_a_name_wins_between_path_and_always_rules() {
    let d = docroot();
    let base = d.path();
    std::fs::create_dir_all(base.join("embed")).unwrap();
    std::fs::write(base.join("embed/player.html"), b"player\n").unwrap();
    std::fs::write(base.join("page.html"), b"page\n").unwrap();
    let toml = r#"
[[files.headers]]
prefix = "/embed/"
name = "X-Frame-Options"
value = "SAMEORIGIN"
[[files.headers]]
name = "x-frame-options"
value = "DENY"
always = true
[[files.headers]]
name = "Referrer-Policy"
value = "no-referrer"
always = true
[[files.headers]]
prefix = "/embed/"
name = "Referrer-Policy"
value = "origin"
"#;
    let srv = Server::start_with_config(d, toml, &[]);
    let ask =
        |path: &str, extra: &[&str]| curl_site(&srv, "localhost", path, extra).to_ascii_lowercase();
    // Twice each: the second answer is a kept one where the server keeps it.
    for _ in 0..2 {
        for (path, extra, status, frame) in [
            ("/embed/player.html", &[][..], "200", "sameorigin"),
            ("/embed/player.html", &["-I"][..], "200", "sameorigin"),
            (
                "/embed/player.html",
                &["-r", "0-1"][..],
                "206",
                "sameorigin",
            ),
            ("/page.html", &[][..], "200", "deny"),
            ("/embed/", &[][..], "200", "deny"),
            ("/embed/missing", &[][..], "404", "deny"),
            ("/embed", &[][..], "301", "deny"),
        ] {
            let r = ask(path, extra);
            assert!(r.starts_with(&format!("http/1.1 {status}")), "{path}: {r}");
            assert_eq!(r.matches("x-frame-options:").count(), 1, "{path}: {r}");
            assert!(
                r.contains(&format!("x-frame-options: {frame}\n")),
                "{path}: {r}"
            );
            // The `always` rule came first for this name: the path rule never applies.
            assert_eq!(r.matches("referrer-policy:").count(), 1, "{path}: {r}");
            assert!(r.contains("referrer-policy: no-referrer\n"), "{path}: {r}");
        }
    }
}

/// The way a box with many sites is run: one file per site in `sites.d/`, named by
/// `include`; a new file and a reload add its site, a broken one is refused with
/// its own name and line while the sites already serving go on.
/// Answers made before a request names its site (a head that does not parse, a
/// request line over the limit, a head that stops arriving) carry the default
/// site's `always` headers, and only those: another site's are not the default's.
#[test]
fn answers_before_a_site_is_named_carry_the_default_sites_always_headers() {
    let d = docroot();
    std::fs::create_dir(d.path().join("other")).unwrap();
    let toml = r#"
[http]
header_timeout = "1s"
max_request_line = 1024
[[files.headers]]
name = "Strict-Transport-Security"
value = "max-age=63072000"
always = true

[[site]]
names = ["other.example"]
root = "other"
[[site.headers]]
name = "X-Other"
value = "1"
always = true
"#;
    let srv = Server::start_with_config(d, toml, &[]);
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(2000));
    for (raw, status) in [
        // A header line without a colon.
        (
            "GET / HTTP/1.1\r\nHost: other.example\r\nno colon\r\n\r\n",
            400,
        ),
        (long.as_str(), 414),
        // Half a head, then nothing until the head deadline.
        ("GET / HTTP/1.1\r\nHost: other.example\r\n", 408),
    ] {
        let mut s = srv.connect();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        std::io::Write::write_all(&mut s, raw.as_bytes()).unwrap();
        let r = read_response(&mut s, false).expect("an answer");
        assert_eq!(r.status, status, "{r:?}");
        let hsts: Vec<_> = r
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("strict-transport-security"))
            .collect();
        assert_eq!(hsts.len(), 1, "{r:?}");
        assert_eq!(hsts[0].1, "max-age=63072000", "{r:?}");
        assert_eq!(r.header("x-other"), None, "{r:?}");
    }
    // The other site's own answers carry its own.
    let r = curl_site(&srv, "other.example", "/missing", &[]).to_ascii_lowercase();
    assert!(
        r.starts_with("http/1.1 404") && r.contains("x-other: 1"),
        "{r}"
    );
}

#[test]
fn sites_from_included_files_and_a_reload_that_adds_one() {
    let d = docroot();
    let base = d.path().to_path_buf();
    for (dir, text) in [("www-a", "site a\n"), ("www-b", "site b\n")] {
        std::fs::create_dir_all(base.join(".sites.d").join(dir)).unwrap();
        std::fs::write(base.join(".sites.d").join(dir).join("who.txt"), text).unwrap();
    }
    std::fs::write(
        base.join(".sites.d/a.toml"),
        "[[site]]\nnames = [\"a.example.org\"]\nroot = \"www-a\"\n",
    )
    .unwrap();
    let toml = "include = [\".sites.d/*.toml\"]\n";
    let srv = Server::start_with_config(d, toml, &[]);
    // `sluice check` names the file each included site comes from.
    let cfg = base.join(".test-config.toml");
    let out = Command::new(bin())
        .args(["check", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let from = format!(
        "site a.example.org (from {}): ",
        base.join(".sites.d/a.toml").display()
    );
    assert!(text.contains(&from), "{text}");
    assert_eq!(
        get(&srv, Some("a.example.org"), "/who.txt").text(),
        "site a\n",
        "the included site, its root relative to its own file"
    );
    assert_eq!(get(&srv, Some("b.example.org"), "/who.txt").status, 404);
    // A new file: served after a reload.
    std::fs::write(
        base.join(".sites.d/b.toml"),
        "[[site]]\nnames = [\"b.example.org\"]\nroot = \"www-b\"\n",
    )
    .unwrap();
    srv.reload();
    assert_eq!(
        get(&srv, Some("b.example.org"), "/who.txt").text(),
        "site b\n"
    );
    // A broken one: refused with its file and line; both sites keep serving.
    std::fs::write(
        base.join(".sites.d/c.toml"),
        "[[site]]\nnames = [\"a.example.org\"]\nroot = \"www-b\"\n",
    )
    .unwrap();
    srv.signal(libc::SIGHUP);
    wait_for_stderr(&srv, "reload failed");
    let err = srv.stderr();
    assert!(
        err.contains(".sites.d/c.toml:2: site[1].names: \"a.example.org\" is also in site[1] of "),
        "{err}"
    );
    assert_eq!(
        get(&srv, Some("a.example.org"), "/who.txt").text(),
        "site a\n"
    );
    assert_eq!(
        get(&srv, Some("b.example.org"), "/who.txt").text(),
        "site b\n"
    );
}

/// A mirror's notes on its listings (Apache's `HeaderName` and `ReadmeName`): the
/// directory's header file above the table, its readme below, HTML as it is and
/// text escaped; per site; never in the JSON form; changed files shown once the
/// page is built again.
#[test]
fn listings_show_the_directorys_header_and_readme() {
    if !curl_available() {
        panic!("curl is needed (scripts/test.sh installs it)");
    }
    let d = docroot();
    let base = d.path().to_path_buf();
    std::fs::create_dir_all(base.join("pub/debian")).unwrap();
    std::fs::create_dir_all(base.join("www/pub")).unwrap();
    std::fs::write(
        base.join("pub/HEADER.html"),
        "<p class=\"n\">Welcome to the mirror</p>",
    )
    .unwrap();
    std::fs::write(
        base.join("pub/README"),
        "Sync: every 6 h <ops@example.org> & co\n",
    )
    .unwrap();
    std::fs::write(base.join("pub/a.iso"), "iso").unwrap();
    std::fs::write(base.join("www/pub/README"), "www's README\n").unwrap();
    std::fs::write(base.join("www/pub/README.txt"), "www's README.txt\n").unwrap();
    let toml = r#"
[files]
listing_header = "HEADER.html"
listing_readme = "README"
cache_validity = "100ms"

[[site]]
names = ["www.example.org"]
root = "www"
listing_header = ""
listing_readme = "README.txt"
"#;
    let srv = Server::start_with_config(d, toml, &[]);
    let page = |host: &str, path: &str, extra: &[&str]| curl_site(&srv, host, path, extra);
    let p = page("a", "/pub/", &[]);
    let (table, end) = (p.find("<table>").unwrap(), p.find("</table>").unwrap());
    let header = p
        .find("<p class=\"n\">Welcome to the mirror</p>")
        .expect(&p);
    let readme = p
        .find("<pre>Sync: every 6 h &lt;ops@example.org&gt; &amp; co\n</pre>")
        .expect(&p);
    assert!(header < table && readme > end, "{p}");
    assert!(
        p.contains(">a.iso<") && p.contains(">README<"),
        "still listed: {p}"
    );
    // A directory without them: none; the JSON form: entries only.
    let p = page("a", "/pub/debian/", &[]);
    assert!(!p.contains("<pre>") && !p.contains("Welcome"), "{p}");
    let j = page("a", "/pub/?format=json", &[]);
    assert!(j.contains("\n\n[") && !j.contains("Sync"), "{j}");
    // The site's own names.
    let p = page("www.example.org", "/pub/", &[]);
    assert!(p.contains("<pre>www&#39;s README.txt\n</pre>"), "{p}");
    assert!(
        !p.contains("www&#39;s README\n") && !p.contains("Welcome"),
        "{p}"
    );
    // A changed readme is shown once the page is built again (cache_validity).
    std::fs::write(base.join("pub/README"), "Sync: hourly\n").unwrap();
    let t = std::time::Instant::now();
    while !page("a", "/pub/", &[]).contains("<pre>Sync: hourly\n</pre>") {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the new readme never shown"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The operator's HTML note in a browser: shown, its image from the site loaded
/// (the listing's policy allows images from the site), its script not run (the
/// policy allows none).
#[test]
fn a_listing_header_renders_in_chromium_without_running_script() {
    let d = docroot();
    let base = d.path().to_path_buf();
    std::fs::create_dir_all(base.join("pub")).unwrap();
    std::fs::write(
        base.join("pub/HEADER.html"),
        "<p id=\"note\">Welcome to the mirror</p><img src=\"/logo.svg\" alt=\"logo\">\
         <script>document.body.setAttribute('data-ran', 'yes')</script>",
    )
    .unwrap();
    std::fs::write(
        base.join("logo.svg"),
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"8\" height=\"8\"/>",
    )
    .unwrap();
    let log = log_path("sites-note-chromium");
    let toml = format!(
        "[files]\nlisting_header = \"HEADER.html\"\n[log]\naccess = \"{}\"\n",
        log.display()
    );
    let srv = Server::start_with_config(d, &toml, &[]);
    let dom = chromium_dom(&srv.url("/pub/"), 3000);
    assert!(
        dom.contains("<p id=\"note\">Welcome to the mirror</p>"),
        "{dom}"
    );
    // Had the script run, the body would carry its attribute.
    assert!(dom.contains("</head><body>\n"), "the script ran: {dom}");
    wait_for_lines(&log, 1, Duration::from_secs(10), |l| {
        l.contains("\"GET /logo.svg HTTP/1.1\" 200") && l.contains("Chrome")
    });
}
