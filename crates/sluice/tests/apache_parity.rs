//! Apache rules files, each loaded by Debian's Apache 2.4 and by `sluice serve`: the
//! answers their clients get (redirects naming the same URLs, and the 403s, 410s
//! and 404s of the second file) must be the same (docs/RULES.md, "Where sluice
//! differs from Apache"). The claim that Apache files load unchanged is held here
//! against Apache itself, not against what we believe it does: sluice once escaped
//! a captured `%20` again (`a%2520b`), and a test written from that belief agreed.
//!
//! The two compare by status and by the `Location` fully percent-decoded (Apache
//! writes back unescaped what needs no escape, `%7E` as `~`; sluice keeps the
//! client's escapes; both name the same file). A redirect that escaped twice decodes
//! to a different path and fails.

use sluice_testkit::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const APACHE: &str = "/usr/sbin/apache2";
const MODULES: &str = "/usr/lib/apache2/modules";

/// A mirror's redirect rules: captures, `%{REQUEST_URI}`, mod_alias prefixes and
/// regexes, a query kept and one replaced.
const RULES: &str = "RewriteEngine On\n\
    RewriteRule ^/r/(.*)$ http://mirror.example/pub/$1 [R=302,L]\n\
    RewriteRule ^/rel/(.*)$ /moved/$1 [R=301,L]\n\
    RewriteRule ^/relative/(.*)$ moved/$1 [R=301,L]\n\
    RewriteRule ^/uri/ http://mirror.example%{REQUEST_URI} [R=302,L]\n\
    RewriteRule ^/q/(.*)$ http://mirror.example/q/$1?from=q [R=302,L]\n\
    RewriteRule ^/qsa/(.*)$ /t/$1?n=1 [R=302,QSA,L]\n\
    RewriteRule ^/qdrop/(.*)$ /t/$1? [R=302,L]\n\
    RewriteRule ^/qsd/(.*)$ /t/$1 [R=302,L,QSD]\n\
    RewriteRule ^/qsd2/(.*)$ /t/$1?x=1 [R=302,L,QSD]\n\
    RewriteRule ^/qsd3/(.*)$ /t/$1?x=1 [R=302,QSA,QSD,L]\n\
    RewriteRule ^/nc/(.*)$ /t/$1 [R=303,NC,L]\n\
    RewriteRule ^/s307$ /t [R=307,L]\n\
    RewriteRule ^/s308$ /t [R=permanent,L]\n\
    RewriteRule ^/dpi/(.*)$ /t/$1 [DPI,R=302,L]\n\
    RewriteCond %{QUERY_STRING} ^id=([0-9]+)$\n\
    RewriteRule ^/item$ /items/%1? [R=301,L]\n\
    RewriteCond %{REQUEST_URI} \\.iso$\n\
    RewriteRule ^/iso/ http://isos.example%{REQUEST_URI} [R=302,L]\n\
    Redirect 301 /old http://mirror.example/new\n\
    RedirectMatch 302 ^/rm/(.*)$ http://mirror.example/rm/$1\n";

/// Request paths a mirror sees: plain names, a space, `+` sent both ways, UTF-8, an
/// escaped `%`, `~`, a `#` and a quote escaped, queries kept, merged and dropped,
/// conditions' `%1`, statuses.
const PATHS: &[&str] = &[
    "/r/debian/pool/main/h/hello/hello_2.10-3_amd64.deb",
    "/r/a%20b.iso",
    "/r/libstdc%2B%2B6_12.2.0-14_amd64.deb",
    "/r/libstdc++6_12.2.0-14_amd64.deb",
    "/r/caf%C3%A9/men%C3%BC.txt",
    "/r/100%25.txt",
    "/r/a%2520b",
    "/r/%7Euser/x",
    "/r/a%23b",
    "/r/a%22b",
    "/r/x?arch=amd64",
    "/rel/a%20b",
    "/relative/a%20b",
    "/uri/a%20b/c.iso",
    "/q/a%20b?dropped=1",
    "/old/a%20b.iso",
    "/old/x?y=1",
    "/rm/a%20b",
    "/rm/caf%C3%A9",
    "/qsa/a%20b?k=v",
    "/qdrop/a?k=v",
    "/qsd/a?k=v",
    "/qsd2/a?k=v",
    "/qsd3/a?k=v",
    "/NC/Abc%20d",
    "/s307",
    "/s308",
    "/dpi/a%20b?k=v",
    "/item?id=42",
    "/iso/a%20b.iso",
];

