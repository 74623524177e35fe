/* tests/ps/test_ps_round_state.c — the parameter server's round state
 * (ps/round_state.c), driven without sockets:
 *   - the step's gradient is the example-weighted mean of the held
 *     gradients: against a double-precision sum (relative tolerance 1e-5),
 *     and bit for bit the same whatever order the workers joined the peer
 *     table in (the sum is taken in rank order);
 *   - a worker that leaves mid-round is summed once, when it leaves;
 *   - the batch-norm state is averaged over the pushes that carried one;
 *   - a worker's statistics are merged once, weighted by their samples;
 *   - factored fc weight gradients (D^T X rows) are concatenated in rank
 *     order with the same weights: densified, the example-weighted mean
 *     (relative 1e-5 against a double sum), bit for bit whatever the join
 *     order; clear empties them;
 *   - the mean and the median split over a pool of threads give the same
 *     floats as one thread, and the oracle's values;
 *   - clear empties the round, release frees it and is idempotent.
 * Workers, gradients and weights are random from a fresh seed printed on
 * failure. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#include "common/nn/nn_par.h"
#include "ps/peers.h"
#include "ps/round_int.h"
#include "tests/lib/seed.h"

#define TRIALS 40
#define MAX_W 9

/* A small model with batch-norm state: fc -> batchnorm -> fc. */
static const char *s_model =
    "input 1x4x4\n"
    "fc name=f1 out=6\n"
    "batchnorm name=bn1\n"
    "relu\n"
    "fc name=f2 out=3\n"
    "softmax_xent\n";

static net_t *s_net(void) {
    char err[256];
    net_t *net = net_parse(s_model, "test", 4, err, sizeof err);
    ck_assert_msg(net != NULL, "%s", err);
    ck_assert_uint_gt(net->n_state, 0);
    return net;
}

/* One worker's push, to be put into any number of peer tables. */
typedef struct s_push {
    int rank;
    uint32_t id;
    uint64_t n_examples, n_correct;
    double loss;
    int has_state;
    float *grad, *state;
} s_push_t;

static ps_peer_t *s_add(ps_peers_t *t, const net_t *net, const s_push_t *w) {
    zloop_peer_t r;
    memset(&r, 0, sizeof r);
    r.len = (size_t)snprintf((char *)r.id, sizeof r.id, "w-%u", w->id);
    ps_peer_t *p = ps_peers_add(t, &r);
    ck_assert_ptr_nonnull(p);
    p->role = MSG_ROLE_WORKER;
    p->id = w->id;
    p->rank = w->rank;
    p->present = p->has_params = p->mb.member = p->mb.pushed = 1;
    p->grad = malloc(net->n_params * sizeof(float));
    p->state = malloc(net->n_state * sizeof(float));
    ck_assert(p->grad && p->state);
    memcpy(p->grad, w->grad, net->n_params * sizeof(float));
    memcpy(p->state, w->state, net->n_state * sizeof(float));
    p->mb.has_state = w->has_state;
    p->loss = w->loss;
    p->n_examples = w->n_examples;
    p->n_correct = w->n_correct;
    return p;
}

static void s_random_pushes(rng_t *r, const net_t *net, s_push_t *w, int n) {
    for (int k = 0; k < n; k++) {
        w[k].rank = (int)rng_below(r, 4); /* ties are broken by id */
        w[k].id = (uint32_t)k + 1;
        w[k].n_examples = 1 + rng_below(r, 64);
        w[k].n_correct = rng_below(r, (uint32_t)w[k].n_examples + 1);
        w[k].loss = 3.0 * rng_uniform(r);
        w[k].has_state = rng_below(r, 3) != 0;
        w[k].grad = malloc(net->n_params * sizeof(float));
        w[k].state = malloc(net->n_state * sizeof(float));
        ck_assert(w[k].grad && w[k].state);
        for (size_t i = 0; i < net->n_params; i++) w[k].grad[i] = (float)rng_normal(r) * (1.0f + (float)k);
        for (size_t i = 0; i < net->n_state; i++) w[k].state[i] = (float)rng_normal(r);
    }
}

