/* tests/ps/test_ps_drift.c — ps/drift.h, the verdict on a worker's pushes
 * against the server's reference gradient, without a socket: honest members
 * (a true gradient under noise ten times its length, a reference under
 * noise three times it) are never refused; a member pushing the same small
 * vector every round (a bias far below the honest noise, "a little is
 * enough") is refused from its PS_DRIFT_MIN_PUSHES-th push on and admitted
 * again once it pushes honest gradients; a member with no noise of its own
 * (a full batch) against a reference with a fixed offset is not refused;
 * members are kept apart by identity and the oldest forgotten; when every
 * worker disagrees with the reference none is refused (each push spared),
 * and the others are refused once one agrees with it; a factored
 * push (D^T X rows) is judged like its dense form, checked against a
 * brute-force product in double. Random values from a fresh seed printed
 * on failure. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/nn/nn.h"
#include "ps/drift.h"
#include "tests/lib/seed.h"

#define N 2000

/* x = a + sigma * noise of unit length per coordinate / sqrt(N) */
static void s_noisy(rng_t *r, const float *a, double sigma, float *x) {
    for (int i = 0; i < N; i++) x[i] = (a ? a[i] : 0.0f) + (float)(sigma * rng_normal(r) / sqrt((double)N));
}

/* a unit-length random vector into x */
static void s_unit(rng_t *r, float *x) {
    double n2 = 0.0;
    for (int i = 0; i < N; i++) {
        x[i] = (float)rng_normal(r);
        n2 += (double)x[i] * x[i];
    }
    for (int i = 0; i < N; i++) x[i] = (float)(x[i] / sqrt(n2));
}

START_TEST(test_ps_drift_honest_and_biased) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    ps_drift_t *d = ps_drift_new(N);
    ck_assert_ptr_nonnull(d);
    float *s = malloc(N * sizeof *s), *ds = malloc(N * sizeof *ds), *g = malloc(N * sizeof *g);
    float *v = malloc(N * sizeof *v), *b = malloc(N * sizeof *b);
    ck_assert(s && ds && g && v && b);
    s_unit(&r, s);  /* the true gradient, length 1, turning slowly */
    s_unit(&r, b);  /* the hostile member's bias: length 0.3, a 33rd of an honest push's noise */
    for (int i = 0; i < N; i++) b[i] *= 0.3f;
    double zmax_honest = -1e30;
    int first_refused = -1, refused = 0, readmitted = -1;
    for (int t = 0; t < 400; t++) {
        s_unit(&r, ds);
        for (int i = 0; i < N; i++) s[i] = 0.99f * s[i] + 0.14f * ds[i];
        s_noisy(&r, s, 3.0, v); /* the reference: 256 examples, less noise than a batch of 64 */
        for (uint32_t id = 1; id <= 2; id++) {
            ps_drift_verdict_t out;
            s_noisy(&r, s, 10.0, g);
            ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, id, "", g, v, 5.0, &out), 0);
            ck_assert_msg(!out.refuse, "seed %" PRIu64 ": honest member %u refused at push %d (z %.3g)", seed, id, t,
                          out.z);
            if (out.n_judged >= PS_DRIFT_MIN_PUSHES && out.z > zmax_honest) zmax_honest = out.z;
        }
        /* the hostile member: the same bias every round for 200 rounds, then honest */
        ps_drift_verdict_t out;
        if (t < 200)
            memcpy(g, b, N * sizeof *g);
        else
            s_noisy(&r, s, 10.0, g);
        ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, 9, "", g, v, 5.0, &out), 0);
        ck_assert_int_eq(out.n_judged, t + 1);
        if (t < 200) {
            if (out.refuse && first_refused < 0) first_refused = t;
            if (first_refused >= 0)
                ck_assert_msg(out.refuse, "seed %" PRIu64 ": the biased member admitted again at push %d (z %.3g)", seed,
                              t, out.z);
            refused += out.refuse;
        } else if (!out.refuse && readmitted < 0) {
            readmitted = t - 200;
        }
    }
    ck_assert_msg(first_refused == PS_DRIFT_MIN_PUSHES - 1, "seed %" PRIu64 ": the biased member first refused at push %d",
                  seed, first_refused);
    ck_assert_msg(readmitted >= 0 && readmitted < 60, "seed %" PRIu64 ": readmitted %d pushes after turning honest", seed,
                  readmitted);
    ck_assert_msg(zmax_honest < 4.0, "seed %" PRIu64 ": an honest member reached z %.3g", seed, zmax_honest);
    ck_assert_int_eq(ps_drift_refusing(d), 0); /* readmitted by the end */
    free(s);
    free(ds);
    free(g);
    free(v);
    free(b);
    ps_drift_free(&d);
    ck_assert_ptr_null(d);
    ps_drift_free(&d); /* idempotent */
}
END_TEST

