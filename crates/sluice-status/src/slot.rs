//! Where a worker publishes its top list so that every serving process can read it:
//! a fixed-size [`TopSlot`] per worker, in memory the server shares between its
//! processes (`server.processes`), written once a second by its worker and read when
//! the status page is.
//!
//! What it owns: the slot's layout (a sequence word and 64 KiB of data words), the
//! list's byte encoding, and the sequence lock that keeps a reader from seeing half a
//! write. What it must not do: hold a pointer, a lock a dead process could leave
//! held, or anything that is not an atomic: a serving process that dies mid-write
//! leaves the sequence odd, and readers then take the slot as empty (bounded retries)
//! until the restarted worker writes it again.
//! Cost: once a second per worker, encoding ~a few KiB and storing it word by word;
//! nothing on the request path.
//!
//! Written here rather than with a serialisation crate: the format is a dozen
//! length-prefixed fields copied into atomics, and no crate writes into a seqlock.

use crate::top::{RangeRow, RuleRow, TopList};
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Data words per slot (64 KiB). A list that encodes longer loses its last rows.
pub const SLOT_WORDS: usize = 8192;
/// URLs and rule names are cut to this many bytes when published.
pub const MAX_NAME: usize = 512;

/// One worker's published list. Zeroed memory is a valid, empty slot.
#[repr(C)]
pub struct TopSlot {
    /// Even: stable; odd: a write is under way. Bumped twice per write.
    seq: AtomicU64,
    /// Bytes of encoded list in `data`.
    len: AtomicU64,
    data: [AtomicU64; SLOT_WORDS],
}

