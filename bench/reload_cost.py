#!/usr/bin/env python3
"""What reloading a large rules file costs the traffic being served, and the memory
it leaves behind (seeds 001/002: a million redirect rules that cost ordinary
traffic nothing, on a reload too).

    bench/reload_cost.py --bin NAME=BINARY [--bin NAME=BINARY ...] [--rules 1000000]
                         [--rounds 2] [--reloads 2] [--change]

Each build serves the same tree with `--rules N` Apache `RewriteRule`s (regexes
with a literal prefix, the slowest kind to compile) and its defaults (two
serving processes). A 1 KiB file is asked for by `sluice bench -t1 -c10` in 1 s
windows: five before the reload (the baseline), then windows until `sluice reload`
returns. Printed per build and round: the reload's wall time, the client's req/s
during the reload as a ratio to the baseline (median of its windows, and the
worst window), the worst window's p99, and the server's PSS summed over its
processes before the first reload and 3 s after each reload (once the replaced
snapshots are released). Builds are interleaved within each round.

Without `--change` each reload reads the same rules (an operator's reload for a
log setting or a limit); with it, the last rule's target is changed before each
reload, so the rules must be compiled again.

The client and the server share the machine's cores: the ratio says how much of
the cores the reload takes from serving, on this machine.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

PORT = 18990


def pss_total(pid):
    """PSS in MB of the server's process and its children."""
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def window(sluice, url, secs=1):
    out = subprocess.run(
        [sluice, "bench", url, "-t", "1", "-c", "10", "-d", f"{secs}s", "--json"],
        capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    return d["requests_per_s"], d["latency_us"]["p99"]


def wait_serving(url, within=120):
    end = time.time() + within
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"server at {url} did not answer within {within} s")


def write_rules(path, n, generation):
    with open(path, "w") as f:
        f.write("RewriteEngine On\n")
        for i in range(n - 1):
            f.write(f"RewriteRule ^/old/{i}/(.*)$ /new/{i}/$1 [R=301,L]\n")
        f.write(f"RewriteRule ^/last/(.*)$ /v{generation}/$1 [R=301,L]\n")


def one(name, binary, conf, url, reloads, change):
    srv = subprocess.Popen([binary, "serve", "--config", conf, "--access-log", "off"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        wait_serving(url)
        time.sleep(1)
        row = {"name": name, "pss0": pss_total(srv.pid), "pss": []}
        base = [window(binary, url) for _ in range(5)]
        row["base"] = statistics.median(r for r, _ in base)
        for k in range(reloads):
            if change:
                rules, n = change
                write_rules(rules, n, k + 1)
            t0 = time.time()
            rel = subprocess.Popen([binary, "reload", "--pid", str(srv.pid), "--config", conf,
                                    "--timeout", "600s"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            during = []
            while rel.poll() is None:
                during.append(window(binary, url))
            wall = time.time() - t0
            if rel.returncode != 0:
                print(f"{name}: reload failed: {rel.stderr.read()}", file=sys.stderr)
            if k == 0:
                row["wall"] = wall
                row["during"] = during
            # Let the workers take the new snapshot and the old one go.
            for _ in range(3):
                window(binary, url)
            row["pss"].append(pss_total(srv.pid))
            if k > 0:
                row.setdefault("walls", []).append(wall)
        return row
    finally:
        os.killpg(srv.pid, signal.SIGTERM)
        srv.wait(timeout=60)
        if change:
            write_rules(change[0], change[1], 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True, help="NAME=BINARY")
    ap.add_argument("--rules", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reloads", type=int, default=2)
    ap.add_argument("--change", action="store_true",
                    help="change one rule before each reload (compile again)")
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bin]
    d = tempfile.mkdtemp(prefix="sluice-reload-")
    os.chmod(d, 0o755)  # started as root, the server serves as nobody
    root = os.path.join(d, "root")
    os.mkdir(root)
    with open(os.path.join(root, "a.txt"), "wb") as f:
        f.write(b"x" * 1024)
    rules = os.path.join(d, "rules.conf")
    write_rules(rules, a.rules, 0)
    conf = os.path.join(d, "sluice.toml")
    with open(conf, "w") as f:
        f.write(f'[server]\nlisten = ["127.0.0.1:{PORT}"]\nroot = "root"\n'
                f'[rules]\nfiles = ["rules.conf"]\n')
    url = f"http://127.0.0.1:{PORT}/a.txt"
    print(f"{a.rules} rules; {a.rounds} rounds; {a.reloads} reloads each; "
          f"{'one rule changed before each' if a.change else 'the same rules'}")
    print("| round | build | reload s | req/s during ÷ before (median, worst window) "
          "| worst window p99 ms | PSS MB before, after each reload |")
    print("|---|---|---|---|---|---|")
    for rnd in range(1, a.rounds + 1):
        for name, binary in bins:
            r = one(name, binary, conf, url, a.reloads, (rules, a.rules) if a.change else None)
            rates = [x for x, _ in r["during"]] or [0]
            p99 = max((p for _, p in r["during"]), default=0) / 1000
            walls = "".join(f", {w:.1f}" for w in r.get("walls", []))
            print(f"| {rnd} | {name} | {r['wall']:.1f}{walls} | "
                  f"{statistics.median(rates) / r['base']:.2f}, {min(rates) / r['base']:.2f} | "
                  f"{p99:.1f} | {r['pss0']:.0f}, " + ", ".join(f"{p:.0f}" for p in r["pss"]) + " |",
                  flush=True)
    subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    main()
