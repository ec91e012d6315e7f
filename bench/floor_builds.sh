#!/usr/bin/env bash
# Several sluice builds beside the kernel floor in one interleaved run: `../shared/bench/floor.sh`'s
# measurement (wrk -t1 -c50 on a 1 KiB or BODY-byte file, keep-alive, 2 workers, server CPU per request
# from /proc), with the peers left out and any number of sluice binaries in, so that two builds' ratios
# to the floor come from the same minutes (e.g. the plain release build and scripts/build-pgo.sh's).
#   bash bench/floor_builds.sh NAME=BINARY [NAME=BINARY...] [ROUNDS] [SECONDS]      env: BODY=1024
# Printed (bench/rounds.sh's summary, twice): each server's medians and every round, as a ratio to the
# floor, then as a ratio to the first build.
set -uo pipefail
source "$(dirname "$0")/rounds.sh"
BUILDS=(); while [ $# -gt 0 ] && [[ $1 == *=* ]]; do BUILDS+=("$1"); shift; done
ROUNDS=${1:-9}; DUR=${2:-5}; BODY=${BODY:-1024}
[ ${#BUILDS[@]} -gt 0 ] || { echo "usage: $0 NAME=BINARY [NAME=BINARY...] [ROUNDS] [SECONDS]"; exit 1; }
FLOOR_C=$(cd "$(dirname "$0")/../../shared/bench" 2>/dev/null && pwd)/floor.c
[ -f "$FLOOR_C" ] || { echo "floor.c not found beside the project (../shared/bench/floor.c)"; exit 1; }
W=$(mktemp -d /tmp/floorb.XXXXXX); chmod 755 "$W"; PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$W"' EXIT
cc -O2 -pthread "$FLOOR_C" -o "$W/floor" || exit 1
mkdir -p "$W/www"; head -c "$BODY" /dev/urandom >"$W/www/f.bin"; chmod -R a+rX "$W"
declare -A P PID; NAMES=(floor)
P[floor]=$(port); "$W/floor" "${P[floor]}" 2 "$BODY" & PID[floor]=$!
for b in "${BUILDS[@]}"; do
    n=${b%%=*}; bin=${b#*=}; NAMES+=("$n"); P[$n]=$(port)
    "$bin" serve "$W/www" --listen "127.0.0.1:${P[$n]}" --workers 2 --access-log off >"$W/$n.log" 2>&1 & PID[$n]=$!
done
for s in "${NAMES[@]}"; do PIDS+=("${PID[$s]}"); up "${P[$s]}"; done
rounds "$ROUNDS" "$DUR" 50 /f.bin "${NAMES[@]}" >"$W/res"
summarize "$W/res" floor
summarize "$W/res" "${NAMES[1]}"
