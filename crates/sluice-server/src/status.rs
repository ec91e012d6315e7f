//! The status phase: answers the status page's paths (`sluice-status` renders;
//! this module decides whether to answer and who may see it).
//!
//! Paths (default `/server-status`, `[status] path`): `PATH` (HTML), `PATH?format=json`,
//! `PATH?auto` (Apache mod_status), `PATH/metrics` (Prometheus; OpenMetrics when the
//! scraper's Accept asks for it). Not answered on a site whose root has a file at
//! `PATH` (the file wins, with a warning at start-up and reload). Clients outside
//! `[status] allow` get 403. Cost for every other request: one string comparison.

use crate::shared::Shared;
use crate::snapshot::{Site, Snapshot};
use sluice_http::response::{Chunk, Response};
use sluice_http::RequestHead;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

/// Whether `path` is one of the status page's paths (the page itself or its
/// `/metrics`): these are answered even when requests wait (`condition.max_active`).
pub fn is_status_path(snap: &Snapshot, path: &str) -> bool {
    let cfg = &snap.config.status;
    cfg.enabled && matches!(path.strip_prefix(cfg.path.as_str()), Some("" | "/metrics"))
}

pub fn answer(
    snap: &Snapshot,
    site: &Site,
    shared: &Shared,
    peer: IpAddr,
    head: &RequestHead,
) -> Option<Response> {
    let cfg = &snap.config.status;
    if !cfg.enabled || site.status_shadowed {
        return None;
    }
    let rest = head.path.strip_prefix(cfg.path.as_str())?;
    let form = match (rest, head.query) {
        ("", Some(q)) if q.split('&').any(|kv| kv == "format=json") => Form::Json,
        ("", Some(q)) if q.split('&').any(|kv| kv == "auto") => Form::Auto,
        ("", _) => Form::Html,
        ("/metrics", _) => {
            let om = head
                .accept()
                .is_some_and(|a| a.contains("application/openmetrics-text"));
            Form::Metrics { openmetrics: om }
        }
        _ => return None,
    };
    if !snap.status_allow.iter().any(|c| c.contains(peer)) {
        return Some(Response::text(
            403,
            Some("the status page is not for your address"),
        ));
    }
    let totals = sluice_status::Totals::sum(shared.stats);
    // With several serving processes, the sum over all of them (each has its own
    // descriptor limit and connection limit), the old ones finishing their
    // responses after a reload that forked new ones among them.
    let pids: Vec<Option<u32>> = match shared.procs {
        [_] => vec![None],
        all => all.iter().filter_map(|p| p.running()).map(Some).collect(),
    };
    let open: usize = shared
        .procs
        .iter()
        .map(|p| p.open.load(Ordering::Relaxed))
        .sum();
    let n = pids.len() as u64;
    let mut process = sluice_status::Process::read_all(
        &pids,
        shared.nofile * n,
        shared.max_open as u64 * n,
        open as u64,
    );
    // Every process compiles the same rules, each regex on its first use there: the
    // most any process has seen.
    process.rule_regex_failures = shared
        .procs
        .iter()
        .map(|p| p.regex_failures.load(Ordering::Relaxed))
        .max()
        .unwrap_or(0);
    process.disks = disk_lanes(shared);
    let view = shared
        .board
        .view(totals, process, shared.generation.load(Ordering::Relaxed));
    let (body, ctype) = match form {
        Form::Html => (
            sluice_status::render::html(&view),
            "text/html; charset=utf-8",
        ),
        Form::Json => (sluice_status::render::json(&view), "application/json"),
        Form::Auto => (
            sluice_status::render::auto(&view),
            "text/plain; charset=utf-8",
        ),
        Form::Metrics { openmetrics: false } => (
            sluice_status::render::prometheus(&view, false),
            "text/plain; version=0.0.4; charset=utf-8",
        ),
        Form::Metrics { openmetrics: true } => (
            sluice_status::render::prometheus(&view, true),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
    };
    let mut r = Response::new(200);
    r.headers.add("Content-Type", ctype);
    r.headers.add_u64("Content-Length", body.len() as u64);
    r.headers.add("Cache-Control", "no-store");
    r.headers.add("X-Content-Type-Options", "nosniff");
    if matches!(form, Form::Html) {
        r.headers
            .add("Content-Security-Policy", sluice_status::render::HTML_CSP);
    }
    r.body.push(Chunk::Owned(body.into_bytes()));
    Some(r)
}

enum Form {
    Html,
    Json,
    Auto,
    Metrics { openmetrics: bool },
}

/// Each device's disk lane, summed over the serving processes: this process's
/// as of now, the others' as their workers last published them (a second ago at
/// most). Devices in the order first met.
fn disk_lanes(shared: &Shared) -> Vec<sluice_status::DiskLane> {
    if let Some(pool) = &shared.disk {
        pool.publish(shared.disk_slots);
    }
    let mut out: Vec<sluice_status::DiskLane> = Vec::new();
    for slot in shared.procs.iter().flat_map(|p| &p.disks) {
        let dev = match slot.dev.load(Ordering::Relaxed) {
            0 => continue,
            d => d - 1,
        };
        let device = crate::disk::device_name(dev);
        let i = match out.iter().position(|l| l.device == device) {
            Some(i) => i,
            None => {
                out.push(sluice_status::DiskLane {
                    device,
                    ..Default::default()
                });
                out.len() - 1
            }
        };
        out[i].waiting += u64::from(slot.waiting.load(Ordering::Relaxed));
        out[i].reading += u64::from(slot.reading.load(Ordering::Relaxed));
    }
    out
}
