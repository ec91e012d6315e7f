#!/usr/bin/env python3
"""User space's share of the server's CPU, by sampling, for sluice beside the kernel
floor (`../shared/bench/floor.c`): issue 11's "user space <= 5% of the kernel's cost".

Each round runs the floor, then sluice (2 workers, access log off, one 1 KiB file),
under `wrk -t1 -c50`, and samples the server's processes with
`perf record -e cpu-clock -F 20000` for SECONDS after a 2 s warm-up. Every sample is
then either the kernel's or user space's, and a user-space sample is tested for
landing on the instruction right after a `syscall` (the two bytes before it are
0f 05). This machine has no hardware counters: cpu-clock is a timer interrupt, and
one that comes due while the kernel runs with interrupts off (its exit path, just
before `sysret`) is taken on the first user instruction after the return. Those
samples are kernel time that sampling puts in user space; the floor, which does
nothing in user space but call `recv`, `send` and `epoll_wait`, has them too.

Printed per server and round: samples, user share of the kernel's as sampled, and
with the syscall-exit samples counted as the kernel's; then the medians.

    python3 bench/user_share.py [--bin target/release/sluice] [--rounds 3]
                                [--seconds 8] [--body 1024]

Traffic stays on 127.0.0.1; wrk runs with its own -d and each server is stopped by
its PID after its round.
"""
import argparse, os, re, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FLOOR_SRC = os.path.join(ROOT, "..", "shared", "bench", "floor.c")
PORT = 18183


MMAP = re.compile(r"PERF_RECORD_MMAP2? [^\[]*\[0x([0-9a-f]+)\(0x([0-9a-f]+)\) @ (0x[0-9a-f]+|0) .*\]: r-xp (/\S+)")
SAMPLE = re.compile(r"^\s*([0-9a-f]+)\s+\((.*)\)\s*$")


def classify(data):
    """(kernel samples, user samples, user samples right after a `syscall`)."""
    out = subprocess.run(["perf", "script", "-i", data, "--show-mmap-events", "-F", "ip,dso", "-G"],
                         capture_output=True, text=True).stdout
    maps, files = [], {}
    kern = user = after = 0
    for line in out.splitlines():
        m = MMAP.search(line)
        if m:
            start, size, pgoff, path = int(m[1], 16), int(m[2], 16), int(m[3], 16), m[4]
            maps.append((start, start + size, pgoff, path))
            continue
        s = SAMPLE.match(line)
        if not s:
            continue
        ip, dso = int(s[1], 16), s[2]
        if "kernel" in dso or ip >= 0xffff800000000000:
            kern += 1
            continue
        user += 1
        for lo, hi, pgoff, path in maps:
            if lo <= ip < hi:
                if path not in files:
                    try:
                        with open(path, "rb") as f:
                            files[path] = f.read()
                    except OSError:
                        files[path] = b""
                off = ip - lo + pgoff
                if files[path][off - 2:off] == b"\x0f\x05":
                    after += 1
                break
    return kern, user, after


def sample(name, pids, secs, work):
    data = os.path.join(work, f"{name}.data")
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "20000", "-o", data,
                    "-p", ",".join(map(str, pids)), "--", "sleep", str(secs)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return classify(data)


def run_one(name, argv, secs, work):
    srv = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        compare.wait_listening(srv, name, PORT)
        wrk = subprocess.Popen(["wrk", "-t1", "-c50", f"-d{secs + 4}s", f"http://127.0.0.1:{PORT}/f.bin"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(2)
        k, u, a = sample(name, compare.tree(srv.pid), secs, work)
        out = wrk.communicate()[0]
        rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
        return k, u, a, float(rps[1]) if rps else 0.0
    finally:
        srv.terminate()
        srv.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "sluice"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--body", type=int, default=1024)
    a = ap.parse_args()
    for tool in ("perf", "wrk", "cc"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed")
    work = tempfile.mkdtemp(prefix="usershare.")
    os.chmod(work, 0o755)
    www = os.path.join(work, "www")
    os.mkdir(www)
    with open(os.path.join(www, "f.bin"), "wb") as f:
        f.write(os.urandom(a.body))
    floor = os.path.join(work, "floor")
    subprocess.run(["cc", "-O2", "-pthread", FLOOR_SRC, "-o", floor], check=True)
    servers = {
        "floor": [floor, str(PORT), "2", str(a.body)],
        "sluice": [a.bin, "serve", www, "--listen", f"127.0.0.1:{PORT}", "--workers", "2",
                   "--access-log", "off", "--allow-root"],
    }
    got = {s: [] for s in servers}
    for r in range(1, a.rounds + 1):
        for name, argv in servers.items():
            k, u, af, rps = run_one(name, argv, a.seconds, work)
            raw, moved = 100 * u / k, 100 * (u - af) / (k + af)
            got[name].append((raw, moved))
            print(f"round {r} {name:6}: {k + u} samples, {rps:,.0f} req/s; user {raw:.2f}% of the kernel's "
                  f"as sampled, {moved:.2f}% with the {100 * af / (k + u):.2f}% of samples right after "
                  f"a syscall counted as the kernel's", flush=True)
    print("medians (user share of the kernel's: as sampled / syscall exits counted as the kernel's):")
    for name, v in got.items():
        print(f"  {name:6}: {statistics.median(x for x, _ in v):.2f}% / {statistics.median(y for _, y in v):.2f}%"
              f"   rounds {' '.join(f'{x:.2f}/{y:.2f}' for x, y in v)}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
