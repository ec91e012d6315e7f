#!/usr/bin/env bash
# The release binary, built with profile-guided optimization (PGO): the build for production and
# for benchmarks against the peers. It takes about as long as three plain release builds (5-6
# minutes on 2 cores) and takes about 11% (9-19% in ten runs) off the server CPU per keep-alive
# small-file request (docs/BENCHMARKS.md, "Profile-guided optimization").
#
#   scripts/build-pgo.sh            writes target/release/sluice (PGO); prints its path
#
# Steps: (1) an instrumented build in target/pgo/gen; (2) that binary serves a training mix driven
# by wrk and ab (installed if missing); it writes its counts when it exits; (3) `llvm-profdata`
# (rustup's llvm-tools, installed if missing) merges them; (4) the release build with `-Cprofile-use`
# into the usual target/release; (5) the binary is checked to serve a file's bytes.
#
# A later plain `cargo build --release` rebuilds without the profile (RUSTFLAGS differ): run this
# script again after changing the code. The profile is made here, from this tree, every time: a
# profile kept from older code would leave changed functions unoptimized without a word. Paths the
# mix leaves out (HTTPS, gzip siblings, conditional answers) are compiled as cold code: correct, their
# speed against a plain build not measured one by one.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PGO=$ROOT/target/pgo
rm -rf "$PGO/profiles" "$PGO/train" "$PGO"/*.profdata
mkdir -p "$PGO/profiles" "$PGO/train/www/d"

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
for c in wrk ab; do
    command -v $c >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk apache2-utils >/dev/null
done
T=$PGO/train
python3 - "$T/www" <<'PY'
import os, sys
www = sys.argv[1]
def put(p, data):
    with open(os.path.join(www, p), "wb") as f:
        f.write(data)
put("1k.bin", os.urandom(1024))
put("100.bin", os.urandom(100))
put("big.bin", os.urandom(3_000_000))
for i in range(2000):
    put(f"d/f{i}.bin", os.urandom(1024))
PY
cat >"$T/rules.conf" <<'RULES'
RewriteEngine on
RewriteRule ^/old/(.*)$ /d/$1 [R=301,L]
RULES
cat >"$T/random.lua" <<'LUA'
request = function() return wrk.format("GET", "/d/f" .. math.random(0, 1999) .. ".bin") end
LUA
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
P=$(port)
"$BIN" serve "$T/www" --listen "127.0.0.1:$P" --workers 2 --allow-root --rules "$T/rules.conf" \
    --access-log "$T/access.log" >"$T/server.log" 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$P") 2>/dev/null && break; sleep 0.1; done
U=http://127.0.0.1:$P
# The mix (keep-alive small files, 100-byte files, 2,000 files at random, redirects, a
# big file and ranges of it, a 2,000-entry listing, new connections, misses) is the one
# measured in docs/BENCHMARKS.md ("Profile-guided optimization"); change it and measure
# again (bench/floor_builds.sh). The load is wrk and ab, not the instrumented binary's
# own `sluice bench`: the profiles made with that client gained less, and less steadily.
{
    wrk -t1 -c50 -d4s "$U/1k.bin"
    wrk -t1 -c50 -d3s "$U/100.bin"
    wrk -t1 -c50 -d4s -s "$T/random.lua" "$U/"
    wrk -t1 -c20 -d2s "$U/old/f5.bin"
    wrk -t1 -c8 -d2s "$U/big.bin"
    wrk -t1 -c20 -d2s -H "Range: bytes=100-2000" "$U/big.bin"
    wrk -t1 -c20 -d2s "$U/d/"
    ab -q -n 20000 -c 20 "$U/1k.bin"
    ab -q -n 3000 -c 10 "$U/missing"
} >"$T/load.log" 2>&1
kill -TERM $SRV
wait $SRV || true
trap - EXIT
n=$(find "$PGO/profiles" -name '*.profraw' | wc -l)
[ "$n" -gt 0 ] || { echo "build-pgo: the training wrote no profile (see $T/server.log)"; exit 1; }

echo "== (3) llvm-profdata merge ($n files)"
"$PROFDATA" merge -o "$PGO/merged.profdata" "$PGO/profiles"
# Named by its contents: cargo does not look inside the file RUSTFLAGS names, so a new
# profile under an old name would leave every dependency built with the old one.
PROFILE=$PGO/sluice-$(sha256sum "$PGO/merged.profdata" | cut -c1-16).profdata
mv "$PGO/merged.profdata" "$PROFILE"

echo "== (4) release build with the profile: target/release"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$PROFILE" cargo build --release -p sluice --quiet
OUT=$ROOT/target/release/sluice

echo "== (5) the binary serves"
P=$(port)
"$OUT" serve "$T/www" --listen "127.0.0.1:$P" --workers 1 --allow-root --access-log off >"$T/check.log" 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$P") 2>/dev/null && break; sleep 0.1; done
cmp <(python3 -c "import urllib.request,sys;sys.stdout.buffer.write(urllib.request.urlopen('http://127.0.0.1:$P/1k.bin').read())") \
    "$T/www/1k.bin" || { echo "build-pgo: the PGO binary answered wrong bytes"; exit 1; }
echo "$OUT"