/* A member with no noise of its own (a full batch of its shard) and a
 * reference whose examples differ (a fixed offset as long as the gradient,
 * plus noise): the floor keeps it admitted. */
START_TEST(test_ps_drift_full_batch) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    ps_drift_t *d = ps_drift_new(N);
    float *s = malloc(N * sizeof *s), *off = malloc(N * sizeof *off), *v = malloc(N * sizeof *v);
    ck_assert(d && s && off && v);
    s_unit(&r, s);
    s_unit(&r, off);
    for (int t = 0; t < 200; t++) {
        s_noisy(&r, s, 1.0, v);
        for (int i = 0; i < N; i++) v[i] += off[i];
        ps_drift_verdict_t out;
        ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, 1, "", s, v, 5.0, &out), 0);
        ck_assert_msg(!out.refuse, "seed %" PRIu64 ": the full-batch member refused at push %d (z %.3g)", seed, t, out.z);
    }
    free(s);
    free(off);
    free(v);
    ps_drift_free(&d);
}
END_TEST

/* Identities: role, id and key apart; the table keeps PS_DRIFT_MAX and
 * replaces the one judged longest ago. */
START_TEST(test_ps_drift_identities) {
    ps_drift_t *d = ps_drift_new(4);
    ck_assert_ptr_nonnull(d);
    const float g[4] = {1, 0, 0, 0}, v[4] = {0, 1, 0, 0};
    ps_drift_verdict_t out;
    for (int k = 0; k < 3; k++) ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, 1, "", g, v, 5.0, &out), 0);
    ck_assert_int_eq(out.n_judged, 3);
    ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, 1, "KEY", g, v, 5.0, &out), 0);
    ck_assert_int_eq(out.n_judged, 1);
    ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, 2, "", g, v, 5.0, &out), 0);
    ck_assert_int_eq(out.n_judged, 1);
    /* PS_DRIFT_MAX others after member 1: member 1, judged longest ago, is forgotten */
    for (uint32_t id = 100; id < 100 + PS_DRIFT_MAX; id++)
        ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, id, "", g, v, 5.0, &out), 0);
    ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, 1, "", g, v, 5.0, &out), 0);
    ck_assert_int_eq(out.n_judged, 1);
    /* a member whose pushes the reference shares: nothing of its own */
    for (int k = 0; k < 30; k++) ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, 8, "", g, g, 5.0, &out), 0);
    ck_assert(fabs(out.z) < 1e-9 && !out.refuse && !out.spared);
    /* the same vector every time against an orthogonal reference: z -> 1 / PS_DRIFT_FLOOR; refused from its
     * PS_DRIFT_MIN_PUSHES-th push while member 8 (within the bound) was judged within PS_DRIFT_RECENT */
    for (int k = 0; k < 30; k++) {
        ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, 7, "", g, v, 5.0, &out), 0);
        ck_assert_int_eq(out.refuse, k + 1 >= PS_DRIFT_MIN_PUSHES);
        ck_assert(!out.spared);
    }
    ck_assert_msg(fabs(out.z - 1.0 / PS_DRIFT_FLOOR) < 1e-6, "z %.9g", out.z);
    ck_assert(fabs(out.e - 1.0) < 1e-12 && fabs(out.g_norm - 1.0) < 1e-12);
    /* member 8's verdict grows old: PS_DRIFT_RECENT judgements later member 7 is beyond the bound alone,
     * spared, not refused */
    for (int k = 30; k < PS_DRIFT_RECENT + 2; k++)
        ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, 7, "", g, v, 5.0, &out), 0);
    ck_assert(!out.refuse && out.spared && out.z > 5.0);
    ck_assert_int_eq(ps_drift_refusing(d), 0);
    ps_drift_free(&d);
}
END_TEST

