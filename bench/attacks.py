#!/usr/bin/env python3
"""The conditioning issue's attack table: a legitimate client's throughput under the
paper's attacks, as a ratio to no attack, sluice beside nginx (2 workers each).

Attackers run in their own processes (each has its own 20,000 descriptors) from
127.66.0.1 and 127.77.0.1; the legitimate client is wrk -t1 -c10 from 127.0.0.1 on a
1 KiB file. Attacks:

  silent     connect and send nothing (re-open when closed)
  half       send half a request head and stop
  slowloris  half a head, then one header line every 5 s
  hold       one small request on keep-alive, then hold the connection
  slowread   request a 100 MB file and read 16 bytes/s
  heavy      200 clients pulling 1 MiB files from 127.88.0.1; the figure is an
             infrequent client's p99 latency for a 1 KiB file (10 req/s), as a
             multiple of its p99 without the heavy clients

    bench/attacks.py [--servers sluice,nginx] [--attacks silent,half,slowloris,hold,slowread,heavy]
                     [--duration 8] [--per-attacker 16000,8000,4000,10000,1000]

Every attack stops by itself (deadline), sends only to 127.0.0.0/8, and the servers
are stopped at the end. Needs wrk, nginx and a release build of sluice.
"""
import argparse, json, os, selectors, socket, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (files, nginx config, start-up)

ATTACKERS = ["127.66.0.1", "127.77.0.1"]
DEFAULT_N = {"silent": 16000, "half": 8000, "slowloris": 4000, "hold": 10000, "slowread": 1000}


