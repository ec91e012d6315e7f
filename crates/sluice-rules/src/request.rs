//! What the rules read: the request ([`Request`]), the variables conditions and
//! templates name ([`Var`]), and `RewriteMap`s ([`MapDef`]). The bottom of the crate:
//! plain data, depending on nothing else here.

use rustc_hash::FxHashMap;
use std::net::IpAddr;
use std::path::Path;

/// What the rules can see of a request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Request<'a> {
    /// The path as sent (percent-encoded), starting with `/`.
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub host: Option<&'a str>,
    pub user_agent: Option<&'a str>,
    pub remote_addr: Option<IpAddr>,
    /// Document root, for `-f`/`-d` and `%{REQUEST_FILENAME}`.
    pub root: Option<&'a Path>,
    /// How `-f`/`-d` look at the files under `root`: the server's file cache
    /// ([`FileTests`]; `sluice rules explain` on a config too); without it (a
    /// rules file alone, tests), a `stat` each time.
    pub files: Option<&'a dyn FileTests>,
    /// The method as sent (`method=`).
    pub method: &'a str,
    /// The raw header lines (`Name: value\r\n`...), for `header=`; scanned only
    /// by rules that ask.
    pub headers: &'a [u8],
    /// The rules have seen this request before (the server asks again a request
    /// that waited for the disk): rate conditions look without counting it twice.
    pub counted: bool,
    /// The request came over TLS (`%{HTTPS}`, `%{REQUEST_SCHEME}`).
    pub https: bool,
    /// The request-target as sent and the HTTP minor version, for
    /// `%{THE_REQUEST}` (an empty target: the path and query stand for it).
    pub target: &'a str,
    pub minor: u8,
    /// What `%{REQUEST_URI}` reads when it is not `path`: the path the client
    /// sent, once a `RewriteRule` without `L` has handed a rewritten `path` to the
    /// rules after it (Apache keeps `r->uri` while it rewrites `r->filename`).
    /// `None`: `path`.
    pub uri: Option<&'a str>,
    /// Where the rules that match record what they set besides deciding
    /// (`E=`, `T=`, `CO=`; [`Effects`]), and where `%{ENV:name}` reads.
    /// The caller makes one per request and reads it after the lookup; `None`:
    /// nothing is recorded and `%{ENV:…}` is empty.
    pub effects: Option<&'a std::cell::RefCell<Effects>>,
}

impl<'a> Request<'a> {
    /// The first header called `name` (ASCII case-insensitive), trimmed.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        for line in self.headers.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            if line[..colon].eq_ignore_ascii_case(name.as_bytes()) {
                return std::str::from_utf8(&line[colon + 1..]).ok().map(str::trim);
            }
        }
        None
    }
}

/// What the rules that matched one request set, in the order they matched; the
/// caller makes one per lookup and hands it in with [`Request::effects`]. Filled
/// by [`crate::effects::Extra`]: `E=` (read back by `%{ENV:name}`), `T=`, `CO=`.
#[derive(Debug, Default)]
pub struct Effects {
    pub(crate) env: Vec<(Box<str>, String)>,
    /// The last `T=` of a rule that matched: the `Content-Type` of the file served.
    pub content_type: Option<String>,
    /// Every `CO=` of the rules that matched: `Set-Cookie` values, in order.
    pub cookies: Vec<String>,
    /// The rules that matched and handed the request on to the rules after
    /// them (no `L`), before the one that decided: their conditions' header
    /// fields go into the answer's `Vary` too ([`crate::RuleSet::vary`]).
    pub handed_on: Vec<u32>,
}

impl Effects {
    /// `%{ENV:name}`: what an `E=` of a rule that matched before set (the last
    /// one wins), or `None`.
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(n, _)| **n == *name)
            .map(|(_, v)| v.as_str())
    }

    /// Every variable set, in the order set (for `explain`).
    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.env.iter().map(|(n, v)| (&**n, v.as_str()))
    }

    /// Nothing was set on the answer (`handed_on` aside).
    pub fn is_empty(&self) -> bool {
        self.env.is_empty() && self.content_type.is_none() && self.cookies.is_empty()
    }
}