static void s_free_pushes(s_push_t *w, int n) {
    for (int k = 0; k < n; k++) {
        free(w[k].grad);
        free(w[k].state);
    }
}

START_TEST(test_ps_round_state_average_weighted_and_order_free) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = s_net();
    for (int trial = 0; trial < TRIALS; trial++) {
        int n = 1 + (int)rng_below(&r, MAX_W);
        s_push_t w[MAX_W];
        s_random_pushes(&r, net, w, n);
        /* The same pushes in two tables, joined in two different orders. */
        int perm[MAX_W];
        for (int k = 0; k < n; k++) perm[k] = k;
        for (int k = n - 1; k > 0; k--) {
            int j = (int)rng_below(&r, (uint32_t)k + 1), tmp = perm[k];
            perm[k] = perm[j];
            perm[j] = tmp;
        }
        ps_peers_t ta, tb;
        ck_assert_int_eq(ps_peers_init(&ta, MAX_W), 0);
        ck_assert_int_eq(ps_peers_init(&tb, MAX_W), 0);
        for (int k = 0; k < n; k++) s_add(&ta, net, &w[k]);
        for (int k = 0; k < n; k++) s_add(&tb, net, &w[perm[k]]);
        ps_round_t ra, rb;
        ck_assert_int_eq(ps_round_state_init(&ra, net, 0), 0);
        ck_assert_int_eq(ps_round_state_init(&rb, net, 0), 0);
        ps_round_state_average(&ra, net, &ta, NULL);
        ps_round_state_average(&rb, net, &tb, NULL);
        ck_assert_msg(memcmp(ra.grad_acc, rb.grad_acc, net->n_params * sizeof(float)) == 0,
                      "seed %" PRIu64 ": the mean gradient depends on the order the workers joined in", seed);
        ck_assert_msg(memcmp(ra.state_acc, rb.state_acc, net->n_state * sizeof(float)) == 0,
                      "seed %" PRIu64 ": the state sum depends on the join order", seed);

        /* The oracle, in double. */
        double sum_n = 0, sum_loss = 0, sum_state_n = 0;
        uint64_t sum_correct = 0;
        for (int k = 0; k < n; k++) {
            sum_n += (double)w[k].n_examples;
            sum_loss += (double)w[k].n_examples * w[k].loss;
            sum_correct += w[k].n_correct;
            if (w[k].has_state) sum_state_n += (double)w[k].n_examples;
        }
        ck_assert(ra.acc_n == sum_n);
        ck_assert(fabs(ra.acc_loss - sum_loss) <= 1e-9 * sum_loss);
        ck_assert_uint_eq(ra.acc_correct, sum_correct);
        ck_assert(ra.state_n == sum_state_n);
        for (size_t i = 0; i < net->n_params; i++) {
            double want = 0, scale = 0;
            for (int k = 0; k < n; k++) {
                want += (double)w[k].n_examples * w[k].grad[i];
                scale += (double)w[k].n_examples * fabs(w[k].grad[i]);
            }
            want /= sum_n;
            scale /= sum_n;
            ck_assert_msg(fabs(ra.grad_acc[i] - want) <= 1e-5 * scale + 1e-30,
                          "seed %" PRIu64 ": mean gradient[%zu] = %.9g, want %.9g", seed, i, (double)ra.grad_acc[i],
                          want);
        }
        for (size_t i = 0; i < net->n_state; i++) {
            double want = 0, scale = 0;
            for (int k = 0; k < n; k++)
                if (w[k].has_state) {
                    want += (double)w[k].n_examples * w[k].state[i];
                    scale += (double)w[k].n_examples * fabs(w[k].state[i]);
                }
            ck_assert_msg(fabs(ra.state_acc[i] - want) <= 1e-5 * scale + 1e-30,
                          "seed %" PRIu64 ": state sum[%zu] = %.9g, want %.9g", seed, i, (double)ra.state_acc[i], want);
        }
        ps_round_state_release(&ra);
        ps_round_state_release(&rb);
        ps_peers_release(&ta);
        ps_peers_release(&tb);
        s_free_pushes(w, n);
    }
    net_free(&net);
}
END_TEST

