//! Answers kept for reuse: a worker's whole-file 200s for hot small files (the
//! precompressed sibling a client's `Accept-Encoding` chose included), its 304s and
//! HEAD answers, indexes, listings, 404s and redirects, keyed by the request head's
//! exact bytes.
//!
//! The same request again (a small signature or stamp file every mirror client
//! asks for, a monitor polling a file, a page's icons, a benchmark) is answered
//! from the kept answer: no parse, no path normalization, no file-cache lookup,
//! no head assembly, no copy. What is kept is the answer as it is sent (its whole
//! head, its `Date` value brought up to the clock's in place once a second, and a
//! body of at most [`INLINE_MAX`] bytes after it; a longer body stays shared with
//! the file cache and goes out beside the head) and what the worker must still do
//! per request (its path for the status page's top lists, the access log's record
//! of it, the rule that decided it). `bench/user_instr.sh` counts what it saves
//! (docs/BENCHMARKS.md: 4,281 → 1,550 user-space instructions per keep-alive
//! 1 KiB request with the worker's send at once, 1,279 sent from where it is kept).
//!
//! Memory: at most `max` keys of at most [`MAX_KEY`] bytes, `max` heads, and
//! `max` × [`INLINE_MAX`] of copied bodies (4 MiB per worker at the default 1,024);
//! a longer body is the file cache's (or a listing page, no larger than a file
//! kept in memory: `files.small_file_max`), held at most until the answer expires.
//!
//! Owns: the table, its bounds and its admission. Decides nothing about *which*
//! answers may be kept: an answer is offered only when its handler promised that
//! the same bytes get the same answer until a time (`Response::reuse_until`: a
//! whole small file from memory, a 304, a whole file's head for a HEAD, an index,
//! a listing, a 404, each for as long as every file-cache entry (or listing page)
//! it read is trusted; a redirect), the rules decided on the
//! request's bytes alone, and the worker found nothing else in it that depends on
//! the connection or the clock (no conditioning answer, no close the server
//! decided; a close the client asked for is kept, and the worker closes after it).
//! An entry is used only before that time; after it the request takes the full
//! path, which revalidates the file and offers the answer again. A reload replaces
//! the table (the worker builds a new one: sites, files and its size may all
//! differ).
//!
//! Must not: be consulted for a request conditioning holds back (the worker asks
//! only when it would answer at once), keep more than `max` entries, or keep a
//! key longer than [`MAX_KEY`] bytes.
//!
//! Cost: every request one hash of its buffer (foldhash, seeded at random per
//! worker: the keys are the clients' bytes, and a table of at most `max` entries
//! bounds what colliding keys could cost; a hit also compares the whole key), or
//! none when its length is the last hit's and its bytes are that hit's key (the
//! last hit's hash is tried first: the same head asked again and again, as a
//! monitor or a benchmark asks, costs a probe and a comparison),
//! and on a miss a search for the head's end and perhaps a second hash. A miss
//! then goes the full way; a cacheable miss is admitted only on its second
//! sighting (a 4,096-slot memory of hashes seen once), so a scan of many files,
//! each asked once, costs one store per request and no allocation. A full table
//! is emptied and fills again.
//!
//! When the heads asked for again and again are more than the table holds (a
//! browser's requests for 10,000 files, each head its own), filling and emptying
//! builds an answer for a quarter of the requests and reuses few (14.13 µs of
//! server CPU per request against 12.48 with no table; docs/BENCHMARKS.md). So a
//! table emptied with fewer hits since it was last emptied than it has entries
//! halves the share of heads it admits, chosen by hash: the same share every time,
//! so the ones admitted stay and are hit (13.08 µs). The share doubles again once
//! a second while the table is less than half full ([`AnswerCache::expire`]).
//!
//! Written here, not taken from a crate: the cache crates key by owned values and
//! evict by recency with locks or per-entry bookkeeping; this table is per worker
//! (no locks), its entries expire by the file cache's own clock, and its lookup
//! borrows the request's bytes where they lie.

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use memchr::memmem::Finder;
use std::hash::BuildHasher;
use std::rc::Rc;
use std::time::Instant;

/// Longest request head kept as a key.
pub const MAX_KEY: usize = 2048;
/// Slots in the memory of hashes seen once (admission on the second sighting).
const SEEN: usize = 4096;

/// Bodies up to this size are kept inside the answer's own bytes, after its head,
/// so that the whole answer goes out from where it lies, with no copy per
/// request; a longer body stays shared with the file cache and is sent beside
/// the head. (So a table holds at most `max` × 4 KiB of copied bodies.)
pub const INLINE_MAX: usize = 4096;

