#!/usr/bin/env python3
"""Side-by-side benchmark: sluice against h2o, lighttpd and nginx on this machine.

Every server gets the same files, 2 workers, access logs off, and its own loopback
port. Rounds are interleaved across servers (the machine is noisy) and medians are
reported. Two figures per small-file test: req/s (wrk -t1) and server CPU time per
request (utime+stime of the server's whole process tree from /proc, before and after
the run, divided by the requests wrk completed). A third row, the load generator's
own CPU per request (`getrusage` of its finished processes): where wrk runs at one
full core, it, not the server, sets req/s.

    bench/compare.py [--rounds 3] [--duration 10] [--servers sluice,h2o,lighttpd,nginx]
                     [--tests small1k,small100,random10k,download,wrk1m,idle]
                     (also: close1k, close10k: a new connection per request; wget1k:
                     small1k with wget's own request head, `Accept-Encoding: identity`;
                     browser10k: random10k with a browser's request head)

Needs: wrk, curl, nginx, h2o, lighttpd (apt-get install wrk curl nginx-light h2o lighttpd)
and a release build of sluice (cargo build --release).
"""
import argparse, json, os, random, re, resource, selectors, shutil, socket, statistics
import subprocess, sys, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = "/tmp/sluice-bench"
WWW = f"{WORK}/www"
TICK = os.sysconf("SC_CLK_TCK")
PORTS = {"sluice": 18181, "h2o": 18182, "lighttpd": 18183, "nginx": 18184}


def make_files():
    os.makedirs(WWW, exist_ok=True)
    def put(name, size):
        p = f"{WWW}/{name}"
        if not os.path.exists(p) or os.path.getsize(p) != size:
            with open(p, "wb") as f:
                f.write(os.urandom(size))
    put("f1k.bin", 1024)
    put("f10k.bin", 10240)
    put("f100.bin", 100)
    put("f1m.bin", 1 << 20)
    put("f100m.bin", 100 << 20)
    for d in range(100):
        os.makedirs(f"{WWW}/r/{d:02d}", exist_ok=True)
    if not os.path.exists(f"{WWW}/r/99/09999.bin"):
        for i in range(10000):
            with open(f"{WWW}/r/{i % 100:02d}/{i:05d}.bin", "wb") as f:
                f.write(os.urandom(1024))
    with open(f"{WORK}/random.lua", "w") as f:
        f.write('math.randomseed(os.time())\n'
                'request = function()\n'
                '  local i = math.random(0, 9999)\n'
                '  return wrk.format("GET", string.format("/r/%02d/%05d.bin", i % 100, i))\n'
                'end\n')
    os.chmod(WORK, 0o755)
    # h2o and lighttpd open their error logs after dropping to nobody.
    os.makedirs(f"{WORK}/logs", exist_ok=True)
    os.chmod(f"{WORK}/logs", 0o777)


def nginx_conf(work, http_extra):
    """nginx as every comparison runs it: 2 workers, logs off, sendfile, long
    keep-alive, an open-file cache; `http_extra` adds lines (the server block)."""
    return f"""worker_processes 2;
pid {work}/nginx/nginx.pid;
error_log {work}/nginx/error.log warn;
worker_rlimit_nofile 20000;
events {{ worker_connections 19000; multi_accept on; }}
http {{
  access_log off;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  keepalive_timeout 120s; keepalive_requests 1000000;
  open_file_cache max=20000 inactive=20s; open_file_cache_valid 1s;
  client_body_temp_path {work}/nginx/body; proxy_temp_path {work}/nginx/proxy;
  fastcgi_temp_path {work}/nginx/fcgi; uwsgi_temp_path {work}/nginx/uwsgi; scgi_temp_path {work}/nginx/scgi;
  types {{ application/octet-stream bin; }}
{http_extra}
}}
"""


