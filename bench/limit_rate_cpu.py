#!/usr/bin/env python3
"""What `[http] limit_rate` costs: the whole machine's CPU per GiB sent for N parallel
curl downloads of a 32 MiB file from sluice (one worker), unlimited and paced by the
kernel at RATE bytes/s per connection, in interleaved rounds. Whole-machine CPU
(/proc/stat) because the pacing's timers run in the kernel's softirq context, which
the server's own /proc/PID/stat does not see; the paced rounds last longer, so the
idle machine's own busy time (printed, measured over the same span) weighs on them.

    python3 bench/limit_rate_cpu.py [--rounds 3] [--downloads 16] [--rate 8000000]
"""
import argparse, os, subprocess, tempfile, time

BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "sluice")
SIZE_MIB = 32


def busy_jiffies():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:8]]
    return sum(v) - v[3]


def run(root, rate, n, port):
    cfg = os.path.join(root, "c.toml")
    with open(cfg, "w") as f:
        f.write(f"[http]\nlimit_rate = {rate}\n")
    srv = subprocess.Popen(
        [BIN, "serve", "--listen", f"127.0.0.1:{port}", "--workers", "1",
         "--access-log", "off", "--config", cfg, root],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(0.8)
    c0, t0 = busy_jiffies(), time.time()
    curls = [subprocess.Popen(["curl", "-sf", "-o", "/dev/null", f"http://127.0.0.1:{port}/f.bin"])
             for _ in range(n)]
    assert all(c.wait() == 0 for c in curls), "a download failed"
    took = time.time() - t0
    busy = (busy_jiffies() - c0) / os.sysconf("SC_CLK_TCK")
    srv.terminate()
    srv.wait()
    return took, busy / (n * SIZE_MIB / 1024)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--downloads", type=int, default=16)
    ap.add_argument("--rate", type=int, default=8_000_000)
    a = ap.parse_args()
    root = tempfile.mkdtemp()
    os.chmod(root, 0o755)
    with open(os.path.join(root, "f.bin"), "wb") as f:
        f.write(os.urandom(1 << 20) * SIZE_MIB)
    os.chmod(os.path.join(root, "f.bin"), 0o644)
    for r in range(a.rounds):
        for rate in (0, a.rate):
            took, per_gib = run(root, rate, a.downloads, 18950)
            print(f"round {r} limit_rate={rate}: {took:.2f} s, machine CPU {per_gib:.2f} s per GiB", flush=True)
        c0 = busy_jiffies()
        time.sleep(took)
        idle = (busy_jiffies() - c0) / os.sysconf("SC_CLK_TCK") / (a.downloads * SIZE_MIB / 1024)
        print(f"round {r} idle machine over the paced span: {idle:.2f} s per GiB-equivalent", flush=True)


if __name__ == "__main__":
    main()
