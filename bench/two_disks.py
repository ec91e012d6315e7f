#!/usr/bin/env python3
"""A slow disk beside a fast one: can downloads from a slow (or failing) disk make
the disk threads keep everyone else waiting?

A mirror with several disks serves each tree from its own (`[[server.alias]]`, or a
mount point under the root). Cold reads go to the disk threads (`[files]
disk_threads`). If a slow disk's reads hold every thread, a request for a cold file
on a healthy disk waits behind them. This experiment makes that case on one machine:

- the slow disk: an ext4 image on a loop device, mounted and served at `/slow/`
  (an alias), its reads throttled to `--slow-bps` bytes a second for the server
  (cgroup v1 `blkio`, the loop device only: the root's disk is not throttled);
- `--downloads` clients download 16 MiB files from `/slow/` (all evicted first);
- meanwhile one client asks, one after another, for `--small` 4 KiB files of the
  root (the fast disk), each evicted before the run: each needs a disk thread.

It prints, per server and round, the small files' latencies (p50, p99, max) and
how many of them came back at all within `--budget` seconds. Needs root (loop
device, mount, cgroup); everything it makes is removed at the end.

    sudo python3 bench/two_disks.py --bin new=target/release/sluice [--bin old=BIN] [--rounds 3] [--nginx]

`--queue N` shortens the disk threads' queue to N jobs (the server's test hook
`SLUICE_TEST_DISK_QUEUE`; 4,096 by default, half of it one disk's share) so that a
few downloads fill the slow disk's share, as 2,048 waiting reads would: then the
question is what happens to a cold range the queue refuses. Builds before the
38th session's sent it from the worker, which then waited on the slow disk with
every client it had; now it waits and asks again.

`--nginx` adds nginx beside them, one worker as sluice, with the alias as a `location`
(`alias`): as it is everywhere else (its worker reads the slow disk itself), and with
`aio threads` (its default pool: 32 threads, one queue).
"""
import argparse, http.client, os, statistics, subprocess, sys, time, glob

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cold_compare  # noqa: E402
import compare  # noqa: E402

BASE = "/tmp/sluice-bench/two-disks"
BLKIO = "/sys/fs/cgroup/blkio/sluice-two-disks"
PORT = 18420


