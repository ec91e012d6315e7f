#!/usr/bin/env python3
"""An attack row read against a bystander: how much of the legitimate client's loss
under an attack is the attacked server's, and how much the machine's (issue 8).

Two identical sluice processes (2 workers, defaults, the files of bench/compare.py):
A is attacked, B is not. The legitimate client (`sluice bench URL/f1k.bin -c 10
-t 1`, closed loop, 5 s windows) runs against A and B in turn: before the attack,
while it runs (windows alternate A, B, A, B... so both see the same phase of it),
and after it. If B loses as much as A while only A is attacked, the loss is the
machine's (the kernel's and the VM's), not the attacked server's handling.

    bench/bystander.py [--attack slow-read|silent] [--rounds 3] [--under 4]

Attacks, from 127.66.0.1 and 127.77.0.1, as in the attack table:
  slow-read  2 x 1,000 readers of a 16 MiB file at 16 B/s (`sluice bench --read-rate 16`)
  silent     2 x 16,000 connections that send nothing (`sluice bench attack silent`)
Traffic stays on loopback; every attacker ends with its own `-d` and is killed
after the last window under attack.
"""
import argparse, json, os, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

PORTS = {"A": 18650, "B": 18651}
RAMP = 4  # seconds the attackers get before the first window under attack, as in the table


def start(bin_, name):
    conf = f"{compare.WORK}/bystander-{name}.toml"
    with open(conf, "w") as f:
        f.write(f'[server]\nlisten = "127.0.0.1:{PORTS[name]}"\nroot = "{compare.WWW}"\nworkers = 2\n')
    p = subprocess.Popen([bin_, "serve", "--allow-root", "--config", conf],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=compare.raise_nofile, start_new_session=True)
    return compare.wait_listening(p, f"sluice {name}", PORTS[name])


def window(bin_, name, secs):
    out = subprocess.run([bin_, "bench", f"http://127.0.0.1:{PORTS[name]}/f1k.bin", "-c", "10", "-t", "1",
                          "-d", f"{secs}s", "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)["requests_per_s"]


def attack(bin_, kind, lasting):
    url = f"http://127.0.0.1:{PORTS['A']}"
    if kind == "slow-read":
        cmds = [[bin_, "bench", f"{url}/f16m.bin", "--read-rate", "16", "-c", "2000", "--processes", "2",
                 "--timeout", "600s", "-d", f"{lasting}s", "--source-addrs", "127.66.0.1,127.77.0.1"]]
    else:
        cmds = [[bin_, "bench", "attack", "silent", f"{url}/f1k.bin", "-c", "16000", "-d", f"{lasting}s",
                 "--source-addrs", src] for src in ("127.66.0.1", "127.77.0.1")]
    return [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=compare.raise_nofile, start_new_session=True) for c in cmds]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(compare.ROOT, "target/release/sluice"))
    ap.add_argument("--attack", default="slow-read", choices=["slow-read", "silent"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--under", type=int, default=4, help="windows under attack per server and round")
    ap.add_argument("--window", type=int, default=5)
    a = ap.parse_args()
    compare.make_files()
    path = f"{compare.WWW}/f16m.bin"
    if not os.path.exists(path) or os.path.getsize(path) != 16 << 20:
        with open(path, "wb") as f:
            f.write(os.urandom(16 << 20))
    procs = [start(a.bin, "A"), start(a.bin, "B")]
    ratios = {"A": [], "B": []}
    try:
        for r in range(1, a.rounds + 1):
            got = {(n, ph): [] for n in "AB" for ph in ("before", "under", "after")}
            for n in "AB":
                got[(n, "before")].append(window(a.bin, n, a.window))
            kids = attack(a.bin, a.attack, RAMP + 2 * a.under * (a.window + 1) + 10)
            time.sleep(RAMP)
            for _ in range(a.under):
                for n in "AB":
                    got[(n, "under")].append(window(a.bin, n, a.window))
            for k in kids:
                os.killpg(k.pid, 9)
                k.wait()
            time.sleep(2)
            for n in "BA":
                got[(n, "after")].append(window(a.bin, n, a.window))
            for n in "AB":
                without = (got[(n, "before")][0] + got[(n, "after")][0]) / 2
                under = statistics.mean(got[(n, "under")])
                ratios[n].append(under / without)
                print(f"round {r} {'A (attacked)' if n == 'A' else 'B (bystander)'}: before "
                      f"{got[(n, 'before')][0]:,.0f}  under {' '.join(f'{x:,.0f}' for x in got[(n, 'under')])}"
                      f"  after {got[(n, 'after')][0]:,.0f}  ratio {ratios[n][-1]:.2f}", flush=True)
            time.sleep(3)
    finally:
        for p in procs:
            os.killpg(p.pid, 15)
            p.wait()
    for n in "AB":
        print(f"{a.attack} {'attacked ' if n == 'A' else 'bystander'}: median ratio "
              f"{statistics.median(ratios[n]):.2f}  rounds {' '.join(f'{x:.2f}' for x in ratios[n])}")


if __name__ == "__main__":
    main()
