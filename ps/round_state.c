/* ps/round_state.c — see round_state.h. */
#include "ps/round_int.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/kfac/kfac_linalg.h"
#include "common/nn/nn_par.h"
#include "ps/member.h"
#include "ps/ingest.h"

/* Most workers summed in one round (the PS's peer table holds 1024). */
#define S_MAX_ORDER 1024

int ps_round_state_init(ps_round_t *r, const net_t *net, int with_stats) {
    memset(r, 0, sizeof *r);
    r->pver[0] = r->pver[1] = -1;
    size_t np = net->n_params ? net->n_params : 1, ns = net->n_state ? net->n_state : 1;
    r->grad_acc = calloc(np, sizeof(float));
    r->acc_zero = 1;
    r->state_acc = calloc(ns, sizeof(float));
    if (!r->grad_acc || !r->state_acc || kfac_lowrank_set_init(&r->lowrank, net) < 0 ||
        (with_stats && !(r->stats = kfac_stats_new(net)))) {
        ps_round_state_release(r);
        return -ENOMEM;
    }
    return 0;
}

void ps_round_state_release(ps_round_t *r) {
    if (!r) return;
    ps_round_state_drop_params(r);
    free(r->grad_acc);
    kfac_lowrank_set_release(&r->lowrank);
    free(r->state_acc);
    kfac_stats_free(&r->stats);
    memset(r, 0, sizeof *r);
}

void ps_round_state_drop_params(ps_round_t *r) {
    for (int i = 0; i < 2; i++) {
        zloop_buf_free(&r->pbuf[i]);
        r->plen[i] = 0;
        r->pver[i] = -1;
    }
}

/* grad_acc's zeros made real, before a sum that only adds into it. */
static void s_acc_touch(ps_round_t *r, const net_t *net) {
    if (!r->acc_zero) return;
    memset(r->grad_acc, 0, net->n_params * sizeof(float));
    r->acc_zero = 0;
}

void ps_round_state_clear(ps_round_t *r, const net_t *net) {
    r->acc_zero = 1; /* no pass: the mean's pass writes every float (s_sum_part) */
    kfac_lowrank_set_clear(&r->lowrank);
    if (net->n_state) memset(r->state_acc, 0, net->n_state * sizeof(float));
    r->acc_n = r->acc_loss = r->state_n = r->acc_wn = 0.0;
    r->acc_correct = 0;
    r->n_grads = 0;
    r->grad_age_sum = 0.0;
    r->grad_age_max = 0;
    r->folded = r->marked = 0;
    if (r->stats) ps_ingest_stats_clear(r->stats);
    r->stats_have = 0;
}

void ps_round_state_open(ps_round_t *r, const net_t *net, uint64_t now_ns) {
    r->open_ns = now_ns;
    r->norm_rejects = 0;
    ps_round_state_clear(r, net);
}

void ps_round_state_start(ps_round_t *r, uint64_t now_ns) {
    r->last_step_ns = now_ns;
    r->open_ns = now_ns;
}

void ps_round_state_restore(ps_round_t *r, long t, uint64_t steps_done, int folded) {
    r->t = t;
    r->steps_done = steps_done;
    r->folded = r->marked = folded;
}

void ps_round_state_advance(ps_round_t *r, uint64_t now_ns) {
    r->t++;
    r->steps_done++;
    r->steps_run++;
    r->last_step_ns = now_ns;
}

void ps_round_state_grad_in(ps_round_t *r, uint64_t version) {
    r->n_grads++;
    long age = r->t - (long)version; /* how many versions it lags the round ([ps] gradient_staleness) */
    r->grad_age_sum += (double)age;
    if (age > r->grad_age_max) r->grad_age_max = age;
}

void ps_round_state_grad_out(ps_round_t *r) {
    r->n_grads--;
}

void ps_round_state_norm_reject(ps_round_t *r) {
    r->norm_rejects++;
}

void ps_round_state_worker_in(ps_round_t *r, uint64_t now_ns) {
    if (!r->first_worker_ns) r->first_worker_ns = now_ns;
}

void ps_round_state_set_folded(ps_round_t *r) {
    r->folded = 1;
}

void ps_round_state_set_marked(ps_round_t *r) {
    r->marked = 1;
}

int ps_round_state_step_failed(ps_round_t *r) {
    return ++r->consecutive_failures;
}

void ps_round_state_step_ok(ps_round_t *r) {
    r->consecutive_failures = 0;
}

int ps_round_state_step_time(ps_round_t *r, double math_ms, double slow_ms) {
    r->step_ms_sum += math_ms;
    if (math_ms > r->step_ms_max) r->step_ms_max = math_ms;
    return math_ms > slow_ms && !r->warned_slow_step++;
}

