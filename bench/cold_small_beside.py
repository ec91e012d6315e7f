#!/usr/bin/env python3
"""A new client's small files, not in the page cache, while many downloads of big
files that are not in it either keep the disk threads busy.

Each small answer then needs a disk thread (its bytes are read off the worker,
`sluice_static::cold`), and so does every MiB of every cold download
(`sluice-server/src/disk.rs`). This asks how long the small client waits for its
turn among them.

Files (written once under a temporary directory): `--big` files of `--big-mib` MiB
and 30,000 files of 4 KiB. Per binary and round: every file evicted from the page
cache (`posix_fadvise(DONTNEED)`), the server started (`--workers 2`, defaults but
`disk_threads = --disk-threads`, 8 by default),
`--downloads` curl clients each downloading a different big file in a loop (each
file evicted again before its next download), and after a second one client asking,
one after another on one keep-alive connection, for small files it has not asked for
before, for `--seconds`. Printed: the small client's median and p99 time per answer
and how many it got, and the downloads' MB/s; first without downloads.

`--slow-disk BPS[:IOPS]` throttles the server's reads from the files' device (a
cgroup v1 `blkio`, as `cold_compare.py` does), so that a read waits as on a
mirror's rotating disks, not the ~1 ms this VM's disk takes.

    python3 bench/cold_small_beside.py --bin old=/work/bins/sluice-35base \\
        --bin new=target/release/sluice [--rounds 3] [--downloads 48] [--slow-disk 150000000:300]
"""
import argparse
import http.client
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from threadcpu import fetch  # noqa: E402

SMALL = 30_000
BLKIO = "/sys/fs/cgroup/blkio/sluice-cold-small"


def tree(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [pid] + [q for p in out.split() for q in tree(int(p))]


def slow_disk(spec, root, pid):
    """Throttle `pid`'s tree's reads from `root`'s device."""
    st = os.stat(root)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    os.makedirs(BLKIO, exist_ok=True)
    bps, _, iops = spec.partition(":")
    open(f"{BLKIO}/blkio.throttle.read_bps_device", "w").write(f"{dev} {int(bps)}")
    if iops:
        open(f"{BLKIO}/blkio.throttle.read_iops_device", "w").write(f"{dev} {int(iops)}")
    for p in tree(pid):
        open(f"{BLKIO}/cgroup.procs", "w").write(str(p))


def unslow_disk():
    if not os.path.isdir(BLKIO):
        return
    for pid in open(f"{BLKIO}/cgroup.procs").read().split():
        try:
            open("/sys/fs/cgroup/blkio/cgroup.procs", "w").write(pid)
        except OSError:
            pass
    os.rmdir(BLKIO)


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def small_client(port, seconds, start):
    """Sequential small files from `start` on: median and p99 ms, count."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    end = time.monotonic() + seconds
    i = start
    while time.monotonic() < end and i < SMALL:
        t0 = time.monotonic()
        c.request("GET", f"/small/{i // 1000}/f{i}")
        r = c.getresponse()
        body = r.read()
        times.append((time.monotonic() - t0) * 1000)
        assert r.status == 200 and len(body) == 4096, r.status
        i += 1
    c.close()
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))], len(times), i


def run(name, binary, root, port, a, start):
    for i in range(a.big):
        evict(f"{root}/big/b{i}")
    for i in range(SMALL):
        evict(f"{root}/small/{i // 1000}/f{i}")
    conf = f"{root}/../sluice-{port}.toml"
    open(conf, "w").write(f"[files]\ndisk_threads = {a.disk_threads}\n")
    srv = subprocess.Popen(
        [binary, "serve", root, "--listen", f"127.0.0.1:{port}", "--workers", "2",
         "--config", conf],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            if fetch(port, "/hello.txt", timeout=10):
                break
            time.sleep(0.1)
        if a.slow_disk:
            time.sleep(0.5)  # the serving processes are up
            slow_disk(a.slow_disk, root, srv.pid)
        alone = small_client(port, a.seconds / 2, start)
        start = alone[3]
        out = f"{root}/../dl-{port}"
        os.makedirs(out, exist_ok=True)
        dls = []
        for k in range(a.downloads):
            f = f"{root}/big/b{k % a.big}"
            dls.append(subprocess.Popen(
                ["bash", "-c",
                 f"end=$((SECONDS+{int(a.seconds) + 2})); n=0; while [ $SECONDS -lt $end ]; do "
                 f"python3 -c 'import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); "
                 f"os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)' {f}; "
                 f"curl -s -o /dev/null -w '%{{size_download}}\\n' "
                 f"http://127.0.0.1:{port}/big/b{k % a.big} --max-time {int(a.seconds) + 2}; "
                 f"done"],
                stdout=subprocess.PIPE, text=True))
        t0 = time.monotonic()
        time.sleep(1)
        beside = small_client(port, a.seconds, start)
        start = beside[3]
        got = 0
        for d in dls:
            o, _ = d.communicate()
            got += sum(int(x) for x in o.split() if x.isdigit())
        wall = time.monotonic() - t0
        print(f"{name}: small cold files alone: median {alone[0]:.2f} ms, p99 {alone[1]:.2f} ms "
              f"({alone[2]}); beside {a.downloads} cold downloads: median {beside[0]:.2f} ms, "
              f"p99 {beside[1]:.2f} ms ({beside[2]}); downloads {got / wall / 1e6:.0f} MB/s",
              flush=True)
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=60)
        unslow_disk()
    return start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True, help="NAME=PATH")
    ap.add_argument("--big", type=int, default=16)
    ap.add_argument("--big-mib", type=int, default=256)
    ap.add_argument("--downloads", type=int, default=48)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--disk-threads", type=int, default=8)
    ap.add_argument("--slow-disk", help="BPS[:IOPS] for the server's reads")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as top:
        root = f"{top}/www"
        os.makedirs(f"{root}/big")
        os.chmod(top, 0o755)
        open(f"{root}/hello.txt", "w").write("hello\n")
        chunk = os.urandom(1 << 20)
        for i in range(a.big):
            with open(f"{root}/big/b{i}", "wb") as f:
                for _ in range(a.big_mib):
                    f.write(chunk)
        for d in range(SMALL // 1000):
            os.makedirs(f"{root}/small/{d}")
        blob = os.urandom(4096)
        for i in range(SMALL):
            with open(f"{root}/small/{i // 1000}/f{i}", "wb") as f:
                f.write(blob)
        os.sync()
        port, start = 18500, 0
        for r in range(a.rounds):
            for spec in a.bin:
                name, path = spec.split("=", 1)
                start = run(f"round {r} {name}", path, root, port, a, start)
                port += 1
                if start >= SMALL - 2000:
                    start = 0


if __name__ == "__main__":
    main()
