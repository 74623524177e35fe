/* tests/kfac/test_kfac_lowrank.c — fully connected weight gradients in
 * low-rank form (common/kfac/kfac_lowrank.c) and the optimizer's factored
 * preconditioning (kfac_opt_step_lowrank) against the dense path.
 *
 * The Gram helpers (inner product, norm, densify, append with scales) are
 * compared with brute-force double sums over the formed matrices.
 *
 * The step. A small net with the three cases of an fc layer:
 *     input 3x4x4 -> fc f0 (out 12, kfac=doubly on the 3x16 map; bias with
 *     its own block) -> relu -> fc f1 (out 16, standard, bias: the
 *     homogeneous column) -> fc f2 (out 10, standard, bias=0) -> softmax_xent.
 * Fresh random PSD factors are folded and inverted (as test_kfac_opt.c).
 * Every fc layer's weight gradient is built from two "workers" of b rows
 * each, sum_i s_i D_i^T X_i with s = (0.25, 0.75) (the PS's weights), for
 * b in {1, 2, 4} (at these sizes every layer's factored form pays, B = 2b;
 * the rule is asserted); biases are random. One optimizer steps twice from the
 * same parameters (momentum 0: the second step does not see the first):
 * kfac_opt_step on the dense gradient (D^T X formed in double, rounded to
 * float: the oracle, which test_kfac_opt.c checks against dense solves),
 * and kfac_opt_step_lowrank with zeros in the weight slices and the rows.
 * Both with the KL rule (the step size depends on v^T g, which the
 * factored path takes from Gram products). Forms: CHOLESKY for every
 * factor (every layer factored: n_lowrank_layers counts 3 per step);
 * mixed (each G block held as an eigendecomposition: still factored); all
 * EIGEN (the damping couples the factors: densified, 0 factored); and
 * CHOLESKY with f1's G inverse poisoned (NaN): the factored form fails
 * there, the layer goes dense from a copy of the gradient made only then,
 * and takes the identity as the dense step does (2 layers factored, 3
 * preconditioning errors counted in the two steps).
 *
 * Tolerance: relative 2-norm difference of the parameters after the step
 * <= 1e-4, |v^T g| and the step size to 1e-4 relative. Both paths are
 * float32 with different summation orders (rank-b products against dense
 * sgemms) of well-conditioned damped factors (condition <~ 1e2 each):
 * measured differences ~1e-7 to 1e-6; a wrong transpose, missing bias row
 * or a dropped worker weight gives > 1e-1.
 * Seed printed on failure; KFAC_TEST_SEED=<n> replays.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/kfac/kfac_lowrank.h"
#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#include "tests/lib/seed.h"
#include "tests/lib/testnet.h"

#define TOL 1e-4

static const char *s_model =
    "input 3x4x4\n"
    "fc name=f0 out=12 kfac=doubly\n"
    "relu\n"
    "fc name=f1 out=16\n"
    "fc name=f2 out=10 bias=0\n"
    "softmax_xent\n";

static void *s_alloc(size_t n_bytes) {
    void *p = calloc(n_bytes ? n_bytes : 1, 1);
    ck_assert_ptr_nonnull(p);
    return p;
}
#define NEWF(n) ((float *)s_alloc((size_t)(n) * sizeof(float)))
#define NEWD(n) ((double *)s_alloc((size_t)(n) * sizeof(double)))

/* dW (n_out, n_in) in double = sum over rows of D^T X. */
static void s_dense_d(const float *D, const float *X, int rows, int n_out, int n_in, double scale, double *W) {
    for (int o = 0; o < n_out; o++)
        for (int i = 0; i < n_in; i++) {
            double s = 0.0;
            for (int r = 0; r < rows; r++) s += (double)D[(size_t)r * n_out + o] * X[(size_t)r * n_in + i];
            W[(size_t)o * n_in + i] += scale * s;
        }
}