/// One kept answer. `T` is what the worker keeps beside it (the access log's
/// record of the request, the rule that decided it).
pub struct Answer<T> {
    pub status: u16,
    /// The answer as it goes out: its whole head (its `Date` value at `date`),
    /// then its body when that is at most [`INLINE_MAX`] bytes.
    wire: Box<[u8]>,
    date: std::ops::Range<usize>,
    /// The second the `Date` value in `wire` says (`u64::MAX`: not known).
    date_secs: u64,
    head_len: usize,
    /// A longer body: `bytes[start..end]`, shared.
    rest: Option<(Rc<[u8]>, usize, usize)>,
    /// The request's path (the status page's top lists).
    pub path: Box<str>,
    pub extra: T,
}

impl<T> Answer<T> {
    /// An answer from its whole `head` (through the blank line; its `Date` value
    /// at `date`) and its body (`bytes[start..end]`, `None` for none).
    pub fn new(
        status: u16,
        head: Vec<u8>,
        date: std::ops::Range<usize>,
        body: Option<(Rc<[u8]>, usize, usize)>,
        path: Box<str>,
        extra: T,
    ) -> Self {
        let head_len = head.len();
        let mut wire = head;
        let rest = match body {
            Some((d, a, b)) if b - a <= INLINE_MAX => {
                wire.extend_from_slice(&d[a..b]);
                None
            }
            other => other,
        };
        Answer {
            status,
            wire: wire.into(),
            date,
            date_secs: u64::MAX,
            head_len,
            rest,
            path,
            extra,
        }
    }

    /// Put the clock's `Date` value (`date`, which says second `secs`) in the
    /// kept head, when the kept one says another second (once a second at most;
    /// one comparison otherwise).
    pub fn set_date(&mut self, secs: u64, date: &[u8]) {
        if secs == self.date_secs {
            return;
        }
        if let Some(d) = self.wire.get_mut(self.date.clone()) {
            if d.len() == date.len() {
                d.copy_from_slice(date);
                self.date_secs = secs;
            }
        }
    }

    /// What goes out: the kept bytes (the head, and the body when it is inline),
    /// and the shared body after them (empty when inline).
    pub fn wire(&self) -> (&[u8], &[u8]) {
        let rest = match &self.rest {
            Some((d, a, b)) => &d[*a..*b],
            None => &[],
        };
        (&self.wire, rest)
    }

    pub fn head_len(&self) -> usize {
        self.head_len
    }

    pub fn body_len(&self) -> usize {
        let (w, rest) = self.wire();
        w.len() - self.head_len + rest.len()
    }
}

/// An answer in the table, with its key and until when it is good.
struct Slot<T> {
    key: Box<[u8]>,
    hash: u64,
    until: Instant,
    answer: Answer<T>,
}

/// The answer kept for `buf[..p.end]` if it is still good at `now`; else the
/// table back, for another look.
fn find<'a, T>(
    table: &'a mut HashTable<Slot<T>>,
    buf: &[u8],
    p: Probe,
    now: Instant,
) -> Result<&'a mut Answer<T>, &'a mut HashTable<Slot<T>>> {
    let key = &buf[..p.end];
    match table.find_entry(p.hash, |s| s.hash == p.hash && *s.key == *key) {
        Ok(e) if now < e.get().until => Ok(&mut e.into_mut().answer),
        Ok(e) => Err(e.into_table()),
        Err(e) => Err(e.into_table()),
    }
}

/// Where a request head ends and its hash: what [`AnswerCache::lookup`] and
/// [`AnswerCache::offer`] are given, computed once per request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub end: usize,
    pub hash: u64,
}

pub struct AnswerCache<T> {
    table: HashTable<Slot<T>>,
    hasher: RandomState,
    /// The search for a head's end (`\r\n\r\n`), built once.
    blank_line: Finder<'static>,
    /// Hashes of cacheable answers seen once (`0`: empty).
    seen: Box<[u64]>,
    max: usize,
    /// Answers reused since the table was last emptied.
    hits: u64,
    /// One head in this many (a power of two, by hash) may be admitted.
    stride: u64,
    /// The hash and length of the last whole buffer answered from the table
    /// (length 0: none). A buffer of that length is looked up with that hash
    /// first: where a client, or several, ask the same thing again and again (a
    /// monitor, a signature file, a benchmark) the hash is not computed again.
    /// The table's own comparison of the whole key makes this safe: a slot
    /// found under the remembered hash with exactly these bytes as its key is
    /// these bytes' slot. Where the bytes differ, one probe is wasted.
    last: (u64, usize),
}

