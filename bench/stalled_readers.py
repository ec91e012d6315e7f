#!/usr/bin/env python3
"""Readers that read slowly or not at all, and what the kernel sends them: zero-window
probes, segments and retransmissions a second (`nstat`), with the server's CPU, in
windows of one run, per server (issue 8: deferral's RTO guard and its lifting).

    bench/stalled_readers.py [--rate 16] [--readers 2000] [--seconds 40]
                             [--windows 10-20,20-30] [--rounds 2]
                             [--sluice NAME=BIN]... [--toml NAME=TOML]... [--nginx]

Each --sluice NAME=BIN is a sluice binary run with bench/attacks.py's defaults (2
workers), plus --toml NAME=TOML's lines if given (\\n for a newline); --nginx adds
nginx with bench/compare.py's config. Every round runs each in turn: `READERS`
connections (from 127.66.0.1 and 127.77.0.1, two load processes) ask for the
100 MB file and read RATE bytes a second for SECONDS, and the counters are read at
each window's edges (seconds from the start). Nothing else runs: the counters are
the machine's. Examples: 2,000 readers at 16 B/s (the slow-read attack, probed while
their windows are shut); 1,000 at 4 KiB/s over 65 s with windows 5-25,35-60 (readers
above the minimum rate, before and after their first rate window ends).
"""
import argparse, os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attacks  # noqa: E402
import compare  # noqa: E402

COUNTERS = ["TcpExtTCPWinProbe", "TcpOutSegs", "TcpRetransSegs"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=16, help="bytes a second each reader reads")
    ap.add_argument("--readers", type=int, default=2000)
    ap.add_argument("--seconds", type=int, default=40)
    ap.add_argument("--windows", default="10-20,20-30", help="FROM-TO seconds, comma-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sluice", action="append", default=[], metavar="NAME=BIN")
    ap.add_argument("--toml", action="append", default=[], metavar="NAME=TOML")
    ap.add_argument("--nginx", action="store_true")
    a = ap.parse_args()
    runs = [tuple(s.split("=", 1)) for s in a.sluice] or [
        ("sluice", os.path.join(compare.ROOT, "target/release/sluice"))]
    toml = dict(t.split("=", 1) for t in a.toml)
    windows = [tuple(int(x) for x in w.split("-")) for w in a.windows.split(",")]
    loadgen = runs[0][1]
    compare.make_files()
    compare.configs()
    order = runs + ([("nginx", None)] if a.nginx else [])
    for r in range(a.rounds):
        for name, binary in order:
            if binary is None:
                p, port = compare.start("nginx", loadgen), compare.PORTS["nginx"]
            else:
                extra = toml.get(name, "").replace("\\n", "\n") + "\n"
                p, port = attacks.start_sluice(binary, 2, (), 0, extra), compare.PORTS["sluice"]
            readers = subprocess.Popen(
                [loadgen, "bench", f"http://127.0.0.1:{port}/f100m.bin", "--read-rate", str(a.rate),
                 "-c", str(a.readers), "--processes", "2", "-d", f"{a.seconds}s",
                 "--timeout", f"{2 * a.seconds}s", "--source-addrs", "127.66.0.1,127.77.0.1"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=compare.raise_nofile)
            t0, cells = time.monotonic(), []
            try:
                for start, end in windows:
                    time.sleep(max(0.0, t0 + start - time.monotonic()))
                    n0, c0 = compare.nstat(COUNTERS), compare.cpu_seconds(p.pid)
                    time.sleep(max(0.0, t0 + end - time.monotonic()))
                    n1, c1 = compare.nstat(COUNTERS), compare.cpu_seconds(p.pid)
                    per_s = {k: (n1.get(k, 0) - n0.get(k, 0)) / (end - start) for k in COUNTERS}
                    cells.append(f"{start}-{end}s: probes {per_s['TcpExtTCPWinProbe']:.0f}/s, "
                                 f"segments {per_s['TcpOutSegs']:.0f}/s, "
                                 f"retransmitted {per_s['TcpRetransSegs']:.0f}/s, "
                                 f"server CPU {(c1 - c0) / (end - start) * 100:.2f}%")
                readers.wait(timeout=2 * a.seconds)
            finally:
                readers.kill()
                p.terminate()
                p.wait(timeout=30)
            print(f"round {r + 1} {name:10} " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
