#!/usr/bin/env python3
"""The concurrency ramp to 19,000 downloads (MAX=N for another top) against one sluice with
the status page on: the probe's p99 per step (`sluice bench run concurrency`), the workers'
loop turns by length, their total time and how much of it was spent waiting for a CPU.

    bench/ramp_turns.py BIN [PORT]
"""
import os, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (files, start-up, descriptor limit)

bin_ = sys.argv[1]; port = int(sys.argv[2]) if len(sys.argv) > 2 else 18191
compare.make_files()
srv, get = compare.start_sluice_with_status(
    bin_, port, 2, 'keepalive_timeout = "120s"\nkeepalive_requests = 1000000\n')
a = get()
longest = []; stop = False
def watch():
    while not stop:
        try:
            longest.append(max(w["longest_turn_seconds"] for w in get()["workers"]))
        except Exception:
            pass
        time.sleep(1.0)
t = threading.Thread(target=watch); t.start()
out = subprocess.run([bin_, "bench", "run", "concurrency", "--docroot", compare.WWW, "--out", f"{compare.WORK}/ramp-turns-{port}",
                      "--max-concurrency", os.environ.get("MAX", "19000"), "-d", "10s", "--probe-fifo", "--target", f"sluice=http://127.0.0.1:{port}/"],
                     capture_output=True, text=True, preexec_fn=compare.raise_nofile)
stop = True; t.join()
b = get()
compare.stop_all([srv])
for l in out.stdout.splitlines():
    if l.strip().startswith(("target", "sluice")): print(l)
turns = compare.turns_between(a, b)
print("turns by bound (ms):", " ".join(f"≤{l*1000:g}:{n}" for l, n in turns if n))
wa = sum(w["cpu_wait_seconds_total"] for w in a["workers"]); wb = sum(w["cpu_wait_seconds_total"] for w in b["workers"])
print("turn time %.2f s, of which waiting for a CPU %.2f s; turns past 5 ms %d" % (
    b["loop_turn_seconds"]["sum_seconds"] - a["loop_turn_seconds"]["sum_seconds"], wb - wa, sum(n for l, n in turns if l > 0.005)))
longest.sort()
print("longest turn per second (ms): max %.1f, p90 %.1f, median %.1f over %d s" % (
    longest[-1]*1000, longest[int(len(longest)*0.9)]*1000, longest[len(longest)//2]*1000, len(longest)))
