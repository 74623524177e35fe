/* common/base/ratelimit.c — see ratelimit.h. */
#include "common/base/ratelimit.h"

int ratelimit_ok(ratelimit_t *r, uint64_t now_ns, uint64_t interval_ms, uint64_t *suppressed) {
    if (r->last_ns != 0 && now_ns - r->last_ns < interval_ms * 1000000ULL) {
        r->suppressed++;
        return 0;
    }
    if (suppressed) *suppressed = r->suppressed;
    r->suppressed = 0;
    r->last_ns = now_ns ? now_ns : 1;
    return 1;
}

int ratelimit_burst_ok(ratelimit_t *r, uint64_t now_ns, uint64_t window_ms, uint64_t burst, uint64_t *suppressed) {
    if (r->window_ns == 0 || now_ns - r->window_ns >= window_ms * 1000000ULL) {
        r->window_ns = now_ns ? now_ns : 1;
        r->n_window = 0;
    }
    if (r->n_window >= burst) {
        r->suppressed++;
        return 0;
    }
    r->n_window++;
    if (suppressed) *suppressed = r->suppressed;
    r->suppressed = 0;
    r->last_ns = now_ns ? now_ns : 1;
    return 1;
}
