//! The four renderings of a [`View`]: JSON (schema in docs/STATUS.md), Apache
//! mod_status `?auto`, Prometheus text / OpenMetrics, and the HTML page.
//!
//! Labels are bounded sets (status code, state, close reason, range level); client
//! addresses and paths appear only in the JSON and HTML top lists, never as labels.

use crate::counters::{ACTIONS, STATES, TRANSFER_BOUNDS_US, TTFB_BOUNDS_US, TURN_BOUNDS_US};
use crate::View;
use serde_json::{json, Value};
use sluice_condition::CloseReason;
use std::fmt::Write;

const LEVELS: [&str; 3] = ["8", "16", "24"];

/// A histogram's bounds (counted in µs) in seconds, as the page shows them.
fn secs<const N: usize>(bounds_us: [u64; N]) -> [f64; N] {
    bounds_us.map(|us| us as f64 / 1e6)
}

pub fn json(v: &View) -> String {
    let t = &v.totals;
    let states = t.states_total();
    let conns: serde_json::Map<String, Value> = STATES
        .iter()
        .zip(states)
        .map(|(s, n)| (s.to_string(), json!(n)))
        .collect();
    let per_worker: Vec<Value> = t
        .states
        .iter()
        .map(|w| {
            Value::Object(
                STATES
                    .iter()
                    .zip(w)
                    .map(|(s, n)| (s.to_string(), json!(n)))
                    .collect(),
            )
        })
        .collect();
    let by_status: serde_json::Map<String, Value> = t
        .responses
        .iter()
        .map(|(c, n)| (c.to_string(), json!(n)))
        .collect();
    let closes: serde_json::Map<String, Value> = CloseReason::ALL
        .iter()
        .map(|r| (r.as_str().to_string(), json!(t.closes[r.index()])))
        .collect();
    let rates: serde_json::Map<String, Value> = v
        .rates
        .iter()
        .map(|r| {
            (
                format!("{}s", r.window_s),
                json!({
                    "requests": r.requests, "bytes": r.bytes, "redirects": r.redirects,
                    "rule_hits": r.rule_hits,
                    "1xx": r.classes[0], "2xx": r.classes[1], "3xx": r.classes[2],
                    "4xx": r.classes[3], "5xx": r.classes[4],
                }),
            )
        })
        .collect();
    let ranges: Vec<Value> = v
        .top
        .ranges
        .iter()
        .map(|r| {
            json!({"range": r.range, "prefix_len": LEVELS[r.level.min(2)], "open": r.open,
                   "incomplete": r.incomplete, "requests_per_s": r.req_rate,
                   "evicted_last_s": r.evicted, "refused_last_s": r.refused})
        })
        .collect();
    let urls = |l: &[(String, u64)], k: &str| -> Vec<Value> {
        l.iter().map(|(u, n)| json!({"path": u, k: n})).collect()
    };
    let hist = |bounds: &[f64], counts: &[u64], sum: f64| json!({"le": bounds, "counts": counts, "sum_seconds": sum});
    let out = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": v.uptime_s,
        "config_generation": v.config_generation,
        "requests_total": t.requests,
        "bytes_sent_total": t.bytes,
        "responses_by_status": by_status,
        "redirects_total": t.redirects(),
        "connections": conns,
        "connections_per_worker": per_worker,
        "workers": t.turn_longest_s.iter().zip(&t.cpu_wait_s).map(|(l, w)| json!({"longest_turn_seconds": l, "cpu_wait_seconds_total": w})).collect::<Vec<_>>(),
        "connections_accepted_total": t.accepted,
        "connections_closed_total": t.closed,
        "closes_by_reason": closes,
        "worker_restarts_total": t.restarts,
        "disk_waits_total": t.disk_waits,
        "disk_lookups_total": t.disk_lookups,
        "disk_retries_total": t.disk_retries,
        "disk_busy_total": t.disk_busy,
        "disk_lanes": v.process.disks.iter().map(|l| json!({"device": l.device, "waiting": l.waiting, "reading": l.reading})).collect::<Vec<_>>(),
        "listing_builds_total": t.listing_builds,
        "answers_reused_total": t.answers_reused,
        "front_attached_workers": t.front_attached,
        "defer_accept_offs_total": t.defer_offs,
        "access_log_lost_lines_total": t.log_lost,
        "rule_regex_failures_total": v.process.rule_regex_failures,
        "open_connections": v.process.open_connections,
        "max_connections": v.process.max_connections,
        "processes": v.process.processes,
        "open_fds": v.process.open_fds,
        "max_fds": v.process.max_fds,
        "resident_bytes": v.process.resident_bytes,
        "rates": rates,
        "series_per_second": v.series.iter().map(|(r, b)| json!([r, b])).collect::<Vec<_>>(),
        "top_ranges": ranges,
        "rule_actions": ACTIONS.iter().zip(t.rule_actions).map(|(a, n)| (a.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "top_rules": v.top.rules.iter().map(|r| json!({"rule": r.rule, "action": r.action, "matches": r.matches, "bytes": r.bytes})).collect::<Vec<_>>(),
        "top_urls_by_requests": urls(&v.top.urls_by_requests, "requests"),
        "top_urls_by_bytes": urls(&v.top.urls_by_bytes, "bytes"),
        "ttfb_seconds": hist(&secs(TTFB_BOUNDS_US), &t.ttfb, t.ttfb_sum_s),
        "transfer_seconds": hist(&secs(TRANSFER_BOUNDS_US), &t.transfer, t.transfer_sum_s),
        "loop_turn_seconds": hist(&secs(TURN_BOUNDS_US), &t.turn, t.turn_sum_s),
    });
    let mut s = serde_json::to_string_pretty(&out).unwrap_or_default();
    s.push('\n');
    s
}

