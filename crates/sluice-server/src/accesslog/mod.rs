//! The access log, Apache combined format, written by its own thread, with the
//! fields `[log] fields` names after it (`request_time=`, `host=`, `length=`).
//!
//! Each worker appends lines to its own buffer and hands the buffer to the writer
//! thread when it passes 32 KiB or at least once a second. The hand-off is a
//! bounded channel with `try_send`: if the disk cannot keep up, whole buffers are
//! dropped and counted (reported by the writer, `writer.rs`, which also reports a
//! full disk), and the worker never waits.
//!
//! Cost per line: the client's address (IPv4 without `core::fmt`), the time stamp
//! (rendered once a second), and the rest of the line, whose client-sent fields are
//! escaped a run of plain bytes at a time. A kept answer's record has that rest
//! written once (`Pending::rendered_for`), so a reused answer's line is two copies.
//! `LOG=FILE bash bench/user_instr.sh` counts it (docs/BENCHMARKS.md: ~480
//! user-space instructions for a reused answer's line with a User-Agent).

use sluice_config::LogField;
use std::io::Write;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::TrySendError;
use std::time::{Duration, Instant};

mod writer;
pub use writer::{Handle, LogFile, Writer};

const FLUSH_BYTES: usize = 32 * 1024;
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// What a log line needs from the request, kept until the response is done
/// (the line records the bytes actually sent).
#[derive(Clone, Debug)]
pub struct Pending {
    /// The request line, the `Referer`, the `User-Agent` and the `Host`, one
    /// after another in one block: one allocation per request, and a kept
    /// answer's record is shared by its answers, not copied (`worker::answer`).
    text: Rc<[u8]>,
    /// Where the `Referer` starts in `text`, the `User-Agent`, and the `Host`.
    referer_at: u32,
    ua_at: u32,
    host_at: u32,
    status: u16,
    /// Which of the worker's log outputs the line goes to (`None`: the site logs
    /// nothing).
    out: Option<u8>,
    /// Appended as ` errant=NOTE` (the errant-client answer taken), if set: the
    /// line's last field, after the `[log] fields`.
    note: Option<&'static str>,
    /// The body bytes the answer had to send (the `length` field).
    length: u64,
    /// The line after its time stamp, written once for a response of this many
    /// body bytes (a kept answer's record: `Pending::rendered_for`).
    rendered: Option<(u64, Rc<[u8]>)>,
}

impl Pending {
    /// The record of `head`'s request; with `host`, its `Host` kept too (for the
    /// `host` field: [`WorkerLog::wants_host`]).
    pub fn new(
        head: &sluice_http::RequestHead,
        status: u16,
        out: Option<u8>,
        host: bool,
    ) -> Pending {
        let version = [b'0' + head.minor];
        let line: [&[u8]; 5] = [
            head.method_str.as_bytes(),
            b" ",
            head.target.as_bytes(),
            b" HTTP/1.",
            &version,
        ];
        Pending::of(
            &line,
            [
                head.referer.unwrap_or(b""),
                head.user_agent.unwrap_or(b""),
                head.host.filter(|_| host).unwrap_or("").as_bytes(),
            ],
            status,
            out,
        )
    }

