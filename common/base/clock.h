/* common/base/clock.h — the one monotonic clock of the tree.
 *
 * CLOCK_MONOTONIC: never jumps with the wall clock, so it measures durations,
 * timeouts and rates. Thread-safe (clock_gettime is). Wall-clock timestamps
 * for logs come from log.c, not from here. */
#ifndef KFAC_BASE_CLOCK_H
#define KFAC_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds since an arbitrary fixed point (boot); never 0 in practice. */
static inline uint64_t clock_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The same instant in milliseconds and in seconds, as doubles. */
static inline double clock_now_ms(void) { return (double)clock_now_ns() * 1e-6; }
static inline double clock_now_s(void) { return (double)clock_now_ns() * 1e-9; }

#endif
