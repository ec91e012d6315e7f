#!/usr/bin/env python3
"""`limit_rate` with `limit_rate_after`, sluice beside nginx: N parallel clients each
download a 32 MiB file twice on one keep-alive connection, with both servers set to
RATE bytes/s after the first AFTER bytes of each response (nginx: `limit_rate` and
`limit_rate_after` in its server block; sluice: the same two keys in `[http]`).

Per server and round: each download's time to its first AFTER body bytes and to its
end, as the client sees them (medians over all downloads, first and second response
on the connection apart, since a socket paced by the first must start fast again for
the second), the time the paced part should take, (32 MiB - AFTER) / RATE, and the
whole machine's CPU per GiB sent (/proc/stat: the kernel's pacing timers run in
softirq context, which a process's own counters do not see). One worker each;
rounds interleaved.

    python3 bench/limit_rate_after.py [--rounds 3] [--clients 8] [--rate 4000000] [--after 8388608]
"""
import argparse
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time

BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "sluice")
SIZE = 32 << 20


def busy_jiffies():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:8]]
    return sum(v) - v[3]


def download_twice(port, after, out):
    """Two GETs on one connection: (time to `after` body bytes, time to the end) each."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for k in range(2):
        t0 = time.monotonic()
        s.sendall(b"GET /f.bin HTTP/1.1\r\nHost: bench\r\n\r\n")
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(65536)
        head, body = buf.split(b"\r\n\r\n", 1)
        assert b" 200 " in head.split(b"\r\n")[0], head[:80]
        got, mark = len(body), None
        while got < SIZE:
            n = len(s.recv(1 << 20))
            assert n > 0, f"closed after {got} bytes"
            got += n
            if mark is None and got >= after:
                mark = time.monotonic() - t0
        out.append((k, mark, time.monotonic() - t0))
    s.close()


def start(name, root, port, rate, after):
    if name == "sluice":
        cfg = os.path.join(root, "s.toml")
        with open(cfg, "w") as f:
            f.write(f"[http]\nlimit_rate = {rate}\nlimit_rate_after = {after}\n")
        cmd = [BIN, "serve", "--listen", f"127.0.0.1:{port}", "--workers", "1",
               "--access-log", "off", "--allow-root", "--config", cfg, f"{root}/www"]
    else:
        os.makedirs(f"{root}/nginx", exist_ok=True)
        with open(f"{root}/nginx.conf", "w") as f:
            f.write(f"""worker_processes 1;
pid {root}/nginx/nginx.pid;
error_log {root}/nginx/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000;
  client_body_temp_path {root}/nginx/b; proxy_temp_path {root}/nginx/p;
  fastcgi_temp_path {root}/nginx/f; uwsgi_temp_path {root}/nginx/u; scgi_temp_path {root}/nginx/s;
  server {{ listen 127.0.0.1:{port}; root {root}/www;
           limit_rate {rate}; limit_rate_after {after}; }}
}}
""")
        cmd = ["nginx", "-c", f"{root}/nginx.conf", "-p", f"{root}/nginx", "-g", "daemon off;"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return p
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{name} did not start")


def one(name, root, port, a):
    p = start(name, root, port, a.rate, a.after)
    try:
        out = []
        c0 = busy_jiffies()
        ts = [threading.Thread(target=download_twice, args=(port, a.after, out))
              for _ in range(a.clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        busy = (busy_jiffies() - c0) / os.sysconf("SC_CLK_TCK")
    finally:
        p.terminate()
        p.wait()
    assert len(out) == 2 * a.clients, f"{len(out)} downloads of {2 * a.clients}"
    got = {"cpu_per_gib": busy / (len(out) * SIZE / (1 << 30))}
    for k in (0, 1):
        got[f"fast{k}"] = statistics.median(m for j, m, _ in out if j == k)
        got[f"paced{k}"] = statistics.median(e - m for j, m, e in out if j == k)
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rate", type=int, default=4_000_000)
    ap.add_argument("--after", type=int, default=8 << 20)
    ap.add_argument("--servers", default="sluice,nginx")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="sluice-rate-after-")
    os.chmod(root, 0o755)  # nginx's workers read as nobody
    os.makedirs(f"{root}/www")
    with open(f"{root}/www/f.bin", "wb") as f:
        f.write(os.urandom(SIZE))
    os.chmod(f"{root}/www/f.bin", 0o644)
    want = (SIZE - a.after) / a.rate
    print(f"{a.clients} clients x 2 downloads of 32 MiB; limit_rate {a.rate} B/s after "
          f"{a.after} B: the paced part should take {want:.2f} s")
    rows = {s: [] for s in a.servers.split(",")}
    for r in range(a.rounds):
        for i, s in enumerate(rows):
            got = one(s, root, 18490 + i, a)
            rows[s].append(got)
            print(f"round {r} {s:7s}: first {a.after >> 20} MiB {got['fast0'] * 1000:7.1f} ms, "
                  f"then {got['fast1'] * 1000:7.1f} ms on the same connection; the rest "
                  f"{got['paced0']:.2f} s, then {got['paced1']:.2f} s; machine CPU "
                  f"{got['cpu_per_gib']:.3f} s per GiB", flush=True)
    print("medians over rounds:")
    for s, v in rows.items():
        med = lambda k: statistics.median(x[k] for x in v)  # noqa: E731
        print(f"  {s:7s}: first part {med('fast0') * 1000:.1f} / {med('fast1') * 1000:.1f} ms "
              f"(first / second response), paced part {med('paced0'):.2f} / {med('paced1'):.2f} s "
              f"(should be {want:.2f}), CPU {med('cpu_per_gib'):.3f} s per GiB")


if __name__ == "__main__":
    main()
