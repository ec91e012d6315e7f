//! Built listings kept per worker ([`PageCache`]) and their gzipped forms
//! ([`GzipCache`]), so a listing is built at most once per `cache_validity` per
//! URL and form, and compressed once per distinct page. Owns only the keeping: the
//! reading and rendering are `listing`'s, the disk threads' reads `cold`'s.
//! Costs: one hash lookup per listing request; memory bounded per worker over all
//! its sites (`crate::budget`), and a pass over each site's pages once a second
//! ([`PageCache::expire`]), which gives back what no request asked for again.

use crate::budget::{Share, Total};
use std::cell::Cell;
use std::collections::HashMap;
use std::hash::Hash;
use std::rc::Rc;
use std::time::{Duration, Instant};

thread_local! {
    /// The bytes of the pages every site's [`PageCache`] on this thread keeps.
    static PAGES: Cell<usize> = const { Cell::new(0) };
    /// The bytes of the gzipped pages every site's [`GzipCache`] on this thread keeps.
    static GZIPPED: Cell<usize> = const { Cell::new(0) };
    /// The bytes of the big pages every site's [`PageCache`] on this thread keeps.
    static BIG: Cell<usize> = const { Cell::new(0) };
}

/// Built listings, per site and worker: a page is built once per `cache_validity`
/// for each URL and form (sort order, HTML or JSON), not once per request. Building
/// one reads and stats every entry and renders it (a disk thread does, where there
/// are some: `crate::cold::Gate::list`), ~2.5 µs an entry, so a crawler asking
/// again and again for a mirror's big directories costs one build per directory a
/// second, not one per request. A new or changed entry shows within
/// `cache_validity`, as a replaced file does. The gzipped form comes with the page
/// when a disk thread built it for a request that accepts gzip; else it is made on
/// the first request that accepts it, from [`GzipCache`].
/// Bounded: at most [`PageCache::MAX`] pages per site and [`PageCache::MAX_BYTES`]
/// over all the sites of a worker. A page past its validity is dropped at the next
/// [`PageCache::expire`]; a cache that meets the bound drops its own pages (what
/// expired, then all). A page larger than [`PageCache::MAX_BYTES`] (100,000
/// entries make 18 MB) is kept apart, one per site, while the worker's big pages
/// come to at most [`PageCache::BIG_BYTES`]; a page that fits neither is built
/// for every request but those of the turn it was built in (the requests that
/// waited for that build).
pub struct PageCache {
    validity: Duration,
    pages: Kept<(String, u8), Page>,
    gzipped: GzipCache,
    /// The last page built that was not kept among `pages`: for the validity if
    /// it fits [`PageCache::BIG_BYTES`] (`big` counts it), else only to requests
    /// answered at the same `now`: those of one worker turn, which is when the
    /// requests that waited for one build (`crate::cold::ListingKey`) are
    /// answered. Dropped at [`PageCache::expire`] past that.
    unkept: Option<Unkept>,
    big: Share,
}

struct Unkept {
    key: (String, u8),
    page: Page,
    /// Within [`PageCache::BIG_BYTES`]: served for the validity.
    counted: bool,
}

/// A page built for a `listing::Form`: its body, and the body gzipped if asked.
#[derive(Debug)]
pub struct Built {
    pub body: Vec<u8>,
    pub gz: Option<Vec<u8>>,
}

struct Page {
    built: Instant,
    body: Rc<[u8]>,
    gz: Option<Rc<[u8]>>,
    /// The bytes of the gzipped form built with the page (by a disk thread), which
    /// this page's weight counts; one made later is [`GzipCache`]'s to count.
    own_gz: usize,
}

impl PageCache {
    pub const MAX: usize = 256;
    pub const MAX_BYTES: usize = 8 << 20;
    /// The bytes of pages larger than [`PageCache::MAX_BYTES`] a worker keeps,
    /// one per site, over all its sites.
    pub const BIG_BYTES: usize = 32 << 20;

    pub fn new(validity: Duration) -> PageCache {
        PageCache {
            validity,
            pages: Kept::new(&PAGES, Self::MAX, Self::MAX_BYTES),
            gzipped: GzipCache::default(),
            unkept: None,
            big: Share::new(&BIG),
        }
    }