def configs():
    os.makedirs(f"{WORK}/nginx", exist_ok=True)
    with open(f"{WORK}/nginx.conf", "w") as f:
        f.write(nginx_conf(WORK, f"  server {{ listen 127.0.0.1:{PORTS['nginx']} reuseport backlog=4096; root {WWW}; }}"))
    with open(f"{WORK}/h2o.conf", "w") as f:
        f.write(f"""listen:
  host: 127.0.0.1
  port: {PORTS['h2o']}
num-threads: 2
user: nobody
max-connections: 19000
http1-request-timeout: 120
error-log: {WORK}/logs/h2o-error.log
hosts:
  default:
    paths:
      /:
        file.dir: {WWW}
""")
    with open(f"{WORK}/lighttpd.conf", "w") as f:
        f.write(f"""server.document-root = "{WWW}"
server.bind = "127.0.0.1"
server.port = {PORTS['lighttpd']}
server.max-worker = 2
server.max-fds = 19000
server.max-connections = 9000
server.max-keep-alive-requests = 1000000
server.max-keep-alive-idle = 120
server.errorlog = "{WORK}/logs/lighttpd-error.log"
server.username = "nobody"
server.groupname = "nogroup"
""")
    with open(f"{WORK}/sluice.toml", "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:{PORTS['sluice']}"
root = "{WWW}"
workers = 2
[http]
keepalive_timeout = "120s"
keepalive_requests = 1000000
""")


def start(name, sluice_bin, prefix=()):
    """Start server `name`; `prefix` goes before its command (e.g. taskset)."""
    log = open(f"{WORK}/{name}.out", "w")
    cmd = [*prefix] + {
        "sluice": [sluice_bin, "serve", "--allow-root", "--config", f"{WORK}/sluice.toml", "--access-log", "off"],
        "nginx": ["nginx", "-c", f"{WORK}/nginx.conf", "-p", f"{WORK}/nginx", "-g", "daemon off;"],
        "h2o": ["h2o", "-c", f"{WORK}/h2o.conf"],
        "lighttpd": ["lighttpd", "-D", "-f", f"{WORK}/lighttpd.conf"],
    }[name]
    # Own session: h2o and lighttpd signal their whole process group on SIGTERM.
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=raise_nofile,
                         start_new_session=True)
    return wait_listening(p, name, PORTS[name])


def stop_all(procs):
    """SIGTERM each server, then wait up to 10 s for each (SIGKILL past that)."""
    procs = list(procs)
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wait_listening(p, name, port):
    """Return `p` once something accepts on `port` (5 s at most)."""
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{name} did not start; see {WORK}/{name}.out")


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def start_sluice_with_status(sluice_bin, port, workers, http_extra=""):
    """One sluice on `port` serving WWW with `workers` workers and the status page on;
    returns the process and a function that reads the page's JSON."""
    conf = f"{WORK}/sluice-status-{port}.toml"
    with open(conf, "w") as f:
        f.write(f'[server]\nlisten = "127.0.0.1:{port}"\nroot = "{WWW}"\nworkers = {workers}\n'
                f"[http]\n{http_extra}[status]\nenabled = true\n")
    p = subprocess.Popen([sluice_bin, "serve", "--allow-root", "--config", conf, "--access-log", "off"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=raise_nofile, start_new_session=True)
    wait_listening(p, "sluice", port)
    url = f"http://127.0.0.1:{port}/server-status?format=json"
    return p, lambda: json.load(urllib.request.urlopen(url, timeout=5))


def turns_between(a, b):
    """The loop turns counted between two status pages, as (upper bound in s, count),
    the last bound infinite."""
    ta, tb = a["loop_turn_seconds"], b["loop_turn_seconds"]
    return list(zip(tb["le"] + [float("inf")], [y - x for x, y in zip(ta["counts"], tb["counts"])]))


def tree(pid):
    """pid and all its descendants."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read()
                ppid = int(st[st.rindex(")") + 2:].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def cpu_seconds(pid):
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
            fields = st[st.rindex(")") + 2:].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / TICK


def nstat(counters):
    """The kernel's counters named in `counters` (`nstat -az`), as a dict."""
    out = subprocess.run(["nstat", "-az", *counters], capture_output=True, text=True).stdout
    return {f[0]: int(f[1]) for f in (l.split() for l in out.splitlines()[1:]) if len(f) >= 2}


def softirq_seconds():
    """The machine's softirq time (all CPUs), from /proc/stat."""
    with open("/proc/stat") as f:
        cpu = f.readline().split()
    return int(cpu[7]) / TICK


def backlog_drops():
    """Packets dropped from the CPUs' input backlogs (/proc/net/softnet_stat, column 2)."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(l.split()[1], 16) for l in f if l.strip())


def rss_bytes(pid):
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


WGET = ["User-Agent: Wget/1.21.3", "Accept: */*", "Accept-Encoding: identity",
        "Connection: Keep-Alive"]
# A browser's request head (Chromium on Linux), for every request of `browser10k`.
BROWSER = ["User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
           "Chrome/131.0.0.0 Safari/537.36",
           "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8",
           "Accept-Encoding: gzip, deflate, br, zstd", "Accept-Language: en-US,en;q=0.9",
           "Referer: http://mirror.example/r/", "Sec-Fetch-Mode: navigate", "Sec-Fetch-Site: same-origin",
           "Upgrade-Insecure-Requests: 1"]

UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "KB": 1024, "MB": 1 << 20, "GB": 1 << 30, "B": 1}


def wrk(url, conns, duration, script=None, header=None):
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency"]
    if script:
        cmd += ["-s", script]
    for h in [header] if isinstance(header, str) else header or []:
        cmd += ["-H", h]
    out = subprocess.run(cmd + [url], capture_output=True, text=True, preexec_fn=raise_nofile).stdout
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    m = re.search(r"Transfer/sec:\s+([\d.]+)(\w*)", out)
    bps = float(m.group(1)) * UNITS.get(m.group(2), 1)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock_err = re.search(r"Socket errors: (.*)", out)
    return {"requests": reqs, "rps": rps, "bps": bps,
            "non2xx": int(errors.group(1)) if errors else 0,
            "socket_errors": sock_err.group(1) if sock_err else ""}


def curl_speed(url):
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}", url],
                         capture_output=True, text=True).stdout
    return float(out)


def idle_rss_per_conn(name, pid, n=10000, warm=1000):
    """Open keep-alive connections, make one request on each, let them idle. RSS is
    read before any, after the first `warm` (which pays what a server allocates or
    faults in once: code pages, caches, pools; with several processes, once in each)
    and after `n` more: bytes_per_conn is the growth over those n, what one more idle
    connection costs; bytes_per_conn_from_start the old figure, (after - before) / all."""
    raise_nofile()
    before = rss_bytes(pid)
    socks, answered = open_idle(name, warm)
    mid = rss_bytes(pid)
    more, answered_more = open_idle(name, n)
    after = rss_bytes(pid)
    for s in socks + more:
        s.close()
    return {"conns": n + warm, "answered": answered + answered_more, "rss_before": before,
            "rss_after": after, "bytes_per_conn": (after - mid) / n,
            "bytes_per_conn_from_start": (after - before) / (n + warm)}


def open_idle(name, n):
    """n connections, each answered once and then left idle; (sockets, answered)."""
    sel = selectors.DefaultSelector()
    socks = []
    req = b"GET /f100.bin HTTP/1.1\r\nHost: a\r\n\r\n"
    for i in range(n):
        s = socket.socket()
        s.setblocking(True)
        s.connect(("127.0.0.1", PORTS[name]))
        s.sendall(req)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        socks.append(s)
    pending = set(socks)
    deadline = time.time() + 60
    while pending and time.time() < deadline:
        for key, _ in sel.select(timeout=1):
            try:
                if key.fileobj.recv(65536):
                    pending.discard(key.fileobj)
            except BlockingIOError:
                pass
    sel.close()
    time.sleep(1.0)
    return socks, n - len(pending)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--servers", default="sluice,h2o,lighttpd,nginx")
    ap.add_argument("--tests", default="small1k,small100,random10k,download,wrk1m,idle")
    ap.add_argument("--sluice", default=f"{ROOT}/target/release/sluice")
    ap.add_argument("--json", default=None, help="write all samples here")
    a = ap.parse_args()
    servers = a.servers.split(",")
    tests = a.tests.split(",")
    make_files()
    configs()
    procs = {}
    samples = {}
    try:
        for s in servers:
            procs[s] = start(s, a.sluice)
        for r in range(a.rounds):
            order = servers[:]
            random.shuffle(order)
            for t in tests:
                for s in order:
                    url = f"http://127.0.0.1:{PORTS[s]}"
                    pid = procs[s].pid
                    c0 = cpu_seconds(pid)
                    u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    if t == "small1k":
                        res = wrk(url + "/f1k.bin", 50, a.duration)
                    elif t in ("close1k", "close10k"):
                        # A new connection per request (issue 11: accept to first byte).
                        f = "/f1k.bin" if t == "close1k" else "/f10k.bin"
                        res = wrk(url + f, 50, a.duration, header="Connection: close")
                    elif t == "wget1k":
                        # wget's own request head (1.21): keep-alive, `identity`.
                        res = wrk(url + "/f1k.bin", 50, a.duration, header=WGET)
                    elif t == "small100":
                        res = wrk(url + "/f100.bin", 50, a.duration)
                    elif t == "random10k":
                        res = wrk(url, 50, a.duration, f"{WORK}/random.lua")
                    elif t == "browser10k":
                        # random10k with a browser's head: every request a new one (the full path).
                        res = wrk(url, 50, a.duration, f"{WORK}/random.lua", header=BROWSER)
                    elif t == "wrk1m":
                        res = wrk(url + "/f1m.bin", 8, a.duration)
                    elif t == "download":
                        # One 100 MB download lasts ~50 ms here: take the median of five.
                        res = {"bps": statistics.median(curl_speed(url + "/f100m.bin") for _ in range(5)),
                               "requests": 5}
                    elif t == "idle":
                        if r > 0:
                            continue
                        res = idle_rss_per_conn(s, pid)
                    c1 = cpu_seconds(pid)
                    u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    res["cpu_us_per_req"] = (c1 - c0) / max(res.get("requests", 1), 1) * 1e6
                    # The load generator's own CPU (wrk, curl): on two shared cores a
                    # closed-loop client at one full core sets req/s, whatever the server.
                    res["client_cpu_us_per_req"] = ((u1.ru_utime + u1.ru_stime) - (u0.ru_utime + u0.ru_stime)) \
                        / max(res.get("requests", 1), 1) * 1e6
                    samples.setdefault(t, {}).setdefault(s, []).append(res)
                    print(f"round {r + 1} {t:10} {s:9} " + " ".join(
                        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in res.items()),
                        flush=True)
    finally:
        stop_all(procs.values())
    report(samples, servers)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(samples, f, indent=1)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def report(samples, servers):
    print("\n| test | " + " | ".join(servers) + " | sluice / best peer |")
    print("|---|" + "---|" * (len(servers) + 1))
    for t, by in samples.items():
        if t == "idle":
            row = {s: med([x["bytes_per_conn"] for x in by.get(s, [])]) for s in servers}
            best = min((v for s, v in row.items() if s != "sluice"), default=float("nan"))
            print(f"| {t}: RSS growth per idle connection past the first 1,000, bytes | "
                  + " | ".join(f"{row[s]:.0f}" for s in servers)
                  + f" | {row.get('sluice', float('nan')) / best:.2f} (lower is better) |")
            row = {s: med([x["bytes_per_conn_from_start"] for x in by.get(s, [])]) for s in servers}
            best = min((v for s, v in row.items() if s != "sluice"), default=float("nan"))
            print(f"| {t}: RSS growth per idle connection from none (earlier runs' figure), bytes | "
                  + " | ".join(f"{row[s]:.0f}" for s in servers)
                  + f" | {row.get('sluice', float('nan')) / best:.2f} (lower is better) |")
            tot = {s: med([x["rss_after"] for x in by.get(s, [])]) / (1 << 20) for s in servers}
            bt = min((v for s, v in tot.items() if s != "sluice"), default=float("nan"))
            print(f"| {t}: total RSS with 11,000 idle connections, MiB | " + " | ".join(f"{tot[s]:.1f}" for s in servers)
                  + f" | {tot.get('sluice', float('nan')) / bt:.2f} (lower is better) |")
            continue
        if t in ("download", "wrk1m"):
            row = {s: med([x["bps"] for x in by.get(s, [])]) / (1 << 20) for s in servers}
            best = max((v for s, v in row.items() if s != "sluice"), default=float("nan"))
            print(f"| {t}: MiB/s | " + " | ".join(f"{row[s]:.0f}" for s in servers)
                  + f" | {row.get('sluice', 0) / best:.2f} |")
            continue
        rps = {s: med([x["rps"] for x in by.get(s, [])]) for s in servers}
        cpu = {s: med([x["cpu_us_per_req"] for x in by.get(s, [])]) for s in servers}
        best = max((v for s, v in rps.items() if s != "sluice"), default=float("nan"))
        frugal = min((v for s, v in cpu.items() if s != "sluice"), default=float("nan"))
        print(f"| {t}: req/s | " + " | ".join(f"{rps[s]:.0f}" for s in servers)
              + f" | {rps.get('sluice', 0) / best:.2f} |")
        print(f"| {t}: server CPU µs/req | " + " | ".join(f"{cpu[s]:.2f}" for s in servers)
              + f" | {cpu.get('sluice', 0) / frugal:.2f} (vs most frugal) |")
        cli = {s: med([x["client_cpu_us_per_req"] for x in by.get(s, [])]) for s in servers}
        print(f"| {t}: client CPU µs/req | " + " | ".join(f"{cli[s]:.2f}" for s in servers) + " | |")


if __name__ == "__main__":
    main()
