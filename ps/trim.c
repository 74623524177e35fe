/* ps/trim.c — see trim.h. */
#include "ps/trim.h"

#include <string.h>

void ps_trim_init(ps_trim_t *t) { memset(t, 0, sizeof *t); }

void ps_trim_received(ps_trim_t *t, uint64_t now_ns, size_t n_bytes) {
    if (n_bytes < PS_TRIM_LARGE_BYTES) return;
    t->last_large_ns = now_ns;
    t->bytes_since += n_bytes;
}

int ps_trim_due(const ps_trim_t *t, uint64_t now_ns, uint64_t idle_ns, int training) {
    return !training && t->bytes_since > 0 && now_ns >= t->last_large_ns && now_ns - t->last_large_ns >= idle_ns;
}

void ps_trim_done(ps_trim_t *t) {
    t->bytes_since = 0;
    t->n_trims++;
}
