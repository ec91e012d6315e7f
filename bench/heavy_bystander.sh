#!/bin/bash
# heavy-range against a bystander (issue 8): the infrequent client's p50/p99 (10 req/s, one
# connection, 15 s) on a sluice that carries 200 downloads of a 1 MiB file (S1) and on a
# second, identical sluice that carries none (S2), alone and beside them; two rounds.
# If S2's ratio is far above 2, the ratio is the machine's, not the server's ordering.
# Usage: bash bench/heavy_bystander.sh   (needs target/release/sluice; loopback only)
S=$(cd "$(dirname "$0")/.." && pwd)/target/release/sluice
W=$(mktemp -d)
ulimit -n 20000
mkdir -p /tmp/sluice-bench/www/sluice-bench
printf '[server]\nlisten = "127.0.0.1:18640"\nroot = "/tmp/sluice-bench/www"\nworkers = 2\n' > $W/s1.toml
[ -f /tmp/sluice-bench/www/sluice-bench/size-1048576.bin ] || head -c 1048576 /dev/urandom > /tmp/sluice-bench/www/sluice-bench/size-1048576.bin
[ -f /tmp/sluice-bench/www/sluice-bench/size-1024.bin ] || head -c 1024 /dev/urandom > /tmp/sluice-bench/www/sluice-bench/size-1024.bin
sed 's/18640/18641/' $W/s1.toml > $W/s2.toml
setsid $S serve --allow-root --config $W/s1.toml > /dev/null 2>&1 &
SP=$!
setsid $S serve --allow-root --config $W/s2.toml > /dev/null 2>&1 &
SP2=$!
sleep 1.5
probe() { $S bench http://127.0.0.1:$2/sluice-bench/size-1024.bin -c 1 -t 1 --rate 10 -d 15s --json | python3 -c "import json,sys;j=json.load(sys.stdin);print('$1', j['latency_us']['p50'], j['latency_us']['p99'], j['requests'])"; }
for r in 1 2; do
probe alone-S1 18640
probe alone-S2 18641
$S bench http://127.0.0.1:18640/sluice-bench/size-1048576.bin -c 200 -t 1 -d 34s --source-addrs 127.88.0.1 --json > $W/heavy.json &
H=$!
sleep 2
probe heavy-S1-loaded 18640
probe heavy-S2-bystander 18641
wait $H
python3 -c "import json;j=json.load(open('$W/heavy.json'));print('heavy req/s (1 MiB each)', round(j['requests_per_s']))"
done
kill $SP $SP2
rm -rf $W