void ps_round_state_open_timing(ps_round_t *r, double open_ms, int eval_busy) {
    r->open_ms = open_ms;
    r->curv_ms = 0.0;
    r->eval_busy = eval_busy;
}

void ps_round_state_add_curv_ms(ps_round_t *r, double ms) {
    r->curv_ms += ms;
}

ps_round_verdict_t ps_round_state_decide(const ps_round_t *r, const ps_round_view_t *v) {
    ps_round_verdict_t out = {PS_ROUND_WAIT, PS_GATE_OPEN, 0};
    if (!v->running) return out;
    int complete = r->n_grads > 0 && v->n_waiting == 0;
    if (complete && v->first_step && !r->gate_open) {
        uint64_t waited = r->first_worker_ns && v->now_ns > r->first_worker_ns ? v->now_ns - r->first_worker_ns : 0;
        out.gate = ps_member_gate(v->n_members, v->workers, waited, v->timeout_ns);
        if (out.gate == PS_GATE_CLOSED) return out; /* a complete round waits for the gate only */
        out.gate_opens = 1;
    }
    /* [ps] quorum: after the gate, a round steps once that many gradients
     * are in; the members still computing push into a later round. */
    if (!complete && r->gate_open && ps_member_quorum_met(r->n_grads, v->quorum)) complete = 1;
    if (!complete) {
        if (r->n_grads == 0 && v->all_refused) out.action = PS_ROUND_RECOVER;
        return out;
    }
    if (v->curvature) {
        if (!r->folded) out.action = PS_ROUND_FOLD;
        else if (!r->marked) out.action = PS_ROUND_MARK;
        else out.action = v->bounded && !v->bound_ok ? PS_ROUND_WAIT_INVERSES : PS_ROUND_STEP;
        return out;
    }
    out.action = PS_ROUND_STEP;
    return out;
}

void ps_round_state_set_age_weight(ps_round_t *r, kfac_age_weight_t rule) {
    r->age_rule = rule;
}

double ps_round_grad_weight_mean(const ps_round_t *r) {
    return r->acc_n > 0.0 ? r->acc_wn / r->acc_n : 1.0;
}

void ps_round_state_open_gate(ps_round_t *r) {
    r->gate_open = 1;
}

/* A held push's loss and counts into the sums; with_grad: its gradient
 * too (dense: its saxpy into grad_acc, unless dense_later, when the
 * caller adds it in s_sum_dense); with_state: its batch-norm state too. */
static void s_commit(ps_round_t *r, const net_t *net, ps_peer_t *p, int with_grad, int dense_later, int with_state) {
    if (!p->mb.pushed || p->mb.committed || !p->grad) return;
    /* [ps] gradient_age_weight: the weight of its age (1 without the rule) */
    const double aw = kfac_age_weight(r->age_rule, r->t - (long)p->grad_version);
    const float w = (float)((double)p->n_examples * aw);
    /* grad_acc += n_examples * age weight * grad  (n_params floats) */
    if (with_grad && !dense_later) {
        s_acc_touch(r, net);
        cblas_saxpy((int)net->n_params, w, p->grad, 1, r->grad_acc, 1);
    }
    /* factored layers: their rows, D scaled by n_examples, after those summed before */
    for (int i = 0; with_grad && i < p->lowrank.n; i++) {
        const kfac_lowrank_t *e = &p->lowrank.v[i];
        kfac_lowrank_t *dst = e->n_rows > 0 ? kfac_lowrank_set_find(&r->lowrank, e->layer) : NULL;
        if (dst && kfac_lowrank_append(dst, e->D, e->X, e->n_rows, w) < 0) {
            /* no memory for the rows: this worker's share goes in densely */
            kfac_lowrank_t tmp = *e;
            float *W = malloc(sizeof(float) * (size_t)e->n_out * e->n_in);
            if (W) {
                kfac_lowrank_densify(&tmp, W, 0.0f);
                s_acc_touch(r, net);
                cblas_saxpy(e->n_out * e->n_in, w, W, 1, r->grad_acc + e->w_off, 1);
                free(W);
            }
        }
    }
    r->acc_n += (double)p->n_examples;
    r->acc_wn += (double)p->n_examples * aw;
    r->acc_loss += (double)p->n_examples * p->loss;
    r->acc_correct += p->n_correct;
    if (with_state && p->mb.has_state) {
        /* state_acc += n_examples * state  (n_state floats) */
        cblas_saxpy((int)net->n_state, (float)p->n_examples, p->state, 1, r->state_acc, 1);
        r->state_n += (double)p->n_examples;
    }
    ps_member_summed(p);
}

