//! The static file handler: answers GET/HEAD for files and directories under a root.
//!
//! Owns: safe path resolution ([`path`], [`open`]), the open-file cache ([`cache`]),
//! Content-Type ([`mime`]), validators and conditional requests, byte ranges
//! (single → 206, several → `multipart/byteranges`, none valid → 416: `respond.rs`),
//! the operator's `Cache-Control` ([`caching`]) and error pages ([`errors`]),
//! directory redirects, index files and listings ([`listing`]).
//!
//! Must not: touch sockets or decide how bytes are sent. It returns a
//! [`Response`] whose body names files and offsets; the server sends them with
//! `sendfile`, `mmap` or `read` as configured.
//!
//! Cost on a cache hit: one path normalization, one hash lookup, a few header
//! writes; no syscalls. With `Accept-Encoding`, nothing more while the file's
//! entry knows its siblings (three `fstatat`s once per `cache_validity`).
//!
//! Every answer says how long the same request bytes get the same answer
//! (`Response::reuse_until`, which the worker's kept answers, [`answers`], rely
//! on): until the earliest expiry of the cache entries (and listing page) it read,
//! or never (ranges, and pages larger than a file kept in memory).

pub mod answers;
mod budget;
pub mod cache;
pub mod caching;
pub mod cold;
pub mod errors;
pub mod listing;
pub mod mime;
pub mod mounts;
pub mod open;
pub mod path;
mod respond;

use cache::{Entry, FileCache, FileInfo, Siblings};
use sluice_config::FilesSection;
use sluice_http::encoding::{self, Coding};
use sluice_http::response::{Chunk, Response};
use sluice_http::RequestHead;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use open::sibling_name;
pub use open::Root;

/// One per worker: the root, the settings, and the worker's cache.
pub struct StaticHandler {
    /// Shared with the disk threads' [`cold::ColdLookup`]s.
    root: Arc<Root>,
    cfg: FilesSection,
    max_ranges: usize,
    cache: FileCache,
    boundary_seq: u64,
    /// Reused for sibling names, so a lookup allocates nothing.
    scratch: String,
    listings: listing::PageCache,
    /// The lookup the last answer could not make without the disk, if any: that
    /// answer is then a stand-in ([`cold_answer`]; see [`StaticHandler::take_cold`]).
    cold: Option<cold::ColdLookup>,
    /// Listings' entries the disk threads read for this handler.
    read_listings: Arc<cold::ReadListings>,
    /// The operator's `Cache-Control` and other headers by path (`[files]
    /// cache_control`, `headers`).
    caching: caching::PathHeaders,
    /// The operator's pages for 403, 404 and 410 (`[files] error_pages`), by
    /// status, as normalized paths from the root (`errors.rs`).
    error_pages: Vec<(u16, Rc<str>)>,
    /// The names of the notes shown above and below a listing (`[files]
    /// listing_header`, `listing_readme`), shared, so asking for them does not
    /// copy them.
    notes: [Option<Rc<str>>; 2],
}

impl StaticHandler {
    pub fn new(root: Root, cfg: FilesSection, max_ranges: usize) -> Self {
        let mut cache = FileCache::new(cfg.cache_validity, cfg.cache_entries, cfg.small_file_max);
        cache.set_lookup_max(cfg.disk_lookup_max);
        cache.set_types(mime::Types::new(&cfg.types));
        let listings = listing::PageCache::new(cfg.cache_validity);
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let caching = caching::PathHeaders::new(&cfg.cache_control, &cfg.headers, &cfg.rate_limits);
        let error_pages = cfg
            .error_pages
            .iter()
            .filter_map(|(&status, p)| {
                // Checked at load (`sluice_config`): plain segments, so it normalizes.
                path::normalize(p, true)
                    .ok()
                    .map(|n| (status, Rc::from(n.rel.as_ref())))
            })
            .collect();
        let note = |n: &str| (!n.is_empty()).then(|| Rc::from(n));
        let notes = [note(&cfg.listing_header), note(&cfg.listing_readme)];
        StaticHandler {
            root: Arc::new(root),
            cfg,
            max_ranges,
            cache,
            boundary_seq: seed,
            scratch: String::new(),
            listings,
            cold: None,
            read_listings: Arc::default(),
            caching,
            error_pages,
            notes,
        }
    }

    /// Whether the answers that follow may wait for the disk (the default: a
    /// lookup reads what it must), or are to stop short of it: where an answer
    /// would wait (a path, or a small file's bytes, not in the kernel's caches;
    /// [`cold`]) it is [`cold_answer`]'s stand-in, and [`StaticHandler::take_cold`]
    /// says what to have read before asking again.
    pub fn set_disk(&mut self, disk: cold::DiskWait) {
        self.cache.set_disk(disk);
    }