/// Apache mod_status `?auto`: the keys its monitoring plugins read. sluice has no
/// worker per connection, so BusyWorkers counts connections with a request in
/// progress (reading or sending) and IdleWorkers idle keep-alive connections.
pub fn auto(v: &View) -> String {
    let t = &v.totals;
    let s = t.states_total();
    let up = v.uptime_s.max(1.0);
    let mut o = String::new();
    let _ = writeln!(o, "ServerVersion: sluice/{}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(o, "ServerMPM: event");
    let _ = writeln!(o, "Total Accesses: {}", t.requests);
    let _ = writeln!(o, "Total kBytes: {}", t.bytes / 1024);
    let _ = writeln!(o, "Uptime: {}", up as u64);
    let _ = writeln!(o, "ReqPerSec: {:.6}", t.requests as f64 / up);
    let _ = writeln!(o, "BytesPerSec: {:.6}", t.bytes as f64 / up);
    let per_req = if t.requests > 0 {
        t.bytes as f64 / t.requests as f64
    } else {
        0.0
    };
    let _ = writeln!(o, "BytesPerReq: {per_req:.6}");
    let _ = writeln!(o, "BusyWorkers: {}", s[0] + s[1] + s[4] + s[6]);
    let _ = writeln!(o, "IdleWorkers: {}", s[2]);
    let _ = writeln!(o, "ConnsTotal: {}", v.process.open_connections);
    let _ = writeln!(o, "ConnsAsyncWriting: {}", s[1]);
    let _ = writeln!(o, "ConnsAsyncKeepAlive: {}", s[2]);
    let _ = writeln!(o, "ConnsAsyncClosing: {}", s[3]);
    o
}

/// Prometheus exposition. `openmetrics`: the OpenMetrics 1.0 form (counter families
/// named without `_total`, `# EOF`), for scrapers that ask for it.
pub fn prometheus(v: &View, openmetrics: bool) -> String {
    let t = &v.totals;
    let mut o = String::with_capacity(8192);
    let counter = |o: &mut String, name: &str, help: &str| {
        let fam = if openmetrics {
            name.trim_end_matches("_total")
        } else {
            name
        };
        let _ = writeln!(o, "# HELP {fam} {help}");
        let _ = writeln!(o, "# TYPE {fam} counter");
    };
    let gauge = |o: &mut String, name: &str, help: &str| {
        let _ = writeln!(o, "# HELP {name} {help}");
        let _ = writeln!(o, "# TYPE {name} gauge");
    };
    if openmetrics {
        let _ = writeln!(o, "# HELP sluice_build sluice's version.");
        let _ = writeln!(o, "# TYPE sluice_build info");
    } else {
        gauge(&mut o, "sluice_build_info", "sluice's version (always 1).");
    }
    let _ = writeln!(
        o,
        "sluice_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    // The counters that are one number each (labelled families follow).
    for (name, help, val) in [
        ("sluice_requests_total", "Requests answered.", t.requests),
        ("sluice_sent_bytes_total", "Response bytes sent (heads and bodies).", t.bytes),
        ("sluice_connections_accepted_total", "Connections accepted.", t.accepted),
        ("sluice_worker_restarts_total", "Workers replaced after a panic.", t.restarts),
        ("sluice_disk_waits_total", "File ranges not in the page cache, read by the disk threads while their response waited.", t.disk_waits),
        ("sluice_disk_lookups_total", "Requests whose path or small file was not in the kernel's caches, looked up and read by the disk threads while the request waited.", t.disk_lookups),
        ("sluice_disk_retries_total", "Times a download's cold range found the disk threads' queue, or its disk's share of it, full and waited to ask again (the disk is behind).", t.disk_retries),
        ("sluice_disk_busy_total", "Lookups answered 503 disk busy: the disk threads' queue, or their disk's share of it, was full, or the lookup waited past send_timeout.", t.disk_busy),
        ("sluice_listing_builds_total", "Directory listing pages built by the listing threads.", t.listing_builds),
        ("sluice_answers_reused_total", "Requests answered from a worker's kept answers (files.answer_cache).", t.answers_reused),
        ("sluice_defer_accept_offs_total", "Times a worker switched TCP_DEFER_ACCEPT off because the kernel reported SYN-queue overflows (defer_accept = \"auto\").", t.defer_offs),
        ("sluice_access_log_lost_lines_total", "Access-log lines lost: not written (a full disk) or dropped (the disk fell behind).", t.log_lost),
        ("sluice_rule_regex_failures_total", "Rule regexes that failed to compile on first use (over the size limit); they never match.", v.process.rule_regex_failures),
    ] {
        counter(&mut o, name, help);
        let _ = writeln!(o, "{name} {val}");
    }
    counter(
        &mut o,
        "sluice_responses_total",
        "Responses by status code.",
    );
    for (c, n) in &t.responses {
        let _ = writeln!(o, "sluice_responses_total{{code=\"{c}\"}} {n}");
    }
    counter(
        &mut o,
        "sluice_connections_closed_total",
        "Connections closed, by reason.",
    );
    for r in CloseReason::ALL {
        let _ = writeln!(
            o,
            "sluice_connections_closed_total{{reason=\"{}\"}} {}",
            r.as_str(),
            t.closes[r.index()]
        );
    }
    counter(
        &mut o,
        "sluice_rule_actions_total",
        "Requests a redirect/rewrite/access rule decided, by action.",
    );
    for (a, n) in ACTIONS.iter().zip(t.rule_actions) {
        let _ = writeln!(o, "sluice_rule_actions_total{{action=\"{a}\"}} {n}");
    }
    counter(
        &mut o,
        "sluice_cpu_wait_seconds_total",
        "Time the workers were ready to run but waited for a CPU (the kernel's schedstat).",
    );
    let _ = writeln!(
        o,
        "sluice_cpu_wait_seconds_total {}",
        t.cpu_wait_s.iter().sum::<f64>()
    );
    gauge(&mut o, "sluice_connections", "Open connections by state.");
    for (s, n) in STATES.iter().zip(t.states_total()) {
        let _ = writeln!(o, "sluice_connections{{state=\"{s}\"}} {n}");
    }
    // A device label per disk lane: the devices of the sites' roots and aliases,
    // a handful.
    for (name, help, of) in [
        (
            "sluice_disk_lane_waiting",
            "Cold ranges and lookups waiting for a disk thread, by device (major:minor).",
            (|l: &crate::DiskLane| l.waiting) as fn(&crate::DiskLane) -> u64,
        ),
        (
            "sluice_disk_lane_reading",
            "Reads in progress on the disk threads, by device (major:minor).",
            |l: &crate::DiskLane| l.reading,
        ),
    ] {
        gauge(&mut o, name, help);
        for l in &v.process.disks {
            let _ = writeln!(o, "{name}{{device=\"{}\"}} {}", l.device, of(l));
        }
    }
    for (name, help, val) in [
        (
            "sluice_open_connections",
            "Open connections.",
            v.process.open_connections as f64,
        ),
        (
            "sluice_max_connections",
            "The connection limit.",
            v.process.max_connections as f64,
        ),
        (
            "sluice_processes",
            "Serving processes (server.processes) summed on this page.",
            v.process.processes as f64,
        ),
        (
            "sluice_open_fds",
            "Open file descriptors.",
            v.process.open_fds as f64,
        ),
        (
            "sluice_max_fds",
            "The descriptor limit.",
            v.process.max_fds as f64,
        ),
        (
            "sluice_resident_memory_bytes",
            "Resident memory.",
            v.process.resident_bytes as f64,
        ),
        (
            "sluice_start_time_seconds",
            "Start time, seconds since the epoch.",
            v.started_unix,
        ),
        (
            "sluice_config_generation",
            "Reloads applied since start.",
            v.config_generation as f64,
        ),
        (
            "sluice_front_attached_workers",
            "Workers connected to their sluice condition front now (serve --from; 0 otherwise).",
            t.front_attached as f64,
        ),
        (
            "sluice_loop_turn_longest_seconds",
            "The longest event-loop turn of any worker in the last second.",
            t.turn_longest_s.iter().copied().fold(0.0, f64::max),
        ),
    ] {
        gauge(&mut o, name, help);
        let _ = writeln!(o, "{name} {val}");
    }
    let hist =
        |o: &mut String, name: &str, help: &str, bounds: &[f64], counts: &[u64], sum: f64| {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} histogram");
            let mut acc = 0;
            for (b, n) in bounds.iter().zip(counts) {
                acc += n;
                let _ = writeln!(o, "{name}_bucket{{le=\"{b:?}\"}} {acc}");
            }
            acc += counts.last().copied().unwrap_or(0);
            let _ = writeln!(o, "{name}_bucket{{le=\"+Inf\"}} {acc}");
            let _ = writeln!(o, "{name}_count {acc}");
            let _ = writeln!(o, "{name}_sum {sum}");
        };
    hist(
        &mut o,
        "sluice_time_to_first_byte_seconds",
        "From the start of a request head to the first response byte sent.",
        &secs(TTFB_BOUNDS_US),
        &t.ttfb,
        t.ttfb_sum_s,
    );
    hist(
        &mut o,
        "sluice_transfer_seconds",
        "From the start of a request head to the last response byte sent.",
        &secs(TRANSFER_BOUNDS_US),
        &t.transfer,
        t.transfer_sum_s,
    );
    hist(
        &mut o,
        "sluice_loop_turn_seconds",
        "How long the workers' event-loop turns took; while one runs, the worker's other connections wait.",
        &secs(TURN_BOUNDS_US),
        &t.turn,
        t.turn_sum_s,
    );
    if openmetrics {
        o.push_str("# EOF\n");
    }
    o
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if c.is_control() => o.push('\u{fffd}'),
            c => o.push(c),
        }
    }
    o
}

