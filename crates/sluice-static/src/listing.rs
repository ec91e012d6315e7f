//! Directory listings: HTML (sortable by name, size or date through query links, so
//! it works without JavaScript) and JSON (`Accept: application/json` or
//! `?format=json`).
//!
//! A listing is built at most once per `files.cache_validity` per URL and form
//! ([`PageCache`]): building costs one `readdir` plus one `lstat` per entry and the
//! rendering ([`Form::build`]): ~2 µs an entry for the read, ~0.4 µs for the page.
//! Where there are disk threads one of them reads and builds it
//! (`crate::cold::Gate::list`), so the worker only sends it. Hidden entries are left out unless hidden files
//! are served; symlinks are listed only if they open under the root's policy.
//!
//! A file name is attacker-controlled text on a mirror (anyone who can upload can
//! name a file `javascript:alert(1)`), so every link is built the same way: the name
//! is percent-encoded as one path segment (everything but unreserved characters and
//! a few sub-delimiters, so `:` `&` `%` `?` `#` are always encoded), prefixed with
//! `./` so its first segment can never read as a scheme (RFC 3986 §4.2), and the
//! result is HTML-escaped for the attribute. Names with control characters or bytes
//! that are not UTF-8 are shown with those bytes as `\xNN`, never raw and never
//! hidden. The page carries a Content-Security-Policy that allows no script at all
//! and only its own stylesheet (by hash).

use crate::open::Root;
use sluice_http::date;
use sluice_http::response::html_escape;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

mod pages;
pub use pages::{Built, GzipCache, PageCache};

/// The page's only style; [`CSP`] allows exactly this text by its SHA-256 hash (a
/// unit test recomputes it, so editing one without the other fails).
const STYLE: &str = "body{font:15px/1.4 system-ui,sans-serif;margin:2em}table{border-collapse:collapse}\
td,th{padding:.2em 1.2em .2em 0;text-align:left}td.s{text-align:right;font-variant-numeric:tabular-nums}\
tr:hover{background:#f3f3f3}a{text-decoration:none}";

/// No scripts, no plugins, no frames, no foreign anything: only links, the page's
/// own stylesheet (`STYLE`), and images from the site itself (an operator's
/// header note may show its logo).
pub const CSP: &str =
    "default-src 'none'; style-src 'sha256-1BT+G5vBsg15rs1DhTnXAi4lcrTLwI/RP7FfiiIyxeo='; \
img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'";

/// An operator's note shown with a listing (`[files] listing_header` above the
/// table, `listing_readme` below it): the file's bytes, and whether they are HTML
/// (inserted as they are) or text (escaped, in `<pre>`).
#[derive(Clone, Debug)]
pub struct Note {
    pub bytes: Arc<[u8]>,
    pub html: bool,
}

impl Note {
    /// The note for a file named `name` holding `bytes`: HTML by its name.
    pub fn new(name: &str, bytes: Arc<[u8]>) -> Note {
        // Compared as bytes, in place: no lowercased copy of the name per listing.
        let n = name.as_bytes();
        let ends =
            |sfx: &[u8]| n.len() >= sfx.len() && n[n.len() - sfx.len()..].eq_ignore_ascii_case(sfx);
        let html = ends(b".html") || ends(b".htm");
        Note { bytes, html }
    }

    fn render(&self, out: &mut String) {
        let text = String::from_utf8_lossy(&self.bytes);
        if self.html {
            out.push_str(&text);
            out.push('\n');
        } else {
            out.push_str("<pre>");
            html_escape(&text, out);
            out.push_str("</pre>\n");
        }
    }
}

#[derive(Debug)]
pub struct Item {
    /// The name as the file system has it (any bytes but `/` and NUL).
    pub name: Vec<u8>,
    pub dir: bool,
    pub size: u64,
    pub mtime: u64,
}

impl Item {
    /// The name for people: UTF-8 as is, controls and invalid bytes as `\xNN`.
    pub fn display(&self) -> String {
        visible(&self.name)
    }

