#!/usr/bin/env python3
"""HTTPS side by side: sluice against nginx, the same certificate, 2 workers each,
access logs off, rounds interleaved, medians and every round reported.

    bench/tls_compare.py [--rounds 3] [--duration 5] [--tests small1k,wrk1m,download,handshakes,idle]

Tests (issue 13's benchmarks):
  small1k     1 KiB over keep-alive TLS, wrk -t1 -c50: req/s and server CPU per request
  wrk1m       1 MB file, wrk -t1 -c8: MB/s and server CPU per GB
  download    one 1 GB download with curl: MB/s and server CPU per GB
  handshakes  `openssl s_time` for --duration s: full handshakes (-new) and resumed
              ones (-reuse) per second, and server CPU per handshake
  idle        10,000 TLS keep-alive connections, one request each, then idle:
              server RSS growth per connection

Server CPU is utime+stime of the server's whole process tree from /proc before and
after a run. Neither server gets kernel TLS here (this kernel has no `tls` module;
`sluice serve` logs the probe), so both encrypt in user space.

Needs: wrk, curl, openssl, nginx, and `cargo build --release`.
"""
import argparse, os, re, socket, ssl, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import cpu_seconds, nginx_conf, raise_nofile, rss_bytes, wrk  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = "/tmp/sluice-tls-bench"
WWW = f"{WORK}/www"
PORTS = {"sluice": 18443, "nginx": 18444}


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True, cwd=WORK)


