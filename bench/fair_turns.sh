#!/usr/bin/env bash
# A light client's 4 MiB download (from 127.99.0.1) while wrk -c200 pulls 1 MiB files (from 127.0.0.1).
# Builds A and B alternate per round. Prints per-round medians of 15 downloads, in ms.
# Shows the send turns' fairness: with turns by address range the light client's
# response shares turns with one range, not with 200 responses.
#   bench/fair_turns.sh OLD_BINARY NEW_BINARY [ROUNDS]
set -u
A=$1; B=$2; ROUNDS=${3:-3}
W=$(mktemp -d /tmp/fair.XXXXXX); trap 'rm -rf "$W"' EXIT
mkdir -p "$W/www"; head -c 1048576 /dev/urandom > "$W/www/m1.bin"; head -c 4194304 /dev/urandom > "$W/www/m4.bin"
chmod -R a+rX "$W"
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
for r in $(seq 1 $ROUNDS); do
 for s in A B; do
  bin=$A; [ $s = B ] && bin=$B
  q=$(port); "$bin" serve "$W/www" --listen 127.0.0.1:$q --workers 2 >/dev/null 2>&1 & p=$!
  sleep 0.5
  alone=$(for i in $(seq 15); do curl -s -o /dev/null --interface 127.99.0.1 -w '%{time_total}\n' http://127.0.0.1:$q/m4.bin; done | sort -n | sed -n 8p)
  wrk -t1 -c200 -d12s http://127.0.0.1:$q/m1.bin > "$W"/wrk.$s.$r 2>&1 & w=$!
  sleep 2
  heavy=$(for i in $(seq 15); do curl -s -o /dev/null --interface 127.99.0.1 -w '%{time_total}\n' http://127.0.0.1:$q/m4.bin; sleep 0.2; done | sort -n | sed -n 8p)
  wait $w; kill $p; wait $p 2>/dev/null
  mbs=$(awk '/Transfer\/sec/ {print $2}' "$W"/wrk.$s.$r)
  echo "round $r $s alone_ms=$(python3 -c "print(round($alone*1000,2))") heavy_ms=$(python3 -c "print(round($heavy*1000,2))") wrk=$mbs"
 done
done
