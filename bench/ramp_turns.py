#!/usr/bin/env python3
"""The concurrency ramp to 19,000 downloads (MAX=N for another top) against one sluice with
the status page on: the probe's p99 per step (`sluice bench run concurrency`), the workers'
loop turns by length, their total time and how much of it was spent waiting for a CPU.
Needs /tmp/sluice-bench/www (bench/compare.py makes it).

    bench/ramp_turns.py BIN [PORT]
"""
import json, os, resource, subprocess, sys, threading, time, urllib.request
bin_ = sys.argv[1]; port = int(sys.argv[2]) if len(sys.argv) > 2 else 18191
conf = f"/tmp/turns19k-{port}.toml"
open(conf, "w").write(f"""[server]
listen = "127.0.0.1:{port}"
root = "/tmp/sluice-bench/www"
workers = 2
[http]
keepalive_timeout = "120s"
keepalive_requests = 1000000
[status]
enabled = true
""")
def nofile():
    s, h = resource.getrlimit(resource.RLIMIT_NOFILE); resource.setrlimit(resource.RLIMIT_NOFILE, (h, h))
srv = subprocess.Popen([bin_, "serve", "--config", conf, "--access-log", "off"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, preexec_fn=nofile)
time.sleep(1)
url = f"http://127.0.0.1:{port}/server-status?format=json"
def get():
    return json.load(urllib.request.urlopen(url, timeout=5))
a = get()
longest = []; stop = False
def watch():
    while not stop:
        try:
            longest.append(max(get()["workers"][i]["longest_turn_seconds"] for i in range(2)))
        except Exception:
            pass
        time.sleep(1.0)
t = threading.Thread(target=watch); t.start()
out = subprocess.run([bin_, "bench", "run", "concurrency", "--docroot", "/tmp/sluice-bench/www", "--out", f"/tmp/turns19k-out-{port}",
                      "--max-concurrency", os.environ.get("MAX", "19000"), "-d", "10s", "--probe-fifo", "--target", f"sluice=http://127.0.0.1:{port}/"],
                     capture_output=True, text=True, preexec_fn=nofile)
stop = True; t.join()
b = get()
srv.terminate(); srv.wait()
for l in out.stdout.splitlines():
    if l.strip().startswith(("target", "sluice")): print(l)
ta, tb = a["loop_turn_seconds"], b["loop_turn_seconds"]
le = tb["le"]; d = [y - x for x, y in zip(ta["counts"], tb["counts"])]
print("turns by bound (ms):", " ".join(f"≤{l*1000:g}:{n}" for l, n in zip(le + [float('inf')], d) if n))
wa = sum(w["cpu_wait_seconds_total"] for w in a["workers"]); wb = sum(w["cpu_wait_seconds_total"] for w in b["workers"])
print("turn time %.2f s, of which waiting for a CPU %.2f s; turns past 5 ms %d" % (tb["sum_seconds"] - ta["sum_seconds"], wb - wa, sum(d[i] for i, l in enumerate(le + [9]) if l > 0.005)))
longest.sort()
print("longest turn per second (ms): max %.1f, p90 %.1f, median %.1f over %d s" % (
    longest[-1]*1000, longest[int(len(longest)*0.9)]*1000, longest[len(longest)//2]*1000, len(longest)))
