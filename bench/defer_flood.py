#!/usr/bin/env python3
"""Deferred accept under a flood of silent connections (issue 8, Figure 10's top step):
sluice with several `[condition]` settings, interleaved round by round, under
`sluice bench run incomplete` (or the whole `incomplete-sweep`), with what the kernel
did meanwhile.

    bench/defer_flood.py [--rounds 3] [--duration 10] [--n 32000]
                         [--experiment incomplete|incomplete-sweep]
                         [--config NAME='TOML' ...]

Default configs: `auto` (sluice's default) and `off` (`defer_accept = "0"`). Each
round starts a fresh sluice (2 workers, defaults otherwise) per config, runs the
experiment against it alone, and prints the legitimate client's ratio to no attack,
sluice's CPU seconds over the whole experiment (utime + stime of its processes), the
machine's softirq seconds, the packets dropped from the CPUs' input backlogs, the
deltas of the kernel's counters that say where the silent connections went (kept in
a SYN queue: `TCPDeferAcceptDrop`, one dropped bare ACK each; SYN cookies; resent
SYN-ACKs; overflowed listen queues), and any deferral switch in sluice's log.
The end gives each config's median ratio and every round.
"""
import argparse, os, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attack_runs  # noqa: E402
import attacks  # noqa: E402
import compare  # noqa: E402

COUNTERS = ["TcpExtTCPDeferAcceptDrop", "TcpExtSyncookiesSent", "TcpExtSyncookiesRecv",
            "TcpExtTCPReqQFullDoCookies", "TcpExtTCPReqQFullDrop", "TcpExtListenOverflows",
            "TcpExtListenDrops", "TcpExtTCPSynRetrans", "TcpRetransSegs", "TcpPassiveOpens",
            "TcpInSegs", "TcpOutSegs"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--n", type=int, default=32000)
    ap.add_argument("--experiment", default="incomplete")
    ap.add_argument("--config", action="append", default=[],
                    help="NAME='TOML' (\\n for a newline); repeatable")
    a = ap.parse_args()
    configs = [c.split("=", 1) for c in a.config] or [
        ("auto", ""), ("off", '[condition]\\ndefer_accept = "0"')]
    sluice_bin = os.path.join(compare.ROOT, "target/release/sluice")
    compare.make_files()
    compare.configs()
    port = compare.PORTS["sluice"]
    results = {}  # name -> [ratios]; for the sweep, the top step's
    for r in range(1, a.rounds + 1):
        for name, toml in configs:
            p = attacks.start_sluice(sluice_bin, 2, (), 0, toml.replace("\\n", "\n") + "\n")
            try:
                cmd = [sluice_bin, "bench", "run", a.experiment, "--target",
                       f"sluice=http://127.0.0.1:{port}/", "--docroot", compare.WWW,
                       "--out", f"{compare.WORK}/defer-flood-out", "-d", f"{a.duration}s",
                       "-c", "10", "--max-concurrency", str(a.n)]
                n0, cpu0 = compare.nstat(COUNTERS), compare.cpu_seconds(p.pid)
                sirq0, d0 = compare.softirq_seconds(), compare.backlog_drops()
                out = subprocess.run(cmd, capture_output=True, text=True)
                n1, cpu1 = compare.nstat(COUNTERS), compare.cpu_seconds(p.pid)
                sirq1, d1 = compare.softirq_seconds(), compare.backlog_drops()
            finally:
                os.killpg(p.pid, 15)
                p.wait(timeout=20)
            if a.experiment == "incomplete":
                ratio = next((x for _, x in attack_runs.table_ratios(out.stdout)), None)
            else:
                ratio = sweep_top(out.stdout, a.n)
            results.setdefault(name, []).append(ratio)
            moved = " ".join(f"{k.removeprefix('TcpExt').removeprefix('Tcp')}={n1[k] - n0[k]}"
                             for k in COUNTERS if n1.get(k, 0) != n0.get(k, 0))
            print(f"round {r} {name:8} ratio {ratio}  sluice CPU {cpu1 - cpu0:.2f} s  "
                  f"softirq {sirq1 - sirq0:.2f} s  backlog drops {d1 - d0}  {moved}", flush=True)
            if a.experiment != "incomplete":
                print(out.stdout, flush=True)
            with open(f"{compare.WORK}/sluice-attack.out") as f:
                switched = [l.strip() for l in f if "TCP_DEFER_ACCEPT" in l]
            if switched:
                print("  sluice's log: " + " | ".join(switched), flush=True)
            time.sleep(2)
    print("\nratio under attack to none: median and every round")
    for name, xs in results.items():
        ok = [x for x in xs if x is not None]
        med = f"{statistics.median(ok):.2f}" if ok else "-"
        print(f"{name:8} median {med}   rounds: {' '.join(f'{x:.2f}' if x is not None else '-' for x in xs)}")


def sweep_top(out, n):
    """The sweep table's ratio at `n` incomplete connections."""
    return next((x for _, step, x in attack_runs.sweep_ratios(out) if step == str(n)), None)


if __name__ == "__main__":
    main()
