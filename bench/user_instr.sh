#!/usr/bin/env bash
# User-space instructions per request, counted exactly (valgrind's callgrind), for a keep-alive small-file
# request: the part of the floor ratio that is sluice's own code, measured without this machine's noise.
#
#   bash bench/user_instr.sh [BIN] [SECONDS]        env: N=20000 (measure N requests of one sequential
#                                                   keep-alive client, `ab -k -c1`, instead of wrk for SECONDS:
#                                                   the same batching in every run, for comparing two builds),
#                                                   BODY=1024 (file size), HDR='Name: value' (extra
#                                                   request header, repeatable with a newline), TOP=30, KEEP=FILE (keep the callgrind dump),
#                                                   RULES=FILE (a rules file for the site), ASK=/f.bin (the path asked, e.g. a redirect's), CONF=FILE (a config file), LOG=FILE (the access log; off by default),
#                                                   DURING='CMD' (run CMD in the background from before the counted window to its end, with
#                                                   PORT and WWW (the served directory) in its environment: an attack beside the measured
#                                                   requests, e.g. bench/slow_readers.sh), SETTLE=5 (seconds CMD runs before the count starts)
#
# One worker in one process runs under callgrind. 2,000 requests warm it up (the open-file cache, the
# buffers; with wrk, 3 s of wrk too), the counters are zeroed, then `wrk -t1 -c10` (its request: `GET /f.bin HTTP/1.1` + `Host`)
# runs for SECONDS and the counters are dumped. Printed: instructions per request (all threads of the
# process; the worker's are ~98%) and the functions with the most instructions per request, inclusive.
# Time per request is not comparable under valgrind; instruction counts are, build against build
# (same compiler, same request), to well under 1%.
set -euo pipefail
BIN=${1:-$(pwd)/target/release/sluice}; DUR=${2:-4}; BODY=${BODY:-1024}; TOP=${TOP:-30}; ASK=${ASK:-/f.bin}
RARGS=(); [ -n "${RULES:-}" ] && RARGS=(--rules "$(realpath "$RULES")"); [ -n "${CONF:-}" ] && RARGS+=(--config "$(realpath "$CONF")")
for c in valgrind wrk ab; do command -v $c >/dev/null || apt-get install -y -qq valgrind wrk apache2-utils >/dev/null; done
W=$(mktemp -d /tmp/uinstr.XXXXXX); chmod 755 "$W"; VG=; BG=
trap '[ -n "$BG" ] && kill -- -"$BG" 2>/dev/null; [ -n "$VG" ] && kill "$VG" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
mkdir -p "$W/www"; head -c "$BODY" /dev/urandom > "$W/www/f.bin"; chmod -R a+rX "$W"
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
(cd "$W" && exec valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$W/cg.%p" "$BIN" serve "$W/www" \
  --listen "127.0.0.1:$PORT" --workers 1 --processes 1 --access-log "${LOG:-off}" --allow-root "${RARGS[@]}" >"$W/vg.log" 2>&1) &
VG=$!
for i in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
WH=(); while IFS= read -r h; do [ -n "$h" ] && WH+=(-H "$h"); done <<<"${HDR:-}"
ab -q -k -n 2000 -c 10 "http://127.0.0.1:$PORT$ASK" >/dev/null
# Under wrk's load, 3 s more first: a worker past 4,096 requests a second samples its top lists
# from its next once-a-second publish on, so the counted window is all in the steady state (with
# only the 2,000 above, the window's first second counted every request, ~50 instructions a
# request more over 6 s).
[ -z "${N:-}" ] && wrk -t1 -c10 -d3s "${WH[@]}" "http://127.0.0.1:$PORT$ASK" >/dev/null
if [ -n "${DURING:-}" ]; then
  PORT=$PORT WWW="$W/www" setsid bash -c "$DURING" >"$W/during.log" 2>&1 &
  BG=$!; sleep "${SETTLE:-5}"
fi
callgrind_control -i on "$VG" >/dev/null
if [ -n "${N:-}" ]; then
  AH=(); for h in "${WH[@]}"; do [ "$h" = -H ] || AH+=(-H "$h"); done
  ab -q -k -n "$N" -c 1 "${AH[@]}" "http://127.0.0.1:$PORT$ASK" >/dev/null
else
  out=$(wrk -t1 -c10 -d"${DUR}s" "${WH[@]}" "http://127.0.0.1:$PORT$ASK")
fi
callgrind_control -i off "$VG" >/dev/null; callgrind_control -d "$VG" >/dev/null
if [ -n "$BG" ]; then kill -- -"$BG" 2>/dev/null || true; BG=; fi
if [ -n "${N:-}" ]; then n=$N; else n=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' <<<"$out"); fi
f=$(ls -S "$W"/cg.* | head -1); [ -n "${KEEP:-}" ] && cp "$f" "$KEEP"
total=$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
echo "requests: $n   user-space instructions per request: $((total / n))"
for mode in yes no; do callgrind_annotate --auto=no --inclusive=$mode "$f" 2>/dev/null | sed "s/^/$mode /"; done | python3 -c '
import collections, re, sys
n, top = int(sys.argv[1]), int(sys.argv[2])
inc, own = collections.Counter(), collections.Counter()
for line in sys.stdin:
    m = re.match(r"(yes|no) +([0-9,]+) \([ 0-9.%]*\) +(.*)", line)
    if not m or "PROGRAM TOTALS" in line:
        continue
    name = re.sub(r"^[^ ]*\.(rs|S|c):", "", re.sub(r" \[.*$", "", m.group(3)))
    c = int(m.group(2).replace(",", ""))
    if m.group(1) == "yes":
        inc[name] = max(inc[name], c)
    else:
        own[name] += c
print("per request: self (inlined code counted where it lands), inclusive (the largest of its file:function rows)")
for name, c in own.most_common(top):
    print(f"{c / n:6.0f} {inc[name] / n:7.0f}  {name[:120]}")
' "$n" "$TOP"