static double s_rel_err(const float *a, const double *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

START_TEST(test_kfac_lowrank_gram_matches_brute_force) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const int n_out = 9, n_in = 13;
    net_t *net = testnet_parse("input 1x1x13\nfc name=f out=9\nsoftmax_xent\n", 4);
    kfac_lowrank_set_t set;
    ck_assert_int_eq(kfac_lowrank_set_init(&set, net), 0);
    ck_assert_int_eq(set.n, 1);
    kfac_lowrank_t *e = kfac_lowrank_set_find(&set, 0);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->n_out, n_out);
    ck_assert_int_eq(e->n_in, n_in);
    double *W = NEWD(n_out * n_in);
    /* three appends of 5, 11 and 20 rows (the arrays grow past 16 and 32) */
    const int rows[3] = {5, 11, 20};
    const float scale[3] = {0.5f, -2.0f, 1.0f};
    for (int a = 0; a < 3; a++) {
        float *D = NEWF(rows[a] * n_out), *X = NEWF(rows[a] * n_in);
        testnet_fill_normal(&r, D, (size_t)rows[a] * n_out);
        testnet_fill_normal(&r, X, (size_t)rows[a] * n_in);
        ck_assert_int_eq(kfac_lowrank_append(e, D, X, rows[a], scale[a]), 0);
        s_dense_d(D, X, rows[a], n_out, n_in, scale[a], W);
        free(D);
        free(X);
    }
    ck_assert_int_eq(e->n_rows, 36);
    ck_assert_int_eq(kfac_lowrank_set_count(&set), 1);
    double n2 = 0.0;
    for (int i = 0; i < n_out * n_in; i++) n2 += W[i] * W[i];
    double got = kfac_lowrank_norm2(e);
    ck_assert_msg(fabs(got - n2) <= 1e-5 * n2, "norm2 %.9g, brute force %.9g (seed %llu)", got, n2,
                  (unsigned long long)seed);
    float *Wf = NEWF(n_out * n_in);
    kfac_lowrank_densify(e, Wf, 0.0f);
    ck_assert_msg(s_rel_err(Wf, W, (size_t)n_out * n_in) <= 1e-5, "densify (seed %llu)", (unsigned long long)seed);
    /* inner against a second low-rank matrix of 4 rows */
    float *C = NEWF(4 * n_out), *E = NEWF(4 * n_in);
    testnet_fill_normal(&r, C, 4 * n_out);
    testnet_fill_normal(&r, E, 4 * n_in);
    double *W2 = NEWD(n_out * n_in), ip = 0.0, n2b = 0.0;
    s_dense_d(C, E, 4, n_out, n_in, 1.0, W2);
    for (int i = 0; i < n_out * n_in; i++) ip += W[i] * W2[i], n2b += W2[i] * W2[i];
    got = kfac_lowrank_inner(e->D, n_out, e->X, n_in, e->n_rows, C, n_out, E, n_in, 4, n_out, n_in);
    /* float Gram products: error relative to ||W|| ||W2|| (the inner product may cancel) */
    ck_assert_msg(fabs(got - ip) <= 1e-5 * sqrt(n2 * n2b),
                  "inner %.9g, brute force %.9g (seed %llu)", got, ip, (unsigned long long)seed);
    /* scale, clear */
    kfac_lowrank_scale(e, 2.0f);
    ck_assert(fabs(kfac_lowrank_norm2(e) - 4.0 * n2) <= 1e-5 * 4.0 * n2);
    kfac_lowrank_set_clear(&set);
    ck_assert_int_eq(kfac_lowrank_set_count(&set), 0);
    ck_assert(kfac_lowrank_norm2(e) == 0.0);
    ck_assert_int_eq(kfac_lowrank_append(e, C, E, -1, 1.0f), -EINVAL);
    free(C); free(E); free(W); free(W2); free(Wf);
    kfac_lowrank_set_release(&set);
    kfac_lowrank_set_release(&set); /* idempotent */
    net_free(&net);
}
END_TEST

