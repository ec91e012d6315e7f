# Interleaved rounds of `wrk` against several servers, with server CPU per request from /proc; sourced by
# bench/ab_sluice.sh, bench/ab_many.sh, bench/floor_uring.sh, bench/floor_builds.sh and bench/build_paths.sh. The caller fills
# P[NAME]=port and PID[NAME]=pid, and SCHEME[NAME]=https for a server wrk should reach over TLS.
#   rounds ROUNDS SECONDS CONNS PATH NAME...   one line per server per round: NAME req/s CPU-µs-per-request
#                                               user-µs-per-request (WRK_SCRIPT=FILE: wrk's Lua script picks the paths)
#   summarize FILE BASE                         medians, every round, each median ÷ BASE's, and the median user
#                                               time as a share of system time (the floor target's "user space")
# Callers that reach no server over TLS need not declare SCHEME (under `set -u` an undeclared array's
# subscript would be read as arithmetic on the server's name).
declare -p SCHEME >/dev/null 2>&1 || declare -gA SCHEME
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
up() { for i in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return; sleep 0.1; done; echo "port $1 never opened"; exit 1; }
# A server's CPU ticks, user + system and user alone: the process and its children (a master's serving
# processes).
ticks() {
  local t=0 u=0 p a b
  for p in $1 $(cat /proc/$1/task/*/children 2>/dev/null); do
    read -r a b < <(awk '{print $14+$15, $14}' /proc/$p/stat 2>/dev/null || echo 0 0)
    t=$((t + a)); u=$((u + b))
  done
  echo "$t $u"
}
rounds() {
  local n_rounds=$1 dur=$2 conns=$3 path=$4 hz r s c0 c1 out n rps; shift 4
  hz=$(getconf CLK_TCK)
  for r in $(seq 1 "$n_rounds"); do
    for s in "$@"; do
      read -r c0 u0 < <(ticks "${PID[$s]}"); out=$(wrk -t1 -c"$conns" -d"${dur}s" ${WRK_SCRIPT:+-s "$WRK_SCRIPT"} "${SCHEME[$s]:-http}://127.0.0.1:${P[$s]}$path" 2>&1); read -r c1 u1 < <(ticks "${PID[$s]}")
      n=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' <<<"$out"); rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
      echo "$s $rps $(python3 -c "n=max(${n:-0},1); print(($c1-$c0)/$hz*1e6/n, ($u1-$u0)/$hz*1e6/n)")"
    done
  done
}
summarize() {
  python3 - "$1" "$2" <<'PY'
import sys, statistics, collections
d = collections.defaultdict(lambda: ([], [], []))
for line in open(sys.argv[1]):
    s, r, c, u = line.split(); d[s][0].append(float(r)); d[s][1].append(float(c)); d[s][2].append(float(u))
base = statistics.median(d[sys.argv[2]][1])
print(f"{'server':12} {'req/s':>9} {'CPU us/req':>11} {'/ ' + sys.argv[2]:>9} {'user/sys':>9}   (medians of {len(d[sys.argv[2]][0])} rounds)")
for s, (r, c, u) in d.items():
    share = statistics.median(x / max(y - x, 1e-9) for x, y in zip(u, c))
    print(f"{s:12} {statistics.median(r):9.0f} {statistics.median(c):11.3f} {statistics.median(c)/base:9.3f} {share:9.1%}   rounds: {' '.join(f'{x:.3f}' for x in c)}")
PY
}
