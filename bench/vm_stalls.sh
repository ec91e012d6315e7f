#!/usr/bin/env bash
# Does this machine stop running its CPUs while its disk is read? On a virtual machine
# whose host counts the disk's emulation against the guest's CPU cap, both vCPUs stall
# for tens of milliseconds every 100 ms once both are busy and the disk is read: any
# server's latency then includes those stalls, whatever it does (docs/BENCHMARKS.md,
# "The machine stops while its disk is read"). Four cases, 3 s each: a busy loop on
# CPU 0 alone; beside O_DIRECT reads on CPU 1; busy loops on both CPUs; both beside
# the reads. Reads FILE (default: the cold-files experiment's first file).
# RATE=BYTES_PER_S reads through a cgroup v1 blkio throttle (as cold_compare.py
# --slow-disk does), removed at the end.
#   [RATE=209715200] bash bench/vm_stalls.sh [FILE]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
FILE=${1:-/tmp/sluice-bench/www/sluice-bench/cold-0.bin}
[ -f "$FILE" ] || { echo "no $FILE: give a file of a few hundred MiB on the disk"; exit 1; }
G=/sys/fs/cgroup/blkio/sluice-vm-stalls
W=$(mktemp -d /tmp/stalls.XXXXXX); trap 'rm -rf "$W"; [ -d "$G" ] && rmdir "$G"' EXIT
cc -O2 "$HERE/stall_gap.c" -o "$W/gap" || exit 1
if [ -n "${RATE:-}" ]; then
    dev=$(stat -c '%Hd:%Ld' "$FILE" 2>/dev/null || mountpoint -d "$(df --output=target "$FILE" | tail -1)")
    mkdir -p "$G" && echo "$dev $RATE" > "$G/blkio.throttle.read_bps_device" || exit 1
fi
reads() {
    ( if [ -n "${RATE:-}" ]; then echo "$BASHPID" > "$G/cgroup.procs"; fi
      exec timeout 3 taskset -c 1 dd if="$FILE" of=/dev/null bs=1M iflag=direct 2>/dev/null )
}
echo "CPU 0 busy, nothing else:"; taskset -c 0 "$W/gap" 3 | tail -1
echo "CPU 0 busy, disk reads on CPU 1:"; reads & taskset -c 0 "$W/gap" 3 | tail -1; wait
echo "both CPUs busy, no disk reads (CPU 0, then CPU 1):"
taskset -c 1 "$W/gap" 3 >"$W/g1" & taskset -c 0 "$W/gap" 3 | tail -1; wait; tail -1 "$W/g1"
echo "both CPUs busy, disk reads on CPU 1 (CPU 0, then CPU 1):"
taskset -c 1 "$W/gap" 3 >"$W/g1" & reads & taskset -c 0 "$W/gap" 3; wait; cat "$W/g1"
