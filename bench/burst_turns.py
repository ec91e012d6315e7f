#!/usr/bin/env python3
"""A burst of N new connections against one worker (`sluice bench URL -c N` opens them
together): the worker's longest loop turn (status page, read every 200 ms) and its turns
by length.

    bench/burst_turns.py BIN N PORT
"""
import os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (files, start-up, descriptor limit)

bin_, n, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
compare.make_files()
srv, get = compare.start_sluice_with_status(bin_, port, 1)
a = get()
bench = subprocess.Popen([bin_, "bench", f"http://127.0.0.1:{port}/f1k.bin", "-c", n, "-d", "3s"],
                         stdout=subprocess.PIPE, text=True, preexec_fn=compare.raise_nofile)
longest = 0.0
while bench.poll() is None:
    try:
        longest = max(longest, get()["workers"][0]["longest_turn_seconds"])
    except Exception:
        pass
    time.sleep(0.2)
out = bench.stdout.read()
b = get()
compare.stop_all([srv])
p99 = [l for l in out.splitlines() if "99" in l][:1]
print("longest %.1f ms;" % (longest * 1000), "turns:",
      " ".join(f"≤{l*1000:g}ms:{k}" for l, k in compare.turns_between(a, b) if k), "|", (p99[0].strip() if p99 else ""))