/// What `-f` and `-d` ask of the files under the document root, given the part of
/// the condition's subject after the root (for `%{REQUEST_FILENAME}`, the request's
/// path as sent, still percent-encoded). The server answers from its file cache,
/// under the root's symlink and hidden-file policy, without waiting for the disk:
/// a test that would wait answers `false`, and the server sets the request aside
/// until the disk threads have looked the path up, then asks the rules again.
///
/// Given one, [`crate::RuleSet::lookup_kept`] may call a decision that tested
/// files kept: the implementation then bounds the kept answer by how long what it
/// answered stays true (the file cache: its entries' `cache_validity`).
pub trait FileTests: std::fmt::Debug {
    /// Is `path` a regular file (`dir == false`) or a directory (`dir == true`)?
    fn is(&self, path: &str, dir: bool) -> bool;
}

/// A `RewriteMap`.
#[derive(Debug)]
pub enum MapDef {
    Txt(FxHashMap<String, String>),
    Rnd(FxHashMap<String, Vec<String>>),
    ToLower,
    ToUpper,
}

/// The `RewriteMap`s of a rule set. A template names its map by slot, found once
/// when it is parsed: a lookup at request time (an "always" rule runs one on every
/// request) indexes a vector instead of hashing and comparing the map's name. A
/// map defined again under the same name replaces its slot, so every rule reads
/// the last definition, as Apache's lookup by name does.
#[derive(Debug, Default)]
pub struct Maps {
    defs: Vec<MapDef>,
    names: FxHashMap<String, u32>,
}

impl Maps {
    /// Defines (or redefines) map `name`.
    pub fn define(&mut self, name: &str, def: MapDef) {
        match self.names.get(name) {
            Some(&slot) => self.defs[slot as usize] = def,
            None => {
                self.names.insert(name.to_string(), self.defs.len() as u32);
                self.defs.push(def);
            }
        }
    }

    /// The slot of map `name`, if it is defined.
    pub fn slot(&self, name: &str) -> Option<u32> {
        self.names.get(name).copied()
    }

    /// The map in `slot`.
    pub fn get(&self, slot: u32) -> Option<&MapDef> {
        self.defs.get(slot as usize)
    }
}

/// A variable a condition or a template can read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Var {
    HttpHost,
    UserAgent,
    RemoteAddr,
    QueryString,
    RequestUri,
    RequestFilename,
    DocumentRoot,
    /// `%{REQUEST_METHOD}`.
    Method,
    /// `%{HTTPS}`: `on` or `off`. Not the request's bytes: a decision on it is
    /// not kept for them (the same bytes may come over TLS and over plain HTTP).
    Https,
    /// `%{REQUEST_SCHEME}`: `https` or `http` (not kept, as `Https`).
    Scheme,
    /// `%{THE_REQUEST}`: the request line as sent, `GET /a?b HTTP/1.1`.
    TheRequest,
    /// `%{SERVER_NAME}`: the request's host without its port, as Apache's
    /// default `UseCanonicalName Off` gives it.
    ServerName,
    /// `%{SERVER_PORT}`: as Apache's default `UseCanonicalName Off` gives it,
    /// the port the `Host` names, else the scheme's (`443` over TLS, `80`), not
    /// the listener's (checked against Debian's Apache 2.4). Not kept, as
    /// `Https`: without a port in the `Host` it depends on the connection.
    ServerPort,
    /// `%{SERVER_PROTOCOL}`: `HTTP/1.1` or `HTTP/1.0`, as sent.
    ServerProtocol,
    /// A request header's value (the first line of that name; empty if none):
    /// `%{HTTP:Name}`, and `%{HTTP_REFERER}`, `%{HTTP_ACCEPT}`, `%{HTTP_COOKIE}`,
    /// `%{HTTP_FORWARDED}`, `%{HTTP_PROXY_CONNECTION}`. Each evaluation scans the
    /// head's lines, only for the rules that name one.
    Header(Box<str>),
    /// `%{ENV:name}`: what an `E=` of a rule that matched before this one set
    /// ([`Request::effects`]); empty if none did. Apache then asks its process
    /// environment; sluice does not, so that no variable of the server's own can
    /// reach an answer.
    Env(Box<str>),
    /// `%{TIME}` (`YYYYMMDDhhmmss`) and `%{TIME_YEAR}`, `_MON`, `_DAY`, `_HOUR`,
    /// `_MIN`, `_SEC` (two digits but the year's four), `_WDAY` (`0` Sunday to
    /// `6`): the clock in UTC, sluice's time everywhere; Apache reads local
    /// time, the same on a server whose time zone is UTC. Not the request's
    /// bytes: a decision on it is not kept.
    Time(TimeField),
}

