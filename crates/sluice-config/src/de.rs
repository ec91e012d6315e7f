//! Reading values: durations (`"15s"`, `"500ms"`, bare seconds), listen addresses
//! (one or a list, each parsed to a socket address here, once), and numbers checked
//! against their [`crate::bounds`] as they are read, so a bad value is reported at
//! its own line by the TOML parser.

use crate::bounds;
use serde::{Deserialize, Deserializer};
use std::net::SocketAddr;
use std::time::Duration;

/// Parse `"15s"`, `"500ms"`, `"2m"`, `"1h"` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like \"15s\" or \"500ms\""))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    if !(0.0..=86400.0 * 365.0).contains(&secs) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

pub(crate) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Secs(u64),
    }
    match Raw::deserialize(d)? {
        Raw::Text(s) => parse_duration(&s).map_err(serde::de::Error::custom),
        Raw::Secs(n) => Ok(Duration::from_secs(n)),
    }
}

/// A scheduler slice: a duration, 0 or within [`bounds::SCHED_SLICE_US`].
pub(crate) fn sched_slice<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let v = duration(d)?;
    let (lo, hi) = bounds::SCHED_SLICE_US;
    let us = v.as_micros();
    if us != 0 && !(u128::from(lo)..=u128::from(hi)).contains(&us) {
        return Err(serde::de::Error::custom(format!(
            "{us} µs is out of range (0, or {}ms..={}ms)",
            lo as f64 / 1000.0,
            hi / 1000
        )));
    }
    Ok(v)
}

/// Parse a listen address: `ADDR:PORT`, IPv6 in brackets.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("{s:?} is not ADDR:PORT (e.g. 127.0.0.1:8080 or [::1]:8080)"))
}

/// One address or a list of them, each parsed here.
pub(crate) fn listen<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<SocketAddr>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        One(String),
        Many(Vec<String>),
    }
    let list = match Raw::deserialize(d)? {
        Raw::One(s) => vec![s],
        Raw::Many(v) => v,
    };
    list.iter()
        .map(|s| parse_listen(s).map_err(serde::de::Error::custom))
        .collect()
}

/// A deserializer for a number within bounds; read as `u64`, or as the integer
/// type named last (`i64` for a setting that may be negative).
macro_rules! bounded {
    ($name:ident, $ty:ty, $b:expr) => {
        bounded!($name, $ty, $b, u64);
    };
    ($name:ident, $ty:ty, $b:expr, $raw:ty) => {
        pub(crate) fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
            let v = <$raw>::deserialize(d)?;
            let (lo, hi) = $b;
            if v < lo || v > hi {
                return Err(serde::de::Error::custom(format!(
                    "{v} is out of range ({lo}..={hi})"
                )));
            }
            Ok(v as $ty)
        }
    };
}
bounded!(priority, i32, bounds::PRIORITY, i64);
bounded!(workers, usize, bounds::WORKERS);
bounded!(processes, usize, bounds::PROCESSES);
bounded!(listen_sockets, usize, bounds::LISTEN_SOCKETS);
bounded!(buffer_size, usize, bounds::BUFFER_SIZE);
bounded!(disk_threads, usize, bounds::DISK_THREADS);
bounded!(listing_threads, usize, bounds::LISTING_THREADS);
bounded!(keepalive_requests, u64, bounds::KEEPALIVE_REQUESTS);
bounded!(max_request_line, usize, bounds::MAX_REQUEST_LINE);
bounded!(max_head, usize, bounds::MAX_HEAD);
bounded!(max_headers, usize, bounds::MAX_HEADERS);
bounded!(max_ranges, usize, bounds::MAX_RANGES);
bounded!(max_body_discard, u64, bounds::MAX_BODY_DISCARD);
bounded!(limit_rate, u64, bounds::LIMIT_RATE);
bounded!(limit_rate_after, u64, bounds::LIMIT_RATE_AFTER);
bounded!(cache_entries, usize, bounds::CACHE_ENTRIES);
bounded!(small_file_max, usize, bounds::SMALL_FILE_MAX);
bounded!(answer_cache, usize, bounds::ANSWER_CACHE);
bounded!(unsent_max, u32, bounds::UNSENT_MAX);
bounded!(unsent_total, u64, bounds::UNSENT_TOTAL);

