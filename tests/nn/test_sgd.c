/* tests/nn/test_sgd.c — SGD with momentum and weight decay (common/nn/sgd.c)
 * against the formula of sgd.h evaluated in double, and the learning-rate
 * schedules against their closed forms. Fresh random parameters and
 * gradients each run (seed printed on failure; KFAC_TEST_SEED replays). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/nn/nn.h"
#include "common/base/rng.h"
#include "common/nn/sgd.h"
#include "tests/lib/seed.h"

/* A model with every parameter kind: conv weight+bias, conv without bias,
 * batch-norm gamma/beta, fc weight+bias. */
static const char *s_model =
    "input 2x6x6\n"
    "conv name=c1 out=3 k=3 pad=1\n"
    "batchnorm name=bn\n"
    "relu\n"
    "conv name=c2 out=2 k=3 bias=0\n"
    "fc name=f out=4\n"
    "softmax_xent\n";

static net_t *s_net(void) {
    char err[256];
    net_t *net = net_parse(s_model, "sgd-test", 2, err, sizeof err);
    ck_assert_msg(net != NULL, "%s", err);
    return net;
}

/* 1 where weight decay applies (fc/conv weights), from the layer table. */
static double *s_decay_mask(const net_t *net) {
    double *m = calloc(net->n_params, sizeof(double));
    ck_assert_ptr_nonnull(m);
    for (int i = 0; i < net->n_layers; i++) {
        const layer_t *l = &net->layers[i];
        if (l->kind == LAYER_FC || l->kind == LAYER_CONV)
            for (size_t j = 0; j < l->n_w; j++) m[l->w_off + j] = 1.0;
    }
    return m;
}

START_TEST(test_sgd_step_matches_double_formula) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = s_net();
    const size_t n = net->n_params;
    const double mu = 0.5 + 0.45 * rng_uniform(&r), wd = 1e-3 + 0.05 * rng_uniform(&r);
    sgd_t *s = sgd_new(net, mu, wd);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(s->n, n);
    double *mask = s_decay_mask(net);
    for (size_t j = 0; j < n; j++) ck_assert_msg(s->decay_mask[j] == (float)mask[j], "decay mask [%zu]", j);

    float *w = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    double *wr = malloc(n * sizeof(double)), *vr = calloc(n, sizeof(double));
    ck_assert(w && g && wr && vr);
    for (size_t j = 0; j < n; j++) wr[j] = w[j] = (float)rng_normal(&r);
    /* Reference in double, with the float32 constants the optimizer holds:
     *   d = g + wd * mask * w;  v = mu v + d;  w = w - lr v.
     * Five steps of float32 arithmetic on O(1) values stay within a few
     * ulp: tolerance 1e-5 * (1 + |w|). */
    const double muf = (float)mu, wdf = (float)wd;
    for (int t = 0; t < 5; t++) {
        const double lr = 0.01 + 0.2 * rng_uniform(&r), lrf = (float)lr;
        for (size_t j = 0; j < n; j++) g[j] = (float)rng_normal(&r);
        sgd_step(s, w, g, lr);
        for (size_t j = 0; j < n; j++) {
            double d = g[j] + wdf * mask[j] * wr[j];
            vr[j] = muf * vr[j] + d;
            wr[j] -= lrf * vr[j];
        }
        for (size_t j = 0; j < n; j++)
            ck_assert_msg(fabs(w[j] - wr[j]) <= 1e-5 * (1.0 + fabs(wr[j])),
                          "step %d param %zu: %.9g vs %.9g (seed=%llu)", t, j, w[j], wr[j], (unsigned long long)seed);
    }
    free(w);
    free(g);
    free(wr);
    free(vr);
    free(mask);
    sgd_free(&s);
    ck_assert_ptr_null(s);
    sgd_free(&s);
    sgd_free(NULL);
    net_free(&net);
}
END_TEST