    /// The page for the directory `url` (its normalized path) in `form` (built by
    /// `build` unless a build younger than the validity is kept, perhaps with its
    /// gzipped form), gzipped if `gzip`, and until when it stays the page (`now` if
    /// it is not kept); `None` if `build` fails.
    pub fn get(
        &mut self,
        url: &str,
        form: u8,
        gzip: bool,
        now: Instant,
        build: impl FnOnce() -> Option<Built>,
    ) -> Option<(Rc<[u8]>, Instant)> {
        let key = (url.to_string(), form);
        if let Some(p) = self.pages.map.get_mut(&key) {
            if now.saturating_duration_since(p.built) < self.validity {
                return Some((
                    p.encoded(gzip, &mut self.gzipped, now),
                    p.built + self.validity,
                ));
            }
        }
        self.pages.remove(&key);
        if let Some(u) = &mut self.unkept {
            // A big page within its validity, or one built in this turn: the same
            // bytes, unless this request wants gzip and the build made none
            // (compressing a big page is the listing threads' work, not the
            // worker's).
            let until = match u.counted {
                true => u.page.built + self.validity,
                false => u.page.built,
            };
            let fresh = u.page.built == now || now < until;
            if u.key == key && fresh && (!gzip || u.page.gz.is_some()) {
                return Some((u.page.encoded(gzip, &mut self.gzipped, now), until.max(now)));
            }
        }
        let built = build()?;
        let mut page = Page {
            built: now,
            body: built.body.into(),
            own_gz: built.gz.as_ref().map_or(0, Vec::len),
            gz: built.gz.map(Rc::from),
        };
        let out = page.encoded(gzip, &mut self.gzipped, now);
        let len = page.body.len();
        if len <= Self::MAX_BYTES && !self.pages.fits(len) {
            // What expired goes before what is still good.
            self.expire(now);
        }
        let until = match self.pages.keep(key, page) {
            Ok(()) => now + self.validity,
            Err((key, page)) => {
                // The slot's last page gives its bytes back; this one takes them
                // if the worker's big pages leave room.
                self.big.set(0);
                let len = page.bytes();
                let counted =
                    page.body.len() > Self::MAX_BYTES && self.big.all() + len <= Self::BIG_BYTES;
                if counted {
                    self.big.set(len);
                }
                self.unkept = Some(Unkept { key, page, counted });
                match counted {
                    true => now + self.validity,
                    false => now,
                }
            }
        };
        Some((out, until))
    }

    /// Drop the pages past their validity, and the gzipped pages no request has
    /// used for a while (call about once a second): what they held counts for the
    /// worker's other sites again.
    pub fn expire(&mut self, now: Instant) {
        let validity = self.validity;
        if let Some(u) = &self.unkept {
            // (Not one built in this turn: `get` calls this too.)
            let past = match u.counted {
                true => now.saturating_duration_since(u.page.built) >= validity,
                false => u.page.built != now,
            };
            if past {
                self.unkept = None;
                self.big.set(0);
            }
        }
        self.pages
            .retain(|p| now.saturating_duration_since(p.built) < validity);
        self.gzipped
            .expire(now, 2 * validity + Duration::from_secs(1));
    }
}

impl Page {
    /// The page as sent: itself, or gzipped (once per build, through `gzipped`).
    fn encoded(&mut self, gzip: bool, gzipped: &mut GzipCache, now: Instant) -> Rc<[u8]> {
        if !gzip {
            return self.body.clone();
        }
        let body = &self.body;
        self.gz
            .get_or_insert_with(|| gzipped.get(body, now))
            .clone()
    }
}

/// gzipped listings, keyed by a hash of the uncompressed page: a listing rebuilt
/// unchanged is compressed once, not once per build.
/// Bounded: at most [`GzipCache::MAX`] pages per site and [`GzipCache::MAX_BYTES`]
/// over all the sites of a worker; one not used for a while goes at the next
/// [`PageCache::expire`]; a cache that meets the bound drops all its own, and a
/// gzipped page that still does not fit, or is larger than the bound, is not kept
/// (its page holds it while it lives). Without the byte bound, 256 directories
/// of 100,000 entries each (a listing that large is built every time, but its
/// gzipped form was kept here) could hold hundreds of MiB per worker.
pub struct GzipCache {
    kept: Kept<(u64, usize), Gzipped>,
}

struct Gzipped {
    gz: Rc<[u8]>,
    used: Instant,
}

impl Default for GzipCache {
    fn default() -> GzipCache {
        GzipCache {
            kept: Kept::new(&GZIPPED, Self::MAX, Self::MAX_BYTES),
        }
    }
}

impl GzipCache {
    pub const MAX: usize = 256;
    pub const MAX_BYTES: usize = 4 << 20;

