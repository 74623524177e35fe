/* ps/counters.c — kfac-ps's counter table (ps/counters.h). */
#include "ps/counters.h"

#include <string.h>

static const int s_slot[PS_CTR_COUNT] = {
#define PS_COUNTER_SLOT(id, ckpt) ckpt,
    PS_COUNTERS(PS_COUNTER_SLOT)
#undef PS_COUNTER_SLOT
};

uint64_t ps_counter(const ps_counters_t *c, ps_counter_t id) {
    return (unsigned)id < PS_CTR_COUNT ? c->v[id] : 0;
}

uint64_t ps_counters_bump(ps_counters_t *c, ps_counter_t id) {
    if ((unsigned)id >= PS_CTR_COUNT) return 0;
    return ++c->v[id];
}

void ps_counters_reject(ps_counters_t *c, msg_type_t type, msg_error_code_t code) {
    if ((unsigned)type >= MSG_TYPE_COUNT) type = MSG_NONE;
    c->rejected[type]++;
    if (code != MSG_ERR_NONE && (unsigned)code < MSG_ERR_COUNT) c->rejected_code[code]++;
}

uint64_t ps_counters_rejected(const ps_counters_t *c, msg_type_t type) {
    return (unsigned)type < MSG_TYPE_COUNT ? c->rejected[type] : 0;
}

uint64_t ps_counters_rejected_code(const ps_counters_t *c, msg_error_code_t code) {
    return (unsigned)code < MSG_ERR_COUNT ? c->rejected_code[code] : 0;
}

uint64_t ps_counters_rejected_total(const ps_counters_t *c) {
    uint64_t n = 0;
    for (int t = 0; t < MSG_TYPE_COUNT; t++) n += c->rejected[t];
    return n;
}

int ps_counters_of_slot(int slot) {
    for (int i = 0; i < PS_CTR_COUNT; i++)
        if (s_slot[i] >= 0 && s_slot[i] == slot) return i;
    return -1;
}

void ps_counters_restore(ps_counters_t *c, const uint64_t *slots, int n_slots, int rejected_grads_slot) {
    for (int i = 0; i < PS_CTR_COUNT; i++)
        if (s_slot[i] >= 0 && s_slot[i] < n_slots) c->v[i] = slots[s_slot[i]];
    if (rejected_grads_slot >= 0 && rejected_grads_slot < n_slots)
        c->rejected[MSG_GRAD_PUSH] = slots[rejected_grads_slot];
}

void ps_counters_save(const ps_counters_t *c, uint64_t *slots, int n_slots, int rejected_grads_slot) {
    if (n_slots > 0) memset(slots, 0, (size_t)n_slots * sizeof *slots);
    for (int i = 0; i < PS_CTR_COUNT; i++)
        if (s_slot[i] >= 0 && s_slot[i] < n_slots) slots[s_slot[i]] = c->v[i];
    if (rejected_grads_slot >= 0 && rejected_grads_slot < n_slots)
        slots[rejected_grads_slot] = c->rejected[MSG_GRAD_PUSH];
}
