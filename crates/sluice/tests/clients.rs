//! The clients a mirror's users run, against the real binary over TCP: `apt` on a
//! Debian repository sluice serves (an update, a second update answered 304, three
//! packages on one pipelined connection, a partial download resumed with `Range` and
//! `If-Range`) and `aria2c` pulling one file over eight parallel ranges with the
//! paper's range caps acting on loopback, then `aria2c -c` and `wget -c` resuming;
//! Chromium following every link of a listing of odd names, with and without a query;
//! pip downloading a wheel from listings served as a package index (PEP 503); cargo
//! using a sparse registry sluice serves, revalidating its index (304) and taking a
//! new version.
//! Each client checks what it got (apt the repository's hashes, aria2c a SHA-256), and
//! the test compares the bytes with the files and reads the access log for what was
//! asked and answered.

use sluice_testkit::*;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// Run a client that scripts/test.sh installs; panic with its output if it fails.
fn run(cmd: &str, args: &[&str], cwd: &Path) -> Output {
    let out = Command::new(cmd)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e} (scripts/test.sh installs it)"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn sha256(path: &Path) -> String {
    let out = run("sha256sum", &[path.to_str().unwrap()], Path::new("/"));
    String::from_utf8_lossy(&out.stdout)[..64].to_string()
}

/// The access log's lines about `path` from `agent`, as (status, bytes), sorted.
fn answers(log: &str, path: &str, agent: &str) -> Vec<(u16, String)> {
    let mut a: Vec<(u16, String)> = log
        .lines()
        .filter(|l| l.contains(&format!("\"GET {path} HTTP/1.1\"")) && l.contains(agent))
        .map(|l| {
            let after = l.split("HTTP/1.1\" ").nth(1).unwrap();
            let mut f = after.split(' ');
            (
                f.next().unwrap().parse().unwrap(),
                f.next().unwrap().to_string(),
            )
        })
        .collect();
    a.sort();
    a
}

const PACKAGES: [&str; 3] = ["hello-sluice", "world-sluice", "third-sluice"];

/// A Debian repository under `www/debian`: three packages built with `dpkg-deb`,
/// their `Packages` index (plain and gzip) and a `Release` that lists it.
fn debian_repository(www: &Path, arch: &str) {
    let repo = www.join("debian");
    let pool = repo.join("pool/main");
    let index = repo.join(format!("dists/stable/main/binary-{arch}"));
    std::fs::create_dir_all(&pool).unwrap();
    std::fs::create_dir_all(&index).unwrap();
    let mut packages = String::new();
    for (i, p) in PACKAGES.iter().enumerate() {
        let src = www.join(format!(".src/{p}"));
        std::fs::create_dir_all(src.join("DEBIAN")).unwrap();
        std::fs::create_dir_all(src.join(format!("usr/share/doc/{p}"))).unwrap();
        std::fs::write(
            src.join("DEBIAN/control"),
            format!(
                "Package: {p}\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: {p}\n"
            ),
        )
        .unwrap();
        std::fs::write(
            src.join(format!("usr/share/doc/{p}/blob")),
            noise(200_000, i as u64 + 7),
        )
        .unwrap();
        let deb = pool.join(format!("{p}_1.0_all.deb"));
        let (s, d) = (src.to_str().unwrap(), deb.to_str().unwrap());
        run("dpkg-deb", &["--build", "--root-owner-group", s, d], www);
        packages += &format!(
            "Package: {p}\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\n\
             Filename: pool/main/{p}_1.0_all.deb\nSize: {}\nSHA256: {}\nDescription: {p}\n\n",
            std::fs::metadata(&deb).unwrap().len(),
            sha256(&deb)
        );
    }
    std::fs::write(index.join("Packages"), packages).unwrap();
    run("gzip", &["-k", "-n", "Packages"], &index);
    let mut release = format!(
        "Suite: stable\nCodename: stable\nDate: Sat, 01 Jan 2022 00:00:00 UTC\n\
         Architectures: {arch}\nComponents: main\nSHA256:\n"
    );
    for f in ["Packages", "Packages.gz"] {
        let p = index.join(f);
        release += &format!(
            " {} {} main/binary-{arch}/{f}\n",
            sha256(&p),
            std::fs::metadata(&p).unwrap().len()
        );
    }
    std::fs::write(repo.join("dists/stable/Release"), release).unwrap();
}

