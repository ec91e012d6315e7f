#!/usr/bin/env python3
"""Run `sluice bench run`'s conditioning experiments against sluice and nginx side by
side (2 workers each, the files and configs of bench/compare.py), and print every
table. Attack sizes follow the conditioning issue's table; past one process's
descriptors the attackers run in several processes from 127.66.x.

    bench/attack_runs.py [--duration 5] [--experiments incomplete,half-heads,...]
                         [--sweep-max 32000] [--apache] [--isolate] [--sluice-processes N]
                         [--rounds N] [--client-fifo]

--isolate gives the servers a core of their own, as the paper's server had its own
machine: each server runs one worker (nginx one worker process) pinned to CPU 0, and
`sluice bench` with its attackers runs on CPU 1, the measuring client at SCHED_FIFO
(the load and attacker processes it starts reset themselves to ordinary priority). Without it, the load
generator and the servers share both cores and a latency figure (heavy-range) shows
the kernel's scheduling of the four busy threads more than the server's ordering.
It is for latency experiments whose measuring client mostly sleeps (heavy-range,
request-flood): a closed-loop client at SCHED_FIFO would keep the attackers on its
core from running. request-flood (not in the default list) is heavy-range with 200
clients asking for 1 KiB files back to back instead of downloading 1 MiB files.

--client-fifo runs the measuring client at SCHED_FIFO (its load processes reset
themselves to ordinary priority, as under --isolate) without pinning anything: the
servers keep two workers on the two shared cores, and the latency figure no longer
includes the measuring client's own wait for a core.

--sluice-processes N sets sluice's serving processes (default: sluice's own default,
one per worker; 1 runs both workers as threads of one process).

--apache adds Debian's Apache 2.4 (mpm_event, 2 processes, 150 workers, the
defaults' mod_reqtimeout), as seed 004 measured Apache beside the paper's server.

Each experiment also prints every server's memory: RSS of its process tree before
the experiment and the peak during it (sampled twice a second), and the growth per
attacking connection.
"""
import argparse, os, statistics, subprocess, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attacks  # noqa: E402  (sluice with its defaults, as in the attack table)
import compare  # noqa: E402

APACHE_PORT = 18185

SIZES = {"incomplete": 32000, "half-heads": 16000, "slowloris": 8000,
         "persistent-hold": 20000, "slow-read": 2000}