    /// A relative link to this entry, safe in any position and in an attribute.
    pub fn href(&self) -> String {
        let mut h = String::with_capacity(self.name.len() + 8);
        h.push_str("./");
        encode_segment(&self.name, &mut h);
        if self.dir {
            h.push('/');
        }
        h
    }
}

/// Percent-encode one path segment: keeps unreserved characters and `!$'()*+,;=@`.
pub fn encode_segment(name: &[u8], out: &mut String) {
    encode_segment_as(name, false, out)
}

/// [`encode_segment`], and HTML-escaped for an attribute too if `html`, in one
/// pass: of what `encode_segment` keeps, only `'` needs an entity.
fn encode_segment_as(name: &[u8], html: bool, out: &mut String) {
    for &b in name {
        if html && b == b'\'' {
            out.push_str("&#39;");
        } else if b.is_ascii_alphanumeric() || b"-._~!$'()*+,;=@".contains(&b) {
            out.push(b as char);
        } else {
            sluice_http::response::push_percent(out, b);
        }
    }
}

/// Bytes as text a person can read: valid UTF-8 stays, controls (C0, DEL, C1) and
/// invalid bytes become `\xNN`.
pub fn visible(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    visible_into(bytes, false, &mut out);
    out
}

/// [`visible`], appended to `out`, and HTML-escaped too if `html` (as
/// `html_escape` would escape it).
fn visible_into(bytes: &[u8], html: bool, out: &mut String) {
    use std::fmt::Write;
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                c if c.is_control() => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        let _ = write!(out, "\\x{b:02x}");
                    }
                }
                '&' if html => out.push_str("&amp;"),
                '<' if html => out.push_str("&lt;"),
                '>' if html => out.push_str("&gt;"),
                '"' if html => out.push_str("&quot;"),
                '\'' if html => out.push_str("&#39;"),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SortKey {
    Name,
    Size,
    Date,
}

/// Which page a listing request asks for: its order, HTML or JSON (an HTML page
/// with its title and the operator's notes), and whether gzipped. Owned and
/// `Send`, so a disk thread can build the page ([`crate::cold::Gate::list`]).
#[derive(Clone, Debug)]
pub struct Form {
    pub key: SortKey,
    pub desc: bool,
    pub json: bool,
    /// The request accepts gzip (and listings are compressed).
    pub gzip: bool,
    /// Listings are compressed (`compress_listings`): a disk thread also gzips a
    /// page the worker will keep ([`Form::build_off_worker`]).
    pub compress: bool,
    /// The directory's path as the page names it (the file system's bytes).
    pub title: Vec<u8>,
    pub notes: [Option<Note>; 2],
}

impl Form {
    /// The page cache's key for this form (gzip is not part of it: both codings
    /// are one page).
    pub fn id(&self) -> u8 {
        Self::id_of(self.key, self.desc, self.json)
    }

    /// [`Form::id`] of a form with these fields.
    pub fn id_of(key: SortKey, desc: bool, json: bool) -> u8 {
        key as u8 * 4 + u8::from(desc) * 2 + u8::from(json)
    }

    /// Sort `items` and render them; gzip the page too if `gzip`. Costs ~0.4 µs
    /// an entry for the HTML (sorting and rendering) and the compression's
    /// ~10 ns a byte: 100,000 entries make an 18 MB page in ~80 ms.
    pub fn build(&self, mut items: Vec<Item>, gzip: bool) -> Built {
        sort(&mut items, self.key, self.desc);
        let body = if self.json {
            json(&items)
        } else {
            html(
                &self.title,
                &items,
                self.key,
                self.desc,
                [self.notes[0].as_ref(), self.notes[1].as_ref()],
            )
        };
        let gz = gzip.then(|| pages::gzip(&body));
        Built { body, gz }
    }