/// Debian's Apache in the foreground, its own process group, on `port`.
struct Apache {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Apache {
    /// Apache with `rules` included and `files` (name, text) in its document root.
    fn start(rules: &std::path::Path, files: &[(&str, &str)]) -> Apache {
        Apache::start_with(rules, files, "")
    }

    /// [`Apache::start`], with `more` (directives such as `Alias`) after the rules.
    fn start_with(rules: &std::path::Path, files: &[(&str, &str)], more: &str) -> Apache {
        assert!(
            std::path::Path::new(APACHE).exists(),
            "apache2 is needed (scripts/test.sh installs Debian's apache2)"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("www")).unwrap();
        // Its children run as nobody: the root must be theirs to read.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        for (name, text) in files {
            let path = d.join("www").join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        // A port from `free_port` can be taken by another test's server before
        // Apache binds it (tests run in parallel): Apache then exits, or the
        // port answers for someone else. So the port must answer as Apache, and
        // a start that fails that way is tried again on another port.
        for attempt in 0..3 {
            let port = free_port();
            let conf = d.join("httpd.conf");
            std::fs::write(
                &conf,
                format!(
                    "ServerRoot {d}\nDefaultRuntimeDir {d}\nPidFile {d}/httpd.pid\n\
                     Listen 127.0.0.1:{port}\nServerName a\n\
                     LoadModule mpm_event_module {MODULES}/mod_mpm_event.so\n\
                     LoadModule authz_core_module {MODULES}/mod_authz_core.so\n\
                     LoadModule rewrite_module {MODULES}/mod_rewrite.so\n\
                     LoadModule alias_module {MODULES}/mod_alias.so\n\
                     User nobody\nGroup nogroup\n\
                     ErrorLog {d}/error.log\nDocumentRoot {d}/www\n\
                     Include {rules}\n{more}\n",
                    d = d.display(),
                    rules = rules.display()
                ),
            )
            .unwrap();
            let child = Command::new(APACHE)
                .args(["-f", conf.to_str().unwrap(), "-D", "FOREGROUND"])
                // Its `%{TIME…}` reads local time; sluice's, UTC.
                .env("TZ", "UTC")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .process_group(0)
                .spawn()
                .unwrap();
            let mut apache = Apache {
                child,
                port,
                _dir: tempfile::tempdir().unwrap(),
            };
            match apache.ready(d) {
                Ok(()) => {
                    apache._dir = dir;
                    return apache;
                }
                Err(why) if attempt < 2 => eprintln!("apache2 on port {port}: {why}; again"),
                Err(why) => panic!("apache2 on port {port}: {why}"),
            }
        }
        unreachable!()
    }

