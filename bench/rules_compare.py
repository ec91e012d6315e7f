#!/usr/bin/env python3
"""Seeds 001/002 reproduced side by side: what declaring redirect rules costs.

For each server and rule kind (10,000 rules; 1,000,000 for sluice too):
  (a) ordinary traffic that matches no rule (10,000 random 1 KiB files, wrk -t1 -c50)
      as a ratio to the same server with no rules;
  (b) ab -k -c 1 -n 20000 on the last rule's URL: ms per redirect, next to the
      same server's ms per 1 KiB file.
sluice loads the very Apache files Apache loads.

    bench/rules_compare.py [--rounds 2] [--duration 8] [--servers sluice,apache,nginx]

Needs: wrk, ab (apache2-utils), apache2, nginx; bench/compare.py's file set is reused
(it is created if missing).
"""
import argparse, os, re, socket, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402  (file set, process-tree CPU, wrk runner)

WORK = "/tmp/sluice-rules-bench"
WWW = compare.WWW
PORT = 18290
N = 10_000


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def rule_files():
    os.makedirs(WORK, exist_ok=True)
    lines = {
        "Redirect": [f"Redirect 301 /old/dir{i} /new/{i}" for i in range(N)],
        "RedirectMatch": [f"RedirectMatch 301 ^/rm/{i}/(.*)$ /new/{i}/$1" for i in range(N)],
        "RewriteRule": ["RewriteEngine On"] + [f"RewriteRule ^/rw/{i}\\.html$ /new/{i}.html [R=301,L]" for i in range(N)],
        "RewriteMap": ["RewriteEngine On", f"RewriteMap redirs txt:{WORK}/map.txt",
                       "RewriteRule ^/map/(.*)$ ${redirs:$1|/} [R=301,L]"],
    }
    write(f"{WORK}/map.txt", "".join(f"k{i} /new/{i}.html\n" for i in range(N)))
    for k, ls in lines.items():
        write(f"{WORK}/{k}.conf", "\n".join(ls) + "\n")
    write(f"{WORK}/exact.rules", "".join(f"exact /ex/{i}.html 301 /new/{i}.html\n" for i in range(N)))
    big = 1_000_000
    if not os.path.exists(f"{WORK}/exact-1m.rules"):
        write(f"{WORK}/exact-1m.rules", "".join(f"exact /ex/{i}.html 301 /new/{i}.html\n" for i in range(big)))
        write(f"{WORK}/RewriteRule-1m.conf", "RewriteEngine On\n" + "".join(
            f"RewriteRule ^/rw/{i}\\.html$ /new/{i}.html [R=301,L]\n" for i in range(big)))
        write(f"{WORK}/RedirectMatch-1m.conf", "".join(
            f"RedirectMatch 301 ^/rm/{i}/(.*)$ /new/{i}/$1\n" for i in range(big)))


LAST = {
    "Redirect": f"/old/dir{N - 1}/x", "RedirectMatch": f"/rm/{N - 1}/x", "RewriteRule": f"/rw/{N - 1}.html",
    "RewriteMap": f"/map/k{N - 1}", "exact": f"/ex/{N - 1}.html",
    "exact-1m": "/ex/999999.html", "RewriteRule-1m": "/rw/999999.html", "RedirectMatch-1m": "/rm/999999/x",
    "nginx-exact": f"/nx/{N - 1}.html", "nginx-regex": f"/nr/{N - 1}/x", "nginx-map": f"/nm/{N - 1}.html",
}


def apache_conf(kind):
    mods = ["mpm_event", "authz_core", "mime", "alias", "rewrite", "dir"]
    os.makedirs(f"{WORK}/apache-run", exist_ok=True)
    load = "\n".join(f"LoadModule {m}_module /usr/lib/apache2/modules/mod_{m}.so" for m in mods)
    include = f"Include {WORK}/{kind}.conf" if kind != "none" else ""
    conf = f"""{load}
ServerRoot /usr/lib/apache2
ServerName localhost
Listen 127.0.0.1:{PORT}
PidFile {WORK}/apache-run/apache.pid
DefaultRuntimeDir {WORK}/apache-run
ErrorLog {WORK}/apache-error.log
LogLevel warn
User nobody
Group nogroup
TypesConfig /etc/mime.types
DocumentRoot {WWW}
<Directory {WWW}>
  Require all granted
</Directory>
EnableSendfile On
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 60
StartServers 2
ServerLimit 2
ThreadsPerChild 32
MaxRequestWorkers 64
MinSpareThreads 1
MaxSpareThreads 64
{include}
"""
    path = f"{WORK}/apache-{kind}.conf"
    write(path, conf)
    return path


