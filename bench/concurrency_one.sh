#!/bin/bash
# The concurrency ramp to 19,000 downloads against one sluice with extra config lines,
# printing the 10,800 and 19,000 steps (issue 11 part 4; docs/BENCHMARKS.md).
#   bench/concurrency_one.sh NAME 'TOML LINES (\\n for newlines)'
# BIN=PATH runs another build (server and client; CLIENT=PATH another client). PROBE_FIFO=1 runs the probe thread at SCHED_FIFO (`--probe-fifo`).
# STAGGER=1 runs the downloads out of step (`--download-stagger`: they do not all end and reconnect together).
# PROBE_AFTER=4s starts the probe that far into each step (`--probe-after`: after the step's burst of
# connections). D=14s sets the step length (default 10s).
# PROBE_NEW=1 sends every probe request on a new connection (`--probe-new-connections`: a new client).
# MAX=10800 ends the ramp there. RATE=32768 sets each download's read rate (bytes/s; the
# experiment's default is 64 KiB/s). COUNTERS=1 also prints the kernel's drop counters over
# the ramp: input-backlog drops (/proc/net/softnet_stat) and listen/SYN-queue counters.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
NAME=$1; EXTRA=$2; MAX=${MAX:-19000}; BIN=${BIN:-$ROOT/target/release/sluice}
printf '[server]\nlisten = "127.0.0.1:18320"\nroot = "/tmp/sluice-bench/www"\nworkers = 2\n%b\n' "$EXTRA" > /tmp/sluice-bench/cc-$NAME.toml
ulimit -n 20000
"$BIN" serve --allow-root --config /tmp/sluice-bench/cc-$NAME.toml --access-log off > /tmp/sluice-bench/cc-$NAME.out 2>&1 &
SP=$!
sleep 1.5
drops() { local s=0 a b rest; while read -r a b rest; do s=$((s + 16#$b)); done </proc/net/softnet_stat; echo $s; }
[ -n "$COUNTERS" ] && { nstat -n >/dev/null; D0=$(drops); }
"${CLIENT:-$BIN}" bench run concurrency --docroot /tmp/sluice-bench/www --out /tmp/sluice-bench/cc-out --max-concurrency "$MAX" -d ${D:-10s} ${RATE:+--download-rate $RATE} ${PROBE_FIFO:+--probe-fifo} ${PROBE_NEW:+--probe-new-connections} ${STAGGER:+--download-stagger} ${PROBE_AFTER:+--probe-after $PROBE_AFTER} --target $NAME=http://127.0.0.1:18320/ 2>&1 | grep -E "^ *$NAME +(10800|19000|$MAX) "
if [ -n "$COUNTERS" ]; then
  echo "input backlog drops: $(( $(drops) - D0 ))"
  nstat 2>/dev/null | grep -E "ListenOverflows|ListenDrops|ReqQFull|DeferAcceptDrop|TCPTimeouts" | awk '{printf "%s=%s ", $1, $2} END {print ""}'
fi
kill $SP; wait $SP 2>/dev/null
grep -c "DEFER" /tmp/sluice-bench/cc-$NAME.out || true  # 0 lines is no failure
