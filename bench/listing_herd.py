#!/usr/bin/env python3
"""Many clients asking at once for one big directory's listing: what it costs the
disk threads, and what it costs a client whose lookups need them.

A directory of N empty files (default 100,000: an 18 MB page, larger than a
worker's 8 MiB page budget, so no worker keeps it), served by each binary given
(`sluice serve --workers 2`, defaults plus `listing = true`). Per binary and round:

  1. the herd: H clients (default 32) ask for the page at the same moment, and
     each reads its answer. Printed: the wall time until the last has its page,
     and the CPU the server's threads spent, by class (`sluice-w*` workers,
     `sluice-disk*` disk threads, `sluice-list*` listing threads), from
     /proc/PID/task/*/stat over the server's processes. One build is ~0.3 s of
     CPU here; a herd that is not merged costs H of them.
  2. lookups beside listings: one client asks, one after another, for names never
     asked before (404s: a name the kernel's directory cache has never seen is a
     lookup that may read the disk, which the worker hands to the disk threads
     while those have work in hand) for `--seconds`, alone and then while `--loops`
     clients (default 16) each ask for the listing in a loop, the sort order
     varying between them (different pages). Printed: that client's median and
     p99 time per answer. A lookup queued behind listing builds waits for them.

    python3 bench/listing_herd.py --bin old=/work/bins/sluice-35base \
        --bin new=target/release/sluice [--rounds 3] [--herd 32] [--loops 16]
"""
import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from threadcpu import fetch, threads_cpu  # noqa: E402

CLASSES = {"w": ("sluice-w",), "disk": ("sluice-disk",), "list": ("sluice-list",)}

SORTS = ["", "?sort=size", "?sort=date", "?sort=name&order=desc"]


def herd(srv, port, n):
    got = [0] * n
    go = threading.Barrier(n + 1)

    def one(i):
        go.wait()
        got[i] = fetch(port, "/pool/")

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    c0 = threads_cpu(srv.pid, CLASSES)
    t0 = time.monotonic()
    go.wait()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    c1 = threads_cpu(srv.pid, CLASSES)
    full = sum(1 for g in got if g > 8 << 20)
    return wall, {k: c1[k] - c0[k] for k in c1}, full


def disk_lookups(port):
    """The server's `disk_lookups_total` (lookups handed to the disk threads)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/server-status?format=json")
    n = json.loads(c.getresponse().read())["disk_lookups_total"]
    c.close()
    return n


def lookups(port, seconds, tag):
    """Sequential 404s of fresh names on one keep-alive connection: the median and
    p99 ms per answer, how many, and how many the disk threads made."""
    before = disk_lookups(port)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        t0 = time.monotonic()
        # Never asked before by any run: else the kernel's directory cache would
        # have it (a negative entry), and no thread would be needed.
        c.request("GET", f"/files/never-{tag}-{i}-{port}-{os.getpid()}.txt")
        r = c.getresponse()
        r.read()
        times.append((time.monotonic() - t0) * 1000)
        assert r.status == 404, r.status
        i += 1
    c.close()
    times.sort()
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    return times[len(times) // 2], p99, len(times), disk_lookups(port) - before


def start(binary, root, port, top):
    conf = f"{top}/sluice-{port}.toml"
    open(conf, "w").write("[files]\nlisting = true\n")
    return subprocess.Popen(
        [binary, "serve", root, "--listen", f"127.0.0.1:{port}", "--workers", "2",
         "--config", conf],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def run(name, binary, root, top, port, a):
    srv = start(binary, root, port, top)
    try:
        for _ in range(100):
            if fetch(port, "/small.txt"):
                break
            time.sleep(0.1)
        fetch(port, "/pool/")  # the first read of the directory warms its inodes
        wall, cpu, full = herd(srv, port, a.herd)
        print(f"{name}: herd of {a.herd}: {full} full pages, last after {wall:.2f} s; CPU s: "
              f"workers {cpu['w']:.2f}, disk threads {cpu['disk']:.2f}, "
              f"listing threads {cpu['list']:.2f}", flush=True)
        alone = lookups(port, a.seconds, "alone")
        # curl in a shell loop: a client that reads the page as fast as it comes.
        loopers = [subprocess.Popen(
            ["bash", "-c", f"end=$((SECONDS+{int(a.seconds) + 2})); while [ $SECONDS -lt $end ]; "
             f"do curl -s -o /dev/null 'http://127.0.0.1:{port}/pool/{SORTS[k % len(SORTS)]}'; done"]
        ) for k in range(a.loops)]
        time.sleep(1)
        beside = lookups(port, a.seconds, "beside")
        for p in loopers:
            p.wait()
        print(f"{name}: fresh-name 404s alone: median {alone[0]:.2f} ms, p99 {alone[1]:.2f} ms "
              f"({alone[2]}, {alone[3]} by disk threads); beside {a.loops} listing loops: "
              f"median {beside[0]:.2f} ms, p99 {beside[1]:.2f} ms ({beside[2]}, "
              f"{beside[3]} by disk threads)", flush=True)
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True, help="NAME=PATH")
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--herd", type=int, default=32)
    ap.add_argument("--loops", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as top:
        root = f"{top}/www"
        os.makedirs(f"{root}/pool")
        os.makedirs(f"{root}/files")
        os.chmod(top, 0o755)
        for i in range(a.entries):
            open(f"{root}/pool/package-name-{i:06d}_1.2.3-4_amd64.deb", "w").close()
        open(f"{root}/small.txt", "w").write("hello\n")
        port = 18400
        for r in range(a.rounds):
            for spec in a.bin:
                name, path = spec.split("=", 1)
                run(f"round {r} {name}", path, root, top, port, a)
                port += 1


if __name__ == "__main__":
    main()