/* The mean's dense pass: acc[i] <- (acc[i] + w[0] g[0][i] + ... + w[k-1]
 * g[k-1][i]) * scale, added in that order (rank order) for every i: one
 * pass over the parameters, split over par's threads, the same sums on
 * any number of them; with zero (acc reads as zeros) the first gradient
 * is written instead of added, so no pass clears acc. Each block of the
 * result is checked finite while it is in the cache: first gets the
 * smallest index that is not (n if none). */
typedef struct {
    float *acc;
    size_t n;
    const float *const *g;
    const float *w;
    int k;
    float scale;
    int zero; /* acc reads as zeros: the first gradient is written, not added */
    atomic_size_t first;
} sum_job_t;

static void s_sum_part(void *arg, int part, int n_parts) {
    const sum_job_t *j = arg;
    /* contiguous ranges of whole cache lines (16 floats) */
    const size_t lines = (j->n + 15) / 16;
    size_t lo = lines * (size_t)part / (size_t)n_parts * 16, hi = lines * (size_t)(part + 1) / (size_t)n_parts * 16;
    if (hi > j->n) hi = j->n;
    if (lo > hi) lo = hi;
    /* blocks of 2048 floats: the block of acc stays in the L1 cache while
     * every gradient is added into it */
    for (size_t b = lo; b < hi; b += 2048) {
        const size_t e = b + 2048 < hi ? b + 2048 : hi;
        float *acc = j->acc;
        int q = 0;
        if (j->zero && j->k > 0) {
            const float *g = j->g[0], w = j->w[0];
            for (size_t i = b; i < e; i++) acc[i] = w * g[i];
            q = 1;
        } else if (j->zero) {
            memset(acc + b, 0, (e - b) * sizeof(float));
        }
        for (; q < j->k; q++) {
            const float *g = j->g[q], w = j->w[q];
            for (size_t i = b; i < e; i++) acc[i] += w * g[i];
        }
        for (size_t i = b; i < e; i++) acc[i] *= j->scale;
        if (kfac_linalg_all_finite(acc + b, e - b)) continue;
        size_t i = b;
        while (isfinite(acc[i])) i++;
        size_t cur = atomic_load(&j->first);
        while (i < cur && !atomic_compare_exchange_weak(&j->first, &cur, i)) {
        }
    }
}

static size_t s_sum_dense(float *acc, int zero, size_t n, const float *const *g, const float *w, int k, float scale,
                          nn_par_t *par) {
    sum_job_t j = {acc, n, g, w, k, scale, zero, n};
    /* small models stay on the calling thread (kfac_step.c's STEP_PAR_MIN) */
    if (n >= (1 << 18) && nn_par_threads(par) > 1) nn_par_run(par, s_sum_part, &j);
    else s_sum_part(&j, 0, 1);
    return atomic_load(&j.first);
}

void ps_round_state_commit_grad(ps_round_t *r, const net_t *net, ps_peer_t *p) { s_commit(r, net, p, 1, 0, 1); }

void ps_round_state_commit_stats(ps_round_t *r, ps_peer_t *p) {
    if (!p->mb.has_stats || !r->stats) return;
    if (kfac_stats_merge(r->stats, p->stats) == 0) r->stats_have = 1;
    ps_member_stats_folded(p);
}

int ps_round_state_merge_stats(ps_round_t *r, const ps_peers_t *peers) {
    ps_peer_t *order[S_MAX_ORDER];
    int n_order = ps_member_order(peers, order, S_MAX_ORDER);
    for (int i = 0; i < n_order; i++) ps_round_state_commit_stats(r, order[i]);
    return r->stats_have;
}

kfac_stats_t *ps_round_state_swap_stats(ps_round_t *r, kfac_stats_t *fresh) {
    kfac_stats_t *merged = r->stats;
    r->stats = fresh;
    if (fresh) ps_ingest_stats_clear(fresh);
    return merged;
}

size_t ps_round_state_average(ps_round_t *r, const net_t *net, const ps_peers_t *peers, nn_par_t *par) {
    ps_peer_t *order[S_MAX_ORDER];
    const float *g[S_MAX_ORDER];
    float w[S_MAX_ORDER];
    int n_order = ps_member_order(peers, order, S_MAX_ORDER), k = 0;
    /* the bookkeeping (rows of factored layers, loss, state) in rank
     * order; the dense gradients in one pass after it */
    for (int i = 0; i < n_order; i++) {
        ps_peer_t *p = order[i];
        if (!p->mb.pushed || p->mb.committed || !p->grad) continue;
        g[k] = p->grad;
        /* its examples times the weight of its age ([ps] gradient_age_weight; 1 without the rule), as in s_commit */
        w[k++] = (float)((double)p->n_examples * kfac_age_weight(r->age_rule, r->t - (long)p->grad_version));
        s_commit(r, net, p, 1, 1, 1);
    }
    /* g = (grad_acc + sum_i n_examples_i grad_i) / sum(n_examples): the
     * example-weighted mean gradient */
    const size_t bad = s_sum_dense(r->grad_acc, r->acc_zero, net->n_params, g, w, k, (float)(1.0 / r->acc_n), par);
    r->acc_zero = 0;
    for (int i = 0; i < r->lowrank.n; i++) kfac_lowrank_scale(&r->lowrank.v[i], (float)(1.0 / r->acc_n));
    return bad;
}