START_TEST(test_kfac_lowrank_rules_follow_the_shapes) {
    /* the wide model's fc 3136 -> 1024 at 64 images: factored on the wire */
    ck_assert_int_eq(kfac_lowrank_wire_pays(64, 1024, 3136), 1);
    /* the demo model's fc 1568 -> 128 at 64 images: dense */
    ck_assert_int_eq(kfac_lowrank_wire_pays(64, 128, 1568), 0);
    ck_assert_int_eq(kfac_lowrank_wire_pays(64, 10, 1024), 0);
    ck_assert_int_eq(kfac_lowrank_wire_pays(0, 1024, 3136), 0);
    /* the PS: 2 x 64 rows of the wide layer (doubly, 64 x 49) pay; a
     * thousand rows do not */
    ck_assert_int_eq(kfac_lowrank_update_pays(128, 1024, 3136, 64, 49), 1);
    ck_assert_int_eq(kfac_lowrank_update_pays(4096, 1024, 3136, 64, 49), 0);
    ck_assert_int_eq(kfac_lowrank_update_pays(128, 1024, 3137, 0, 0), 1);
    ck_assert_int_eq(kfac_lowrank_update_pays(0, 1024, 3137, 0, 0), 0);
}
END_TEST

/* S_FORMS_BROKEN: Cholesky, with the G inverse of the second layer
 * poisoned (NaN): the factored form fails there and the layer falls back
 * to the dense path, which uses the identity, as the dense step does. */
typedef enum { S_FORMS_CHOLESKY, S_FORMS_MIXED, S_FORMS_EIGEN, S_FORMS_BROKEN } s_forms_t;

