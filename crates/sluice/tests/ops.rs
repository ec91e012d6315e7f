//! Operations: config files and `sluice check`, SIGHUP reload (good and bad),
//! `sluice reload`,
//! SIGTERM with a download in flight, the access log, the no-argument default.

use sluice_testkit::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `sluice check CONFIG`: whether it passed, and what it said on stderr.
fn check(cfg: &std::path::Path) -> (bool, String) {
    let o = Command::new(bin())
        .args(["check", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn check_reports_file_line_and_key() {
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join("bad.toml");
    std::fs::write(&bad, "[server]\nworkers = 2\nlisen = \"x\"\n").unwrap();
    let (ok, err) = check(&bad);
    assert!(!ok);
    assert!(
        err.contains("bad.toml:3:") && err.contains("lisen"),
        "{err}"
    );

    let good = d.path().join("good.toml");
    std::fs::write(&good, "[server]\nroot = \".\"\n[files]\nio = \"read\"\n").unwrap();
    let (ok, err) = check(&good);
    assert!(ok, "{err}");

    let rules = d.path().join("r.conf");
    std::fs::write(
        &rules,
        "Redirect 301 /a /b\nRewriteEngine On\nRewriteRule ^/x$ /y [P]\n",
    )
    .unwrap();
    std::fs::write(&good, "[rules]\nfiles = [\"r.conf\"]\n").unwrap();
    let (ok, err) = check(&good);
    assert!(
        !ok && err.contains("r.conf:3:") && err.contains("[p]"),
        "{err}"
    );
}

/// What is checked only when the config is put to use (a directory, a file it
/// names, an address list) is still named at the config's line, in the file that
/// says it: the operator goes to the line, not on a search.
#[test]
fn what_a_config_names_but_cannot_use_is_named_at_its_line() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::create_dir(p.join("sites.d")).unwrap();
    // Two key pairs: the second key does not belong to the first certificate.
    for n in ["1", "2"] {
        let ok = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args(["-subj", "/CN=a", "-keyout"])
            .arg(p.join(format!("k{n}.pem")))
            .arg("-out")
            .arg(p.join(format!("c{n}.pem")))
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let cases: Vec<(&str, String, String)> = vec![
        (
            "root.toml",
            "[server]\nworkers = 1\nroot = \"nowhere\"\n".into(),
            "root.toml:3: root ".into(),
        ),
        (
            "site.toml",
            "[[site]]\nnames = [\"a\"]\nroot = \".\"\n[[site]]\nnames = [\"b\"]\n\nroot = \"gone\"\n".into(),
            "site.toml:7: site b: root ".into(),
        ),
        (
            "alias.toml",
            "[[server.alias]]\nprefix = \"/x\"\nroot = \".\"\n[[server.alias]]\nprefix = \"/y\"\nroot = \"gone\"\n".into(),
            "alias.toml:6: alias /y: root ".into(),
        ),
        (
            "inline.toml",
            "[server]\nalias = [\n  { prefix = \"/x\", root = \"gone\" },\n]\n".into(),
            // Written inline, the array's line.
            "inline.toml:2: alias /x: root ".into(),
        ),
        (
            "rules.toml",
            "# the rules\n[rules]\nfiles = [\"missing.conf\"]\n".into(),
            "rules.toml:3: ".into(),
        ),
        (
            "types.toml",
            "[files]\nindex = [\"index.html\"]\ntypes_file = \"missing.types\"\n".into(),
            "types.toml:3: ".into(),
        ),
        (
            "cidr.toml",
            "[status]\nenabled = true\nallow = [\"127.0.0.1/40\"]\n".into(),
            "cidr.toml:3: status.allow: ".into(),
        ),
        (
            "tls.toml",
            "[tls]\nlisten = [\"127.0.0.1:0\"]\ncert = \"c1.pem\"\nkey = \"k2.pem\"\n".into(),
            "tls.toml:4: ".into(),
        ),
        (
            "include.toml",
            "include = [\"sites.d/*.toml\"]\n".into(),
            // The included file's own line.
            "sites.d/one.toml:4: site c: ".into(),
        ),
    ];
    std::fs::write(
        p.join("sites.d/one.toml"),
        "[[site]]\nnames = [\"c\"]\nroot = \".\"\nrules = [\"missing.rules\"]\n",
    )
    .unwrap();
    for (name, text, want) in cases {
        let f = p.join(name);
        std::fs::write(&f, text).unwrap();
        let (ok, err) = check(&f);
        assert!(!ok, "{name} passed");
        let want = format!("{}/{want}", p.display());
        assert!(err.contains(&want), "{name}: want {want:?} in {err}");
    }
    // An error page that is not there is not an error (it may be made later),
    // but `sluice check` says so.
    let f = p.join("pages.toml");
    std::fs::write(
        &f,
        "[server]\nroot = \".\"\n[files]\nerror_pages = { 404 = \"/c1.pem\", 410 = \"/gone.html\" }\n",
    )
    .unwrap();
    let (ok, err) = check(&f);
    assert!(ok, "{err}");
    assert!(
        err.contains("error page for 410 /gone.html: no such file"),
        "{err}"
    );
    assert!(!err.contains("error page for 404"), "{err}");
}

#[test]
fn reload_applies_good_config_and_keeps_serving_on_bad() {
    let dir = docroot();
    let cfg = dir.path().join(".reload.toml");
    std::fs::write(&cfg, "[files]\nlisting = true\n").unwrap();
    let srv = Server::start_in(dir, &["--config", cfg.to_str().unwrap()]);
    let list = |srv: &Server| srv.get("GET /list/ HTTP/1.1\r\nHost: a\r\n\r\n").status;
    assert_eq!(list(&srv), 200);

    std::fs::write(&cfg, "[files]\nlisting = false\n").unwrap();
    // Each serving process reloads on its own (two, by default): wait until every
    // one has, not until one answers 403 (a request to the other, still reloading,
    // then got 200 after the bad reload below, once in a loaded run of the suite).
    srv.reload();
    for _ in 0..8 {
        assert_eq!(list(&srv), 403, "reload not applied");
    }

    std::fs::write(&cfg, "[files]\nlisting = maybe\n").unwrap();
    srv.signal(libc::SIGHUP);
    wait_for_stderr(&srv, "reload failed");
    for _ in 0..8 {
        assert_eq!(list(&srv), 403, "bad reload must keep the previous config");
    }
    assert!(srv.get("GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n").status == 200);
    let err = srv.stderr();
    assert!(
        err.contains("reload failed") && err.contains(":2:"),
        "{err}"
    );
    let _ = std::fs::remove_file(cfg);
}

/// `sluice reload` returns once the new configuration serves in every serving
/// process (two here): every request made right after it returns, on new
/// connections spread over both processes, sees it. A config with an error is
/// reported with its file and line, by the check before the signal or (`--config`
/// left out) by the server's own answer, and the old configuration goes on
/// serving. A pid that is not a sluice server gets no signal.
#[test]
fn sluice_reload_returns_once_the_new_config_serves_or_says_why_not() {
    let srv = Server::start_with_config(docroot(), "[server]\nworkers = 2\n", &[]);
    let cfg = srv.root().join(".test-config.toml");
    let rules = srv.root().join(".r.conf");
    let reload = |with_config: bool| {
        let mut c = Command::new(bin());
        c.args([
            "reload",
            "--pid",
            &srv.pid().to_string(),
            "--timeout",
            "20s",
        ]);
        if with_config {
            c.args(["--config", cfg.to_str().unwrap()]);
        }
        c.output().unwrap()
    };
    let old = |srv: &Server| srv.get("GET /old HTTP/1.1\r\nHost: a\r\n\r\n").status;
    assert_eq!(old(&srv), 404);
    std::fs::write(&rules, "Redirect 301 /old /hello.txt\n").unwrap();
    std::fs::write(
        &cfg,
        "[server]\nworkers = 2\n[rules]\nfiles = [\".r.conf\"]\n",
    )
    .unwrap();
    let o = reload(true);
    assert!(o.status.success(), "{o:?}");
    let seen: Vec<u16> = (0..40).map(|_| old(&srv)).collect();
    assert!(
        seen.iter().all(|&s| s == 301),
        "answers right after the reload returned: {seen:?}"
    );

    std::fs::write(&rules, "Redirect 301 /old /hello.txt\nbogus\n").unwrap();
    for with_config in [true, false] {
        let o = reload(with_config);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(".r.conf:2:"),
            "with --config {with_config}: {o:?}"
        );
    }
    assert_eq!(old(&srv), 301, "the old configuration serves on");
    assert_eq!(
        srv.stderr().matches("reload failed").count(),
        1,
        "the check before the signal sent none: {}",
        srv.stderr()
    );

    let o = Command::new(bin())
        .args(["reload", "--pid", &std::process::id().to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("not a sluice server"),
        "{err}"
    );
}

/// `[log] level` filters the server's own log from the start and follows a
/// reload; a reload names the settings that wait for a restart; a level that is
/// not one is `file:line` in `sluice check` and refused by a reload.
#[test]
fn the_log_level_is_applied_at_start_and_by_a_reload_and_restart_only_keys_are_named() {
    let dir = docroot();
    let cfg = dir.path().join(".level.toml");
    std::fs::write(&cfg, "[log]\nlevel = \"warn\"\n").unwrap();
    let srv = Server::start_in(dir, &["--config", cfg.to_str().unwrap()]);
    let list = |srv: &Server| srv.get("GET /list/ HTTP/1.1\r\nHost: a\r\n\r\n").status;
    // At "warn" a reload's own info line is not logged, though the reload applies.
    std::fs::write(&cfg, "[log]\nlevel = \"warn\"\n[files]\nlisting = false\n").unwrap();
    srv.signal(libc::SIGHUP);
    wait_until(
        || list(&srv) == 403,
        || format!("listing off: {}", srv.stderr()),
    );
    assert!(
        !srv.stderr().contains("reloaded configuration"),
        "{}",
        srv.stderr()
    );
    // Back to "info" (and a start-only key changed): the line is there, with the
    // warning that names what waits for a restart.
    std::fs::write(
        &cfg,
        "[log]\nlevel = \"info\"\n[files]\nlisting = false\ndisk_threads = 2\n",
    )
    .unwrap();
    srv.reload();
    let err = srv.stderr();
    assert!(
        err.contains("files.disk_threads changed and take effect only after a restart"),
        "{err}"
    );
    // A level that is not one: the reload is refused, with the line.
    std::fs::write(&cfg, "[files]\nlisting = true\n[log]\nlevel = \"loud\"\n").unwrap();
    srv.signal(libc::SIGHUP);
    wait_for_stderr(&srv, "reload failed");
    let err = srv.stderr();
    assert!(err.contains(".level.toml:4: log.level"), "{err}");
    assert_eq!(list(&srv), 403, "the refused reload changed nothing");
    let (ok, err) = check(&cfg);
    assert!(
        !ok && err.contains(":4: log.level") && err.contains("\"loud\" is not a level"),
        "{err}"
    );
}

#[test]
fn the_operators_content_types_are_served_and_a_reload_changes_them() {
    let dir = docroot();
    std::fs::write(dir.path().join("site.webmanifest"), b"{}").unwrap();
    std::fs::write(dir.path().join("disc.ISO"), vec![0u8; 40_000]).unwrap();
    let cfg = dir.path().join(".types.toml");
    let types = |t: &str| {
        format!(
            "[files]\ntypes = {{ webmanifest = \"{t}\", \".iso\" = \"application/x-cd-image\" }}\n"
        )
    };
    std::fs::write(&cfg, types("application/manifest+json")).unwrap();
    let srv = Server::start_in(dir, &["--config", cfg.to_str().unwrap()]);
    // What curl shows, asked twice (the second from the worker's kept answer).
    let type_of = |path: &str| {
        let out = curl(&["-o", "/dev/null", "-w", "%{content_type}", &srv.url(path)]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for _ in 0..2 {
        assert_eq!(type_of("/site.webmanifest"), "application/manifest+json");
        assert_eq!(type_of("/disc.ISO"), "application/x-cd-image");
        assert_eq!(type_of("/hello.txt"), "text/plain; charset=utf-8");
    }
    std::fs::write(&cfg, types("application/json")).unwrap();
    srv.signal(libc::SIGHUP);
    wait_until(
        || type_of("/site.webmanifest") == "application/json",
        || "reload not applied".into(),
    );
}

/// `[files] types_file`: a `mime.types` file (Apache's `TypesConfig`) under
/// `[files] types` and over the built-in table, read again on a reload; a bad line
/// is named `file:line` and a reload with it keeps the types that were serving.
#[test]
fn a_mime_types_file_is_read_under_the_operators_types_and_again_on_reload() {
    let dir = docroot();
    for name in ["tool.jar", "notes.adoc", "disc.iso", "page.html"] {
        std::fs::write(dir.path().join(name), b"x").unwrap();
    }
    let cfg = dir.path().join(".types.toml");
    let types = dir.path().join(".mime.types");
    std::fs::write(
        &cfg,
        "[files]
types_file = \".mime.types\"
types = { adoc = \"text/asciidoc\" }
",
    )
    .unwrap();
    let file = |adoc: &str| {
        format!(
            "# as /etc/mime.types\napplication/java-archive\tjar\ntext/x-asciidoc {adoc} \
             # the config's type wins\napplication/x-trash ~ %\napplication/vnd.oasis.opendocument.text\n"
        )
    };
    std::fs::write(&types, file("adoc")).unwrap();
    let srv = Server::start_in(dir, &["--config", cfg.to_str().unwrap()]);
    let type_of = |path: &str| {
        let out = curl(&["-o", "/dev/null", "-w", "%{content_type}", &srv.url(path)]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(type_of("/tool.jar"), "application/java-archive");
    assert_eq!(type_of("/notes.adoc"), "text/asciidoc");
    assert_eq!(type_of("/disc.iso"), "application/x-iso9660-image");
    // A bad line: `sluice check` names it, and a reload keeps what was serving.
    std::fs::write(
        &types,
        format!("{}text/plain  jar\nnot-a-type jar\n", file("adoc")),
    )
    .unwrap();
    let (ok, err) = check(&cfg);
    assert!(
        !ok && err.contains(".mime.types:7: ") && err.contains("not-a-type"),
        "{err}"
    );
    srv.signal(libc::SIGHUP);
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(type_of("/tool.jar"), "application/java-archive");
    // Fixed: the reload reads the file again (its last line for an extension
    // wins, as in Apache).
    std::fs::write(
        &types,
        "application/java-archive jar\ntext/x-java-source jar\n",
    )
    .unwrap();
    srv.signal(libc::SIGHUP);
    wait_until(
        || type_of("/tool.jar") == "text/x-java-source",
        || "reload not applied".into(),
    );
    assert_eq!(type_of("/page.html"), "text/html; charset=utf-8");
}

/// `[http] limit_rate`: each connection is sent at most that many bytes a second
/// (the kernel paces the socket), checked with curl on a 3 MiB file: at 1 MB/s it
/// cannot arrive in under about 2.5 s (the first window goes unpaced), where the
/// same download unlimited takes milliseconds. A reload turning it off frees new
/// connections. A lower bound on time, which load cannot make fail.
#[test]
fn limit_rate_paces_each_connection_and_a_reload_lifts_it() {
    let dir = docroot();
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("three.bin"), &data).unwrap();
    let cfg = dir.path().join(".rate.toml");
    std::fs::write(&cfg, "[http]\nlimit_rate = 1000000\n").unwrap();
    let srv = Server::start_in(dir, &["--config", cfg.to_str().unwrap()]);
    let fetch = || {
        let t = std::time::Instant::now();
        let out = curl(&[&srv.url("/three.bin")]);
        assert!(out.stdout == data, "{} bytes", out.stdout.len());
        t.elapsed()
    };
    let paced = fetch();
    assert!(paced >= Duration::from_millis(2000), "{paced:?} at 1 MB/s");
    std::fs::write(&cfg, "[http]\nlimit_rate = 0\n").unwrap();
    srv.signal(libc::SIGHUP);
    wait_until(
        || fetch() < paced / 2,
        || "the reload did not lift the limit".into(),
    );
    // Paced at twice the slow-read floor (the least the config allows), over
    // rate windows of 1 s: a download is never cut as a slow reader.
    std::fs::write(
        &cfg,
        "[http]\nlimit_rate = 1000000\n[condition]\nmin_send_rate = 500000\nsend_rate_window = \"1s\"\n",
    )
    .unwrap();
    srv.signal(libc::SIGHUP);
    wait_until(
        || fetch() >= Duration::from_millis(2000),
        || "the reload did not set the limit again".into(),
    );
}

/// One GET of `path` for `host` on `s` (keep-alive), timed: when its first
/// `mark` body bytes had arrived and when all had, from the request.
fn timed_get(
    s: &mut std::net::TcpStream,
    host: &str,
    path: &str,
    mark: usize,
) -> (Duration, Duration, usize) {
    s.set_nodelay(true).unwrap();
    let t = Instant::now();
    // One write: a request split over writes waits for the first one's ACK.
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut len = None;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = Some(v.trim().parse::<usize>().unwrap());
        }
    }
    let len = len.expect("a Content-Length");
    let (mut got, mut at_mark) = (0, None);
    let mut buf = vec![0u8; 64 << 10];
    while got < len {
        let n = r.read(&mut buf[..(len - got).min(64 << 10)]).unwrap();
        assert!(n > 0, "closed after {got} of {len} bytes");
        got += n;
        if got >= mark && at_mark.is_none() {
            at_mark = Some(t.elapsed());
        }
    }
    assert!(r.buffer().is_empty(), "bytes past the body");
    (at_mark.unwrap(), t.elapsed(), len)
}

/// `limit_rate_after`, and a site's own `limit_rate`: with `[http]` at 2 MB/s
/// after 1 MiB, a 4 MiB file's first MiB arrives at once and the other 3 MiB take
/// at least 0.9 s (1.57 s at the rate; on loopback the switch comes up to ~1 MB
/// late, see `send::Pace::due`); the next response on the same connection starts unpaced
/// again and is paced past the threshold again. A site with `limit_rate_after = 0` paces
/// from the first byte (4 MiB: 2.1 s at the rate, less the kernel's unpaced first
/// window); a site with `limit_rate = 0` does not pace at all. Lower bounds on
/// time, which load cannot make fail; "at once" and "not at all" are checked
/// against a paced download of the same run.
#[test]
fn limit_rate_after_and_a_sites_own_limit() {
    let dir = docroot();
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("four.bin"), &data).unwrap();
    let root = dir.path().to_str().unwrap().to_string();
    let toml = format!(
        "[http]\nlimit_rate = 2000000\nlimit_rate_after = 1048576\n\
         [[site]]\nnames = [\"slow.test\"]\nroot = \"{root}\"\nlimit_rate_after = 0\n\
         [[site]]\nnames = [\"free.test\"]\nroot = \"{root}\"\nlimit_rate = 0\n"
    );
    let srv = Server::start_with_config(dir, &toml, &[]);
    let mut s = srv.connect();
    for round in 0..2 {
        let (first, all, len) = timed_get(&mut s, "main.test", "/four.bin", 1 << 20);
        assert_eq!(len, data.len());
        let paced = all - first;
        eprintln!("pacing: round {round}: first MiB {first:?}, the rest {paced:?}");
        assert!(
            paced >= Duration::from_millis(900),
            "round {round}: the 3 MiB after the threshold in {paced:?}"
        );
        // The next response on the same socket, paced until then, starts unpaced
        // again; its fast part may come out short (`send::Pace::due`), so
        // the second round asks less of it.
        let times = if round == 0 { 4 } else { 2 };
        assert!(
            first * times < paced,
            "round {round}: the first MiB took {first:?}, the rest {paced:?}"
        );
    }
    let mut slow = srv.connect();
    let (first, all, _) = timed_get(&mut slow, "slow.test", "/four.bin", 1 << 20);
    assert!(
        all >= Duration::from_millis(1000),
        "slow.test's 4 MiB in {all:?}"
    );
    let mut free = srv.connect();
    let (_, free_all, _) = timed_get(&mut free, "free.test", "/four.bin", 1 << 20);
    eprintln!("pacing: slow.test {first:?} / {all:?}, free.test {free_all:?}");
    assert!(
        free_all * 2 < all,
        "free.test's 4 MiB in {free_all:?}, slow.test's in {all:?}"
    );
}

/// `[[files.rate_limits]]`: a path's rule paces its files' answers in place of
/// the site's limit, and `rate = 0` exempts them. With `[http]` at 2 MB/s, a
/// 3 MiB file under `/iso/` (a rule at 1 MB/s) takes at least 2 s (3.1 s at the
/// rate, less the kernel's unpaced first window), another at least 1 s (1.6 s);
/// one whose name ends `.free` (a rule at 0) arrives more than twice as fast as
/// the paced one. Lower bounds on time, and a comparison within the run.
#[test]
fn rate_limits_by_path_replace_the_sites() {
    let dir = docroot();
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::create_dir(dir.path().join("iso")).unwrap();
    for name in ["iso/three.bin", "three.bin", "three.free"] {
        std::fs::write(dir.path().join(name), &data).unwrap();
    }
    let toml = "[http]\nlimit_rate = 2000000\n\
                [[files.rate_limits]]\nprefix = \"/iso/\"\nrate = 1000000\n\
                [[files.rate_limits]]\nsuffix = \".free\"\nrate = 0\n";
    let srv = Server::start_with_config(dir, toml, &[]);
    let took = |path: &str| {
        let mut s = srv.connect();
        let (_, all, len) = timed_get(&mut s, "a", path, 1);
        assert_eq!(len, data.len(), "{path}");
        all
    };
    let (iso, site, free) = (
        took("/iso/three.bin"),
        took("/three.bin"),
        took("/three.free"),
    );
    eprintln!("rate_limits: /iso/ {iso:?}, the site's {site:?}, exempt {free:?}");
    assert!(
        iso >= Duration::from_millis(2000),
        "/iso/ at 1 MB/s in {iso:?}"
    );
    assert!(
        site >= Duration::from_millis(1000),
        "the site's 2 MB/s in {site:?}"
    );
    assert!(
        free * 2 < site,
        "exempt in {free:?}, the site's in {site:?}"
    );
}

#[test]
fn cache_control_by_path_on_every_answer_of_a_file_and_nothing_else() {
    let toml = "[[files.cache_control]]\nprefix = \"/sub/\"\nvalue = \"no-cache\"\n\
                [[files.cache_control]]\nsuffix = \".bin\"\nvalue = \"public, max-age=31536000, immutable\"\n";
    let srv = Server::start_with_config(docroot(), toml, &[]);
    let cc = |raw: &str| {
        let r = srv.get(raw);
        (r.status, r.header("cache-control").map(str::to_string))
    };
    let long = Some("public, max-age=31536000, immutable".to_string());
    let get = "GET /big.bin HTTP/1.1\r\nHost: a\r\n";
    // Asked twice: the second answer is the worker's kept one.
    for _ in 0..2 {
        assert_eq!(cc(&format!("{get}\r\n")), (200, long.clone()));
        assert_eq!(
            cc(&format!("{get}Range: bytes=0-9\r\n\r\n")),
            (206, long.clone())
        );
        assert_eq!(
            cc(&format!("{get}Range: bytes=0-1,5-6\r\n\r\n")),
            (206, long.clone())
        );
        assert_eq!(
            cc("HEAD /big.bin HTTP/1.1\r\nHost: a\r\n\r\n"),
            (200, long.clone())
        );
        // The first rule that matches: an index file under /sub/.
        assert_eq!(
            cc("GET /sub/ HTTP/1.1\r\nHost: a\r\n\r\n"),
            (200, Some("no-cache".into()))
        );
        // No rule for it: no header.
        assert_eq!(
            cc("GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n"),
            (200, None)
        );
        // Not a file's answer: a 404 and a 416 get none.
        assert_eq!(cc("GET /nope.bin HTTP/1.1\r\nHost: a\r\n\r\n"), (404, None));
        assert_eq!(
            cc(&format!("{get}Range: bytes=999999-\r\n\r\n")),
            (416, None)
        );
    }
    let etag = srv
        .get(&format!("{get}\r\n"))
        .header("etag")
        .unwrap()
        .to_string();
    assert_eq!(
        cc(&format!("{get}If-None-Match: {etag}\r\n\r\n")),
        (304, long.clone())
    );
}

#[test]
fn sigterm_finishes_the_download_in_flight_then_exits_zero() {
    let dir = docroot();
    let data = vec![7u8; 8 << 20];
    std::fs::write(dir.path().join("eight.bin"), &data).unwrap();
    let srv = Server::start_in(dir, &[]);
    let mut s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(b"GET /eight.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    // Count body bytes only: skip the head.
    let head = read_head(&mut s);
    assert!(head.starts_with(b"HTTP/1.1 200 "));
    let mut got = 0;
    srv.signal(libc::SIGTERM);
    // New connections are refused once it stops accepting (the listeners are closed).
    wait_within(
        Duration::from_secs(3),
        || std::net::TcpStream::connect(&srv.addr).is_err(),
        || "still accepting after SIGTERM".into(),
    );
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => panic!("download cut: {e} after {got} bytes"),
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(got, 8 << 20, "body bytes");
    let code = srv.stop();
    assert_eq!(code, Some(0));
}

#[test]
fn access_log_is_combined_format() {
    let dir = docroot();
    let log = dir
        .path()
        .parent()
        .unwrap()
        .join(format!("access-test-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let srv = Server::start_in(dir, &["--access-log", log.to_str().unwrap()]);
    srv.get("GET /hello.txt?q=1 HTTP/1.1\r\nHost: a\r\nUser-Agent: tester \"x\"\r\nReferer: http://r/\r\n\r\n");
    srv.get("GET /missing HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(srv.stop(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    // Each worker buffers its own lines, so their order across workers is not fixed.
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_by_key(|l| l.contains("/missing"));
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("127.0.0.1 - - ["), "{}", lines[0]);
    assert!(
        lines[0]
            .ends_with("\"GET /hello.txt?q=1 HTTP/1.1\" 200 12 \"http://r/\" \"tester \\\"x\\\"\""),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("\"GET /missing HTTP/1.1\" 404 "),
        "{}",
        lines[1]
    );
    let _ = std::fs::remove_file(log);
}

/// `[log] fields` end each line with `request_time=` (seconds, from the head's
/// first byte to the last byte sent: a paced download's shows its length),
/// `host=` (the `Host` as sent, without its port) and `length=` (the body it had
/// to send: a download cut short logs fewer bytes than that).
#[test]
fn access_log_lines_end_with_the_fields_asked_for() {
    let dir = docroot();
    std::fs::write(dir.path().join("two.bin"), vec![7u8; 2_000_000]).unwrap();
    let log = log_path("access-fields");
    let srv = Server::start_with_config(
        dir,
        &format!(
            "[log]\naccess = \"{}\"\nfields = [\"request_time\", \"host\", \"length\"]\n\
             [http]\nlimit_rate = 1000000\nlimit_rate_after = 100000\n",
            log.display()
        ),
        &[],
    );
    let small = srv.get("GET /hello.txt HTTP/1.1\r\nHost: Mirror.example:8080\r\n\r\n");
    assert_eq!(small.status, 200);
    let t = std::time::Instant::now();
    let big = srv.get("GET /two.bin HTTP/1.0\r\n\r\n");
    let took = t.elapsed().as_secs_f64();
    assert_eq!((big.status, big.body.len()), (200, 2_000_000));
    // A download the client leaves after its first bytes.
    {
        use std::io::{Read, Write};
        let mut s = srv.connect();
        s.write_all(b"GET /two.bin?cut HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 4096];
        assert!(s.read(&mut buf).unwrap() > 0);
    }
    wait_within(
        Duration::from_secs(10),
        || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("/two.bin?cut")),
        || "the cut download's line".into(),
    );
    assert_eq!(srv.stop(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let field = |path: &str, name: &str| -> String {
        let line = text.lines().find(|l| l.contains(path)).expect(path);
        let at = line.find(&format!(" {name}=")).expect(name) + name.len() + 2;
        line[at..].split(' ').next().unwrap().to_string()
    };
    let secs = |path: &str| -> f64 { field(path, "request_time").parse().expect("seconds") };
    assert!(text
        .lines()
        .all(|l| l.contains("\" request_time=") && l.contains("\" length=")));
    assert_eq!(field("/hello.txt", "length"), "12");
    assert_eq!(field("/two.bin ", "length"), "2000000");
    // The cut download: its bytes sent (combined's `%b`) fall short of its length.
    let cut = text.lines().find(|l| l.contains("/two.bin?cut")).unwrap();
    let sent: u64 = cut
        .split("\" 200 ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        sent < 2_000_000 && field("/two.bin?cut", "length") == "2000000",
        "{cut}"
    );
    assert!(secs("/hello.txt") < 0.5, "{text}");
    assert_eq!(field("/hello.txt", "host"), "\"Mirror.example\"");
    assert_eq!(
        field("/two.bin ", "host"),
        "\"-\"",
        "HTTP/1.0 without a Host"
    );
    // Paced at 1 MB/s after its first 100 kB: about two seconds, as the client saw.
    let logged = secs("/two.bin ");
    assert!(
        logged > 1.0 && (logged - took).abs() < 0.5,
        "request_time {logged} s, the client took {took:.3} s"
    );
}

#[test]
fn access_log_is_flushed_within_a_second_or_two() {
    let dir = docroot();
    let log = dir
        .path()
        .parent()
        .unwrap()
        .join(format!("access-flush-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let srv = Server::start_in(dir, &["--access-log", log.to_str().unwrap()]);
    srv.get("GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    wait_within(
        Duration::from_secs(3),
        || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("/hello.txt")
        },
        || "log not flushed".into(),
    );
    let _ = std::fs::remove_file(log);
}

#[test]
fn a_full_disk_under_the_access_log_is_reported_once_and_its_lines_counted() {
    // Every write to /dev/full fails with ENOSPC, as on a full disk. Each worker
    // hands its lines over at every 32 KiB and at least once a second, so 3 s of
    // requests fail dozens of buffers: a warning for each would flood the error log.
    let srv = Server::start_with_config(
        docroot(),
        "[status]\nenabled = true\n",
        &["--access-log", "/dev/full"],
    );
    let writers = srv.serving_pids().len();
    let t = Instant::now();
    let mut answered = 0;
    while t.elapsed() < Duration::from_secs(3) {
        // A connection per 50 (a connection's requests are capped).
        let mut c = srv.client();
        for _ in 0..50 {
            c.send(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
        }
        for _ in 0..50 {
            assert_eq!(c.response(false).map(|r| r.status), Some(200));
            answered += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(1500)); // the last second's buffers
    let err = srv.stderr();
    let reports = err.matches("access log write failed").count();
    assert!(
        (1..=writers).contains(&reports),
        "{reports} reports from {writers} writers after {answered} requests:\n{err}"
    );
    assert!(err.contains("No space left on device"), "{err}");
    // Every line was lost, and the status page counts them (its own requests'
    // lines too, once they are handed over).
    let lost = |s: &Server| s.status_json()["access_log_lost_lines_total"].as_u64();
    let (t, mut asked) = (Instant::now(), 0);
    loop {
        asked += 1;
        let n = lost(&srv).expect("access_log_lost_lines_total on the status page");
        if n >= answered {
            assert!(
                n <= answered + asked,
                "{n} lost of {answered} + {asked} lines"
            );
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{n} lost of {answered}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(srv.stop(), Some(0));
}

#[test]
fn serve_without_arguments_serves_the_current_directory() {
    let dir = docroot();
    // Exactly as an operator would type it, also as root: then the server drops to
    // `nobody`, which must be able to read the tree.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    // The default address is 127.0.0.1:8080. If something else holds it, the server
    // must say so and exit non-zero; otherwise it must serve the current directory.
    let busy = std::net::TcpListener::bind("127.0.0.1:8080").is_err();
    let mut child = Command::new(bin())
        .arg("serve")
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if busy {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains("cannot listen on 127.0.0.1:8080"), "{err}");
        return;
    }
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("http://127.0.0.1:8080/"), "{line:?}");
    let mut s = std::net::TcpStream::connect("127.0.0.1:8080").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!(r.text(), "hello world\n");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(0));
}

#[test]
fn bad_listen_address_is_a_clear_error() {
    let o = Command::new(bin())
        .args(["serve", ".", "--listen", "nowhere"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--listen"));
}

#[test]
fn sigusr1_reopens_the_access_log_without_losing_a_line() {
    let log = log_path("rotate");
    let srv = Server::start(&["--access-log", log.to_str().unwrap()]);
    let get = |i: usize| {
        srv.get(&format!(
            "GET /hello.txt?n={i} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        ))
        .status
    };
    // Requests keep coming from another thread across the rotation.
    let addr = srv.addr.clone();
    let load = std::thread::spawn(move || {
        let mut n = 0;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(2500) {
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            s.write_all(
                format!("GET /hello.txt?bg={n} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .unwrap();
            assert_eq!(read_response(&mut s, false).unwrap().status, 200);
            n += 1;
        }
        n
    });
    for i in 0..20 {
        assert_eq!(get(i), 200);
    }
    wait_for_lines(&log, 20, Duration::from_secs(5), |l| l.contains("?n="));
    let rotated = log.with_extension("log.1");
    std::fs::rename(&log, &rotated).unwrap();
    srv.signal(libc::SIGUSR1);
    wait_for_stderr(&srv, "access log reopened");
    for i in 20..40 {
        assert_eq!(get(i), 200);
    }
    let background = load.join().unwrap();
    let new = wait_for_lines(&log, 20, Duration::from_secs(5), |l| l.contains("?n="));
    // Every line is whole, in one file or the other, and none is missing.
    let old = std::fs::read_to_string(&rotated).unwrap();
    let t = Instant::now();
    loop {
        let new = std::fs::read_to_string(&log).unwrap();
        let all: Vec<&str> = old.lines().chain(new.lines()).collect();
        let bg = all.iter().filter(|l| l.contains("?bg=")).count();
        if bg == background || t.elapsed() > Duration::from_secs(5) {
            assert_eq!(bg, background, "background lines lost");
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for l in old.lines().chain(new.lines()) {
        assert!(
            l.starts_with("127.0.0.1 - - [") && l.ends_with('"'),
            "split line: {l:?}"
        );
    }
    for i in 0..20 {
        assert!(
            old.contains(&format!("?n={i} ")),
            "line {i} not in the rotated file"
        );
    }
    for i in 20..40 {
        assert!(
            new.contains(&format!("?n={i} ")),
            "line {i} not in the new file"
        );
    }
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&rotated);
}

/// SO_REUSEPORT would let a second server bind the same port and take half of its
/// connections without a word; sluice refuses to start there instead.
#[test]
fn a_second_server_on_the_same_port_is_refused() {
    let srv = Server::start(&[]);
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("hello.txt"), b"the other server\n").unwrap();
    let mut child = Command::new(bin())
        .arg("serve")
        .arg(other.path())
        .args(["--listen", &srv.addr, "--allow-root"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the second server kept running on a served port");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "{err}");
    assert!(err.contains("already in use"), "{err}");
    for _ in 0..20 {
        let r = srv.get("GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(r.text(), "hello world\n");
    }
}
