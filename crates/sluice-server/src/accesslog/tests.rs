//! The access log's tests: lines as written, escaping, fields, dropped buffers.

use super::*;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::sync_channel;
use std::sync::Arc;

#[test]
fn time_format() {
    assert_eq!(clf_time(784111777), "06/Nov/1994:08:49:37 +0000");
    assert_eq!(clf_time(0), "01/Jan/1970:00:00:00 +0000");
    assert_eq!(clf_time(1_709_210_096), "29/Feb/2024:12:34:56 +0000");
}
#[test]
fn escaping() {
    let mut v = Vec::new();
    escape_into(&mut v, b"GET /\"x\n\\ caf\xe9 HTTP/1.1");
    assert_eq!(v, b"GET /\\\"x\\x0a\\\\ caf\\xe9 HTTP/1.1");
}
/// A worker's end of a writer's queue, counting into a counter of its own.
fn handle(tx: std::sync::mpsc::SyncSender<Vec<u8>>) -> Handle {
    Handle {
        tx,
        dropped: Arc::new(AtomicU64::new(0)),
        lost: Box::leak(Box::new(AtomicU64::new(0))),
    }
}

#[test]
fn a_buffer_dropped_for_a_writer_behind_counts_its_lines() {
    // No room in the queue: the writer thread is behind.
    let (tx, _rx) = sync_channel(0);
    let h = handle(tx);
    let mut log = WorkerLog::new(vec![("a.log".into(), h.clone())]);
    let p = Pending::rejected(b"GET / HTTP/1.1", 400, Some(0));
    for _ in 0..3 {
        log.line(0, "192.0.2.10".parse().unwrap(), &p, 0, None);
    }
    log.flush();
    assert_eq!(h.dropped.load(Ordering::Relaxed), 1);
    assert_eq!(h.lost.load(Ordering::Relaxed), 3);
}

#[test]
fn a_whole_line() {
    let (tx, rx) = sync_channel(4);
    let mut log = WorkerLog::new(vec![("a.log".into(), handle(tx))]);
    let raw = b"GET /caf%C3%A9?q=1 HTTP/1.1\r\nHost: a\r\nReferer: http://r/\r\nUser-Agent: W\\get \"caf\xc3\xa9\"\r\n\r\n";
    let limits = sluice_http::Limits::default();
    let Ok(sluice_http::Parsed::Complete(head)) = sluice_http::parse_head(raw, &limits) else {
        panic!("not parsed")
    };
    let p = Pending::new(&head, 200, Some(0), true);
    let t = 784111777;
    log.line(t, "192.0.2.10".parse().unwrap(), &p, 1234, None);
    log.line(
        t,
        "2001:db8::1".parse().unwrap(),
        &p.clone().with_note("tarpit"),
        0,
        None,
    );
    log.line(
        t,
        "::ffff:10.0.0.1".parse().unwrap(),
        &Pending::rejected(b"", 408, Some(0)),
        0,
        None,
    );
    // Written once for 1234 bytes: the same lines for 1234, and the full way
    // for another count or once the record changes.
    let kept = p.clone().rendered_for(1234);
    log.line(t, "192.0.2.10".parse().unwrap(), &kept, 1234, None);
    log.line(t, "2001:db8::1".parse().unwrap(), &kept, 0, None);
    let noted = kept.clone().with_note("tarpit");
    log.line(t, "2001:db8::1".parse().unwrap(), &noted, 1234, None);
    log.flush();
    let text = String::from_utf8(rx.recv().unwrap()).unwrap();
    let want = [
        r#"192.0.2.10 - - [06/Nov/1994:08:49:37 +0000] "GET /caf%C3%A9?q=1 HTTP/1.1" 200 1234 "http://r/" "W\\get \"caf\xc3\xa9\"""#,
        r#"2001:db8::1 - - [06/Nov/1994:08:49:37 +0000] "GET /caf%C3%A9?q=1 HTTP/1.1" 200 - "http://r/" "W\\get \"caf\xc3\xa9\"" errant=tarpit"#,
        r#"::ffff:10.0.0.1 - - [06/Nov/1994:08:49:37 +0000] "-" 408 - "-" "-""#,
        r#"192.0.2.10 - - [06/Nov/1994:08:49:37 +0000] "GET /caf%C3%A9?q=1 HTTP/1.1" 200 1234 "http://r/" "W\\get \"caf\xc3\xa9\"""#,
        r#"2001:db8::1 - - [06/Nov/1994:08:49:37 +0000] "GET /caf%C3%A9?q=1 HTTP/1.1" 200 - "http://r/" "W\\get \"caf\xc3\xa9\"""#,
        r#"2001:db8::1 - - [06/Nov/1994:08:49:37 +0000] "GET /caf%C3%A9?q=1 HTTP/1.1" 200 1234 "http://r/" "W\\get \"caf\xc3\xa9\"" errant=tarpit"#,
    ];
    assert_eq!(text.lines().collect::<Vec<_>>(), want);
}