static void s_check(int b, s_forms_t forms, const char *name) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = testnet_parse(s_model, 8);
    kfac_stats_t *batch = kfac_stats_new(net);
    ck_assert_ptr_nonnull(batch);
    ck_assert_int_eq(batch->n_layers, 3);
    ck_assert_int_eq(batch->layers[0].mode, KFAC_MODE_DOUBLY);
    for (int s = 0; s < batch->n_layers; s++)
        for (int f = 0; f < batch->layers[s].n_factors; f++) {
            kfac_factor_t *fa = &batch->layers[s].f[f];
            const int n = fa->dim, m = 2 * n + 8;
            double *Z = NEWD((size_t)n * m), sc = pow(2.0, 2.0 * rng_uniform(&r) - 1.0);
            for (int i = 0; i < n * m; i++) Z[i] = rng_normal(&r);
            for (int i = 0; i < n; i++)
                for (int j = 0; j <= i; j++) {
                    double acc = 0.0;
                    for (int k = 0; k < m; k++) acc += Z[i * m + k] * Z[j * m + k];
                    fa->data[(size_t)i * n + j] = fa->data[(size_t)j * n + i] = (float)(sc * acc / m);
                }
            free(Z);
            fa->n_updates = 1;
            fa->n_samples = 8;
        }
    kfac_opts_t o;
    kfac_opts_default(&o);
    o.method = forms == S_FORMS_EIGEN ? KFAC_INV_EIGEN : KFAC_INV_CHOLESKY;
    o.damping = 0.05;
    o.step_rule = KFAC_STEP_RULE_KL;
    o.momentum = 0.0;
    char err[256];
    kfac_opt_t *k = kfac_opt_new(net, &o, err, sizeof err);
    ck_assert_msg(k != NULL, "%s", err);
    ck_assert_int_eq(kfac_opt_fold(k, batch, 0), 0);
    ck_assert_int_eq(kfac_opt_invert_all(k), 0);
    if (forms == S_FORMS_BROKEN) {
        int poisoned = 0;
        for (int bl = 0; bl < k->n_blocks; bl++) {
            const kfac_block_t *B = &k->blocks[bl];
            if (B->stat == 1 && k->avg->layers[1].f[B->factor].role == KFAC_FACTOR_ROLE_G) {
                B->inv->inv[0] = NAN;
                poisoned++;
            }
        }
        ck_assert_int_eq(poisoned, 1);
    }
    if (forms == S_FORMS_MIXED) {
        /* every G block as an eigendecomposition with its own damping */
        for (int bl = 0; bl < k->n_blocks; bl++) {
            const kfac_block_t *B = &k->blocks[bl];
            kfac_factor_role_t role = k->avg->layers[B->stat].f[B->factor].role;
            if (role != KFAC_FACTOR_ROLE_G) continue;
            float *F = NEWF((size_t)B->n * B->n), damping;
            long ver;
            ck_assert_int_eq(kfac_opt_block_job(k, bl, F, &damping, &ver), 0);
            ck_assert_int_eq(kfac_inverse_compute(F, B->n, damping, KFAC_INV_EIGEN, B->inv, NULL), 0);
            ck_assert_int_eq(B->inv->method, KFAC_INV_EIGEN);
            free(F);
        }
    }

    /* the gradient: random everywhere, the fc weights from two workers' rows */
    const size_t np = net->n_params;
    float *g_lr = NEWF(np), *g_dense = NEWF(np);
    double *W = NEWD(np);
    testnet_fill_normal(&r, g_lr, np);
    kfac_lowrank_set_t set;
    ck_assert_int_eq(kfac_lowrank_set_init(&set, net), 0);
    ck_assert_int_eq(set.n, 3);
    const float wk[2] = {0.25f, 0.75f};
    for (int i = 0; i < set.n; i++) {
        kfac_lowrank_t *e = &set.v[i];
        memset(g_lr + e->w_off, 0, sizeof(float) * (size_t)e->n_out * e->n_in);
        for (int w = 0; w < 2; w++) {
            float *D = NEWF(b * e->n_out), *X = NEWF(b * e->n_in);
            testnet_fill_normal(&r, D, (size_t)b * e->n_out);
            testnet_fill_normal(&r, X, (size_t)b * e->n_in);
            ck_assert_int_eq(kfac_lowrank_append(e, D, X, b, wk[w]), 0);
            s_dense_d(D, X, b, e->n_out, e->n_in, wk[w], W + e->w_off);
            free(D);
            free(X);
        }
    }
    memcpy(g_dense, g_lr, sizeof(float) * np);
    for (int i = 0; i < set.n; i++) {
        const kfac_lowrank_t *e = &set.v[i];
        for (size_t j = 0; j < (size_t)e->n_out * e->n_in; j++) g_dense[e->w_off + j] = (float)W[e->w_off + j];
    }

    float *p0 = NEWF(np), *p_dense = NEWF(np), *p_lr = NEWF(np);
    testnet_fill_normal(&r, p0, np);
    kfac_step_info_t info_d, info_l;
    memcpy(p_dense, p0, sizeof(float) * np);
    ck_assert_int_eq(kfac_opt_step(k, p_dense, g_dense, 1, &info_d), 0);
    const int broken = forms == S_FORMS_BROKEN;
    ck_assert_int_eq(info_d.n_layers_identity, broken);
    uint64_t before = k->n_lowrank_layers;
    memcpy(p_lr, p0, sizeof(float) * np);
    ck_assert_int_eq(kfac_opt_step_lowrank(k, p_lr, g_lr, &set, 1, &info_l), 0);
    ck_assert_int_eq(info_l.n_layers_identity, broken);
    int expect = 0;
    for (int s = 0; s < batch->n_layers; s++) {
        const kfac_layer_stats_t *ls = &batch->layers[s];
        int d = ls->mode == KFAC_MODE_DOUBLY;
        expect += kfac_lowrank_update_pays(2 * b, ls->out, d ? ls->in : ls->in + ls->has_bias, d ? ls->fm_c : 0,
                                           d ? ls->fm_t : 0);
    }
    ck_assert_int_eq(expect, 3);
    ck_assert_int_eq((int)(k->n_lowrank_layers - before), forms == S_FORMS_EIGEN ? 0 : expect - broken);
    /* broken: the dense step's failure, then the factored and the dense one of the low-rank step */
    ck_assert_uint_eq(k->n_precond_errors, broken ? 3 : 0);

    /* the update of each layer, and v^T g and the step size */
    double *ref = NEWD(np);
    float *upd = NEWF(np);
    for (size_t j = 0; j < np; j++) {
        ref[j] = (double)p_dense[j] - p0[j];
        upd[j] = p_lr[j] - p0[j];
    }
    double worst = 0.0;
    for (int li = 0; li < net->n_layers; li++) {
        const layer_t *l = &net->layers[li];
        if (l->n_w + l->n_b == 0) continue;
        double e = s_rel_err(upd + l->w_off, ref + l->w_off, l->n_w + l->n_b);
        if (e > worst) worst = e;
        ck_assert_msg(e <= TOL, "%s, b=%d: layer %s differs from the dense path by %.3g (seed %llu)", name, b, l->name,
                      e, (unsigned long long)seed);
    }
    ck_assert_msg(fabs(info_l.vg - info_d.vg) <= TOL * fabs(info_d.vg), "%s, b=%d: v^T g %.9g, dense %.9g (seed %llu)",
                  name, b, info_l.vg, info_d.vg, (unsigned long long)seed);
    ck_assert_msg(fabs(info_l.step - info_d.step) <= TOL * info_d.step, "%s, b=%d: step %.9g, dense %.9g (seed %llu)",
                  name, b, info_l.step, info_d.step, (unsigned long long)seed);
    printf("%s, b=%d: worst per-layer relative difference %.2g (tolerance %.0e)\n", name, b, worst, TOL);

    /* non-finite rows are refused before anything moves */
    set.v[1].X[0] = NAN;
    memcpy(p_lr, p0, sizeof(float) * np);
    ck_assert_int_eq(kfac_opt_step_lowrank(k, p_lr, g_lr, &set, 1, &info_l), -EDOM);
    ck_assert(memcmp(p_lr, p0, sizeof(float) * np) == 0);

    free(ref); free(upd); free(p0); free(p_dense); free(p_lr); free(g_lr); free(g_dense); free(W);
    kfac_lowrank_set_release(&set);
    kfac_opt_free(&k);
    kfac_stats_free(&batch);
    net_free(&net);
}

