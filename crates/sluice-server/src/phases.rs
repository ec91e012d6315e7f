//! The request phases: what happens to a parsed request, in order, assembled here
//! in one function so the order is visible in one place.
//!
//! A phase either answers (returns a [`Response`]) or lets the request through to
//! the next, possibly changed (a rewrite changes the path). Connection-level
//! conditioning happens before this, in the worker (`worker/`); sending happens
//! after, in `send.rs`.

use crate::shared::Shared;
use crate::snapshot::{Site, Snapshot};
use sluice_http::response::{Chunk, Response};
use sluice_http::{Method, RequestHead};
use sluice_rules::classify::Errant;
use sluice_static::StaticHandler;
use std::net::IpAddr;
use std::time::Instant;

/// What the phases can see besides the request.
pub struct PhaseCtx<'a> {
    pub snap: &'a Snapshot,
    pub shared: &'a Shared,
    /// The site the request's Host chose (`Snapshot::hosts`).
    pub site: &'a Site,
    pub files: &'a mut StaticHandler,
    pub peer: IpAddr,
    pub now: Instant,
    /// The phases have seen this request before: it waited for the disk and is
    /// asked again (rate conditions must not count it twice).
    pub again: bool,
    /// The connection is HTTPS (the rules' `%{HTTPS}`).
    pub https: bool,
    /// Out: the rule that decided, and its action (`sluice_status::counters::ACTIONS`
    /// index), for the status page's per-rule counters.
    pub rule: Option<(u32, usize)>,
    /// Out: an errant-client answer the connection must carry out (`drop`,
    /// `tarpit`, `oversize`); the returned response is then what the log records.
    pub errant: Option<Errant>,
}

/// How long a redirect decided on the request's bytes alone is kept unused.
const KEPT_REDIRECT: std::time::Duration = std::time::Duration::from_secs(60);

/// Index of an errant answer in `sluice_status::counters::ACTIONS`.
fn errant_action(e: Option<&Errant>) -> usize {
    match e {
        Some(Errant::Deny) => 4,
        Some(Errant::Drop) => 5,
        Some(Errant::Substitute { .. }) => 6,
        Some(Errant::Tarpit { .. }) => 7,
        Some(Errant::Loop) => 8,
        Some(Errant::Oversize { .. }) => 9,
        Some(Errant::Limited { .. }) => 10,
        None => 11,
    }
}

/// The answer to a parsed request: the phases below, then the site's headers for
/// every answer (its `always` header rules: `Strict-Transport-Security` and the
/// like), whichever phase answered; one that a path rule for its name comes
/// before yields to that rule where it matched.
pub fn respond(ctx: &mut PhaseCtx, head: &RequestHead) -> Response {
    let mut r = phases(ctx, head);
    ctx.site.add_always(&mut r.headers);
    r
}