impl TopSlot {
    /// `n` slots on the heap, for a server (or a test) without shared memory.
    pub fn leak(n: usize) -> &'static [TopSlot] {
        let v: Vec<TopSlot> = (0..n)
            .map(|_| TopSlot {
                seq: AtomicU64::new(0),
                len: AtomicU64::new(0),
                data: std::array::from_fn(|_| AtomicU64::new(0)),
            })
            .collect();
        Vec::leak(v)
    }

    /// Publish `list` (one writer per slot: its worker).
    pub fn write(&self, list: &TopList) {
        let bytes = encode(list);
        // A writer that died mid-write left `seq` odd: continue from there.
        let s = self.seq.load(Ordering::Relaxed) | 1;
        self.seq.store(s, Ordering::Relaxed);
        fence(Ordering::Release);
        for (w, chunk) in self.data.iter().zip(bytes.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            w.store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
        self.len.store(bytes.len() as u64, Ordering::Relaxed);
        self.seq.store(s + 1, Ordering::Release);
    }

    /// The last list published, or an empty one if none was or a write is under way
    /// (after a few tries).
    pub fn read(&self) -> TopList {
        for _ in 0..8 {
            let s = self.seq.load(Ordering::Acquire);
            if s & 1 == 1 {
                std::thread::yield_now();
                continue;
            }
            let len = (self.len.load(Ordering::Relaxed) as usize).min(SLOT_WORDS * 8);
            let mut bytes = Vec::with_capacity(len.next_multiple_of(8));
            for w in &self.data[..len.div_ceil(8)] {
                bytes.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s {
                bytes.truncate(len);
                return decode(&bytes).unwrap_or_default();
            }
        }
        TopList::default()
    }
}

/// The encoding: each list is a u32 count of rows, each row its fields in order;
/// strings are a u16 length and bytes, numbers little-endian u64 (f64 as its bits).
/// Each of the four lists gets a quarter of the slot (room for all a worker publishes,
/// even at the longest names); rows past that are left off (the count says how many
/// are there).
fn encode(l: &TopList) -> Vec<u8> {
    let quarter = SLOT_WORDS * 8 / 4;
    let mut out = Vec::with_capacity(4096);
    let str_len = |s: &str| 2 + cut(s).len();
    let put_str = |o: &mut Vec<u8>, s: &str| {
        let s = cut(s);
        o.extend_from_slice(&(s.len() as u16).to_le_bytes());
        o.extend_from_slice(s.as_bytes());
    };
    let put = |o: &mut Vec<u8>, n: u64| o.extend_from_slice(&n.to_le_bytes());
    // One list: its count is patched once we know how many rows fit.
    fn list<T>(
        out: &mut Vec<u8>,
        room: usize,
        rows: &[T],
        size: impl Fn(&T) -> usize,
        mut row: impl FnMut(&mut Vec<u8>, &T),
    ) {
        let at = out.len();
        out.extend_from_slice(&0u32.to_le_bytes());
        let mut n = 0u32;
        for r in rows {
            if out.len() - at + size(r) > room {
                break;
            }
            row(out, r);
            n += 1;
        }
        out[at..at + 4].copy_from_slice(&n.to_le_bytes());
    }
    let url = |o: &mut Vec<u8>, (k, n): &(String, u64)| {
        put_str(o, k);
        put(o, *n);
    };
    list(
        &mut out,
        quarter,
        &l.urls_by_requests,
        |(k, _)| str_len(k) + 8,
        url,
    );
    list(
        &mut out,
        quarter,
        &l.urls_by_bytes,
        |(k, _)| str_len(k) + 8,
        url,
    );
    list(
        &mut out,
        quarter,
        &l.ranges,
        |r| str_len(&r.range) + 6 * 8,
        |o, r| {
            put_str(o, &r.range);
            put(o, r.level as u64);
            put(o, r.open);
            put(o, r.incomplete);
            put(o, r.req_rate.to_bits());
            put(o, r.evicted);
            put(o, r.refused);
        },
    );
    list(
        &mut out,
        quarter,
        &l.rules,
        |r| str_len(&r.rule) + str_len(r.action) + 16,
        |o, r| {
            put_str(o, &r.rule);
            put_str(o, r.action);
            put(o, r.matches);
            put(o, r.bytes);
        },
    );
    out
}

/// At most [`MAX_NAME`] bytes of `s`, cut on a character boundary.
fn cut(s: &str) -> &str {
    if s.len() <= MAX_NAME {
        return s;
    }
    let mut end = MAX_NAME;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn string(&mut self) -> Option<String> {
        let n = u16::from_le_bytes(self.take(2)?.try_into().ok()?);
        Some(String::from_utf8_lossy(self.take(usize::from(n))?).into_owned())
    }
    fn rows<T>(&mut self, mut row: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let n = self.u32()?;
        (0..n).map(|_| row(self)).collect()
    }
}

fn decode(b: &[u8]) -> Option<TopList> {
    let mut r = Reader(b);
    let url = |r: &mut Reader| Some((r.string()?, r.u64()?));
    Some(TopList {
        urls_by_requests: r.rows(url)?,
        urls_by_bytes: r.rows(url)?,
        ranges: r.rows(|r| {
            Some(RangeRow {
                range: r.string()?,
                level: r.u64()? as usize,
                open: r.u64()?,
                incomplete: r.u64()?,
                req_rate: f64::from_bits(r.u64()?),
                evicted: r.u64()?,
                refused: r.u64()?,
            })
        })?,
        rules: r.rows(|r| {
            let rule = r.string()?;
            let action = r.string()?;
            Some(RuleRow {
                rule,
                // Actions are the fixed names the counters use.
                action: crate::counters::ACTIONS
                    .iter()
                    .find(|a| **a == action)
                    .copied()
                    .unwrap_or("?"),
                matches: r.u64()?,
                bytes: r.u64()?,
            })
        })?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TopList {
        TopList {
            urls_by_requests: vec![("/a".into(), 7), ("/ü/b".into(), 3)],
            urls_by_bytes: vec![("/iso".into(), 1 << 40)],
            ranges: vec![RangeRow {
                range: "10.0.0.0/8".into(),
                level: 0,
                open: 5,
                incomplete: 2,
                req_rate: 1.5,
                evicted: 1,
                refused: 4,
            }],
            rules: vec![RuleRow {
                rule: "rules.conf:12".into(),
                action: crate::counters::ACTIONS[1],
                matches: 9,
                bytes: 900,
            }],
        }
    }

    #[test]
    fn a_list_reads_back_as_written() {
        let s = &TopSlot::leak(1)[0];
        assert_eq!(s.read().urls_by_requests.len(), 0);
        let l = sample();
        s.write(&l);
        let r = s.read();
        assert_eq!(r.urls_by_requests, l.urls_by_requests);
        assert_eq!(r.urls_by_bytes, l.urls_by_bytes);
        assert_eq!(r.ranges, l.ranges);
        assert_eq!(r.rules, l.rules);
        // A shorter list replaces a longer one whole.
        s.write(&TopList::default());
        assert!(s.read().ranges.is_empty());
    }

    #[test]
    fn a_list_too_long_for_the_slot_loses_rows_not_its_shape() {
        let s = &TopSlot::leak(1)[0];
        let long = "/".to_string() + &"x".repeat(5000);
        let mut l = sample();
        l.urls_by_requests = (0..400).map(|i| (format!("{long}{i}"), i)).collect();
        s.write(&l);
        let r = s.read();
        // Names are cut, rows past the slot's room are left off, and the lists after
        // the long one are still there.
        // All a worker publishes fits, even at the longest names.
        assert!(
            r.urls_by_requests.len() >= 2 * crate::top::SHOWN && r.urls_by_requests.len() < 400
        );
        assert!(r.urls_by_requests.iter().all(|(k, _)| k.len() == MAX_NAME));
        assert_eq!(r.rules, l.rules);
        assert_eq!(r.ranges, l.ranges);
    }

    #[test]
    fn a_write_left_half_done_reads_as_empty_and_the_next_write_mends_it() {
        let s = &TopSlot::leak(1)[0];
        s.write(&sample());
        // A writer that died between its two sequence stores.
        s.seq.fetch_add(1, Ordering::Relaxed);
        assert!(s.read().urls_by_requests.is_empty());
        s.write(&sample());
        assert_eq!(s.read().urls_by_requests, sample().urls_by_requests);
    }
}