    pub fn get(&mut self, page: &[u8], now: Instant) -> Rc<[u8]> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        page.hash(&mut h);
        let key = (h.finish(), page.len());
        if let Some(z) = self.kept.map.get_mut(&key) {
            z.used = now;
            return z.gz.clone();
        }
        let gz: Rc<[u8]> = gzip(page).into();
        let z = Gzipped {
            gz: gz.clone(),
            used: now,
        };
        let _ = self.kept.keep(key, z);
        gz
    }

    /// Drop the gzipped pages not used for `unused`.
    fn expire(&mut self, now: Instant, unused: Duration) {
        self.kept
            .retain(|z| now.saturating_duration_since(z.used) < unused);
    }
}

pub(crate) fn gzip(page: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(
        Vec::with_capacity(page.len() / 4 + 64),
        flate2::Compression::new(6),
    );
    // Writing to a Vec cannot fail.
    let _ = e.write_all(page);
    e.finish().unwrap_or_default()
}

/// An entry's size, as its cache's bound counts it.
trait Weighs {
    fn bytes(&self) -> usize;
}

impl Weighs for Page {
    fn bytes(&self) -> usize {
        self.body.len() + self.own_gz
    }
}

impl Weighs for Gzipped {
    fn bytes(&self) -> usize {
        self.gz.len()
    }
}

/// The entries one cache keeps: at most `max` of them, and at most `max_bytes` over
/// every cache of the kind on the worker's thread (`bytes`, a [`Share`] of their
/// total). The one keeping rule of both caches above: a cache that meets the bound
/// drops all its own entries, and an entry that still does not fit (the worker's
/// other sites keep the rest), or is larger than the bound, is not kept.
struct Kept<K, V> {
    map: HashMap<K, V>,
    bytes: Share,
    max: usize,
    max_bytes: usize,
}

impl<K: Hash + Eq, V: Weighs> Kept<K, V> {
    fn new(total: &'static Total, max: usize, max_bytes: usize) -> Self {
        Kept {
            map: HashMap::new(),
            bytes: Share::new(total),
            max,
            max_bytes,
        }
    }

    /// Whether an entry of `len` bytes fits beside what the worker keeps.
    fn fits(&self, len: usize) -> bool {
        self.map.len() < self.max && self.bytes.all() + len <= self.max_bytes
    }

    /// Keep `v` under a key not kept now; `false` (and `v` dropped) if it does not fit.
    /// Keep `v` under `k`, or give both back if it cannot be kept.
    fn keep(&mut self, k: K, v: V) -> Result<(), (K, V)> {
        let len = v.bytes();
        if len > self.max_bytes {
            return Err((k, v));
        }
        if !self.fits(len) {
            self.map.clear();
            self.bytes.set(0);
        }
        if !self.fits(len) {
            return Err((k, v));
        }
        self.bytes.set(self.bytes.mine() + len);
        self.map.insert(k, v);
        Ok(())
    }

    fn remove(&mut self, k: &K) {
        if let Some(old) = self.map.remove(k) {
            self.bytes.set(self.bytes.mine() - old.bytes());
        }
    }

    /// Keep only the entries `keep` says to, and count what is left.
    fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.map.retain(|_, v| keep(v));
        self.bytes.set(self.map.values().map(V::bytes).sum());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(text: &str) -> Built {
        plain(text.as_bytes().to_vec())
    }

    fn plain(body: Vec<u8>) -> Built {
        Built { body, gz: None }
    }

    impl<K, V: Weighs> Kept<K, V> {
        /// The count is what the entries weigh, and within the bound.
        fn assert_counted(&self) {
            let sum: usize = self.map.values().map(V::bytes).sum();
            assert_eq!(self.bytes.mine(), sum);
            assert!(sum <= self.max_bytes, "{sum} bytes kept");
        }
    }

    /// A page a disk thread built with its gzipped form: a gzip request gets that
    /// form (not one compressed again here), and the page weighs both.
    #[test]
    fn a_page_built_gzipped_serves_its_own_gzipped_form() {
        let t0 = Instant::now();
        let mut c = PageCache::new(Duration::from_secs(1));
        let both = || {
            Some(Built {
                body: b"page".to_vec(),
                gz: Some(b"gz of page".to_vec()),
            })
        };
        let (p, _) = c.get("/d/", 0, true, t0, both).unwrap();
        assert_eq!(&*p, b"gz of page");
        let (p, _) = c.get("/d/", 0, false, t0, || None).unwrap();
        assert_eq!(&*p, b"page", "kept: no build");
        c.pages.assert_counted();
        assert_eq!(c.pages.bytes.mine(), 4 + 10);
    }

