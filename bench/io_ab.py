#!/usr/bin/env python3
"""One download path, two sluice builds and lighttpd side by side (issue 11 part 2).

Starts an old build, the current build (each 2 workers, defaults plus --toml lines)
and lighttpd (2 workers) on loopback ports, all at once, then interleaves (rotated
order) either single `curl` downloads or 5 s `wrk -t1 -cC` runs of one file, and
prints per server the median GB/s and server CPU per response (µs, from
/proc/PID/task/*/schedstat of the server's process tree), with every sample.

    bench/io_ab.py --old /path/to/old/sluice [--mode curl|wrk] [--file f100m.bin] [-c 8] [-n 15]
                   [--toml 'LINES (\\n for newlines)'] [--old-toml 'LINES']

--lua SCRIPT (with --mode wrk) runs wrk with that script against the server's root
instead of --file, e.g. /tmp/sluice-bench/random.lua for bench/compare.py's random10k
(server CPU per response is then the figure; GB/s counts --file's size).

--old-toml adds lines to the old build's config only: with --old set to the current
build, it compares one setting against the defaults.

The files are bench/compare.py's (/tmp/sluice-bench/www, made if missing).
"""
import argparse, os, re, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (WORK, WWW, ROOT, tree)

PORTS = {"old": 18431, "new": 18432, "lighttpd": 18433}


def cpu_seconds(pid):
    """CPU time of `pid` and its descendants, ns-precise (schedstat, not ticks)."""
    total = 0
    for p in compare.tree(pid):
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
        except OSError:
            pass
    return total / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--mode", choices=["curl", "wrk"], default="curl")
    ap.add_argument("--file", default="f100m.bin")
    ap.add_argument("-c", default="8")
    ap.add_argument("-n", type=int, default=15)
    ap.add_argument("--toml", default="")
    ap.add_argument("--old-toml", default="")
    ap.add_argument("--lua", default=None)
    a = ap.parse_args()
    bins = {"old": a.old, "new": os.path.join(compare.ROOT, "target/release/sluice")}
    compare.make_files()
    procs = {}
    try:
        for v, b in bins.items():
            conf = f"{compare.WORK}/io_ab-{v}.toml"
            with open(conf, "w") as f:
                f.write(f'[server]\nlisten = "127.0.0.1:{PORTS[v]}"\nroot = "{compare.WWW}"\nworkers = 2\n'
                        + a.toml.replace("\\n", "\n") + "\n"
                        + (a.old_toml.replace("\\n", "\n") + "\n" if v == "old" else ""))
            procs[v] = subprocess.Popen([b, "serve", "--allow-root", "--config", conf, "--access-log", "off"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(f"{compare.WORK}/io_ab-lighttpd.conf", "w") as f:
            f.write(f'server.document-root = "{compare.WWW}"\nserver.bind = "127.0.0.1"\n'
                    f'server.port = {PORTS["lighttpd"]}\nserver.max-worker = 2\n'
                    f'server.errorlog = "{compare.WORK}/logs/io_ab-lighttpd.err"\n'
                    'server.username = "nobody"\nserver.groupname = "nogroup"\n')
        # Own session: lighttpd signals its whole process group on SIGTERM.
        procs["lighttpd"] = subprocess.Popen(["lighttpd", "-D", "-f", f"{compare.WORK}/io_ab-lighttpd.conf"],
                                             start_new_session=True)
        for v, p in procs.items():
            compare.wait_listening(p, v, PORTS[v])
        size = os.path.getsize(os.path.join(compare.WWW, a.file))
        res = {v: ([], []) for v in PORTS}
        for i in range(a.n):
            order = list(PORTS)
            for v in order[i % 3:] + order[:i % 3]:
                url = f"http://127.0.0.1:{PORTS[v]}/{a.file}"
                c0 = cpu_seconds(procs[v].pid)
                if a.mode == "curl":
                    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}", url],
                                         capture_output=True, text=True, timeout=60).stdout
                    n, gbs = 1, float(out) / 1e9
                else:
                    script = ["-s", a.lua, url.rsplit("/", 1)[0]] if a.lua else [url]
                    out = subprocess.run(["wrk", "-t1", f"-c{a.c}", "-d5s", *script],
                                         capture_output=True, text=True, timeout=60).stdout
                    n = int(re.search(r"(\d+) requests in", out).group(1))
                    gbs = n * size / 5 / 1e9
                c1 = cpu_seconds(procs[v].pid)
                res[v][0].append(gbs)
                res[v][1].append((c1 - c0) * 1e6 / max(n, 1))
        for v, (g, c) in res.items():
            print(f"{v:9} GB/s median {statistics.median(g):.2f} [{' '.join(f'{x:.2f}' for x in g)}]   "
                  f"server µs/response median {statistics.median(c):.2f} [{' '.join(f'{x:.2f}' for x in c)}]")
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait()


if __name__ == "__main__":
    main()
