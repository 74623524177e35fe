/* ps/member.c — see member.h. */
#include "ps/member.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A worker present, holding parameters and not marked stalled is a member
 * of a round it is there for when the round opens. */
static int s_may_be_member(const ps_peer_t *p) { return p->present && p->has_params && !p->mb.stalled; }

ps_push_t ps_member_check_push(const ps_peer_t *p, int running, long t, uint64_t version, int staleness) {
    if (!running) return PS_PUSH_RUN_OVER;
    if (version > (uint64_t)t) return PS_PUSH_AHEAD;
    if (version + (uint64_t)(staleness > 0 ? staleness : 0) < (uint64_t)t) return PS_PUSH_STALE;
    if (p->mb.pushed) return PS_PUSH_DUPLICATE;
    return PS_PUSH_ACCEPT;
}

void ps_member_open_round(ps_peers_t *peers) {
    for (int i = 0; i < peers->n; i++) {
        ps_peer_t *p = peers->v[i];
        if (p->role != MSG_ROLE_WORKER) continue;
        p->mb.member = s_may_be_member(p);
        p->mb.pushed = p->mb.skipped = 0;
        p->mb.committed = p->mb.has_stats = p->mb.has_state = 0;
    }
}

int ps_member_waiting(const ps_peers_t *peers, int *n_members) {
    int waiting = 0, members = 0;
    for (int i = 0; i < peers->n; i++) {
        const ps_peer_t *p = peers->v[i];
        if (p->role != MSG_ROLE_WORKER || !p->mb.member || !p->present) continue;
        members++;
        if (!p->mb.pushed && !p->mb.skipped) waiting++;
    }
    if (n_members) *n_members = members;
    return waiting;
}

int ps_member_all_refused(const ps_peers_t *peers) {
    int members = 0, refused = 0;
    for (int i = 0; i < peers->n; i++) {
        const ps_peer_t *p = peers->v[i];
        if (p->role != MSG_ROLE_WORKER || !p->mb.member || !p->present) continue;
        members++;
        if (p->mb.pushed || !p->mb.skipped) return 0;
        refused++;
    }
    return members > 0 && refused == members;
}

int ps_member_quorum_met(int n_grads, int quorum) { return quorum > 0 && n_grads >= quorum; }

ps_gate_t ps_member_gate(int n_members, int workers, uint64_t waited_ns, uint64_t timeout_ns) {
    if (n_members >= workers) return PS_GATE_OPEN;
    if (waited_ns >= timeout_ns) return PS_GATE_OPEN_TIMEOUT;
    return PS_GATE_CLOSED;
}

