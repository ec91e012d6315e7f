#!/usr/bin/env python3
"""A worker never waits on the disk (issue 11, part 3): `sluice bench run cold-files`
against sluice (disk threads on, the default; and off, `[files] disk_threads = 0`),
nginx as configured everywhere else, and nginx with `aio threads`. One worker each
(one worker process for nginx), so a stall on the disk stalls everything the server
does, as in the issue's measurement.

    bench/cold_compare.py [--duration 10] [--rounds 1] [--servers ...] [--old BINARY] [--isolate]

`--old BINARY` adds `sluice-old`: another sluice build (e.g. the commit before a
change, built into another target directory) with the default config, interleaved
with the rest, to tell what a change did from what the machine did.

`--small-rate R` has the small client ask R requests a second (open loop) from every
server instead of as many as it can: on two shared cores, a server that stalls the
small client on the disk leaves the downloads more CPU, and a closed-loop client
would make that look like faster downloads.

`--slow-disk BPS[:IOPS]` makes the disk behave more like a mirror's: every server
runs in a cgroup (v1 `blkio`) whose reads from the docroot's device are throttled to
BPS bytes and IOPS requests a second, so a read that misses the page cache waits
milliseconds, as on rotating disks, not the ~1 ms this VM's disk takes. Only the
servers' reads are throttled (the client's eviction is not a read); the cgroup is
removed at the end.

`--isolate` gives the servers a core of their own, as `attack_runs.py --isolate` does
for heavy-range: every server (its worker and its disk threads) runs on CPU 0, `sluice
bench` and its downloads and small client on CPU 1, the small client at `SCHED_FIFO`
(`--probe-fifo`) and open loop (`--small-rate`, 5,000 req/s unless given: a
closed-loop client at `SCHED_FIFO` would keep the downloads' clients off CPU 1). On
two shared cores the small client's p99 also measures its own wait for a core and
the worker's; with the cores split and the small client first on its own, it measures
the server. (Without `SCHED_FIFO` the small client waits behind the four downloading
clients on CPU 1, and the server's core sits idle in `epoll_wait` for 20-34 ms at a
time: a p99 that is the client's, not the server's.)

The experiment writes four 512 MiB files under the shared docroot once, then per
server: the 1 KiB client's p99 while the four files download in a loop with the files
cached, and again with them evicted before every download.
"""
import argparse, os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

PORTS = {"sluice": 18191, "sluice-nodisk": 18192, "nginx": 18193, "nginx-aio": 18194,
         "sluice-old": 18195}


def start(name, sluice_bin, prefix=(), listings=False):
    """`listings`: directory listings on (sluice `listing = true`, nginx `autoindex`)."""
    w = compare.WORK
    if name.startswith("sluice"):
        conf = f"{w}/{name}-cold.toml"
        with open(conf, "w") as f:
            f.write(f'[server]\nlisten = "127.0.0.1:{PORTS[name]}"\nroot = "{compare.WWW}"\nworkers = 1\n'
                    + "[files]\n"
                    + ("disk_threads = 0\n" if name == "sluice-nodisk" else "")
                    + ("listing = true\n" if listings else ""))
        cmd = [sluice_bin, "serve", "--allow-root", "--config", conf, "--access-log", "off"]
    else:
        d = f"{w}/{name}"
        os.makedirs(d, exist_ok=True)
        os.makedirs(f"{w}/nginx", exist_ok=True)  # the temp paths nginx_conf names
        extra = "  aio threads;\n" if name == "nginx-aio" else ""
        index = " autoindex on;" if listings else ""
        conf = compare.nginx_conf(w, extra + f"  server {{ listen 127.0.0.1:{PORTS[name]} reuseport backlog=4096; root {compare.WWW};{index} }}")
        conf = conf.replace("worker_processes 2;", "worker_processes 1;").replace(f"pid {w}/nginx/", f"pid {d}/").replace(f"error_log {w}/nginx/", f"error_log {d}/")
        # One process's 20,000 descriptors must hold its cached files and its
        # connections: cold_small.py's tree has 24,000 files.
        conf = conf.replace("open_file_cache max=20000", "open_file_cache max=10000")
        with open(f"{d}/nginx.conf", "w") as f:
            f.write(conf)
        cmd = ["nginx", "-c", f"{d}/nginx.conf", "-p", d, "-g", "daemon off;"]
    log = open(f"{w}/{name}-cold.out", "w")
    p = subprocess.Popen([*prefix, *cmd], stdout=log, stderr=subprocess.STDOUT, preexec_fn=compare.raise_nofile,
                         start_new_session=True)
    try:
        return compare.wait_listening(p, name, PORTS[name])
    except SystemExit:
        p.kill()
        raise


