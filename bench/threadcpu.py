"""Helpers the listing and cold-file harnesses share: a server's CPU by thread name,
read from /proc, and one request on its own connection.

    from threadcpu import threads_cpu, fetch
    threads_cpu(pid, {"w": ("sluice-w", "nginx"), "disk": ("sluice-disk",)})
"""
import http.client
import os
import subprocess

TICK = os.sysconf("SC_CLK_TCK")


def threads_cpu(root_pid, classes):
    """CPU seconds (user + system) over root_pid's process tree, summed per class.

    `classes` maps a class name to the thread-name prefixes (or exact names) that
    belong to it, tried in order; a thread that matches none counts as "other"."""
    pids = [root_pid]
    out = subprocess.run(["pgrep", "-P", str(root_pid)], capture_output=True, text=True).stdout
    pids += [int(p) for p in out.split()]
    cpu = {k: 0.0 for k in classes}
    cpu["other"] = 0.0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for t in tasks:
            try:
                s = open(f"/proc/{pid}/task/{t}/stat").read()
            except FileNotFoundError:
                continue
            comm = s[s.index("(") + 1 : s.rindex(")")]
            f = s[s.rindex(")") + 2 :].split()
            secs = (int(f[11]) + int(f[12])) / TICK
            k = next((k for k, names in classes.items() if comm.startswith(tuple(names))), "other")
            cpu[k] += secs
    return cpu


def fetch(port, path, timeout=120):
    """GET path on a connection of its own: the body's length, 0 on any failure."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", path)
        n = len(c.getresponse().read())
        c.close()
        return n
    except OSError:
        return 0