fn phases(ctx: &mut PhaseCtx, head: &RequestHead) -> Response {
    // 1. Methods: a static server answers GET and HEAD, and OPTIONS at once (204
    //    with `Allow`, and a CORS preflight's headers); everything else is refused
    //    here, before any rule or file-system work (405 for methods we know, 501 else).
    if let Some(r) = methods(head) {
        return r;
    }
    // 2. Status page: the operator's view, before any rule can redirect it away
    //    (and never in place of a file with the same path: `status.rs`).
    if let Some(r) = crate::status::answer(ctx.snap, ctx.site, ctx.shared, ctx.peer, head) {
        return r;
    }
    // 3. Rules: redirects, rewrites, deny/gone, before the file system is touched,
    //    so a redirect costs no stat (seed 001).
    if let Some(rules) = ctx.site.rules.as_deref() {
        // Rules match text; a User-Agent with obs-text bytes is matched as lossy UTF-8.
        let ua = head.user_agent.map(String::from_utf8_lossy);
        // `-f`/`-d` answered by the file cache, never waiting for the disk.
        let tests = CacheTests::new(ctx.files, ctx.now);
        // What the rules that match set besides deciding (`E=`, `T=`, `CO=`).
        let effects = std::cell::RefCell::new(sluice_rules::Effects::default());
        let req = sluice_rules::Request {
            path: head.path,
            uri: None,
            query: head.query,
            host: head.host,
            user_agent: ua.as_deref(),
            remote_addr: Some(ctx.peer),
            root: Some(&ctx.site.canon_root),
            files: Some(&tests),
            method: head.method_str,
            headers: head.raw_headers,
            counted: ctx.again,
            https: ctx.https,
            target: head.target,
            minor: head.minor,
            effects: Some(&effects),
        };
        // `kept`: the rules decided on the request's bytes alone, so the answer
        // may be kept for them (as far as the rest of it allows): `reuse_until`.
        let (outcome, rule, kept) = rules.lookup_kept(&req);
        // A decision on `-f`/`-d` holds while the cache entries they read do.
        let files_until = tests.until();
        // A `-f`/`-d` that would have waited for the disk decided nothing: the
        // worker has the request asked again once the disk threads looked it up.
        if ctx.files.stopped() {
            return sluice_static::cold_answer();
        }
        let action = |a: usize| rule.map(|i| (i, a));
        let mut r = match outcome {
            sluice_rules::Outcome::Pass => ctx.files.serve(head, head.path, head.query, ctx.now),
            sluice_rules::Outcome::Redirect { status, location } => {
                ctx.rule = action(0);
                let mut r = Response::redirect(status, &location);
                // Good until the rules change, and a reload empties the kept
                // answers; the time only bounds how long an unused one stays.
                r.reuse_until = Some(ctx.now + KEPT_REDIRECT);
                r
            }
            // With the operator's error page for the status, if any; kept for the
            // same bytes as a redirect is (and while the page's entry is trusted).
            sluice_rules::Outcome::Forbidden => {
                ctx.rule = action(2);
                let r = ctx.files.error(403, None, head, ctx.now);
                sluice_static::keep_until(r, ctx.now + KEPT_REDIRECT)
            }
            sluice_rules::Outcome::Gone => {
                ctx.rule = action(3);
                let r = ctx.files.error(410, None, head, ctx.now);
                sluice_static::keep_until(r, ctx.now + KEPT_REDIRECT)
            }
            // A rule's `N` went round past its limit: Apache's 500.
            sluice_rules::Outcome::LoopLimit => {
                ctx.rule = action(1);
                let r = ctx.files.error(500, None, head, ctx.now);
                sluice_static::keep_until(r, ctx.now + KEPT_REDIRECT)
            }
            sluice_rules::Outcome::Rewrite { path, query } => {
                ctx.rule = action(1);
                ctx.files.serve(head, &path, query.as_deref(), ctx.now)
            }
            // Errant clients (seed 000): the rule's answer, every one bounded.
            sluice_rules::Outcome::Answer { errant, date } => {
                ctx.rule = action(errant_action(errant.as_ref()));
                let mut r = match errant {
                    // pass: served as it is (perhaps with a fixed Date).
                    None => ctx.files.serve(head, head.path, head.query, ctx.now),
                    Some(e) => errant_response(ctx, head, e),
                };
                r.date = date;
                r
            }
        };
        // The request header fields the matching rules' conditions read (the
        // deciding rule's and those that handed the request on to it), so that
        // a cache in front does not give this answer to a client whose differ
        // (`Rule::vary_names`, as Apache's mod_rewrite).
        let effects = effects.into_inner();
        if let Some(vary) = rule.and_then(|i| rules.vary(i, &effects.handed_on)) {
            r.headers.add("Vary", &vary);
        }
        if !effects.is_empty() {
            apply_effects(&mut r, effects);
        }
        r.reuse_until = match (kept, files_until) {
            (false, _) => None,
            (true, Some(u)) => r.reuse_until.map(|r| r.min(u)),
            (true, None) => r.reuse_until,
        };
        return r;
    }
    // 4. Handler: static files, index files, listings.
    ctx.files.serve(head, head.path, head.query, ctx.now)
}

/// What the rules that matched set on the answer, as Apache's mod_rewrite does:
/// `T=` names the type of a file served whole or in one range (not of an error
/// page, a redirect, or a multipart answer, whose parts carry the file's type),
/// and every `CO=` adds a `Set-Cookie`, to any answer. These follow from the
/// request's bytes as the decision does, so an answer kept for reuse keeps them.
fn apply_effects(r: &mut Response, effects: sluice_rules::Effects) {
    if let Some(t) = effects.content_type {
        let multipart = sluice_http::request::field_values(r.headers.as_bytes(), "Content-Type")
            .next()
            .is_some_and(|v| v.trim_ascii_start().starts_with(b"multipart/"));
        if matches!(r.status, 200 | 206) && !multipart && sluice_http::response::safe_value(&t) {
            r.headers.replace("Content-Type", &t);
        }
    }
    for c in effects.cookies {
        if sluice_http::response::safe_value(&c) {
            r.headers.add("Set-Cookie", &c);
        }
    }
}

/// The rules' view of the file cache, for the length of one lookup (the rules
/// ask through a shared reference; the cache needs a mutable one), and the
/// earliest expiry of the entries they read. `sluice rules explain` asks through
/// it too, so it sees the files as the server does.
pub struct CacheTests<'h> {
    files: std::cell::RefCell<&'h mut StaticHandler>,
    now: Instant,
    until: std::cell::Cell<Option<Instant>>,
}

