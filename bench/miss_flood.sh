#!/usr/bin/env bash
# A scan for absent names beside a client of 10,000 cached files: does the scan
# push the files out of the file cache? Two builds, interleaved rounds:
#   bash bench/miss_flood.sh OLD_BINARY NEW_BINARY [ROUNDS] [SECONDS]
# Per round and build: a fresh server (2 workers, log off); `wrk -t1 -c50` on 10,000
# 1 KiB files at random (the random10k client) and, at the same time, `wrk -t1
# -c10` asking for a new absent name every request. Prints the files client's
# req/s and the server's CPU per request (both clients' requests) from /proc.
#   HOT=N    the files client asks for the first N files only (default 10000;
#            200: heads that all fit in the kept-answer table, `answer_cache`)
#   TWICE=1  the scan asks for each absent name twice (the second sighting is
#            what admits an answer to the kept-answer table)
set -uo pipefail
OLD=$1; NEW=$2; ROUNDS=${3:-5}; DUR=${4:-5}; HOT=${HOT:-10000}; TWICE=${TWICE:-0}
W=/tmp/miss-flood; mkdir -p "$W"
if [ ! -e "$W/www/r/99/09999.bin" ]; then
  for d in $(seq -w 0 99); do mkdir -p "$W/www/r/$d"; done
  python3 - "$W/www" <<'PY'
import os, sys
for i in range(10000):
    with open(f"{sys.argv[1]}/r/{i % 100:02d}/{i:05d}.bin", "wb") as f:
        f.write(os.urandom(1024))
PY
fi
cat > "$W/random.lua" <<LUA
math.randomseed(os.time())
request = function()
  local i = math.random(0, $((HOT - 1)))
  return wrk.format("GET", string.format("/r/%02d/%05d.bin", i % 100, i))
end
LUA
cat > "$W/miss.lua" <<LUA
local n = 0
local seed = math.random(1, 1e9)
request = function()
  n = n + 1
  local k = n
  if $TWICE == 1 then k = math.floor((n + 1) / 2) end
  return wrk.format("GET", string.format("/r/%02d/nope-%d-%d.bin", k % 100, k, seed))
end
LUA
ticks() { local t=0 p; for p in $1 $(pgrep -P "$1"); do t=$((t + $(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null || echo 0))); done; echo $t; }
hz=$(getconf CLK_TCK)
for r in $(seq 1 "$ROUNDS"); do
  for b in old new; do
    bin=$OLD; [ $b = new ] && bin=$NEW
    "$bin" serve "$W/www" --listen 127.0.0.1:18777 --workers 2 --access-log off >"$W/$b.log" 2>&1 &
    pid=$!
    for i in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/18777) 2>/dev/null && break; sleep 0.1; done
    wrk -t1 -c10 -d1s http://127.0.0.1:18777/r/00/00000.bin >/dev/null 2>&1
    c0=$(ticks $pid)
    wrk -t1 -c10 -d"${DUR}s" -s "$W/miss.lua" http://127.0.0.1:18777/ >"$W/miss.out" 2>&1 &
    wp=$!
    wrk -t1 -c50 -d"${DUR}s" -s "$W/random.lua" http://127.0.0.1:18777/ >"$W/files.out" 2>&1
    wait $wp
    c1=$(ticks $pid)
    kill $pid; wait $pid 2>/dev/null
    nf=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$W/files.out")
    nm=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$W/miss.out")
    echo "$r $b files_rps=$((nf / DUR)) miss_rps=$((nm / DUR)) cpu_us_per_req=$(python3 -c "print(round(($c1-$c0)/$hz*1e6/max($nf+$nm,1),3))")"
  done
done
