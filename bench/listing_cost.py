#!/usr/bin/env python3
"""What a big directory listing costs the worker, and the clients beside it.

A directory of N empty files (default 100,000: a flat archive's pool), served by each
binary given. Per binary:
  1. K listing requests one after another (HTML, then with `Accept-Encoding: gzip`):
     the CPU each costs the serving threads (`sluice-w*`) and the disk threads
     and the listing threads (`sluice-disk*`, `sluice-list*`), from
     /proc/PID/task/*/stat over the server's processes;
  2. a small file's latency with `wrk -t1 -c10 -d5s --latency`, alone and while
     `--loops` clients (1) ask for the listing in a loop: the p99 says whether the
     listing stalls the other connections of its worker.
`--nginx` runs Debian's nginx (2 workers, `autoindex on`) on the same directory too
(its workers' CPU counted the same way, every thread of its processes as a worker).
The page is larger than a worker's page budget (8 MiB), so every request builds it:
that is the cost a crawler or an attacker asking again and again imposes.

    python3 bench/listing_cost.py --bin old=/work/bins/sluice-a --bin new=target/release/sluice \
        [--nginx] [--loops 4] [--rounds 3]
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from threadcpu import threads_cpu  # noqa: E402

CLASSES = {"w": ("sluice-w", "nginx"), "disk": ("sluice-disk", "sluice-list")}



def get(url, gzip=False):
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzip else {})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, len(r.read())


def wrk_p99(url):
    out = subprocess.run(
        ["wrk", "-t1", "-c10", "-d5s", "--latency", url], capture_output=True, text=True
    ).stdout
    m = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    v = float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return v, rps


def start(binary, root, port):
    if binary != "nginx":
        return subprocess.Popen(
            [binary, "serve", root, "--listen", f"127.0.0.1:{port}", "--workers", "2"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    conf = f"{root}/../nginx-{port}.conf"
    open(conf, "w").write(
        f"worker_processes 2; daemon off; pid {root}/../nginx-{port}.pid;\n"
        f"error_log /dev/null; events {{ worker_connections 4096; }}\n"
        f"http {{ access_log off; server {{ listen 127.0.0.1:{port}; root {root}; "
        f"autoindex on; gzip on; gzip_types text/html; }} }}\n"
    )
    return subprocess.Popen(["nginx", "-c", conf], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def run(name, binary, root, port, k, loops):
    srv = start(binary, root, port)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                get(base + "/small.txt")
                break
            except OSError:
                time.sleep(0.1)
        get(base + "/pool/")  # the first read of the directory warms the inodes
        for gz in (False, True):
            c0 = threads_cpu(srv.pid, CLASSES)
            t0 = time.monotonic()
            size = 0
            for _ in range(k):
                size = get(base + "/pool/", gz)[1]
            wall = (time.monotonic() - t0) / k
            c1 = threads_cpu(srv.pid, CLASSES)
            w = (c1["w"] - c0["w"]) / k * 1000
            d = (c1["disk"] - c0["disk"]) / k * 1000
            print(f"{name}: {'gzip' if gz else 'html'} {size} B: wall {wall*1000:.0f} ms, "
                  f"workers {w:.0f} ms, disk and listing threads {d:.0f} ms CPU per request")
        alone = wrk_p99(base + "/small.txt")
        clients = [subprocess.Popen(
            ["bash", "-c", f"end=$((SECONDS+8)); while [ $SECONDS -lt $end ]; do "
             f"curl -s -o /dev/null {base}/pool/; done"]
        ) for _ in range(loops)]
        time.sleep(1)
        beside = wrk_p99(base + "/small.txt")
        for c in clients:
            c.wait()
        print(f"{name}: small file p99 alone {alone[0]:.2f} ms ({alone[1]:.0f} req/s), "
              f"beside {loops} listing loop(s) {beside[0]:.2f} ms ({beside[1]:.0f} req/s)")
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True, help="NAME=PATH")
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--loops", type=int, default=1)
    ap.add_argument("--nginx", action="store_true")
    a = ap.parse_args()
    bins = a.bin + (["nginx=nginx"] if a.nginx else [])
    with tempfile.TemporaryDirectory() as top:
        root = f"{top}/www"
        os.mkdir(root)
        os.chmod(top, 0o755)
        os.mkdir(f"{root}/pool")
        for i in range(a.entries):
            open(f"{root}/pool/package-name-{i:06d}_1.2.3-4_amd64.deb", "w").close()
        open(f"{root}/small.txt", "w").write("hello\n")
        os.chmod(root, 0o755)
        port = 18300
        for r in range(a.rounds):
            for spec in bins:
                name, path = spec.split("=", 1)
                run(f"round {r} {name}", path, root, port, a.requests, a.loops)
                port += 1


if __name__ == "__main__":
    main()