impl<'h> CacheTests<'h> {
    pub fn new(files: &'h mut StaticHandler, now: Instant) -> CacheTests<'h> {
        CacheTests {
            files: std::cell::RefCell::new(files),
            now,
            until: std::cell::Cell::new(None),
        }
    }

    /// Until when what the tests answered holds (`None`: nothing was tested).
    pub fn until(&self) -> Option<Instant> {
        self.until.get()
    }
}

impl std::fmt::Debug for CacheTests<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CacheTests")
    }
}

impl sluice_rules::FileTests for CacheTests<'_> {
    fn is(&self, path: &str, dir: bool) -> bool {
        // One test at a time: the borrow is never held across another.
        let Ok(mut files) = self.files.try_borrow_mut() else {
            return false;
        };
        let (is, until) = files.is(path, dir, self.now);
        self.until
            .set(Some(self.until.get().map_or(until, |u| u.min(until))));
        is
    }
}

/// The methods a static server answers.
const ALLOW: &str = "GET, HEAD, OPTIONS";

fn methods(head: &RequestHead) -> Option<Response> {
    let status = match head.method() {
        Method::Get | Method::Head => {
            if head.path == "*" {
                return Some(Response::text(400, Some("'*' is only for OPTIONS")));
            }
            return None;
        }
        Method::Options => return Some(options(head)),
        Method::Other => 501,
        _ => 405,
    };
    let mut r = Response::new(status);
    let body = format!("{status} {}\n", sluice_http::reason(status));
    r.headers.add("Allow", ALLOW);
    r.headers.add("Content-Type", "text/plain; charset=utf-8");
    r.headers.add_u64("Content-Length", body.len() as u64);
    r.body.push(Chunk::Owned(body.into_bytes()));
    Some(r)
}

/// OPTIONS (RFC 9110 §9.3.7), for a path or for `*`: 204 with what may be asked.
/// Answered before any rule or file-system work, whatever the path (as nginx's
/// usual `return 204`), so a probe costs nothing. A CORS preflight (it carries
/// `Access-Control-Request-Method`) also gets the methods, the request headers it
/// names, and a day to keep the answer. Whether an origin may read anything at all
/// stays the operator's choice: the site's `Access-Control-Allow-Origin` (an
/// `always` header rule) is added to this answer as to every other, and without it
/// browsers refuse the cross-origin request.
fn options(head: &RequestHead) -> Response {
    use sluice_http::request::field_values;
    let mut r = Response::new(204);
    r.headers.add("Allow", ALLOW);
    if field_values(head.raw_headers, "access-control-request-method")
        .next()
        .is_some()
    {
        r.headers.add("Access-Control-Allow-Methods", ALLOW);
        // The names the preflight asks for, given back only when they are a
        // plain list of header names (nothing of the request is echoed raw).
        let names = field_values(head.raw_headers, "access-control-request-headers")
            .next()
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::trim)
            .filter(|v| {
                !v.is_empty()
                    && v.len() <= 1024
                    && v.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_, ".contains(&b))
            });
        if let Some(n) = names {
            r.headers.add("Access-Control-Allow-Headers", n);
        }
        r.headers.add("Access-Control-Max-Age", "86400");
    }
    r
}

/// The response for an errant-client answer. `drop`, `tarpit` and `oversize` are
/// carried out by the worker (`ctx.errant`); their response here is what the
/// access log records.
fn errant_response(ctx: &mut PhaseCtx, head: &RequestHead, e: Errant) -> Response {
    match e {
        Errant::Deny => Response::text(403, Some("refused by the mirror's rules")),
        Errant::Limited { retry_after_s } => {
            let mut r = Response::text(429, Some("too many requests; slow down"));
            r.headers.add_u64("Retry-After", retry_after_s);
            r
        }
        Errant::Substitute { body, ctype } => {
            let mut r = Response::new(200);
            r.headers.add("Content-Type", ctype);
            r.headers.add_u64("Content-Length", body.len() as u64);
            r.headers.add("Cache-Control", "no-store");
            r.body.push(Chunk::Owned(body.to_vec()));
            r
        }
        Errant::Loop => {
            // The same path, a fresh query each time: naive loop detection (same
            // URL twice) never fires; a client with a redirect limit stops there.
            use std::sync::atomic::{AtomicU64, Ordering};
            static SEQ: AtomicU64 = AtomicU64::new(0x2545_f491_4f6c_dd1d);
            let x = SEQ
                .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
                .wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let loc = format!("{}?{:016x}", head.path, x ^ (x >> 31));
            Response::redirect(302, &loc)
        }
        Errant::Drop => {
            ctx.errant = Some(Errant::Drop);
            let mut r = Response::new(444);
            r.close = true;
            r
        }
        e @ (Errant::Tarpit { .. } | Errant::Oversize { .. }) => {
            ctx.errant = Some(e);
            let mut r = Response::new(200);
            r.close = true;
            r
        }
    }
}