def start_apache():
    d = f"{compare.WORK}/apache"
    os.makedirs(f"{d}/logs", exist_ok=True)
    mods = "/usr/lib/apache2/modules"
    with open(f"{d}/httpd.conf", "w") as f:
        f.write(f"""ServerRoot {d}
Listen 127.0.0.1:{APACHE_PORT}
PidFile {d}/httpd.pid
ErrorLog {d}/logs/error.log
LoadModule mpm_event_module {mods}/mod_mpm_event.so
LoadModule authz_core_module {mods}/mod_authz_core.so
LoadModule mime_module {mods}/mod_mime.so
LoadModule dir_module {mods}/mod_dir.so
LoadModule reqtimeout_module {mods}/mod_reqtimeout.so
User nobody
Group nogroup
ServerName localhost
DocumentRoot {compare.WWW}
<Directory {compare.WWW}>
  Require all granted
</Directory>
TypesConfig /etc/mime.types
StartServers 2
ServerLimit 2
ThreadLimit 75
ThreadsPerChild 75
MaxRequestWorkers 150
KeepAlive On
MaxKeepAliveRequests 0
""")
    p = subprocess.Popen(["apache2", "-DFOREGROUND", "-f", f"{d}/httpd.conf"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=compare.raise_nofile, start_new_session=True)
    return compare.wait_listening(p, "apache", APACHE_PORT)


class RssWatch:
    """Sample each server's RSS (its whole process tree) twice a second while an
    experiment runs: the baseline before it, the peak during it."""

    def __init__(self, servers):
        self.servers = servers  # name -> pid
        self.base = {n: compare.rss_bytes(p) for n, p in servers.items()}
        self.peak = dict(self.base)
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.wait(0.5):
            for n, p in self.servers.items():
                self.peak[n] = max(self.peak[n], compare.rss_bytes(p))

    def report(self, experiment, n, what="attacking connection"):
        self.stop.set()
        self.t.join()
        for name in self.servers:
            grow = self.peak[name] - self.base[name]
            per = f", {grow / n:.0f} B per {what}" if n else ""
            print(f"memory {experiment} {name}: RSS {self.base[name] / 2**20:.1f} MiB before, "
                  f"peak {self.peak[name] / 2**20:.1f} MiB during (+{grow / 2**20:.1f} MiB{per})", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--experiments",
                    default="incomplete,half-heads,slowloris,persistent-hold,slow-read,heavy-range,incomplete-sweep")
    ap.add_argument("--sweep-max", type=int, default=32000)
    ap.add_argument("--apache", action="store_true")
    ap.add_argument("--isolate", action="store_true")
    ap.add_argument("--client-fifo", action="store_true")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the experiment list this many times, interleaved (round 1 of every "
                         "experiment, then round 2, ...), and end with each ratio's median and rounds "
                         "(for incomplete-sweep, each step's)")
    ap.add_argument("--sluice-toml", default="",
                    help="TOML appended to sluice's config, e.g. '[condition]\\ndefer_accept = \"0\"' "
                         "(\\n for a newline)")
    ap.add_argument("--sluice-processes", type=int, default=0,
                    help="server.processes for sluice (its workers split over that many processes; "
                         "0, the default, is sluice's own: one per worker)")
    ap.add_argument("--sluice-prefix", default="",
                    help="a command sluice is started under (split on spaces), e.g. an experiment's wrapper")
    a = ap.parse_args()
    server_prefix = ("taskset", "-c", "0") if a.isolate else ()
    client_prefix = ["taskset", "-c", "1", "chrt", "-f", "1"] if a.isolate else []
    if a.client_fifo and not a.isolate:
        client_prefix = ["chrt", "-f", "1"]
    if a.isolate:
        os.sched_setaffinity(0, {1})  # this script's RSS sampling stays off CPU 0 too
    sluice_bin = os.path.join(compare.ROOT, "target/release/sluice")
    compare.make_files()
    compare.configs()
    if a.isolate:
        conf = f"{compare.WORK}/nginx.conf"
        with open(conf) as f:
            text = f.read().replace("worker_processes 2;", "worker_processes 1;")
        with open(conf, "w") as f:
            f.write(text)
    targets = ["--target", f"sluice=http://127.0.0.1:{compare.PORTS['sluice']}/",
               "--target", f"nginx=http://127.0.0.1:{compare.PORTS['nginx']}/"]
    if a.apache:
        targets += ["--target", f"apache=http://127.0.0.1:{APACHE_PORT}/"]
    names = ["sluice", "nginx"] + (["apache"] if a.apache else [])
    ratios = {}  # (experiment, target) -> [ratio per round]
    for e in [e for _ in range(a.rounds) for e in a.experiments.split(",")]:
        # Fresh servers for every experiment: memory a process took for one attack
        # stays in its RSS and would hide the next attack's.
        procs = []
        try:
            procs.append(attacks.start_sluice(sluice_bin, 1 if a.isolate else 2,
                                              (*server_prefix, *a.sluice_prefix.split()),
                                              a.sluice_processes, a.sluice_toml.replace("\\n", "\n") + "\n"))
            procs.append(compare.start("nginx", sluice_bin, server_prefix))
            if a.apache:
                procs.append(start_apache())
            n = a.sweep_max if e == "incomplete-sweep" else SIZES.get(e)
            cmd = [*client_prefix, sluice_bin, "bench", "run", e, *targets, "--docroot", compare.WWW,
                   "--out", f"{compare.WORK}/attack-out", "-d", f"{a.duration}s", "-c", "10"]
            if n:
                cmd += ["--max-concurrency", str(n)]
            print(f"$ {' '.join(cmd)}", flush=True)
            watch = RssWatch(dict(zip(names, (p.pid for p in procs))))
            r = subprocess.run(cmd, capture_output=True, text=True)
            print(r.stdout + r.stderr, flush=True)
            if e != "incomplete-sweep":
                for t, x in table_ratios(r.stdout):
                    ratios.setdefault((e, t), []).append(x)
            else:
                for t, step, x in sweep_ratios(r.stdout):
                    ratios.setdefault((f"sweep {step}", t), []).append(x)
            watch.report(e, n if e != "incomplete-sweep" else 0)
        finally:
            for p in procs:
                try:
                    os.killpg(p.pid, 15)  # apache's children are in its session
                except OSError:
                    p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
        time.sleep(2)
    if a.rounds > 1:
        print("\nratio to no attack (req/s; heavy-range: p99 under load / alone), median and every round:")
        for (e, t), xs in ratios.items():
            print(f"{e:18} {t:8} median {statistics.median(xs):6.2f}   rounds: "
                  f"{' '.join(f'{x:.2f}' for x in xs)}")


def sweep_ratios(out):
    """(target, step, ratio) of each row of an `incomplete-sweep` table."""
    rows = []
    for line in out.splitlines():
        f = line.split()
        if len(f) == 5 and f[0] != "target":
            try:
                rows.append((f[0], f[1], float(f[4])))
            except ValueError:
                pass
    return rows


def table_ratios(out):
    """(target, ratio) of each row of a `sluice bench run` table with a ratio column."""
    rows, col = [], None
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "target" and "ratio" in f:
            col = f.index("ratio")
        elif col is not None and len(f) > col:
            try:
                rows.append((f[0], float(f[col])))
            except ValueError:
                col = None
    return rows


if __name__ == "__main__":
    main()
