#!/usr/bin/env bash
# Two sluice builds side by side: server CPU µs per request (utime+stime from /proc) and req/s for
# wrk -t1 -c50 on a 1 KiB file, keep-alive, 2 workers each, rounds interleaved A/B, medians.
#   bench/ab_sluice.sh OLD_BINARY NEW_BINARY [ROUNDS] [SECONDS]
# SIZE=1048576 CONNS=8 measures downloads (a 1 MiB file, wrk -c8) instead.
# e.g. the cost of a change: build the commit before it into another target dir and compare.
set -uo pipefail
A=$1; B=$2; ROUNDS=${3:-7}; DUR=${4:-5}; SIZE=${SIZE:-1024}; CONNS=${CONNS:-50}
W=$(mktemp -d /tmp/ab.XXXXXX); trap 'kill $PA $PB 2>/dev/null; rm -rf "$W"' EXIT
mkdir -p "$W/www"; head -c "$SIZE" /dev/urandom > "$W/www/f.bin"
# Readable by all: builds that drop root (to nobody) and builds that do not serve alike.
chmod -R a+rX "$W"
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
QA=$(port); "$A" serve "$W/www" --listen 127.0.0.1:$QA --workers 2 >/dev/null 2>&1 & PA=$!
QB=$(port); "$B" serve "$W/www" --listen 127.0.0.1:$QB --workers 2 >/dev/null 2>&1 & PB=$!
sleep 0.5
ticks() { awk '{print $14+$15}' /proc/$1/stat; }
hz=$(getconf CLK_TCK)
for r in $(seq 1 "$ROUNDS"); do
  for s in A B; do
    if [ $s = A ]; then p=$PA; q=$QA; else p=$PB; q=$QB; fi
    c0=$(ticks $p); out=$(wrk -t1 -c$CONNS -d${DUR}s http://127.0.0.1:$q/f.bin 2>&1); c1=$(ticks $p)
    n=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' <<<"$out"); rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    echo "$s $rps $(python3 -c "print(($c1-$c0)/$hz*1e6/max(${n:-0},1))")"
  done
done > "$W/res"
python3 - "$W/res" <<'PY'
import sys, statistics, collections
d = collections.defaultdict(lambda: ([], []))
for line in open(sys.argv[1]):
    s, r, c = line.split(); d[s][0].append(float(r)); d[s][1].append(float(c))
for s in "AB":
    r, c = d[s]
    print(f"{s}: req/s median {statistics.median(r):.0f}  CPU us/req median {statistics.median(c):.3f}  rounds: {' '.join(f'{x:.3f}' for x in c)}")
a, b = statistics.median(d["A"][1]), statistics.median(d["B"][1])
print(f"B/A CPU per request: {b / a:.3f}")
PY
