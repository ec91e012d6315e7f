#!/usr/bin/env bash
# io_uring against epoll at the kernel floor (issue 11, target B): `wrk -t1 -c50` on a keep-alive 1 KiB
# (or BODY=100) answer, two threads each, server CPU time per request from /proc (utime+stime), rounds
# interleaved, medians and every round, each as a ratio to the epoll floor.
#   run from the project root after `cargo build --release`:  bash bench/floor_uring.sh [ROUNDS] [SECONDS]
# floor     ../shared/bench/floor.c: epoll, one recv and one send per request
# uring     bench/floor-uring (SINGLE_ISSUER | DEFER_TASKRUN): multishot accept and recv into provided
#           buffers, sends without completions, one io_uring_enter per loop turn
# uring-plain  the same ring without setup flags
# uring-fixed  uring with connections in the ring's file table (no descriptor lookups)
# sluice    target/release/sluice serve, for scale
set -uo pipefail
source "$(dirname "$0")/rounds.sh"
ROUNDS=${1:-5}; DUR=${2:-5}; BODY=${BODY:-1024}
ROOT=$(pwd); FLOORC=$ROOT/../shared/bench/floor.c
for b in target/release/sluice target/release/floor-uring; do
  [ -x "$b" ] || { echo "build first: cargo build --release"; exit 1; }
done
command -v wrk >/dev/null || apt-get install -y -qq wrk >/dev/null 2>&1
W=$(mktemp -d /tmp/flooru.XXXXXX); chmod 755 "$W"; PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$W"' EXIT
cc -O2 -pthread "$FLOORC" -o "$W/floor" || exit 1
mkdir -p "$W/www"; head -c "$BODY" /dev/urandom > "$W/www/f.bin"; chmod -R a+rX "$W"
declare -A P; declare -A PID
P[floor]=$(port); "$W/floor" "${P[floor]}" 2 "$BODY" & PID[floor]=$!
P[uring]=$(port); target/release/floor-uring "${P[uring]}" 2 "$BODY" defer & PID[uring]=$!
P[uring-plain]=$(port); target/release/floor-uring "${P[uring-plain]}" 2 "$BODY" plain & PID[uring-plain]=$!
P[uring-fixed]=$(port); target/release/floor-uring "${P[uring-fixed]}" 2 "$BODY" fixed & PID[uring-fixed]=$!
P[sluice]=$(port); target/release/sluice serve "$W/www" --listen "127.0.0.1:${P[sluice]}" --workers 2 --access-log off >/dev/null 2>&1 & PID[sluice]=$!
NAMES="floor uring uring-fixed uring-plain sluice"
for s in $NAMES; do PIDS+=("${PID[$s]}"); up "${P[$s]}"; done
# shellcheck disable=SC2086
rounds "$ROUNDS" "$DUR" 50 /f.bin $NAMES >"$W/res"
summarize "$W/res" floor