START_TEST(test_ps_round_state_lowrank_weighted_and_order_free) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = s_net();
    const layer_t *l = &net->layers[0]; /* f1: fc 16 -> 6 */
    const int out = l->out, in = l->in_c * l->in_h * l->in_w;
    for (int trial = 0; trial < TRIALS; trial++) {
        int n = 1 + (int)rng_below(&r, MAX_W);
        s_push_t w[MAX_W];
        s_random_pushes(&r, net, w, n);
        float *D[MAX_W], *X[MAX_W];
        int rows[MAX_W];
        for (int k = 0; k < n; k++) {
            rows[k] = 1 + (int)rng_below(&r, 5);
            D[k] = malloc(sizeof(float) * (size_t)rows[k] * out);
            X[k] = malloc(sizeof(float) * (size_t)rows[k] * in);
            ck_assert(D[k] && X[k]);
            for (int i = 0; i < rows[k] * out; i++) D[k][i] = (float)rng_normal(&r);
            for (int i = 0; i < rows[k] * in; i++) X[k][i] = (float)rng_normal(&r);
            memset(w[k].grad + l->w_off, 0, sizeof(float) * l->n_w); /* held factored */
        }
        int perm[MAX_W];
        for (int k = 0; k < n; k++) perm[k] = n - 1 - k;
        ps_peers_t ta, tb;
        ck_assert_int_eq(ps_peers_init(&ta, MAX_W), 0);
        ck_assert_int_eq(ps_peers_init(&tb, MAX_W), 0);
        for (int pass = 0; pass < 2; pass++)
            for (int k = 0; k < n; k++) {
                int j = pass ? perm[k] : k;
                ps_peer_t *p = s_add(pass ? &tb : &ta, net, &w[j]);
                ck_assert_int_eq(kfac_lowrank_set_init(&p->lowrank, net), 0);
                ck_assert_int_eq(kfac_lowrank_append(kfac_lowrank_set_find(&p->lowrank, 0), D[j], X[j], rows[j], 1.0f), 0);
            }
        ps_round_t ra, rb;
        ck_assert_int_eq(ps_round_state_init(&ra, net, 0), 0);
        ck_assert_int_eq(ps_round_state_init(&rb, net, 0), 0);
        ps_round_state_average(&ra, net, &ta, NULL);
        ps_round_state_average(&rb, net, &tb, NULL);
        const kfac_lowrank_t *ea = kfac_lowrank_set_find(&ra.lowrank, 0), *eb = kfac_lowrank_set_find(&rb.lowrank, 0);
        int total = 0;
        for (int k = 0; k < n; k++) total += rows[k];
        ck_assert_int_eq(ea->n_rows, total);
        ck_assert_int_eq(kfac_lowrank_set_count(&ra.lowrank), 1);
        ck_assert_msg(memcmp(ea->D, eb->D, sizeof(float) * (size_t)total * out) == 0 &&
                          memcmp(ea->X, eb->X, sizeof(float) * (size_t)total * in) == 0,
                      "seed %" PRIu64 ": the factored rows depend on the join order", seed);
        float *W = malloc(sizeof(float) * l->n_w);
        ck_assert_ptr_nonnull(W);
        kfac_lowrank_densify(ea, W, 0.0f);
        double sum_n = 0;
        for (int k = 0; k < n; k++) sum_n += (double)w[k].n_examples;
        for (int o = 0; o < out; o++)
            for (int i = 0; i < in; i++) {
                double want = 0, scale = 0;
                for (int k = 0; k < n; k++)
                    for (int q = 0; q < rows[k]; q++) {
                        double t = (double)D[k][q * out + o] * X[k][q * in + i] * (double)w[k].n_examples;
                        want += t;
                        scale += fabs(t);
                    }
                want /= sum_n;
                scale /= sum_n;
                ck_assert_msg(fabs(W[o * in + i] - want) <= 1e-5 * scale + 1e-30,
                              "seed %" PRIu64 ": mean weight gradient (%d, %d) = %.9g, want %.9g", seed, o, i,
                              (double)W[o * in + i], want);
                ck_assert(ra.grad_acc[l->w_off + (size_t)o * in + i] == 0.0f);
            }
        ps_round_state_clear(&ra, net);
        ck_assert_int_eq(kfac_lowrank_set_count(&ra.lowrank), 0);
        free(W);
        for (int k = 0; k < n; k++) free(D[k]), free(X[k]);
        ps_round_state_release(&ra);
        ps_round_state_release(&rb);
        ps_peers_release(&ta);
        ps_peers_release(&tb);
        s_free_pushes(w, n);
    }
    net_free(&net);
}
END_TEST