/// Which part of the time a `%{TIME…}` variable reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeField {
    All,
    Year,
    Mon,
    Day,
    Hour,
    Min,
    Sec,
    Wday,
}

impl TimeField {
    /// Appends this part of the time now to `out`, read from the HTTP date's
    /// fields (`Tue, 08 Dec 2026 05:10:32 GMT`).
    fn push(self, out: &mut String) {
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        let f: Vec<&str> = date
            .split([' ', ',', ':'])
            .filter(|s| !s.is_empty())
            .collect();
        let [wday, day, mon, year, hour, min, sec, ..] = f[..] else {
            return;
        };
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
        let mon = MONTHS.iter().position(|m| *m == mon).map_or(0, |i| i + 1);
        let mon = format!("{mon:02}");
        match self {
            TimeField::All => {
                for part in [year, &mon, day, hour, min, sec] {
                    out.push_str(part);
                }
            }
            TimeField::Year => out.push_str(year),
            TimeField::Mon => out.push_str(&mon),
            TimeField::Day => out.push_str(day),
            TimeField::Hour => out.push_str(hour),
            TimeField::Min => out.push_str(min),
            TimeField::Sec => out.push_str(sec),
            TimeField::Wday => {
                let w = DAYS.iter().position(|d| *d == wday).unwrap_or(0);
                out.push(char::from(b'0' + w as u8));
            }
        }
    }
}