/// The smallest share of heads admitted: one in this many.
const MAX_STRIDE: u64 = 64;

impl<T> AnswerCache<T> {
    /// A table of at most `max` answers (0: nothing is kept, and [`lookup`] says
    /// so at once).
    ///
    /// [`lookup`]: AnswerCache::lookup
    pub fn new(max: usize) -> Self {
        AnswerCache {
            table: HashTable::new(),
            hasher: RandomState::default(),
            blank_line: Finder::new(b"\r\n\r\n"),
            seen: vec![0; if max > 0 { SEEN } else { 0 }].into_boxed_slice(),
            hits: 0,
            stride: 1,
            max,
            last: (0, 0),
        }
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The answer kept for the request head at the start of `buf`, if one is good
    /// at `now`, with where the head ends; else where it ends and its hash, for
    /// [`offer`] (`None`: no whole head, one longer than a key may be, or nothing
    /// kept).
    ///
    /// Most buffers hold one whole head and nothing more, so the whole buffer is
    /// tried first: a kept key has exactly one blank line, at its end, so a buffer
    /// equal to one is exactly one head. Only when that finds nothing is the
    /// first blank line searched for (pipelined requests; a miss).
    ///
    /// [`offer`]: AnswerCache::offer
    pub fn lookup(
        &mut self,
        buf: &[u8],
        now: Instant,
    ) -> Result<(Probe, &mut Answer<T>), Option<Probe>> {
        if self.max == 0 {
            return Err(None);
        }
        let AnswerCache {
            table,
            hasher,
            blank_line,
            hits,
            last,
            ..
        } = self;
        let whole = buf.len() <= MAX_KEY && buf.ends_with(b"\r\n\r\n");
        let mut table = table;
        if whole && buf.len() == last.1 {
            let p = Probe {
                end: buf.len(),
                hash: last.0,
            };
            match find(table, buf, p, now) {
                Ok(a) => {
                    *hits += 1;
                    return Ok((p, a));
                }
                Err(t) => table = t,
            }
        }
        let whole = whole.then(|| Probe {
            end: buf.len(),
            hash: hasher.hash_one(buf),
        });
        let table = match whole {
            Some(p) => match find(table, buf, p, now) {
                Ok(a) => {
                    *hits += 1;
                    *last = (p.hash, p.end);
                    return Ok((p, a));
                }
                Err(table) => table,
            },
            None => table,
        };
        let window = &buf[..buf.len().min(MAX_KEY)];
        let end = blank_line.find(window).ok_or(None)? + 4;
        if whole.is_some_and(|p| p.end == end) {
            return Err(whole);
        }
        let p = Probe {
            end,
            hash: hasher.hash_one(&buf[..end]),
        };
        let a = find(table, buf, p, now).map_err(|_| Some(p))?;
        *hits += 1;
        Ok((p, a))
    }

    /// Offer the answer to `buf[..p.end]`, good until `until`: kept if this head
    /// was offered before (its hash is in the memory of heads seen once), else
    /// remembered. `make` builds the entry's parts only when it is kept.
    pub fn offer(
        &mut self,
        buf: &[u8],
        p: Probe,
        until: Instant,
        now: Instant,
        make: impl FnOnce() -> Answer<T>,
    ) {
        if self.max == 0 || until <= now || p.end > buf.len() {
            return;
        }
        // Outside the share admitted (by the hash's high half; the table's slot
        // is chosen by its low bits).
        if (p.hash >> 32) & (self.stride - 1) != 0 {
            return;
        }
        let mark = p.hash | 1;
        let seen = &mut self.seen[p.hash as usize % SEEN];
        if *seen != mark {
            *seen = mark;
            return;
        }
        *seen = 0;
        let key = &buf[..p.end];
        if let Some(s) = self
            .table
            .find_mut(p.hash, |s| s.hash == p.hash && *s.key == *key)
        {
            // Kept before and expired: the same head, answered again.
            s.until = until;
            s.answer = make();
            return;
        }
        if self.table.len() >= self.max {
            // Full: start again (the hot answers come back on their next two
            // requests; expired ones went at the last sweep). Fewer reuses than
            // entries: the heads do not fit, admit half as many (module doc).
            if self.hits < self.table.len() as u64 {
                self.stride = (self.stride * 2).min(MAX_STRIDE);
            }
            self.hits = 0;
            self.table.clear();
        }
        let slot = Slot {
            key: key.into(),
            hash: p.hash,
            until,
            answer: make(),
        };
        let hasher = &self.hasher;
        self.table
            .insert_unique(p.hash, slot, |s| hasher.hash_one(&s.key[..]));
    }

    /// Drop the answers past their time (call about once a second), and admit
    /// twice the share of heads if the table is less than half full.
    pub fn expire(&mut self, now: Instant) {
        self.table.retain(|s| s.until > now);
        if self.stride > 1 && self.table.len() < self.max / 2 {
            self.stride /= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const GET: &[u8] = b"GET /f HTTP/1.1\r\nHost: a\r\n\r\n";

    fn parts(tag: &str) -> Answer<String> {
        let head = b"HTTP/1.1 200 OK\r\nDate: Thu, 26 Nov 2026 05:00:00 GMT\r\n\r\n".to_vec();
        let body = Some((Rc::from(&b"hello"[..]), 1, 4));
        Answer::new(200, head, 23..52, body, "/f".into(), tag.into())
    }

    /// Offer each of `n` heads twice (its second sighting admits it), then look
    /// it up `reuses` times: how many answers were built.
    fn round(c: &mut AnswerCache<String>, n: usize, reuses: usize, now: Instant) -> usize {
        let until = now + Duration::from_secs(60);
        let mut built = 0;
        for k in 0..n {
            let head = format!("GET /f{k} HTTP/1.1\r\nHost: a\r\n\r\n");
            let buf = head.as_bytes();
            let Err(Some(p)) = c.lookup(buf, now) else {
                continue;
            };
            for _ in 0..2 {
                c.offer(buf, p, until, now, || {
                    built += 1;
                    parts("x")
                });
            }
            for _ in 0..reuses {
                let _ = c.lookup(buf, now);
            }
        }
        built
    }

    #[test]
    fn heads_that_do_not_fit_are_admitted_by_a_shrinking_share() {
        let now = Instant::now();
        // 128 heads through a table of 8, never reused: each time the table is
        // emptied, half the share, until the heads admitted fit and stay. (Which
        // heads are admitted follows the hash's random seed: with 256 heads, more
        // than 8 of them fell in the smallest share, 1 in 64, in ~2% of runs, and
        // the test failed once in the suite; with 128, ~0.03% by simulation.)
        let mut c = AnswerCache::new(8);
        let first = round(&mut c, 128, 0, now);
        for _ in 0..4 {
            round(&mut c, 128, 0, now);
        }
        let later = round(&mut c, 128, 0, now);
        assert!(first >= 24 && later == 0, "built {first}, then {later}");
        let stride = c.stride;
        assert!(stride >= 8, "one head in {stride}");
        // Once a second, a table less than half full admits twice the share.
        c.table.clear();
        c.expire(now);
        assert_eq!(c.stride, stride / 2);
        // Heads reused more often than there are entries keep the whole share,
        // though they too overflow the table.
        let mut c = AnswerCache::new(8);
        for _ in 0..4 {
            assert_eq!(round(&mut c, 32, 3, now), 32);
        }
        assert_eq!(c.stride, 1);
    }

    #[test]
    fn the_kept_bytes_are_the_answer_with_the_clocks_date() {
        let mut a = parts("x");
        let (w, rest) = a.wire();
        assert!(w.ends_with(b"GMT\r\n\r\nell") && rest.is_empty());
        assert_eq!((a.head_len(), a.body_len()), (w.len() - 3, 3));
        a.set_date(1, b"Thu, 26 Nov 2026 05:00:01 GMT");
        a.set_date(1, b"Thu, 26 Nov 2026 05:00:02 GMT"); // the same second: kept
        assert_eq!(
            a.wire().0,
            b"HTTP/1.1 200 OK\r\nDate: Thu, 26 Nov 2026 05:00:01 GMT\r\n\r\nell"
        );
        // A body past the inline bound stays shared, sent beside the head.
        let big: Rc<[u8]> = vec![7u8; INLINE_MAX + 1].into();
        let a: Answer<()> = Answer::new(
            200,
            b"H\r\n\r\n".to_vec(),
            0..0,
            Some((big, 0, INLINE_MAX + 1)),
            "/b".into(),
            (),
        );
        assert_eq!(a.wire().0, b"H\r\n\r\n");
        assert_eq!(
            (a.wire().1.len(), a.body_len()),
            (INLINE_MAX + 1, INLINE_MAX + 1)
        );
    }

    #[test]
    fn kept_on_the_second_offer_and_found_by_the_same_bytes_only() {
        let now = Instant::now();
        let until = now + Duration::from_secs(1);
        let mut c: AnswerCache<String> = AnswerCache::new(8);
        let mut buf = GET.to_vec();
        buf.extend_from_slice(b"GET /next"); // a pipelined request behind it
        let p = c.lookup(&buf, now).err().flatten().unwrap();
        assert_eq!(p.end, GET.len());
        c.offer(&buf, p, until, now, || parts("first"));
        assert!(c.lookup(&buf, now).is_err(), "kept on its first offer");
        c.offer(&buf, p, until, now, || parts("second"));
        let Ok((q, a)) = c.lookup(&buf, now) else {
            panic!("kept on its second offer")
        };
        assert_eq!((q, a.body_len(), a.extra.as_str()), (p, 3, "second"));
        // Alone in the buffer, or before a whole second head: the same answer.
        assert!(c.lookup(GET, now).is_ok());
        assert!(c
            .lookup(&GET.repeat(2), now)
            .is_ok_and(|(q, _)| q.end == GET.len()));
        // One byte different (the Host's case) is another key.
        assert!(c
            .lookup(b"GET /f HTTP/1.1\r\nHost: A\r\n\r\n", now)
            .is_err());
        // Good only before its time.
        assert!(c.lookup(&buf, until).is_err());
        c.expire(until);
        assert!(c.is_empty());
    }

    #[test]
    fn heads_of_the_same_length_asked_in_turn_each_find_their_own_answer() {
        let now = Instant::now();
        let until = now + Duration::from_secs(1);
        let mut c: AnswerCache<String> = AnswerCache::new(8);
        let a = b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n";
        let b = b"GET /b HTTP/1.1\r\nHost: a\r\n\r\n";
        for (head, tag) in [(&a[..], "a"), (&b[..], "b")] {
            let p = c.lookup(head, now).err().flatten().unwrap();
            assert_eq!(p.hash, c.hasher.hash_one(head));
            c.offer(head, p, until, now, || parts(tag));
            c.offer(head, p, until, now, || parts(tag));
        }
        // The remembered hash is the last one answered's; the other head, of the
        // same length, misses it and is found by its own.
        for (head, tag) in [(a, "a"), (a, "a"), (b, "b"), (a, "a"), (b, "b"), (b, "b")] {
            let want = c.hasher.hash_one(head);
            let Ok((p, ans)) = c.lookup(head, now) else {
                panic!("{tag} kept")
            };
            assert_eq!((p.hash, ans.extra.as_str()), (want, tag));
        }
        // A head of that length that is not kept gets its own hash, for an offer.
        let x = b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n";
        let want = c.hasher.hash_one(x);
        assert_eq!(c.lookup(x, now).err().flatten().unwrap().hash, want);
        // An expired answer is not served through the remembered hash either.
        assert!(c.lookup(b, until).is_err());
    }

    #[test]
    fn no_key_without_a_whole_head_or_past_the_bound() {
        let mut c: AnswerCache<()> = AnswerCache::new(8);
        let now = Instant::now();
        assert!(matches!(
            c.lookup(b"GET /f HTTP/1.1\r\nHost: a\r\n", now),
            Err(None)
        ));
        let mut long = b"GET /f HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_KEY, b'a');
        long.extend_from_slice(b"\r\n\r\n");
        assert!(matches!(c.lookup(&long, now), Err(None)));
        assert!(matches!(
            AnswerCache::<()>::new(0).lookup(GET, now),
            Err(None)
        ));
    }

    #[test]
    fn a_full_table_starts_again_and_a_stale_promise_is_refused() {
        let now = Instant::now();
        let until = now + Duration::from_secs(1);
        let mut c: AnswerCache<String> = AnswerCache::new(2);
        for i in 0..3 {
            let req = format!("GET /{i} HTTP/1.1\r\n\r\n").into_bytes();
            let p = c.lookup(&req, now).err().flatten().unwrap();
            c.offer(&req, p, until, now, || parts("x"));
            c.offer(&req, p, until, now, || parts("x"));
        }
        assert_eq!(
            c.len(),
            1,
            "the third answer found the table full and emptied it"
        );
        let req = b"GET /late HTTP/1.1\r\n\r\n";
        let p = c.lookup(req, now).err().flatten().unwrap();
        c.offer(req, p, now, now, || parts("x"));
        c.offer(req, p, now, now, || parts("x"));
        assert!(c.lookup(req, now).is_err());
    }
}