    /// The request line's `parts`, then the referer, the user agent and the host,
    /// in one block allocated once (put together in a buffer the thread keeps,
    /// then copied into the block; the fields are bounded by the head's size
    /// limit).
    fn of(
        parts: &[&[u8]],
        [referer, ua, host]: [&[u8]; 3],
        status: u16,
        out: Option<u8>,
    ) -> Pending {
        thread_local!(static JOIN: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) });
        let line_len: usize = parts.iter().map(|p| p.len()).sum();
        let text: Rc<[u8]> = JOIN.with_borrow_mut(|v| {
            v.clear();
            for p in parts.iter().chain([&referer, &ua, &host]) {
                v.extend_from_slice(p);
            }
            Rc::from(&v[..])
        });
        let ua_at = line_len + referer.len();
        Pending {
            text,
            referer_at: line_len as u32,
            ua_at: ua_at as u32,
            host_at: (ua_at + ua.len()) as u32,
            status,
            out,
            note: None,
            length: 0,
            rendered: None,
        }
    }

    /// The request line, the referer and the user agent.
    fn fields(&self) -> (&[u8], &[u8], &[u8]) {
        let (r, u, h) = (
            self.referer_at as usize,
            self.ua_at as usize,
            self.host_at as usize,
        );
        (&self.text[..r], &self.text[r..u], &self.text[u..h])
    }

    /// The `Host` as sent (empty without one).
    fn host(&self) -> &[u8] {
        &self.text[self.host_at as usize..]
    }

    /// A request the parser refused (or that timed out half-sent): its first line as
    /// received, cut at [`REJECTED_LINE_MAX`] bytes, so smuggling probes and
    /// slowloris heads are visible in the log. Empty input logs as `-`.
    pub fn rejected(raw: &[u8], status: u16, out: Option<u8>) -> Pending {
        let raw = match raw.iter().position(|&b| b != b'\r' && b != b'\n') {
            Some(i) => &raw[i..],
            None => &[],
        };
        let end = memchr::memchr(b'\n', raw).unwrap_or(raw.len());
        let line = raw[..end].strip_suffix(b"\r").unwrap_or(&raw[..end]);
        let cut = &line[..line.len().min(REJECTED_LINE_MAX)];
        let more: &[u8] = match (line.len() > REJECTED_LINE_MAX, cut.is_empty()) {
            (true, _) => b"...",
            (false, true) => b"-",
            (false, false) => b"",
        };
        Pending::of(&[cut, more], [b"", b"", b""], status, out)
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    /// This record with its line after the time stamp written out for a response
    /// of `bytes` body bytes: a kept answer's record, whose every line but the
    /// client and the time is the same, escapes its fields once, not per request.
    /// A line for another byte count is written in full as ever.
    pub fn rendered_for(mut self, bytes: u64) -> Pending {
        let mut tail = Vec::new();
        self.write_tail(&mut tail, bytes);
        self.rendered = Some((bytes, tail.into()));
        self
    }

    /// The line from the request line's opening quote through the user agent's
    /// closing one (not the `[log] fields`, which differ per request, the errant
    /// note or the newline).
    fn write_tail(&self, b: &mut Vec<u8>, bytes: u64) {
        if let Some((n, tail)) = &self.rendered {
            if *n == bytes {
                b.extend_from_slice(tail);
                return;
            }
        }
        let (request_line, referer, user_agent) = self.fields();
        b.push(b'"');
        escape_into(b, request_line);
        let mut n = itoa::Buffer::new();
        b.extend_from_slice(b"\" ");
        b.extend_from_slice(n.format(self.status).as_bytes());
        b.push(b' ');
        if bytes == 0 {
            b.push(b'-');
        } else {
            b.extend_from_slice(n.format(bytes).as_bytes());
        }
        b.extend_from_slice(b" \"");
        if referer.is_empty() {
            b.push(b'-')
        } else {
            escape_into(b, referer)
        }
        b.extend_from_slice(b"\" \"");
        if user_agent.is_empty() {
            b.push(b'-')
        } else {
            escape_into(b, user_agent)
        }
        b.push(b'"');
    }

    /// ` errant=NOTE`, if an errant-client answer was taken. It ends the line,
    /// after the `[log] fields`: a parser that reads those by position (a
    /// goaccess format) then reads every line alike, and stops before it.
    fn write_note(&self, b: &mut Vec<u8>) {
        if let Some(n) = self.note {
            b.extend_from_slice(b" errant=");
            b.extend_from_slice(n.as_bytes());
        }
    }

    /// ` name=value` for each of `fields`; `took_ms` is the request's time.
    fn write_fields(&self, b: &mut Vec<u8>, fields: &[LogField], took_ms: Option<u64>) {
        for &f in fields {
            b.push(b' ');
            b.extend_from_slice(f.name().as_bytes());
            b.push(b'=');
            match f {
                LogField::RequestTime => match took_ms {
                    Some(ms) => {
                        let mut n = itoa::Buffer::new();
                        b.extend_from_slice(n.format(ms / 1000).as_bytes());
                        b.push(b'.');
                        let frac = ms % 1000;
                        b.extend_from_slice(&[
                            b'0' + (frac / 100) as u8,
                            b'0' + (frac / 10 % 10) as u8,
                            b'0' + (frac % 10) as u8,
                        ]);
                    }
                    None => b.push(b'-'),
                },
                LogField::Length => {
                    let mut n = itoa::Buffer::new();
                    b.extend_from_slice(n.format(self.length).as_bytes());
                }
                LogField::Host => {
                    b.push(b'"');
                    match self.host() {
                        [] => b.push(b'-'),
                        h => escape_into(b, h),
                    }
                    b.push(b'"');
                }
            }
        }
    }

    /// Record the errant-client answer taken (logged as ` errant=NOTE` at the
    /// end of the line, where log analysers that read combined lines ignore it).
    pub fn with_note(mut self, note: &'static str) -> Pending {
        self.note = Some(note);
        self
    }

    /// Record the body bytes the answer has to send (the `length` field).
    pub fn with_length(mut self, length: u64) -> Pending {
        self.length = length;
        self
    }

    pub fn with_status(mut self, status: u16) -> Pending {
        self.status = status;
        self.rendered = None;
        self
    }
}

