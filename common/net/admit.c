/* common/net/admit.c — see admit.h. */
#include "common/net/admit.h"

#define S_NS_PER_MS 1000000ULL

void admit_init(admit_t *a, uint64_t wait_ms) {
    a->wait_ms = wait_ms;
    admit_reset(a);
}

void admit_reset(admit_t *a) {
    a->first_ns = 0;
    a->delay_ms = 0;
    a->n_refused = 0;
}

uint64_t admit_backoff_next_ms(uint64_t prev_ms) {
    if (prev_ms == 0) return ADMIT_BACKOFF_FIRST_MS;
    return prev_ms >= ADMIT_BACKOFF_MAX_MS / 2 ? ADMIT_BACKOFF_MAX_MS : 2 * prev_ms;
}

admit_decision_t admit_refused(admit_t *a, uint64_t now_ns, uint64_t *delay_ms, uint64_t *left_ms) {
    *delay_ms = 0;
    *left_ms = 0;
    a->n_refused++;
    if (a->wait_ms == 0) return ADMIT_DECISION_GIVE_UP;
    if (a->n_refused == 1 || now_ns < a->first_ns) a->first_ns = now_ns;
    uint64_t spent_ms = (now_ns - a->first_ns) / S_NS_PER_MS;
    if (spent_ms >= a->wait_ms) return ADMIT_DECISION_GIVE_UP;
    uint64_t left = a->wait_ms - spent_ms;
    a->delay_ms = admit_backoff_next_ms(a->delay_ms);
    *delay_ms = a->delay_ms < left ? a->delay_ms : left;
    *left_ms = left;
    return ADMIT_DECISION_RETRY;
}