    /// After an answer: the lookup it stopped short of (its answer was the
    /// stand-in, not to be sent), for a thread that may wait to make
    /// ([`cold::ColdLookup::warm`]); the same request asked again afterwards finds
    /// what it needs in the kernel's caches.
    pub fn take_cold(&mut self) -> Option<cold::ColdLookup> {
        self.cold.take()
    }

    /// The cache's entry for `rel` and until when it is trusted; a lookup that
    /// would wait for the disk is remembered for [`StaticHandler::take_cold`].
    fn lookup(&mut self, rel: &str, now: Instant) -> (Entry, Instant) {
        let found = self.cache.lookup_until(&self.root, rel, now);
        if let Entry::Cold = found.0 {
            self.stopped_short(rel, None);
        }
        found
    }

    /// An answer about `rel` would wait for the disk: remember the lookup (or,
    /// with `listing`, the directory's read) for the disk threads
    /// ([`StaticHandler::take_cold`]).
    fn stopped_short(&mut self, rel: &str, listing: Option<listing::Form>) {
        let costs = Arc::clone(self.cache.lookup_costs());
        let root = Arc::clone(&self.root);
        self.cold = Some(match listing {
            Some(form) => {
                let into = Arc::clone(&self.read_listings);
                cold::ColdLookup::listing(root, rel, costs, self.cfg.hidden, form, into)
            }
            None => cold::ColdLookup::new(root, rel, costs),
        });
    }

    /// The rules' `-f` (`dir == false`) and `-d` on `raw_path` (as a request sends
    /// it, percent-encoded): from the cache, under the root's policies (a hidden
    /// name, a symlink that may not be followed: neither), and until when the
    /// answer is trusted (an answer decided on it may be kept until then). Where
    /// the lookup would wait for the disk the answer is `false` and the lookup is
    /// remembered, as for an answer ([`StaticHandler::take_cold`]): the caller must
    /// not send what it then decides.
    pub fn is(&mut self, raw_path: &str, dir: bool, now: Instant) -> (bool, Instant) {
        let Ok(norm) = path::normalize(raw_path, self.cfg.hidden) else {
            return (false, now + UNBOUNDED);
        };
        let (entry, until) = self.lookup(&norm.rel, now);
        let is = match entry {
            // "/file.txt/" names a directory that is not there, as for an answer.
            Entry::File(_) => !dir && !norm.trailing_slash,
            Entry::Dir => dir,
            Entry::NotFound | Entry::Forbidden | Entry::Cold | Entry::Unavailable => false,
        };
        (is, until)
    }

    /// Whether an answer or a test since the last [`StaticHandler::take_cold`]
    /// stopped short of the disk.
    pub fn stopped(&self) -> bool {
        self.cold.is_some()
    }

    pub fn root(&self) -> &Root {
        &self.root
    }

    pub fn cached_entries(&self) -> usize {
        self.cache.len()
    }

    /// Close cached files whose validity has passed, and drop the listing pages
    /// that expired (call about once a second).
    pub fn expire(&mut self, now: Instant) {
        self.cache.expire(now);
        self.listings.expire(now);
    }

    /// The process is out of descriptors: close the cached files no response is
    /// sending from (they are opened again when asked for), and have every other
    /// cache of the process do the same at its next [`StaticHandler::expire`]
    /// ([`cache::FileCache::shed_for_the_process`]). Returns how many cached
    /// entries held a descriptor here.
    pub fn shed_descriptors(&mut self) -> usize {
        self.cache.shed_for_the_process()
    }

