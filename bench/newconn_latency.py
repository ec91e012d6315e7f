#!/usr/bin/env python3
"""A new client's latency, one at a time: connect, wait 3 ms, send one
`Connection: close` request for /f1k.bin, time until the whole answer and the close.
The handshake is outside the timed part, so with TCP_DEFER_ACCEPT the server's
accept is inside it (as for a real new client) and without it is not.

    python3 bench/newconn_latency.py PORT [N=400]
"""
import socket, time, sys, statistics
port = int(sys.argv[1]); n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
req = b"GET /f1k.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
lat = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    time.sleep(0.003)
    t = time.perf_counter_ns()
    s.sendall(req)
    got = b""
    while True:
        b = s.recv(65536)
        if not b: break
        got += b
    lat.append((time.perf_counter_ns() - t) / 1000)
    s.close()
lat.sort()
print(f"port {port}: p50 {lat[len(lat)//2]:.0f} us  p90 {lat[int(len(lat)*.9)]:.0f}  mean {statistics.mean(lat):.0f}  bytes {len(got)}")