START_TEST(test_sgd_decay_only_on_fc_conv_weights) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = s_net();
    const size_t n = net->n_params;
    /* mu = 0 and zero gradients: only decay moves parameters, and only the
     * fc/conv weights; biases and bn gamma/beta stay bit-identical. */
    sgd_t *s = sgd_new(net, 0.0, 0.1);
    ck_assert_ptr_nonnull(s);
    float *w = malloc(n * sizeof(float)), *w0 = malloc(n * sizeof(float)), *g = calloc(n, sizeof(float));
    ck_assert(w && w0 && g);
    for (size_t j = 0; j < n; j++) w0[j] = w[j] = (float)(1.0 + rng_uniform(&r));
    sgd_step(s, w, g, 0.5);
    for (int i = 0; i < net->n_layers; i++) {
        const layer_t *l = &net->layers[i];
        for (size_t j = 0; j < l->n_w; j++) {
            size_t q = l->w_off + j;
            if (l->kind == LAYER_BATCHNORM) ck_assert_msg(w[q] == w0[q], "bn gamma decayed (%s)", l->name);
            else ck_assert_msg(fabs(w[q] - w0[q] * (1.0 - 0.05)) <= 1e-6 * fabs(w0[q]), "%s weight %zu: %g", l->name, j, w[q]);
        }
        for (size_t j = 0; j < l->n_b; j++) ck_assert_msg(w[l->b_off + j] == w0[l->b_off + j], "bias decayed (%s)", l->name);
    }
    /* sgd_add_weight_decay: g += wd * mask * w, same mask */
    double *mask = s_decay_mask(net);
    for (size_t j = 0; j < n; j++) g[j] = (float)rng_normal(&r);
    float *g0 = malloc(n * sizeof(float));
    ck_assert_ptr_nonnull(g0);
    memcpy(g0, g, n * sizeof(float));
    sgd_add_weight_decay(s, w, g);
    for (size_t j = 0; j < n; j++) {
        double want = g0[j] + (double)(float)0.1 * mask[j] * w[j];
        ck_assert_msg(fabs(g[j] - want) <= 1e-6 * (1.0 + fabs(want)), "decayed grad %zu: %g vs %g", j, g[j], want);
    }
    sgd_free(&s);
    /* wd = 0: a no-op */
    s = sgd_new(net, 0.9, 0.0);
    ck_assert_ptr_nonnull(s);
    memcpy(g0, g, n * sizeof(float));
    sgd_add_weight_decay(s, w, g);
    ck_assert(memcmp(g0, g, n * sizeof(float)) == 0);
    sgd_free(&s);
    free(mask);
    free(g0);
    free(w);
    free(w0);
    free(g);
    net_free(&net);
}
END_TEST

START_TEST(test_sgd_momentum_accumulates_velocity) {
    /* constant gradient 1, no decay: v_t = sum_{i<=t} mu^i, so after T steps
     * w = w0 - lr * sum_{t=0}^{T-1} (1 - mu^{t+1}) / (1 - mu) */
    net_t *net = s_net();
    const size_t n = net->n_params;
    const double mu = 0.9, lr = 0.1;
    sgd_t *s = sgd_new(net, mu, 0.0);
    ck_assert_ptr_nonnull(s);
    float *w = calloc(n, sizeof(float)), *g = malloc(n * sizeof(float));
    ck_assert(w && g);
    for (size_t j = 0; j < n; j++) g[j] = 1.0f;
    double want = 0.0;
    for (int t = 0; t < 20; t++) {
        sgd_step(s, w, g, lr);
        want -= (double)(float)lr * (1.0 - pow((float)mu, t + 1)) / (1.0 - (float)mu);
    }
    for (size_t j = 0; j < n; j++) ck_assert_msg(fabs(w[j] - want) <= 1e-5 * fabs(want), "%g vs %g", w[j], want);
    free(w);
    free(g);
    sgd_free(&s);
    net_free(&net);
}
END_TEST

/* Closed forms of the schedules (sgd.h), written independently. */
static double s_lr_ref(const sgd_lr_sched_t *s, long t) {
    double lr;
    switch (s->kind) {
    case SGD_LR_STEP: lr = s->every > 0 ? s->base * pow(s->gamma, floor((double)t / (double)s->every)) : s->base; break;
    case SGD_LR_COSINE:
        if (s->total <= 0) { lr = s->base; break; }
        lr = s->floor + (s->base - s->floor) * 0.5 * (1.0 + cos(3.14159265358979323846 * fmin((double)t, (double)s->total) / s->total));
        break;
    default: lr = s->base; break;
    }
    if (s->warmup > 0 && t < s->warmup) lr = lr * (double)(t + 1) / (double)s->warmup;
    return lr;
}

