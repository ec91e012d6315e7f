//! A file's own answer: its conditionals (304, 412), its ranges (206, one range or
//! `multipart/byteranges`; 416), the whole file (200, from the lines written when
//! its cache entry was made), and the operator's `Cache-Control` for its path
//! ([`crate::caching`]).
//!
//! Must not: look anything up; the file's entry (or its precompressed sibling's)
//! is found before (`StaticHandler::file_or_sibling`).
//! Costs: for the whole file from memory, one `add_lines` of the entry's lines and
//! a shared body; a range or a conditional a few header writes.

use crate::cache::FileInfo;
use crate::StaticHandler;
use sluice_http::conditional::{self, Conditions, Precondition};
use sluice_http::encoding::Coding;
use sluice_http::range::{self, RangeResult};
use sluice_http::response::{Chunk, Response};
use sluice_http::RequestHead;
use std::rc::Rc;

impl StaticHandler {
    /// The operator's `Cache-Control` and other headers for the file at `rel`
    /// ([`crate::caching`]) on `r`, its answer, when that is the file's own (200,
    /// 206, 304), and its bandwidth limit by path (not on a 304: no body).
    pub(crate) fn add_path_headers(&self, rel: &str, r: &mut Response) {
        if self.caching.is_empty() || !matches!(r.status, 200 | 206 | 304) {
            return;
        }
        // The operator's patterns name files as they are, not by their text form
        // (`path::text_of`: a `%` in a name is `%25` there). Only a path with a
        // `%` is turned back; any other is its own name.
        let name = match crate::path::fs_bytes(rel) {
            std::borrow::Cow::Borrowed(_) => std::borrow::Cow::Borrowed(rel),
            std::borrow::Cow::Owned(b) => {
                std::borrow::Cow::Owned(String::from_utf8_lossy(&b).into_owned())
            }
        };
        let rel: &str = &name;
        if let Some(v) = self.caching.cache_control(rel) {
            r.headers.add("Cache-Control", v);
        }
        if r.status != 304 {
            r.limit = self.caching.rate(rel);
        }
        for line in self.caching.headers(rel) {
            r.headers.add_lines(line);
        }
    }

    /// Answer for one regular file; `encoded` = (its coding, the original's type)
    /// when it is a precompressed sibling.
    pub(crate) fn file(
        &mut self,
        head: &RequestHead,
        info: &Rc<FileInfo>,
        encoded: Option<(Coding, &'static str)>,
    ) -> Response {
        let mime = encoded.map_or(info.mime, |(_, m)| m);
        match conditional::evaluate(&Conditions::of(head), info.etag(), info.mtime) {
            Precondition::Proceed => {}
            Precondition::NotModified => {
                let mut r = Response::new(304);
                r.headers.add("ETag", info.etag());
                r.headers.add("Last-Modified", info.last_modified());
                // Read nothing but the request's validators and this entry's.
                r.reuse_until = Some(info.trusted_until());
                return r;
            }
            Precondition::Failed => {
                let mut r = Response::text(412, None);
                r.headers.add("ETag", info.etag());
                r.headers.add("Last-Modified", info.last_modified());
                return r;
            }
        }
        let ranges = match head.range {
            Some(h)
                if head
                    .if_range
                    .is_none_or(|v| conditional::if_range_matches(v, info.etag(), info.mtime)) =>
            {
                range::evaluate(h, info.len, self.max_ranges)
            }
            _ => RangeResult::Full,
        };
        let mut r = Response::new(200);
        if let (RangeResult::Full, None, Some(lines)) = (&ranges, encoded, info.whole_file_lines())
        {
            // The common answer, its lines written when the file was loaded; from
            // memory (or for a HEAD, which sends none of the body), it reads
            // nothing but the request and this entry.
            r.headers.add_lines(lines);
            push_body(&mut r, info, 0, info.len);
            if info.data.is_some() || head.method() == sluice_http::Method::Head {
                r.reuse_until = Some(info.trusted_until());
            }
            return r;
        }
        r.headers.add("Last-Modified", info.last_modified());
        r.headers.add("ETag", info.etag());
        r.headers.add("Accept-Ranges", "bytes");
        if let Some((coding, _)) = encoded {
            r.headers.add("Content-Encoding", coding.token());
        }
        match ranges {
            RangeResult::Full => {
                r.headers.add("Content-Type", mime);
                r.headers.add_u64("Content-Length", info.len);
                push_body(&mut r, info, 0, info.len);
                // A precompressed sibling (or a file whose lines did not fit):
                // as above, it reads nothing but the request and this entry (and
                // the original's type, fixed by its path).
                if info.data.is_some() || head.method() == sluice_http::Method::Head {
                    r.reuse_until = Some(info.trusted_until());
                }
            }
            RangeResult::Unsatisfiable => {
                r.status = 416;
                r.headers
                    .add("Content-Range", &format!("bytes */{}", info.len));
                r.headers.add_u64("Content-Length", 0);
            }
            RangeResult::Partial(rs) if rs.len() == 1 => {
                let br = rs[0];
                r.status = 206;
                r.headers.add("Content-Type", mime);
                r.headers.add(
                    "Content-Range",
                    &format!("bytes {}-{}/{}", br.start, br.end, info.len),
                );
                r.headers.add_u64("Content-Length", br.len());
                push_body(&mut r, info, br.start, br.len());
            }
            RangeResult::Partial(rs) => {
                r.status = 206;
                self.boundary_seq = self
                    .boundary_seq
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let boundary = format!("sluice-{:016x}", self.boundary_seq);
                r.headers.add(
                    "Content-Type",
                    &format!("multipart/byteranges; boundary={boundary}"),
                );
                let mut total = 0u64;
                let mut parts = Vec::with_capacity(rs.len() * 2 + 1);
                for br in &rs {
                    let sep = format!(
                        "\r\n--{boundary}\r\nContent-Type: {}\r\nContent-Range: bytes {}-{}/{}\r\n\r\n",
                        mime, br.start, br.end, info.len
                    );
                    total += sep.len() as u64 + br.len();
                    parts.push((sep, *br));
                }
                let end = format!("\r\n--{boundary}--\r\n");
                total += end.len() as u64;
                r.headers.add_u64("Content-Length", total);
                for (sep, br) in parts {
                    r.body.push(Chunk::Owned(sep.into_bytes()));
                    push_body(&mut r, info, br.start, br.len());
                }
                r.body.push(Chunk::Owned(end.into_bytes()));
            }
        }
        r
    }
}

/// `len` bytes of the file from `start` as `r`'s next body chunk: shared from
/// memory when the entry holds them, else a range of the open file.
pub(crate) fn push_body(r: &mut Response, info: &FileInfo, start: u64, len: u64) {
    if len == 0 {
        return;
    }
    if let Some(d) = &info.data {
        r.body.push(Chunk::Shared(
            d.clone(),
            start as usize,
            (start + len) as usize,
        ));
    } else if let Some(f) = &info.file {
        r.body.push(Chunk::File(f.clone(), start, len));
    }
}
