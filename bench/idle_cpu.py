#!/usr/bin/env python3
"""What a server costs while nobody talks to it: CPU of its whole process tree
(utime + stime from /proc), as a share of one core, and how often its threads
wake (voluntary context switches: each time a thread goes back to sleep), per
second, over SECONDS of idling.

    bench/idle_cpu.py [--seconds 60] [--rounds 2] [--workers 2] [--held N]
                      [--sluice NAME=BIN]... [--nginx] [--h2o] [--lighttpd]

With --held N the server is not quite idle: N keep-alive connections, each after
one request for a 100-byte file (`compare.open_idle`), are held open through the window (what a mirror's
quiet hours look like: browsers and download managers keeping their connections).
The peers close idle connections sooner than sluice and nginx (75 s): h2o after
10 s, lighttpd after 5 s, so keep SECONDS at 4 for them; the report says how many
connections were still open when the window ended.

Each --sluice NAME=BIN is a sluice binary run with bench/attacks.py's defaults and
WORKERS workers; the peers run with bench/compare.py's configs (2 workers). Every
round starts each server in turn, lets it settle for 3 s, and reads its tree's CPU
before and after SECONDS. A second of CPU is 100 ticks here, so a 60 s window
resolves 1/6000 of a core (0.017%). Nothing else should run: an idle server's cost
is a few ms a second, and a compiler beside it is not.
"""
import argparse
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attacks  # noqa: E402
import compare  # noqa: E402
from slowread_windows import counters  # noqa: E402  (a tree's CPU and switches)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sluice", action="append", default=[], metavar="NAME=BIN")
    ap.add_argument("--nginx", action="store_true")
    ap.add_argument("--h2o", action="store_true")
    ap.add_argument("--lighttpd", action="store_true")
    ap.add_argument("--held", type=int, default=0, metavar="N")
    a = ap.parse_args()
    runs = [tuple(s.split("=", 1)) for s in a.sluice] or [
        ("sluice", os.path.join(compare.ROOT, "target/release/sluice"))]
    compare.make_files()
    compare.configs()
    peers = [(n, None) for n in ("nginx", "h2o", "lighttpd") if getattr(a, n)]
    results = {name: [] for name, _ in runs + peers}
    wakes = {name: [] for name, _ in runs + peers}
    for r in range(a.rounds):
        for name, binary in runs + peers:
            if binary is None:
                p = compare.start(name, runs[0][1])
            else:
                p = attacks.start_sluice(binary, a.workers, (), 0, "")
            held = []
            try:
                time.sleep(3)
                if a.held:
                    # Answered, then idle (compare.open_idle lets them settle 1 s).
                    held, answered = compare.open_idle(name if binary is None else "sluice", a.held)
                    if answered != a.held:
                        raise SystemExit(f"{name} answered {answered} of {a.held} connections")
                c0, w0 = compare.cpu_seconds(p.pid), counters(p.pid)[1]
                time.sleep(a.seconds)
                c1, w1 = compare.cpu_seconds(p.pid), counters(p.pid)[1]
                still = sum(map(is_open, held))
            finally:
                for s in held:
                    s.close()
                p.terminate()
                p.wait(timeout=30)
            share = (c1 - c0) / a.seconds * 100
            results[name].append(share)
            wakes[name].append((w1 - w0) / a.seconds)
            print(f"round {r + 1} {name:12} {share:.3f}% of a core, "
                  f"{wakes[name][-1]:.1f} wake-ups/s"
                  + (f", {still} of {a.held} held connections open at the end" if a.held else ""),
                  flush=True)
    def median(v):
        s = sorted(v)
        return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2

    print("median, every round:")
    for name, v in results.items():
        print(f"  {name:12} {median(v):.3f}%   " + " ".join(f"{x:.3f}" for x in v)
              + f"   wake-ups/s {median(wakes[name]):.1f}   "
              + " ".join(f"{x:.1f}" for x in wakes[name]))


def is_open(s):
    """Whether the server has not closed `s` (no EOF, no reset, nothing to read)."""
    try:
        return s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


if __name__ == "__main__":
    main()