/// How much of a refused request's first line the log keeps.
pub const REJECTED_LINE_MAX: usize = 256;

/// A worker's side of the logs: one buffer per log file (the main access log and
/// any per-site logs), in the order the server opened them.
pub struct WorkerLog {
    outs: Vec<Output>,
    stamp_secs: u64,
    stamp: String,
    /// `[log] fields`, from the worker's snapshot (`WorkerLog::set_fields`).
    fields: Vec<LogField>,
}

struct Output {
    path: String,
    handle: Handle,
    buf: Vec<u8>,
    /// A second after the last flush: what is buffered then goes out (a
    /// comparison per loop turn, not a subtraction of times).
    flush_by: Instant,
}

impl WorkerLog {
    /// `outs`: (path, handle) for every open log file.
    pub fn new(outs: Vec<(String, Handle)>) -> Self {
        WorkerLog {
            outs: outs
                .into_iter()
                .map(|(path, handle)| Output {
                    path,
                    handle,
                    buf: Vec::new(),
                    flush_by: Instant::now() + FLUSH_EVERY,
                })
                .collect(),
            stamp_secs: u64::MAX,
            stamp: String::new(),
            fields: Vec::new(),
        }
    }

    /// Whether lines carry the `host` field: records need the `Host` then
    /// ([`Pending::new`]), and copy none otherwise.
    pub fn wants_host(&self) -> bool {
        self.fields.contains(&LogField::Host)
    }

    /// The fields lines end with from now on (`[log] fields`: at the worker's
    /// start and each reload).
    pub fn set_fields(&mut self, fields: &[LogField]) {
        if self.fields != fields {
            self.fields = fields.to_vec();
        }
    }

    pub fn enabled(&self) -> bool {
        !self.outs.is_empty()
    }

    /// Which output writes to `path` (a site's access log), if it is open.
    pub fn index_of(&self, path: &str) -> Option<u8> {
        self.outs
            .iter()
            .position(|o| o.path == path)
            .map(|i| i as u8)
    }