/// `[files] types`: extensions (a leading dot allowed, any case; kept lowercase) to
/// media types. Each type must be one header value a client can read: visible
/// ASCII with a `/`, no line breaks (they would end the response's head).
pub(crate) fn types<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<std::collections::BTreeMap<String, String>, D::Error> {
    use serde::de::Error;
    let raw = std::collections::BTreeMap::<String, String>::deserialize(d)?;
    let mut out = std::collections::BTreeMap::new();
    for (ext, ty) in raw {
        let (e, t) = type_entry(&ext, ty).map_err(D::Error::custom)?;
        out.insert(e, t);
    }
    Ok(out)
}

/// One extension → media type pair of `[files] types` or of a `types_file`,
/// checked: the extension (a leading dot allowed) is 1 to 32 visible ASCII
/// characters other than `/` and `.` (`mime.types` files list `~` and `%`), kept
/// lowercase; the type is one header value with a `/`.
pub(crate) fn type_entry(ext: &str, ty: String) -> Result<(String, String), String> {
    let e = ext.strip_prefix('.').unwrap_or(ext);
    let ext_ok = (1..=32).contains(&e.len())
        && e.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b'.');
    if !ext_ok {
        return Err(format!(
            "{ext:?}: an extension is 1 to 32 visible ASCII characters, without '/' or '.'"
        ));
    }
    if !(ty.contains('/') && header_value_ok(&ty, 3..=200)) {
        return Err(format!(
            "{ext:?} = {ty:?}: not a media type such as \"text/plain; charset=utf-8\""
        ));
    }
    Ok((e.to_ascii_lowercase(), ty))
}

/// `[files] index`: file names tried in a directory, each one plain name (no `/`,
/// not `.` or `..`, no control characters), up to 255 bytes, at most 16 of them.
pub(crate) fn index<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    use serde::de::Error;
    let names = Vec::<String>::deserialize(d)?;
    if names.len() > 16 {
        return Err(D::Error::custom(format!(
            "{} names: at most 16 are tried",
            names.len()
        )));
    }
    for n in &names {
        if !file_name_ok(n) {
            return Err(D::Error::custom(format!(
                "{n:?}: an index is a file name in the directory, such as \"index.html\""
            )));
        }
    }
    Ok(names)
}

/// One plain file name: up to 255 bytes, no `/`, not `.` or `..`, no control
/// characters.
fn file_name_ok(n: &str) -> bool {
    (1..=255).contains(&n.len())
        && !matches!(n, "." | "..")
        && !n.contains(['/', '\\'])
        && n.bytes().all(|b| b >= b' ' && b != 0x7f)
}

/// `[files] listing_header` / `listing_readme`: a file name in the listed
/// directory, or `""` for none.
pub(crate) fn note_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let n = String::deserialize(d)?;
    if !n.is_empty() && !file_name_ok(&n) {
        return Err(serde::de::Error::custom(format!(
            "{n:?}: a file name in the listed directory, such as \"README.txt\", or \"\""
        )));
    }
    Ok(n)
}

/// [`index`] for a `[[site]]`, where an absent key keeps `[files]`'s.
pub(crate) fn index_some<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    index(d).map(Some)
}

/// [`limit_rate`] for a `[[site]]`, where an absent key keeps `[http]`'s.
pub(crate) fn limit_rate_some<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    limit_rate(d).map(Some)
}

/// [`limit_rate_after`] for a `[[site]]`, where an absent key keeps `[http]`'s.
pub(crate) fn limit_rate_after_some<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<u64>, D::Error> {
    limit_rate_after(d).map(Some)
}

/// [`note_name`] for a `[[site]]`, where an absent key keeps `[files]`'s.
pub(crate) fn note_name_some<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    note_name(d).map(Some)
}

/// The statuses `[files] error_pages` may give a page for: those the file handler
/// and the rules answer with for a request's path.
const ERROR_PAGE_STATUSES: [u16; 3] = [403, 404, 410];