    /// [`Form::build`] on a disk thread: gzipped if the request asked, and also a
    /// page of 64 KiB or more that the worker will keep, when listings are
    /// compressed, so that a later gzip request does not compress it on the worker
    /// (an 8 MiB page is ~80 ms of compression). A page larger than
    /// [`PageCache::MAX_BYTES`] is gzipped only for requests that ask (the worker
    /// keeps it apart, if at all, and a gzip request builds it again with gzip).
    pub fn build_off_worker(&self, items: Vec<Item>) -> Built {
        let mut b = self.build(items, self.gzip);
        if b.gz.is_none()
            && self.compress
            && (64 << 10..=PageCache::MAX_BYTES).contains(&b.body.len())
        {
            b.gz = Some(pages::gzip(&b.body));
        }
        b
    }
}

/// Read the entries of `rel`: the directory opened as the opener opens anything
/// (the root's symlink policy, `openat2` beneath the root), then its entries read
/// and looked at through that descriptor, so no path is resolved again (a
/// directory swapped for a link after the lookup cannot list another tree). A
/// directory whose entries this server may not look at (readable, but not
/// searchable) is an error (403), not an empty page.
pub fn read(root: &Root, rel: &str, show_hidden: bool) -> std::io::Result<Vec<Item>> {
    use rustix::fs::{statat, AtFlags, Dir, FileType};
    let dir = root.open(rel)?;
    let mut items = Vec::new();
    for ent in Dir::read_from(&dir)? {
        let Ok(ent) = ent else { continue };
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." || (!show_hidden && name.starts_with(b".")) {
            continue;
        }
        let st = match statat(&dir, ent.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::ACCESS) => {
                return Err(std::io::Error::from_raw_os_error(libc::EACCES))
            }
            Err(_) => continue, // gone since it was read
        };
        let kind = FileType::from_raw_mode(st.st_mode);
        let (mut is_dir, mut size, mut mtime) = (
            kind == FileType::Directory,
            st.st_size.max(0) as u64,
            st.st_mtime.max(0) as u64,
        );
        if kind == FileType::Symlink {
            // Followed only as the opener would (the root's symlink policy), by
            // the text form of its path (`path::text_of`).
            let mut child = String::with_capacity(rel.len() + name.len() + 1);
            if !rel.is_empty() {
                child.push_str(rel);
                child.push('/');
            }
            crate::path::text_of(name, &mut child);
            match root.open(&child).and_then(|f| f.metadata()) {
                Ok(m) => (is_dir, size, mtime) = (m.is_dir(), m.len(), m.mtime().max(0) as u64),
                Err(_) => continue,
            }
        }
        items.push(Item {
            name: name.to_vec(),
            dir: is_dir,
            size,
            mtime,
        });
    }
    Ok(items)
}

/// Sort by `key`; directories first, like most mirrors' listings.
pub fn sort(items: &mut [Item], key: SortKey, desc: bool) {
    items.sort_by(|a, b| {
        let o = b.dir.cmp(&a.dir).then_with(|| match key {
            SortKey::Name => a.name.cmp(&b.name),
            SortKey::Size => a.size.cmp(&b.size).then_with(|| a.name.cmp(&b.name)),
            SortKey::Date => a.mtime.cmp(&b.mtime).then_with(|| a.name.cmp(&b.name)),
        });
        if desc && !a.dir.eq(&b.dir) {
            o
        } else if desc {
            o.reverse()
        } else {
            o
        }
    });
}

pub fn json(items: &[Item]) -> Vec<u8> {
    let v: Vec<serde_json::Value> = items
        .iter()
        .map(|i| {
            serde_json::json!({
                "name": i.display(),
                "href": i.href(),
                "type": if i.dir { "directory" } else { "file" },
                "size": i.size,
                "mtime": i.mtime,
                "modified": date::format(i.mtime),
            })
        })
        .collect();
    let mut out = serde_json::to_vec_pretty(&v).unwrap_or_default();
    out.push(b'\n');
    out
}