/* A worker that leaves mid-round is summed when it leaves, and only then. */
START_TEST(test_ps_round_state_commit_once) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = s_net();
    const int n = 4;
    s_push_t w[4];
    s_random_pushes(&r, net, w, n);
    ps_peers_t t;
    ck_assert_int_eq(ps_peers_init(&t, n), 0);
    ps_peer_t *p[4];
    for (int k = 0; k < n; k++) p[k] = s_add(&t, net, &w[k]);
    ps_round_t rs;
    ck_assert_int_eq(ps_round_state_init(&rs, net, 0), 0);
    int gone = (int)rng_below(&r, (uint32_t)n);
    ps_round_state_commit_grad(&rs, net, p[gone]);
    ck_assert_int_eq(p[gone]->mb.committed, 1);
    ck_assert(rs.acc_n == (double)w[gone].n_examples);
    ps_round_state_commit_grad(&rs, net, p[gone]); /* again: nothing */
    ck_assert(rs.acc_n == (double)w[gone].n_examples);
    ps_round_state_average(&rs, net, &t, NULL);
    double sum_n = 0;
    for (int k = 0; k < n; k++) sum_n += (double)w[k].n_examples;
    ck_assert_msg(rs.acc_n == sum_n, "seed %" PRIu64 ": %g examples summed, want %g", seed, rs.acc_n, sum_n);
    for (int k = 0; k < n; k++) ck_assert_int_eq(p[k]->mb.committed, 1);

    /* A worker that did not push adds nothing. */
    p[0]->mb.committed = 0;
    p[0]->mb.pushed = 0;
    double before = rs.acc_n;
    ps_round_state_commit_grad(&rs, net, p[0]);
    ck_assert(rs.acc_n == before);

    /* clear empties the round; the version and step count stay. */
    rs.t = 7;
    rs.steps_done = 7;
    rs.n_grads = n;
    rs.folded = rs.marked = 1;
    ps_round_state_clear(&rs, net);
    ck_assert(rs.acc_n == 0 && rs.acc_loss == 0 && rs.state_n == 0 && rs.acc_correct == 0);
    ck_assert_int_eq(rs.n_grads, 0);
    ck_assert_int_eq(rs.folded + rs.marked, 0);
    ck_assert_int_eq(rs.acc_zero, 1); /* grad_acc reads as zeros without a pass over it */
    for (size_t i = 0; i < net->n_state; i++) ck_assert(rs.state_acc[i] == 0.0f);
    /* a gradient summed before the step (a worker that left) lands on zeros */
    p[1]->mb.committed = 0;
    ps_round_state_commit_grad(&rs, net, p[1]);
    ck_assert_int_eq(rs.acc_zero, 0);
    for (size_t i = 0; i < net->n_params; i++)
        ck_assert_msg(rs.grad_acc[i] == (float)w[1].n_examples * w[1].grad[i], "seed %" PRIu64 ": grad_acc[%zu] = %g",
                      seed, i, (double)rs.grad_acc[i]);
    rs.acc_n = rs.acc_loss = rs.state_n = rs.acc_wn = 0.0;
    rs.acc_correct = 0;
    ck_assert_int_eq((int)rs.t, 7);
    ck_assert_uint_eq(rs.steps_done, 7);

    /* A resume restores the run's steps, not this process's; a step adds
     * one to both (steps_run 0 is what round 0's rules look at). */
    ps_round_state_restore(&rs, 12, 12, 0);
    ck_assert_uint_eq(rs.steps_run, 0);
    ps_round_state_advance(&rs, 1000);
    ck_assert_int_eq((int)rs.t, 13);
    ck_assert_uint_eq(rs.steps_done, 13);
    ck_assert_uint_eq(rs.steps_run, 1);
    ck_assert_uint_eq(rs.last_step_ns, 1000);

    /* The Params cache: dropped, it is empty and marks no version. */
    rs.pbuf[1] = zloop_buf_new(16);
    rs.plen[1] = 16;
    rs.pver[1] = 7;
    ps_round_state_drop_params(&rs);
    ck_assert_ptr_null(rs.pbuf[1]);
    ck_assert_int_eq((int)rs.pver[0], -1);
    ck_assert_int_eq((int)rs.pver[1], -1);

    ps_round_state_release(&rs);
    ck_assert_ptr_null(rs.grad_acc);
    ps_round_state_release(&rs); /* twice: a no-op */
    ps_round_state_release(NULL);
    ps_peers_release(&t);
    s_free_pushes(w, n);
    net_free(&net);
}
END_TEST

