#!/usr/bin/env python3
"""Conditioning for any server (issue 12): seed 004's measurements of the front
process, on this machine.

    bench/front_compare.py [--tests chain,attack,hold,cost] [--duration 5] [--max-relays 8]

  chain   Figures 8/9: examples/ccserver.c behind `sluice condition` with 0..N pass
          relays: mean and p50 latency of one 100-byte request on a new connection
          (`sluice bench -c1 --no-keepalive`), and keep-alive throughput on the same
          file (`wrk -t1 -c50`); the cost per relay is the slope.
  attack  Figure 10: ccserver behind the front while 2 x 16,000 incomplete connections
          are held (silent ones, then ones that sent half a head), from 127.66.x:
          legitimate req/s (wrk -c10, 1 KiB) against its own no-attack rate.
  nofront the same ccserver on its own (`tcp:` mode: accept and read, no library
          in the way) while 100 connections send nothing.
  hold    Figure 12: the same with 10,000 held keep-alive connections.
  cost    sluice as a backend (`serve --from`, 2 workers) behind the front against
          `sluice serve` (2 workers) on 1 KiB keep-alive (wrk -t1 -c50): server CPU per
          request of all the processes together; rounds interleaved.

Needs: wrk, cc, `cargo build --release` (the front, sluice and libsluicecc).
"""
import argparse, json, os, shutil, socket, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import cpu_seconds, raise_nofile, stop_all, wrk  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = "/tmp/sluice-front-bench"
WWW = f"{WORK}/www"
SLUICE = os.environ.get("SLUICE_BIN", f"{ROOT}/target/release/sluice")
LIB = f"{ROOT}/target/release"
PORT = 18600
SOCK = f"{WORK}/cc.sock"


def setup():
    os.makedirs(WWW, exist_ok=True)
    for name, size in [("f100.bin", 100), ("f1k.bin", 1024)]:
        with open(f"{WWW}/{name}", "wb") as f:
            f.write(b"x" * size)
    subprocess.run(["cc", "-O2", f"-I{ROOT}/include", f"{ROOT}/examples/ccserver.c", f"-L{LIB}",
                    "-lsluicecc", "-o", f"{WORK}/ccserver"], check=True)
    with open(f"{WORK}/front.toml", "w") as f:
        f.write('[http]\nkeepalive_timeout = "120s"\n')
    # The same without TCP_DEFER_ACCEPT: silent connections reach the front process
    # and cost it descriptors, as in the paper (where the filter had no such help).
    with open(f"{WORK}/front-nodefer.toml", "w") as f:
        f.write('[http]\nkeepalive_timeout = "120s"\n[condition]\ndefer_accept = "0"\n')


def wait_port(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def spawn(cmd, env=None, log=None):
    err = open(log, "a") if log else subprocess.DEVNULL
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                            preexec_fn=raise_nofile, start_new_session=True, env=env)


def start_front(relays=0, cfg="front.toml"):
    if os.path.exists(SOCK):
        os.remove(SOCK)
    filters = "packaging,persist,fair,slowread,sanity" + ",pass" * relays
    p = spawn([SLUICE, "condition", "--listen", f"127.0.0.1:{PORT}", "--to", f"unix:{SOCK}",
               "--filters", filters, "--config", f"{WORK}/{cfg}"], log=f"{WORK}/front.log")
    wait_port(PORT)
    for _ in range(200):
        if os.path.exists(SOCK):
            break
        time.sleep(0.02)
    return p


def start_ccserver():
    env = dict(os.environ, LD_LIBRARY_PATH=LIB)
    p = spawn([f"{WORK}/ccserver", WWW, f"unix:{SOCK}"], env)
    time.sleep(0.2)
    return p


def url(path):
    return f"http://127.0.0.1:{PORT}{path}"


def latency(d):
    out = subprocess.run([SLUICE, "bench", url("/f100.bin"), "-c", "1", "-t", "1", "-d", f"{d}s",
                          "--no-keepalive", "--json"], capture_output=True, text=True).stdout
    j = json.loads(out)
    return j["latency_us"]["mean"], j["latency_us"]["p50"]


def t_chain(a):
    rows = []
    for n in range(a.max_relays + 1):
        f = start_front(n)
        cc = start_ccserver()
        try:
            mean, p50 = latency(a.duration)
            rps = wrk(url("/f100.bin"), 50, a.duration)["rps"]
        finally:
            stop_all((cc, f))
        rows.append((n, mean, p50, rps))
        print(f"chain relays={n} latency mean {mean:.1f} us p50 {p50} us  keep-alive {rps:.0f} req/s", flush=True)
    base = rows[0]
    if len(rows) > 1:
        slope = (rows[-1][1] - base[1]) / (len(rows) - 1)
        print(f"chain: {slope:.1f} us of latency per relay process (mean, 0 -> {len(rows) - 1})")
    return rows


