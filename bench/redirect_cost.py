#!/usr/bin/env python3
"""A redirect's server CPU against a 1 KiB file's (issue 11 part 1, redirects).

One sluice (2 workers, defaults) with one Apache rule (`Redirect 301 /old.html
/new.html`); `wrk -t1 -c50` keep-alive on /old.html and on the 1 KiB /f1k.bin in turn,
ROUNDS rounds of 5 s; server CPU µs per request from /proc/PID/task/*/schedstat of its
process tree. Prints every round and the medians' ratio.

    bench/redirect_cost.py [--rounds 5] [--bin target/release/sluice]
"""
import argparse, os, re, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (WORK, WWW, ROOT, make_files, wait_listening)
from io_ab import cpu_seconds  # noqa: E402

PORT = 18441


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bin", default=os.path.join(compare.ROOT, "target/release/sluice"),
                    help="the sluice build to measure (e.g. an older one, for a baseline)")
    a = ap.parse_args()
    compare.make_files()
    rules = f"{compare.WORK}/redirect.conf"
    with open(rules, "w") as f:
        f.write("Redirect 301 /old.html /new.html\n")
    conf = f"{compare.WORK}/redirect.toml"
    with open(conf, "w") as f:
        f.write(f'[server]\nlisten = "127.0.0.1:{PORT}"\nroot = "{compare.WWW}"\nworkers = 2\n')
    p = subprocess.Popen([a.bin, "serve", "--allow-root",
                          "--config", conf, "--rules", rules, "--access-log", "off"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        compare.wait_listening(p, "sluice", PORT)
        res = {"/old.html": [], "/f1k.bin": []}
        for r in range(a.rounds):
            for path in (list(res) if r % 2 == 0 else list(res)[::-1]):
                c0 = cpu_seconds(p.pid)
                out = subprocess.run(["wrk", "-t1", "-c50", "-d5s", f"http://127.0.0.1:{PORT}{path}"],
                                     capture_output=True, text=True).stdout
                n = int(re.search(r"(\d+) requests in", out).group(1))
                res[path].append((cpu_seconds(p.pid) - c0) / n * 1e6)
        for path, xs in res.items():
            print(f"{path:10} µs/request median {statistics.median(xs):.2f} [{' '.join(f'{x:.2f}' for x in xs)}]")
        ratio = statistics.median(res["/old.html"]) / statistics.median(res["/f1k.bin"])
        print(f"redirect / 1 KiB file: {ratio:.2f}")
    finally:
        p.terminate()


if __name__ == "__main__":
    main()
