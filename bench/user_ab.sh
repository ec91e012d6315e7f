#!/usr/bin/env bash
# User and system CPU per request of two sluice builds, rounds alternated: the floor's user-space part in
# time, beside bench/user_instr.sh's exact instruction counts.
#
#   bash bench/user_ab.sh OLD_BIN NEW_BIN [ROUNDS] [SECONDS]      env: BODY=1024, RULES=FILE (a rules file
#                                                                  for both), ASK=/f.bin (the path asked), LOG=1 (access
#                                                                  logs on, to files in the work directory), HDR='Name: value'
#                                                                  (extra request headers, one per line)
#
# Both builds serve one small file (2 workers, access log off) on loopback; each round runs
# `wrk -t1 -c50` on the old, then the new, and reads utime and stime (clock ticks) of each server's
# processes from /proc. Printed: per build the medians of user µs, system µs and req/s per round with
# every round, and new ÷ old user time per round. A tick is 10 ms: keep rounds ≥ 5 s.
set -euo pipefail
OLD=$1; NEW=$2; R=${3:-10}; D=${4:-5}; BODY=${BODY:-1024}; ASK=${ASK:-/f.bin}
RARGS=(); [ -n "${RULES:-}" ] && RARGS=(--rules "$(realpath "$RULES")")
command -v wrk >/dev/null || apt-get install -y -qq wrk >/dev/null
W=$(mktemp -d /tmp/userab.XXXXXX); chmod 755 "$W"; PO=; PN=
trap '[ -n "$PO" ] && kill "$PO" 2>/dev/null; [ -n "$PN" ] && kill "$PN" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
mkdir -p "$W/www"; head -c "$BODY" /dev/urandom > "$W/www/f.bin"; chmod -R a+rX "$W"
lg() { if [ -n "${LOG:-}" ]; then echo "$W/access-$1.log"; else echo off; fi; }
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
up() { for i in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened"; exit 1; }
QO=$(port); "$OLD" serve "$W/www" --listen "127.0.0.1:$QO" --workers 2 --access-log "$(lg old)" "${RARGS[@]}" >"$W/old.log" 2>&1 & PO=$!
QN=$(port); "$NEW" serve "$W/www" --listen "127.0.0.1:$QN" --workers 2 --access-log "$(lg new)" "${RARGS[@]}" >"$W/new.log" 2>&1 & PN=$!
up "$QO"; up "$QN"
WH=(); while IFS= read -r h; do [ -n "$h" ] && WH+=(-H "$h"); done <<<"${HDR:-}"
ticks() { local u=0 s=0 a b p; for p in $1 $(pgrep -P "$1"); do read -r a b < <(awk '{print $14, $15}' "/proc/$p/stat"); u=$((u + a)); s=$((s + b)); done; echo "$u $s"; }
for r in $(seq 1 "$R"); do
  for v in old new; do
    if [ $v = old ]; then P=$PO; Q=$QO; else P=$PN; Q=$QN; fi
    read -r u0 s0 < <(ticks "$P")
    n=$(wrk -t1 -c50 -d"${D}s" "${WH[@]}" "http://127.0.0.1:$Q$ASK" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
    read -r u1 s1 < <(ticks "$P")
    echo "$v $n $((u1 - u0)) $((s1 - s0))"
  done
done >"$W/res"
python3 - "$W/res" "$(getconf CLK_TCK)" "$D" <<'PY'
import statistics as st, sys
hz, dur = int(sys.argv[2]), float(sys.argv[3])
d = {"old": [], "new": []}
for line in open(sys.argv[1]):
    v, n, u, s = line.split()
    n = max(int(n), 1)
    d[v].append((int(u) / hz / n * 1e6, int(s) / hz / n * 1e6, n / dur))
for v, rows in d.items():
    us, ss, rs = ([r[i] for r in rows] for i in range(3))
    print(f"{v}: user µs/req {st.median(us):.2f} ({' '.join(f'{x:.2f}' for x in us)}), "
          f"system {st.median(ss):.2f} ({' '.join(f'{x:.2f}' for x in ss)}), req/s {st.median(rs):.0f}")
pairs = [b[0] / a[0] for a, b in zip(d["old"], d["new"])]
print(f"new ÷ old user time per round: {' '.join(f'{x:.2f}' for x in pairs)} (median {st.median(pairs):.2f})")
PY