/* A reference every member disagrees with (it lags a trajectory every
 * honest gradient follows): three members pushing along the same direction,
 * unshared by the reference, are all beyond the bound and none is refused
 * (each push spared); once one member's pushes agree with the reference,
 * the other two are refused; a member of another role within the bound
 * does not count for workers. */
START_TEST(test_ps_drift_spares_when_all_disagree) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    ps_drift_t *d = ps_drift_new(N);
    float *u = malloc(N * sizeof *u), *w = malloc(N * sizeof *w), *g = malloc(N * sizeof *g);
    ck_assert(d && u && w && g);
    s_unit(&r, u); /* where every member's gradient points */
    s_unit(&r, w); /* the reference: elsewhere */
    ps_drift_verdict_t out;
    for (int k = 0; k < 40; k++) /* another role, always within the bound */
        ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_STATSD, 1, "", w, w, 5.0, &out), 0);
    int spared = 0;
    for (int t = 0; t < 40; t++)
        for (uint32_t id = 1; id <= 3; id++) {
            s_noisy(&r, u, 0.05, g);
            ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, id, "", g, w, 5.0, &out), 0);
            ck_assert_msg(!out.refuse, "seed %" PRIu64 ": member %u refused at push %d (z %.3g) while every member "
                          "disagreed with the reference", seed, id, t, out.z);
            if (t >= PS_DRIFT_MIN_PUSHES) {
                ck_assert_msg(out.spared && out.z > 5.0, "seed %" PRIu64 ": push %d of member %u: z %.3g, spared %d",
                              seed, t, id, out.z, out.spared);
                spared++;
            }
        }
    ck_assert_int_eq(spared, 3 * (40 - PS_DRIFT_MIN_PUSHES));
    /* member 3 turns to the reference; 1 and 2 keep their direction: refused once 3's z is within the bound */
    int refused_1 = 0, z3_within = -1;
    for (int t = 0; t < 60; t++)
        for (uint32_t id = 1; id <= 3; id++) {
            s_noisy(&r, id == 3 ? w : u, 0.05, g);
            ck_assert_int_eq(ps_drift_judge_dense(d, MSG_ROLE_WORKER, id, "", g, w, 5.0, &out), 0);
            if (id == 3 && !(out.z > 5.0) && z3_within < 0) z3_within = t;
            if (id == 1 && out.refuse) refused_1++;
            if (id != 3 && z3_within >= 0 && t > z3_within)
                ck_assert_msg(out.refuse && !out.spared, "seed %" PRIu64 ": member %u not refused at push %d after member "
                              "3 came within the bound at %d (z %.3g)", seed, id, t, z3_within, out.z);
        }
    ck_assert_msg(z3_within >= 0 && z3_within < 40, "seed %" PRIu64 ": member 3 within the bound at %d", seed, z3_within);
    ck_assert_int_ge(refused_1, 60 - z3_within - 1);
    ck_assert_int_eq(ps_drift_refusing(d), 2);
    free(u);
    free(w);
    free(g);
    ps_drift_free(&d);
}
END_TEST

/* A factored push: its verdicts equal those of the dense push (D^T X
 * formed in double), on two fresh tables fed the same sequence. */