/// `[files] error_pages`: a status of [`ERROR_PAGE_STATUSES`] to an absolute path
/// of plain segments (no `.`, `..`, query or fragment), up to 1,024 bytes.
pub(crate) fn error_pages<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<std::collections::BTreeMap<u16, String>, D::Error> {
    use serde::de::Error;
    let raw = std::collections::BTreeMap::<String, String>::deserialize(d)?;
    let mut out = std::collections::BTreeMap::new();
    for (status, page) in raw {
        let code = status
            .parse::<u16>()
            .ok()
            .filter(|c| ERROR_PAGE_STATUSES.contains(c))
            .ok_or_else(|| {
                D::Error::custom(format!(
                    "{status:?}: a page can be given for 403, 404 and 410"
                ))
            })?;
        let plain = page.starts_with('/')
            && page.len() <= 1024
            && !page.ends_with('/')
            && !page.contains(['?', '#', '%', '\\'])
            && page.bytes().all(|b| b > b' ' && b != 0x7f)
            && page[1..].split('/').all(|s| !matches!(s, "" | "." | ".."));
        if !plain {
            return Err(D::Error::custom(format!(
                "{status} = {page:?}: the path of a file under the root, such as \"/errors/404.html\""
            )));
        }
        out.insert(code, page);
    }
    Ok(out)
}

/// One header value as sluice writes it: `len` characters of visible ASCII and
/// spaces, none at either end, and so no line break (which would end the head).
fn header_value_ok(v: &str, len: std::ops::RangeInclusive<usize>) -> bool {
    len.contains(&v.len()) && v.trim() == v && v.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// A header value written into answers as it is ([`header_value_ok`]).
pub(crate) fn header_value<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = String::deserialize(d)?;
    if !header_value_ok(&v, 3..=200) {
        return Err(serde::de::Error::custom(format!(
            "{v:?}: a header value is 3 to 200 characters of visible ASCII and spaces"
        )));
    }
    Ok(v)
}

/// Headers sluice writes itself (or that would change how the answer is framed or
/// coded): a `[files.headers]` rule may not set them. `Cache-Control` has its own
/// rules (`[files] cache_control`).
const OWN_HEADERS: [&str; 18] = [
    "accept-ranges",
    "cache-control",
    "connection",
    "content-encoding",
    "content-length",
    "content-range",
    "content-type",
    "date",
    "etag",
    "keep-alive",
    "last-modified",
    "location",
    "retry-after",
    "server",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "vary",
];

/// At most this many `[files.headers]` rules (each costs every file answer two
/// comparisons).
pub(crate) const HEADER_RULES_MAX: usize = 64;

/// `[[files.headers]]`: at most [`HEADER_RULES_MAX`] rules (each rule's name and
/// value are checked as they are read: [`header_name`], [`extra_header_value`]).
pub(crate) fn header_rules<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    let rules = Vec::<T>::deserialize(d)?;
    if rules.len() > HEADER_RULES_MAX {
        return Err(serde::de::Error::custom(format!(
            "{} rules: at most {HEADER_RULES_MAX}",
            rules.len()
        )));
    }
    Ok(rules)
}

/// [`header_rules`] for a `[[site]]`, where an absent key keeps `[files]`'s.
pub(crate) fn header_rules_some<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Vec<T>>, D::Error> {
    header_rules(d).map(Some)
}

/// A `[[files.headers]]` rule's name: a token (RFC 9110 §5.6.2) of at most 64
/// bytes that is not one of [`OWN_HEADERS`].
pub(crate) fn header_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error;
    let n = String::deserialize(d)?;
    let token = (1..=64).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        return Err(D::Error::custom(format!("{n:?}: not a header name")));
    }
    if OWN_HEADERS.contains(&n.to_ascii_lowercase().as_str()) {
        return Err(D::Error::custom(format!(
            "{n:?}: sluice writes this header itself"
        )));
    }
    Ok(n)
}

/// A `[[files.headers]]` rule's value: 1 to 1,024 bytes of visible ASCII and
/// spaces, none at either end (`"*"` is a value).
pub(crate) fn extra_header_value<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = String::deserialize(d)?;
    if !header_value_ok(&v, 1..=1024) {
        return Err(serde::de::Error::custom(format!(
            "{v:?}: a value is 1 to 1,024 characters of visible ASCII and spaces"
        )));
    }
    Ok(v)
}

/// A path prefix: a URL path from the root, so it starts with `/`.
pub(crate) fn path_prefix<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let p = String::deserialize(d)?;
    if !p.starts_with('/') {
        return Err(serde::de::Error::custom(format!(
            "{p:?}: a path prefix starts with \"/\""
        )));
    }
    Ok(p)
}
