//! Aliases (`[[server.alias]]`, `[[site.alias]]`: Apache's `Alias`, nginx's
//! `alias`) over TCP: another directory served at a path prefix, by whole
//! segments, with the symlink policy held to the alias's own directory, per site,
//! and a reload whose alias directory is missing keeping the old one serving.

use sluice_testkit::*;
use std::time::Duration;

/// The main site (the docroot, with `/ubuntu` from a directory elsewhere) and
/// `mirror.example.org` (its own root, with `/pub/debian` from another one).
fn start_aliases() -> (Server, tempfile::TempDir) {
    let d = docroot();
    let base = d.path();
    std::fs::write(base.join("who.txt"), "main root\n").unwrap();
    std::fs::create_dir(base.join("ubuntu-cd")).unwrap();
    std::fs::write(base.join("ubuntu-cd/a.txt"), "main's ubuntu-cd\n").unwrap();
    std::fs::create_dir(base.join("mirror")).unwrap();
    std::fs::write(base.join("mirror/who.txt"), "mirror root\n").unwrap();
    // The other disk: outside the docroot.
    let disk2 = tempfile::tempdir().unwrap();
    let ub = disk2.path().join("ub");
    std::fs::create_dir_all(ub.join("dists")).unwrap();
    std::fs::write(ub.join("dists/Release"), "ubuntu release\n").unwrap();
    // A link out of the alias's directory, into the main root: `inside-root` is
    // inside the alias's directory for its paths.
    std::os::unix::fs::symlink(base.join("who.txt"), ub.join("out.txt")).unwrap();
    let deb = disk2.path().join("deb");
    std::fs::create_dir_all(deb.join("pool")).unwrap();
    std::fs::write(deb.join("pool/x.deb"), "a package\n").unwrap();
    let toml = format!(
        r#"
[files]
listing = true

[[server.alias]]
prefix = "/ubuntu"
root = "{}"

[[site]]
names = ["mirror.example.org"]
root = "mirror"

[[site.alias]]
prefix = "/pub/debian/"
root = "{}"
"#,
        ub.display(),
        deb.display()
    );
    (Server::start_with_config(d, &toml, &[]), disk2)
}

fn get(srv: &Server, host: &str, path: &str) -> Resp {
    srv.get(&format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    ))
}

#[test]
fn an_alias_serves_another_directory_at_its_prefix() {
    let (srv, _disk2) = start_aliases();
    let r = get(&srv, "a", "/ubuntu/dists/Release");
    assert_eq!((r.status, r.text().as_str()), (200, "ubuntu release\n"));
    // The prefix itself is a directory: redirected with its slash, then listed
    // from the alias's directory.
    let r = get(&srv, "a", "/ubuntu");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/ubuntu/"));
    let r = get(&srv, "a", "/ubuntu/");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("href=\"./dists/\""), "{}", r.text());
    // Whole segments: "/ubuntu" does not take "/ubuntu-cd".
    let r = get(&srv, "a", "/ubuntu-cd/a.txt");
    assert_eq!((r.status, r.text().as_str()), (200, "main's ubuntu-cd\n"));
    // Dot segments are resolved before the alias is chosen: this is the main
    // root's file, not a way out of the alias.
    let r = get(&srv, "a", "/ubuntu/../who.txt");
    assert_eq!((r.status, r.text().as_str()), (200, "main root\n"));
    // A link out of the alias's directory is refused, as one out of the root is.
    let r = get(&srv, "a", "/ubuntu/out.txt");
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(!r.text().contains("main root"));
    // Precisely what a real client gets.
    if curl_available() {
        let out = curl(&[&srv.url("/ubuntu/dists/Release")]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ubuntu release\n");
    }
}

#[test]
fn aliases_belong_to_their_site() {
    let (srv, _disk2) = start_aliases();
    let m = "mirror.example.org";
    let r = get(&srv, m, "/pub/debian/pool/x.deb");
    assert_eq!((r.status, r.text().as_str()), (200, "a package\n"));
    assert_eq!(get(&srv, m, "/who.txt").text(), "mirror root\n");
    // The main site's aliases are not the mirror's, nor the other way round.
    assert_eq!(get(&srv, m, "/ubuntu/dists/Release").status, 404);
    assert_eq!(get(&srv, "a", "/pub/debian/pool/x.deb").status, 404);
}

#[test]
fn a_reload_whose_alias_directory_is_missing_keeps_the_old_one() {
    let (srv, _disk2) = start_aliases();
    let cfg = srv.root().join(".test-config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let moved = text.replacen("/ub\"", "/gone\"", 1);
    assert_ne!(moved, text);
    std::fs::write(&cfg, moved).unwrap();
    let check = std::process::Command::new(bin())
        .args(["check", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(!check.status.success());
    assert!(
        err.contains("alias /ubuntu: root ") && err.contains("gone"),
        "{err}"
    );
    srv.signal(libc::SIGHUP);
    wait_for_stderr(&srv, "alias /ubuntu: root ");
    std::thread::sleep(Duration::from_millis(100));
    let r = get(&srv, "a", "/ubuntu/dists/Release");
    assert_eq!((r.status, r.text().as_str()), (200, "ubuntu release\n"));
}
