#!/usr/bin/env python3
"""A new `sluice condition` binary: in place (SIGUSR2) against a restart.

One `sluice serve --from` backend (2 workers) behind one front. A holder process
opens HALF connections that have sent half a request head and KEPT connections
that have made one request and wait at the front (keep-alive); a connector process
opens a new connection for one request, again and again, all the while. Then the
front is replaced, either by `kill -USR2` (the in-place upgrade) or by SIGTERM and
a new front started on the same address and socket (a restart). Afterwards every
held connection finishes its request (the half heads their second half, the kept
ones a second request). Reported per run: held connections answered afterwards,
new connections that failed, the longest time the connector went without an
answer, and (upgrade) how long the hand-over took by the front's own log.

Loopback only, bounded: each run lasts a few seconds; every process started here
is stopped by PID.

    python3 bench/front_upgrade.py --bin target/release/sluice --half 6000 --kept 2000 --rounds 2
"""
import argparse
import multiprocessing as mp
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime

REQ = b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n"


def answered(s, timeout=5.0):
    s.settimeout(timeout)
    got = b""
    try:
        while b"hello world" not in got:
            d = s.recv(4096)
            if not d:
                break
            got += d
    except OSError:
        pass
    return b"hello world" in got


def holder(addr, half, kept, ready, go, result):
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    hs, ks = [], []
    for _ in range(half):
        s = socket.create_connection(addr)
        s.sendall(REQ[:27])
        hs.append(s)
    for _ in range(kept):
        s = socket.create_connection(addr)
        s.sendall(REQ)
        ks.append(s)
    first = sum(answered(s) for s in ks)
    ready.set()
    go.wait()
    for s in hs:
        try:
            s.sendall(REQ[27:])
        except OSError:
            pass
    for s in ks:
        try:
            s.sendall(REQ)
        except OSError:
            pass
    ok = sum(answered(s) for s in hs + ks)
    result.put((first, ok))


def connector(addr, stop, result):
    ok = failed = 0
    last = time.monotonic()
    gap = 0.0
    while not stop.is_set():
        try:
            s = socket.create_connection(addr, timeout=5)
            s.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            good = answered(s)
            s.close()
        except OSError:
            good = False
        now = time.monotonic()
        if good:
            ok += 1
            gap = max(gap, now - last)
            last = now
        else:
            failed += 1
    result.put((ok, failed, gap))


def start_front(bin_, addr, sock, log):
    return subprocess.Popen(
        [bin_, "condition", "--listen", f"{addr[0]}:{addr[1]}", "--to", f"unix:{sock}"],
        stdout=subprocess.DEVNULL,
        stderr=open(log, "a"),
        start_new_session=True,
    )


def wait_port(addr, t=10):
    end = time.time() + t
    while time.time() < end:
        try:
            socket.create_connection(addr).close()
            return
        except OSError:
            time.sleep(0.02)
    sys.exit(f"nothing listens on {addr}")


def stamp(line):
    m = re.match(r"(\S+Z)", line)
    return datetime.fromisoformat(m.group(1).replace("Z", "+00:00")) if m else None


def run(args, mode, port):
    d = tempfile.mkdtemp(prefix="front-upgrade-")
    root = os.path.join(d, "www")
    os.mkdir(root)
    with open(os.path.join(root, "hello.txt"), "w") as f:
        f.write("hello world\n")
    sock, log = os.path.join(d, "cc.sock"), os.path.join(d, "front.log")
    addr = ("127.0.0.1", port)
    back = subprocess.Popen(
        [args.bin, "serve", root, "--from", f"unix:{sock}", "--allow-root",
         "--workers", "2", "--access-log", "off"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    front = start_front(args.bin, addr, sock, log)
    pids = [back.pid, front.pid]
    try:
        wait_port(addr)
        time.sleep(1.0)
        ready, go, stop = mp.Event(), mp.Event(), mp.Event()
        hres, cres = mp.Queue(), mp.Queue()
        h = mp.Process(target=holder, args=(addr, args.half, args.kept, ready, go, hres))
        h.start()
        if not ready.wait(120):
            sys.exit("the holder did not get its connections")
        c = mp.Process(target=connector, args=(addr, stop, cres))
        c.start()
        time.sleep(1.0)
        if mode == "upgrade":
            os.kill(front.pid, signal.SIGUSR2)
            front.wait(20)
        else:
            os.kill(front.pid, signal.SIGTERM)
            front.wait(20)
            front = start_front(args.bin, addr, sock, log)
            pids.append(front.pid)
        time.sleep(2.0)
        stop.set()
        go.set()
        ok, failed, gap = cres.get(60)
        first, held_ok = hres.get(120)
        c.join()
        h.join()
        text = open(log).read()
        m = re.search(r"new server serves.*pid=(\d+)", text)
        if m:
            pids.append(int(m.group(1)))
        took = ""
        lines = text.splitlines()
        a = next((stamp(l) for l in lines if "serves; this one hands" in l), None)
        b = next((stamp(l) for l in lines if "took the old front's connections" in l), None)
        if a and b:
            took = f"{(b - a).total_seconds() * 1000:.0f} ms"
        return dict(held=args.half + args.kept, kept_first=first, held_ok=held_ok,
                    new_ok=ok, new_failed=failed, gap_ms=gap * 1000, took=took)
    finally:
        for p in pids:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(0.3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="target/release/sluice")
    ap.add_argument("--half", type=int, default=6000)
    ap.add_argument("--kept", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", default="upgrade,restart")
    ap.add_argument("--port", type=int, default=18931)
    args = ap.parse_args()
    print("| mode | round | held connections answered afterwards | new connections answered / failed | longest wait for an answer | hand-over |")
    print("|---|---|---|---|---|---|")
    for r in range(1, args.rounds + 1):
        for mode in args.modes.split(","):
            x = run(args, mode, args.port)
            print(f"| {mode} | {r} | {x['held_ok']:,} of {x['held']:,} | {x['new_ok']:,} / {x['new_failed']:,} "
                  f"| {x['gap_ms']:.0f} ms | {x['took'] or '-'} |", flush=True)


if __name__ == "__main__":
    main()
