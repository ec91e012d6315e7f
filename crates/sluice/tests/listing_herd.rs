//! Listings are built by threads of their own (`files.listing_threads`, at nice
//! +10), never by the disk threads cold files are read by; and requests of one
//! worker for a page already being built wait for that build, so a herd asking
//! for a big directory at once costs one build, not one each.

use sluice_testkit::*;
use std::sync::{Arc, Barrier};

/// A docroot with `pool/` holding `n` empty files with Debian-like names: in
/// `/dev/shm` where there is one (the disk here creates ~5,000 files a second,
/// tmpfs ~60,000), else the usual docroot.
fn with_pool(n: usize) -> tempfile::TempDir {
    let dir = tempfile::TempDir::new_in("/dev/shm").unwrap_or_else(|_| docroot());
    let pool = dir.path().join("pool");
    std::fs::create_dir(&pool).unwrap();
    for i in 0..n {
        std::fs::File::create(pool.join(format!("package-name-{i:06}_1.2.3-4_amd64.deb"))).unwrap();
    }
    dir
}

fn counter(srv: &Server, name: &str) -> u64 {
    srv.status_json()[name].as_u64().expect(name)
}

/// `n` clients ask for `path` at the same moment, each on its own connection:
/// their answers.
fn herd(srv: &Server, path: &str, n: usize) -> Vec<Resp> {
    let go = Arc::new(Barrier::new(n));
    let raw = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|_| {
                let (go, raw) = (Arc::clone(&go), raw.clone());
                s.spawn(move || {
                    let mut c = srv.connect();
                    go.wait();
                    std::io::Write::write_all(&mut c, raw.as_bytes()).unwrap();
                    read_response(&mut c, false).expect("an answer")
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A page not kept (over 8 MiB, and `cache_validity = "0s"`, so not kept apart
/// either) is built for every request that comes after its build: but 16
/// requests that come while it is being built all get the page of that one
/// build. (Before, each had its own: 16 builds.)
#[test]
fn a_herd_asking_for_a_page_too_big_to_keep_waits_for_one_build() {
    let srv = Server::start_with_config(
        with_pool(60_000),
        "[files]\nlisting = true\ncache_validity = \"0s\"\n",
        &["--workers", "1"],
    );
    // The first read of the directory (its inodes into the caches).
    let first = srv.get("GET /pool/ HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert_eq!(first.status, 200);
    assert!(
        first.body.len() > 8 << 20,
        "a page the worker does not keep"
    );
    let (builds, waits) = (
        counter(&srv, "listing_builds_total"),
        counter(&srv, "disk_lookups_total"),
    );
    let got = herd(&srv, "/pool/", 16);
    for r in &got {
        assert_eq!(r.status, 200);
        assert_eq!(r.body, first.body, "every one the whole page");
    }
    let built = counter(&srv, "listing_builds_total") - builds;
    // One build, or two if some requests came only after the first was done.
    assert!((1..=2).contains(&built), "{built} builds for 16 requests");
    assert!(
        counter(&srv, "disk_lookups_total") - waits >= 16,
        "each request waited off the worker"
    );
}

/// A page larger than the 8 MiB of pages a worker keeps is kept apart (up to
/// 32 MiB of such pages per worker) for `cache_validity`, as the others are:
/// built once, not once per request.
#[test]
fn a_big_page_is_built_once_per_validity() {
    let srv = Server::start_with_config(
        with_pool(60_000),
        "[files]\nlisting = true\ncache_validity = \"60s\"\n",
        &["--workers", "1"],
    );
    let get = || srv.get("GET /pool/ HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    let first = get();
    assert!(first.status == 200 && first.body.len() > 8 << 20);
    for _ in 0..3 {
        assert_eq!(get().body, first.body);
    }
    assert_eq!(counter(&srv, "listing_builds_total"), 1);
    // A gzip request needs the gzipped form, which that build did not make: one
    // more build, whose page then serves both.
    let gz = srv.get(
        "GET /pool/ HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert_eq!(get().body, first.body);
    assert_eq!(counter(&srv, "listing_builds_total"), 2);
}

/// The same for a page the worker keeps: the requests that came while it was
/// built get it from that build, and later ones from the worker's pages.
#[test]
fn a_herd_asking_for_a_new_page_waits_for_one_build() {
    let srv = Server::start_with_config(
        with_pool(2_000),
        "[files]\nlisting = true\n",
        &["--workers", "1"],
    );
    let got = herd(&srv, "/pool/?sort=size", 16);
    assert!(got.iter().all(|r| r.status == 200 && r.body == got[0].body));
    assert!(String::from_utf8_lossy(&got[0].body).contains("package-name-001999"));
    let built = counter(&srv, "listing_builds_total");
    assert!((1..=2).contains(&built), "{built} builds for 16 requests");
}

/// `(thread name, nice value)` of every thread of `pids` whose name starts
/// with `prefix`.
fn niceness(pids: &[u32], prefix: &str) -> Vec<(String, i64)> {
    let mut v = Vec::new();
    for pid in pids {
        for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let stat = std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap_or_default();
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            let comm = &stat[open + 1..close];
            // Fields after the name: state is field 3; nice is field 19.
            let nice: i64 = stat[close + 2..]
                .split(' ')
                .nth(16)
                .unwrap()
                .parse()
                .unwrap();
            if comm.starts_with(prefix) {
                v.push((comm.to_string(), nice));
            }
        }
    }
    v.sort();
    v
}

/// `listing_threads` threads per serving process build the pages, ten steps
/// lower than the process; the disk threads keep the process's own priority,
/// before and after a listing was built.
#[test]
fn listings_have_threads_of_their_own_at_a_lower_priority() {
    let srv = Server::start_with_config(
        with_pool(100),
        "[files]\nlisting = true\ndisk_threads = 2\nlisting_threads = 3\n",
        &["--workers", "1"],
    );
    let pids = srv.serving_pids();
    let own: i64 = {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", pids[0])).unwrap();
        let close = stat.rfind(')').unwrap();
        stat[close + 2..]
            .split(' ')
            .nth(16)
            .unwrap()
            .parse()
            .unwrap()
    };
    let r = srv.get("GET /pool/ HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(counter(&srv, "listing_builds_total"), 1);
    // A thread names itself and lowers its priority when it first runs: on a
    // loaded machine the last one may not have run yet (one suite run, with
    // builds beside it, saw two of three), so wait a little for it.
    let lower = (own + 10).min(19);
    let ready = || {
        let lists = niceness(&pids, "sluice-list");
        lists.len() == 3 * pids.len() && lists.iter().all(|(_, n)| *n == lower)
    };
    wait_within(std::time::Duration::from_secs(5), ready, || {
        format!(
            "the listing threads, named and at nice {lower}: {:?}",
            niceness(&pids, "sluice-list")
        )
    });
    let disks = niceness(&pids, "sluice-disk");
    assert_eq!(disks.len(), 2 * pids.len(), "{disks:?}");
    assert!(disks.iter().all(|(_, n)| *n == own), "{disks:?}");
}

/// More listings waiting for the listing threads than their queue holds: the
/// request over it gets a 503 with `Retry-After` (not a build on the worker),
/// and the ones queued get their pages. One listing thread and a queue of one
/// (a test hook): three different pages of a big directory asked at once.
#[test]
fn a_full_listing_queue_is_answered_503() {
    let dir = with_pool(20_000);
    let cfg = dir.path().join(".test-config.toml");
    std::fs::write(&cfg, "[files]\nlisting = true\nlisting_threads = 1\n").unwrap();
    let cfg = cfg.to_str().unwrap().to_string();
    let srv = Server::start_in_env(
        dir,
        &[("SLUICE_TEST_LIST_QUEUE", "1")],
        &["--workers", "1", "--config", &cfg],
    );
    // The directory's inodes into the caches, with a page not asked for below.
    let warm = srv.get("GET /pool/?sort=name&order=desc HTTP/1.0\r\n\r\n");
    assert_eq!(warm.status, 200);
    let go = Arc::new(Barrier::new(3));
    let srv = &srv;
    let got: Vec<Resp> = std::thread::scope(|s| {
        let hs: Vec<_> = ["/pool/", "/pool/?sort=size", "/pool/?sort=date"]
            .into_iter()
            .map(|path| {
                let go = Arc::clone(&go);
                s.spawn(move || {
                    let mut c = srv.connect();
                    go.wait();
                    let raw =
                        format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
                    std::io::Write::write_all(&mut c, raw.as_bytes()).unwrap();
                    read_response(&mut c, false).expect("an answer")
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let statuses: Vec<u16> = got.iter().map(|r| r.status).collect();
    // The first is built; the second waits in the queue of one, unless the
    // thread had not yet taken the first; the rest are refused.
    let ok = got.iter().filter(|r| r.status == 200).count();
    assert!((1..=2).contains(&ok), "{statuses:?}");
    for r in &got {
        match r.status {
            200 => assert!(
                String::from_utf8_lossy(&r.body).contains("package-name-019999"),
                "the whole page"
            ),
            503 => assert_eq!(r.header("retry-after"), Some("5"), "{statuses:?}"),
            s => panic!("{s}: {statuses:?}"),
        }
    }
    // One build each for the warm-up and the pages answered; none for the 503s.
    assert_eq!(counter(srv, "listing_builds_total"), 1 + ok as u64);
}