    /// Append one combined-format line, stamped with the wall clock's second `secs`
    /// (the worker's `DateCache::secs`), to the output `p` was made for; the
    /// request took `took_ms` (`None`: no answer was made), for `request_time`.
    pub fn line(&mut self, secs: u64, peer: IpAddr, p: &Pending, bytes: u64, took_ms: Option<u64>) {
        let Some(out) = p.out else { return };
        if usize::from(out) >= self.outs.len() {
            return;
        }
        if secs != self.stamp_secs {
            self.stamp_secs = secs;
            self.stamp = clf_time(secs);
        }
        let o = &mut self.outs[usize::from(out)];
        let b = &mut o.buf;
        push_ip(b, peer);
        b.extend_from_slice(b" - - [");
        b.extend_from_slice(self.stamp.as_bytes());
        b.extend_from_slice(b"] ");
        p.write_tail(b, bytes);
        p.write_fields(b, &self.fields, took_ms);
        p.write_note(b);
        b.push(b'\n');
        if o.buf.len() >= FLUSH_BYTES {
            o.flush();
        }
    }

    /// When [`WorkerLog::tick`] next has lines to write out, if any are buffered:
    /// an idle worker sleeps no longer than that.
    pub fn next_flush(&self) -> Option<Instant> {
        self.outs
            .iter()
            .filter(|o| !o.buf.is_empty())
            .map(|o| o.flush_by)
            .min()
    }

    /// Called on every timer tick; flushes buffers a second old.
    pub fn tick(&mut self, now: Instant) {
        for o in &mut self.outs {
            if !o.buf.is_empty() && now >= o.flush_by {
                o.flush();
            }
        }
    }

    pub fn flush(&mut self) {
        for o in &mut self.outs {
            o.flush();
        }
    }
}

impl Output {
    fn flush(&mut self) {
        self.flush_by = Instant::now() + FLUSH_EVERY;
        if self.buf.is_empty() {
            return;
        }
        let buf = std::mem::replace(&mut self.buf, Vec::with_capacity(FLUSH_BYTES + 1024));
        if let Err(TrySendError::Full(b)) = self.handle.tx.try_send(buf) {
            self.handle.dropped.fetch_add(1, Ordering::Relaxed);
            (self.handle.lost).fetch_add(writer::lines_from(&b, 0), Ordering::Relaxed);
        }
    }
}

impl Drop for WorkerLog {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Escape a client-supplied field for the log as Apache's combined format does: `"`
/// and `\` get a backslash (`\"`, `\\`), control bytes and bytes ≥ 0x7f become `\xNN`,
/// so a request can neither forge a line nor blank its own field, and log analysers
/// (goaccess, awstats) read the fields back.
///
/// Runs of bytes that need nothing are copied whole (most fields are all of them).
fn escape_into(out: &mut Vec<u8>, mut s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    /// The bytes that need nothing, by value: one load per byte in the scan.
    const PLAIN: [bool; 256] = {
        let mut t = [false; 256];
        let mut c = 0x20;
        while c <= 0x7e {
            t[c] = c != b'"' as usize && c != b'\\' as usize;
            c += 1;
        }
        t
    };
    while !s.is_empty() {
        let n = s
            .iter()
            .position(|&c| !PLAIN[usize::from(c)])
            .unwrap_or(s.len());
        out.extend_from_slice(&s[..n]);
        let Some(&c) = s.get(n) else { break };
        match c {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', c]),
            _ => out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(c >> 4)],
                HEX[usize::from(c & 15)],
            ]),
        }
        s = &s[n + 1..];
    }
}

/// The client's address as `Display` writes it, IPv4 without the formatting
/// machinery (which cost ~900 instructions a line: docs/BENCHMARKS.md).
fn push_ip(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            let mut n = itoa::Buffer::new();
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(n.format(o).as_bytes());
            }
        }
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// `22/Nov/2026:05:49:42 +0000` (the log is in UTC).
pub fn clf_time(secs: u64) -> String {
    const MON: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil-from-days (proleptic Gregorian), H. Hinnant's algorithm.
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!(
        "{d:02}/{}/{y}:{:02}:{:02}:{:02} +0000",
        MON[(m - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests;
