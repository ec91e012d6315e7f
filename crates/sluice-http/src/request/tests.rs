//! The parser's cases: limits, smuggling shapes, targets, versions, hosts, and
//! heads split at every byte.

use super::*;

fn parse(s: &str) -> Result<Parsed<'_>, ParseError> {
    parse_head(s.as_bytes(), &Limits::default())
}

fn complete(s: &str) -> RequestHead<'_> {
    match parse(s) {
        Ok(Parsed::Complete(h)) => h,
        other => panic!("expected complete, got {other:?}"),
    }
}

#[test]
fn simple_get() {
    let h = complete("GET /a/b?x=1 HTTP/1.1\r\nHost: example.org:8080\r\n\r\n");
    assert_eq!(h.method(), Method::Get);
    assert_eq!(h.path, "/a/b");
    assert_eq!(h.query, Some("x=1"));
    assert_eq!(h.host, Some("example.org"));
    assert!(h.keep_alive);
    assert_eq!(h.framing(), BodyFraming::None);
}

#[test]
fn http10_keepalive_rules() {
    assert!(!complete("GET / HTTP/1.0\r\n\r\n").keep_alive);
    assert!(complete("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
    assert!(!complete("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").keep_alive);
}

#[test]
fn absolute_form_wins_over_host() {
    let h = complete("GET http://Mirror.example/pub/x.iso?y HTTP/1.1\r\nHost: other\r\n\r\n");
    assert_eq!(h.host, Some("Mirror.example"));
    assert_eq!(h.path, "/pub/x.iso");
    assert_eq!(h.query, Some("y"));
    let h = complete("GET http://h HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(h.path, "/");
}

#[test]
fn byte_by_byte_is_partial_until_the_end() {
    let req = b"GET /x HTTP/1.1\r\nHost: a\r\nRange: bytes=0-1\r\n\r\n";
    for i in 0..req.len() {
        match parse_head(&req[..i], &Limits::default()) {
            Ok(Parsed::Partial) => {}
            other => panic!("prefix {i}: {other:?}"),
        }
    }
    match parse_head(req, &Limits::default()).unwrap() {
        Parsed::Complete(h) => {
            assert_eq!(h.range, Some("bytes=0-1"));
            assert_eq!(h.head_len, req.len());
        }
        Parsed::Partial => panic!(),
    }
}

#[test]
fn pipelined_heads_parse_one_at_a_time() {
    let two = b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n";
    let Parsed::Complete(h1) = parse_head(two, &Limits::default()).unwrap() else {
        panic!()
    };
    assert_eq!(h1.path, "/1");
    let rest = &two[h1.head_len..];
    let Parsed::Complete(h2) = parse_head(rest, &Limits::default()).unwrap() else {
        panic!()
    };
    assert_eq!(h2.path, "/2");
    assert_eq!(h2.head_len, rest.len());
}

#[test]
fn smuggling_shapes_are_refused() {
    let cases = [
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 400),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        // A coding sluice does not implement, even with chunked last (as nginx).
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 501),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n", 501),
        ("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        ("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\n\r\n", 400),
        ("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
        ("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nBad Name: x\r\nHost: a\r\n\r\n", 400),
    ];
    for (req, status) in cases {
        match parse(req) {
            Err(e) => assert_eq!(e.status(), status, "{req:?}: {e:?}"),
            Ok(p) => panic!("accepted {req:?}: {p:?}"),
        }
    }
}

#[test]
fn hosts_and_targets() {
    for host in [
        "a@b", "<script>", "x:80:80", "[::1", "a b", "h:8o", "[zz]", "", ":80",
    ] {
        let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
        assert_eq!(parse(&req).unwrap_err(), ParseError::BadHost, "{host}");
    }
    for host in [
        "a",
        "a.b:80",
        "[::1]",
        "[::1]:8080",
        "127.0.0.1:1",
        "xn--d1a.example",
    ] {
        let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
        assert!(matches!(parse(&req), Ok(Parsed::Complete(_))), "{host}");
    }
    assert_eq!(
        parse("GET http://a@evil/ HTTP/1.1\r\nHost: a\r\n\r\n").unwrap_err(),
        ParseError::BadHost
    );
    assert_eq!(
        parse("GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n").unwrap_err(),
        ParseError::BadHost
    );
    for t in ["/a#b", "/a?b#c", "/\x7f", "/a\x01", "/a\tb"] {
        let req = format!("GET {t} HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(parse(&req).unwrap_err(), ParseError::Malformed, "{t:?}");
    }
    // What browsers and curl send raw, and nginx and Apache serve: the query
    // Chromium sends for `?q={a}|b^c`d\e`, and the same bytes in a path.
    for (t, path, query) in [
        ("/f?q={a}|b^c`d\\e", "/f", Some("q={a}|b^c`d\\e")),
        ("/f?q=\"<x>\"", "/f", Some("q=\"<x>\"")),
        ("/a|b^c{d}`\"<>", "/a|b^c{d}`\"<>", None),
    ] {
        let req = format!("GET {t} HTTP/1.1\r\nHost: a\r\n\r\n");
        let h = complete(&req);
        assert_eq!((h.path, h.query), (path, query), "{t:?}");
    }
    let h = complete("GET /caf\u{e9}?x=%22 HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(h.path, "/caf\u{e9}");
}

#[test]
fn junk_is_refused_before_a_newline() {
    for junk in [
        &b"\x00\x00\x00"[..],
        b"\x16\x03\x01\x02",
        b"GE\xff",
        b"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ] {
        assert_eq!(
            parse_head(junk, &Limits::default()).unwrap_err(),
            ParseError::Malformed,
            "{junk:?}"
        );
    }
    assert!(matches!(
        parse_head(b"GET /partial", &Limits::default()),
        Ok(Parsed::Partial)
    ));
}

#[test]
fn a_bare_cr_is_refused_at_once() {
    // No LF anywhere: the request line itself carries the bare CR.
    for bad in [
        &b"GET / HTTP/1.1\rHost: a\r\r"[..],
        b"GET /\rx",
        // The request line is whole; a header line ends in a bare CR.
        b"GET / HTTP/1.1\r\nHost: a\rX: b\r\r",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: b\rY",
    ] {
        assert_eq!(
            parse_head(bad, &Limits::default()).unwrap_err(),
            ParseError::Malformed,
            "{bad:?}"
        );
    }
    // A CR that ends what has arrived may yet be followed by its LF.
    for partial in [&b"GET / HTTP/1.1\r"[..], b"GET / HTTP/1.1\r\nHost: a\r"] {
        assert!(
            matches!(parse_head(partial, &Limits::default()), Ok(Parsed::Partial)),
            "{partial:?}"
        );
    }
}

#[test]
fn minor_versions_above_one_are_one_one() {
    let h = complete("GET / HTTP/1.7\r\nHost: a\r\n\r\n");
    assert_eq!(h.minor, 7);
    assert!(h.keep_alive);
    assert_eq!(
        parse("GET / HTTP/1.2\r\n\r\n").unwrap_err(),
        ParseError::MissingHost
    );
    for v in ["HTTP/2.0", "HTTP/0.9", "HTTP/3.1"] {
        let req = format!("GET / {v}\r\nHost: a\r\n\r\n");
        assert_eq!(parse(&req).unwrap_err().status(), 505, "{v}");
    }
    for v in ["HTTP/1.10", "HTTP/1", "http/1.1", "HTTP/1.x"] {
        let req = format!("GET / {v}\r\nHost: a\r\n\r\n");
        assert_eq!(parse(&req).unwrap_err().status(), 400, "{v}");
    }
}

#[test]
fn values_are_text_only_where_they_are_read() {
    // Bytes that are not UTF-8 in a field nobody reads, or in one read only as a
    // hint, are let through; in a field the request's meaning depends on, refused.
    let ok = b"GET /a?b?c HTTP/1.1\r\nHost: a\r\nX-Any: \xff\xfe\r\nAccept: \xff\r\n\r\n";
    let Parsed::Complete(h) = parse_head(ok, &Limits::default()).unwrap() else {
        panic!()
    };
    assert_eq!(h.accept, None);
    assert_eq!((h.path, h.query), ("/a", Some("b?c")));
    for field in ["Host", "Content-Length", "Transfer-Encoding"] {
        let mut req = b"POST / HTTP/1.1\r\n".to_vec();
        if field != "Host" {
            req.extend_from_slice(b"Host: a\r\n");
        }
        req.extend_from_slice(format!("{field}: 1").as_bytes());
        req.extend_from_slice(b"\xff\r\n\r\n");
        assert_eq!(
            parse_head(&req, &Limits::default()).unwrap_err(),
            ParseError::Malformed,
            "{field}"
        );
    }
    // The Connection tokens, alone or in a list, in any case.
    for (value, keep) in [
        ("Keep-Alive", true),
        ("upgrade, KEEP-ALIVE", true),
        ("keep-alivex", false),
        ("close", false),
        ("keep-alive, close", false),
    ] {
        let req = format!("GET / HTTP/1.0\r\nConnection: {value}\r\n\r\n");
        assert_eq!(complete(&req).keep_alive, keep, "{value}");
    }
    assert!(!complete("GET / HTTP/1.1\r\nHost: a\r\nConnection: x, Close\r\n\r\n").keep_alive);
    // The host without its port, an IPv6 literal with its brackets.
    assert_eq!(
        complete("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n").host,
        Some("[::1]")
    );
    assert_eq!(
        complete("GET / HTTP/1.1\r\nHost: a.b:80\r\n\r\n").host,
        Some("a.b")
    );
}

#[test]
fn obs_text_in_user_agent_is_kept() {
    let req = b"GET / HTTP/1.1\r\nHost: a\r\nUser-Agent: caf\xe9 \r\nReferer: \xff\r\nIf-Match: \"e\"\r\nIf-Unmodified-Since: x\r\n\r\n";
    let Parsed::Complete(h) = parse_head(req, &Limits::default()).unwrap() else {
        panic!()
    };
    assert_eq!(h.user_agent, Some(&b"caf\xe9"[..]));
    assert_eq!(h.referer, Some(&b"\xff"[..]));
    assert_eq!(h.if_match, Some("\"e\""));
    assert_eq!(h.if_unmodified_since, Some("x"));
}

#[test]
fn negotiation_fields_in_several_lines_are_one_list() {
    let h = complete("GET / HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n");
    assert!(!h.negotiation_repeated);
    assert_eq!(h.accept_encoding().as_deref(), Some("gzip"));
    assert_eq!(h.accept(), None);
    let h = complete(
        "GET / HTTP/1.1\r\nHost: a\r\naccept-encoding: gzip \r\nAccept: text/html\r\n\
         Accept-Encoding:br;q=0\r\nAccept: application/json\r\n\r\n",
    );
    assert!(h.negotiation_repeated);
    assert_eq!(h.accept_encoding().as_deref(), Some("gzip, br;q=0"));
    assert_eq!(h.accept().as_deref(), Some("text/html, application/json"));
}

#[test]
fn framing_is_reported() {
    let h = complete("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n");
    assert_eq!(h.framing(), BodyFraming::Length(12));
    let h = complete("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked \r\n\r\n");
    assert_eq!(h.framing(), BodyFraming::Chunked);
}

#[test]
fn limits() {
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(9000));
    assert_eq!(parse(&long).unwrap_err().status(), 414);
    let no_newline_yet = format!("GET /{}", "a".repeat(9000));
    assert_eq!(parse(&no_newline_yet).unwrap_err().status(), 414);
    let many: String = (0..100).map(|i| format!("X-{i}: v\r\n")).collect();
    let req = format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n");
    assert_eq!(parse(&req).unwrap_err().status(), 431);
    let big = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n", "v".repeat(17000));
    assert_eq!(parse(&big).unwrap_err().status(), 431);
}

#[test]
fn header_counts_on_each_side_of_the_first_try_and_of_the_limit() {
    // Fields before a last `Host` and `Range`: every one is read, however many
    // slots the first parse had, up to `max_headers` (64) in all.
    for fields in [
        SMALL_HEADERS - 2,
        SMALL_HEADERS - 1,
        SMALL_HEADERS,
        40,
        62,
        63,
        64,
        65,
    ] {
        let filler: String = (0..fields - 2).map(|i| format!("X-{i}: v\r\n")).collect();
        let req = format!("GET / HTTP/1.1\r\n{filler}Range: bytes=0-1\r\nHost: last\r\n\r\n");
        match parse(&req) {
            Ok(Parsed::Complete(h)) => {
                assert!(fields <= 64, "{fields} fields accepted");
                assert_eq!(h.host, Some("last"), "{fields} fields");
                assert_eq!(h.range, Some("bytes=0-1"), "{fields} fields");
            }
            Err(e) => assert!(fields > 64 && e.status() == 431, "{fields} fields: {e:?}"),
            other => panic!("{fields} fields: {other:?}"),
        }
        // Cut before the blank line, a head with many fields is incomplete, not refused.
        if fields <= 64 {
            assert!(
                matches!(parse(&req[..req.len() - 2]), Ok(Parsed::Partial)),
                "{fields}"
            );
        }
    }
}

proptest::proptest! {
    #[test]
    fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
        let _ = parse_head(&bytes, &Limits::default());
    }

    #[test]
    fn split_point_does_not_change_result(split in 0usize..60) {
        let req = b"GET /p?q HTTP/1.1\r\nHost: h\r\nIf-None-Match: \"x\"\r\n\r\n";
        let split = split.min(req.len());
        // Every strict prefix is partial; feeding the rest completes the same head.
        let r = parse_head(&req[..split], &Limits::default()).unwrap();
        proptest::prop_assert!(matches!(r, Parsed::Partial) || split == req.len());
        let mut buf = req[..split].to_vec();
        buf.extend_from_slice(&req[split..]);
        let Parsed::Complete(h) = parse_head(&buf, &Limits::default()).unwrap() else {
            panic!("whole request is partial");
        };
        proptest::prop_assert_eq!(
            (h.path, h.query, h.host, h.if_none_match, h.head_len),
            ("/p", Some("q"), Some("h"), Some("\"x\""), req.len())
        );
    }
}

#[test]
fn a_second_range_or_if_range_line_drops_the_range() {
    let h = complete("GET /x HTTP/1.1\r\nHost: a\r\nRange: bytes=0-9\r\nIf-Range: \"e\"\r\n\r\n");
    assert_eq!((h.range, h.if_range), (Some("bytes=0-9"), Some("\"e\"")));
    // Neither is a list: with two lines the request is answered whole, not with
    // whichever line came last.
    let h =
        complete("GET /x HTTP/1.1\r\nHost: a\r\nRange: bytes=0-9\r\nRange: bytes=10-19\r\n\r\n");
    assert_eq!((h.range, h.if_range), (None, None));
    let h = complete(
        "GET /x HTTP/1.1\r\nHost: a\r\nRange: bytes=0-9\r\nIf-Range: \"e\"\r\nIf-Range: \"f\"\r\n\r\n",
    );
    assert_eq!((h.range, h.if_range), (None, None));
}