/// Content-Security-Policy for the page: its own inline script and style, fetches to
/// itself, nothing else.
pub const HTML_CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'none'";

/// The HTML page: every figure is in the markup (readable without JavaScript); a
/// small inline script refetches `?format=json` every second and redraws the charts.
pub fn html(v: &View) -> String {
    let t = &v.totals;
    let mut o = String::with_capacity(16384);
    o.push_str(HEAD);
    let _ = writeln!(
        o,
        "<p>sluice {} · up <span data-k=\"uptime_seconds\">{:.0}</span> s · config generation <span data-k=\"config_generation\">{}</span> · <span data-k=\"open_fds\">{}</span> of {} descriptors · resident <span data-k=\"resident_bytes\">{}</span> bytes</p>",
        env!("CARGO_PKG_VERSION"),
        v.uptime_s,
        v.config_generation,
        v.process.open_fds,
        v.process.max_fds,
        v.process.resident_bytes
    );
    let _ = writeln!(
        o,
        "<div class=charts><figure><figcaption>requests/s (60 s)</figcaption><svg id=c-req viewBox=\"0 0 300 80\" preserveAspectRatio=none><polyline points=\"\"/></svg></figure><figure><figcaption>bytes/s (60 s)</figcaption><svg id=c-bytes viewBox=\"0 0 300 80\" preserveAspectRatio=none><polyline points=\"\"/></svg></figure></div>"
    );
    let _ = writeln!(o, "<h2>Totals</h2><table><tr><th>requests</th><td data-k=\"requests_total\">{}</td></tr><tr><th>bytes sent</th><td data-k=\"bytes_sent_total\">{}</td></tr><tr><th>redirects</th><td data-k=\"redirects_total\">{}</td></tr><tr><th>open connections</th><td data-k=\"open_connections\">{}</td><td>of {}</td></tr></table>", t.requests, t.bytes, t.redirects(), v.process.open_connections, v.process.max_connections);
    o.push_str("<h2>Rates</h2><table><tr><th>window</th><th>req/s</th><th>bytes/s</th><th>2xx</th><th>3xx</th><th>4xx</th><th>5xx</th></tr>");
    for r in &v.rates {
        let _ = write!(o, "<tr><td>{} s</td><td>{:.1}</td><td>{:.0}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td></tr>", r.window_s, r.requests, r.bytes, r.classes[1], r.classes[2], r.classes[3], r.classes[4]);
    }
    o.push_str("</table>\n<h2>Connections</h2><table><tr><th>worker</th>");
    for s in STATES {
        let _ = write!(o, "<th>{s}</th>");
    }
    o.push_str("<th>longest turn (1 s)</th><th>waited for a CPU</th></tr>");
    for (i, w) in t.states.iter().enumerate() {
        let _ = write!(o, "<tr><td>{i}</td>");
        for n in w {
            let _ = write!(o, "<td>{n}</td>");
        }
        let longest = t.turn_longest_s.get(i).copied().unwrap_or(0.0);
        let wait = t.cpu_wait_s.get(i).copied().unwrap_or(0.0);
        let _ = write!(
            o,
            "<td>{:.2} ms</td><td>{wait:.3} s</td></tr>",
            longest * 1e3
        );
    }
    o.push_str("</table>\n<h2>Responses by status</h2><table>");
    for (c, n) in &t.responses {
        let _ = write!(o, "<tr><th>{c}</th><td>{n}</td></tr>");
    }
    o.push_str("</table>\n<h2>Top address ranges</h2><table><tr><th>range</th><th>open</th><th>incomplete</th><th>req/s</th><th>evicted (1 s)</th><th>refused (1 s)</th></tr>");
    for r in v.top.ranges.iter().take(30) {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.range),
            r.open,
            r.incomplete,
            r.req_rate,
            r.evicted,
            r.refused
        );
    }
    o.push_str("</table>\n<h2>Rules</h2><table><tr><th>rule</th><th>action</th><th>matches</th><th>bytes</th></tr>");
    for (a, n) in ACTIONS.iter().zip(t.rule_actions) {
        let _ = write!(o, "<tr><td>all</td><td>{a}</td><td>{n}</td><td></td></tr>");
    }
    for r in &v.top.rules {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.rule),
            r.action,
            r.matches,
            r.bytes
        );
    }
    o.push_str("</table>\n<h2>Top URLs</h2><table><tr><th>by requests</th><th></th><th>by bytes</th><th></th></tr>");
    let n = v.top.urls_by_requests.len().max(v.top.urls_by_bytes.len());
    for i in 0..n {
        o.push_str("<tr>");
        for l in [&v.top.urls_by_requests, &v.top.urls_by_bytes] {
            match l.get(i) {
                Some((u, n)) => {
                    let _ = write!(o, "<td>{}</td><td>{n}</td>", esc(u));
                }
                None => o.push_str("<td></td><td></td>"),
            }
        }
        o.push_str("</tr>");
    }
    o.push_str("</table>\n<h2>Conditioning</h2><table>");
    for r in CloseReason::ALL {
        let _ = write!(
            o,
            "<tr><th>closed: {}</th><td>{}</td></tr>",
            r.as_str(),
            t.closes[r.index()]
        );
    }
    // The disk threads: what they read, whether the disks are behind, and
    // each device's lane now.
    let _ = write!(
        o,
        "</table>\n<h2>Disk</h2><table><tr><th>cold ranges read</th><td data-k=\"disk_waits_total\">{}</td></tr><tr><th>lookups read</th><td data-k=\"disk_lookups_total\">{}</td></tr><tr><th>ranges asked again (queue full)</th><td data-k=\"disk_retries_total\">{}</td></tr><tr><th>503 disk busy</th><td data-k=\"disk_busy_total\">{}</td></tr></table><table><tr><th>device</th><th>waiting</th><th>reading</th></tr>",
        t.disk_waits, t.disk_lookups, t.disk_retries, t.disk_busy
    );
    for l in &v.process.disks {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&l.device),
            l.waiting,
            l.reading
        );
    }
    o.push_str(
        "</table>\n<h2>Latency</h2><table><tr><th>time to first byte ≤</th><th>responses</th></tr>",
    );
    for (b, n) in secs(TTFB_BOUNDS_US).iter().zip(&t.ttfb) {
        let _ = write!(o, "<tr><td>{} ms</td><td>{n}</td></tr>", b * 1000.0);
    }
    let _ = write!(o, "<tr><td>more</td><td>{}</td></tr></table><table><tr><th>transfer ≤</th><th>responses</th></tr>", t.ttfb.last().unwrap_or(&0));
    for (b, n) in secs(TRANSFER_BOUNDS_US).iter().zip(&t.transfer) {
        let _ = write!(o, "<tr><td>{b} s</td><td>{n}</td></tr>");
    }
    let _ = writeln!(
        o,
        "<tr><td>more</td><td>{}</td></tr></table>",
        t.transfer.last().unwrap_or(&0)
    );
    o.push_str(SCRIPT);
    o.push_str("</body></html>\n");
    o
}

