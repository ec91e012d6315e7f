#!/bin/bash
# Server CPU µs per request on compare.py's random10k tree (10,000 small files asked for at
# random: the full path, every request a new one to the kept answers) with a browser's request
# head, for several sluice builds or configurations side by side, rounds alternated.
#   bash bench/browser10k_ab.sh ROUNDS NAME=BIN:TOML_LINES [NAME=BIN:TOML_LINES ...]
# TOML_LINES may be empty; '\n' separates lines, e.g. 'off=target/release/sluice:[files]\nprecompressed = false'.
# PLAIN=1 sends wrk's own short head (compare.py's random10k) instead of the browser's.
# Needs the tree and the script that `python3 bench/compare.py --tests random10k` writes into
# /tmp/sluice-bench. Printed: per NAME the median µs per request and every round.
R=$1; shift
H=(-H "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
   -H "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
   -H "Accept-Encoding: gzip, deflate, br, zstd" -H "Accept-Language: en-US,en;q=0.9"
   -H "Referer: http://mirror.example/r/" -H "Sec-Fetch-Mode: navigate" -H "Sec-Fetch-Site: same-origin"
   -H "Upgrade-Insecure-Requests: 1")
[ -n "${PLAIN:-}" ] && H=()
[ -f /tmp/sluice-bench/random.lua ] || { echo "run python3 bench/compare.py --tests random10k --rounds 1 first"; exit 1; }
declare -A PID PORT
trap 'for n in "${!PID[@]}"; do kill "${PID[$n]}" 2>/dev/null; done' EXIT
i=0
for spec in "$@"; do
  n=${spec%%=*}; rest=${spec#*=}; bin=${rest%%:*}; conf=${rest#*:}; port=$((18600 + i)); i=$((i + 1))
  printf '[server]\nlisten = "127.0.0.1:%s"\nroot = "/tmp/sluice-bench/www"\nworkers = 2\n%b\n' $port "$conf" > /tmp/sluice-bench/b10k-$n.toml
  "$bin" serve --allow-root --config /tmp/sluice-bench/b10k-$n.toml --access-log off >/tmp/sluice-bench/b10k-$n.log 2>&1 &
  PID[$n]=$!; PORT[$n]=$port
done
sleep 1.5
ticks() { local t=0 p; for p in $1 $(pgrep -P "$1"); do t=$((t + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $t; }
for r in $(seq 1 "$R"); do
  for n in "${!PID[@]}"; do
    t0=$(ticks "${PID[$n]}")
    c=$(wrk -t1 -c50 -d5s -s /tmp/sluice-bench/random.lua "${H[@]}" "http://127.0.0.1:${PORT[$n]}" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
    t1=$(ticks "${PID[$n]}")
    echo "$n $c $((t1 - t0))"
  done
done | python3 -c '
import sys, statistics as st, os
hz = os.sysconf("SC_CLK_TCK"); d = {}
for l in sys.stdin:
    n, c, t = l.split(); d.setdefault(n, []).append(int(t) / hz / int(c) * 1e6)
for n, v in d.items():
    print(f"{n}: median µs/req {st.median(v):.2f} (" + " ".join(f"{x:.2f}" for x in v) + ")")'
