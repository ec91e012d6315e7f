#!/usr/bin/env python3
"""Run `sluice bench run`'s conditioning experiments against sluice and nginx side by
side (2 workers each, the files and configs of bench/compare.py), and print every
table. Attack sizes follow the conditioning issue's table; past one process's
descriptors the attackers run in several processes from 127.66.x.

    bench/attack_runs.py [--duration 5] [--experiments incomplete,half-heads,...]
                         [--sweep-max 32000]
"""
import argparse, os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attacks  # noqa: E402  (sluice with its defaults, as in the attack table)
import compare  # noqa: E402

SIZES = {"incomplete": 32000, "half-heads": 16000, "slowloris": 8000,
         "persistent-hold": 20000, "slow-read": 2000}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--experiments",
                    default="incomplete,half-heads,slowloris,persistent-hold,slow-read,heavy-range,incomplete-sweep")
    ap.add_argument("--sweep-max", type=int, default=32000)
    a = ap.parse_args()
    sluice_bin = os.path.join(compare.ROOT, "target/release/sluice")
    compare.make_files()
    compare.configs()
    procs = [attacks.start_sluice(sluice_bin), compare.start("nginx", sluice_bin)]
    targets = ["--target", f"sluice=http://127.0.0.1:{compare.PORTS['sluice']}/",
               "--target", f"nginx=http://127.0.0.1:{compare.PORTS['nginx']}/"]
    try:
        for e in a.experiments.split(","):
            n = a.sweep_max if e == "incomplete-sweep" else SIZES.get(e)
            cmd = [sluice_bin, "bench", "run", e, *targets, "--docroot", compare.WWW,
                   "--out", f"{compare.WORK}/attack-out", "-d", f"{a.duration}s", "-c", "10"]
            if n:
                cmd += ["--max-concurrency", str(n)]
            print(f"$ {' '.join(cmd)}", flush=True)
            r = subprocess.run(cmd, capture_output=True, text=True)
            print(r.stdout + r.stderr, flush=True)
            time.sleep(2)
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
