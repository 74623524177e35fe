/* bench/bench_memcpy.c — the machine's own bound for moving a step's bytes:
 * memcpy of --bytes from one buffer to another in this one process, the
 * figure bench/fast_members.sh sets beside the bytes that pass through
 * kfac-ps per step. Prints figures; never passes or fails on time.
 *
 *   build/bench/bench_memcpy [--bytes N] [--reps R]
 *
 * Defaults: 52,394,144 bytes (the wide model's 3,274,634 floats as 4-byte
 * floats, a Params and a gradient for each of 2 members: 4 x 13.1 MB), 20
 * timed copies after 3 untimed ones. Both buffers are written once before the
 * first copy (no page faults are timed); the copy goes back and forth
 * between them. Prints the median and the best in ms, and the median's
 * GB/s (1e9 bytes), then one line a script reads:
 *   memcpy bytes=N median_ms=... best_ms=... gb_s=...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"

static double s_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int s_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    size_t n_bytes = 52394144;
    int reps = 20;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc) {
            n_bytes = (size_t)strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_memcpy [--bytes N] [--reps R]\n");
            return 2;
        }
    }
    if (n_bytes == 0 || reps < 1 || reps > 100000) {
        fprintf(stderr, "bench_memcpy: --bytes must be > 0 and --reps 1..100000\n");
        return 2;
    }
    char *a = malloc(n_bytes), *b = malloc(n_bytes);
    double *ms = malloc((size_t)reps * sizeof *ms);
    if (!a || !b || !ms) {
        fprintf(stderr, "bench_memcpy: out of memory for 2 x %zu bytes\n", n_bytes);
        free(a), free(b), free(ms);
        return 1;
    }
    memset(a, 1, n_bytes); /* every page touched before the timing */
    memset(b, 2, n_bytes);
    bench_print_machine();
    bench_print_load("", "before");
    for (int r = -3; r < reps; r++) {
        char *src = (r & 1) ? b : a, *dst = (r & 1) ? a : b;
        double t0 = s_now_ms();
        memcpy(dst, src, n_bytes);
        double t = s_now_ms() - t0;
        if (r >= 0) ms[r] = t;
    }
    volatile char sink = a[n_bytes / 2] ^ b[n_bytes / 3]; /* the copies are used */
    (void)sink;
    qsort(ms, (size_t)reps, sizeof *ms, s_cmp);
    const double med = ms[reps / 2], best = ms[0];
    printf("memcpy of %zu bytes: median %.3f ms, best %.3f ms over %d copies (%.1f GB/s at the median)\n", n_bytes, med,
           best, reps, (double)n_bytes / (med * 1e6));
    bench_print_load("", "after");
    printf("memcpy bytes=%zu median_ms=%.4f best_ms=%.4f gb_s=%.2f\n", n_bytes, med, best,
           (double)n_bytes / (med * 1e6));
    free(a), free(b), free(ms);
    return 0;
}
