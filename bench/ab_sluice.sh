#!/usr/bin/env bash
# Two sluice builds side by side: server CPU µs per request (utime+stime from /proc) and req/s for
# wrk -t1 -c50 on a 1 KiB file, keep-alive, 2 workers each, rounds interleaved A/B, medians; B's
# "/ A" column is B/A CPU per request.
#   bench/ab_sluice.sh OLD_BINARY NEW_BINARY [ROUNDS] [SECONDS]
# SIZE=1048576 CONNS=8 measures downloads (a 1 MiB file, wrk -c8) instead. A_ARGS / B_ARGS add serve
# flags to one side, e.g. the same binary twice with B_ARGS="--processes 2" (CPU counts the children).
# DOCROOT=DIR WRK_SCRIPT=FILE serves DIR and lets the Lua script pick the paths, e.g. the random10k tree of
# bench/compare.py: DOCROOT=/tmp/sluice-bench/www WRK_SCRIPT=/tmp/sluice-bench/random.lua.
# e.g. the cost of a change: build the commit before it into another target dir and compare.
set -uo pipefail
source "$(dirname "$0")/rounds.sh"
ROUNDS=${3:-7}; DUR=${4:-5}; SIZE=${SIZE:-1024}; CONNS=${CONNS:-50}
W=$(mktemp -d /tmp/ab.XXXXXX); declare -A P; declare -A PID
trap 'kill "${PID[A]}" "${PID[B]}" 2>/dev/null; rm -rf "$W"' EXIT
mkdir -p "$W/www"; head -c "$SIZE" /dev/urandom > "$W/www/f.bin"
# Readable by all: builds that drop root (to nobody) and builds that do not serve alike.
chmod -R a+rX "$W"
WWW=${DOCROOT:-$W/www}
P[A]=$(port); "$1" serve "$WWW" --listen "127.0.0.1:${P[A]}" --workers 2 ${A_ARGS:-} >/dev/null 2>&1 & PID[A]=$!
P[B]=$(port); "$2" serve "$WWW" --listen "127.0.0.1:${P[B]}" --workers 2 ${B_ARGS:-} >/dev/null 2>&1 & PID[B]=$!
up "${P[A]}"; up "${P[B]}"
rounds "$ROUNDS" "$DUR" "$CONNS" /f.bin A B > "$W/res"
summarize "$W/res" A