BLKIO = "/sys/fs/cgroup/blkio/sluice-slow-disk"


def slow_disk(spec, procs):
    """Throttle the servers' reads from the docroot's device (see the module doc)."""
    st = os.stat(compare.WWW)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    os.makedirs(BLKIO, exist_ok=True)
    bps, _, iops = spec.partition(":")
    with open(f"{BLKIO}/blkio.throttle.read_bps_device", "w") as f:
        f.write(f"{dev} {int(bps)}")
    if iops:
        with open(f"{BLKIO}/blkio.throttle.read_iops_device", "w") as f:
            f.write(f"{dev} {int(iops)}")
    for p in procs:
        for pid in compare.tree(p.pid):
            with open(f"{BLKIO}/cgroup.procs", "w") as f:
                f.write(str(pid))
    print(f"reads of {dev} throttled to {spec} for every server", flush=True)


def unslow_disk(group=BLKIO):
    """Move the processes of a blkio cgroup (`group`, this script's by default) back
    to the root group and remove it (also `two_disks.py`'s)."""
    if not os.path.isdir(group):
        return
    with open(f"{group}/cgroup.procs") as f:
        pids = f.read().split()
    for pid in pids:
        try:
            with open("/sys/fs/cgroup/blkio/cgroup.procs", "w") as f:
                f.write(pid)
        except OSError:
            pass
    os.rmdir(group)


def stop(procs, slowed):
    """Stop the servers started (each its own session), and lift the throttle."""
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
    if slowed:
        unslow_disk()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--servers", default="sluice,sluice-nodisk,nginx,nginx-aio")
    ap.add_argument("--old", default=None, help="another sluice binary, run as sluice-old")
    ap.add_argument("--small-rate", default=None, metavar="REQ_PER_S",
                    help="the small client asks at this rate (open loop), the same for every server")
    ap.add_argument("--slow-disk", default=None, metavar="BPS[:IOPS]",
                    help="throttle the servers' reads (cgroup v1 blkio)")
    ap.add_argument("--isolate", action="store_true",
                    help="servers on CPU 0, the clients on CPU 1")
    a = ap.parse_args()
    server_prefix = ("taskset", "-c", "0") if a.isolate else ()
    client_prefix = ["taskset", "-c", "1"] if a.isolate else []
    sluice_bin = os.path.join(compare.ROOT, "target/release/sluice")
    compare.make_files()
    names = a.servers.split(",") + (["sluice-old"] if a.old else [])
    procs = []
    try:
        # Started inside the try: a server that fails to start stops the ones before it.
        for n in names:
            procs.append(start(n, a.old if n == "sluice-old" else sluice_bin, server_prefix))
        if a.slow_disk:
            slow_disk(a.slow_disk, procs)
        for r in range(a.rounds):
            # Interleaved: each round runs every server once, in a rotated order.
            order = names[r % len(names):] + names[:r % len(names)]
            targets = [x for n in order for x in ("--target", f"{n}=http://127.0.0.1:{PORTS[n]}/")]
            cmd = [*client_prefix, sluice_bin, "bench", "run", "cold-files", *targets, "--docroot", compare.WWW,
                   "--out", f"{compare.WORK}/cold-out", "-d", f"{a.duration}s", "-c", "10"]
            small_rate = a.small_rate or ("5000" if a.isolate else None)
            if small_rate:
                cmd += ["--small-rate", small_rate]
            if a.isolate:
                cmd += ["--probe-fifo"]
            print(f"$ {' '.join(cmd)}", flush=True)
            out = subprocess.run(cmd, capture_output=True, text=True)
            print(out.stdout + out.stderr, flush=True)
    finally:
        stop(procs, a.slow_disk)


if __name__ == "__main__":
    main()
