#!/usr/bin/env python3
"""One download, with the reader placed (issue 11 part 2): where does a single
loopback download's speed come from, the server's way of sending or the CPU the
reading process gets?

Every server is pinned to CPU 0 (`taskset`): sluice with one worker in each `io`
mode asked for (`--modes`, e.g. `sendfile,mmap,auto`; `MODE+uBYTES` also sets
`condition.unsent_max`), and lighttpd as `compare.py` configures it. Then `curl`
downloads the file N times per case, pinned to the server's CPU (`same`), to the
other CPU (`other`), or left to the scheduler (`free`), rounds interleaved. For
each case: the median MB/s, the server's CPU per download (every thread's
`schedstat`, nanoseconds), the reader's CPU per download and its voluntary and
involuntary context switches (`getrusage` of the finished `curl`s).

    bench/download_placement.py [--sluice BIN] [--modes sendfile,mmap,auto]
        [--where same,other,free] [--rounds 2] [-n 7] [--file f100m.bin] [--no-lighttpd]

Needs: curl, lighttpd, taskset, and the files `compare.py` makes.
"""
import argparse, os, resource, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
from io_ab import cpu_seconds  # noqa: E402  (every thread's schedstat)

PORT0 = 18950
PIN = {"same": ["taskset", "-c", "0"], "other": ["taskset", "-c", "1"], "free": []}


def sluice_config(mode, port):
    io, _, unsent = mode.partition("+u")
    path = f"{compare.WORK}/placement-{mode}.toml"
    with open(path, "w") as f:
        f.write(f'[server]\nlisten = "127.0.0.1:{port}"\nroot = "{compare.WWW}"\nworkers = 1\n'
                f'[files]\nio = "{io}"\n' + (f"[condition]\nunsent_max = {unsent}\n" if unsent else ""))
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=f"{compare.ROOT}/target/release/sluice")
    ap.add_argument("--modes", default="sendfile,mmap,auto")
    ap.add_argument("--where", default="same,other,free")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-n", type=int, default=7, help="downloads per case and round")
    ap.add_argument("--file", default="f100m.bin")
    ap.add_argument("--no-lighttpd", action="store_true")
    a = ap.parse_args()
    compare.make_files()
    compare.configs()
    procs, ports = {}, {}
    try:
        for i, mode in enumerate(a.modes.split(",")):
            name = f"sluice-{mode}"
            cmd = PIN["same"] + [a.sluice, "serve", "--allow-root", "--config",
                                 sluice_config(mode, PORT0 + i), "--access-log", "off"]
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            procs[name], ports[name] = compare.wait_listening(p, name, PORT0 + i), PORT0 + i
        if not a.no_lighttpd:
            procs["lighttpd"] = compare.start("lighttpd", a.sluice, prefix=PIN["same"])
            ports["lighttpd"] = compare.PORTS["lighttpd"]
        print("| round | server | reader | MB/s median | server ms | reader ms | reader switches vol / invol | downloads, MB/s |")
        print("|---|---|---|---|---|---|---|---|")
        for r in range(a.rounds):
            for name in procs:
                for where in a.where.split(","):
                    s0 = cpu_seconds(procs[name].pid)
                    u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    speeds = []
                    for _ in range(a.n):
                        out = subprocess.run(PIN[where] + ["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}",
                                                           f"http://127.0.0.1:{ports[name]}/{a.file}"],
                                             capture_output=True, text=True).stdout
                        speeds.append(float(out) / 1e6)
                    s1 = cpu_seconds(procs[name].pid)
                    u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    reader = (u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime) / a.n * 1e3
                    print(f"| {r + 1} | {name} | {where} | {statistics.median(speeds):.0f} "
                          f"| {(s1 - s0) / a.n * 1e3:.1f} | {reader:.1f} "
                          f"| {(u1.ru_nvcsw - u0.ru_nvcsw) / a.n:.0f} / {(u1.ru_nivcsw - u0.ru_nivcsw) / a.n:.0f} "
                          f"| {' '.join(f'{x:.0f}' for x in speeds)} |", flush=True)
    finally:
        compare.stop_all(procs.values())


if __name__ == "__main__":
    main()
