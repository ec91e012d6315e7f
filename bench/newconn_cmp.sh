#!/bin/bash
# Interleaved rounds of wrk against already-running servers, a new connection per
# request ("Connection: close"), with each server's CPU per request from /proc.
#   bench/newconn_cmp.sh ROUNDS SECONDS NAME=PORT:PID,PID... [NAME=PORT:PIDS ...]
# FILE=f1k.bin (default) picks the file; SB=1 uses `sluice bench --no-keepalive` instead of wrk;
# KA=1 keeps connections alive (the floor's `wrk -t1 -c50` load) instead.
ROUNDS=$1; DUR=$2; shift 2
HDR=(-H "Connection: close"); [ -n "$KA" ] && HDR=()
cpu() { local t=0; for p in $1; do for s in /proc/$p/task/*/stat; do v=$(awk '{print $14+$15}' $s 2>/dev/null); t=$((t+${v:-0})); done; done; echo $t; }
for r in $(seq $ROUNDS); do
  for spec in "$@"; do
    name=${spec%%=*}; rest=${spec#*=}; port=${rest%%:*}; pids=$(echo ${rest#*:} | tr ',' ' ')
    c0=$(cpu "$pids")
    if [ -n "$SB" ]; then out=$("$(dirname "$0")/../target/release/sluice" bench http://127.0.0.1:$port/${FILE:-f1k.bin} -d ${DUR}s -c 50 --no-keepalive 2>&1); n=$(echo "$out" | sed -n "s/.*(\([0-9]*\) of.*/\1/p"); rps=$(echo "$out" | awk "/Requests.sec/{print \$2}"); else out=$(wrk -t1 -c50 -d${DUR}s "${HDR[@]}" http://127.0.0.1:$port/${FILE:-f1k.bin}); n=$(echo "$out" | awk "/requests in/{print \$1}"); rps=$(echo "$out" | awk "/Requests.sec/{print \$2}"); fi
    c1=$(cpu "$pids")
    echo "round $r $name rps=$rps cpu_us_per_req=$(echo "scale=3; ($c1-$c0)*10000/$n" | bc)"
  done
done