impl Var {
    pub fn from_name(n: &str) -> Option<Var> {
        Some(match n {
            "HTTP_HOST" => Var::HttpHost,
            "HTTP_USER_AGENT" => Var::UserAgent,
            "REMOTE_ADDR" => Var::RemoteAddr,
            "QUERY_STRING" => Var::QueryString,
            "REQUEST_URI" => Var::RequestUri,
            "REQUEST_FILENAME" => Var::RequestFilename,
            "DOCUMENT_ROOT" => Var::DocumentRoot,
            "REQUEST_METHOD" => Var::Method,
            "HTTPS" => Var::Https,
            "THE_REQUEST" => Var::TheRequest,
            "REQUEST_SCHEME" => Var::Scheme,
            "SERVER_NAME" => Var::ServerName,
            "SERVER_PORT" => Var::ServerPort,
            "SERVER_PROTOCOL" => Var::ServerProtocol,
            "HTTP_REFERER" => Var::Header("Referer".into()),
            "HTTP_ACCEPT" => Var::Header("Accept".into()),
            "HTTP_COOKIE" => Var::Header("Cookie".into()),
            "HTTP_FORWARDED" => Var::Header("Forwarded".into()),
            "HTTP_PROXY_CONNECTION" => Var::Header("Proxy-Connection".into()),
            _ if n.starts_with("ENV:") && n.len() > 4 => Var::Env(n[4..].into()),
            "TIME" => Var::Time(TimeField::All),
            "TIME_YEAR" => Var::Time(TimeField::Year),
            "TIME_MON" => Var::Time(TimeField::Mon),
            "TIME_DAY" => Var::Time(TimeField::Day),
            "TIME_HOUR" => Var::Time(TimeField::Hour),
            "TIME_MIN" => Var::Time(TimeField::Min),
            "TIME_SEC" => Var::Time(TimeField::Sec),
            "TIME_WDAY" => Var::Time(TimeField::Wday),
            _ => match n.strip_prefix("HTTP:") {
                Some(h)
                    if !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic() && b != b':') =>
                {
                    Var::Header(h.into())
                }
                _ => return None,
            },
        })
    }

    /// The value as it is in the request, for the variables that are one field
    /// of it (`None` for those that are built: an address, a root plus a path).
    pub fn borrowed<'r>(&self, req: &Request<'r>) -> Option<&'r str> {
        match self {
            Var::HttpHost => Some(host_header(req)),
            Var::UserAgent => Some(req.user_agent.unwrap_or("")),
            Var::QueryString => Some(req.query.unwrap_or("")),
            Var::RequestUri => Some(req.uri.unwrap_or(req.path)),
            Var::Method => Some(req.method),
            Var::Https => Some(if req.https { "on" } else { "off" }),
            Var::Scheme => Some(if req.https { "https" } else { "http" }),
            Var::ServerName => Some(host_without_port(req.host.unwrap_or(""))),
            Var::ServerPort => Some(server_port(req)),
            Var::ServerProtocol => Some(server_protocol(req)),
            Var::Header(name) => Some(req.header(name).unwrap_or("")),
            Var::RemoteAddr
            | Var::RequestFilename
            | Var::DocumentRoot
            | Var::TheRequest
            | Var::Env(_)
            | Var::Time(_) => None,
        }
    }

    /// Append the value to `out`. The four request fields are spelled out here as in
    /// [`Var::borrowed`] on purpose: routing them through `borrowed` (once as an early
    /// return, once as a match arm) measured 50 ns against 43.6 ns per always-map
    /// lookup (`cargo bench -p sluice-rules --bench lookup -- always-map`), the
    /// difference between that target met and not (docs/BENCHMARKS.md).
    pub fn read(&self, req: &Request, out: &mut String) {
        match self {
            Var::HttpHost => out.push_str(host_header(req)),
            Var::UserAgent => out.push_str(req.user_agent.unwrap_or("")),
            Var::RemoteAddr => {
                if let Some(a) = req.remote_addr {
                    use std::fmt::Write;
                    let _ = write!(out, "{a}");
                }
            }
            Var::QueryString => out.push_str(req.query.unwrap_or("")),
            Var::RequestUri => out.push_str(req.uri.unwrap_or(req.path)),
            Var::RequestFilename => {
                if let Some(r) = req.root {
                    out.push_str(&r.to_string_lossy());
                }
                out.push_str(req.path);
            }
            Var::DocumentRoot => {
                if let Some(r) = req.root {
                    out.push_str(&r.to_string_lossy());
                }
            }
            Var::Method => out.push_str(req.method),
            Var::TheRequest => {
                out.push_str(req.method);
                out.push(' ');
                if req.target.is_empty() {
                    out.push_str(req.uri.unwrap_or(req.path));
                    if let Some(q) = req.query.filter(|_| req.uri.is_none()) {
                        out.push('?');
                        out.push_str(q);
                    }
                } else {
                    out.push_str(req.target);
                }
                out.push_str(" HTTP/1.");
                out.push(char::from(b'0' + req.minor.min(9)));
            }
            Var::Https => out.push_str(if req.https { "on" } else { "off" }),
            Var::Scheme => out.push_str(if req.https { "https" } else { "http" }),
            Var::ServerName => out.push_str(host_without_port(req.host.unwrap_or(""))),
            Var::ServerPort => out.push_str(server_port(req)),
            Var::ServerProtocol => out.push_str(server_protocol(req)),
            Var::Header(name) => out.push_str(req.header(name).unwrap_or("")),
            Var::Env(name) => {
                if let Some(fx) = req.effects {
                    out.push_str(fx.borrow().env(name).unwrap_or(""));
                }
            }
            Var::Time(f) => f.push(out),
        }
    }
}

/// `%{HTTP_HOST}` of `req`: its `Host` header as sent, port and all, as Apache
/// reads it (`Request::host` has the port taken off). Without the head's lines
/// (`sluice rules explain`, the engine's own tests), `Request::host`.
fn host_header<'r>(req: &Request<'r>) -> &'r str {
    if req.headers.is_empty() {
        req.host.unwrap_or("")
    } else {
        req.header("Host").unwrap_or("")
    }
}

/// `%{SERVER_PROTOCOL}` of `req`.
fn server_protocol(req: &Request) -> &'static str {
    if req.minor == 0 {
        "HTTP/1.0"
    } else {
        "HTTP/1.1"
    }
}

/// `%{SERVER_PORT}` of `req`: the port its `Host` names, else its scheme's.
fn server_port<'r>(req: &Request<'r>) -> &'r str {
    let host = host_header(req);
    let name = host_without_port(host);
    match host[name.len()..].strip_prefix(':') {
        Some(port) if !port.is_empty() => port,
        _ if req.https => "443",
        _ => "80",
    }
}

/// `host` without a port (`a.example:8080` → `a.example`, `[::1]:80` → `[::1]`),
/// as `%{SERVER_NAME}` gives it and as the server sees a `Host`.
pub fn host_without_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h.find(']').map_or(h, |i| &h[..=i]);
    }
    match h.split_once(':') {
        Some((name, port)) if !port.contains(':') => name,
        _ => h,
    }
}