    /// Answer `head` for `raw_path` (percent-encoded; the request's own path, or the
    /// rules engine's rewrite of it). The caller has already checked the method.
    pub fn serve(
        &mut self,
        head: &RequestHead,
        raw_path: &str,
        query: Option<&str>,
        now: Instant,
    ) -> Response {
        let norm = match path::normalize(raw_path, self.cfg.hidden) {
            Ok(n) => n,
            // A hidden name is not there, as far as the client can tell.
            Err(path::PathError::Hidden) => {
                let mut r = self.error(404, None, head, now);
                r.reuse_until = None;
                return r;
            }
            Err(_) => return Response::text(400, Some("bad path")),
        };
        // Every answer below reads only the request and cache entries: each may be
        // kept (`Response::reuse_until`) until the earliest of those it read
        // expires (a file's: `file_or_sibling`).
        let (entry, until) = self.lookup(&norm.rel, now);
        let r = match entry {
            // "/file.txt/" names a directory that is not there.
            Entry::File(_) if norm.trailing_slash => self.error(404, None, head, now),
            Entry::File(info) => {
                let mut r = self.file_or_sibling(head, &norm.rel, info, now);
                self.add_path_headers(&norm.rel, &mut r);
                return r;
            }
            // A directory asked for without the slash the request itself ends in
            // (`/sub`, `/sub/.`, `/sub/x/..`, `/sub%2f`): the canonical URL, so that
            // a listing's relative links resolve against the directory.
            Entry::Dir if !raw_path.ends_with('/') => {
                // Built from the normalized path, never the raw one: `//evil.com/..%2fsub`
                // must not come back as a network-path reference to evil.com.
                let mut loc = String::with_capacity(raw_path.len() + 2);
                loc.push('/');
                for (i, seg) in norm.rel.split('/').enumerate() {
                    if i > 0 {
                        loc.push('/');
                    }
                    listing::encode_segment(seg.as_bytes(), &mut loc);
                }
                loc.push('/');
                if let Some(q) = query {
                    loc.push('?');
                    loc.push_str(q);
                }
                let mut r = Response::redirect(301, &loc);
                r.reuse_until = Some(now + UNBOUNDED);
                r
            }
            Entry::Dir => {
                // Bounded by what it read (index names, the listing's build).
                let r = self.directory(head, &norm.rel, query, now);
                return keep_until(r, until);
            }
            Entry::NotFound => self.error(404, None, head, now),
            Entry::Forbidden => self.error(403, None, head, now),
            Entry::Cold => return cold_answer(),
            Entry::Unavailable => return unavailable_answer(),
        };
        // The redirect to the directory, a 404, a 403: the request, this entry
        // (and an error page's).
        keep_until(r, until)
    }

