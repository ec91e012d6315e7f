//! The listing's pages: order, escaping, notes, negotiation.

use super::*;

fn it(name: &str, dir: bool, size: u64, mtime: u64) -> Item {
    Item {
        name: name.as_bytes().to_vec(),
        dir,
        size,
        mtime,
    }
}

fn names(v: &[Item]) -> Vec<String> {
    v.iter().map(Item::display).collect()
}

#[test]
fn sorting_keeps_directories_first() {
    // Name, size and date each give a different order of the three files.
    let mut v = vec![
        it("b", false, 1, 30),
        it("z", true, 0, 1),
        it("a", false, 9, 20),
        it("c", false, 5, 10),
    ];
    sort(&mut v, SortKey::Name, false);
    assert_eq!(names(&v), ["z", "a", "b", "c"]);
    sort(&mut v, SortKey::Name, true);
    assert_eq!(names(&v), ["z", "c", "b", "a"]);
    sort(&mut v, SortKey::Size, false);
    assert_eq!(names(&v), ["z", "b", "c", "a"]);
    sort(&mut v, SortKey::Size, true);
    assert_eq!(names(&v), ["z", "a", "c", "b"]);
    sort(&mut v, SortKey::Date, false);
    assert_eq!(names(&v), ["z", "c", "a", "b"]);
    sort(&mut v, SortKey::Date, true);
    assert_eq!(names(&v), ["z", "b", "a", "c"]);
}

#[test]
fn notes_go_above_and_below_the_table_html_as_it_is_text_escaped() {
    let head = Note::new("HEADER.HTML", Arc::from(&b"<p>Hi</p>"[..]));
    let readme = Note::new("README", Arc::from(&b"<b> & co"[..]));
    assert!(head.html && !readme.html);
    assert!(
        Note::new("a.Htm", Arc::from(&b""[..])).html && !Note::new("é", Arc::from(&b""[..])).html
    );
    let h = String::from_utf8(html(
        b"/x/",
        &[it("a", false, 1, 0)],
        SortKey::Name,
        false,
        [Some(&head), Some(&readme)],
    ))
    .unwrap();
    let (table, end) = (h.find("<table>").unwrap(), h.find("</table>").unwrap());
    assert!(h.find("<p>Hi</p>").unwrap() < table, "{h}");
    assert!(
        h.find("<pre>&lt;b&gt; &amp; co</pre>").unwrap() > end,
        "{h}"
    );
}

#[test]
fn html_escapes_names_and_links() {
    let h = String::from_utf8(html(
        b"/x/",
        &[
            it("<b>&.txt", false, 2048, 0),
            it("javascript:alert(document.domain)", false, 1, 0),
            it("a&amp;b.txt", false, 1, 0),
            it("javascript&colon;x", false, 1, 0),
        ],
        SortKey::Name,
        false,
        [None, None],
    ))
    .unwrap();
    assert!(h.contains(">&lt;b&gt;&amp;.txt<"), "{h}");
    assert!(h.contains("href=\"./%3Cb%3E%26.txt\""), "{h}");
    assert!(
        h.contains("href=\"./javascript%3Aalert(document.domain)\""),
        "{h}"
    );
    assert!(h.contains("href=\"./a%26amp;b.txt\""), "{h}");
    assert!(h.contains("href=\"./javascript%26colon;x\""), "{h}");
    assert!(!h.contains("href=\"javascript"), "{h}");
    assert!(h.contains("2.0 KiB"));
}

#[test]
fn odd_names_are_shown_escaped() {
    let i = Item {
        name: b"new\nline\x1b[31m\xff.txt".to_vec(),
        dir: false,
        size: 0,
        mtime: 0,
    };
    assert_eq!(i.display(), "new\\x0aline\\x1b[31m\\xff.txt");
    assert_eq!(i.href(), "./new%0Aline%1B%5B31m%FF.txt");
    let j = String::from_utf8(json(&[i])).unwrap();
    assert!(j.contains("new\\\\x0aline"), "{j}");
}

