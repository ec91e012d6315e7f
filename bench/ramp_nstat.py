#!/usr/bin/env python3
"""A ramp of concurrent downloads and what the kernel's TCP counters say about it
(issue 11 part 4): SYN cookies, retransmissions, and the server's CPU per GiB sent.

    bench/ramp_nstat.py [--max 10800] [--rounds 2] [--servers sluice,nginx]
                        [--sluice-toml '[condition]\\ndefer_accept = "0"']
                        [--variant nodefer='[condition]\\ndefer_accept = "0"']
                        [--duration 10s] [--stagger]

Each round runs `sluice bench run concurrency --max-concurrency MAX -d DURATION`
(with --stagger, `--download-stagger`: the downloads out of step) against
one server at a time (servers as in bench/compare.py, 2 workers each), reads
`nstat` before and after, and prints the counters that moved with the server's CPU
(utime + stime from /proc) per GiB of finished downloads, the load generator's CPU,
the machine's softirq time, drops from the CPUs' input backlogs, and the rows of the
ramp's top two steps (downloads done and MiB/s, where the servers part). A SYN cookie caps a
connection's MSS at 1460 bytes, 45x below loopback's; a ramp that overflows a
listener's SYN queue shows up here as cookies and a retransmission storm.

--variant NAME=TOML (repeatable) adds a server NAME to choose in --servers: sluice
with TOML appended to its config, so that settings are compared in one interleaved run.
"""
import argparse, os, resource, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

COUNTERS = ["TcpExtSyncookiesSent", "TcpExtTCPReqQFullDoCookies", "TcpExtListenOverflows",
            "TcpRetransSegs", "TcpExtTCPSlowStartRetrans", "TcpExtTCPTimeouts", "TcpOutSegs",
            # The kernel's TCP memory: pressure entered, receive queues pruned and
            # collapsed, segments dropped for want of memory.
            "TcpExtTCPMemoryPressures", "TcpExtPruneCalled", "TcpExtTCPRcvCollapsed",
            "TcpExtTCPRcvQDrop", "TcpExtTCPAbortOnMemory", "TcpExtTCPBacklogDrop"]


def client_cpu():
    """CPU seconds of the finished load generators (this script's waited children)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=10800)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--servers", default="sluice,nginx")
    ap.add_argument("--sluice-toml", default="", help="TOML appended to sluice's config (\\n for a newline)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=TOML",
                    help="a server NAME: sluice with TOML appended to its config")
    ap.add_argument("--duration", default="10s", help="each step's length")
    ap.add_argument("--stagger", action="store_true", help="the downloads out of step")
    ap.add_argument("--bin", default=os.path.join(compare.ROOT, "target/release/sluice"),
                    help="the sluice binary (server and load generator)")
    a = ap.parse_args()
    compare.make_files()
    compare.configs()
    with open(f"{compare.WORK}/sluice.toml") as f:
        base = f.read()
    extra = {"sluice": a.sluice_toml}
    for v in a.variant:
        name, _, toml = v.partition("=")
        extra[name] = toml
    sluice = a.bin
    names = a.servers.split(",")
    for r in range(a.rounds):
        for s in names:
            # One server at a time: a ramp to thousands of downloads takes the machine.
            kind = "sluice" if s in extra else s  # a variant runs as sluice, on sluice's port
            if s in extra:
                with open(f"{compare.WORK}/sluice.toml", "w") as f:
                    f.write(base + "\n" + extra[s].replace("\\n", "\n") + "\n")
            p = compare.start(kind, sluice)
            try:
                cmd = [sluice, "bench", "run", "concurrency", "--docroot", compare.WWW,
                       "--out", f"{compare.WORK}/ramp-out", "--max-concurrency", str(a.max), "-d", a.duration,
                       "--target", f"{s}=http://127.0.0.1:{compare.PORTS[kind]}/"]
                if a.stagger:
                    cmd.append("--download-stagger")
                n0, c0, k0 = compare.nstat(COUNTERS), compare.cpu_seconds(p.pid), client_cpu()
                s0, d0 = compare.softirq_seconds(), compare.backlog_drops()
                run = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=compare.raise_nofile)
                n1, c1, k1 = compare.nstat(COUNTERS), compare.cpu_seconds(p.pid), client_cpu()
                s1, d1 = compare.softirq_seconds(), compare.backlog_drops()
            finally:
                p.terminate()
                p.wait(timeout=30)
            rows = [f for f in (l.split() for l in run.stdout.splitlines())
                    if len(f) > 10 and f[0] == s and f[1].isdigit()]
            done = sum(int(f[4]) for f in rows)
            gib = done * 262144 / 2**30
            moved = " ".join(f"{k}={n1.get(k, 0) - n0.get(k, 0)}" for k in COUNTERS)
            print(f"round {r + 1} {s:7} {moved} server_cpu={c1 - c0:.2f}s downloads={done} "
                  f"GiB={gib:.2f} cpu_s_per_GiB={(c1 - c0) / max(gib, 1e-9):.3f} "
                  f"client_cpu={k1 - k0:.2f}s softirq={s1 - s0:.2f}s backlog_drops={d1 - d0}", flush=True)
            # The top two steps: where the servers part (downloads done, MiB/s).
            for f in rows[-2:]:
                print(f"  step {f[1]}: downloads done {f[4]}, ttfb p99 {f[7]} ms, "
                      f"probe p99 {f[9]} ms, {f[11]} MiB/s", flush=True)


if __name__ == "__main__":
    main()
