#!/usr/bin/env python3
"""Cold downloads and what the disk saw: sluice with its disk threads against
`disk_threads = 0` (the worker blocking in `sendfile`), four `curl` downloads of the
four 512 MiB files `cold_compare.py` writes, all evicted first, one server at a
time, interleaved (issue 11 part 3: "the cold downloads' MB/s not lower").

Per run it prints the downloads' MiB/s and, from `/sys/block/<dev>/stat` over the
run, the reads the disk completed, their mean size, how long each spent in the
queue on average (the queue's depth, in effect), the server's CPU (`/proc`) and
its `disk_waits_total` (ranges the disk threads read). `--small R` adds a small-file
client (`sluice bench --rate R`, open loop, 1 KiB) in its own process during the
downloads, as `cold_compare.py --small-rate` has.

    python3 bench/cold_disk_io.py [--rounds 16] [--small 5000] [--pause 6] [--bin BINARY] [--dev vda]

Run `cold_compare.py` once first (it writes the files).
"""
import argparse, glob, os, re, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

PORTS = {"sluice": 18301, "sluice-nodisk": 18302}


def server(name, binary):
    conf = f"{compare.WORK}/{name}-cold-io.toml"
    with open(conf, "w") as f:
        f.write(f'[server]\nlisten = "127.0.0.1:{PORTS[name]}"\nroot = "{compare.WWW}"\nworkers = 1\n[files]\n'
                + ("disk_threads = 0\n" if name == "sluice-nodisk" else "")
                + '[status]\npath = "/st"\nallow = ["127.0.0.0/8"]\n')
    return subprocess.Popen([binary, "serve", "--allow-root", "--config", conf, "--access-log", "off"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def evict(files):
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def waits(port):
    out = subprocess.run(["curl", "-s", f"http://127.0.0.1:{port}/st/metrics"], capture_output=True,
                         text=True).stdout
    m = re.search(r"^sluice_disk_waits_total (\d+)", out, re.M)
    return int(m.group(1)) if m else 0


def disk(dev):
    return [int(x) for x in open(f"/sys/block/{dev}/stat").read().split()]


def cpu(pid):
    t = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        s = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        t += int(s[11]) + int(s[12])
    return t / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--small", type=int, default=0, help="small-file requests a second beside (0: none)")
    ap.add_argument("--bin", default=os.path.join(compare.ROOT, "target/release/sluice"))
    ap.add_argument("--dev", default="vda", help="the block device under the docroot")
    ap.add_argument("--pause", type=float, default=0.5,
                    help="seconds idle before each run (this VM's disk reads fast and slow runs in turn"
                         " without a pause: see docs/BENCHMARKS.md)")
    a = ap.parse_args()
    files = sorted(glob.glob(f"{compare.WWW}/sluice-bench/cold-*.bin"))
    if len(files) != 4:
        sys.exit("run bench/cold_compare.py once first: it writes the four cold files")
    procs = {n: server(n, a.bin) for n in PORTS}
    time.sleep(1)
    rates = {n: [] for n in PORTS}
    try:
        print("server         MiB/s  disk reads  mean KiB  queue ms/read  server CPU s  disk waits", flush=True)
        for r in range(a.rounds):
            names = list(PORTS)
            for name in names[r % 2:] + names[:r % 2]:
                port, p = PORTS[name], procs[name]
                evict(files)
                time.sleep(a.pause)
                small = None
                if a.small:
                    small = subprocess.Popen([a.bin, "bench", "-t1", "-c10", "--rate", str(a.small), "-d", "120s",
                                              f"http://127.0.0.1:{port}/sluice-bench/size-1024.bin"],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(0.3)
                w0, d0, c0, t0 = waits(port), disk(a.dev), cpu(p.pid), time.time()
                total = sum(os.path.getsize(f) for f in files)
                cs = [subprocess.Popen(["curl", "-s", "-o", "/dev/null",
                                        f"http://127.0.0.1:{port}/sluice-bench/{os.path.basename(f)}"])
                      for f in files]
                for c in cs:
                    c.wait()
                t, d1, c1, w1 = time.time() - t0, disk(a.dev), cpu(p.pid), waits(port)
                if small:
                    small.kill()
                    small.wait()
                reads, kib = d1[0] - d0[0], (d1[2] - d0[2]) / 2
                mibs = total / t / 2**20
                rates[name].append(mibs)
                print(f"{name:13s} {mibs:6.0f}  {reads:10d}  {kib / max(reads, 1):8.0f}  "
                      f"{(d1[10] - d0[10]) / max(reads, 1):13.2f}  {c1 - c0:12.2f}  {w1 - w0:10d}", flush=True)
    finally:
        for p in procs.values():
            p.terminate()
            p.wait()
    for name, v in rates.items():
        print(f"{name}: median {sorted(v)[len(v) // 2]:.0f} MiB/s, rounds {' '.join(f'{x:.0f}' for x in v)}")


if __name__ == "__main__":
    main()
