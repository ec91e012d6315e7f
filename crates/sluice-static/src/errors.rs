//! The operator's error pages (`[files] error_pages`): the body of a 403, 404 or
//! 410 taken from a file under the site's root, as Apache's `ErrorDocument` and
//! nginx's `error_page` do, the answer keeping its own status. Without a page for
//! the status, or when the page is not a file, the answer is sluice's short text.
//!
//! Owns: the answer made of a page (the handler keeps the pages by status,
//! normalized when it is made: at start and on a reload). Must not: follow the request's conditionals
//! or ranges (an error is answered whole: RFC 9110 gives 304 and 206 to
//! successful answers only), or send the page's validators, which describe the
//! page and not the missing resource.
//! Costs: nothing without pages; with one, a cache lookup of the page per error
//! answer (a hit: a hash lookup), and the page's bytes shared from memory when
//! it is a small file. An error answer is kept (`Response::reuse_until`) as
//! long as the entries it read are trusted: the missing path's and the page's.

use crate::cache::Entry;
use crate::{cold_answer, respond, StaticHandler, UNBOUNDED};
use sluice_http::response::Response;
use sluice_http::RequestHead;
use std::time::Instant;

impl StaticHandler {
    /// The answer with `status` (403, 404, 410): the operator's page for it, else
    /// sluice's text (with `msg`). It may be kept as long as the page's entry is
    /// trusted (and for ever, as far as this part goes, without a page); the
    /// caller bounds that by what else the answer read.
    pub fn error(
        &mut self,
        status: u16,
        msg: Option<&str>,
        head: &RequestHead,
        now: Instant,
    ) -> Response {
        let text = |now: Instant| {
            let mut r = Response::text(status, msg);
            r.reuse_until = Some(now + UNBOUNDED);
            r
        };
        let Some((_, page)) = self.error_pages.iter().find(|(s, _)| *s == status) else {
            return text(now);
        };
        // Shared, not copied: a 404 flood asks for it on every request.
        let page = std::rc::Rc::clone(page);
        let (entry, until) = self.lookup(&page, now);
        match entry {
            Entry::File(info) => {
                let mut r = Response::new(status);
                r.headers.add("Content-Type", info.mime);
                r.headers.add_u64("Content-Length", info.len);
                respond::push_body(&mut r, &info, 0, info.len);
                // From memory, or a HEAD (no body): the same answer while the
                // page's entry is trusted; a page read from its file is not kept.
                if info.data.is_some() || head.method() == sluice_http::Method::Head {
                    r.reuse_until = Some(until.min(info.trusted_until()));
                }
                r
            }
            Entry::Cold => cold_answer(),
            // The page cannot be opened now: the plain text, not kept.
            Entry::Unavailable => Response::text(status, msg),
            Entry::Dir | Entry::NotFound | Entry::Forbidden => {
                let mut r = text(now);
                r.reuse_until = Some(until);
                r
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{FilesSection, Root, StaticHandler};
    use sluice_http::response::{Chunk, Response};
    use sluice_http::{parse_head, Limits, Parsed};
    use std::time::{Duration, Instant};

    fn handler(pages: &[(u16, &str)]) -> (tempfile::TempDir, StaticHandler) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".errors")).unwrap();
        std::fs::write(dir.path().join(".errors/404.html"), b"<h1>not here</h1>\n").unwrap();
        std::fs::write(dir.path().join("file.txt"), b"x").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let root = Root::new(dir.path(), sluice_config::SymlinkPolicy::InsideRoot).unwrap();
        let cfg = FilesSection {
            listing: false,
            error_pages: pages.iter().map(|(s, p)| (*s, p.to_string())).collect(),
            ..FilesSection::default()
        };
        (dir, StaticHandler::new(root, cfg, 4))
    }

    fn ask(h: &mut StaticHandler, raw: &str, now: Instant) -> Response {
        let Ok(Parsed::Complete(head)) = parse_head(raw.as_bytes(), &Limits::default()) else {
            panic!("not a request: {raw}");
        };
        h.serve(&head, head.path, head.query, now)
    }

    fn body(r: &Response) -> Vec<u8> {
        let mut out = Vec::new();
        for c in &r.body {
            match c {
                Chunk::Shared(d, a, b) => out.extend_from_slice(&d[*a..*b]),
                Chunk::Owned(v) => out.extend_from_slice(v),
                other => panic!("unexpected chunk {other:?}"),
            }
        }
        out
    }

    fn head_text(r: &Response) -> String {
        String::from_utf8_lossy(r.headers.as_bytes()).into_owned()
    }

    #[test]
    fn a_404_takes_the_operators_page_and_keeps_its_status() {
        let (_d, mut h) = handler(&[(404, "/.errors/404.html"), (403, "/.errors/403.html")]);
        let now = Instant::now();
        // Conditionals and ranges do not apply to an error.
        let r = ask(
            &mut h,
            "GET /nope HTTP/1.1\r\nHost: a\r\nRange: bytes=0-3\r\nIf-None-Match: *\r\n\r\n",
            now,
        );
        assert_eq!(r.status, 404);
        assert_eq!(body(&r), b"<h1>not here</h1>\n");
        let h404 = head_text(&r);
        assert!(h404.contains("Content-Type: text/html"), "{h404}");
        assert!(h404.contains("Content-Length: 18"), "{h404}");
        assert!(
            !h404.contains("ETag") && !h404.contains("Last-Modified"),
            "{h404}"
        );
        // Kept while both entries are trusted (the default validity: 1 s).
        let until = r.reuse_until.expect("kept");
        assert!(until > now && until <= now + Duration::from_secs(1));
        // "/file.txt/" and a hidden name are 404s too, with the page.
        for p in ["/file.txt/", "/.errors/404.html"] {
            let r = ask(&mut h, &format!("GET {p} HTTP/1.1\r\nHost: a\r\n\r\n"), now);
            assert_eq!(
                (r.status, body(&r)),
                (404, b"<h1>not here</h1>\n".to_vec()),
                "{p}"
            );
        }
        // A page that is missing leaves the text; the file is still served.
        let r = ask(&mut h, "GET /d/ HTTP/1.1\r\nHost: a\r\n\r\n", now);
        assert_eq!(r.status, 403);
        assert_eq!(body(&r), b"403 Forbidden: directory listing is off\n");
        let r = ask(&mut h, "GET /file.txt HTTP/1.1\r\nHost: a\r\n\r\n", now);
        assert_eq!((r.status, body(&r)), (200, b"x".to_vec()));
    }

    #[test]
    fn without_pages_the_answers_are_as_before() {
        let (_d, mut h) = handler(&[]);
        let now = Instant::now();
        let r = ask(&mut h, "GET /nope HTTP/1.1\r\nHost: a\r\n\r\n", now);
        assert_eq!((r.status, body(&r)), (404, b"404 Not Found\n".to_vec()));
        assert!(r.reuse_until.is_some());
        let r = ask(
            &mut h,
            "GET /.errors/404.html HTTP/1.1\r\nHost: a\r\n\r\n",
            now,
        );
        assert_eq!((r.status, r.reuse_until), (404, None));
    }
}
