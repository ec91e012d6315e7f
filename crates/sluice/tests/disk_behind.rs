//! When the disks are behind — the disk threads' queue full, or a slow disk's
//! share of it — nothing of theirs is read on a worker (which would wait there
//! with every client it has): a cold lookup is answered 503 "disk busy" with
//! `Retry-After`, and a download's cold range waits and asks again
//! (`disk_busy_total` and `disk_retries_total` on the status page). Once the disk
//! catches up, every download ends whole.
//!
//! The server's test hooks make the queue one job long and each disk thread's job
//! 700 ms slower, so one thread and two downloads fill it.
//!
//! A disk that stops answering ends its downloads by their deadlines, as any
//! download that makes no progress; the close is counted as the disk's
//! (`disk_stalled`), so the status page does not blame slow readers; the
//! page's `disk_lanes` shows the disk's read still in progress.

use sluice_testkit::*;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

fn counter(srv: &Server, name: &str) -> u64 {
    srv.status_json()[name].as_u64().expect(name)
}

/// The server with one worker, `config` (TOML) and the test hooks `env`.
fn one_worker(dir: tempfile::TempDir, config: &str, env: &[(&str, &str)]) -> Server {
    let cfg = dir.path().join(".test-config.toml");
    std::fs::write(&cfg, config).unwrap();
    let cfg = cfg.to_str().unwrap().to_string();
    Server::start_in_env(dir, env, &["--workers", "1", "--config", &cfg])
}

fn download(srv: &Server, path: &str) -> Resp {
    let mut c = srv.client();
    c.send(format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes());
    c.response(false).expect("an answer")
}

#[test]
fn with_the_disk_queue_full_lookups_get_503_and_downloads_wait_whole() {
    let files: Vec<(String, Vec<u8>)> = (1..=3)
        .map(|i| (format!("/big{i}.bin"), noise(2 << 20, i)))
        .collect();
    let small = noise(12_000, 9);
    // The worker's probe of a cold page starts the kernel's readahead, and on a
    // fast disk that can finish before the probe looks again: then a download
    // never needs the pool. So the scenario is tried until both first downloads
    // waited for it (the server's own count says so), at most five times.
    for attempt in 0..5 {
        let dir = docroot();
        let root = dir.path().to_path_buf();
        for (path, data) in &files {
            write_evicted(&root.join(&path[1..]), data);
        }
        write_evicted(&root.join("small.bin"), &small);
        let srv = one_worker(
            dir,
            "[files]\ndisk_threads = 1\n",
            &[
                ("SLUICE_TEST_DISK_QUEUE", "1"),
                ("SLUICE_TEST_DISK_HOLD_MS", "700"),
            ],
        );
        let srv = &srv;
        let done = std::thread::scope(|s| {
            // The first download's range goes to the one thread, which holds it;
            // the second's waits in the queue of one.
            let first = s.spawn(|| download(srv, &files[0].0));
            std::thread::sleep(Duration::from_millis(150));
            let second = s.spawn(|| download(srv, &files[1].0));
            std::thread::sleep(Duration::from_millis(150));
            if counter(srv, "disk_waits_total") != 2 {
                let _ = (first.join(), second.join());
                return None;
            }
            // The queue is full: a cold lookup is refused, not made here...
            let r = download(srv, "/small.bin");
            assert_eq!(
                (r.status, r.header("retry-after"), r.text().trim()),
                (503, Some("5"), "503 Service Unavailable: disk busy"),
                "a cold lookup while the disk threads' queue is full"
            );
            // ...and a third download's cold range waits to ask again.
            let third = s.spawn(|| download(srv, &files[2].0));
            Some([first, second, third].map(|h| h.join().unwrap()))
        });
        let Some(got) = done else {
            eprintln!("attempt {attempt}: a download found its pages read already");
            continue;
        };
        for ((path, data), r) in files.iter().zip(&got) {
            assert_eq!(r.status, 200, "{path}");
            assert!(r.body == *data, "{path}: the body differs");
        }
        assert_eq!(counter(srv, "disk_busy_total"), 1);
        if counter(srv, "disk_retries_total") == 0 {
            // Its pages were read already when it came (1 run in 40 here): the
            // same race as above. A server that never retries fails every attempt.
            eprintln!("attempt {attempt}: the third download never asked the pool");
            continue;
        }
        // The disk has caught up: the same lookup is made now.
        let r = download(srv, "/small.bin");
        assert_eq!(r.status, 200);
        assert!(r.body == small);
        return;
    }
    panic!(
        "in five attempts, the queue was never full with the first two downloads \
         while the third was refused and retried"
    );
}