/* Statistics: merged in rank order, each worker's once, weighted by their
 * samples (two workers with constant factors give the weighted mean). */
START_TEST(test_ps_round_state_merge_stats_weighted) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = s_net();
    ps_round_t rs;
    ck_assert_int_eq(ps_round_state_init(&rs, net, 1), 0);
    ck_assert_ptr_nonnull(rs.stats);
    ps_peers_t t;
    ck_assert_int_eq(ps_peers_init(&t, 4), 0);
    s_push_t w[2];
    s_random_pushes(&r, net, w, 2);
    double v[2], ns[2];
    for (int k = 0; k < 2; k++) {
        ps_peer_t *p = s_add(&t, net, &w[k]);
        p->stats = kfac_stats_new(net);
        ck_assert_ptr_nonnull(p->stats);
        v[k] = 0.5 + rng_uniform(&r);
        ns[k] = (double)(1 + rng_below(&r, 50));
        for (int j = 0; j < p->stats->n_layers; j++)
            for (int f = 0; f < p->stats->layers[j].n_factors; f++) {
                kfac_factor_t *fa = &p->stats->layers[j].f[f];
                size_t len = fa->kind == KFAC_FACTOR_DIAG2X2 ? 3 * (size_t)fa->dim : (size_t)fa->dim * fa->dim;
                for (size_t i = 0; i < len; i++) fa->data[i] = (float)v[k];
                fa->n_samples = ns[k];
                fa->n_updates = 1;
            }
        p->mb.has_stats = 1;
    }
    ck_assert_int_eq(ps_round_state_merge_stats(&rs, &t), 1);
    ck_assert_int_eq(t.v[0]->mb.has_stats + t.v[1]->mb.has_stats, 0);
    double want = (ns[0] * v[0] + ns[1] * v[1]) / (ns[0] + ns[1]);
    const kfac_factor_t *fa = &rs.stats->layers[0].f[0];
    ck_assert_msg(fabs(fa->data[0] - want) <= 1e-6 * want, "seed %" PRIu64 ": merged %.9g, want %.9g", seed,
                  (double)fa->data[0], want);
    ck_assert(fa->n_samples == ns[0] + ns[1]);
    /* A second merge finds nothing new: the same result. */
    ck_assert_int_eq(ps_round_state_merge_stats(&rs, &t), 1);
    ck_assert(fa->n_samples == ns[0] + ns[1]);
    ps_round_state_clear(&rs, net);
    ck_assert_int_eq(rs.stats_have, 0);
    ps_round_state_release(&rs);
    ps_peers_release(&t);
    s_free_pushes(w, 2);
    net_free(&net);
}
END_TEST

