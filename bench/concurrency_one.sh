#!/bin/bash
# The concurrency ramp to 19,000 downloads against one sluice with extra config lines,
# printing the 10,800 and 19,000 steps (issue 11 part 4; docs/BENCHMARKS.md).
#   bench/concurrency_one.sh NAME 'TOML LINES (\\n for newlines)'
# PROBE_FIFO=1 runs the probe thread at SCHED_FIFO (`--probe-fifo`).
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
NAME=$1; EXTRA=$2
printf '[server]\nlisten = "127.0.0.1:18320"\nroot = "/tmp/sluice-bench/www"\nworkers = 2\n%b\n' "$EXTRA" > /tmp/sluice-bench/cc-$NAME.toml
ulimit -n 20000
"$ROOT/target/release/sluice" serve --allow-root --config /tmp/sluice-bench/cc-$NAME.toml --access-log off > /tmp/sluice-bench/cc-$NAME.out 2>&1 &
SP=$!
sleep 1.5
"$ROOT/target/release/sluice" bench run concurrency --docroot /tmp/sluice-bench/www --out /tmp/sluice-bench/cc-out --max-concurrency 19000 -d 10s ${PROBE_FIFO:+--probe-fifo} --target $NAME=http://127.0.0.1:18320/ 2>&1 | grep -E "^ *$NAME +(10800|19000) "
kill $SP; wait $SP 2>/dev/null
grep -c "DEFER" /tmp/sluice-bench/cc-$NAME.out
