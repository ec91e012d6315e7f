#!/usr/bin/env python3
"""The slow-read row by hand, with what it costs whom (issue 8; docs/BENCHMARKS.md).

One sluice (2 workers, defaults) on the files of bench/compare.py; a legitimate
client (`sluice bench URL/size-1024.bin -c 10 -t 1`, 5 s windows) before, under
and after 2 x 1,000 slow readers of a 16 MiB file at 16 B/s from 127.66.0.1 and
127.77.0.1 (the experiment's attackers). Per window it prints the client's req/s,
the server's CPU per request (utime + stime of its process tree from /proc), its
voluntary and involuntary context switches per request (every thread's
/proc/PID/task/TID/status), and the client's own CPU per request (its rusage).

    bench/slowread_windows.py [--bin target/release/sluice] [--before 2] [--under 3] [--after 2]

Traffic stays on loopback; the attackers end with their `-d` and are killed after
the last window under attack.
"""
import argparse, json, os, re, subprocess, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WWW = "/tmp/sluice-bench/www"
PORT = 18640


def tree(pid):
    kids = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
    return [pid] + [p for k in kids for p in tree(int(k))]


def counters(pid):
    """(utime + stime ticks, voluntary, involuntary switches) of a process tree."""
    ticks = vol = invol = 0
    for p in tree(pid):
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            ticks += int(f[11]) + int(f[12])
            for t in os.listdir(f"/proc/{p}/task"):
                st = open(f"/proc/{p}/task/{t}/status").read()
                vol += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", st, re.M).group(1))
                invol += int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", st, re.M).group(1))
        except (OSError, AttributeError):
            pass  # a process or thread that ended meanwhile
    return ticks, vol, invol


def window(args, srv, tag):
    a = counters(srv.pid)
    c = subprocess.Popen([args.bin, "bench", f"http://127.0.0.1:{PORT}/sluice-bench/size-1024.bin",
                          "-c", "10", "-t", "1", "-d", "5s", "--json"], stdout=subprocess.PIPE, text=True)
    out = c.stdout.read()
    _, _, ru = os.wait4(c.pid, 0)
    b = counters(srv.pid)
    j = json.loads(out)
    n = max(j["requests"], 1)
    tck = os.sysconf("SC_CLK_TCK")
    print(f"{tag:7} req/s {j['requests_per_s']:9.0f}  server CPU {1e6 * (b[0] - a[0]) / tck / n:5.2f} us/req"
          f"  switches/req vol {(b[1] - a[1]) / n:.3f} invol {(b[2] - a[2]) / n:.3f}"
          f"  client CPU {1e6 * (ru.ru_utime + ru.ru_stime) / n:5.2f} us/req", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=f"{ROOT}/target/release/sluice")
    ap.add_argument("--before", type=int, default=2)
    ap.add_argument("--under", type=int, default=3)
    ap.add_argument("--after", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(f"{WWW}/sluice-bench", exist_ok=True)
    for name, size in (("size-1024.bin", 1024), ("size-16777216.bin", 16 << 20)):
        path = f"{WWW}/sluice-bench/{name}"
        if not os.path.exists(path) or os.path.getsize(path) != size:
            with open(path, "wb") as f:
                f.write(os.urandom(size))
    conf = "/tmp/sluice-bench/slowread-windows.toml"
    with open(conf, "w") as f:
        f.write(f'[server]\nlisten = "127.0.0.1:{PORT}"\nroot = "{WWW}"\nworkers = 2\n')
    srv = subprocess.Popen(["bash", "-c", f"ulimit -n 20000; exec {args.bin} serve --allow-root --config {conf} --access-log off"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(1.5)
    att = None
    try:
        for _ in range(args.before):
            window(args, srv, "before")
        att = subprocess.Popen([args.bin, "bench", f"http://127.0.0.1:{PORT}/sluice-bench/size-16777216.bin",
                                "--read-rate", "16", "-c", "2000", "--processes", "2", "--timeout", "600s",
                                "-d", f"{4 + 6 * args.under}s", "--source-addrs", "127.66.0.1,127.77.0.1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(4)
        for _ in range(args.under):
            window(args, srv, "under")
        os.killpg(att.pid, 9)
        att.wait()
        att = None
        time.sleep(2)
        for _ in range(args.after):
            window(args, srv, "after")
    finally:
        if att:
            os.killpg(att.pid, 9)
        os.killpg(srv.pid, 15)
        srv.wait()


if __name__ == "__main__":
    main()