float ps_round_robust_value(float *v, int k, int trim) {
    /* insertion sort: k is the number of workers in a round, small */
    for (int i = 1; i < k; i++) {
        float x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
    if (trim < 0) return k % 2 ? v[k / 2] : 0.5f * (v[k / 2 - 1] + v[k / 2]);
    double sum = 0.0;
    for (int i = trim; i < k - trim; i++) sum += v[i];
    return (float)(sum / (double)(k - 2 * trim));
}

/* The robust rule over coordinates [lo, hi) of k arrays (rank order). */
typedef struct {
    float *out;
    size_t n;
    const float *const *x;
    int k, trim;
} robust_job_t;

static void s_robust_part(void *arg, int part, int n_parts) {
    const robust_job_t *j = arg;
    const size_t lines = (j->n + 15) / 16;
    size_t lo = lines * (size_t)part / (size_t)n_parts * 16, hi = lines * (size_t)(part + 1) / (size_t)n_parts * 16;
    if (hi > j->n) hi = j->n;
    if (lo > hi) lo = hi;
    float v[S_MAX_ORDER];
    for (size_t i = lo; i < hi; i++) {
        for (int q = 0; q < j->k; q++) v[q] = j->x[q][i];
        j->out[i] = ps_round_robust_value(v, j->k, j->trim);
    }
}

/* out[i] = the rule over x[0..k)[i] for every i < n, split over par's
 * threads (each coordinate on its own: the same result on any number). */
static void s_robust_all(float *out, size_t n, const float *const *x, int k, int trim, nn_par_t *par) {
    robust_job_t j = {out, n, x, k, trim};
    if (n >= (1 << 14) && nn_par_threads(par) > 1) nn_par_run(par, s_robust_part, &j);
    else s_robust_part(&j, 0, 1);
}

int ps_round_state_robust(ps_round_t *r, const net_t *net, const ps_peers_t *peers, int trim, nn_par_t *par) {
    ps_peer_t *order[S_MAX_ORDER];
    const float *x[S_MAX_ORDER];
    int k = ps_member_order(peers, order, S_MAX_ORDER);
    int need = trim < 0 ? 3 : 2 * trim + 1;
    /* Gradients summed before the step (a worker that left) are in grad_acc
     * already: the robust rule cannot see them, so the round is averaged. */
    if (k < need || r->acc_n > 0) {
        ps_round_state_average(r, net, peers, par);
        return 0;
    }
    for (int j = 0; j < k; j++) x[j] = order[j]->grad;
    s_robust_all(r->grad_acc, net->n_params, x, k, trim, par); /* writes every float */
    r->acc_zero = 0;
    /* The batch-norm state by the same rule, over the pushes that carry it
     * (a mean would let one member's finite but huge values through). */
    int ks = 0;
    for (int j = 0; j < k; j++)
        if (order[j]->mb.has_state) x[ks++] = order[j]->state;
    const int state_robust = net->n_state && ks >= need;
    if (state_robust) {
        s_robust_all(r->state_acc, net->n_state, x, ks, trim, NULL);
        r->state_n = 1.0; /* state = state_acc */
    }
    for (int j = 0; j < k; j++) s_commit(r, net, order[j], 0, 0, !state_robust);
    return k;
}

ps_round_t *ps_round_new(const net_t *net, int with_stats) {
    ps_round_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    if (ps_round_state_init(r, net, with_stats) < 0) {
        free(r);
        return NULL;
    }
    return r;
}

void ps_round_free(ps_round_t **r_p) {
    if (!r_p || !*r_p) return;
    ps_round_state_release(*r_p);
    free(*r_p);
    *r_p = NULL;
}

long ps_round_version(const ps_round_t *r) { return r->t; }
uint64_t ps_round_steps_done(const ps_round_t *r) { return r->steps_done; }
uint64_t ps_round_steps_run(const ps_round_t *r) { return r->steps_run; }
uint64_t ps_round_last_step_ns(const ps_round_t *r) { return r->last_step_ns; }
int ps_round_n_grads(const ps_round_t *r) { return r->n_grads; }
int ps_round_gate_open(const ps_round_t *r) { return r->gate_open; }
int ps_round_folded(const ps_round_t *r) { return r->folded; }

void ps_round_step_ms(const ps_round_t *r, double *sum, double *max) {
    *sum = r->step_ms_sum;
    *max = r->step_ms_max;
}
