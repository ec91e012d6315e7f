#!/usr/bin/env python3
"""A burst of N new connections against one worker (`sluice bench URL -c N` opens them
together): the worker's longest loop turn (status page, read every 200 ms) and its turns
by length. Needs /tmp/sluice-bench/www (bench/compare.py makes it).

    bench/burst_turns.py BIN N PORT
"""
import json, resource, subprocess, sys, time, urllib.request
bin_, n, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
conf = f"/tmp/burst-{port}.toml"
open(conf, "w").write(f"""[server]
listen = "127.0.0.1:{port}"
root = "/tmp/sluice-bench/www"
workers = 1
[status]
enabled = true
""")
def nofile():
    s, h = resource.getrlimit(resource.RLIMIT_NOFILE); resource.setrlimit(resource.RLIMIT_NOFILE, (h, h))
srv = subprocess.Popen([bin_, "serve", "--config", conf, "--access-log", "off"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, preexec_fn=nofile)
time.sleep(1)
url = f"http://127.0.0.1:{port}/server-status?format=json"
get = lambda: json.load(urllib.request.urlopen(url, timeout=5))
a = get()
bench = subprocess.Popen([bin_, "bench", f"http://127.0.0.1:{port}/f1k.bin", "-c", n, "-d", "3s"],
                     stdout=subprocess.PIPE, text=True, preexec_fn=nofile)
longest = 0.0
while bench.poll() is None:
    try:
        longest = max(longest, get()["workers"][0]["longest_turn_seconds"])
    except Exception:
        pass
    time.sleep(0.2)
out = bench.stdout.read()
b = get()
srv.terminate(); srv.wait()
ta, tb = a["loop_turn_seconds"], b["loop_turn_seconds"]
d = [y - x for x, y in zip(ta["counts"], tb["counts"])]
le = tb["le"] + [float("inf")]
p99 = [l for l in out.splitlines() if "99" in l][:1]
print("longest %.1f ms;" % (longest * 1000), "turns:", " ".join(f"≤{l*1000:g}ms:{k}" for l, k in zip(le, d) if k), "|", (p99[0].strip() if p99 else ""))
