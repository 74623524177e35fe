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