    fn directory(
        &mut self,
        head: &RequestHead,
        rel: &str,
        query: Option<&str>,
        now: Instant,
    ) -> Response {
        // The answer depends on the index names tried before the one found too.
        let mut read_until = now + UNBOUNDED;
        for i in 0..self.cfg.index.len() {
            let idx = if rel.is_empty() {
                self.cfg.index[i].clone()
            } else {
                format!("{rel}/{}", self.cfg.index[i])
            };
            let (entry, until) = self.lookup(&idx, now);
            match entry {
                Entry::File(info) => {
                    let mut r = self.file_or_sibling(head, &idx, info, now);
                    self.add_path_headers(&idx, &mut r);
                    return keep_until(r, read_until);
                }
                Entry::Cold => return cold_answer(),
                // Not a reason to list the directory instead.
                Entry::Unavailable => return unavailable_answer(),
                _ => {}
            }
            read_until = read_until.min(until);
        }
        if !self.cfg.listing {
            let r = self.error(403, Some("directory listing is off"), head, now);
            return keep_until(r, read_until);
        }
        let (mut key, mut desc, mut json) = (listing::SortKey::Name, false, false);
        // sluice's own `?sort=size&order=desc`, and Apache mod_autoindex's
        // `?C=M;O=D` (scripts that find the newest build with it, bookmarks), which
        // give the same page: `C=N` name, `C=M` modified, `C=S` size, `C=D` (a
        // description; there is none) name; `O=A`/`O=D` the order.
        for kv in query.unwrap_or("").split(['&', ';']) {
            match kv {
                "sort=name" | "C=N" | "C=D" => key = listing::SortKey::Name,
                "sort=size" | "C=S" => key = listing::SortKey::Size,
                "sort=date" | "C=M" => key = listing::SortKey::Date,
                "order=desc" | "O=D" => desc = true,
                "order=asc" | "O=A" => desc = false,
                "format=json" => json = true,
                _ => {}
            }
        }
        if head.accept().is_some_and(|a| listing::prefers_json(&a)) {
            json = true;
        }
        let ctype = if json {
            "application/json"
        } else {
            "text/html; charset=utf-8"
        };
        let gzip = self.cfg.compress_listings
            && head
                .accept_encoding()
                .is_some_and(|ae| encoding::acceptable(&ae).contains(&Some(Coding::Gzip)));
        // Built (read, sorted, rendered) at most once per cache_validity per form;
        // read by a disk thread whenever there are disk threads (`cold::Gate::list`).
        // Keyed and titled by the directory's normalized path, never the request's
        // spelling of it: `/pub/a/../`, `/pub/b/../`, `//pub/` are one page, not a
        // new build (and a cache flush) each.
        // The operator's notes (above and below the table), from the file cache
        // like any small file: one that would wait for the disk is read by a disk
        // thread first; the answer is kept no longer than their entries.
        // Each note's file name and bytes.
        type Found = Option<(Rc<str>, Rc<[u8]>)>;
        let mut notes: [Found; 2] = [None, None];
        if !json {
            for (i, name) in self.notes.clone().into_iter().enumerate() {
                let Some(name) = name else { continue };
                let path = if rel.is_empty() {
                    name.to_string()
                } else {
                    format!("{rel}/{name}")
                };
                let (entry, until) = self.lookup(&path, now);
                read_until = read_until.min(until);
                match entry {
                    Entry::File(info) => {
                        notes[i] = info.data.clone().map(|d| (name.clone(), d));
                    }
                    Entry::Cold => return cold_answer(),
                    Entry::Unavailable => return unavailable_answer(),
                    _ => {}
                }
            }
        }
        let (root, hidden) = (&self.root, self.cfg.hidden);
        let (gate, ready) = (self.cache.gate(), &self.read_listings);
        // Made only on a miss: the notes are copied out of the file cache so that
        // a disk thread may build the page.
        let form = || listing::Form {
            key,
            desc,
            json,
            gzip,
            compress: self.cfg.compress_listings,
            // The name as the file system has it (`path::fs_bytes`), not its text
            // form: a `%` or a Latin-1 byte is shown as `listing` shows it.
            title: if rel.is_empty() {
                b"/".to_vec()
            } else {
                [&b"/"[..], &path::fs_bytes(rel), b"/"].concat()
            },
            notes: notes
                .clone()
                .map(|n| n.map(|(name, d)| listing::Note::new(&name, Arc::from(&d[..])))),
        };
        let id = listing::Form::id_of(key, desc, json);
        let (mut stopped, mut failed) = (None, None);
        let built = self.listings.get(rel, id, gzip, now, || {
            let form = form();
            let Some(read) = gate.list(root, rel, hidden, &form, ready) else {
                stopped = Some(form);
                return None;
            };
            read.map_err(|e| failed = Some(e)).ok()
        });
        if let Some(form) = stopped {
            // Reading the directory could wait: a disk thread reads it and
            // builds the page.
            self.stopped_short(rel, Some(form));
            return cold_answer();
        }
        let Some((body, built_until)) = built else {
            if failed.as_ref().is_some_and(cache::unavailable) {
                return unavailable_answer();
            }
            // A directory this server may not read: not kept (it may be fixed).
            let mut r = self.error(403, None, head, now);
            r.reuse_until = None;
            return r;
        };
        let mut r = Response::new(200);
        r.headers.add("Content-Type", ctype);
        if gzip {
            r.headers.add("Content-Encoding", "gzip");
        }
        r.headers.add_u64("Content-Length", body.len() as u64);
        let n = body.len();
        r.body.push(Chunk::Shared(body, 0, n));
        r.headers.add("Cache-Control", "no-cache");
        r.headers.add(
            "Vary",
            if self.cfg.compress_listings {
                "Accept, Accept-Encoding"
            } else {
                "Accept"
            },
        );
        r.headers.add("X-Content-Type-Options", "nosniff");
        r.headers.add("Content-Security-Policy", listing::CSP);
        // Kept only as small as a file kept in memory: a kept answer holds its page
        // after the page cache has let it go, so the answers' memory stays bounded
        // as for files (`answer_cache` × `small_file_max`).
        if n <= self.cfg.small_file_max {
            r.reuse_until = Some(built_until.min(read_until));
        }
        r
    }