/// `[log] fields` come after the combined fields, in the order named, for a
/// kept answer's record as for any other; an errant note ends the line.
#[test]
fn the_configured_fields_end_the_line() {
    let (tx, rx) = sync_channel(4);
    let mut log = WorkerLog::new(vec![("a.log".into(), handle(tx))]);
    log.set_fields(&[LogField::RequestTime, LogField::Host]);
    let length = |l: u64| {
        let mut log = WorkerLog::new(Vec::new());
        log.set_fields(&[LogField::Length]);
        let mut b = Vec::new();
        Pending::rejected(b"", 400, None)
            .with_length(l)
            .write_fields(&mut b, &log.fields, None);
        String::from_utf8(b).unwrap()
    };
    assert_eq!(
        (length(0), length(4_700_372_992)),
        (" length=0".into(), " length=4700372992".into())
    );
    let raw = b"GET /x HTTP/1.1\r\nHost: Mirror.example:8080\r\n\r\n";
    let limits = sluice_http::Limits::default();
    let Ok(sluice_http::Parsed::Complete(head)) = sluice_http::parse_head(raw, &limits) else {
        panic!("not parsed")
    };
    let p = Pending::new(&head, 200, Some(0), true);
    let ip = "192.0.2.10".parse().unwrap();
    log.line(0, ip, &p, 10, Some(12));
    log.line(0, ip, &p.clone().rendered_for(10), 10, Some(61_234));
    log.line(0, ip, &p.clone().with_note("tarpit"), 10, Some(5));
    log.line(0, ip, &Pending::rejected(b"", 408, Some(0)), 0, None);
    log.set_fields(&[LogField::Host]);
    log.line(0, ip, &p, 10, Some(7));
    log.flush();
    let text = String::from_utf8(rx.recv().unwrap()).unwrap();
    let ends: Vec<_> = text
        .lines()
        .map(|l| l.split_once("\"-\" \"-\"").map_or(l, |(_, end)| end))
        .collect();
    assert_eq!(
        ends,
        [
            r#" request_time=0.012 host="Mirror.example""#,
            r#" request_time=61.234 host="Mirror.example""#,
            r#" request_time=0.005 host="Mirror.example" errant=tarpit"#,
            r#" request_time=- host="-""#,
            r#" host="Mirror.example""#,
        ],
        "{text}"
    );
}

#[test]
fn rejected_requests_keep_their_first_line() {
    let p = Pending::rejected(b"\r\nPOST /x HTTP/1.1\r\nHost: a\r\n", 400, None);
    assert_eq!(p.fields(), (&b"POST /x HTTP/1.1"[..], &b""[..], &b""[..]));
    assert_eq!(Pending::rejected(b"", 408, None).fields().0, b"-");
    let long = vec![b'a'; 1000];
    let p = Pending::rejected(&long, 414, None);
    assert_eq!(p.fields().0.len(), REJECTED_LINE_MAX + 3);
    assert!(p.fields().0.ends_with(b"a..."));
}