def setup():
    os.makedirs(WWW, exist_ok=True)
    os.makedirs(f"{WORK}/nginx", exist_ok=True)
    os.chmod(WORK, 0o755)
    for name, size in [("f1k.bin", 1024), ("f100.bin", 100), ("f1m.bin", 1 << 20), ("f1g.bin", 1 << 30)]:
        p = f"{WWW}/{name}"
        if not os.path.exists(p) or os.path.getsize(p) != size:
            with open(p, "wb") as f:
                left = size
                while left:
                    n = min(left, 1 << 24)
                    f.write(os.urandom(n))
                    left -= n
    if not os.path.exists(f"{WORK}/cert.pem"):
        sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
           "-keyout", "key.pem", "-out", "cert.pem", "-days", "30", "-subj", "/CN=localhost",
           "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1")
        os.chmod(f"{WORK}/key.pem", 0o644)
    with open(f"{WORK}/sluice.toml", "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:18480"
root = "{WWW}"
workers = 2
[http]
keepalive_requests = 1000000
keepalive_timeout = "120s"
[condition]
min_send_rate = 0
[tls]
listen = "127.0.0.1:{PORTS['sluice']}"
cert = "{WORK}/cert.pem"
key = "{WORK}/key.pem"
""")
    with open(f"{WORK}/nginx.conf", "w") as f:
        f.write(nginx_conf(WORK, f"""  ssl_certificate {WORK}/cert.pem;
  ssl_certificate_key {WORK}/key.pem;
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_cache shared:SSL:10m;
  ssl_session_tickets on;
  server {{ listen 127.0.0.1:{PORTS['nginx']} ssl reuseport backlog=4096; root {WWW}; }}"""))


def start(name, sluice_bin):
    log = open(f"{WORK}/{name}.out", "w")
    cmd = {
        "sluice": [sluice_bin, "serve", "--allow-root", "--config", f"{WORK}/sluice.toml"],
        "nginx": ["nginx", "-c", f"{WORK}/nginx.conf", "-p", f"{WORK}/nginx", "-g", "daemon off;"],
    }[name]
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=raise_nofile,
                         start_new_session=True)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", PORTS[name]), timeout=0.2).close()
            return p
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{name} did not start; see {WORK}/{name}.out")


def url(name, path):
    return f"https://127.0.0.1:{PORTS[name]}{path}"


def t_small1k(name, pid, d):
    c0 = cpu_seconds(pid)
    r = wrk(url(name, "/f1k.bin"), 50, d)
    cpu = cpu_seconds(pid) - c0
    return {"rps": r["rps"], "us_per_req": cpu / max(r["requests"], 1) * 1e6, "errors": r["socket_errors"]}


def t_wrk1m(name, pid, d):
    c0 = cpu_seconds(pid)
    r = wrk(url(name, "/f1m.bin"), 8, d)
    cpu = cpu_seconds(pid) - c0
    gb = r["requests"] * (1 << 20) / 1e9
    return {"MBps": r["bps"] / 1e6, "cpu_s_per_GB": cpu / max(gb, 1e-9)}


def t_download(name, pid, d):
    c0 = cpu_seconds(pid)
    out = subprocess.run(["curl", "-sk", "-o", "/dev/null", "-w", "%{speed_download} %{size_download}",
                          url(name, "/f1g.bin")], capture_output=True, text=True).stdout.split()
    cpu = cpu_seconds(pid) - c0
    return {"MBps": float(out[0]) / 1e6, "cpu_s_per_GB": cpu / (int(out[1]) / 1e9)}


def s_time(name, args, d):
    out = subprocess.run(["openssl", "s_time", "-connect", f"127.0.0.1:{PORTS[name]}", *args, "-time", str(d)],
                         capture_output=True, text=True).stdout
    # "1234 connections in 6 real seconds, ..."
    m = re.search(r"(\d+) connections in (\d+) real seconds", out)
    return int(m.group(1)), int(m.group(2))


# s_time cannot resume TLS 1.3 (it never reads the tickets that arrive after the
# handshake), so resumption is measured over TLS 1.2, for both servers alike.
HANDSHAKES = [("full13", ["-new"]), ("full12", ["-new", "-tls1_2"]), ("resumed12", ["-reuse", "-tls1_2"])]


def t_handshakes(name, pid, d):
    res = {}
    for key, args in HANDSHAKES:
        c0 = cpu_seconds(pid)
        n, secs = s_time(name, args, d)
        cpu = cpu_seconds(pid) - c0
        res[f"{key}_per_s"] = n / max(secs, 1)
        res[f"{key}_us_cpu"] = cpu / max(n, 1) * 1e6
    return res


def t_idle(name, pid, d, n=10000):
    raise_nofile()
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    before = rss_bytes(pid)
    socks = []
    req = b"GET /f100.bin HTTP/1.1\r\nHost: a\r\n\r\n"
    answered = 0
    for _ in range(n):
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", PORTS[name])))
        s.sendall(req)
        got = b""
        while b"\r\n\r\n" not in got or len(got) < got.index(b"\r\n\r\n") + 4 + 100:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        answered += got.startswith(b"HTTP/1.1 200")
        socks.append(s)
    time.sleep(1.0)
    after = rss_bytes(pid)
    for s in socks:
        s.close()
    return {"answered": answered, "bytes_per_conn": (after - before) / n}


TESTS = {"small1k": t_small1k, "wrk1m": t_wrk1m, "download": t_download,
         "handshakes": t_handshakes, "idle": t_idle}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--servers", default="sluice,nginx")
    ap.add_argument("--tests", default="small1k,wrk1m,download,handshakes,idle")
    ap.add_argument("--sluice", default=f"{ROOT}/target/release/sluice")
    a = ap.parse_args()
    setup()
    servers = a.servers.split(",")
    samples = {}
    for t in a.tests.split(","):
        rounds = 1 if t == "idle" else a.rounds
        for r in range(rounds):
            for name in (servers if r % 2 == 0 else servers[::-1]):
                # A fresh server per idle run, so RSS starts from the same place.
                p = start(name, a.sluice)
                try:
                    time.sleep(0.3)
                    res = TESTS[t](name, p.pid, a.duration)
                finally:
                    p.terminate()
                    try:
                        p.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
                samples.setdefault(t, {}).setdefault(name, []).append(res)
                print(f"{t:10} round {r + 1} {name:7} {res}", flush=True)
    print()
    for t, per in samples.items():
        keys = [k for k, v in next(iter(per.values()))[0].items() if isinstance(v, (int, float))]
        for k in keys:
            med = {n: statistics.median(x[k] for x in per[n]) for n in per}
            line = "  ".join(f"{n} {med[n]:.4g}" for n in per)
            ratio = ""
            if "sluice" in med and "nginx" in med and med["nginx"]:
                ratio = f"  sluice/nginx {med['sluice'] / med['nginx']:.3f}"
            print(f"{t:10} {k:14} {line}{ratio}")


if __name__ == "__main__":
    main()