def nginx_conf(kind):
    os.makedirs(f"{WORK}/nginx", exist_ok=True)
    body = ""
    extra_http = ""
    if kind == "nginx-exact":
        body = "".join(f"  location = /nx/{i}.html {{ return 301 /new/{i}.html; }}\n" for i in range(N))
    elif kind == "nginx-regex":
        body = "".join(f"  location ~ ^/nr/{i}/(.*)$ {{ return 301 /new/{i}/$1; }}\n" for i in range(N))
    elif kind == "nginx-map":
        extra_http = "map_hash_bucket_size 128;\n  map_hash_max_size 65536;\n  map $uri $redir {\n  default \"\";\n" + "".join(
            f"  /nm/{i}.html /new/{i}.html;\n" for i in range(N)) + "}\n"
        body = "  if ($redir) { return 301 $redir; }\n"
    conf = f"""worker_processes 2;
pid {WORK}/nginx/nginx.pid;
error_log {WORK}/nginx/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off; sendfile on; tcp_nopush on;
  keepalive_timeout 120s; keepalive_requests 1000000;
  open_file_cache max=20000 inactive=20s;
  client_body_temp_path {WORK}/nginx/body; proxy_temp_path {WORK}/nginx/proxy;
  fastcgi_temp_path {WORK}/nginx/fcgi; uwsgi_temp_path {WORK}/nginx/uwsgi; scgi_temp_path {WORK}/nginx/scgi;
  {extra_http}
  server {{
  listen 127.0.0.1:{PORT} reuseport;
  root {WWW};
{body}  }}
}}
"""
    path = f"{WORK}/nginx-{kind}.conf"
    write(path, conf)
    return path


def sluice_conf(kind, sluice_bin):
    files = {"none": [], "exact": [f"{WORK}/exact.rules"], "exact-1m": [f"{WORK}/exact-1m.rules"],
             "RewriteRule-1m": [f"{WORK}/RewriteRule-1m.conf"],
             "RedirectMatch-1m": [f"{WORK}/RedirectMatch-1m.conf"]}.get(kind, [f"{WORK}/{kind}.conf"])
    path = f"{WORK}/sluice-{kind}.toml"
    write(path, f"""[server]
listen = "127.0.0.1:{PORT}"
root = "{WWW}"
workers = 2
[http]
keepalive_timeout = "120s"
keepalive_requests = 1000000
[rules]
files = {files!r}
""".replace("'", '"'))
    return [sluice_bin, "serve", "--allow-root", "--config", path, "--access-log", "off"]


def start(cmd, timeout=120):
    log = open(f"{WORK}/server.out", "a")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=compare.raise_nofile)
    t = time.time()
    while time.time() - t < timeout:
        if p.poll() is not None:
            raise SystemExit(f"server exited: {cmd}; see {WORK}/server.out")
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=0.2).close()
            return p
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"server did not start: {cmd}")


def stop(p, kind):
    p.terminate()
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    if kind == "apache":
        # apache2 forks children that outlive a parent's SIGTERM for a moment.
        time.sleep(1)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=0.1).close()
            time.sleep(0.1)
        except OSError:
            return


def ab_ms(path):
    out = subprocess.run(["ab", "-k", "-c", "1", "-n", "20000", f"http://127.0.0.1:{PORT}{path}"],
                         capture_output=True, text=True).stdout
    m = re.search(r"Time per request:\s+([\d.]+) \[ms\] \(mean\)", out)
    return float(m.group(1)) if m else float("nan")


def variants(servers):
    v = []
    if "sluice" in servers:
        v += [("sluice", k) for k in ["none", "Redirect", "RedirectMatch", "RewriteRule", "RewriteMap", "exact",
                                       "exact-1m", "RewriteRule-1m", "RedirectMatch-1m"]]
    if "apache" in servers:
        v += [("apache", k) for k in ["none", "Redirect", "RedirectMatch", "RewriteRule", "RewriteMap"]]
    if "nginx" in servers:
        v += [("nginx", k) for k in ["none", "nginx-exact", "nginx-regex", "nginx-map"]]
    return v


def command(server, kind, sluice_bin):
    if server == "sluice":
        return sluice_conf(kind, sluice_bin)
    if server == "apache":
        return ["apache2", "-f", apache_conf(kind), "-D", "FOREGROUND"]
    return ["nginx", "-c", nginx_conf(kind), "-p", f"{WORK}/nginx", "-g", "daemon off;"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--servers", default="sluice,apache,nginx")
    ap.add_argument("--sluice", default=os.path.join(os.path.dirname(HERE), "target/release/sluice"))
    a = ap.parse_args()
    compare.make_files()
    rule_files()
    vs = variants(a.servers.split(","))
    rps = {}
    ms = {}
    for r in range(a.rounds):
        for server, kind in vs:
            p = start(command(server, kind, a.sluice))
            try:
                res = compare.wrk(f"http://127.0.0.1:{PORT}", 50, a.duration, f"{compare.WORK}/random.lua")
                rps.setdefault((server, kind), []).append(res["rps"])
                if r == 0:
                    path = "/f1k.bin" if kind == "none" else LAST[kind]
                    ms[(server, kind)] = ab_ms(path)
                print(f"round {r + 1} {server:7} {kind:17} rps={res['rps']:.0f} non2xx={res['non2xx']}"
                      + (f" ab_ms={ms[(server, kind)]:.4f}" if r == 0 else ""), flush=True)
            finally:
                stop(p, server)
    print("\n| server | rules | ordinary traffic req/s | ratio to no rules | ms per redirect (ab -k -c1) | ms per 1 KiB file |")
    print("|---|---|---|---|---|---|")
    for server, kind in vs:
        med = statistics.median(rps[(server, kind)])
        base = statistics.median(rps[(server, "none")])
        label = "none" if kind == "none" else f"{'1,000,000' if kind.endswith('-1m') else '10,000'} {kind.replace('-1m', '').replace('nginx-', '')}"
        red = "-" if kind == "none" else f"{ms[(server, kind)]:.4f}"
        print(f"| {server} | {label} | {med:.0f} | {med / base:.3f} | {red} | {ms[(server, 'none')]:.4f} |")


if __name__ == "__main__":
    main()