START_TEST(test_kfac_lowrank_step_cholesky_matches_dense) {
    const int bs[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) s_check(bs[i], S_FORMS_CHOLESKY, "cholesky");
}
END_TEST

START_TEST(test_kfac_lowrank_step_mixed_forms_match_dense) {
    const int bs[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) s_check(bs[i], S_FORMS_MIXED, "mixed");
}
END_TEST

START_TEST(test_kfac_lowrank_step_all_eigen_densifies) {
    s_check(3, S_FORMS_EIGEN, "eigen");
}
END_TEST

START_TEST(test_kfac_lowrank_step_failed_layer_goes_dense) {
    s_check(2, S_FORMS_BROKEN, "broken");
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("kfac_lowrank");
    TCase *tc = tcase_create("lowrank");
    tcase_add_test(tc, test_kfac_lowrank_gram_matches_brute_force);
    tcase_add_test(tc, test_kfac_lowrank_rules_follow_the_shapes);
    tcase_add_test(tc, test_kfac_lowrank_step_cholesky_matches_dense);
    tcase_add_test(tc, test_kfac_lowrank_step_mixed_forms_match_dense);
    tcase_add_test(tc, test_kfac_lowrank_step_all_eigen_densifies);
    tcase_add_test(tc, test_kfac_lowrank_step_failed_layer_goes_dense);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    return s;
}