def attackers(mode, total, per_proc, seconds):
    procs = []
    for i in range(total // per_proc):
        procs.append(subprocess.Popen(
            [SLUICE, "bench", "attack", mode, url("/f1k.bin"), "-c", str(per_proc), "-d", f"{seconds}s",
             "--source-addrs", f"127.66.{i + 1}.1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=raise_nofile))
    return procs


def under_attack(a, mode, total, per_proc, cfg="front.toml"):
    f = start_front(cfg=cfg)
    cc = start_ccserver()
    try:
        base = wrk(url("/f1k.bin"), 10, a.duration)["rps"]
        att = attackers(mode, total, per_proc, a.duration + 20)
        time.sleep(8)  # let them connect
        hit = wrk(url("/f1k.bin"), 10, a.duration)
        for p in att:
            p.terminate()
            p.wait()
    finally:
        stop_all((cc, f))
    ratio = hit["rps"] / base if base else 0
    print(f"{mode} x {total} ({cfg}): no attack {base:.0f} req/s, under attack {hit['rps']:.0f} req/s "
          f"({hit['socket_errors'] or 'no socket errors'}), ratio {ratio:.2f}", flush=True)
    return base, hit["rps"], ratio


def t_attack(a):
    return [under_attack(a, "silent", 32000, 16000),
            under_attack(a, "silent", 32000, 16000, "front-nodefer.toml"),
            under_attack(a, "half", 32000, 16000)]


def t_nofront(a):
    """The same ccserver without the front (plain accept/read): 100 silent clients."""
    env = dict(os.environ, LD_LIBRARY_PATH=LIB)
    cc = spawn([f"{WORK}/ccserver", WWW, f"tcp:127.0.0.1:{PORT}"], env)
    wait_port(PORT)
    try:
        base = wrk(url("/f1k.bin"), 10, a.duration)["rps"]
        att = attackers("silent", 100, 100, a.duration + 20)
        time.sleep(3)
        hit = wrk(url("/f1k.bin"), 10, a.duration)["rps"]
        for p in att:
            p.terminate()
            p.wait()
    finally:
        stop_all((cc,))
    print(f"no front, silent x 100: no attack {base:.0f} req/s, under attack {hit:.0f} req/s, "
          f"ratio {hit / base if base else 0:.2f}", flush=True)


def t_hold(a):
    return [under_attack(a, "hold", 10000, 10000)]


def t_cost(a):
    samples = {"serve": [], "front+backend": []}
    for r in range(a.rounds):
        order = ["serve", "front+backend"] if r % 2 == 0 else ["front+backend", "serve"]
        for kind in order:
            if kind == "serve":
                procs = [spawn([SLUICE, "serve", WWW, "--listen", f"127.0.0.1:{PORT}", "--workers", "2",
                                "--allow-root"])]
                wait_port(PORT)
            else:
                f = start_front()
                b = spawn([SLUICE, "serve", WWW, "--from", f"unix:{SOCK}", "--workers", "2", "--allow-root"])
                time.sleep(0.3)
                procs = [f, b]
            try:
                c0 = sum(cpu_seconds(p.pid) for p in procs)
                res = wrk(url("/f1k.bin"), 50, a.duration)
                cpu = sum(cpu_seconds(p.pid) for p in procs) - c0
            finally:
                stop_all(procs)
            us = cpu / max(res["requests"], 1) * 1e6
            samples[kind].append((us, res["rps"]))
            print(f"cost round {r + 1} {kind:14} {us:.2f} us CPU/request  {res['rps']:.0f} req/s", flush=True)
    med = {k: statistics.median(x[0] for x in v) for k, v in samples.items()}
    print(f"cost: median CPU/request serve {med['serve']:.2f} us, front+backend {med['front+backend']:.2f} us, "
          f"ratio {med['front+backend'] / med['serve']:.2f}")
    return samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tests", default="chain,attack,nofront,hold,cost")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-relays", type=int, default=8)
    a = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed (apt-get install wrk)")
    setup()
    for t in a.tests.split(","):
        {"chain": t_chain, "attack": t_attack, "hold": t_hold, "cost": t_cost, "nofront": t_nofront}[t](a)


if __name__ == "__main__":
    main()
