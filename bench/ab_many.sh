#!/usr/bin/env bash
# Several sluice builds or configs side by side: server CPU µs per request (from /proc) and req/s
# under `wrk -t1 -c CONNS`, rounds interleaved, medians ÷ the first server's.
#   bench/ab_many.sh SERVERS_FILE ROUNDS SECONDS CONNS
# SERVERS_FILE: one server per line, NAME|ENV|BINARY|SERVE ARGS, e.g.
#   sendfile|X=1|target/release/sluice|
#   auto|X=1|target/release/sluice|--config /tmp/auto.toml
# SIZE (default 1 MiB) is the served file's size.
set -uo pipefail
source "$(dirname "$0")/rounds.sh"
SERVERS=$1; ROUNDS=${2:-3}; DUR=${3:-4}; CONNS=${4:-8}; SIZE=${SIZE:-1048576}
declare -A P; declare -A PID; names=()
W=$(mktemp -d /tmp/abm.XXXXXX)
trap 'for n in "${names[@]}"; do kill "${PID[$n]}" 2>/dev/null; done; rm -rf "$W"' EXIT
mkdir -p "$W/www"; head -c "$SIZE" /dev/urandom > "$W/www/f.bin"; chmod -R a+rX "$W"
while IFS='|' read -r name envs bin args; do
  [ -z "$name" ] && continue
  P[$name]=$(port)
  # shellcheck disable=SC2086  # ENV and ARGS are word lists
  env $envs "$bin" serve "$W/www" --listen "127.0.0.1:${P[$name]}" --workers 2 $args >/dev/null 2>&1 &
  PID[$name]=$!; names+=("$name")
done < "$SERVERS"
for n in "${names[@]}"; do up "${P[$n]}"; done
rounds "$ROUNDS" "$DUR" "$CONNS" /f.bin "${names[@]}" > "$W/res"
summarize "$W/res" "${names[0]}"
