//! Precompressed siblings and compressed listings (issue 14), over TCP and with curl.

use sluice_testkit::*;

fn root_with_siblings() -> tempfile::TempDir {
    let d = docroot();
    let p = d.path();
    std::fs::write(p.join("page.html"), b"<p>plain page</p>\n").unwrap();
    std::fs::write(p.join("page.html.gz"), b"GZIP-BYTES-0123456789").unwrap();
    std::fs::write(p.join("page.html.br"), b"BROTLI-BYTES").unwrap();
    std::fs::write(p.join("pkg.tar.gz"), b"\x1f\x8b archive bytes").unwrap();
    d
}

fn get(srv: &Server, path: &str, ae: Option<&str>, extra: &str) -> Resp {
    let mut c = srv.client();
    let ae = ae.map_or(String::new(), |v| format!("Accept-Encoding: {v}\r\n"));
    c.send(
        format!("GET {path} HTTP/1.1\r\nHost: t\r\n{ae}{extra}Connection: close\r\n\r\n")
            .as_bytes(),
    );
    c.response(false).expect("a response")
}

#[test]
fn siblings_are_chosen_by_accept_encoding() {
    let srv = Server::start_in(root_with_siblings(), &[]);
    // No Accept-Encoding: the file itself.
    let r = get(&srv, "/page.html", None, "");
    assert_eq!(r.body, b"<p>plain page</p>\n");
    assert_eq!(r.header("content-encoding"), None);
    // gzip only.
    let r = get(&srv, "/page.html", Some("gzip"), "");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"GZIP-BYTES-0123456789");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.header("content-length"), Some("21"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let gz_etag = r.header("etag").unwrap().to_string();
    // br preferred when equal; the client's weights win over ours.
    let r = get(&srv, "/page.html", Some("gzip, deflate, br, zstd"), "");
    assert_eq!(
        (r.body.as_slice(), r.header("content-encoding")),
        (&b"BROTLI-BYTES"[..], Some("br"))
    );
    let r = get(&srv, "/page.html", Some("br;q=0.2, gzip"), "");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_ne!(
        r.header("etag").unwrap(),
        get(&srv, "/page.html", None, "").header("etag").unwrap()
    );
    // Neither accepted: the original, still marked as varying.
    let r = get(&srv, "/page.html", Some("zstd, br;q=0"), "");
    assert_eq!(r.body, b"<p>plain page</p>\n");
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    // The field in two lines is one list (RFC 9110 §5.3, as Apache reads it),
    // asked twice (the second from the worker's kept answer): the first line's
    // gzip counts, and so does its weight against the second line's br.
    for _ in 0..2 {
        let r = get(
            &srv,
            "/page.html",
            Some("gzip"),
            "Accept-Encoding: x-none\r\n",
        );
        assert_eq!(r.header("content-encoding"), Some("gzip"));
        let r = get(
            &srv,
            "/page.html",
            Some("gzip;q=0.5"),
            "Accept-Encoding: br;q=0.1\r\n",
        );
        assert_eq!(r.header("content-encoding"), Some("gzip"));
    }
    // Ranges apply to the encoded bytes; validators are the sibling's own.
    let r = get(&srv, "/page.html", Some("gzip"), "Range: bytes=0-3\r\n");
    assert_eq!((r.status, r.body.as_slice()), (206, &b"GZIP"[..]));
    assert_eq!(r.header("content-range"), Some("bytes 0-3/21"));
    let r = get(
        &srv,
        "/page.html",
        Some("gzip"),
        &format!("If-None-Match: {gz_etag}\r\n"),
    );
    assert_eq!(r.status, 304);
    // A file with no siblings is untouched.
    let r = get(&srv, "/hello.txt", Some("gzip, br"), "");
    assert_eq!(
        (r.header("content-encoding"), r.header("vary")),
        (None, None)
    );
}

#[test]
fn compressed_archives_are_served_as_they_are() {
    let srv = Server::start_in(root_with_siblings(), &[]);
    let r = get(&srv, "/pkg.tar.gz", Some("gzip"), "");
    assert_eq!(r.body, b"\x1f\x8b archive bytes");
    assert_eq!(
        r.header("content-encoding"),
        None,
        "apt/dnf must get the bytes as stored"
    );
    assert_eq!(r.header("content-type"), Some("application/gzip"));
    if curl_available() {
        // curl --compressed would have decompressed (and failed on) a mislabelled file.
        let out = curl(&["-sS", "--compressed", &srv.url("/pkg.tar.gz")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, b"\x1f\x8b archive bytes");
    }
}

#[test]
fn curl_compressed_gets_a_real_gzip_sibling_and_a_gzipped_listing() {
    if !curl_available() {
        panic!("curl is needed (scripts/test.sh installs it)");
    }
    let d = root_with_siblings();
    // A real gzip sibling, made by the system's gzip.
    let text = "sluice precompressed sibling\n".repeat(200);
    std::fs::write(d.path().join("doc.txt"), &text).unwrap();
    let st = std::process::Command::new("gzip")
        .args(["-k", "-9"])
        .arg(d.path().join("doc.txt"))
        .status()
        .unwrap();
    assert!(st.success());
    let gz_len = std::fs::metadata(d.path().join("doc.txt.gz"))
        .unwrap()
        .len();
    let srv = Server::start_in(d, &[]);
    let out = curl(&[
        "-sS",
        "--compressed",
        "-D",
        "-",
        "-o",
        "/dev/null",
        &srv.url("/doc.txt"),
    ]);
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(
        head.contains("content-encoding: gzip") || head.contains("content-encoding: br"),
        "{head}"
    );
    let out = curl(&["-sS", "--compressed", &srv.url("/doc.txt")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), text);
    let r = get(&srv, "/doc.txt", Some("gzip"), "");
    assert_eq!(r.body.len() as u64, gz_len);

    // Listings are gzipped on the fly and decode to the same page.
    let plain = get(&srv, "/list/", None, "");
    let gz = get(&srv, "/list/", Some("gzip"), "");
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert_eq!(&gz.body[..2], b"\x1f\x8b");
    assert!(gz.header("vary").unwrap().contains("Accept-Encoding"));
    let out = curl(&["-sS", "--compressed", &srv.url("/list/")]);
    assert_eq!(out.stdout, plain.body);
    // A new file shows once the built page's validity (`cache_validity`, 1 s)
    // has passed: the page is built again, and compressed again.
    std::fs::write(srv.root().join("list/new-file.txt"), b"n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let out = curl(&["-sS", "--compressed", &srv.url("/list/")]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("new-file.txt"));
}
