/* tests/ps/test_ps_curv.c — kfac-ps's curvature thread (ps/curv.h) against
 * the same work done serially on a second optimizer (the oracle): folds of
 * fresh random statistics give the same running averages bit for bit, the
 * factor versions and the batch-norm view follow; a cut gives the packed
 * factor and damping the serial cut gives; a check passes the true damped
 * inverse (computed here in float by kfac_inverse_compute, residual under
 * the verification's tolerance) and refuses the same inverse scaled by 2
 * and the inverse of another factor; what comes back comes back in
 * submission order. Fresh seed per run, printed on failure
 * (tests/lib/seed.h). */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/base/clock.h"
#include "common/base/rng.h"
#include "common/kfac/kfac_linalg.h"
#include "common/kfac/kfac_opt.h"
#include "common/net/wire.h"
#include "ps/curv.h"
#include "ps/stats_guard.h"
#include "tests/lib/seed.h"
#include "tests/lib/testnet.h"

#define LAMBDA 0.05
#define MAX_BACK 64

static const char *s_model =
    "input 2x5x5\n"
    "conv name=c1 out=3 k=3 pad=1\n"
    "fc name=f0 out=4 kfac=doubly\n"
    "batchnorm name=bn\nrelu\n"
    "fc name=f1 out=5\n"
    "fc name=f2 out=3 bias=0\n"
    "softmax_xent\n";

typedef struct {
    ps_curv_t *c;
    ps_curv_task_t *back[MAX_BACK]; /* in the order they came back (kept, released by the test) */
    int n_back;
} s_ctx_t;

static void s_done(ps_curv_task_t *t, int status, void *user) {
    s_ctx_t *x = user;
    ck_assert_int_eq(status, 0);
    ck_assert_int_lt(x->n_back, MAX_BACK);
    x->back[x->n_back++] = t;
}

static void s_on_timeout(uv_timer_t *tm) { *(int *)tm->data = 1; }

/* Run the loop until n tasks have come back (30 s at most). */
static void s_wait_back(uv_loop_t *loop, s_ctx_t *x, int n) {
    int expired = 0;
    uv_timer_t tm;
    uv_timer_init(loop, &tm);
    tm.data = &expired;
    uv_timer_start(&tm, s_on_timeout, 30000, 0);
    for (int i = 0; i < 100000 && x->n_back < n && !expired; i++) uv_run(loop, UV_RUN_ONCE);
    uv_timer_stop(&tm);
    uv_close((uv_handle_t *)&tm, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    ck_assert_msg(x->n_back >= n, "%d of %d tasks came back in 30 s", x->n_back, n);
}

static void s_random_psd(rng_t *r, float *F, int n) {
    const int m = 2 * n + 8;
    double *X = malloc((size_t)n * m * sizeof *X);
    ck_assert_ptr_nonnull(X);
    for (int i = 0; i < n * m; i++) X[i] = rng_normal(r);
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = 0.0;
            for (int k = 0; k < m; k++) s += X[i * m + k] * X[j * m + k];
            F[(size_t)i * n + j] = F[(size_t)j * n + i] = (float)(s / m);
        }
    free(X);
}

/* Fresh random statistics in both batches (the same values). */
static void s_random_batch(rng_t *r, kfac_stats_t *a, kfac_stats_t *b) {
    for (int s = 0; s < a->n_layers; s++)
        for (int f = 0; f < a->layers[s].n_factors; f++) {
            kfac_factor_t *fa = &a->layers[s].f[f], *fb = &b->layers[s].f[f];
            if (fa->kind == KFAC_FACTOR_SYM) {
                s_random_psd(r, fa->data, fa->dim);
            } else {
                for (int c = 0; c < fa->dim; c++) {
                    double x = rng_normal(r), y = rng_normal(r);
                    fa->data[3 * c] = (float)(x * x + 0.1), fa->data[3 * c + 1] = (float)(0.1 * x * y);
                    fa->data[3 * c + 2] = (float)(y * y + 0.1);
                }
            }
            fa->n_updates = 1;
            fa->n_samples = 8;
            memcpy(fb->data, fa->data, kfac_factor_len(fa) * sizeof(float));
            fb->n_updates = fa->n_updates;
            fb->n_samples = fa->n_samples;
        }
}

static const char *s_name(const void *ctx, int layer) {
    const net_t *n = ctx;
    return layer >= 0 && layer < n->n_layers ? n->layers[layer].name : NULL;
}

/* A JobResult message carrying inv (Cholesky form) scaled by `scale`. */
static void s_result_msg(msg_t *m, const kfac_inverse_t *inv, int layer, int factor, float scale) {
    const int n = inv->n;
    msg_init(m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, 1);
    m->job_result.layer = (uint32_t)layer;
    m->job_result.factor = (uint32_t)factor;
    m->job_result.method = MSG_METHOD_CHOLESKY;
    m->job_result.n = (uint32_t)n;
    m->job_result.damping = inv->damping_used;
    m->job_result.n_inverse = kfac_linalg_packed_len(n);
    m->job_result.inverse = malloc(m->job_result.n_inverse * sizeof(float));
    ck_assert_ptr_nonnull(m->job_result.inverse);
    kfac_linalg_pack_upper(inv->inv, n, m->job_result.inverse);
    for (size_t i = 0; i < m->job_result.n_inverse; i++) m->job_result.inverse[i] *= scale;
}

