/* Busy-loop on one CPU for SECONDS and report every gap of more than 2 ms between two
 * readings of the monotonic clock: time this thread did not run although it never
 * slept. bench/vm_stalls.sh runs it beside disk reads to show when the machine
 * itself stops (a virtual machine whose host caps its CPU time).
 *   cc -O2 stall_gap.c -o stall_gap && taskset -c 0 ./stall_gap 3 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    double dur = argc > 1 ? atof(argv[1]) : 3, start = now(), prev = start, t, total = 0;
    int n = 0;
    while ((t = now()) - start < dur) {
        if (t - prev > 0.002) {
            if (n < 8) printf("  gap %.1f ms at %.3f s\n", (t - prev) * 1e3, t - start);
            n++;
            total += t - prev;
        }
        prev = t;
    }
    printf("  %d gaps over 2 ms, %.0f ms of %.0f ms\n", n, total * 1e3, dur * 1e3);
    return 0;
}