#[test]
fn a_download_stuck_on_the_disk_is_closed_as_disk_stalled_not_as_a_slow_reader() {
    let data = noise(2 << 20, 4);
    // As above: on a fast disk the kernel's readahead may have read the pages
    // before the download asks the pool; then it is sent whole, and tried again.
    for attempt in 0..5 {
        let dir = docroot();
        let root = dir.path().to_path_buf();
        write_evicted(&root.join("big.bin"), &data);
        // Each disk job takes 4 s: longer than the download's send_timeout.
        let srv = one_worker(
            dir,
            "[files]\ndisk_threads = 1\n[http]\nsend_timeout = \"1s\"\n",
            &[("SLUICE_TEST_DISK_HOLD_MS", "4000")],
        );
        let mut c = srv.client();
        c.s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let t0 = Instant::now();
        c.send(b"GET /big.bin HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let (got, _) = read_to_end(&mut c.s);
        let took = t0.elapsed();
        if counter(&srv, "disk_waits_total") == 0 {
            eprintln!("attempt {attempt}: the download found its pages read already");
            continue;
        }
        assert!(
            got.len() < data.len(),
            "the download ended whole ({} bytes) though its disk job took 4 s",
            got.len()
        );
        assert!(
            took < Duration::from_millis(3500),
            "closed after {took:?}: by the disk's answer, not by send_timeout (1 s)"
        );
        let status = srv.status_json();
        let closes = &status["closes_by_reason"];
        // The disk thread is still in its 4 s job: the status page shows it in
        // the docroot's device lane, and Prometheus the same.
        let dev = std::fs::metadata(&root).unwrap().dev();
        let device = format!("{}:{}", libc::major(dev), libc::minor(dev));
        let lanes = status["disk_lanes"].as_array().expect("disk_lanes");
        let lane = lanes
            .iter()
            .find(|l| l["device"] == device.as_str())
            .unwrap_or_else(|| panic!("no lane for {device}: {lanes:?}"));
        assert_eq!(lane["reading"].as_u64(), Some(1), "{lanes:?}");
        let metrics = srv
            .get("GET /server-status/metrics HTTP/1.0\r\n\r\n")
            .text();
        let line = format!("sluice_disk_lane_reading{{device=\"{device}\"}} 1");
        assert!(
            metrics.lines().any(|l| l == line),
            "no `{line}` in:\n{metrics}"
        );
        assert_eq!(
            [
                closes["disk_stalled"].as_u64(),
                closes["slow_read"].as_u64(),
                closes["send_timeout"].as_u64()
            ],
            [Some(1), Some(0), Some(0)],
            "closes: {closes}"
        );
        // A lookup that waits for the stuck disk (the thread is still in its
        // job) is answered 503 "disk busy" once send_timeout has passed, also
        // counted as the disk's.
        let r = srv.get("GET /not-here HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(
            (r.status, r.header("retry-after"), r.text().trim()),
            (503, Some("5"), "503 Service Unavailable: disk busy"),
        );
        let status = srv.status_json();
        assert_eq!(status["closes_by_reason"]["disk_stalled"].as_u64(), Some(2));
        assert_eq!(status["disk_busy_total"].as_u64(), Some(1));
        return;
    }
    panic!("in five attempts, the download never waited for the disk pool");
}

/// Unmounts its path when dropped. Made after the server that owns the
/// docroot, so it is dropped first, even on a panic: the docroot can then be
/// removed whole.
struct Unmount(std::path::PathBuf);

/// Mount a tmpfs at `path`.
fn mount_tmpfs(path: &std::path::Path) {
    std::fs::create_dir_all(path).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "mount a tmpfs at {} (this test runs as root, as scripts/test.sh does)",
        path.display()
    );
}

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

fn lane(status: &serde_json::Value, dev: u64) -> (u64, u64) {
    let device = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let lanes = status["disk_lanes"].as_array().expect("disk_lanes");
    let l = lanes
        .iter()
        .find(|l| l["device"] == device.as_str())
        .unwrap_or_else(|| panic!("no lane for {device}: {lanes:?}"));
    (
        l["waiting"].as_u64().unwrap(),
        l["reading"].as_u64().unwrap(),
    )
}

/// A file system mounted below the root is a disk of its own to the disk
/// threads: its lane exists from the start, and a lookup under it waits there,
/// not in the root's lane (where a failing disk below the root would have filled
/// the root's share of the queue).
#[test]
fn a_lookup_under_a_mount_point_below_the_root_waits_in_that_disks_lane() {
    let dir = docroot();
    let root = dir.path().to_path_buf();
    mount_tmpfs(&root.join("debian"));
    // Every lookup not in the kernel's caches is made by a disk thread, and
    // each disk job takes 3 s.
    let srv = one_worker(
        dir,
        "[files]\ndisk_threads = 4\ndisk_lookup_max = \"0s\"\n",
        &[("SLUICE_TEST_DISK_HOLD_MS", "3000")],
    );
    let _unmount = Unmount(root.join("debian"));
    std::fs::write(root.join("debian/x"), "x").unwrap();
    let (root_dev, sub_dev) = (
        std::fs::metadata(&root).unwrap().dev(),
        std::fs::metadata(root.join("debian")).unwrap().dev(),
    );
    assert_ne!(root_dev, sub_dev);
    // `sluice check` names both devices' lanes.
    let lanes = |dev: u64| format!("{}:{}", libc::major(dev), libc::minor(dev));
    let cfg = root.join(".check.toml");
    std::fs::write(
        &cfg,
        format!("[server]\nroot = {:?}\n", root.to_str().unwrap()),
    )
    .unwrap();
    let out = std::process::Command::new(bin())
        .arg("check")
        .arg(&cfg)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    let mut want = [root_dev, sub_dev];
    want.sort_unstable();
    let line = format!("disk lanes: {} {} (", lanes(want[0]), lanes(want[1]));
    assert!(out.contains(&line), "no {line:?} in:\n{out}");
    let status = srv.status_json();
    assert_eq!(lane(&status, root_dev), (0, 0));
    assert_eq!(
        lane(&status, sub_dev),
        (0, 0),
        "the mounted disk's lane from the start"
    );
    std::thread::scope(|s| {
        // A name never looked up: not in the directory cache.
        let r = s.spawn(|| srv.get("GET /debian/fresh-name-1 HTTP/1.1\r\nHost: a\r\n\r\n"));
        let t0 = Instant::now();
        loop {
            let status = srv.status_json();
            if lane(&status, sub_dev).1 == 1 {
                assert_eq!(lane(&status, root_dev), (0, 0), "{status}");
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(2),
                "the lookup never reached a disk thread: {}",
                status["disk_lanes"]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(r.join().unwrap().status, 404);
    });
}