#[test]
fn apt_updates_downloads_and_resumes_from_a_repository_sluice_serves() {
    let out = run("dpkg", &["--print-architecture"], Path::new("/"));
    let arch = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let d = docroot();
    debian_repository(d.path(), &arch);
    let log = log_path("clients-apt");
    let toml = format!("[log]\naccess = \"{}\"\n", log.display());
    let srv = Server::start_with_config(d, &toml, &[]);

    // apt's own state in a directory of the test's: the machine's apt is untouched.
    let state = tempfile::tempdir().unwrap();
    let st = state.path();
    for dir in ["lists/partial", "cache/archives/partial", "parts", "get"] {
        std::fs::create_dir_all(st.join(dir)).unwrap();
    }
    std::fs::write(
        st.join("sources.list"),
        format!("deb [trusted=yes] {} stable main\n", srv.url("/debian")),
    )
    .unwrap();
    std::fs::write(st.join("status"), "").unwrap();
    let s = st.display();
    let opts: Vec<String> = [
        format!("Dir::Etc::sourcelist={s}/sources.list"),
        format!("Dir::Etc::sourceparts={s}/parts"),
        format!("Dir::State::Lists={s}/lists"),
        format!("Dir::Cache={s}/cache"),
        format!("Dir::State::status={s}/status"),
        "Debug::NoLocking=1".into(),
        "APT::Sandbox::User=root".into(),
        "Acquire::Retries=0".into(),
    ]
    .into_iter()
    .flat_map(|o| ["-o".to_string(), o])
    .collect();
    let apt = |args: &[&str], cwd: &Path| {
        let mut all: Vec<&str> = opts.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        let out = run("apt-get", &all, cwd);
        let (o, e) = (
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        );
        assert!(!e.contains("E:") && !e.contains("W:"), "{o}\n{e}");
        o
    };

    // An update: the Release and the gzip index, checked by apt against each other.
    let o = apt(&["update"], st);
    assert!(o.contains("stable Release"), "{o}");
    assert!(o.contains(&format!("main {arch} Packages")), "{o}");
    let lists: Vec<String> = std::fs::read_dir(st.join("lists"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(
        lists
            .iter()
            .any(|n| n.contains(&format!("binary-{arch}_Packages"))),
        "{lists:?}"
    );
    // Again: apt asks with If-Modified-Since, sluice answers 304, apt says "Hit".
    let o = apt(&["update"], st);
    assert!(o.contains("Hit:") && o.contains("stable Release"), "{o}");
    // Three packages in one go (apt pipelines them on one connection), hashes checked.
    let get = st.join("get");
    let mut args = vec!["download"];
    args.extend_from_slice(&PACKAGES);
    let accepted = || {
        srv.status_json()["connections_accepted_total"]
            .as_u64()
            .unwrap()
    };
    let before = accepted();
    apt(&args, &get);
    // One connection for apt, one for each status request.
    assert_eq!(accepted() - before, 2, "apt's three on one connection");
    let pool = srv.root().join("debian/pool/main");
    for p in PACKAGES {
        let name = format!("{p}_1.0_all.deb");
        assert_eq!(
            std::fs::read(get.join(&name)).unwrap(),
            std::fs::read(pool.join(&name)).unwrap(),
            "{name}"
        );
    }
    // A download cut off earlier: apt keeps the part with the server's
    // Last-Modified as its time and asks for the rest with Range and If-Range.
    let name = "hello-sluice_1.0_all.deb";
    let whole = std::fs::read(pool.join(name)).unwrap();
    let part = st.join("cache/archives/partial").join(name);
    std::fs::write(&part, &whole[..100_000]).unwrap();
    let mtime = std::fs::metadata(pool.join(name))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&part)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    apt(&["install", "-y", "--download-only", "hello-sluice"], st);
    assert_eq!(
        std::fs::read(st.join("cache/archives").join(name)).unwrap(),
        whole
    );

    let agent = "Debian APT-HTTP";
    // Every request above (four, three, three and one) is in the log once each
    // worker has handed its lines over (at least once a second); each worker's
    // lines come in their order, the workers' in any, so the answers are sorted.
    let text = wait_for_lines(&log, 11, Duration::from_secs(10), |l| l.contains(agent));
    let release = answers(&text, "/debian/dists/stable/Release", agent);
    assert_eq!(
        release.iter().map(|a| a.0).collect::<Vec<_>>(),
        [200, 304],
        "{text}"
    );
    let hello = answers(&text, &format!("/debian/pool/main/{name}"), agent);
    let rest = (whole.len() - 100_000).to_string();
    assert_eq!(
        hello,
        [(200, whole.len().to_string()), (206, rest)],
        "{text}"
    );
    for p in &PACKAGES[1..] {
        let got = answers(&text, &format!("/debian/pool/main/{p}_1.0_all.deb"), agent);
        assert_eq!(got.len(), 1, "{text}");
        assert_eq!(got[0].0, 200, "{text}");
    }
}

#[test]
fn aria2c_pulls_one_file_over_parallel_ranges_under_the_caps_and_clients_resume() {
    let d = docroot();
    let len = 24 << 20;
    let data = noise(len, 42);
    std::fs::write(d.path().join("debian.iso"), &data).unwrap();
    let sum = sha256(&d.path().join("debian.iso"));
    let log = log_path("clients-aria2c");
    // The paper's range caps apply to loopback too (it is exempt by default), so
    // the eight connections of one host count against them as a real user's would.
    let toml = format!(
        "[log]\naccess = \"{}\"\n[condition]\ncap_exempt = []\n",
        log.display()
    );
    let srv = Server::start_with_config(d, &toml, &[]);
    let url = srv.url("/debian.iso");
    let out = tempfile::tempdir().unwrap();
    let o = out.path();
    let got = o.join("debian.iso");

    // Eight connections, 1 MiB pieces; aria2c checks the SHA-256 itself.
    run(
        "aria2c",
        &[
            "-q",
            "-x8",
            "-s8",
            "-k1M",
            "--file-allocation=none",
            "--max-tries=1",
            &format!("--checksum=sha-256={sum}"),
            "-d",
            o.to_str().unwrap(),
            &url,
        ],
        o,
    );
    assert!(
        std::fs::read(&got).unwrap() == data,
        "aria2c's bytes differ"
    );
    let agent = "aria2/";
    let text = wait_for_lines(&log, 4, Duration::from_secs(10), |l| {
        l.contains(agent) && l.contains("\" 206 ")
    });
    let parallel = answers(&text, "/debian.iso", agent);
    assert!(
        parallel.iter().all(|(s, _)| *s == 200 || *s == 206),
        "one host's ranges refused: {text}"
    );

    // A download cut at 10 MB, continued (no control file: one range from its end).
    let f = std::fs::File::options().write(true).open(&got).unwrap();
    f.set_len(10_000_000).unwrap();
    drop(f);
    run(
        "aria2c",
        &[
            "-q",
            "-c",
            "-x1",
            "--file-allocation=none",
            "--max-tries=1",
            "-d",
            o.to_str().unwrap(),
            &url,
        ],
        o,
    );
    assert!(
        std::fs::read(&got).unwrap() == data,
        "aria2c -c's bytes differ"
    );
    // wget -c from 7,777,777 bytes.
    let f = std::fs::File::options().write(true).open(&got).unwrap();
    f.set_len(7_777_777).unwrap();
    drop(f);
    run(
        "wget",
        &["-q", "-c", "--tries=1", "-O", got.to_str().unwrap(), &url],
        o,
    );
    assert!(
        std::fs::read(&got).unwrap() == data,
        "wget -c's bytes differ"
    );
    // In the log: wget's one range from its cut, and aria2c -c's from its last whole
    // block at or before its cut (16 KiB blocks here).
    let wget_rest = format!("\" 206 {} ", len - 7_777_777);
    let text = wait_for_lines(&log, 1, Duration::from_secs(10), |l| {
        l.contains("Wget/") && l.contains(&wget_rest)
    });
    assert_eq!(answers(&text, "/debian.iso", "Wget/").len(), 1, "{text}");
    let rest = (len - 10_000_000) as u64;
    let resumed = |l: &str| {
        l.contains(agent)
            && answers(l, "/debian.iso", agent).iter().any(|(s, b)| {
                *s == 206
                    && b.parse::<u64>()
                        .is_ok_and(|b| (rest..rest + (1 << 20)).contains(&b))
            })
    };
    wait_for_lines(&log, 1, Duration::from_secs(10), resumed);
}

/// What a test page's script wrote into its `<pre id="out">`, as Chromium left the
/// page ("" if the script never did).
fn page_out(dom: &str) -> &str {
    dom.split("<pre id=\"out\">")
        .nth(1)
        .and_then(|r| r.split("</pre>").next())
        .unwrap_or("")
}

/// Chromium follows every link of a listing of names a mirror really holds
/// (spaces, `+`, `%`, `#`, `?`, quotes, markup, `| ^ { } `` ` ``, UTF-8 and a
/// Latin-1 byte), each plain and with a query holding what Chromium leaves raw
/// (`{ } | ^ `` ` `` `\`): every one answers its own file. The page's script reads
/// the listing as a browser parses it and fetches each link as the browser
/// encodes it, so the listing's escaping, the browser's and sluice's parser and
/// path decoding are tested together.
#[test]
fn chromium_follows_every_link_of_a_listing_of_odd_names() {
    use std::os::unix::ffi::OsStrExt;
    let d = docroot();
    let odd = d.path().join("odd");
    std::fs::create_dir(&odd).unwrap();
    let names: Vec<&[u8]> = vec![
        b"a b.txt",
        b"a+b",
        b"100%.txt",
        b"hash#x",
        b"q?x=1",
        b"quote\"s'",
        b"<lt>&amp;",
        b"pipe|caret^",
        b"brace{}tick`",
        "caf\u{e9}.txt".as_bytes(),
        b"caf\xe9.bin",
        b"semi;colon,comma=eq",
    ];
    for (i, n) in names.iter().enumerate() {
        let p = odd.join(std::ffi::OsStr::from_bytes(n));
        std::fs::write(p, format!("file{i}\n")).unwrap();
    }
    std::fs::write(
        d.path().join("check.html"),
        r#"<!doctype html><pre id="out"></pre><script>
(async () => {
  const out = [];
  const html = await (await fetch('/odd/')).text();
  const doc = new DOMParser().parseFromString(html, 'text/html');
  for (const a of doc.querySelectorAll('a')) {
    const href = a.getAttribute('href');
    if (!href.startsWith('./')) continue;
    const u = new URL(href, location.origin + '/odd/');
    for (const q of ['', '?q={a}|b^c`d\\e']) {
      const r = await fetch(u.href + q);
      out.push(r.status + ' ' + (await r.text()).trim());
    }
  }
  document.getElementById('out').textContent = out.join(';') + ';done';
})();
</script>"#,
    )
    .unwrap();
    let srv = Server::start_in(d, &[]);
    let dom = chromium_dom(&srv.url("/check.html"), 5000);
    let text = page_out(&dom);
    assert!(text.ends_with(";done"), "the script did not finish: {dom}");
    let mut got: Vec<&str> = text.trim_end_matches(";done").split(';').collect();
    got.sort();
    let mut want: Vec<String> = (0..names.len())
        .flat_map(|i| [format!("200 file{i}"), format!("200 file{i}")])
        .collect();
    want.sort();
    assert_eq!(got, want);
}

/// A page from another origin reads a mirror's files in Chromium once the operator
/// allows it (`Access-Control-Allow-Origin` as an `always` header): a plain fetch,
/// and two the browser first asks about with an OPTIONS preflight (a header of the
/// page's own, and a multi-range `Range`). Before sluice answered OPTIONS, the
/// preflight got a 405 and Chromium refused both.
#[test]
fn chromium_reads_across_origins_after_a_cors_preflight() {
    let mirror = Server::start_with_config(
        docroot(),
        "[[files.headers]]\nalways = true\nname = \"Access-Control-Allow-Origin\"\nvalue = \"*\"\n",
        &[],
    );
    let d = docroot();
    std::fs::write(
        d.path().join("app.html"),
        format!(
            r#"<!doctype html><pre id="out"></pre><script>
(async () => {{
  const out = [];
  for (const [path, headers] of [['/hello.txt', {{}}], ['/hello.txt', {{'X-Client': 'app'}}],
                                  ['/big.bin', {{'Range': 'bytes=0-1,4-5'}}]]) {{
    try {{
      const r = await fetch('{}' + path, {{headers}});
      out.push(r.status + ' ' + (await r.arrayBuffer()).byteLength);
    }} catch (e) {{ out.push('refused'); }}
  }}
  document.getElementById('out').textContent = out.join(';') + ';done';
}})();
</script>"#,
            mirror.url("").trim_end_matches('/')
        ),
    )
    .unwrap();
    let app = Server::start_in(d, &[]);
    let dom = chromium_dom(&app.url("/app.html"), 5000);
    let text = page_out(&dom);
    let parts: Vec<&str> = text.split(';').collect();
    assert_eq!(parts.len(), 4, "{dom}");
    assert_eq!(&parts[..2], ["200 12", "200 12"], "{dom}");
    assert!(parts[2].starts_with("206 "), "{dom}");
    assert_eq!(parts[3], "done");
}

/// A Python package mirror is a tree of files (bandersnatch writes one): pip reads
/// sluice's listing of `/simple/NAME/` as a PEP 503 index page (its `Accept` asks
/// for the JSON index first and takes HTML), picks the wheel, downloads it, and the
/// bytes are the file's.
#[test]
fn pip_downloads_a_wheel_from_listings_as_a_package_index() {
    let d = docroot();
    let pkg = d.path().join("simple/tiny-pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    let wheel = pkg.join("tiny_pkg-1.0-py3-none-any.whl");
    // A minimal wheel: a module, its METADATA, WHEEL and RECORD.
    run(
        "python3",
        &[
            "-c",
            r#"
import base64, hashlib, sys, zipfile
files = {"tiny_pkg/__init__.py": b"x = 1\n",
         "tiny_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tiny-pkg\nVersion: 1.0\n",
         "tiny_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
rec = "".join(f"{k},sha256={base64.urlsafe_b64encode(hashlib.sha256(v).digest()).rstrip(b'=').decode()},{len(v)}\n"
              for k, v in files.items()) + "tiny_pkg-1.0.dist-info/RECORD,,\n"
files["tiny_pkg-1.0.dist-info/RECORD"] = rec.encode()
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for k, v in files.items():
        z.writestr(k, v)
"#,
            wheel.to_str().unwrap(),
        ],
        d.path(),
    );
    let srv = Server::start_in(d, &[]);
    let out = tempfile::tempdir().unwrap();
    run(
        "python3",
        &[
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-input",
            "-d",
            out.path().to_str().unwrap(),
            "--index-url",
            &srv.url("/simple/"),
            // pip normalizes the name it is given to the index's `tiny-pkg`.
            "Tiny_Pkg",
        ],
        out.path(),
    );
    let got = std::fs::read(out.path().join("tiny_pkg-1.0-py3-none-any.whl")).unwrap();
    assert_eq!(
        got,
        std::fs::read(
            srv.root()
                .join("simple/tiny-pkg/tiny_pkg-1.0-py3-none-any.whl")
        )
        .unwrap()
    );
}

/// A crates.io mirror is a tree of files too (a sparse index and the `.crate`s):
/// cargo fetches a crate through sluice, asks for the index file again with its
/// validators and is told 304, then sees a new version once the file changes.
#[test]
fn cargo_uses_a_sparse_registry_sluice_serves_and_revalidates_it() {
    let d = docroot();
    let root = d.path().to_path_buf();
    let reg = root.join("reg");
    std::fs::create_dir_all(reg.join("index/ti/ny")).unwrap();
    std::fs::create_dir_all(reg.join("crates")).unwrap();
    // A .crate is a gzipped tar of NAME-VERSION/: cargo checks its SHA-256.
    let krate = |version: &str| -> String {
        let path = reg.join(format!("crates/tiny-{version}.crate"));
        run(
            "python3",
            &[
                "-c",
                r#"
import io, sys, tarfile
path, v = sys.argv[1], sys.argv[2]
with tarfile.open(path, "w:gz") as t:
    for name, data in [("Cargo.toml", f'[package]\nname = "tiny"\nversion = "{v}"\nedition = "2021"\n'),
                       ("src/lib.rs", "pub fn tiny() {}\n")]:
        b = data.encode()
        info = tarfile.TarInfo(f"tiny-{v}/{name}")
        info.size = len(b)
        t.addfile(info, io.BytesIO(b))
"#,
                path.to_str().unwrap(),
                version,
            ],
            &root,
        );
        let sum = sha256(&path);
        format!(
            "{{\"name\":\"tiny\",\"vers\":\"{version}\",\"deps\":[],\"cksum\":\"{sum}\",\"features\":{{}},\"yanked\":false}}\n"
        )
    };
    let v1 = krate("0.1.0");
    std::fs::write(reg.join("index/ti/ny/tiny"), &v1).unwrap();
    let log = log_path("clients-cargo");
    let srv = Server::start_in(d, &["--access-log", log.to_str().unwrap()]);
    std::fs::write(
        srv.root().join("reg/index/config.json"),
        format!(
            "{{\"dl\":\"{}/reg/crates/{{crate}}-{{version}}.crate\"}}",
            srv.url("")
        ),
    )
    .unwrap();
    let proj = tempfile::tempdir().unwrap();
    let p = proj.path();
    std::fs::create_dir_all(p.join("src")).unwrap();
    std::fs::create_dir_all(p.join(".cargo")).unwrap();
    std::fs::write(p.join("src/lib.rs"), "").unwrap();
    std::fs::write(
        p.join("Cargo.toml"),
        "[package]\nname = \"user\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
         [dependencies]\ntiny = { version = \"0.1\", registry = \"mirror\" }\n",
    )
    .unwrap();
    std::fs::write(
        p.join(".cargo/config.toml"),
        format!(
            "[registries.mirror]\nindex = \"sparse+{}/reg/index/\"\n",
            srv.url("")
        ),
    )
    .unwrap();
    let home = p.join("cargo-home");
    let cargo = |args: &[&str]| {
        let out = Command::new("cargo")
            .args(args)
            .current_dir(p)
            .env("CARGO_HOME", &home)
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .expect("cargo");
        assert!(
            out.status.success(),
            "cargo {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    cargo(&["fetch"]);
    assert!(std::fs::read_to_string(p.join("Cargo.lock"))
        .unwrap()
        .contains("version = \"0.1.0\""));
    // Asked again, the unchanged index file is a 304 to cargo's validators.
    std::thread::sleep(Duration::from_millis(1100));
    cargo(&["update"]);
    wait_for_lines(&log, 1, Duration::from_secs(10), |l| {
        l.contains("\"GET /reg/index/ti/ny/tiny HTTP/1.1\" 304") && l.contains("cargo/")
    });
    // A new version: the file changes, cargo is told so, and takes it.
    let v2 = krate("0.1.1");
    std::fs::write(srv.root().join("reg/index/ti/ny/tiny"), format!("{v1}{v2}")).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    cargo(&["update"]);
    cargo(&["fetch"]);
    assert!(std::fs::read_to_string(p.join("Cargo.lock"))
        .unwrap()
        .contains("version = \"0.1.1\""));
    wait_for_lines(&log, 1, Duration::from_secs(10), |l| {
        l.contains("\"GET /reg/crates/tiny-0.1.1.crate HTTP/1.1\" 200")
    });
}
