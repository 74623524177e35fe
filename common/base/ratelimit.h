/* common/base/ratelimit.h — a rate limiter for log lines.
 *
 *     static ratelimit_t rl;             // zero-initialized: the first line passes
 *     uint64_t held;
 *     if (ratelimit_ok(&rl, clock_now_ns(), 1000, &held))
 *         log_warn("refused ...: %s (%" PRIu64 " more not logged)", why, held);
 *
 * Not thread-safe: one limiter per thread (each daemon logs refusals from its
 * loop thread). */
#ifndef KFAC_BASE_RATELIMIT_H
#define KFAC_BASE_RATELIMIT_H

#include <stdint.h>

typedef struct ratelimit {
    uint64_t last_ns;    /* when the last line passed; 0: never */
    uint64_t suppressed; /* lines held back since then */
    uint64_t window_ns;  /* ratelimit_burst_ok: when the current window opened */
    uint64_t n_window;   /* ratelimit_burst_ok: lines passed in it */
} ratelimit_t;

/* Returns 1 when interval_ms have passed since the last line that passed (or
 * none has), and then sets *suppressed (may be NULL) to the number held back
 * since it and resets that count; else counts this line and returns 0.
 * now_ns: a clock_now_ns() reading (passed in, so tests can drive it). */
int ratelimit_ok(ratelimit_t *r, uint64_t now_ns, uint64_t interval_ms, uint64_t *suppressed);

/* The same for lines that come in bursts (clients joining): up to burst
 * lines pass in each window of window_ms (a window opens with the first
 * line after the last one closed); more are counted, and the next line
 * that passes gets their number in *suppressed (may be NULL). */
int ratelimit_burst_ok(ratelimit_t *r, uint64_t now_ns, uint64_t window_ms, uint64_t burst, uint64_t *suppressed);

#endif