/* ps_round_robust_value against a brute force in double: for each value,
 * count how many are below and above it (ties by index) to find the order
 * statistics, then the median or the trimmed mean from them. Fresh random
 * values, counts 1..9, trims that leave at least one. Tolerance: 1e-6
 * relative (the trimmed mean is summed in double, rounded once to float). */
START_TEST(test_ps_round_robust_value_brute_force) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int rep = 0; rep < 400; rep++) {
        int k = 1 + (int)rng_below(&r, 9);
        float v[16], sorted[16];
        for (int i = 0; i < k; i++) v[i] = (float)(rng_normal(&r) * (rng_below(&r, 4) == 0 ? 1e3 : 1.0));
        if (k > 2 && rng_below(&r, 3) == 0) v[1] = v[0]; /* ties */
        for (int i = 0; i < k; i++) {
            int rank = 0;
            for (int j = 0; j < k; j++) rank += v[j] < v[i] || (v[j] == v[i] && j < i);
            sorted[rank] = v[i];
        }
        int trim = (int)rng_below(&r, (uint32_t)((k - 1) / 2 + 1)) * (rng_below(&r, 2) ? 1 : -1);
        if (trim == 0) trim = -1;
        double want;
        if (trim < 0) {
            want = k % 2 ? sorted[k / 2] : 0.5 * ((double)sorted[k / 2 - 1] + sorted[k / 2]);
        } else {
            want = 0.0;
            for (int i = trim; i < k - trim; i++) want += sorted[i];
            want /= (double)(k - 2 * trim);
        }
        float w[16];
        memcpy(w, v, sizeof w);
        float got = ps_round_robust_value(w, k, trim);
        ck_assert_msg(fabs((double)got - want) <= 1e-6 * (fabs(want) + 1e-6),
                      "seed %" PRIu64 ": k %d trim %d: got %.9g, want %.9g", seed, k, trim, (double)got, want);
    }
}
END_TEST

/* Under a robust rule the batch-norm state is combined by the same rule
 * as the gradient: one member's finite but huge running statistics (3e38,
 * two of which would sum to Inf) do not reach the published state under
 * the median of 3, which equals the brute-force median of each value. */
START_TEST(test_ps_round_state_robust_state) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = s_net();
    for (int trial = 0; trial < TRIALS; trial++) {
        const int k = 3 + (int)rng_below(&r, 4);
        ps_peers_t t;
        ck_assert_int_eq(ps_peers_init(&t, 16), 0);
        float *states[8];
        for (int w = 0; w < k; w++) {
            s_push_t push = {.rank = w, .id = (uint32_t)w + 1, .n_examples = 8, .n_correct = 1, .loss = 1.0,
                             .has_state = 1};
            push.grad = calloc(net->n_params, sizeof(float));
            push.state = malloc(net->n_state * sizeof(float));
            ck_assert(push.grad && push.state);
            for (size_t i = 0; i < net->n_state; i++)
                push.state[i] = w == 0 ? 3e38f : (float)(1.0 + rng_uniform(&r));
            s_add(&t, net, &push);
            states[w] = push.state;
            free(push.grad);
        }
        ps_round_t rs;
        ck_assert_int_eq(ps_round_state_init(&rs, net, 0), 0);
        ps_round_state_open(&rs, net, 1);
        ck_assert_int_eq(ps_round_state_robust(&rs, net, &t, -1, NULL), k);
        ck_assert(rs.state_n == 1.0);
        for (size_t i = 0; i < net->n_state; i++) {
            double v[8];
            for (int w = 0; w < k; w++) v[w] = states[w][i];
            for (int a = 1; a < k; a++) /* brute force: sort, take the middle */
                for (int b = a; b > 0 && v[b - 1] > v[b]; b--) {
                    double x = v[b];
                    v[b] = v[b - 1];
                    v[b - 1] = x;
                }
            double med = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
            ck_assert_msg(fabs(rs.state_acc[i] - med) <= 1e-6 * fabs(med), "seed %" PRIu64 ": value %zu: %g vs %g",
                          seed, i, (double)rs.state_acc[i], med);
            ck_assert(rs.state_acc[i] < 1e30f);
        }
        for (int w = 0; w < k; w++) free(states[w]);
        ps_round_state_release(&rs);
        ps_peers_release(&t);
    }
    net_free(&net);
}
END_TEST

