//! Directory listings: HTML (sortable by name, size or date through query links, so
//! it works without JavaScript) and JSON (`Accept: application/json` or
//! `?format=json`).
//!
//! A listing is built at most once per `files.cache_validity` per URL and form
//! ([`PageCache`]): building costs one `readdir` plus one `lstat` per entry and the
//! rendering, ~4 µs an entry on the worker (20 ms for 5,000 entries). Where the
//! reading could wait for the disk a disk thread makes it (`crate::cold::Gate::list`)
//! and the worker sorts and renders. Hidden entries are left out unless hidden files
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
use std::rc::Rc;

mod pages;
pub use pages::{GzipCache, PageCache};

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
    pub bytes: Rc<[u8]>,
    pub html: bool,
}

impl Note {
    /// The note for a file named `name` holding `bytes`: HTML by its name.
    pub fn new(name: &str, bytes: Rc<[u8]>) -> Note {
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
    for &b in name {
        if b.is_ascii_alphanumeric() || b"-._~!$'()*+,;=@".contains(&b) {
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
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\x{b:02x}"));
                }
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Name,
    Size,
    Date,
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
    for i in items {
        let mut href = String::new();
        html_escape(&i.href(), &mut href);
        let mut name = String::new();
        html_escape(&i.display(), &mut name);
        let slash = if i.dir { "/" } else { "" };
        let size = if i.dir {
            "-".to_string()
        } else {
            human(i.size)
        };
        s.push_str(&format!(
            "<tr><td><a href=\"{href}\">{name}{slash}</a></td><td class=\"s\" title=\"{}\">{size}</td><td>{}</td></tr>\n",
            i.size,
            date::format(i.mtime)
        ));
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

fn human(n: u64) -> String {
    const U: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < U.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[u])
    }
}

#[cfg(test)]
mod tests {
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
        let head = Note::new("HEADER.HTML", Rc::from(&b"<p>Hi</p>"[..]));
        let readme = Note::new("README", Rc::from(&b"<b> & co"[..]));
        assert!(head.html && !readme.html);
        assert!(
            Note::new("a.Htm", Rc::from(&b""[..])).html && !Note::new("é", Rc::from(&b""[..])).html
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
}
