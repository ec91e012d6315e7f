/* What filling the page cache costs the thread that asks (issue 11 part 3; the disk
 * pool in crates/sluice-server/src/disk.rs; docs/BENCHMARKS.md, 2026-11-25).
 * Evicts FILE, then reads it back in CHUNK_KIB pieces one of three ways, and prints
 * MiB/s and the calling thread's CPU (user + system) per MiB:
 *   0: WILLNEED advice on the chunk, then a one-byte pread every 64 KiB (the disk
 *      pool's job);
 *   1: sendfile of the chunk to /dev/null (the kernel's readahead; nothing copied;
 *      tried as the pool's job and reverted, see BENCHMARKS.md);
 *   2: pread of the chunk into a buffer (a copy).
 * The file is evicted again at the end.
 *   cc -O2 -o /tmp/populate_cost bench/populate_cost.c
 *   /tmp/populate_cost FILE MODE CHUNK_KIB      e.g. a 512 MiB file, mode 1, 1024 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu(void) {
    struct rusage r;
    getrusage(RUSAGE_THREAD, &r);
    return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s FILE MODE(0|1|2) CHUNK_KIB\n", argv[0]);
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    int nul = open("/dev/null", O_WRONLY);
    int mode = atoi(argv[2]);
    long chunk = atol(argv[3]) << 10;
    if (fd < 0 || nul < 0 || chunk <= 0) {
        perror("open");
        return 1;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    char *buf = malloc(chunk), b;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    double t0 = now(), c0 = cpu();
    for (off_t o = 0; o < size; o += chunk) {
        if (mode == 0) {
            posix_fadvise(fd, o, chunk, POSIX_FADV_WILLNEED);
            for (off_t a = o; a < o + chunk && a < size; a += 65536)
                if (pread(fd, &b, 1, a) < 0) return 1;
        } else if (mode == 1) {
            off_t at = o;
            for (long left = chunk; left > 0;) {
                ssize_t n = sendfile(nul, fd, &at, left);
                if (n <= 0) break;
                left -= n;
            }
        } else if (pread(fd, buf, chunk, o) < 0) {
            return 1;
        }
    }
    double t1 = now(), c1 = cpu(), mib = size / 1048576.0;
    printf("mode %d, %ld KiB chunks: %.0f MiB/s, %.0f us of this thread's CPU per MiB\n",
           mode, chunk >> 10, mib / (t1 - t0), (c1 - c0) * 1e6 / mib);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    return 0;
}
