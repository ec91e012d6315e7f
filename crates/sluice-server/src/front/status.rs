//! The front's own status: `[status] path` + `/front` as JSON and
//! `/front/metrics` as Prometheus text (`/server-status/front` by default),
//! answered here, to the addresses in `[status] allow`, while `[status] enabled`.
//! The page itself (`/server-status`) is the backends' and passes through to them
//! like any request; only the front knows what it holds, so its figures are its
//! own: connections by state, backends and the connections they asked for,
//! requests handed over, and every close by its reason.
//!
//! Must not: wait for anything (the answer is built from counts this process
//! already has, and sent once, best effort, before the connection closes). Cost: a
//! path comparison per complete request; a status request walks the connection
//! table once.

use super::*;
use sluice_http::RequestHead;
use std::fmt::Write as _;

/// Which form of the front's status a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    Json,
    Metrics,
}

impl StatusAt {
    pub fn of(s: &sluice_config::StatusSection) -> Result<Option<StatusAt>, String> {
        if !s.enabled {
            return Ok(None);
        }
        Ok(Some(StatusAt {
            path: format!("{}/front", s.path.trim_end_matches('/')),
            allow: Cidr::parse_list(&s.allow, "status.allow")?,
        }))
    }

    /// The form `head` asks for, if it asks for the front's status and `peer` may
    /// see it (anyone else's request for the path goes on to a backend).
    pub fn form(&self, head: &RequestHead, peer: std::net::IpAddr) -> Option<Form> {
        let form = match head.path.strip_prefix(self.path.as_str())? {
            "" if head.query == Some("format=json") || head.query.is_none() => Form::Json,
            "/metrics" => Form::Metrics,
            _ => return None,
        };
        self.allow.iter().any(|c| c.contains(peer)).then_some(form)
    }
}

/// What the front holds and has done, counted at the moment of asking.
struct Figures {
    reading: u64,
    ready: u64,
    at_backends: u64,
    idle: u64,
    backends: u64,
    asked: u64,
}

impl Front {
    /// Answer a status request on connection `key` and close it.
    pub(super) fn answer_status(&mut self, key: usize, form: Form) {
        let body = match form {
            Form::Json => self.status_json(),
            Form::Metrics => self.status_metrics(),
        };
        let kind = match form {
            Form::Json => "application/json",
            Form::Metrics => "text/plain; version=0.0.4",
        };
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nCache-Control: no-store\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        clients::send_best_effort(&self.conns[key].sock, answer.as_bytes());
        self.close(key, CloseReason::Done);
    }

    fn figures(&self) -> Figures {
        let mut f = Figures {
            reading: 0,
            ready: 0,
            at_backends: 0,
            idle: 0,
            backends: self.backends.len() as u64,
            asked: self.backends.iter().map(|(_, b)| u64::from(b.credit)).sum(),
        };
        for (_, c) in self.conns.iter() {
            match c.st {
                St::Reading => f.reading += 1,
                St::Ready => f.ready += 1,
                St::Backend(_) => f.at_backends += 1,
                St::Idle => f.idle += 1,
            }
        }
        // Not the status request's own connection, read and being answered.
        f.reading = f.reading.saturating_sub(1);
        f
    }

    fn status_json(&self) -> String {
        let f = self.figures();
        let mut s = format!(
            "{{\"pid\":{},\"uptime_seconds\":{},\"max_connections\":{},\"connections\":{{\"reading\":{},\"ready\":{},\"at_backends\":{},\"idle\":{}}},\"backends\":{},\"backends_asked\":{},\"handed_total\":{},\"adopted_total\":{},\"closes_total\":{{",
            std::process::id(),
            self.epoch.elapsed().as_secs(),
            self.max_conns,
            f.reading,
            f.ready,
            f.at_backends,
            f.idle,
            f.backends,
            f.asked,
            self.handed,
            self.adopted,
        );
        for (i, r) in CloseReason::ALL.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(s, "{sep}\"{}\":{}", r.as_str(), self.closes[r.index()]);
        }
        s.push_str("}}\n");
        s
    }

    fn status_metrics(&self) -> String {
        let f = self.figures();
        let mut s = String::new();
        let mut one = |name: &str, help: &str, kind: &str, v: u64| {
            let _ = write!(
                s,
                "# HELP sluice_front_{name} {help}\n# TYPE sluice_front_{name} {kind}\nsluice_front_{name} {v}\n"
            );
        };
        one(
            "max_connections",
            "Connections the front holds at most.",
            "gauge",
            self.max_conns as u64,
        );
        one(
            "backends",
            "Backend connections on the Unix socket.",
            "gauge",
            f.backends,
        );
        one(
            "backends_asked",
            "Connections the backends have asked for and not been given.",
            "gauge",
            f.asked,
        );
        one(
            "handed_total",
            "Requests handed to a backend.",
            "counter",
            self.handed,
        );
        one(
            "adopted_total",
            "Connections taken from the front before an upgrade.",
            "counter",
            self.adopted,
        );
        s.push_str("# HELP sluice_front_connections Connections the front holds, by state.\n# TYPE sluice_front_connections gauge\n");
        for (state, v) in [
            ("reading", f.reading),
            ("ready", f.ready),
            ("at_backends", f.at_backends),
            ("idle", f.idle),
        ] {
            let _ = writeln!(s, "sluice_front_connections{{state=\"{state}\"}} {v}");
        }
        s.push_str("# HELP sluice_front_closes_total Connections closed (or refused) here, by reason.\n# TYPE sluice_front_closes_total counter\n");
        for r in CloseReason::ALL {
            let _ = writeln!(
                s,
                "sluice_front_closes_total{{reason=\"{}\"}} {}",
                r.as_str(),
                self.closes[r.index()]
            );
        }
        s
    }
}