/* A model large enough that the round's passes go to a pool (1 << 18
 * parameters and more). */
static net_t *s_pool_net(void) {
    char err[256];
    net_t *net = net_parse("input 1x64x64\nfc name=f1 out=72\nsoftmax_xent\n", "test", 4, err, sizeof err);
    ck_assert_msg(net != NULL, "%s", err);
    return net;
}

/* The mean and the median of a model large enough that the round's
 * passes are split over a pool of 3 threads: the same floats as on the
 * calling thread alone, a worker summed before the step (it left)
 * included, and the double oracle's values (mean: 1e-5 of the sum of
 * magnitudes; median: the brute-force median of each coordinate, exactly). */
START_TEST(test_ps_round_state_pool_same_floats) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = s_pool_net();
    ck_assert_uint_gt(net->n_params, 1 << 18); /* the pool's threshold */
    nn_par_t *par = nn_par_new(3);
    ck_assert_ptr_nonnull(par);
    for (int trial = 0; trial < 4; trial++) {
        const int n = 3 + (int)rng_below(&r, MAX_W - 2);
        s_push_t w[MAX_W];
        s_random_pushes(&r, net, w, n);
        const int median = trial % 2, gone = median ? -1 : (int)rng_below(&r, (uint32_t)n);
        ps_peers_t t[2];
        ps_round_t rs[2];
        ps_peer_t *p[2][MAX_W];
        for (int q = 0; q < 2; q++) {
            ck_assert_int_eq(ps_peers_init(&t[q], MAX_W), 0);
            for (int k = 0; k < n; k++) p[q][k] = s_add(&t[q], net, &w[k]);
            ck_assert_int_eq(ps_round_state_init(&rs[q], net, 0), 0);
            if (gone >= 0) ps_round_state_commit_grad(&rs[q], net, p[q][gone]);
            if (median) ck_assert_int_eq(ps_round_state_robust(&rs[q], net, &t[q], -1, q ? par : NULL), n);
            else ck_assert_uint_eq(ps_round_state_average(&rs[q], net, &t[q], q ? par : NULL), net->n_params);
        }
        ck_assert_msg(memcmp(rs[0].grad_acc, rs[1].grad_acc, net->n_params * sizeof(float)) == 0,
                      "seed %" PRIu64 ": the %s on 3 threads differs from one thread", seed, median ? "median" : "mean");
        double worst = 0.0;
        size_t at = 0;
        for (size_t i = 0; i < net->n_params; i++) {
            double want = 0, tol = 0;
            if (median) {
                double v[MAX_W];
                for (int k = 0; k < n; k++) v[k] = w[k].grad[i];
                for (int a = 1; a < n; a++)
                    for (int b = a; b > 0 && v[b - 1] > v[b]; b--) {
                        double x = v[b];
                        v[b] = v[b - 1];
                        v[b - 1] = x;
                    }
                want = n % 2 ? v[n / 2] : (double)(0.5f * ((float)v[n / 2 - 1] + (float)v[n / 2]));
            } else {
                double sum_n = 0;
                for (int k = 0; k < n; k++) {
                    want += (double)w[k].n_examples * w[k].grad[i];
                    tol += (double)w[k].n_examples * fabs(w[k].grad[i]);
                    sum_n += (double)w[k].n_examples;
                }
                want /= sum_n;
                tol *= 1e-5 / sum_n;
            }
            double e = fabs(rs[1].grad_acc[i] - want) - tol;
            if (e > worst) worst = e, at = i;
        }
        ck_assert_msg(worst <= 0.0, "seed %" PRIu64 ": %s[%zu] = %.9g, off by %g beyond the tolerance", seed,
                      median ? "median" : "mean", at, (double)rs[1].grad_acc[at], worst);
        for (int q = 0; q < 2; q++) {
            ps_round_state_release(&rs[q]);
            ps_peers_release(&t[q]);
        }
        s_free_pushes(w, n);
    }
    nn_par_free(&par);
    net_free(&net);
}
END_TEST

