//! Directory listings: HTML (sortable by name, size or date through query links, so
//! it works without JavaScript) and JSON (`Accept: application/json` or
//! `?format=json`).
//!
//! Listings are built per request and not cached: mirrors serve files far more often
//! than they are browsed. Cost: one `readdir` plus one `lstat` per entry. Hidden
//! entries are left out unless hidden files are served; symlinks are listed only if
//! they open under the root's policy.

use crate::open::Root;
use crate::path::percent_encode_path;
use sluice_http::date;
use sluice_http::response::html_escape;
use std::os::unix::fs::MetadataExt;

pub struct Item {
    pub name: String,
    pub dir: bool,
    pub size: u64,
    pub mtime: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Name,
    Size,
    Date,
}

/// Read the entries of `rel` (the directory must already have opened under `root`).
pub fn read(root: &Root, rel: &str, show_hidden: bool) -> std::io::Result<Vec<Item>> {
    let dir = root.path().join(rel);
    let mut items = Vec::new();
    for ent in std::fs::read_dir(&dir)? {
        let Ok(ent) = ent else { continue };
        let Ok(name) = ent.file_name().into_string() else {
            continue;
        };
        if !show_hidden && name.starts_with('.') {
            continue;
        }
        let Ok(mut meta) = ent.metadata() else {
            continue;
        };
        if meta.file_type().is_symlink() {
            let child = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            match root.open(&child).and_then(|f| f.metadata()) {
                Ok(m) => meta = m,
                Err(_) => continue,
            }
        }
        items.push(Item {
            name,
            dir: meta.is_dir(),
            size: meta.len(),
            mtime: meta.mtime().max(0) as u64,
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
                "name": i.name,
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

pub fn html(url_path: &str, items: &[Item], key: SortKey, desc: bool) -> Vec<u8> {
    let mut s = String::with_capacity(512 + items.len() * 160);
    let mut title = String::new();
    html_escape(url_path, &mut title);
    s.push_str("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\n<title>Index of ");
    s.push_str(&title);
    s.push_str("</title>\n<style>body{font:15px/1.4 system-ui,sans-serif;margin:2em}table{border-collapse:collapse}\
td,th{padding:.2em 1.2em .2em 0;text-align:left}td.s{text-align:right;font-variant-numeric:tabular-nums}\
tr:hover{background:#f3f3f3}a{text-decoration:none}</style></head><body>\n<h1>Index of ");
    s.push_str(&title);
    s.push_str("</h1>\n<table>\n<tr>");
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
    if url_path != "/" {
        s.push_str("<tr><td><a href=\"../\">../</a></td><td class=\"s\">-</td><td></td></tr>\n");
    }
    for i in items {
        let mut href = String::new();
        percent_encode_path(&i.name, &mut href);
        let mut name = String::new();
        html_escape(&i.name, &mut name);
        let slash = if i.dir { "/" } else { "" };
        let size = if i.dir {
            "-".to_string()
        } else {
            human(i.size)
        };
        s.push_str(&format!(
            "<tr><td><a href=\"{href}{slash}\">{name}{slash}</a></td><td class=\"s\" title=\"{}\">{size}</td><td>{}</td></tr>\n",
            i.size,
            date::format(i.mtime)
        ));
    }
    s.push_str("</table>\n</body></html>\n");
    s.into_bytes()
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
            name: name.into(),
            dir,
            size,
            mtime,
        }
    }

    #[test]
    fn sorting_keeps_directories_first() {
        let mut v = vec![
            it("b", false, 1, 3),
            it("z", true, 0, 1),
            it("a", false, 9, 2),
        ];
        sort(&mut v, SortKey::Size, true);
        let names: Vec<_> = v.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["z", "a", "b"]);
        sort(&mut v, SortKey::Name, false);
        let names: Vec<_> = v.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["z", "a", "b"]);
        sort(&mut v, SortKey::Date, false);
        let names: Vec<_> = v.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["z", "a", "b"]);
    }

    #[test]
    fn html_escapes_names() {
        let h = String::from_utf8(html(
            "/x/",
            &[it("<b>&.txt", false, 2048, 0)],
            SortKey::Name,
            false,
        ))
        .unwrap();
        assert!(h.contains("&lt;b&gt;&amp;.txt"));
        assert!(h.contains("href=\"%3Cb%3E&.txt\""));
        assert!(h.contains("2.0 KiB"));
    }
}