    /// Serve `rel`, or its precompressed sibling (`rel.br`, `.zst`, `.gz`) when one
    /// exists and the client accepts that coding. The sibling is served as itself
    /// (its own length, ETag and ranges over the encoded bytes) with the original's
    /// Content-Type. Files that are compressed archives themselves (`.gz`, `.xz`,
    /// …) are never given a Content-Encoding: apt and dnf want those bytes as they
    /// are.
    ///
    /// Which siblings exist is kept in the file's entry ([`Siblings`]) for as long
    /// as the three cache entries it was read from are trusted, so a request with
    /// `Accept-Encoding` (every browser's, and wget's `identity`) costs no sibling
    /// lookup and, when there is no sibling, not even a read of the header. The
    /// answer may then be kept like any other (`Response::reuse_until`, bounded by
    /// that knowledge too): the header is part of the request bytes it is kept by.
    fn file_or_sibling(
        &mut self,
        head: &RequestHead,
        rel: &str,
        info: Rc<FileInfo>,
        now: Instant,
    ) -> Response {
        let Some(ae) = head
            .accept_encoding()
            .filter(|_| self.cfg.precompressed && !info.compressed)
        else {
            return self.file(head, &info, None);
        };
        let Some(sibs) = self.siblings(rel, &info, now) else {
            return cold_answer();
        };
        if sibs.present == 0 {
            // The file's own answer, whatever the header says.
            return keep_until(self.file(head, &info, None), sibs.until);
        }
        // A sibling's answer reads the original's entry too (its type, that it is there).
        let mut until = sibs.until.min(info.trusted_until());
        let mut r = None;
        for coding in encoding::acceptable(&ae).into_iter().flatten() {
            if sibs.present & coding.bit() == 0 {
                continue;
            }
            // Gone since the set was read: the next one the client accepts.
            match self.sibling(rel, coding, now) {
                (Entry::File(sib), u) => {
                    until = until.min(u);
                    r = Some(self.file(head, &sib, Some((coding, info.mime))));
                    break;
                }
                (Entry::Cold, _) => return cold_answer(),
                _ => {}
            }
        }
        let mut r = r.unwrap_or_else(|| self.file(head, &info, None));
        // Caches must key this URL by Accept-Encoding, whichever variant we sent.
        r.headers.add("Vary", "Accept-Encoding");
        keep_until(r, until)
    }

    /// The cache's entry for `rel`'s sibling in `coding`, and until when it is trusted.
    fn sibling(&mut self, rel: &str, coding: Coding, now: Instant) -> (Entry, Instant) {
        let mut name = std::mem::take(&mut self.scratch);
        sibling_name(&mut name, rel, coding);
        let found = self.lookup(&name, now);
        self.scratch = name;
        found
    }

    /// Which precompressed siblings `rel` has: from its entry while that knowledge
    /// is trusted (`cache_validity`), else from one `fstatat` per coding. Absent
    /// siblings are not made cache entries: three misses for every file a browser
    /// asks for overflowed the cache (`cache_entries`) on a tree of 10,000 files,
    /// which then emptied and reloaded it again and again (docs/BENCHMARKS.md). A
    /// name that is there but is no regular file the policy allows is found out by
    /// the lookup of the one chosen (`file_or_sibling`). `None` when a name's
    /// lookup would wait for the disk (`FileCache::stamp`; the lookup for the disk
    /// threads is then in `self.cold`).
    fn siblings(&mut self, rel: &str, info: &FileInfo, now: Instant) -> Option<Siblings> {
        if let Some(known) = info.siblings.get().filter(|k| k.until > now) {
            return Some(known);
        }
        let mut found = Siblings {
            present: 0,
            until: now + self.cfg.cache_validity,
        };
        let mut name = std::mem::take(&mut self.scratch);
        for coding in Coding::ALL {
            sibling_name(&mut name, rel, coding);
            match self.cache.stamp(&self.root, &name) {
                Ok(_) => found.present |= coding.bit(),
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                    self.scratch = name;
                    self.stopped_short(rel, None);
                    return None;
                }
                Err(_) => {}
            }
        }
        self.scratch = name;
        info.siblings.set(Some(found));
        Some(found)
    }
}

/// The start of a minimum over cache entries' expiries (with a `cache_validity`
/// longer than this, a kept answer is only trusted for this long).
const UNBOUNDED: Duration = Duration::from_secs(3600);

/// The stand-in answer of a lookup that stopped short of the disk
/// ([`StaticHandler::set_disk`]). The worker has the request asked again once
/// a disk thread has read what it needs, and sends this only if it cannot; then it
/// is the truth: come back in a moment.
pub fn cold_answer() -> Response {
    retry_soon("reading the disk")
}

/// The answer when a lookup failed for a reason of the server's
/// ([`cache::Entry::Unavailable`]: out of descriptors or memory, a disk error):
/// not the file's fault, so a 503 to come back in a moment, never kept.
pub fn unavailable_answer() -> Response {
    retry_soon("server busy")
}

fn retry_soon(why: &str) -> Response {
    let mut r = Response::text(503, Some(why));
    r.headers.add("Retry-After", "1");
    r
}

/// `r`, its promise of reuse (if any) cut to `until`.
pub fn keep_until(mut r: Response, until: Instant) -> Response {
    r.reuse_until = r.reuse_until.map(|u| u.min(until));
    r
}

#[cfg(test)]
mod tests;