def sh(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def setup(files):
    os.makedirs(f"{BASE}/slow", exist_ok=True)
    os.makedirs(f"{BASE}/fast/small", exist_ok=True)
    img = f"{BASE}/slow.img"
    if not os.path.exists(img):
        with open(img, "wb") as f:
            f.truncate((16 * files + 64) << 20)
        sh("mkfs.ext4", "-q", "-F", img)
    loop = sh("losetup", "-f", "--show", img)
    sh("mount", loop, f"{BASE}/slow")
    for i in range(files):
        p = f"{BASE}/slow/big-{i}.bin"
        if not os.path.exists(p) or os.path.getsize(p) != 16 << 20:
            with open(p, "wb") as f:
                f.write(os.urandom(16 << 20))
    for i in range(400):
        p = f"{BASE}/fast/small/f{i}.bin"
        if not os.path.exists(p):
            with open(p, "wb") as f:
                f.write(os.urandom(4096))
    os.sync()
    return loop


def throttle(loop, bps):
    os.makedirs(BLKIO, exist_ok=True)
    dev = open(f"/sys/block/{os.path.basename(loop)}/dev").read().strip()
    with open(f"{BLKIO}/blkio.throttle.read_bps_device", "w") as f:
        f.write(f"{dev} {bps}")


def teardown(loop):
    cold_compare.unslow_disk(BLKIO)
    subprocess.run(["umount", f"{BASE}/slow"])
    subprocess.run(["losetup", "-d", loop])


def evict(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def get(path, timeout):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    c.request("GET", path, headers={"Connection": "close"})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, len(body)


def server_cmd(name, bin_path):
    """The command that serves `name`: a sluice binary, or nginx (`nginx`, `nginx-aio`)."""
    if name.startswith("nginx"):
        d = f"{BASE}/{name}"
        os.makedirs(d, exist_ok=True)
        aio = "  aio threads;\n" if name == "nginx-aio" else ""
        conf = compare.nginx_conf(d, aio + f"  server {{ listen 127.0.0.1:{PORT}; root {BASE}/fast;"
                                      f" location /slow/ {{ alias {BASE}/slow/; }} }}")
        conf = conf.replace("worker_processes 2;", "worker_processes 1;").replace(f"{d}/nginx/", f"{d}/")
        with open(f"{d}/nginx.conf", "w") as f:
            f.write(conf)
        return ["nginx", "-c", f"{d}/nginx.conf", "-p", d, "-g", "daemon off;"]
    conf = f"{BASE}/sluice.toml"
    with open(conf, "w") as f:
        f.write(f'[server]\nlisten = "127.0.0.1:{PORT}"\nroot = "{BASE}/fast"\nworkers = 1\n'
                f'[[server.alias]]\nprefix = "/slow"\nroot = "{BASE}/slow"\n')
    return [bin_path, "serve", "--allow-root", "--config", conf, "--access-log", "off"]


def one(name, bin_path, a):
    env = dict(os.environ)
    if a.queue:
        env["SLUICE_TEST_DISK_QUEUE"] = str(a.queue)
    srv = subprocess.Popen(server_cmd(name, bin_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True, preexec_fn=compare.raise_nofile, env=env)
    downloads = []
    try:
        time.sleep(0.5)
        # Every thread of every process of the server (nginx's worker is a child).
        for pid in compare.tree(srv.pid):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"{BLKIO}/tasks", "w") as f:
                    f.write(tid)
        big = sorted(glob.glob(f"{BASE}/slow/big-*.bin"))
        small = [f"{BASE}/fast/small/f{i}.bin" for i in range(a.small)]
        evict(big + small)
        downloads = [subprocess.Popen(["curl", "-s", "-o", "/dev/null", "--max-time", str(a.budget + 5),
                                       f"http://127.0.0.1:{PORT}/slow/{os.path.basename(p)}"])
                     for p in big[:a.downloads]]
        time.sleep(1.0)
        cpu0 = compare.cpu_seconds(srv.pid)
        lat, failed, t0 = [], 0, time.time()
        for i in range(a.small):
            left = a.budget - (time.time() - t0)
            if left <= 0:
                failed += a.small - i
                break
            s = time.time()
            try:
                st, n = get(f"/small/f{i}.bin", left)
                if st != 200 or n != 4096:
                    failed += 1
                    continue
            except OSError:
                failed += 1
                continue
            lat.append((time.time() - s) * 1000)
        # The server's CPU a second while the small files were asked for (a
        # worker that waits on the slow disk uses little; one that asks the
        # disk threads again and again, more).
        # (Over 5 s at least: the small files take milliseconds when all is well.)
        time.sleep(max(0.0, 5.0 - (time.time() - t0)))
        cpu = (compare.cpu_seconds(srv.pid) - cpu0) / (time.time() - t0)
        return lat, failed, cpu
    finally:
        for d in downloads:
            d.kill()
            d.wait()
        srv.terminate()
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True, help="NAME=PATH of a sluice binary")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slow-bps", type=int, default=2_000_000)
    ap.add_argument("--downloads", type=int, default=16)
    ap.add_argument("--small", type=int, default=50)
    ap.add_argument("--budget", type=float, default=20.0, help="seconds for all the small files")
    ap.add_argument("--queue", type=int, default=0, help="the disk threads' queue, in jobs (a test hook)")
    ap.add_argument("--nginx", action="store_true", help="nginx and nginx with aio threads beside")
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bin] + ([["nginx", ""], ["nginx-aio", ""]] if a.nginx else [])
    loop = setup(16)
    try:
        throttle(loop, a.slow_bps)
        print(f"slow disk {loop}: reads throttled to {a.slow_bps} B/s; {a.downloads} downloads from it; "
              f"{a.small} cold 4 KiB files from the root's disk, one at a time"
              + (f"; disk queue {a.queue} jobs" if a.queue else ""), flush=True)
        print("round  server      small p50 ms  p99 ms    max ms  answered  server CPU %", flush=True)
        for r in range(a.rounds):
            order = bins[r % len(bins):] + bins[:r % len(bins)]
            for name, path in order:
                lat, failed, cpu = one(name, path, a)
                if lat:
                    q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else [lat[0]] * 99
                    print(f"{r:5d}  {name:10s} {statistics.median(lat):12.2f} {q[98]:7.2f} {max(lat):9.2f}"
                          f"  {len(lat):>4d}/{a.small}  {cpu * 100:11.1f}", flush=True)
                else:
                    print(f"{r:5d}  {name:10s} {'-':>12s} {'-':>7s} {'-':>9s}     0/{a.small}  {cpu * 100:11.1f}",
                          flush=True)
    finally:
        teardown(loop)


if __name__ == "__main__":
    main()
