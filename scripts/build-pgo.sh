#!/usr/bin/env bash
# The release binary, built with profile-guided optimization (PGO): the build for production and for
# every benchmark against the peers. It costs about three plain release builds' time (about 6 minutes
# on 2 cores) and takes 9-11% off the server CPU per small-file request (docs/BENCHMARKS.md, "Profile-
# guided optimization").
#
#   scripts/build-pgo.sh            writes target/release/sluice (PGO); prints its path
#
# Steps: (1) an instrumented build in target/pgo/gen; (2) that binary serves a training workload,
# driven by its own `sluice bench`: keep-alive and new-connection small files, 10,000 ... files at
# random, 100-byte files, pipelined heads, a big download and ranges of it, conditional requests (304),
# HEAD, misses (404), redirects and rewrites from an Apache rules file, a directory listing, gzip
# siblings, the access log, HTTPS when `openssl` is installed; every process writes its counts when
# it exits; (3) `llvm-profdata` (rustup's llvm-tools, installed if missing) merges them; (4) the
# release build with `-Cprofile-use` into the usual target/release.
#
# A later plain `cargo build --release` rebuilds without the profile (RUSTFLAGS differ): run this
# script again after changing the code. The profile is made here, from this tree, every time: a
# profile kept from older code would leave changed functions unoptimized without a word.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PGO=$ROOT/target/pgo
rm -rf "$PGO/profiles" "$PGO/train"
mkdir -p "$PGO/profiles" "$PGO/train/www/d" "$PGO/train/www/list"

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA=$sysroot/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$PROFDATA" ]; then
    echo "== rustup component add llvm-tools (llvm-profdata, the same LLVM as rustc's)"
    rustup component add llvm-tools >/dev/null
fi
[ -x "$PROFDATA" ] || { echo "build-pgo: $PROFDATA is missing (rustup component add llvm-tools)"; exit 1; }

echo "== (1) instrumented build: target/pgo/gen"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$PGO/profiles" CARGO_TARGET_DIR=$PGO/gen \
    cargo build --release -p sluice --quiet
BIN=$PGO/gen/release/sluice

echo "== (2) training"
T=$PGO/train
python3 - "$T/www" <<'EOF'
import os, sys, gzip
www = sys.argv[1]
def put(p, data):
    with open(os.path.join(www, p), "wb") as f:
        f.write(data)
put("1k.bin", os.urandom(1024))
put("100.bin", os.urandom(100))
put("big.bin", os.urandom(8 << 20))
put("index.html", b"<!doctype html><title>t</title><p>training</p>\n")
put("style.css", b"body{margin:0}\n" * 200)
put("style.css.gz", gzip.compress(b"body{margin:0}\n" * 200))
for i in range(10000):
    put(f"d/f{i}.bin", os.urandom(1024))
for i in range(300):
    put(f"list/file-{i:03}.iso", b"x" * (i * 37))
with open(os.path.join(os.path.dirname(www), "urls"), "w") as f:
    for i in range(10000):
        f.write(f"/d/f{i}.bin\n")
EOF
cat >"$T/rules.conf" <<'EOF'
RewriteEngine on
RewriteRule ^/old/(.*)$ /d/$1 [R=301,L]
RewriteCond %{HTTP_USER_AGENT} ^BadBot
RewriteRule ^ - [F]
RewriteRule ^/latest\.bin$ /1k.bin [L]
EOF
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
P=$(port)
TLS_ARGS=()
if command -v openssl >/dev/null 2>&1; then
    TP=$(port)
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
        -keyout "$T/key.pem" -out "$T/cert.pem" 2>/dev/null
    TLS_ARGS=(--tls-listen "127.0.0.1:$TP" --tls-cert "$T/cert.pem" --tls-key "$T/key.pem")
fi
"$BIN" serve "$T/www" --listen "127.0.0.1:$P" --workers 2 --allow-root --rules "$T/rules.conf" \
    --access-log "$T/access.log" "${TLS_ARGS[@]}" >"$T/server.log" 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$P") 2>/dev/null && break; sleep 0.1; done
U=http://127.0.0.1:$P
load() { "$BIN" bench "$@" -t 1 >>"$T/bench.log" 2>&1; }
load "$U/1k.bin" -c 50 -d 4s
load "$U/100.bin" -c 50 -d 2s
load "$U/" -c 50 -d 4s --urls "$T/urls"
load "$U/1k.bin" -c 10 -d 3s --no-keepalive
load "$U/1k.bin" -c 10 -d 2s --pipeline 8
load "$U/big.bin" -c 4 -d 2s
load "$U/big.bin" -c 20 -d 2s -H "Range: bytes=1000-70000"
load "$U/big.bin" -c 10 -d 1s -H "Range: bytes=0-99,5000-5099"
load "$U/1k.bin" -c 20 -d 2s -H "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT"
load "$U/1k.bin" -c 20 -d 1s -m HEAD
load "$U/style.css" -c 20 -d 1s -H "Accept-Encoding: gzip, br"
load "$U/missing/x.bin" -c 20 -d 1s
load "$U/old/f1.bin" -c 20 -d 2s
load "$U/latest.bin" -c 20 -d 1s
load "$U/1k.bin" -c 10 -d 1s -H "User-Agent: BadBot/1.0"
load "$U/list/" -c 10 -d 2s
load "$U/list/" -c 10 -d 1s -H "Accept-Encoding: gzip"
if ((${#TLS_ARGS[@]})) && command -v curl >/dev/null 2>&1; then
    for _ in $(seq 1 200); do
        curl -sk -o /dev/null -o /dev/null "https://127.0.0.1:$TP/1k.bin" "https://127.0.0.1:$TP/big.bin" || true
    done
fi
kill -TERM $SRV
wait $SRV || true
trap - EXIT
n=$(find "$PGO/profiles" -name '*.profraw' | wc -l)
[ "$n" -gt 0 ] || { echo "build-pgo: the training wrote no profile (see $T/server.log)"; exit 1; }

echo "== (3) llvm-profdata merge ($n files)"
"$PROFDATA" merge -o "$PGO/sluice.profdata" "$PGO/profiles"

echo "== (4) release build with the profile: target/release"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$PGO/sluice.profdata" cargo build --release -p sluice --quiet
OUT=$ROOT/target/release/sluice

# The binary answers as the plain one does.
P=$(port)
"$OUT" serve "$T/www" --listen "127.0.0.1:$P" --workers 1 --allow-root --access-log off >"$T/check.log" 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$P") 2>/dev/null && break; sleep 0.1; done
cmp <(python3 -c "import urllib.request,sys;sys.stdout.buffer.write(urllib.request.urlopen('http://127.0.0.1:$P/1k.bin').read())") \
    "$T/www/1k.bin" || { echo "build-pgo: the PGO binary answered wrong bytes"; exit 1; }
echo "$OUT"
