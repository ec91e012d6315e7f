#!/usr/bin/env python3
"""Seed 000's concurrency experiment against sluice, nginx and lighttpd side by side.

Starts each server as bench/compare.py does (same files, 2 workers, logs off, its
own loopback port, descriptor limit raised to the hard limit), then runs

    sluice bench run concurrency --target sluice=URL --target nginx=URL --target lighttpd=URL
        --docroot /tmp/sluice-bench/www --max-concurrency N -d D

which ramps slow downloads (256 KiB at 64 KiB/s each) and reports, per step,
availability, time to first byte and a 1 KiB probe's latency; this script adds each
server's RSS (process tree, before and at its peak) and the growth per download held
at the top step. Past 15,000
connections the load runs in several processes over several 127.0.1.x addresses.

    bench/concurrency_compare.py [--max 19000] [--duration 10s] [--servers sluice,nginx,lighttpd]
                                 [--sluice-processes N] [--probe-fifo] [--probe-new]
                                 [--stagger] [--probe-after 4s] [--server-bin BIN]

--sluice-processes N sets sluice's serving processes (each with its own descriptor
limit, as nginx's worker processes have; past 20,000 connections one process cannot
hold them). Without it sluice runs its default: one process per worker, two here.

--probe-fifo runs the probe client's thread at real-time priority (the downloads stay
ordinary): on two cores shared with 19,000 downloads' clients, an ordinary probe
mostly measures its own wait for a CPU. --probe-new sends each probe request on a new
connection (a new client). --stagger runs the downloads out of step (they do not all
end and reconnect together), and --probe-after starts the probe that far into each step,
after the burst of connections that opens it (sluice bench run concurrency's
--download-stagger and --probe-after).
"""
import argparse, os, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attack_runs  # noqa: E402  (RssWatch)
import compare  # noqa: E402  (server configs and start-up are shared)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=19000)
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--servers", default="sluice,nginx,lighttpd")
    ap.add_argument("--out", default=f"{compare.WORK}/concurrency-out")
    ap.add_argument("--probe-fifo", action="store_true",
                    help="run the probe client at SCHED_FIFO (its own wait for a CPU on "
                         "cores shared with the load then does not count)")
    ap.add_argument("--probe-new", action="store_true",
                    help="every probe request on a new connection")
    ap.add_argument("--stagger", action="store_true",
                    help="the downloads out of step (--download-stagger)")
    ap.add_argument("--probe-after", default=None,
                    help="start the probe this far into each step, e.g. 4s")
    ap.add_argument("--sluice-processes", type=int, default=0,
                    help="server.processes (0, the default: sluice's own, one per worker)")
    ap.add_argument("--server-bin", default=None,
                    help="serve with this sluice binary (an older build, for an A/B); the "
                         "load client stays this tree's target/release/sluice")
    a = ap.parse_args()
    sluice_bin = os.path.join(compare.ROOT, "target/release/sluice")
    server_bin = a.server_bin or sluice_bin
    compare.make_files()
    compare.configs()
    if a.sluice_processes > 0:
        conf = f"{compare.WORK}/sluice.toml"
        with open(conf) as f:
            text = f.read().replace("workers = 2\n", f"workers = 2\nprocesses = {a.sluice_processes}\n")
        with open(conf, "w") as f:
            f.write(text)
    procs = {}
    try:
        for s in a.servers.split(","):
            procs[s] = compare.start(s, server_bin)
        cmd = [sluice_bin, "bench", "run", "concurrency", "--docroot", compare.WWW,
               "--out", a.out, "--max-concurrency", str(a.max), "-d", a.duration]
        if a.probe_fifo:
            cmd.append("--probe-fifo")
        if a.probe_new:
            cmd.append("--probe-new-connections")
        if a.stagger:
            cmd.append("--download-stagger")
        if a.probe_after:
            cmd += ["--probe-after", a.probe_after]
        for s in procs:
            cmd += ["--target", f"{s}=http://127.0.0.1:{compare.PORTS[s]}/"]
        print("$", " ".join(cmd), flush=True)
        # RSS of each server's process tree, twice a second: its growth at the top
        # step over the downloads held there is the RSS per download.
        watch = attack_runs.RssWatch({s: p.pid for s, p in procs.items()})
        subprocess.run(cmd, check=True, preexec_fn=compare.raise_nofile)
        watch.report("concurrency", a.max, "download at the top step")
    finally:
        for p in procs.values():
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
