//! Listing pages built off the worker and waiting to be taken ([`ReadListings`]),
//! and which page a build makes ([`ListingKey`]). Owns only the hand-over: the
//! reading and rendering are `crate::listing`'s, the threads the server's.
//! Costs: a lock and a scan of at most [`READ_LISTINGS_MAX`] pages per listing
//! request that stopped short.

use crate::listing;
use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Directory listings' pages built by the listing threads for one handler, until
/// the request that waited for them is asked again and takes them
/// ([`super::Gate::list`]). At most [`READ_LISTINGS_MAX`], each for at most
/// [`READ_LISTING_TTL`]: a request whose client left never takes its page,
/// and a later request must not be shown it.
#[derive(Debug, Default)]
pub struct ReadListings(pub(super) Mutex<Vec<ReadListing>>);

/// One directory's page in one form (and coding), built from entries read at `at`.
#[derive(Debug)]
pub(super) struct ReadListing {
    pub(super) rel: Box<str>,
    form: u8,
    pub(super) at: Instant,
    read: io::Result<listing::Built>,
}

/// Listings read and not yet taken, per handler.
pub const READ_LISTINGS_MAX: usize = 16;
/// How long a listing read by a disk thread may wait to be taken.
pub const READ_LISTING_TTL: Duration = Duration::from_secs(5);

impl ReadListings {
    pub(super) fn put(&self, rel: &str, form: &listing::Form, read: io::Result<listing::Built>) {
        let mut l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() >= READ_LISTINGS_MAX {
            drop(l.remove(0));
        }
        l.push(ReadListing {
            rel: rel.into(),
            form: form.id(),
            at: Instant::now(),
            read,
        });
    }

    /// The page built for `rel` in `form`, with its gzipped form if `form` asks
    /// for gzip (a build with one serves a plain request too).
    pub(super) fn take(
        &self,
        rel: &str,
        form: &listing::Form,
    ) -> Option<io::Result<listing::Built>> {
        let mut l = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if l.is_empty() {
            return None;
        }
        l.retain(|r| r.at.elapsed() < READ_LISTING_TTL);
        let i = l.iter().position(|r| {
            *r.rel == *rel
                && r.form == form.id()
                && (!form.gzip || r.read.as_ref().map_or(true, |b| b.gz.is_some()))
        })?;
        Some(l.swap_remove(i).read)
    }
}

/// Which listing page a build makes: the directory (normalized, relative to its
/// root), the form ([`listing::Form::id`]) and whether gzipped too. A build with
/// gzip serves a request without it too ([`ListingKey::serves`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingKey {
    pub rel: Box<str>,
    pub form: u8,
    pub gzip: bool,
}

impl ListingKey {
    /// Whether the page this build makes answers `other`'s request.
    pub fn serves(&self, other: &ListingKey) -> bool {
        self.rel == other.rel && self.form == other.form && (self.gzip || !other.gzip)
    }
}