    /// Wait (at most 15 s) until the port answers as Apache; `Err` if Apache
    /// exited (its error log, in `d`, says why) or another server answers.
    fn ready(&mut self, d: &std::path::Path) -> Result<(), String> {
        let t = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                let mut err = String::new();
                let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
                let log = std::fs::read_to_string(d.join("error.log")).unwrap_or_default();
                return Err(format!("exited ({st}): {err}{log}"));
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                let r = send(
                    &format!("127.0.0.1:{}", self.port),
                    "HEAD",
                    "/",
                    "Host: a\r\n",
                );
                return match r.header("server") {
                    Some(s) if s.starts_with("Apache") => Ok(()),
                    other => Err(format!("the port answers as {other:?}, not as Apache")),
                };
            }
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "apache2 never listened"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Apache {
    /// SIGTERM to its process group (the parent stops its children), then SIGKILL.
    fn drop(&mut self) {
        let pg = self.child.id() as i32;
        unsafe { libc::kill(-pg, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        unsafe { libc::kill(-pg, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// `method path` with header lines `headers` (`Host` among them) at `addr`, on a
/// connection of its own; the answer (its body read unless `method` is HEAD).
fn send(addr: &str, method: &str, path: &str, headers: &str) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut s, method == "HEAD").expect("an answer")
}

/// The status and `Location` of `GET path` (`Host: a`) at `addr`.
fn redirect(addr: &str, path: &str) -> (u16, String) {
    let r = send(addr, "GET", path, "Host: a\r\n");
    (
        r.status,
        r.header("location").unwrap_or_default().to_string(),
    )
}

/// [`redirect`], its `Location` [`decoded`].
fn redirect_decoded(addr: &str, path: &str) -> (u16, Vec<u8>) {
    let (status, location) = redirect(addr, path);
    (status, decoded(&location))
}

/// `location` with every escape decoded, and the request's own origin
/// (`http://a`, with any port) taken off: Apache makes a relative target absolute.
fn decoded(location: &str) -> Vec<u8> {
    let own = location
        .strip_prefix("http://a")
        .filter(|rest| rest.starts_with('/') || rest.starts_with(':'))
        .map(|rest| rest.trim_start_matches(|c: char| c == ':' || c.is_ascii_digit()));
    let l = own.unwrap_or(location).as_bytes();
    // A malformed escape is compared as it is (and then differs).
    sluice_static::path::percent_decode(l).unwrap_or_else(|| l.to_vec())
}

/// Apache and sluice loading the same rules text: Apache (kept running while it
/// is held), its address, and sluice.
fn both_loading(rules_text: &str) -> (Apache, String, Server) {
    both_serving(rules_text, &[])
}

/// [`both_loading`], with `files` (name, text) in both document roots.
fn both_serving(rules_text: &str, files: &[(&str, &str)]) -> (Apache, String, Server) {
    let dir = docroot();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let rules = dir.path().join(".rules.conf");
    std::fs::write(&rules, rules_text).unwrap();
    let apache = Apache::start(&rules, files);
    let srv = Server::start_in(dir, &["--rules", rules.to_str().unwrap()]);
    let addr = format!("127.0.0.1:{}", apache.port);
    (apache, addr, srv)
}

#[test]
fn redirects_name_the_same_urls_as_apache() {
    let (_apache, apache_addr, srv) = both_loading(RULES);
    let mut differ = Vec::new();
    for path in PATHS {
        let (a_status, a_loc) = redirect(&apache_addr, path);
        let (s_status, s_loc) = redirect(&srv.addr, path);
        assert!(
            (300..400).contains(&a_status) && !a_loc.is_empty(),
            "{path}: Apache answered {a_status} {a_loc:?}: the case tests nothing"
        );
        // A Location is a URL: nothing in it that would need an escape.
        assert!(
            s_loc.bytes().all(|b| b.is_ascii_graphic()),
            "{path}: sluice's Location {s_loc:?} carries a byte that needs escaping"
        );
        if a_status != s_status || decoded(&a_loc) != decoded(&s_loc) {
            differ.push(format!(
                "{path}: Apache {a_status} {a_loc}, sluice {s_status} {s_loc}"
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "redirects differ:\n{}",
        differ.join("\n")
    );
}

/// mod_alias's forms and mod_rewrite's answers that are not redirects, against the
/// same Apache: every `Redirect` status keyword and its prefix boundary (`/old`
/// does not cover `/older`), `RedirectMatch` with swapped groups and `(?i)`, `[F]`,
/// `[G]`, conditions on the host and the agent with `[NC,OR]` and `!`, `%2` from a
/// query condition, an absolute target without `R`, `END`, `NE` with a fragment,
/// `\$`; and paths that must match nothing (404 from both). Asked with a `Host`
/// and a `User-Agent` the conditions read.
const RULES_B: &str = "RewriteEngine On\n\
    Redirect /old http://m.example/new\n\
    Redirect permanent /perm http://m.example/perm2\n\
    Redirect temp /tmp1 http://m.example/t\n\
    Redirect seeother /so http://m.example/so\n\
    Redirect gone /gone\n\
    Redirect 410 /g410\n\
    RedirectPermanent /rp http://m.example/rp/\n\
    RedirectTemp /rt/ http://m.example/rt/\n\
    RedirectMatch ^/rm2/(\\w+)/(\\d+)$ http://m.example/$2/$1\n\
    RedirectMatch 301 (?i)^/CASE/(.*) http://m.example/case/$1\n\
    RewriteCond %{HTTP_HOST} ^www\\.(.+)$ [NC]\n\
    RewriteRule ^/host/(.*)$ http://%1/$1 [R=301,L]\n\
    RewriteCond %{HTTP_USER_AGENT} wget [NC,OR]\n\
    RewriteCond %{HTTP_USER_AGENT} curl [NC]\n\
    RewriteRule ^/ua$ /ua-tool [R,L]\n\
    RewriteRule ^/forbid - [F]\n\
    RewriteRule ^/gone2 - [G]\n\
    RewriteCond %{QUERY_STRING} !^keep\n\
    RewriteRule ^/qcheck$ /qc-no [R=302,L]\n\
    RewriteRule ^/qcheck$ /qc-yes [R=302,L]\n\
    RewriteCond %{QUERY_STRING} (^|&)v=([^&]+)\n\
    RewriteRule ^/ver$ /v/%2? [R=302,L]\n\
    RewriteRule ^/abs(/.*)?$ https://secure.example$1 [L]\n\
    RewriteRule ^/end1$ /end2 [END]\n\
    RewriteRule ^/ne/(.*)$ /x/$1#frag [R=302,NE,L]\n\
    RewriteRule ^/frag/(.*)$ /x/$1#frag [R=302,L]\n\
    RewriteRule ^/dollar/(.*)$ /d/\\$1/$1 [R=302,L]\n";

const PATHS_B: &[&str] = &[
    "/old",
    "/old/",
    "/old/a/b",
    "/older",
    "/old?x=1",
    "/perm/x",
    "/tmp1/y",
    "/so/z",
    "/gone/a",
    "/g410",
    "/rp/a",
    "/rt/b",
    "/rt",
    "/rm2/abc/123",
    "/rm2/abc/12x",
    "/CASE/Foo",
    "/case/foo",
    "/host/a/b",
    "/ua",
    "/forbid/x",
    "/gone2",
    "/qcheck",
    "/qcheck?keep=1",
    "/ver?a=1&v=2.0",
    "/ver?v=3",
    "/abs/x/y",
    "/abs",
    "/end1",
    "/ne/a%20b",
    "/frag/a%20b",
    "/dollar/q",
];

#[test]
fn alias_forms_refusals_and_conditions_answer_as_apache() {
    let (_apache, apache_addr, srv) = both_loading(RULES_B);
    let ask = |addr: &str, path: &str, agent: &str| {
        let headers = format!("Host: www.Mirror.example\r\nUser-Agent: {agent}\r\n");
        let r = send(addr, "GET", path, &headers);
        // Apache makes a relative target absolute on the request's host.
        let loc = r.header("location").unwrap_or_default();
        let own = loc.strip_prefix("http://www.mirror.example").unwrap_or(loc);
        let l = own.as_bytes();
        let l = sluice_static::path::percent_decode(l).unwrap_or_else(|| l.to_vec());
        (r.status, String::from_utf8_lossy(&l).into_owned())
    };
    let mut differ = Vec::new();
    let cases = PATHS_B
        .iter()
        .map(|p| (*p, "Wget/1.21.3"))
        .chain([("/ua", "Mozilla/5.0"), ("/ua", "curl/8.0")]);
    for (path, agent) in cases {
        let a = ask(&apache_addr, path, agent);
        let s = ask(&srv.addr, path, agent);
        if a != s {
            differ.push(format!("{path} ({agent}): Apache {a:?}, sluice {s:?}"));
        }
    }
    assert!(differ.is_empty(), "answers differ:\n{}", differ.join("\n"));
}

/// Rules without `L`: a rewrite handed to the rules after it, `%{REQUEST_URI}`
/// kept while the path changes, a `-` with and without `L`, a query and a refusal
/// later in the chain, mod_alias asked only when nothing was rewritten, chains
/// (`C`) and skips (`S=n`). The rules
/// are the engine's own test case (testdata/rules/rewrite_chain.conf), so the
/// answers its `.expect` file states are held here against Apache. Both serve the
/// same files: a rewrite is compared by the file served, a redirect by its URL.
#[test]
fn rules_without_l_chain_as_in_apache() {
    let rules = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/rules/rewrite_chain.conf"),
    )
    .unwrap();
    let names = [
        "a", "d", "e", "f", "x", "y", "z", "final", "s2", "never", "c2", "c3",
    ];
    let texts: Vec<String> = names.iter().map(|n| format!("file {n}\n")).collect();
    let files: Vec<(&str, &str)> = names
        .iter()
        .copied()
        .zip(texts.iter().map(|t| t.as_str()))
        .collect();
    let (_apache, apache_addr, srv) = both_serving(&rules, &files);
    let ask = |addr: &str, path: &str| {
        let r = send(addr, "GET", path, "Host: a\r\n");
        let loc = decoded(r.header("location").unwrap_or_default());
        // Error pages differ in wording; a file served is compared by its text.
        let body = if r.status == 200 {
            String::from_utf8_lossy(&r.body).into_owned()
        } else {
            String::new()
        };
        (r.status, String::from_utf8_lossy(&loc).into_owned(), body)
    };
    let mut differ = Vec::new();
    let mut served = 0;
    for path in [
        "/c1", "/c2", "/c3", "/u1", "/u2", "/m1", "/m2", "/q1", "/f1", "/ra1", "/al1", "/al2",
        "/fn1", "/nl1", "/x", "/r1", "/s1", "/k1", "/k2", "/k3", "/kc1", "/kc1?no", "/sk1", "/sk2",
        "/pt1", "/pt2", "/pt3", "/pt5",
    ] {
        let a = ask(&apache_addr, path);
        let s = ask(&srv.addr, path);
        served += (a.0 == 200) as usize;
        if a != s {
            differ.push(format!("{path}: Apache {a:?}, sluice {s:?}"));
        }
    }
    assert!(differ.is_empty(), "answers differ:\n{}", differ.join("\n"));
    assert!(
        served >= 8,
        "only {served} paths served a file: the case tests little"
    );
}

/// Conditions on what a request says beyond its path: hotlink protection on
/// `%{HTTP_REFERER}`, a load balancer's `%{HTTP:X-Forwarded-Proto}` with
/// `%{SERVER_NAME}` (the host without its port) in the target, `%{REQUEST_METHOD}`,
/// `%{HTTP_ACCEPT}`, `%{HTTP:Accept-Language}`, `=""` (the empty string), and
/// `%{HTTPS}` and `%{REQUEST_SCHEME}` on plain HTTP (over TLS: `tls.rs`), and
/// `%{THE_REQUEST}` (the canonical-URL rule that drops `index.html`).
const RULES_D: &str = "RewriteEngine On\n\
    RewriteCond %{HTTP_REFERER} !^$\n\
    RewriteCond %{HTTP_REFERER} !^https?://(www\\.)?mirror\\.example/ [NC]\n\
    RewriteRule \\.iso$ - [F]\n\
    RewriteCond %{HTTP:X-Forwarded-Proto} =http\n\
    RewriteRule ^/secure/(.*)$ https://%{SERVER_NAME}/secure/$1 [R=301,L]\n\
    RewriteCond %{REQUEST_METHOD} =HEAD\n\
    RewriteRule ^/probe$ /head-probe [R=302,L]\n\
    RewriteRule ^/probe$ /get-probe [R=302,L]\n\
    RewriteCond %{HTTP_ACCEPT} application/json\n\
    RewriteRule ^/api$ /api.json [R=302,L]\n\
    RewriteRule ^/api$ /api.html [R=302,L]\n\
    RewriteCond %{HTTP:Accept-Language} ^de\n\
    RewriteRule ^/lang/$ /de/lang/ [R=302,L]\n\
    RewriteCond %{HTTP_REFERER} =\"\"\n\
    RewriteRule ^/noref$ /no-referer [R=302,L]\n\
    RewriteCond %{HTTPS} off\n\
    RewriteRule ^/force/(.*)$ https://%{SERVER_NAME}/force/$1 [R=301,L]\n\
    RewriteRule ^/sch$ /by-%{REQUEST_SCHEME} [R=302,L]\n\
    RewriteCond %{THE_REQUEST} \\s/+(.*/)?index\\.html[\\s?]\n\
    RewriteRule ^/(.*/)?index\\.html$ /$1 [R=301,L]\n\
    RewriteCond %{THE_REQUEST} ^HEAD\\s/tr\\sHTTP/1\\.1$\n\
    RewriteRule ^/tr$ /tr-head [R=302,L]\n\
    RewriteRule ^/tr$ /tr-other [R=302,L]\n\
    RewriteRule ^/port$ http://p.example/%{SERVER_PORT}/%{SERVER_PROTOCOL} [R=302,L]\n\
    RewriteRule ^/hh$ http://p.example/%{HTTP_HOST} [R=302,L]\n\
    RewriteCond %{HTTP_USER_AGENT} ^Wget [NV]\n\
    RewriteRule ^/nv$ /nv-wget [R=302,L,NS]\n\
    RewriteCond %{SERVER_PORT} !^443$\n\
    RewriteRule ^/tls/(.*)$ https://%{SERVER_NAME}/tls/$1 [R=301,L]\n";

#[test]
fn conditions_on_headers_and_method_answer_as_apache() {
    let (_apache, apache_addr, srv) = both_loading(RULES_D);
    let ask = |addr: &str, method: &str, path: &str, headers: &str| {
        // A case may name its own Host.
        let host = if headers.starts_with("Host:") {
            ""
        } else {
            "Host: mirror.example:8080\r\n"
        };
        let r = send(addr, method, path, &format!("{host}{headers}"));
        let loc = r.header("location").unwrap_or_default();
        let own = loc
            .strip_prefix("http://mirror.example:8080")
            .unwrap_or(loc);
        (
            r.status,
            String::from_utf8_lossy(&decoded(own)).into_owned(),
        )
    };
    let cases: &[(&str, &str, &str)] = &[
        ("GET", "/debian-12.iso", ""),
        (
            "GET",
            "/debian-12.iso",
            "Referer: https://mirror.example/iso/\r\n",
        ),
        (
            "GET",
            "/debian-12.iso",
            "Referer: http://WWW.Mirror.example/x\r\n",
        ),
        (
            "GET",
            "/debian-12.iso",
            "Referer: https://elsewhere.example/\r\n",
        ),
        ("GET", "/secure/a/b", "X-Forwarded-Proto: http\r\n"),
        ("GET", "/secure/a/b", "X-Forwarded-Proto: https\r\n"),
        ("GET", "/secure/a/b", ""),
        ("HEAD", "/probe", ""),
        ("GET", "/probe", ""),
        ("GET", "/api", "Accept: application/json\r\n"),
        ("GET", "/api", "Accept: text/html\r\n"),
        ("GET", "/lang/", "Accept-Language: de-DE,de;q=0.9\r\n"),
        ("GET", "/lang/", "Accept-Language: en\r\n"),
        ("GET", "/noref", ""),
        ("GET", "/noref", "Referer: https://mirror.example/\r\n"),
        ("GET", "/force/a", ""),
        ("GET", "/sch", ""),
        ("GET", "/idx/index.html", ""),
        ("GET", "/idx/index.html?a=1", ""),
        ("HEAD", "/tr", ""),
        ("GET", "/tr", ""),
        // %{SERVER_PORT}: the Host's port, else the scheme's; not the listener's.
        ("GET", "/port", ""),
        ("GET", "/port", "Host: mirror.example\r\n"),
        // %{HTTP_HOST}: the header as sent, with its port.
        ("GET", "/hh", ""),
        // [NV] on a condition, [NS] on a rule: the same answers.
        ("GET", "/nv", "User-Agent: Wget/1.21\r\n"),
        ("GET", "/nv", "User-Agent: curl/8\r\n"),
        ("GET", "/tls/a", ""),
        ("GET", "/tls/a", "Host: mirror.example:443\r\n"),
    ];
    let mut differ = Vec::new();
    let mut answered = std::collections::HashSet::new();
    for (method, path, headers) in cases {
        let a = ask(&apache_addr, method, path, headers);
        let s = ask(&srv.addr, method, path, headers);
        answered.insert(a.clone());
        if a != s {
            differ.push(format!(
                "{method} {path} {headers:?}: Apache {a:?}, sluice {s:?}"
            ));
        }
    }
    assert!(differ.is_empty(), "answers differ:\n{}", differ.join("\n"));
    assert!(
        answered.len() >= 14,
        "the cases must tell the conditions apart: {answered:?}"
    );
}

/// `[PT]` into an alias: Apache's `Alias /ubuntu DIR` and sluice's
/// `[[server.alias]]` serve the same file for a rewrite with `PT` (sluice serves
/// every rewrite through the aliases; PT is what has Apache do it), and PT ends
/// the rule loop as `L` does.
#[test]
fn a_rewrite_with_pt_is_served_through_the_alias_as_in_apache() {
    use std::os::unix::fs::PermissionsExt;
    let other = tempfile::tempdir().unwrap();
    // Apache's children run as nobody: the alias's directory must be theirs to read.
    std::fs::set_permissions(other.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(other.path().join("pool")).unwrap();
    std::fs::write(other.path().join("pool/x.deb"), "from the alias\n").unwrap();
    std::fs::write(other.path().join("y"), "alias y\n").unwrap();
    let rules_text = "RewriteEngine On\n\
        RewriteRule ^/old/(.*)$ /ubuntu/$1 [PT]\n\
        RewriteRule ^/ubuntu/y$ /never [L]\n";
    let dir = docroot();
    let rules = dir.path().join(".rules.conf");
    std::fs::write(&rules, rules_text).unwrap();
    let other_dir = other.path().display();
    let apache = Apache::start_with(&rules, &[], &format!("Alias /ubuntu {other_dir}"));
    let srv = Server::start_with_config(
        dir,
        &format!("[[server.alias]]\nprefix = \"/ubuntu\"\nroot = \"{other_dir}\"\n"),
        &["--rules", rules.to_str().unwrap()],
    );
    let apache_addr = format!("127.0.0.1:{}", apache.port);
    let ask = |addr: &str, path: &str| {
        let r = send(addr, "GET", path, "Host: a\r\n");
        let body = if r.status == 200 {
            r.text()
        } else {
            String::new()
        };
        (r.status, body)
    };
    let mut differ = Vec::new();
    // `/old/y` is served from the alias, not `/never`: PT ends the loop before
    // the second rule, which `/ubuntu/y` itself meets (404 in both).
    for path in ["/old/pool/x.deb", "/old/y", "/ubuntu/y", "/old/missing"] {
        let a = ask(&apache_addr, path);
        let s = ask(&srv.addr, path);
        if a != s {
            differ.push(format!("{path}: Apache {a:?}, sluice {s:?}"));
        }
    }
    assert!(differ.is_empty(), "answers differ:\n{}", differ.join("\n"));
    assert_eq!(
        ask(&srv.addr, "/old/pool/x.deb"),
        (200, "from the alias\n".to_string())
    );
    assert_eq!(ask(&srv.addr, "/old/y"), (200, "alias y\n".to_string()));
}

/// A `.htaccess` file, read by Apache from its document root (`AllowOverride
/// All`) and loaded by sluice as a rules file: `RewriteBase` starts every
/// relative substitution, a redirect's as a rewrite's, the rules before it too.
#[test]
fn an_htaccess_with_rewrite_base_answers_as_in_apache() {
    let text = "RewriteEngine On\n\
        RewriteRule ^old/(.*)$ new/$1 [R=301,L]\n\
        RewriteBase /base\n\
        RewriteRule ^q/(.*)$ new/$1?k=v [R=302,L]\n\
        RewriteRule ^abs/(.*)$ /new/$1 [R=302,L]\n\
        RewriteRule ^int/(.*)$ target/$1 [L]\n\
        RewriteRule ^dyn/(.*)$ $1 [R=302,L]\n";
    let files = [
        (".htaccess", text),
        ("base/target/f", "the base's target\n"),
    ];
    let dir = docroot();
    std::fs::create_dir_all(dir.path().join("base/target")).unwrap();
    for (name, body) in files {
        std::fs::write(dir.path().join(name), body).unwrap();
    }
    let nothing = dir.path().join(".server.conf");
    std::fs::write(&nothing, "").unwrap();
    let apache = Apache::start_with(
        &nothing,
        &files,
        "<Directory />\nAllowOverride All\n</Directory>",
    );
    let rules = dir.path().join(".htaccess");
    let srv = Server::start_in(dir, &["--rules", rules.to_str().unwrap()]);
    let apache_addr = format!("127.0.0.1:{}", apache.port);
    let ask = |addr: &str, path: &str| {
        let r = send(addr, "GET", path, "Host: a\r\n");
        let loc = r.header("location").map(decoded).unwrap_or_default();
        let body = if r.status == 200 {
            r.text()
        } else {
            String::new()
        };
        (r.status, String::from_utf8_lossy(&loc).into_owned(), body)
    };
    let mut differ = Vec::new();
    for path in ["/old/a%20b", "/q/a", "/abs/a", "/int/f", "/dyn/x/y"] {
        let (a, s) = (ask(&apache_addr, path), ask(&srv.addr, path));
        if a != s {
            differ.push(format!("{path}: Apache {a:?}, sluice {s:?}"));
        }
    }
    assert!(differ.is_empty(), "answers differ:\n{}", differ.join("\n"));
    assert_eq!(ask(&srv.addr, "/old/x").1, "/base/new/x");
    assert_eq!(ask(&srv.addr, "/int/f").2, "the base's target\n");
}

/// What a rule sets besides deciding, `testdata/rules/rewrite_effects.conf` loaded
/// by both: `E=` read back as `%{ENV:…}` by later rules, `T=` on a file served,
/// `CO=` cookies, and `B`, `B=chars`, `BNP`, `BCTLS` on the redirects' captures.
/// Each answer's status, decoded `Location`, `Set-Cookie` lines (the lifetime
/// aside: Apache writes an `expires` date, sluice `Max-Age`) and, for a file a
/// `T=` typed, its `Content-Type` must be the same.
#[test]
fn what_a_rule_sets_and_how_b_escapes_answer_as_apache() {
    let rules = testdata_rules("rewrite_effects.conf");
    let files = [("g.dat", "dat\n"), ("g.txt", "txt\n"), ("f.txt", "f\n")];
    let (_apache, apache_addr, srv) = both_serving(&rules, &files);
    let typed = ["/g.dat", "/t1", "/t2/csv", "/tt"];
    let ask = |addr: &str, path: &str| {
        let r = send(addr, "GET", path, "Host: a\r\n");
        let loc = r.header("location").unwrap_or_default();
        let cookies: Vec<String> = r
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
            .map(|(_, v)| {
                v.split("; ")
                    .filter(|f| !f.starts_with("expires=") && !f.starts_with("Max-Age="))
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .collect();
        let ctype = typed
            .contains(&path)
            .then(|| r.header("content-type").unwrap_or_default().to_string());
        (
            r.status,
            String::from_utf8_lossy(&decoded(loc)).into_owned(),
            cookies,
            ctype,
        )
    };
    let paths = [
        "/e/bob",
        "/e/al",
        "/e/x",
        "/e/y",
        "/unset",
        "/order",
        "/tt",
        "/g.dat",
        "/t1",
        "/t2/csv",
        "/co1",
        "/co2",
        "/co3",
        "/co4",
        "/b/a%20b&c+d~f_g.h-i!j%C3%A9",
        "/bnp/a%20b&c",
        "/bc/a&c+d=e",
        "/bctls/a%20b&c",
        // No space: with NE, Apache refuses (403) a target that holds a raw one,
        // which `B=chars` and `BNP` alone leave; sluice escapes it in the Location.
        "/bnponly/a&c",
    ];
    assert_same_answers(&paths, ask, &apache_addr, &srv.addr);
}

/// `[N]`, `testdata/rules/rewrite_next.conf` loaded by both: a rename one round
/// at a time, a rule that matches forever (500 past its limit), where the limit
/// falls, and `N` beside `L`. The status and decoded `Location` must be the same.
#[test]
fn next_rounds_answer_as_apache() {
    let (_apache, apache_addr, srv) = both_loading(&testdata_rules("rewrite_next.conf"));
    let paths = [
        "/n/a_b_c",
        "/n/plain",
        "/loop",
        "/few/xx",
        "/few/xxx",
        "/few/xxxx",
        "/last/a_b_c",
    ];
    assert_same_answers(&paths, redirect_decoded, &apache_addr, &srv.addr);
}

/// The text of `testdata/rules/NAME`.
fn testdata_rules(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/rules")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// Each of `paths` asked of Apache (at `apache`) and of sluice (at `sluice`) by
/// `ask`: every answer must be the same, and every difference is listed.
fn assert_same_answers<T: PartialEq + std::fmt::Debug>(
    paths: &[&str],
    ask: impl Fn(&str, &str) -> T,
    apache: &str,
    sluice: &str,
) {
    let mut differ = Vec::new();
    for path in paths {
        let (a, s) = (ask(apache, path), ask(sluice, path));
        if a != s {
            differ.push(format!("{path}: Apache {a:?}, sluice {s:?}"));
        }
    }
    assert!(differ.is_empty(), "answers differ:\n{}", differ.join("\n"));
}

/// `RewriteCond`'s lexical and integer comparisons,
/// `testdata/rules/rewrite_compare.conf` loaded by both: each request's status
/// and decoded `Location` must be the same (sluice read these patterns as
/// regexes before, and none of them ever matched).
#[test]
fn comparisons_in_conditions_answer_as_apache() {
    let (_apache, apache_addr, srv) = both_loading(&testdata_rules("rewrite_compare.conf"));
    let paths = [
        "/gt?n",
        "/gt?m",
        "/gt?a",
        "/le?m",
        "/le?ma",
        "/ilt?9",
        "/ilt?10",
        "/ilt?x",
        "/ilt?%209",
        "/ilt?9abc",
        "/ige?16",
        "/ige?0",
        "/ige?-1",
        "/gtnc?N",
        "/gtnc?n",
        "/gtnc?a",
        "/notlt?m",
        "/notlt?a",
        "/ieq?-3",
        "/ieq?-03",
        "/ilt?+5",
        "/ilt?99999999999999999999",
        // The clock: UTC in both (Apache runs with TZ=UTC).
        "/year",
    ];
    assert_same_answers(&paths, redirect_decoded, &apache_addr, &srv.addr);
}