/* The mean's pass names its first NaN or Inf (the update then makes no
 * pass of its own to check): a planted NaN or Inf in one push, and two
 * finite values whose weighted sum overflows, at random places, on one
 * thread and on three, against a scan of the result. */
START_TEST(test_ps_round_state_average_names_nonfinite) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = s_pool_net();
    nn_par_t *par = nn_par_new(3);
    ck_assert_ptr_nonnull(par);
    for (int trial = 0; trial < 6; trial++) {
        const int n = 2 + (int)rng_below(&r, 3);
        s_push_t w[MAX_W];
        s_random_pushes(&r, net, w, n);
        size_t a = rng_below(&r, (uint32_t)net->n_params), b = rng_below(&r, (uint32_t)net->n_params);
        const size_t want = a < b ? a : b;
        if (trial % 3 == 0) { /* NaN and Inf in two pushes */
            w[0].grad[a] = NAN;
            w[1].grad[b] = -INFINITY;
        } else { /* finite, but their sum is not (3e38 x examples / examples) */
            for (int k = 0; k < n; k++) w[k].grad[a] = w[k].grad[b] = 3e38f;
        }
        for (int q = 0; q < 2; q++) {
            ps_peers_t t;
            ps_round_t rs;
            ck_assert_int_eq(ps_peers_init(&t, MAX_W), 0);
            for (int k = 0; k < n; k++) s_add(&t, net, &w[k]);
            ck_assert_int_eq(ps_round_state_init(&rs, net, 0), 0);
            const size_t got = ps_round_state_average(&rs, net, &t, q ? par : NULL);
            size_t scan = 0;
            while (scan < net->n_params && isfinite(rs.grad_acc[scan])) scan++;
            ck_assert_msg(got == scan && got == want, "seed %" PRIu64 ": trial %d on %d thread(s): named %zu, the first "
                          "non-finite is %zu, planted at %zu", seed, trial, q ? 3 : 1, got, scan, want);
            ps_round_state_release(&rs);
            ps_peers_release(&t);
        }
        s_free_pushes(w, n);
    }
    nn_par_free(&par);
    net_free(&net);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_round_state");
    TCase *tc = tcase_create("round_state");
    tcase_add_test(tc, test_ps_round_state_average_weighted_and_order_free);
    tcase_add_test(tc, test_ps_round_state_commit_once);
    tcase_add_test(tc, test_ps_round_state_lowrank_weighted_and_order_free);
    tcase_add_test(tc, test_ps_round_robust_value_brute_force);
    tcase_add_test(tc, test_ps_round_state_robust_state);
    tcase_add_test(tc, test_ps_round_state_merge_stats_weighted);
    tcase_add_test(tc, test_ps_round_state_pool_same_floats);
    tcase_add_test(tc, test_ps_round_state_average_names_nonfinite);
    suite_add_tcase(s, tc);
    return s;
}
