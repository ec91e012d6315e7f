#!/usr/bin/env python3
"""A ramp of concurrent downloads and what the kernel's TCP counters say about it
(issue 11 part 4): SYN cookies, retransmissions, and the server's CPU per GiB sent.

    bench/ramp_nstat.py [--max 10800] [--rounds 2] [--servers sluice,nginx]
                        [--sluice-toml '[condition]\\ndefer_accept = "0"']
                        [--duration 10s] [--stagger]

Each round runs `sluice bench run concurrency --max-concurrency MAX -d DURATION`
(with --stagger, `--download-stagger`: the downloads out of step) against
one server at a time (servers as in bench/compare.py, 2 workers each), reads
`nstat` before and after, and prints the counters that moved with the server's CPU
(utime + stime from /proc) per GiB of finished downloads. A SYN cookie caps a
connection's MSS at 1460 bytes, 45x below loopback's; a ramp that overflows a
listener's SYN queue shows up here as cookies and a retransmission storm.
"""
import argparse, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

COUNTERS = ["TcpExtSyncookiesSent", "TcpExtTCPReqQFullDoCookies", "TcpExtListenOverflows",
            "TcpRetransSegs", "TcpExtTCPSlowStartRetrans", "TcpExtTCPTimeouts", "TcpOutSegs"]


def nstat():
    out = subprocess.run(["nstat", "-az", *COUNTERS], capture_output=True, text=True).stdout
    return {f[0]: int(f[1]) for f in (l.split() for l in out.splitlines()[1:]) if len(f) >= 2}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=10800)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--servers", default="sluice,nginx")
    ap.add_argument("--sluice-toml", default="", help="TOML appended to sluice's config (\\n for a newline)")
    ap.add_argument("--duration", default="10s", help="each step's length")
    ap.add_argument("--stagger", action="store_true", help="the downloads out of step")
    a = ap.parse_args()
    compare.make_files()
    compare.configs()
    if a.sluice_toml:
        with open(f"{compare.WORK}/sluice.toml", "a") as f:
            f.write("\n" + a.sluice_toml.replace("\\n", "\n") + "\n")
    sluice = os.path.join(compare.ROOT, "target/release/sluice")
    names = a.servers.split(",")
    for r in range(a.rounds):
        for s in names:
            # One server at a time: a ramp to thousands of downloads takes the machine.
            p = compare.start(s, sluice)
            try:
                cmd = [sluice, "bench", "run", "concurrency", "--docroot", compare.WWW,
                       "--out", f"{compare.WORK}/ramp-out", "--max-concurrency", str(a.max), "-d", a.duration,
                       "--target", f"{s}=http://127.0.0.1:{compare.PORTS[s]}/"]
                if a.stagger:
                    cmd.append("--download-stagger")
                n0, c0 = nstat(), compare.cpu_seconds(p.pid)
                run = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=compare.raise_nofile)
                n1, c1 = nstat(), compare.cpu_seconds(p.pid)
            finally:
                p.terminate()
                p.wait(timeout=30)
            rows = [l.split() for l in run.stdout.splitlines() if l.strip().startswith(s) and len(l.split()) > 10]
            done = sum(int(f[4]) for f in rows if f[4].isdigit())
            gib = done * 262144 / 2**30
            moved = " ".join(f"{k}={n1.get(k, 0) - n0.get(k, 0)}" for k in COUNTERS)
            print(f"round {r + 1} {s:7} {moved} server_cpu={c1 - c0:.2f}s downloads={done} "
                  f"GiB={gib:.2f} cpu_s_per_GiB={(c1 - c0) / max(gib, 1e-9):.3f}", flush=True)


if __name__ == "__main__":
    main()
