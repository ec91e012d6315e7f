#!/usr/bin/env python3
"""Is `sluice bench` as fast as wrk? Both drive nginx (2 workers) with the same
connections and one thread, rounds alternated; medians of req/s.

    bench/loadgen_compare.py [--rounds 5] [--duration 8] [--connections 50]
"""
import argparse, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--sluice", default=os.path.join(os.path.dirname(HERE), "target/release/sluice"))
    a = ap.parse_args()
    compare.make_files()
    compare.configs()
    p = compare.start("nginx", a.sluice)
    url = f"http://127.0.0.1:{compare.PORTS['nginx']}/f1k.bin"
    res = {"wrk": [], "sluice bench": []}
    try:
        for r in range(a.rounds):
            w = compare.wrk(url, a.connections, a.duration)["rps"]
            out = subprocess.run([a.sluice, "bench", url, "-c", str(a.connections), "-d", f"{a.duration}s",
                                  "-t", "1", "--json"], capture_output=True, text=True, check=True).stdout
            s = json.loads(out)["requests_per_s"]
            res["wrk"].append(w)
            res["sluice bench"].append(s)
            print(f"round {r + 1}: wrk {w:.0f} req/s, sluice bench {s:.0f} req/s", flush=True)
    finally:
        p.terminate()
        p.wait(timeout=10)
    mw, ms = statistics.median(res["wrk"]), statistics.median(res["sluice bench"])
    print(f"\n| load generator | req/s (median of {a.rounds}) | ratio to wrk |\n|---|---|---|")
    print(f"| wrk -t1 -c{a.connections} | {mw:.0f} | 1.00 |")
    print(f"| sluice bench -t 1 -c {a.connections} | {ms:.0f} | {ms / mw:.2f} |")


if __name__ == "__main__":
    main()