START_TEST(test_lr_at_schedules_match_formulas) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int draw = 0; draw < 50; draw++) {
        sgd_lr_sched_t s = {0};
        s.kind = (sgd_lr_schedule_t)rng_below(&r, 3);
        s.base = 0.01 + rng_uniform(&r);
        s.gamma = 0.1 + 0.8 * rng_uniform(&r);
        s.every = 1 + (long)rng_below(&r, 50);
        s.total = 1 + (long)rng_below(&r, 500);
        s.floor = s.base * 0.1 * rng_uniform(&r);
        s.warmup = rng_below(&r, 2) ? (long)rng_below(&r, 40) : 0;
        for (long t = 0; t < 700; t += 1 + (long)rng_below(&r, 7)) {
            double got = sgd_lr_at(&s, t), want = s_lr_ref(&s, t);
            ck_assert_msg(fabs(got - want) <= 1e-12 * fabs(want) + 1e-15,
                          "kind %d t=%ld: %.17g vs %.17g (seed=%llu)", s.kind, t, got, want, (unsigned long long)seed);
        }
    }
}
END_TEST

START_TEST(test_lr_at_landmarks) {
    sgd_lr_sched_t c = {.kind = SGD_LR_CONSTANT, .base = 0.3};
    ck_assert(sgd_lr_at(&c, 0) == 0.3 && sgd_lr_at(&c, 100000) == 0.3);
    /* step: 0.1 for t in [0, 10), 0.05 for [10, 20), 0.025 from 20 */
    sgd_lr_sched_t st = {.kind = SGD_LR_STEP, .base = 0.1, .gamma = 0.5, .every = 10};
    ck_assert_double_eq_tol(sgd_lr_at(&st, 9), 0.1, 1e-15);
    ck_assert_double_eq_tol(sgd_lr_at(&st, 10), 0.05, 1e-15);
    ck_assert_double_eq_tol(sgd_lr_at(&st, 25), 0.025, 1e-15);
    /* cosine: base at 0, midpoint halfway between base and floor, floor at and after total */
    sgd_lr_sched_t co = {.kind = SGD_LR_COSINE, .base = 1.0, .total = 100, .floor = 0.2};
    ck_assert_double_eq_tol(sgd_lr_at(&co, 0), 1.0, 1e-15);
    ck_assert_double_eq_tol(sgd_lr_at(&co, 50), 0.6, 1e-12);
    ck_assert_double_eq_tol(sgd_lr_at(&co, 100), 0.2, 1e-12);
    ck_assert_double_eq_tol(sgd_lr_at(&co, 1000), 0.2, 1e-12);
    /* warmup: linear from base/warmup at t = 0 to base at t = warmup - 1 */
    sgd_lr_sched_t wu = {.kind = SGD_LR_CONSTANT, .base = 0.4, .warmup = 4};
    ck_assert_double_eq_tol(sgd_lr_at(&wu, 0), 0.1, 1e-15);
    ck_assert_double_eq_tol(sgd_lr_at(&wu, 3), 0.4, 1e-15);
    ck_assert_double_eq_tol(sgd_lr_at(&wu, 4), 0.4, 1e-15);

    sgd_lr_schedule_t k;
    ck_assert_int_eq(sgd_lr_schedule_parse("constant", &k), 0);
    ck_assert_int_eq(k, SGD_LR_CONSTANT);
    ck_assert_int_eq(sgd_lr_schedule_parse("step", &k), 0);
    ck_assert_int_eq(k, SGD_LR_STEP);
    ck_assert_int_eq(sgd_lr_schedule_parse("cosine", &k), 0);
    ck_assert_int_eq(k, SGD_LR_COSINE);
    k = SGD_LR_STEP;
    ck_assert_int_eq(sgd_lr_schedule_parse("linear", &k), -EINVAL);
    ck_assert_int_eq(sgd_lr_schedule_parse("", &k), -EINVAL);
    ck_assert_int_eq(k, SGD_LR_STEP);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("sgd");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_sgd_step_matches_double_formula);
    tcase_add_test(tc, test_sgd_decay_only_on_fc_conv_weights);
    tcase_add_test(tc, test_sgd_momentum_accumulates_velocity);
    tcase_add_test(tc, test_lr_at_schedules_match_formulas);
    tcase_add_test(tc, test_lr_at_landmarks);
    suite_add_tcase(s, tc);
    return s;
}