/// The HTML page. `url_path` is the directory's normalized path (shown as the
/// title); `notes` are the operator's header and readme, if the directory has them.
pub fn html(
    url_path: &[u8],
    items: &[Item],
    key: SortKey,
    desc: bool,
    notes: [Option<&Note>; 2],
) -> Vec<u8> {
    use std::fmt::Write;
    let mut s = String::with_capacity(512 + items.len() * 160);
    let mut title = String::new();
    html_escape(&visible(url_path), &mut title);
    s.push_str("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\n<title>Index of ");
    s.push_str(&title);
    s.push_str("</title>\n<style>");
    s.push_str(STYLE);
    s.push_str("</style></head><body>\n<h1>Index of ");
    s.push_str(&title);
    s.push_str("</h1>\n");
    if let Some(n) = notes[0] {
        n.render(&mut s);
    }
    s.push_str("<table>\n<tr>");
    for (label, k, q) in [
        ("Name", SortKey::Name, "name"),
        ("Size", SortKey::Size, "size"),
        ("Modified", SortKey::Date, "date"),
    ] {
        let next_desc = key == k && !desc;
        let arrow = if key == k {
            if desc {
                " ↓"
            } else {
                " ↑"
            }
        } else {
            ""
        };
        s.push_str(&format!(
            "<th><a href=\"?sort={q}&amp;order={}\">{label}{arrow}</a></th>",
            if next_desc { "desc" } else { "asc" }
        ));
    }
    s.push_str("</tr>\n");
    if url_path != b"/" {
        s.push_str("<tr><td><a href=\"../\">../</a></td><td class=\"s\">-</td><td></td></tr>\n");
    }
    // One row per entry, written straight into the page: no string per field.
    // (The rows are the page's cost: ~0.4 µs an entry, docs/BENCHMARKS.md.)
    for i in items {
        s.push_str("<tr><td><a href=\"./");
        encode_segment_as(&i.name, true, &mut s);
        let slash = if i.dir { "/" } else { "" };
        s.push_str(slash);
        s.push_str("\">");
        visible_into(&i.name, true, &mut s);
        s.push_str(slash);
        s.push_str("</a></td><td class=\"s\" title=\"");
        let _ = write!(s, "{}", i.size);
        s.push_str("\">");
        if i.dir {
            s.push('-');
        } else {
            human_into(i.size, &mut s);
        }
        s.push_str("</td><td>");
        s.push_str(&date::format(i.mtime));
        s.push_str("</td></tr>\n");
    }
    s.push_str("</table>\n");
    if let Some(n) = notes[1] {
        n.render(&mut s);
    }
    s.push_str("</body></html>\n");
    s.into_bytes()
}

/// Does this `Accept` value ask for JSON rather than HTML? JSON wins only when
/// `application/json` has a non-zero q-value higher than HTML's (an explicit
/// `text/html`, else `text/*`; `*/*` alone never turns a browser's request into JSON).
pub fn prefers_json(accept: &str) -> bool {
    let (mut json, mut html, mut text_any) = (None::<f32>, None::<f32>, None::<f32>);
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let ty = parts.next().unwrap_or("").trim();
        let mut q = 1.0f32;
        for p in parts {
            let p = p.trim();
            if let Some(v) = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")) {
                q = v.trim().parse::<f32>().unwrap_or(0.0).clamp(0.0, 1.0);
            }
        }
        let slot = if ty.eq_ignore_ascii_case("application/json") {
            &mut json
        } else if ty.eq_ignore_ascii_case("text/html") {
            &mut html
        } else if ty.eq_ignore_ascii_case("text/*") {
            &mut text_any
        } else {
            continue;
        };
        *slot = Some(slot.map_or(q, |old| old.max(q)));
    }
    let json = json.unwrap_or(0.0);
    let html = html.or(text_any).unwrap_or(0.0);
    json > 0.0 && json > html
}

#[cfg(test)]
fn human(n: u64) -> String {
    let mut s = String::new();
    human_into(n, &mut s);
    s
}

/// `n` bytes for people (`512 B`, `1.5 KiB`), appended to `out`.
fn human_into(n: u64, out: &mut String) {
    use std::fmt::Write;
    const U: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < U.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    let _ = if u == 0 {
        write!(out, "{n} B")
    } else {
        write!(out, "{v:.1} {}", U[u])
    };
}

#[cfg(test)]
mod tests;
