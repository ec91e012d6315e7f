//! Requests of one worker that wait for the same listing page: one build for all
//! of them.
//!
//! A big directory's page is built off the worker (`sluice_static::cold`,
//! ~0.25 s of a listing thread for 100,000 entries), and until it is built, every
//! request for it stops short. Without this, 32 clients asking for it at once
//! cost 32 builds (7.5 s of CPU here). Now the first request's build
//! ([`Herds::lead`]) is waited for by every later request of the same worker for
//! the same page ([`Herds::join`]): when the build's completion comes back
//! ([`Herds::finished`]), the worker answers the lead and then each request that
//! joined it, in the same turn, and the page cache serves the page built in that
//! turn to all of them (`PageCache`'s `unkept` slot), kept or not.
//!
//! Owns: which builds are running for which requests. Must not: touch the
//! connections (it holds their keys and generations only) or the pages.
//! Costs: nothing for a request that does not wait for a listing (one check of
//! an empty list per disk completion); a scan of the running builds (at most the
//! listing queue's length) per listing request that waits.

use sluice_static::cold::ListingKey;

/// A connection's key and generation (`Conn::gen`), as the disk pool reports them.
type Who = (u32, u32);

/// The listing builds this worker's requests wait for.
#[derive(Default)]
pub(super) struct Herds {
    builds: Vec<Build>,
}

struct Build {
    site: usize,
    key: ListingKey,
    lead: Who,
    joined: Vec<Who>,
}

impl Herds {
    /// A request (`who`) for `key` of `site` that needs a build: if one that
    /// serves it is running, it waits for that one (`true`).
    pub(super) fn join(&mut self, site: usize, key: &ListingKey, who: Who) -> bool {
        match self
            .builds
            .iter_mut()
            .find(|b| b.site == site && b.key.serves(key))
        {
            Some(b) => {
                b.joined.push(who);
                true
            }
            None => false,
        }
    }

    /// `who`'s request has had a build of `key` of `site` queued for it.
    pub(super) fn lead(&mut self, site: usize, key: ListingKey, who: Who) {
        self.builds.push(Build {
            site,
            key,
            lead: who,
            joined: Vec::new(),
        });
    }

    /// The disk pool reported `who`: if it led a build, the requests that
    /// joined it, in the order they came (the build is no longer running).
    pub(super) fn finished(&mut self, who: Who) -> Option<Vec<Who>> {
        if self.builds.is_empty() {
            return None;
        }
        let i = self.builds.iter().position(|b| b.lead == who)?;
        Some(self.builds.swap_remove(i).joined)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(rel: &str, form: u8, gzip: bool) -> ListingKey {
        ListingKey {
            rel: rel.into(),
            form,
            gzip,
        }
    }

    #[test]
    fn requests_for_the_same_page_wait_for_one_build() {
        let mut h = Herds::default();
        assert!(!h.join(0, &key("pool", 0, false), (1, 1)));
        h.lead(0, key("pool", 0, true), (1, 1));
        // The same page, plain or gzipped: the gzip build serves both.
        assert!(h.join(0, &key("pool", 0, false), (2, 1)));
        assert!(h.join(0, &key("pool", 0, true), (3, 7)));
        // Another form, another site, another directory: builds of their own.
        assert!(!h.join(0, &key("pool", 1, false), (4, 1)));
        assert!(!h.join(1, &key("pool", 0, false), (5, 1)));
        assert!(!h.join(0, &key("pool/a", 0, false), (6, 1)));
        // A completion that led nothing; then the lead's, with its joiners.
        assert_eq!(h.finished((9, 9)), None);
        assert_eq!(h.finished((1, 2)), None, "another generation of the key");
        assert_eq!(h.finished((1, 1)), Some(vec![(2, 1), (3, 7)]));
        // Done: the next request leads a new build.
        assert!(!h.join(0, &key("pool", 0, false), (2, 2)));
    }

    #[test]
    fn a_plain_build_does_not_serve_a_gzip_request() {
        let mut h = Herds::default();
        h.lead(0, key("pool", 0, false), (1, 1));
        assert!(!h.join(0, &key("pool", 0, true), (2, 1)));
        assert!(h.join(0, &key("pool", 0, false), (3, 1)));
    }
}
