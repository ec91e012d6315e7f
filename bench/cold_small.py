#!/usr/bin/env python3
"""A worker never waits on the disk, for small files too (issue 11, part 3).

A mirror's requests are mostly small files (package indexes, small packages,
signatures) from a tree far larger than memory. Before a small file can be sent,
its path is looked up and, if it is kept in memory, its bytes read: on a cold
file both wait for the disk, on the worker, unless the server does them off it.

One worker each (one worker process for nginx), as in `cold_compare.py`. Per
server and round, two phases of DURATION each, with the same load:

- a "cold" client: `sluice bench --urls LIST --in-order -c 8` (`--cold-conns`),
  each request a file of a tree of 24,000 (18,000 of 12 KiB kept in memory by
  sluice, 6,000 of 48 KiB sent from disk), in a new random order each phase (on a
  disk fast enough to serve them all within the phase, the list starts again and
  the rest of the phase is served from the cache);
- a small client: one hot 1 KiB file, open loop at RATE requests a second
  (`--rate`), its p99 reported.

"cached": every file of the tree read beforehand (in the page cache). "cold": every
file's pages evicted beforehand (`POSIX_FADV_DONTNEED`), and with `--drop-caches`
also the kernel's directory entries and inodes (`echo 3 > drop_caches`: the whole
machine's caches; root), so that lookups miss too. Printed per phase: the small
client's p50/p99 and the cold client's files a second.

    bench/cold_small.py [--duration 10] [--rounds 1] [--rate 2000]
                        [--servers sluice,sluice-nodisk,nginx,nginx-aio]
                        [--slow-disk BPS[:IOPS]] [--drop-caches] [--isolate] [--cold-conns 8]
                        [--absent N] [--listings]

`--slow-disk` and `--isolate` as in `cold_compare.py` (a throttled disk that waits
like a mirror's; servers on CPU 0 and clients on CPU 1, the small client at
`SCHED_FIFO`).

`--absent N` measures instead what the first request for a name never asked for
costs (a scan of new absent names: the kernel has no directory entry for any of
them, so sluice asks the disk threads for each): N unique absent names under the
tree's (cached) directories, `sluice bench --urls --in-order -c 10` for DURATION,
server CPU per request from /proc and req/s, per server and round.

`--listings`: the cold client asks instead for the tree's 200 directory listings
(120 entries each; listings on in every server), in a new random order each phase;
with `--drop-caches` each listing's first read needs its directory's blocks and
its entries' inodes from the disk.
"""
import argparse, json, os, random, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
import cold_compare  # noqa: E402

TREE = "cs"
SMALL, MEDIUM = 18000, 6000


def make_tree():
    base = f"{compare.WWW}/{TREE}"
    names = []
    for i in range(SMALL + MEDIUM):
        d = f"{i % 200:03d}"
        names.append(f"/{TREE}/{d}/{i:05d}.bin")
    if not os.path.exists(f"{base}/done"):
        for d in range(200):
            os.makedirs(f"{base}/{d:03d}", exist_ok=True)
        for i, n in enumerate(names):
            with open(f"{compare.WWW}{n}", "wb") as f:
                f.write(os.urandom(12 << 10 if i < SMALL else 48 << 10))
        open(f"{base}/done", "w").close()
    return names


def each_file(names, fn):
    for n in names:
        fd = os.open(f"{compare.WWW}{n}", os.O_RDONLY)
        try:
            fn(fd)
        finally:
            os.close(fd)


def warm(names):
    each_file(names, lambda fd: os.read(fd, 1 << 20))


def evict(names, drop, procs):
    subprocess.run(["sync"], check=True)
    each_file(names, lambda fd: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED))
    if drop:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        # What was dropped besides the tree comes back from here, not through a
        # server's page faults on a throttled disk: the servers' own code and
        # libraries, and the small client's file.
        mapped = {f"{compare.WWW}/f1k.bin"}
        for p in procs:
            for pid in compare.tree(p.pid):
                try:
                    with open(f"/proc/{pid}/maps") as f:
                        for line in f:
                            path = line.split(maxsplit=5)[5:]
                            # Regular files only (not /dev/zero, not a deleted file).
                            if path and path[0].startswith("/") and "(deleted)" not in path[0]:
                                mapped.add(path[0].strip())
                except OSError:
                    pass
        for m in mapped:
            if not os.path.isfile(m):
                continue
            try:
                with open(m, "rb") as f:
                    while f.read(1 << 20):
                        pass
            except OSError:
                pass


def bench(args, prefix=()):
    out = subprocess.run([*prefix, *args, "--json"], capture_output=True, text=True)
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        sys.exit(f"sluice bench failed: {out.stdout}{out.stderr}")