START_TEST(test_ps_drift_lowrank) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    char err[256];
    net_t *net = net_parse("input 1x4x4\nflatten\nfc name=fc1 out=6\nrelu\nfc name=fc2 out=3\nsoftmax_xent\n", "test",
                           4, err, sizeof err);
    ck_assert_msg(net != NULL, "%s", err);
    const size_t np = net->n_params;
    const layer_t *l = &net->layers[net_find_layer(net, "fc1")];
    const int out_n = l->out, in_n = l->in_c * l->in_h * l->in_w, rows = 3;
    ps_drift_t *a = ps_drift_new(np), *b = ps_drift_new(np);
    float *dense = calloc(np, sizeof *dense), *grad = calloc(np, sizeof *grad), *v = calloc(np, sizeof *v);
    float *D = malloc((size_t)rows * out_n * sizeof *D), *X = malloc((size_t)rows * in_n * sizeof *X);
    ck_assert(a && b && dense && grad && v && D && X);
    for (int t = 0; t < 20; t++) {
        for (size_t i = 0; i < np; i++) v[i] = (float)rng_normal(&r);
        for (int i = 0; i < rows * out_n; i++) D[i] = (float)rng_normal(&r);
        for (int i = 0; i < rows * in_n; i++) X[i] = (float)rng_normal(&r);
        /* dense: every parameter drawn, fc1's weights = D^T X (double sums) */
        for (size_t i = 0; i < np; i++) dense[i] = (float)rng_normal(&r) + (t % 2 ? 0.0f : 0.5f);
        for (int o = 0; o < out_n; o++)
            for (int c = 0; c < in_n; c++) {
                double sum = 0.0;
                for (int k = 0; k < rows; k++) sum += (double)D[k * out_n + o] * X[k * in_n + c];
                dense[l->w_off + (size_t)o * in_n + c] = (float)sum;
            }
        /* the push: the arena without fc1's weights */
        size_t n_grad = 0;
        for (size_t i = 0; i < np; i++)
            if (i < l->w_off || i >= l->w_off + l->n_w) grad[n_grad++] = dense[i];
        msg_lowrank_t lr = {.layer = (uint32_t)(l - net->layers), .n_rows = (uint32_t)rows, .d = D,
                            .n_d = (size_t)rows * out_n, .x = X, .n_x = (size_t)rows * in_n};
        msg_grad_push_t push = {.grad = grad, .n_grad = n_grad, .lowrank = &lr, .n_lowrank = 1};
        ps_drift_verdict_t va, vb;
        ck_assert_int_eq(ps_drift_judge(a, net, MSG_ROLE_WORKER, 1, "", &push, v, 5.0, &va), 0);
        ck_assert_int_eq(ps_drift_judge_dense(b, MSG_ROLE_WORKER, 1, "", dense, v, 5.0, &vb), 0);
        ck_assert_msg(fabs(va.g_norm - vb.g_norm) <= 1e-5 * vb.g_norm, "seed %" PRIu64 ": norm %.9g vs %.9g", seed,
                      va.g_norm, vb.g_norm);
        ck_assert_msg(fabs(va.z - vb.z) <= 1e-4 * (1.0 + fabs(vb.z)), "seed %" PRIu64 ": z %.9g vs %.9g", seed, va.z,
                      vb.z);
        ck_assert_int_eq(va.refuse, vb.refuse);
        /* a push whose lengths do not fit the model */
        push.n_grad = n_grad - 1;
        ck_assert_int_eq(ps_drift_judge(a, net, MSG_ROLE_WORKER, 1, "", &push, v, 5.0, &va), -EINVAL);
    }
    free(dense);
    free(grad);
    free(v);
    free(D);
    free(X);
    ps_drift_free(&a);
    ps_drift_free(&b);
    net_free(&net);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_drift");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_ps_drift_honest_and_biased);
    tcase_add_test(tc, test_ps_drift_full_batch);
    tcase_add_test(tc, test_ps_drift_identities);
    tcase_add_test(tc, test_ps_drift_spares_when_all_disagree);
    tcase_add_test(tc, test_ps_drift_lowrank);
    suite_add_tcase(s, tc);
    return s;
}
