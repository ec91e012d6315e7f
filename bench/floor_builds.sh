#!/usr/bin/env bash
# Several sluice builds beside the kernel floor in one interleaved run: `../shared/bench/floor.sh`'s
# measurement (wrk -t1 -c50 on a 1 KiB or BODY-byte file, keep-alive, 2 workers, server CPU per request
# from /proc), with the peers left out and any number of sluice binaries in, so that two builds' ratios
# to the floor come from the same minutes (e.g. the plain release build and scripts/build-pgo.sh's).
#   bash bench/floor_builds.sh NAME=BINARY [NAME=BINARY...] [ROUNDS] [SECONDS]      env: BODY=1024
# Printed: each server's median CPU µs per request, its ratio to the floor's median, every round, and
# each build's ratio to the first build's median ("/ first").
set -uo pipefail
BUILDS=(); while [ $# -gt 0 ] && [[ $1 == *=* ]]; do BUILDS+=("$1"); shift; done
ROUNDS=${1:-9}; DUR=${2:-5}; BODY=${BODY:-1024}
[ ${#BUILDS[@]} -gt 0 ] || { echo "usage: $0 NAME=BINARY [NAME=BINARY...] [ROUNDS] [SECONDS]"; exit 1; }
FLOOR_C=$(cd "$(dirname "$0")/../../shared/bench" 2>/dev/null && pwd)/floor.c
[ -f "$FLOOR_C" ] || { echo "floor.c not found beside the project (../shared/bench/floor.c)"; exit 1; }
W=$(mktemp -d /tmp/floorb.XXXXXX); chmod 755 "$W"; PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$W"' EXIT
cc -O2 -pthread "$FLOOR_C" -o "$W/floor" || exit 1
mkdir -p "$W/www"; head -c "$BODY" /dev/urandom >"$W/www/f.bin"; chmod -R a+rX "$W"
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
up() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened"; exit 1; }
declare -A P PID; NAMES=(floor)
P[floor]=$(port); "$W/floor" "${P[floor]}" 2 "$BODY" & PID[floor]=$!
for b in "${BUILDS[@]}"; do
    n=${b%%=*}; bin=${b#*=}; NAMES+=("$n"); P[$n]=$(port)
    "$bin" serve "$W/www" --listen "127.0.0.1:${P[$n]}" --workers 2 --access-log off >"$W/$n.log" 2>&1 & PID[$n]=$!
done
for s in "${NAMES[@]}"; do PIDS+=("${PID[$s]}"); up "${P[$s]}"; done
ticks() { local t=0 p; for p in $1 $(pgrep -P "$1"); do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done; echo $t; }
hz=$(getconf CLK_TCK)
for _ in $(seq 1 "$ROUNDS"); do
    for s in "${NAMES[@]}"; do
        c0=$(ticks "${PID[$s]}"); out=$(wrk -t1 -c50 -d"${DUR}s" "http://127.0.0.1:${P[$s]}/f.bin" 2>&1); c1=$(ticks "${PID[$s]}")
        n=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' <<<"$out")
        echo "$s $(python3 -c "print(($c1-$c0)/$hz*1e6/max(${n:-0},1))")"
    done
done >"$W/res"
python3 - "$W/res" <<'PY'
import sys, statistics, collections
d = collections.OrderedDict()
for line in open(sys.argv[1]):
    s, c = line.split(); d.setdefault(s, []).append(float(c))
names = list(d)
f = statistics.median(d["floor"]); first = statistics.median(d[names[1]])
print(f"{'server':10} {'CPU us/req':>11} {'x floor':>8} {'/ first':>8}   (medians of {len(d['floor'])} rounds, BODY bytes)")
for s in names:
    m = statistics.median(d[s]); rel = "" if s == "floor" else f"{m / first:8.3f}"
    print(f"{s:10} {m:11.2f} {m / f:8.3f} {rel:>8}   rounds: {' '.join(f'{x:.2f}' for x in d[s])}")
PY