    /// A page larger than the worker keeps among its pages is kept apart for the
    /// validity, within `BIG_BYTES` over the worker's sites; one that would pass
    /// that bound serves only the requests of its turn.
    #[test]
    fn a_big_page_is_kept_apart_within_its_own_bound() {
        // The totals are per thread: a thread of its own.
        std::thread::spawn(|| {
            let t0 = Instant::now();
            let (v, ms) = (Duration::from_secs(1), Duration::from_millis(1));
            let (mut a, mut b) = (PageCache::new(v), PageCache::new(v));
            let big = |n| Some(plain(vec![b'x'; n]));
            let n = PageCache::MAX_BYTES + 1;
            assert_eq!(a.get("/d/", 0, false, t0, || big(n)).unwrap().1, t0 + v);
            let (p, until) = a.get("/d/", 0, false, t0 + 500 * ms, || panic!()).unwrap();
            assert_eq!((p.len(), until), (n, t0 + v), "kept, not rebuilt");
            // A gzip request is not answered from a page built without gzip.
            assert!(a.get("/d/", 0, true, t0 + 500 * ms, || None).is_none());
            // Another site's big page, which would pass the worker's bound: only
            // for the requests of its turn.
            let m = PageCache::BIG_BYTES - n + 1;
            assert_eq!(b.get("/e/", 0, false, t0, || big(m)).unwrap().1, t0);
            let (p, until) = b.get("/e/", 0, false, t0, || panic!()).unwrap();
            assert_eq!((p.len(), until), (m, t0), "the same turn");
            assert!(
                b.get("/e/", 0, false, t0 + ms, || None).is_none(),
                "built again"
            );
            assert_eq!(BIG.get(), n, "only the first is counted");
            // Past its validity the first goes, and the room is the other's.
            a.expire(t0 + v);
            assert!(a.unkept.is_none());
            assert_eq!(BIG.get(), 0);
            assert_eq!(
                b.get("/e/", 0, false, t0 + v, || big(m)).unwrap().1,
                t0 + 2 * v
            );
            assert_eq!(BIG.get(), m);
            drop(b);
            assert_eq!(BIG.get(), 0, "a site's cache dropped gives its bytes back");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_page_is_built_once_per_validity_and_per_form() {
        let t0 = Instant::now();
        let mut c = PageCache::new(Duration::from_secs(1));
        let mut builds = 0;
        let build = |b: &mut i32, text: &str| {
            *b += 1;
            Some(built(text))
        };
        let (p, until) = c
            .get("/d/", 0, false, t0, || build(&mut builds, "one"))
            .unwrap();
        assert_eq!((&*p, until), (&b"one"[..], t0 + Duration::from_secs(1)));
        // Within the validity: kept, not rebuilt, and still the page until then.
        let p = c.get("/d/", 0, false, t0 + Duration::from_millis(900), || {
            build(&mut builds, "two")
        });
        let (p, until) = p.unwrap();
        assert_eq!((&*p, until), (&b"one"[..], t0 + Duration::from_secs(1)));
        assert_eq!(builds, 1);
        // Another form of the same URL is its own page.
        let p = c.get("/d/", 1, false, t0, || build(&mut builds, "json"));
        assert_eq!(&*p.unwrap().0, b"json");
        // Past the validity: rebuilt.
        let p = c.get("/d/", 0, false, t0 + Duration::from_secs(1), || {
            build(&mut builds, "two")
        });
        assert_eq!(&*p.unwrap().0, b"two");
        assert_eq!(builds, 3);
        // gzipped from the kept page, once.
        let gz = c
            .get("/d/", 0, true, t0 + Duration::from_secs(1), || {
                build(&mut builds, "x")
            })
            .unwrap()
            .0;
        let mut out = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut out)
            .unwrap();
        assert_eq!(out, "two");
        let again = c
            .get("/d/", 0, true, t0 + Duration::from_secs(1), || {
                build(&mut builds, "x")
            })
            .unwrap()
            .0;
        assert!(Rc::ptr_eq(&gz, &again));
        assert_eq!(builds, 3);
        // A failed build is not kept: the next request builds again.
        assert!(c.get("/gone/", 0, false, t0, || None).is_none());
        let p = c.get("/gone/", 0, false, t0, || build(&mut builds, "back"));
        assert_eq!(&*p.unwrap().0, b"back");
    }

    #[test]
    fn the_pages_kept_are_bounded_in_bytes() {
        let t0 = Instant::now();
        let mut c = PageCache::new(Duration::from_secs(60));
        let big = PageCache::MAX_BYTES / 3 + 1;
        for i in 0..10 {
            c.get(&format!("/{i}/"), 0, false, t0, || {
                Some(plain(vec![b'x'; big]))
            });
            c.pages.assert_counted();
        }
        // Larger than the bound: served, never kept among the pages (but apart,
        // `a_big_page_is_kept_apart_within_its_own_bound`).
        let huge = c.get("/huge/", 0, false, t0, || {
            Some(plain(vec![0; PageCache::MAX_BYTES + 1]))
        });
        let (huge, until) = huge.unwrap();
        assert_eq!(
            (huge.len(), until),
            (PageCache::MAX_BYTES + 1, t0 + c.validity)
        );
        assert!(!c.pages.map.keys().any(|(u, _)| u == "/huge/"));
        c.pages.assert_counted();
    }

    #[test]
    fn the_gzipped_pages_kept_are_bounded_in_bytes() {
        // Pseudo-random bytes barely compress: each gzipped page is about its size.
        use sluice_testkit::noise;
        let mut g = GzipCache::default();
        let now = Instant::now();
        let page = GzipCache::MAX_BYTES / 3;
        for i in 0..10 {
            let text = noise(page, i);
            let gz = g.get(&text, now);
            assert!(gz.len() >= page, "noise compressed to {}", gz.len());
            g.kept.assert_counted();
            // Asked again while kept: the same allocation, not compressed again.
            assert!(Rc::ptr_eq(&gz, &g.get(&text, now)));
        }
        // Larger than the bound once gzipped: given, not kept.
        let huge = noise(GzipCache::MAX_BYTES + 1, 99);
        let before = (g.kept.bytes.mine(), g.kept.map.len());
        assert!(g.get(&huge, now).len() > GzipCache::MAX_BYTES);
        assert_eq!((g.kept.bytes.mine(), g.kept.map.len()), before);
        assert!(!g.kept.map.keys().any(|&(_, len)| len == huge.len()));
    }

    /// A worker's sites share one bound on the listing pages they keep: what one
    /// site keeps, another cannot, until its pages expire at the sweep.
    #[test]
    fn a_workers_sites_share_one_bound_on_pages() {
        let t0 = Instant::now();
        let validity = Duration::from_secs(5);
        let (mut a, mut b) = (PageCache::new(validity), PageCache::new(validity));
        let third = PageCache::MAX_BYTES / 3;
        for i in 0..3 {
            let (_, until) = a
                .get(&format!("/{i}/"), 0, false, t0, || {
                    Some(plain(vec![b'a'; third]))
                })
                .unwrap();
            assert_eq!(until, t0 + validity, "site a's page {i} is kept");
        }
        // The other site's page does not fit beside them: served, not kept, and
        // site a's pages stay.
        let (_, until) = b
            .get("/x/", 0, false, t0, || Some(plain(vec![b'b'; third])))
            .unwrap();
        assert_eq!(until, t0, "kept past the worker's bound");
        assert_eq!((a.pages.map.len(), b.pages.map.len()), (3, 0));
        assert_eq!(a.pages.bytes.all(), 3 * third);
        // Within the validity the sweep keeps a's pages...
        a.expire(t0 + Duration::from_secs(1));
        assert_eq!(a.pages.map.len(), 3);
        // ...and past it gives their bytes back, so b's page is kept now.
        a.expire(t0 + validity);
        assert_eq!((a.pages.map.len(), a.pages.bytes.all()), (0, 0));
        let t1 = t0 + validity;
        let (_, until) = b
            .get("/x/", 0, false, t1, || Some(plain(vec![b'b'; third])))
            .unwrap();
        assert_eq!(until, t1 + validity);
        // A cache dropped (a reload) gives its bytes back too.
        drop(b);
        assert_eq!(a.pages.bytes.all(), 0);
    }

    /// A gzipped page no request used for a while goes at the sweep.
    #[test]
    fn gzipped_pages_not_used_go_at_the_sweep() {
        let t0 = Instant::now();
        let mut g = GzipCache::default();
        let (one, two) = (b"one ".repeat(100), b"two ".repeat(100));
        let first = g.get(&one, t0);
        g.get(&two, t0);
        // `one` used again a second later; `two` not.
        assert!(Rc::ptr_eq(
            &first,
            &g.get(&one, t0 + Duration::from_secs(1))
        ));
        g.expire(t0 + Duration::from_secs(3), Duration::from_secs(3));
        assert_eq!(g.kept.map.len(), 1);
        assert!(Rc::ptr_eq(
            &first,
            &g.get(&one, t0 + Duration::from_secs(3))
        ));
        assert_eq!(g.kept.bytes.mine(), first.len());
    }
}