def attacker(mode, src, n, port, seconds):
    """One attacking process: keep `n` connections from `src` in `mode`."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sel = selectors.DefaultSelector()
    deadline = time.time() + seconds
    conns = {}  # fd -> [sock, state, next_action_time]
    head_part = b"GET /f1k.bin HTTP/1.1\r\nHost: a\r\n"
    opened = 0

    def open_one():
        nonlocal opened
        s = socket.socket()
        if mode == "slowread":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind((src, 0))
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            return
        conns[s.fileno()] = [s, "connecting", 0.0]
        sel.register(s, selectors.EVENT_WRITE)
        opened += 1

    def drop(fd):
        s = conns.pop(fd)[0]
        try:
            sel.unregister(s)
        except Exception:
            pass
        s.close()

    while time.time() < deadline:
        # Top up, a few hundred per turn so the selector keeps turning.
        for _ in range(min(500, n - len(conns))):
            open_one()
        now = time.time()
        for key, ev in sel.select(timeout=0.05):
            fd = key.fd
            if fd not in conns:
                continue
            c = conns[fd]
            s = c[0]
            if c[1] == "connecting":
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    drop(fd)
                    continue
                try:
                    if mode == "silent":
                        pass
                    elif mode in ("half", "slowloris"):
                        s.send(head_part)
                    elif mode == "hold":
                        s.send(b"GET /f1k.bin HTTP/1.1\r\nHost: a\r\n\r\n")
                    elif mode == "slowread":
                        s.send(b"GET /f100m.bin HTTP/1.1\r\nHost: a\r\n\r\n")
                except OSError:
                    drop(fd)
                    continue
                c[1] = "open"
                c[2] = now + (5.0 if mode == "slowloris" else 1.0)
                sel.modify(s, selectors.EVENT_READ)
                continue
            # Readable: the answer (hold), or the server closing on us.
            try:
                if mode == "slowread":
                    continue  # read on our own schedule below
                data = s.recv(65536)
                if not data:
                    drop(fd)
            except OSError:
                drop(fd)
        # Timed actions.
        if mode in ("slowloris", "slowread"):
            for fd in list(conns):
                c = conns[fd]
                if c[1] != "open" or c[2] > now:
                    continue
                try:
                    if mode == "slowloris":
                        if s_send(c[0], b"X-a: b\r\n") is False:
                            drop(fd)
                            continue
                        c[2] = now + 5.0
                    else:
                        d = c[0].recv(16)
                        if not d:
                            drop(fd)
                            continue
                        c[2] = now + 1.0
                except BlockingIOError:
                    c[2] = now + 1.0
                except OSError:
                    drop(fd)
    print(json.dumps({"mode": mode, "src": src, "open_at_end": len(conns), "opened": opened}))
    for fd in list(conns):
        drop(fd)


def s_send(s, b):
    try:
        s.send(b)
        return True
    except BlockingIOError:
        return True
    except OSError:
        return False


def wrk(port, seconds):
    out = subprocess.run(["wrk", "-t1", "-c10", f"-d{seconds}s", f"http://127.0.0.1:{port}/f1k.bin"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("Requests/sec:"):
            return float(line.split()[1])
    return 0.0


def probe_p99(sluice_bin, port, seconds):
    """An infrequent client: 10 req/s for a 1 KiB file; its p99 latency in µs."""
    out = subprocess.run([sluice_bin, "bench", f"http://127.0.0.1:{port}/f1k.bin", "-c", "1",
                          "--rate", "10", "-d", f"{seconds}s", "--json"],
                         capture_output=True, text=True).stdout
    return json.loads(out)["latency_us"]["p99"]


def start_sluice(sluice_bin, workers=2, prefix=(), processes=0, extra=""):
    port = compare.PORTS["sluice"]
    with open(f"{compare.WORK}/sluice-attack.toml", "w") as f:
        # Defaults, except where it listens, what it serves, and how many workers in
        # how many processes (0: sluice's default, one per worker).
        f.write(f'[server]\nlisten = "127.0.0.1:{port}"\nroot = "{compare.WWW}"\nworkers = {workers}\n'
                f'processes = {processes}\n' + extra)
    log = open(f"{compare.WORK}/sluice-attack.out", "w")
    p = subprocess.Popen([*prefix, sluice_bin, "serve", "--allow-root", "--config", f"{compare.WORK}/sluice-attack.toml"],
                         stdout=log, stderr=subprocess.STDOUT, preexec_fn=compare.raise_nofile,
                         start_new_session=True)
    return compare.wait_listening(p, "sluice-attack", port)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", default="sluice,nginx")
    ap.add_argument("--attacks", default="silent,half,slowloris,hold,slowread,heavy")
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--ramp", type=int, default=6, help="seconds for the attack to build up")
    ap.add_argument("--attacker", nargs=5, metavar=("MODE", "SRC", "N", "PORT", "SECONDS"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.attacker:
        mode, src, n, port, secs = a.attacker
        attacker(mode, src, int(n), int(port), float(secs))
        return
    sluice_bin = os.path.join(compare.ROOT, "target/release/sluice")
    compare.make_files()
    compare.configs()
    results = {}
    for server in a.servers.split(","):
        p = start_sluice(sluice_bin) if server == "sluice" else compare.start(server, sluice_bin)
        port = compare.PORTS[server]
        try:
            time.sleep(0.5)
            for attack in a.attacks.split(","):
                if attack == "heavy":
                    base = probe_p99(sluice_bin, port, a.duration)
                    heavy = subprocess.Popen([sluice_bin, "bench", f"http://127.0.0.1:{port}/f1m.bin",
                                              "-c", "200", "-d", f"{a.duration + a.ramp}s",
                                              "--source-addrs", "127.88.0.1", "--json"],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                             start_new_session=True)
                    time.sleep(2)
                    under = probe_p99(sluice_bin, port, a.duration)
                    heavy.wait()
                    results[(server, attack)] = {"p99_idle_us": base, "p99_heavy_us": under,
                                                 "ratio": under / max(base, 1)}
                else:
                    base = wrk(port, a.duration)
                    rss0 = compare.rss_bytes(p.pid)
                    n = DEFAULT_N[attack]
                    procs = [subprocess.Popen([sys.executable, __file__, "--attacker", attack, src, str(n),
                                               str(port), str(a.ramp + a.duration + 2)],
                                              stdout=subprocess.PIPE, text=True, start_new_session=True)
                             for src in ATTACKERS]
                    time.sleep(a.ramp)
                    rss1 = compare.rss_bytes(p.pid)
                    under = wrk(port, a.duration)
                    for q in procs:
                        q.wait()
                    held = [json.loads(q.stdout.read() or "{}") for q in procs]
                    results[(server, attack)] = {
                        "rps_idle": base, "rps_attack": under, "ratio": under / max(base, 1),
                        "rss_per_attack_conn": (rss1 - rss0) / max(2 * n, 1),
                        "attackers_open_at_end": sum(h.get("open_at_end", 0) for h in held),
                    }
                    time.sleep(2)  # let timeouts clear the rest
                print(server, attack, json.dumps(results[(server, attack)]), flush=True)
        finally:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    servers = a.servers.split(",")
    print("\n| attack | " + " | ".join(servers) + " |")
    print("|---|" + "---|" * len(servers))
    for attack in a.attacks.split(","):
        cells = []
        for s in servers:
            r = results.get((s, attack))
            if r is None:
                cells.append("-")
            elif attack == "heavy":
                cells.append(f"×{r['ratio']:.1f} (p99 {r['p99_idle_us'] / 1000:.1f} → {r['p99_heavy_us'] / 1000:.1f} ms)")
            else:
                cells.append(f"{r['ratio']:.2f} ({r['rps_idle']:.0f} → {r['rps_attack']:.0f} req/s)")
        label = f"2 × {DEFAULT_N[attack]} {attack}" if attack in DEFAULT_N else "heavy-range (infrequent client's p99)"
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
