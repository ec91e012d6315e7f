//! Answers kept for reuse: a worker's whole-file 200s for hot small files and its
//! redirects, keyed by the request head's exact bytes.
//!
//! The same request again (a small signature or stamp file every mirror client
//! asks for, a monitor polling a file, a page's icons, a benchmark) is answered
//! from the kept answer: no parse, no path normalization, no file-cache lookup,
//! no head assembly. What
//! is kept is the answer's head lines after `Date` (ending with the blank line),
//! the file's bytes (shared with the file cache, not copied) and what the worker
//! must still do per request (its path for the status page's top lists, the
//! access log's record of it). `bench/user_instr.sh` counts what it saves
//! (docs/BENCHMARKS.md: 4,281 → 1,550 user-space instructions per keep-alive
//! 1 KiB request, with the worker's send at once).
//!
//! Owns: the table, its bounds and its admission. Decides nothing about *which*
//! answers may be kept: an answer is offered only when its handler promised that
//! the same bytes get the same answer until a time (`Response::reuse_until`: a
//! whole small file from memory, for as long as its file-cache entry is trusted; a
//! redirect), the rules decided on the request's bytes alone, and the worker found
//! nothing else in it that depends on the connection or the clock (no conditioning
//! answer, no close). An entry is
//! used only before that time; after it the request takes the full path, which
//! revalidates the file and offers the answer again. A reload replaces the table
//! (the worker builds a new one: sites, files and its size may all differ).
//!
//! Must not: be consulted for a request conditioning holds back (the worker asks
//! only when it would answer at once), keep more than `max` entries, or keep a
//! key longer than [`MAX_KEY`] bytes.
//!
//! Cost: every request one hash of its buffer (foldhash, seeded at random per
//! worker: the keys are the clients' bytes, and a table of at most `max` entries
//! bounds what colliding keys could cost; a hit also compares the whole key),
//! and on a miss a search for the head's end and perhaps a second hash. A miss
//! then goes the full way; a cacheable
//! miss is admitted only on its second sighting (a 4,096-slot memory of hashes
//! seen once), so a scan of many files, each asked once, costs one store per
//! request and no allocation. A full table is emptied and fills again.
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

/// One kept answer. `T` is what the worker keeps beside it (the access log's
/// record of the request, the rule that decided it).
pub struct Answer<T> {
    pub status: u16,
    /// The answer's head after its `Date` line, through the blank line.
    pub lines: Box<[u8]>,
    /// The body: `bytes[start..end]` (`None` for an empty file).
    pub bytes: Option<(Rc<[u8]>, usize, usize)>,
    /// The request's path (the status page's top lists).
    pub path: Box<str>,
    pub extra: T,
}

impl<T> Answer<T> {
    pub fn body(&self) -> &[u8] {
        match &self.bytes {
            Some((d, a, b)) => &d[*a..*b],
            None => &[],
        }
    }
}

/// An answer in the table, with its key and until when it is good.
struct Slot<T> {
    key: Box<[u8]>,
    hash: u64,
    until: Instant,
    answer: Answer<T>,
}

/// Where a request head ends and its hash: what [`AnswerCache::get`] and
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
}

impl<T> AnswerCache<T> {
    /// A table of at most `max` answers (0: nothing is kept, and [`probe`] says so
    /// at once).
    ///
    /// [`probe`]: AnswerCache::probe
    pub fn new(max: usize) -> Self {
        AnswerCache {
            table: HashTable::new(),
            hasher: RandomState::default(),
            blank_line: Finder::new(b"\r\n\r\n"),
            seen: vec![0; if max > 0 { SEEN } else { 0 }].into_boxed_slice(),
            max,
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
    pub fn lookup(&self, buf: &[u8], now: Instant) -> Result<(Probe, &Answer<T>), Option<Probe>> {
        if self.max == 0 {
            return Err(None);
        }
        let whole = (buf.len() <= MAX_KEY && buf.ends_with(b"\r\n\r\n")).then(|| Probe {
            end: buf.len(),
            hash: self.hasher.hash_one(buf),
        });
        if let Some(p) = whole {
            if let Some(a) = self.get(buf, p, now) {
                return Ok((p, a));
            }
        }
        let window = &buf[..buf.len().min(MAX_KEY)];
        let end = self.blank_line.find(window).ok_or(None)? + 4;
        if whole.is_some_and(|p| p.end == end) {
            return Err(whole);
        }
        let p = Probe {
            end,
            hash: self.hasher.hash_one(&buf[..end]),
        };
        self.get(buf, p, now).map(|a| (p, a)).ok_or(Some(p))
    }

    /// The answer kept for `buf[..p.end]`, if it is still good at `now`.
    fn get(&self, buf: &[u8], p: Probe, now: Instant) -> Option<&Answer<T>> {
        let key = &buf[..p.end];
        self.table
            .find(p.hash, |s| s.hash == p.hash && *s.key == *key)
            .filter(|s| now < s.until)
            .map(|s| &s.answer)
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
            // requests; expired ones went at the last sweep).
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

    /// Drop the answers past their time (call about once a second).
    pub fn expire(&mut self, now: Instant) {
        self.table.retain(|s| s.until > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const GET: &[u8] = b"GET /f HTTP/1.1\r\nHost: a\r\n\r\n";

    fn parts(tag: &str) -> Answer<String> {
        Answer {
            status: 200,
            lines: b"X: 1\r\n\r\n"[..].into(),
            bytes: Some((Rc::from(&b"hello"[..]), 1, 4)),
            path: "/f".into(),
            extra: tag.into(),
        }
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
        assert_eq!((q, a.body(), a.extra.as_str()), (p, &b"ell"[..], "second"));
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
    fn no_key_without_a_whole_head_or_past_the_bound() {
        let c: AnswerCache<()> = AnswerCache::new(8);
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