static int s_rank_cmp(const void *a, const void *b) {
    const ps_peer_t *x = *(ps_peer_t *const *)a, *y = *(ps_peer_t *const *)b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int ps_member_order(const ps_peers_t *peers, ps_peer_t **order, int cap) {
    int n = 0;
    for (int i = 0; i < peers->n && n < cap; i++) {
        ps_peer_t *p = peers->v[i];
        if (p->role == MSG_ROLE_WORKER && p->mb.pushed && !p->mb.committed) order[n++] = p;
    }
    qsort(order, (size_t)n, sizeof *order, s_rank_cmp);
    return n;
}

ps_leave_t ps_member_leave(ps_peer_t *p) {
    ps_leave_t l = {0, 0};
    if (p->role != MSG_ROLE_WORKER) return l;
    l.sum_now = p->mb.pushed && !p->mb.committed;
    l.blocking = p->mb.member && !p->mb.pushed && !p->mb.skipped;
    p->mb.member = 0;
    return l;
}

ps_rejoin_t ps_member_rejoin(const ps_peers_t *peers, msg_role_t role, uint32_t asked_id, uint64_t now_ns,
                             uint64_t live_ns, ps_peer_t **holder) {
    if (holder) *holder = NULL;
    if (role != MSG_ROLE_WORKER && role != MSG_ROLE_STATSD) return PS_REJOIN_NEW;
    ps_peer_t *h = NULL;
    for (int i = 0; i < peers->n && !h; i++)
        if (peers->v[i]->role == role && peers->v[i]->asked_id == asked_id) h = peers->v[i];
    if (holder) *holder = h;
    if (!h) return PS_REJOIN_NEW;
    int alive = h->present && now_ns >= h->last_ns && now_ns - h->last_ns < live_ns;
    return alive ? PS_REJOIN_DUPLICATE : PS_REJOIN_TAKEOVER;
}

int ps_member_takeover(ps_peer_t *p) {
    int dropped = 0;
    if (p->role == MSG_ROLE_WORKER && p->mb.pushed && !p->mb.committed) {
        p->mb.pushed = 0;
        p->mb.has_stats = p->mb.has_state = 0;
        dropped = 1;
    }
    p->mb.skipped = 0;
    p->mb.stalled = 0;
    p->mb.wait = PS_WAIT_NONE;
    return dropped;
}

void ps_norm_hist_add(ps_norm_hist_t *h, double norm) {
    h->v[h->next] = norm;
    h->next = (h->next + 1) % PS_NORM_HISTORY;
    if (h->n < PS_NORM_HISTORY) h->n++;
}

static int s_dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double ps_norm_hist_median(const ps_norm_hist_t *h) {
    if (h->n < PS_NORM_MIN_HISTORY) return 0.0;
    double v[PS_NORM_HISTORY];
    memcpy(v, h->v, (size_t)h->n * sizeof *v);
    qsort(v, (size_t)h->n, sizeof *v, s_dcmp);
    return h->n % 2 ? v[h->n / 2] : 0.5 * (v[h->n / 2 - 1] + v[h->n / 2]);
}

ps_grad_verdict_t ps_member_check_grad(uint64_t n_examples, int batch, double norm, const ps_norm_hist_t *h,
                                       double max_ratio) {
    if (batch > 0 && n_examples > (uint64_t)batch) return PS_GRAD_TOO_MANY_EXAMPLES;
    if (!isfinite(norm)) return PS_GRAD_NORM_OUTLIER;
    if (max_ratio <= 0) return PS_GRAD_OK;
    double med = ps_norm_hist_median(h);
    if (med <= 0) return PS_GRAD_OK;
    if (norm > max_ratio * med) return PS_GRAD_NORM_OUTLIER;
    return PS_GRAD_OK;
}

int ps_member_stalled(const ps_peers_t *peers, uint64_t now_ns, uint64_t round_open_ns, uint64_t stall_ns,
                      ps_peer_t **out, int cap) {
    if (stall_ns == 0) return 0;
    int n = 0;
    for (int i = 0; i < peers->n && n < cap; i++) {
        ps_peer_t *p = peers->v[i];
        if (p->role != MSG_ROLE_WORKER || !p->mb.member || !p->present || p->mb.pushed || p->mb.skipped) continue;
        uint64_t since = p->params_ns > round_open_ns ? p->params_ns : round_open_ns;
        if (now_ns > since && now_ns - since >= stall_ns) out[n++] = p;
    }
    return n;
}

void ps_member_drop_stalled(ps_peer_t *p) {
    ps_member_leave(p);
    p->mb.stalled = 1;
}

uint64_t ps_member_stall_ns(uint64_t cfg_ns, double median_push_ns, double factor, uint64_t min_ns) {
    if (cfg_ns == 0) return 0;
    if (!(factor > 0.0) || !(median_push_ns > 0.0)) return cfg_ns;
    double t = factor * median_push_ns;
    if (t < (double)min_ns) t = (double)min_ns;
    return t < (double)cfg_ns ? (uint64_t)t : cfg_ns;
}

/* ---- transitions ------------------------------------------------------------ */

void ps_member_wait_params(ps_peer_t *p, uint64_t min_version) {
    p->mb.wait = PS_WAIT_PARAMS;
    p->mb.min_version = min_version;
}

void ps_member_sent_params(ps_peer_t *p, uint64_t v, int stats_asked) {
    p->mb.has_sent = 1;
    p->mb.sent_version = v;
    p->mb.stats_asked = stats_asked != 0;
}

void ps_member_wait_job(ps_peer_t *p, uint32_t max_n, uint64_t seq) {
    p->mb.wait = PS_WAIT_JOB;
    p->mb.max_n = max_n;
    p->mb.wait_seq = seq;
}

void ps_member_answered(ps_peer_t *p) { p->mb.wait = PS_WAIT_NONE; }

void ps_member_join_first(ps_peer_t *p) {
    if (p->role == MSG_ROLE_WORKER) p->mb.member = 1;
}

void ps_member_enlist(ps_peers_t *peers) {
    for (int i = 0; i < peers->n; i++) {
        ps_peer_t *p = peers->v[i];
        if (p->role == MSG_ROLE_WORKER) p->mb.member = s_may_be_member(p);
    }
}

void ps_member_pushed(ps_peer_t *p, int has_stats, int has_state, uint64_t next_version) {
    p->mb.pushed = 1;
    p->mb.committed = 0;
    p->mb.stalled = 0;
    p->mb.has_stats = has_stats != 0;
    p->mb.has_state = has_state != 0;
    ps_member_wait_params(p, next_version);
}

void ps_member_pushes_again(ps_peer_t *p) { p->mb.stalled = 0; }

void ps_member_refused(ps_peer_t *p, uint64_t next_version) {
    p->mb.skipped = 1;
    ps_member_wait_params(p, next_version);
}

void ps_member_drop_held(ps_peer_t *p) {
    p->mb.pushed = 0;
    p->mb.has_stats = p->mb.has_state = 0;
}

void ps_member_summed(ps_peer_t *p) { p->mb.committed = 1; }

void ps_member_stats_folded(ps_peer_t *p) { p->mb.has_stats = 0; }
