#!/usr/bin/env python3
"""What a worker's once-a-second housekeeping and a status-page read cost every
connection on it, with many connections open: the loop turns they take.

    bench/held_turns.py [--conns 15000] [--seconds 5] [--rounds 3] [--sluice NAME=BIN]...

Each --sluice NAME=BIN runs with one worker in one process (so every connection is
on the worker measured), and a holding process opens CONNS keep-alive connections
from 127.10.0.0/16 upwards (250 addresses a /24, 20 /24s a /16), each after one
1 KiB request, and keeps them idle. Then, per round:

- `quiet`: the loop-turn histogram over SECONDS with nothing but the idle
  connections (read from the status page before and after, so the window holds
  one status-page turn at each end, counted below); the worker publishes its
  status once a second, so SECONDS such turns are in it;
- `page`: the status page read ten times 0.2 s apart, the client's time for each
  (the page's turn waits for nothing else: the connections are idle).

Prints the turn counts per bucket and the page's median and longest time. The
machine should be otherwise idle: a turn here is a few ms.
"""
import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

PORT = 18561
HOLD = r"""
import resource, socket, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
port, n = int(sys.argv[1]), int(sys.argv[2])
socks = []
for i in range(n):
    s = socket.socket()
    s.bind((f"127.{10 + i // 5000}.{(i // 250) % 20}.{1 + i % 250}", 0))
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /f1k.bin HTTP/1.1\r\nHost: x\r\n\r\n")
    socks.append(s)
for s in socks:
    s.recv(4096)
print("held", flush=True)
sys.stdin.read()
"""


def status(port):
    t = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/server-status?format=json") as r:
        j = json.load(r)
    return j, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=15000)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sluice", action="append", default=[], metavar="NAME=BIN")
    a = ap.parse_args()
    runs = [tuple(s.split("=", 1)) for s in a.sluice] or [
        ("sluice", os.path.join(compare.ROOT, "target/release/sluice"))]
    compare.make_files()
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    for r in range(a.rounds):
        for name, binary in runs:
            srv = subprocess.Popen(
                [binary, "serve", compare.WWW, "--listen", f"127.0.0.1:{PORT}",
                 "--workers", "1", "--processes", "1", "--access-log", "off",
                 "--allow-root"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            hold = None
            try:
                compare.wait_listening(srv, name, PORT)
                hold = subprocess.Popen([sys.executable, "-c", HOLD, str(PORT), str(a.conns)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                if hold.stdout.readline().strip() != "held":
                    raise SystemExit("the holding process failed")
                time.sleep(2)
                before, _ = status(PORT)
                time.sleep(a.seconds)
                after, _ = status(PORT)
                le = before["loop_turn_seconds"]["le"]
                turns = [x - y for x, y in zip(after["loop_turn_seconds"]["counts"],
                                               before["loop_turn_seconds"]["counts"])]
                page = []
                for _ in range(10):
                    page.append(status(PORT)[1] * 1e3)
                    time.sleep(0.2)
                open_conns = after["open_connections"]
                labels = [f"<={x * 1e3:g}ms" for x in le] + [f">{le[-1] * 1e3:g}ms"]
                cells = " ".join(f"{lab}:{n}" for lab, n in zip(labels, turns) if n)
                print(f"round {r + 1} {name:10} open {open_conns}  quiet {a.seconds:g} s turns: {cells}"
                      f"  | page ms: median {statistics.median(page):.2f}, max {max(page):.2f}",
                      flush=True)
            finally:
                if hold:
                    hold.stdin.close()
                    hold.wait(timeout=30)
                srv.terminate()
                srv.wait(timeout=30)


if __name__ == "__main__":
    main()
