#!/usr/bin/env python3
"""An ordinary client's latency while sluice holds thousands of tarpits (issue 9).

sluice (2 workers) serves a 1 KiB file and has one rule, `prefix /tarpit tarpit
every=1s for=10m`. Rounds alternate: with N tarpitted connections held open (each
sent `GET /tarpit/N`, each receiving a line a second), and with none. In each round
`sluice bench -c 10 -d SECS` fetches the 1 KiB file; its p50/p99 are reported per
round, and the medians, with the ratio held/none.

    bench/tarpit_p99.py [--tarpits 5000] [--rounds 3] [--secs 5]

Traffic stays on 127.0.0.1; every connection is closed at the end.
"""
import argparse, json, os, socket, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target/release/sluice")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def bench(port, secs):
    out = subprocess.run(
        [BIN, "bench", f"http://127.0.0.1:{port}/f1k.bin", "-c", "10", "-d", f"{secs}s", "--json"],
        capture_output=True, text=True, check=True).stdout
    j = json.loads(out)
    lat = j["latency_us"] if "latency_us" in j else j["latency"]
    return lat["p50"], lat["p99"], j.get("requests", 0)


def hold(port, n):
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET /tarpit/{i} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        socks.append(s)
    return socks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tarpits", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--secs", type=int, default=5)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tarpit-p99.")
    with open(f"{work}/f1k.bin", "wb") as f:
        f.write(os.urandom(1024))
    with open(f"{work}/.rules", "w") as f:
        f.write("prefix /tarpit tarpit every=1s for=10m\n")
    with open(f"{work}/.sluice.toml", "w") as f:
        f.write(f"[rules]\nfiles = [\".rules\"]\ntarpit_max = {a.tarpits + 100}\n[log]\naccess = \"off\"\n")
    port = free_port()
    srv = subprocess.Popen([BIN, "serve", work, "--allow-root", "--listen", f"127.0.0.1:{port}",
                            "--workers", "2", "--config", f"{work}/.sluice.toml"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    srv.stdout.readline()
    rows = {"none": [], "held": []}
    try:
        for r in range(a.rounds):
            for mode in ("none", "held"):
                socks = hold(port, a.tarpits) if mode == "held" else []
                time.sleep(1)
                p50, p99, n = bench(port, a.secs)
                rows[mode].append((p50, p99))
                print(f"round {r + 1} {mode:4}: p50 {p50} us  p99 {p99} us  ({n} requests, {len(socks)} tarpits)")
                for s in socks:
                    s.close()
                time.sleep(1)
    finally:
        srv.terminate()
        srv.wait(timeout=20)
    med = {m: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for m, v in rows.items()}
    print(f"median none: p50 {med['none'][0]} us p99 {med['none'][1]} us")
    print(f"median held: p50 {med['held'][0]} us p99 {med['held'][1]} us")
    print(f"p99 held/none: {med['held'][1] / med['none'][1]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