/// The rows are written in one pass per field; each must be what escaping the
/// link and the shown name separately gives (how rows were built before).
#[test]
fn a_row_is_its_escaped_link_and_name() {
    let odd: [&[u8]; 8] = [
        b"plain_1.0-1_amd64.deb",
        b"it's \"quoted\" <&>.txt",
        b"new\nline\x1b[31m\xff.txt",
        b"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x93\xa6",
        b"%41%2F;=@!$()*+,~",
        b"\xc2\x85c1-control",
        b"&#39;",
        b"dir'x",
    ];
    for (n, name) in odd.iter().enumerate() {
        let item = Item {
            name: name.to_vec(),
            dir: n % 2 == 1,
            size: 123_456_789,
            mtime: 1_700_000_000,
        };
        let page =
            String::from_utf8(html(b"/", &[item], SortKey::Name, false, [None, None])).unwrap();
        let item = Item {
            name: name.to_vec(),
            dir: n % 2 == 1,
            size: 123_456_789,
            mtime: 1_700_000_000,
        };
        let (mut href, mut shown) = (String::new(), String::new());
        html_escape(&item.href(), &mut href);
        html_escape(&item.display(), &mut shown);
        let slash = if item.dir { "/" } else { "" };
        let size = if item.dir {
            "-".to_string()
        } else {
            human(item.size)
        };
        let row = format!(
            "<tr><td><a href=\"{href}\">{shown}{slash}</a></td><td class=\"s\" title=\"123456789\">{size}</td><td>{}</td></tr>\n",
            date::format(item.mtime)
        );
        assert!(page.contains(&row), "{name:?}: {row} not in {page}");
    }
}

#[test]
fn accept_negotiation_uses_q_values() {
    assert!(prefers_json("application/json"));
    assert!(prefers_json("application/json, */*;q=0.1"));
    assert!(prefers_json("text/html;q=0.5, application/json"));
    assert!(!prefers_json("application/json;q=0"));
    assert!(!prefers_json("application/json;q=0, */*"));
    assert!(!prefers_json(
        "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    ));
    assert!(!prefers_json("text/html, application/json;q=0.9"));
    assert!(!prefers_json("*/*"));
    assert!(!prefers_json("application/jsonx"));
}

#[test]
fn csp_hash_matches_the_style() {
    use base64::Engine;
    use sha2::Digest;
    let digest = sha2::Sha256::digest(STYLE.as_bytes());
    let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
    assert!(
        CSP.contains(&format!("'sha256-{b64}'")),
        "update CSP: style hash is sha256-{b64}"
    );
}

/// On a disk thread a page is gzipped when asked, and also when the worker will
/// keep it and it is big enough to stall the worker's compression; not a small
/// page, not with compression off, and not a page too big to be kept.
#[test]
fn a_disk_thread_gzips_the_pages_the_worker_would_compress() {
    let items = |n: usize| -> Vec<Item> {
        (0..n)
            .map(|i| it(&format!("package-{i:06}_1.0_amd64.deb"), false, i as u64, 0))
            .collect()
    };
    let form = |gzip: bool, compress: bool| Form {
        key: SortKey::Name,
        desc: false,
        json: false,
        gzip,
        compress,
        title: b"/".to_vec(),
        notes: [None, None],
    };
    let kept_size = items(1_000);
    let b = form(false, true).build_off_worker(kept_size);
    assert!(b.body.len() > 64 << 10 && b.body.len() < PageCache::MAX_BYTES);
    assert!(b.gz.is_some(), "a kept page of {} bytes", b.body.len());
    assert!(
        form(false, false)
            .build_off_worker(items(1_000))
            .gz
            .is_none(),
        "compression off"
    );
    assert!(
        form(false, true).build_off_worker(items(3)).gz.is_none(),
        "small: the worker's"
    );
    assert!(
        form(true, true).build_off_worker(items(3)).gz.is_some(),
        "asked"
    );
    let huge = form(false, true).build_off_worker(items(60_000));
    assert!(huge.body.len() > PageCache::MAX_BYTES && huge.gz.is_none());
}
