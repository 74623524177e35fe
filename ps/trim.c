/* ps/trim.c — see trim.h. */
#include "ps/trim.h"

#include <string.h>

void ps_trim_init(ps_trim_t *t) { memset(t, 0, sizeof *t); }

void ps_trim_received(ps_trim_t *t, uint64_t now_ns, size_t n_bytes) {
    if (n_bytes < PS_TRIM_LARGE_BYTES) return;
    t->last_large_ns = now_ns;
    t->bytes_since += n_bytes;
}

void ps_trim_stepped(ps_trim_t *t, uint64_t now_ns) {
    if (t->last_step_ns && now_ns >= t->last_step_ns) {
        uint64_t p = now_ns - t->last_step_ns, decayed = t->period_ns - t->period_ns / 10;
        t->period_ns = p > decayed ? p : decayed;
    }
    t->last_step_ns = now_ns;
}

uint64_t ps_trim_quiet_ns(const ps_trim_t *t, uint64_t idle_ns) {
    uint64_t two = t->period_ns > UINT64_MAX / 2 ? UINT64_MAX : 2 * t->period_ns;
    return two > idle_ns ? two : idle_ns;
}

int ps_trim_due(const ps_trim_t *t, uint64_t now_ns, uint64_t idle_ns) {
    return t->bytes_since > 0 && now_ns >= t->last_large_ns &&
           now_ns - t->last_large_ns >= ps_trim_quiet_ns(t, idle_ns);
}

void ps_trim_done(ps_trim_t *t) {
    t->bytes_since = 0;
    t->n_trims++;
}