START_TEST(test_ps_curv_matches_serial) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = testnet_parse(s_model, 4);
    kfac_opts_t o;
    kfac_opts_default(&o);
    o.damping = LAMBDA;
    char err[256];
    kfac_opt_t *k = kfac_opt_new(net, &o, err, sizeof err), *oracle = kfac_opt_new(net, &o, err, sizeof err);
    ck_assert_ptr_nonnull(k);
    ck_assert_ptr_nonnull(oracle);
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    wire_shape_t sh;
    ck_assert_int_eq(wire_shape_init(&sh, net, k->avg), 0);
    ps_stats_guard_t *g = ps_stats_guard_new(k->avg);
    ck_assert_ptr_nonnull(g);
    s_ctx_t x = {0};
    x.c = ps_curv_new(&loop, k, g, 1e3, s_name, net, &sh, seed, s_done, &x);
    ck_assert_ptr_nonnull(x.c);
    kfac_stats_t *want = kfac_stats_new(net);
    ck_assert_ptr_nonnull(want);

    /* three folds queued back to back, then a cut of every block: the cuts
     * see all three folds (one thread, submission order) */
    for (long v = 0; v < 3; v++) {
        ps_curv_task_t *t = ps_curv_task(x.c, PS_CURV_FOLD);
        ck_assert_ptr_nonnull(t);
        s_random_batch(&r, t->batch, want);
        t->version = v;
        ck_assert_int_eq(kfac_opt_fold(oracle, want, v), 0);
        ck_assert_int_eq(ps_curv_submit(x.c, t), 0);
    }
    for (int b = 0; b < k->n_blocks; b++) {
        ps_curv_task_t *t = ps_curv_task(x.c, PS_CURV_CUT);
        ck_assert_ptr_nonnull(t);
        t->block = b;
        t->job_id = (uint64_t)b + 1;
        t->lambda = LAMBDA;
        ck_assert_int_eq(ps_curv_submit(x.c, t), 0);
    }
    const int n_tasks = 3 + k->n_blocks;
    s_wait_back(&loop, &x, n_tasks);
    ck_assert_uint_eq(ps_curv_pending(x.c), 0);
    for (int i = 0; i < n_tasks; i++) {
        ps_curv_task_t *t = x.back[i];
        ck_assert_int_eq(t->kind, i < 3 ? PS_CURV_FOLD : PS_CURV_CUT); /* submission order */
        ck_assert_msg(t->rc == 0, "seed %" PRIu64 ": task %d failed: %s", seed, i, t->err);
    }
    /* the running averages: bit for bit the serial ones */
    ps_curv_lock(x.c);
    for (int s = 0; s < k->avg->n_layers; s++)
        for (int f = 0; f < k->avg->layers[s].n_factors; f++) {
            const kfac_factor_t *a = &k->avg->layers[s].f[f], *b = &oracle->avg->layers[s].f[f];
            ck_assert_msg(memcmp(a->data, b->data, kfac_factor_len(a) * sizeof(float)) == 0,
                          "seed %" PRIu64 ": slot %d factor %d differs from the serial fold", seed, s, f);
        }
    ps_curv_unlock(x.c);
    /* the last fold's versions and batch-norm factors, published as a loop would */
    const ps_curv_task_t *last = x.back[2];
    for (int b = 0; b < k->n_blocks; b++) ck_assert_int_eq(last->versions[b], oracle->blocks[b].factor_version);
    kfac_opt_bn_publish(k, last->bn, last->bn_has);
    int n_bn = 0;
    for (int s = 0; s < oracle->avg->n_layers; s++) {
        const kfac_layer_stats_t *ls = &oracle->avg->layers[s];
        if (ls->kind != LAYER_BATCHNORM) continue;
        n_bn++;
        ck_assert(k->bn_has[s]);
        ck_assert(memcmp(k->bn_view + k->bn_off[s], ls->f[0].data, kfac_factor_len(&ls->f[0]) * sizeof(float)) == 0);
    }
    ck_assert_int_eq(n_bn, 1);
    /* the cuts: the serial cut's damping, version and packed factor */
    int max_n = 1;
    for (int b = 0; b < k->n_blocks; b++) max_n = k->blocks[b].n > max_n ? k->blocks[b].n : max_n;
    float *F = malloc((size_t)max_n * max_n * sizeof *F), *P = malloc(kfac_linalg_packed_len(max_n) * sizeof *P);
    float *dmp = malloc((size_t)k->n_blocks * sizeof *dmp);
    ck_assert(F && P && dmp);
    for (int b = 0; b < k->n_blocks; b++) {
        const ps_curv_task_t *t = x.back[3 + b];
        float d;
        long fv;
        ck_assert_int_eq(kfac_opt_block_job(oracle, b, F, &d, &fv), 0);
        kfac_linalg_pack_upper(F, k->blocks[b].n, P);
        ck_assert_int_eq(t->block, b);
        ck_assert_int_eq(t->version, fv);
        ck_assert(t->damping == d);
        ck_assert(memcmp(t->packed, P, kfac_linalg_packed_len(k->blocks[b].n) * sizeof(float)) == 0);
        dmp[b] = d;
    }
    for (int i = 0; i < n_tasks; i++) ps_curv_release(x.c, x.back[i]);
    x.n_back = 0;

    /* checks: per block the true inverse passes; the same scaled by 2, and
     * another block's inverse of the same size (none here: a random SPD
     * matrix's), fail. Each check needs its own cut (the probe goes with
     * the check). */
    int n_sub = 0;
    uint64_t id = 100;
    for (int b = 0; b < k->n_blocks; b++) {
        const int n = k->blocks[b].n;
        float d;
        long fv;
        ck_assert_int_eq(kfac_opt_block_job(oracle, b, F, &d, &fv), 0);
        kfac_inverse_t *good = kfac_inverse_new(n), *other = kfac_inverse_new(n);
        ck_assert(good && other);
        ck_assert_int_eq(kfac_inverse_compute(F, n, d, KFAC_INV_CHOLESKY, good, NULL), 0);
        s_random_psd(&r, F, n);
        ck_assert_int_eq(kfac_inverse_compute(F, n, d, KFAC_INV_CHOLESKY, other, NULL), 0);
        const float scales[3] = {1.0f, 2.0f, 1.0f};
        for (int which = 0; which < 3; which++) {
            ps_curv_task_t *cut = ps_curv_task(x.c, PS_CURV_CUT);
            ck_assert_ptr_nonnull(cut);
            cut->block = b;
            cut->job_id = ++id;
            cut->lambda = LAMBDA;
            ck_assert_int_eq(ps_curv_submit(x.c, cut), 0);
            ps_curv_task_t *t = ps_curv_task(x.c, PS_CURV_CHECK);
            ck_assert_ptr_nonnull(t);
            t->block = b;
            t->job_id = id;
            t->version = fv;
            t->damping = dmp[b];
            t->inv = ps_curv_holder(x.c, b);
            ck_assert_ptr_nonnull(t->inv);
            s_result_msg(&t->msg, which == 2 ? other : good, k->blocks[b].layer, k->blocks[b].factor, scales[which]);
            ck_assert_int_eq(ps_curv_submit(x.c, t), 0);
            n_sub += 2;
        }
        kfac_inverse_free(&good);
        kfac_inverse_free(&other);
    }
    s_wait_back(&loop, &x, n_sub);
    for (int i = 0; i < n_sub; i += 2) {
        const ps_curv_task_t *cut = x.back[i], *t = x.back[i + 1];
        const int which = (i / 2) % 3;
        ck_assert_int_eq(cut->kind, PS_CURV_CUT);
        ck_assert_int_eq(t->kind, PS_CURV_CHECK);
        if (which == 0)
            ck_assert_msg(t->rc == 0 && t->inv->valid && t->residual < 0.05,
                          "seed %" PRIu64 ": block %d: the true inverse was refused (residual %g): %s", seed, t->block,
                          t->residual, t->err);
        else
            ck_assert_msg(t->rc == -EDOM && !t->inv->valid,
                          "seed %" PRIu64 ": block %d: a wrong inverse (%s) passed (rc %d, residual %g)", seed,
                          t->block, which == 1 ? "scaled by 2" : "another factor's", t->rc, t->residual);
    }
    /* an installed exchange: the holder goes into the block, the block's old one comes back */
    ps_curv_task_t *t0 = x.back[1];
    kfac_inverse_t *held = k->blocks[t0->block].inv, *in = t0->inv;
    ck_assert_int_eq(kfac_opt_block_swap(k, t0->block, &t0->inv, t0->version), 0);
    ck_assert_ptr_eq(k->blocks[t0->block].inv, in);
    ck_assert_ptr_eq(t0->inv, held);
    for (int i = 0; i < n_sub; i++) ps_curv_release(x.c, x.back[i]);

    free(F);
    free(P);
    free(dmp);
    kfac_stats_free(&want);
    ps_curv_free(&x.c);
    uv_run(&loop, UV_RUN_DEFAULT); /* the pool's close */
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    ps_stats_guard_free(g);
    wire_shape_release(&sh);
    kfac_opt_free(&k);
    kfac_opt_free(&oracle);
    net_free(&net);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_curv");
    TCase *tc = tcase_create("curv");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_ps_curv_matches_serial);
    suite_add_tcase(s, tc);
    return s;
}
