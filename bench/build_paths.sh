#!/usr/bin/env bash
# Two sluice builds on the paths scripts/build-pgo.sh's training leaves out, so that a profile-guided
# build is checked not to have made them slower: a 304 (If-Modified-Since), a precompressed sibling
# (Accept-Encoding: gzip) and a 1 KiB file over HTTPS keep-alive. wrk -t1 -c50, 2 workers each, access
# logs off, rounds interleaved, server CPU per request from /proc (bench/rounds.sh).
#   bash bench/build_paths.sh NAME=BINARY NAME=BINARY [ROUNDS] [SECONDS]
# e.g. bash bench/build_paths.sh plain=/tmp/sluice-plain pgo=target/release/sluice 7 5
set -uo pipefail
source "$(dirname "$0")/rounds.sh"
[ $# -ge 2 ] && [[ $1 == *=* && $2 == *=* ]] || { echo "usage: $0 NAME=BINARY NAME=BINARY [ROUNDS] [SECONDS]"; exit 1; }
A=${1%%=*}; B=${2%%=*}; BIN_A=${1#*=}; BIN_B=${2#*=}; ROUNDS=${3:-7}; DUR=${4:-5}
W=$(mktemp -d /tmp/paths.XXXXXX); chmod 755 "$W"; declare -A P PID SCHEME
trap 'for p in "${PID[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$W"' EXIT
mkdir -p "$W/www"
head -c 1024 /dev/urandom > "$W/www/f.bin"
python3 -c 'print("\n".join(f"line {i}: a mirror serves text too" for i in range(120)))' > "$W/www/f.txt"
gzip -k "$W/www/f.txt"
openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -days 2 \
    -keyout "$W/key.pem" -out "$W/cert.pem" 2>/dev/null
chmod -R a+rX "$W"
printf 'wrk.headers["If-Modified-Since"] = "Fri, 01 Jan 2100 00:00:00 GMT"\n' > "$W/304.lua"
printf 'wrk.headers["Accept-Encoding"] = "gzip"\n' > "$W/gzip.lua"
for n in "$A" "$B"; do
    bin=$BIN_A; [ "$n" = "$B" ] && bin=$BIN_B
    P[$n]=$(port); P[$n-tls]=$(port); SCHEME[$n-tls]=https
    "$bin" serve "$W/www" --listen "127.0.0.1:${P[$n]}" --workers 2 --access-log off \
        --tls-listen "127.0.0.1:${P[$n-tls]}" --tls-cert "$W/cert.pem" --tls-key "$W/key.pem" \
        >"$W/$n.log" 2>&1 &
    PID[$n]=$!; PID[$n-tls]=$!
    up "${P[$n]}"; up "${P[$n-tls]}"
done
# The answers are what each test means to measure, checked once before any round.
curl -s -o /dev/null -w '%{http_code}' -H 'If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT' \
    "http://127.0.0.1:${P[$A]}/f.bin" | grep -q 304 || { echo "no 304"; exit 1; }
curl -s -D - -o /dev/null -H 'Accept-Encoding: gzip' "http://127.0.0.1:${P[$A]}/f.txt" \
    | grep -qi '^content-encoding: gzip' || { echo "no gzip sibling"; exit 1; }
[ "$(curl -sk -o /dev/null -w "%{http_code}" "https://127.0.0.1:${P[$A-tls]}/f.bin")" = 200 ] || { echo "no HTTPS"; exit 1; }
echo "== 304 (If-Modified-Since)"
WRK_SCRIPT=$W/304.lua rounds "$ROUNDS" "$DUR" 50 /f.bin "$A" "$B" >"$W/r304"; summarize "$W/r304" "$A"
echo "== precompressed sibling (Accept-Encoding: gzip)"
WRK_SCRIPT=$W/gzip.lua rounds "$ROUNDS" "$DUR" 50 /f.txt "$A" "$B" >"$W/rgz"; summarize "$W/rgz" "$A"
echo "== 1 KiB over HTTPS, keep-alive"
rounds "$ROUNDS" "$DUR" 50 /f.bin "$A-tls" "$B-tls" >"$W/rtls"; summarize "$W/rtls" "$A-tls"