const HEAD: &str = "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\"><title>sluice status</title><style>body{font:14px system-ui,sans-serif;margin:1em 2em;color:#222}table{border-collapse:collapse;margin:.3em 0 1em}td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #ddd}th{text-align:left;font-weight:600}.charts{display:flex;gap:2em;flex-wrap:wrap}figure{margin:0}svg{width:300px;height:80px;background:#f6f8fa;border:1px solid #ccd}polyline{fill:none;stroke:#0366d6;stroke-width:1.5}</style></head><body data-updates=0><h1>sluice status</h1>\n";

/// Refetch the JSON every second; update every `data-k` figure and both charts.
const SCRIPT: &str = r#"<script>
(function(){
  var n=0;
  function draw(id,vals){
    var svg=document.getElementById(id), pl=svg.firstChild;
    var max=Math.max.apply(null,vals.concat([1])), w=300/Math.max(vals.length-1,1), pts=[];
    for(var i=0;i<vals.length;i++){pts.push((i*w).toFixed(1)+','+(78-76*vals[i]/max).toFixed(1));}
    pl.setAttribute('points',pts.join(' '));
    svg.setAttribute('data-points',vals.length);
  }
  function tick(){
    fetch(location.pathname+'?format=json',{cache:'no-store'}).then(function(r){return r.json();}).then(function(j){
      var els=document.querySelectorAll('[data-k]');
      for(var i=0;i<els.length;i++){var k=els[i].getAttribute('data-k'); if(k in j){var v=j[k]; els[i].textContent=typeof v==='number'&&v%1?v.toFixed(0):v;}}
      var s=j.series_per_second||[];
      draw('c-req',s.map(function(p){return p[0];}));
      draw('c-bytes',s.map(function(p){return p[1];}));
      document.body.setAttribute('data-updates',++n);
    }).catch(function(){});
  }
  tick(); setInterval(tick,1000);
})();
</script>
"#;

#[cfg(test)]
mod tests;