def phase(name, port, names, a, sluice_bin, client_prefix, small_prefix):
    listing = f"{compare.WORK}/cold-small-urls.txt"
    order = names[:]
    random.shuffle(order)
    with open(listing, "w") as f:
        f.write("\n".join(order) + "\n")
    base = f"http://127.0.0.1:{port}"
    cold = subprocess.Popen([*client_prefix, sluice_bin, "bench", f"{base}/", "--urls", listing, "--in-order",
                             "-c", str(a.cold_conns), "-t", "1", "-d", f"{a.duration}s", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    small = bench([sluice_bin, "bench", f"{base}/f1k.bin", "-c", "4", "-t", "1", "--rate", str(a.rate),
                   "-d", f"{a.duration}s"], small_prefix)
    out, err = cold.communicate()
    try:
        c = json.loads(out)
    except json.JSONDecodeError:
        sys.exit(f"cold client failed: {out}{err}")
    return small, c


def absent(a, servers, sluice_bin, client_prefix):
    listing = f"{compare.WORK}/cold-small-absent.txt"
    rows = {n: [] for n in servers}
    procs = {}
    try:
        for n in servers:
            procs[n] = cold_compare.start(n, a.old if n == "sluice-old" else sluice_bin)
        for r in range(a.rounds):
            order = servers[r % len(servers):] + servers[:r % len(servers)]
            for n in order:
                # New names every run: a name asked once has a (negative) entry.
                tag = f"{r}-{n}-{time.time_ns()}"
                with open(listing, "w") as f:
                    f.write("".join(f"/{TREE}/{i % 200:03d}/absent-{tag}-{i}.bin\n" for i in range(a.absent)))
                pid = procs[n].pid
                cpu0 = compare.cpu_seconds(pid)
                res = bench([*client_prefix, sluice_bin, "bench", f"http://127.0.0.1:{cold_compare.PORTS[n]}/",
                             "--urls", listing, "--in-order", "-c", "10", "-t", "1", "-d", f"{a.duration}s"])
                cpu = compare.cpu_seconds(pid) - cpu0
                n_req = res["requests"]
                rows[n].append((cpu * 1e6 / max(n_req, 1), res["requests_per_s"]))
                print(f"round {r + 1} {n:14s} {rows[n][-1][0]:.1f} µs server CPU per 404, {res['requests_per_s']:.0f} req/s "
                      f"({res['counts']['status_4xx']} of {n_req} answered 404; {n_req / a.absent:.2f} of the list)",
                      flush=True)
    finally:
        cold_compare.stop(list(procs.values()), None)
    print("\nmedians: server CPU µs per 404; req/s")
    for n in servers:
        print(f"{n:14s} {statistics.median(x[0] for x in rows[n]):.1f}; {statistics.median(x[1] for x in rows[n]):.0f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--cold-conns", type=int, default=8, help="the cold client's connections")
    ap.add_argument("--servers", default="sluice,sluice-nodisk,nginx,nginx-aio")
    ap.add_argument("--old", default=None, help="another sluice binary, run as sluice-old")
    ap.add_argument("--slow-disk", default=None, metavar="BPS[:IOPS]")
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--isolate", action="store_true")
    ap.add_argument("--absent", type=int, default=0, metavar="N")
    ap.add_argument("--listings", action="store_true")
    a = ap.parse_args()
    server_prefix = ("taskset", "-c", "0") if a.isolate else ()
    client_prefix = ["taskset", "-c", "1"] if a.isolate else []
    small_prefix = client_prefix + (["chrt", "-f", "50"] if a.isolate else [])
    sluice_bin = os.path.join(compare.ROOT, "target/release/sluice")
    compare.make_files()
    names = make_tree()
    servers = a.servers.split(",") + (["sluice-old"] if a.old else [])
    if a.absent:
        return absent(a, servers, sluice_bin, client_prefix)
    procs = []
    rows = {n: [] for n in servers}
    try:
        for n in servers:
            procs.append(cold_compare.start(n, a.old if n == "sluice-old" else sluice_bin, server_prefix,
                                            listings=a.listings))
        if a.slow_disk:
            cold_compare.slow_disk(a.slow_disk, procs)
        for r in range(a.rounds):
            order = servers[r % len(servers):] + servers[:r % len(servers)]
            for n in order:
                port = cold_compare.PORTS[n]
                got = {}
                for ph in ("cached", "cold"):
                    if ph == "cached":
                        warm(names)
                    else:
                        evict(names, a.drop_caches, procs)
                    time.sleep(1)
                    asked = [f"/{TREE}/{d:03d}/" for d in range(200)] if a.listings else names
                    small, c = phase(n, port, asked, a, sluice_bin, client_prefix, small_prefix)
                    got[ph] = (small["latency_us"]["p50"], small["latency_us"]["p99"],
                               small["requests_per_s"], c["requests_per_s"], c["availability"])
                rows[n].append(got)
                ca, co = got["cached"], got["cold"]
                print(f"round {r + 1} {n:14s} small p50/p99 µs cached {ca[0]}/{ca[1]} cold {co[0]}/{co[1]} "
                      f"(×{co[1] / max(ca[1], 1):.2f}); small req/s {ca[2]:.0f}/{co[2]:.0f}; "
                      f"files/s cached {ca[3]:.0f} cold {co[3]:.0f} (availability {co[4]:.4f})", flush=True)
    finally:
        cold_compare.stop(procs, a.slow_disk)
    print("\nmedians over rounds: small p99 cached → cold (µs); cold files/s")
    for n in servers:
        med = lambda ph, i: statistics.median(g[ph][i] for g in rows[n])
        print(f"{n:14s} {med('cached', 1):.0f} → {med('cold', 1):.0f}; {med('cold', 3):.0f} files/s")


if __name__ == "__main__":
    main()
