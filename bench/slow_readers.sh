#!/usr/bin/env bash
# The attack table's slow readers against one server, for a harness that measures something beside them
# (bench/user_instr.sh's DURING): 2 x 1,000 readers of a 16 MiB file at 16 B/s from 127.66.0.1 and
# 127.77.0.1, as `sluice bench run slow-read` starts them.
#
#   PORT=18000 WWW=/srv/www [N=2000] [SECS=120] [BIN=target/release/sluice] bash bench/slow_readers.sh
#
# WWW is the served directory: a 16 MiB file is written there first if it is missing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/target/release/sluice}; N=${N:-2000}; SECS=${SECS:-120}
[ -f "$WWW/f16m.bin" ] || { head -c 16777216 /dev/urandom > "$WWW/f16m.bin"; chmod a+r "$WWW/f16m.bin"; }
exec "$BIN" bench "http://127.0.0.1:$PORT/f16m.bin" --read-rate 16 -c "$N" --processes 2 \
  --timeout 600s --source-addrs 127.66.0.1,127.77.0.1 -d "${SECS}s"
