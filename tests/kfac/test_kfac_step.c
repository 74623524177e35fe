/* tests/kfac/test_kfac_step.c — step size, clipping, momentum, weight decay,
 * Polyak averaging, schedules and SP-NGD adaptive refresh
 * (common/kfac/kfac_step.c), against the formulas evaluated directly in double on
 * fresh random inputs. The seed is printed on failure; KFAC_TEST_SEED=<n>
 * replays a run.
 *
 * Tolerances: scalar formulas are evaluated in double on both sides, so they
 * agree to 1e-12 relative. Parameter updates run in float32 on O(1) values:
 * a few roundings per step, compared with 1e-6 relative to the largest
 * reference value. The update's tail (kfac_step_tail, kfac_step_dots,
 * kfac_step_copy_finite) is run on 1, 2 and 3 threads: the same floats on
 * each, and the reference's values within those tolerances; the dot
 * products, sums of products in double, within 1e-12 of the sum of their
 * magnitudes.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/kfac/kfac_step.h"
#include "common/kfac/kfac_refresh.h"
#include "common/kfac/kfac_schedule.h"
#include "common/nn/nn_par.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"

#define SEEDED()              \
    uint64_t seed = test_seed(); \
    rng_t rng;                \
    rng_seed(&rng, seed)

#define SEEDMSG (unsigned long long)seed

static void s_close(const char *what, double got, double want, double rtol, uint64_t seed) {
    ck_assert_msg(fabs(got - want) <= rtol * fabs(want) + 1e-300, "%s: got %.17g want %.17g, seed %llu", what, got,
                  want, SEEDMSG);
}

static void s_close_vec(const char *what, const float *got, const double *want, size_t n, double rtol,
                        uint64_t seed) {
    double scale = 1e-30;
    for (size_t i = 0; i < n; i++) if (fabs(want[i]) > scale) scale = fabs(want[i]);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= rtol * scale, "%s[%zu]: got %.9g want %.9g, seed %llu", what, i,
                      (double)got[i], want[i], SEEDMSG);
}

/* ---- KL step size ----------------------------------------------------------- */

START_TEST(test_kl_c_decays_every_period) {
    SEEDED();
    double c0 = 0.001 + rng_uniform(&rng), zeta = 0.5 + 0.49 * rng_uniform(&rng);
    long every = 1 + (long)rng_below(&rng, 50);
    for (long t = 0; t < 500; t += 7) s_close("c_k", kfac_step_kl_c(c0, zeta, t, every), c0 * pow(zeta, (double)(t / every)), 1e-12, seed);
    s_close("no decay", kfac_step_kl_c(c0, zeta, 1000, 0), c0, 0, seed);
}
END_TEST

START_TEST(test_kl_eta_matches_formula) {
    SEEDED();
    enum { N = 257 };
    float v[N], g[N];
    for (int rep = 0; rep < 100; rep++) {
        for (int i = 0; i < N; i++) {
            g[i] = (float)rng_normal(&rng);
            v[i] = (float)(g[i] * (0.1 + rng_uniform(&rng))); /* v = M g, M positive diagonal */
        }
        double vg_ref = 0.0;
        for (int i = 0; i < N; i++) vg_ref += (double)v[i] * g[i];
        double vg = kfac_step_dot(v, g, N);
        s_close("v^T g", vg, vg_ref, 1e-12, seed);
        double c = 1e-4 + 0.1 * rng_uniform(&rng), eta_max = 0.01 + rng_uniform(&rng), eta = -1.0;
        ck_assert_int_eq(kfac_step_kl_eta(vg, c, eta_max, &eta), 0);
        double want = fmin(eta_max, sqrt(c / vg_ref));
        s_close("eta", eta, want, 1e-12, seed);
        /* the defining property: squared Fisher norm eta^2 v^T F v <= c */
        ck_assert_msg(eta * eta * vg <= c * (1 + 1e-12), "eta^2 vg %g > c %g, seed %llu", eta * eta * vg, c, SEEDMSG);
    }
}
END_TEST

START_TEST(test_kl_eta_edge_cases) {
    double eta = -1.0;
    ck_assert_int_eq(kfac_step_kl_eta(0.0, 0.01, 2.0, &eta), 0);
    ck_assert(eta == 2.0); /* zero update: the cap */
    ck_assert_int_eq(kfac_step_kl_eta(-4.0, 0.01, 2.0, &eta), 0);
    ck_assert(fabs(eta - sqrt(0.01 / 4.0)) < 1e-15); /* |v^T g| */
    ck_assert_int_eq(kfac_step_kl_eta(NAN, 0.01, 2.0, &eta), -EDOM);
    ck_assert(eta == 0.0);
    eta = -1.0;
    ck_assert_int_eq(kfac_step_kl_eta(INFINITY, 0.01, 2.0, &eta), -EDOM);
    ck_assert(eta == 0.0);
    ck_assert_int_eq(kfac_step_kl_eta(1.0, -0.01, 2.0, &eta), -EINVAL);
    ck_assert_int_eq(kfac_step_kl_eta(1.0, 0.01, 0.0, &eta), -EINVAL);
    ck_assert_int_eq(kfac_step_kl_eta(1.0, 0.01, 1.0, NULL), -EINVAL);
    ck_assert_int_eq(kfac_step_kl_eta(1e-30, 0.01, 3.0, &eta), 0);
    ck_assert(eta == 3.0); /* tiny curvature: capped */
}
END_TEST

START_TEST(test_kl_clip_matches_eq18) {
    SEEDED();
    for (int rep = 0; rep < 100; rep++) {
        int L = 1 + (int)rng_below(&rng, 10);
        double vg[10], sum = 0.0;
        for (int i = 0; i < L; i++) {
            vg[i] = rng_normal(&rng) * pow(10.0, rng_normal(&rng));
            sum += fabs(vg[i]);
        }
        double lr = 0.001 + rng_uniform(&rng), kappa = 1e-4 + 0.01 * rng_uniform(&rng), nu = -1.0;
        ck_assert_int_eq(kfac_step_kl_clip(vg, L, lr, kappa, &nu), 0);
        s_close("nu", nu, fmin(1.0, sqrt(kappa / (lr * lr * sum))), 1e-12, seed);
    }
    double nu = -1.0, z[2] = {0.0, 0.0}, bad[2] = {1.0, NAN};
    ck_assert_int_eq(kfac_step_kl_clip(z, 2, 0.1, 0.001, &nu), 0);
    ck_assert(nu == 1.0);
    ck_assert_int_eq(kfac_step_kl_clip(bad, 2, 0.1, 0.001, &nu), -EDOM);
    ck_assert(nu == 0.0);
    ck_assert_int_eq(kfac_step_kl_clip(z, 2, 0.0, 0.001, &nu), -EINVAL);
    ck_assert_int_eq(kfac_step_kl_clip(NULL, 2, 0.1, 0.001, &nu), -EINVAL);
}
END_TEST

/* ---- weight decay, momentum, Polyak ----------------------------------------------- */

START_TEST(test_apply_momentum_and_weight_decay) {
    SEEDED();
    enum { N = 64 };
    float w[N], mom[N], v[N];
    double wr[N], mr[N];
    for (int i = 0; i < N; i++) {
        w[i] = (float)rng_normal(&rng);
        wr[i] = w[i];
        mom[i] = 0.0f;
        mr[i] = 0.0;
    }
    double mu = 0.9 * rng_uniform(&rng), wd = 0.01 + 0.1 * rng_uniform(&rng);
    for (int step = 0; step < 6; step++) {
        double st = 0.01 + 0.5 * rng_uniform(&rng);
        for (int i = 0; i < N; i++) v[i] = (float)rng_normal(&rng);
        ck_assert_int_eq(kfac_step_apply(w, mom, v, N, st, mu, wd), 0);
        for (int i = 0; i < N; i++) {
            mr[i] = mu * mr[i] + st * (v[i] + wd * wr[i]);
            wr[i] -= mr[i];
        }
        s_close_vec("w", w, wr, N, 1e-6, seed);
    }
    ck_assert_int_eq(kfac_step_apply(w, mom, v, N, 0.1, 1.0, 0.0), -EINVAL);
    ck_assert_int_eq(kfac_step_apply(w, mom, v, N, NAN, 0.9, 0.0), -EINVAL);

    /* gradient-side weight decay and the damping fold */
    float g[N];
    double gr[N];
    for (int i = 0; i < N; i++) g[i] = (float)rng_normal(&rng), gr[i] = g[i] + (double)(float)wd * w[i];
    kfac_step_add_weight_decay(g, w, N, (float)wd);
    s_close_vec("g + wd w", g, gr, N, 1e-6, seed);
    ck_assert(kfac_step_effective_damping(0.03, 0.001, KFAC_WD_DAMPING) == 0.03 + 0.001);
    ck_assert(kfac_step_effective_damping(0.03, 0.001, KFAC_WD_GRADIENT) == 0.03);
    ck_assert(kfac_step_effective_damping(0.03, 0.001, KFAC_WD_DECOUPLED) == 0.03);
}
END_TEST

START_TEST(test_polyak_average) {
    SEEDED();
    enum { N = 33 };
    float w[N], avg[N];
    double ref[N];
    double d = 0.5 + 0.49 * rng_uniform(&rng);
    long count = 0;
    for (int step = 0; step < 8; step++) {
        for (int i = 0; i < N; i++) w[i] = (float)rng_normal(&rng);
        ck_assert_int_eq(kfac_step_polyak(avg, w, N, d, &count), 0);
        for (int i = 0; i < N; i++) ref[i] = step == 0 ? w[i] : d * ref[i] + (1.0 - d) * w[i];
        s_close_vec("polyak", avg, ref, N, 1e-6, seed);
        ck_assert_int_eq(count, step + 1);
    }
    ck_assert_int_eq(kfac_step_polyak(avg, w, N, 1.0, &count), -EINVAL);
    ck_assert_int_eq(kfac_step_polyak(avg, w, N, 0.9, NULL), -EINVAL);
}
END_TEST

/* ---- schedules ------------------------------------------------------------------------ */

START_TEST(test_schedule_intervals_and_damping) {
    kfac_schedule_t s = {
        .fac_interval = 10, .inv_interval = 100, .damping = 0.003,
        .n_interval_milestones = 2, .interval_milestones = {1000, 3000}, .interval_factor = 0.5,
        .n_damping_milestones = 3, .damping_milestones = {500, 1000, 2000}, .damping_factor = 0.1,
    };
    int fi, ii;
    double dmp;
    ck_assert_int_eq(kfac_schedule_at(&s, 0, &fi, &ii, &dmp), 0);
    ck_assert(fi == 10 && ii == 100 && dmp == 0.003);
    ck_assert_int_eq(kfac_schedule_at(&s, 999, &fi, &ii, &dmp), 0);
    ck_assert(fi == 10 && ii == 100 && fabs(dmp - 0.0003) < 1e-15);
    ck_assert_int_eq(kfac_schedule_at(&s, 1000, &fi, &ii, &dmp), 0);
    ck_assert(fi == 5 && ii == 50 && fabs(dmp - 0.00003) < 1e-16);
    ck_assert_int_eq(kfac_schedule_at(&s, 5000, &fi, &ii, &dmp), 0);
    ck_assert(fi == 3 && ii == 25 && fabs(dmp - 0.000003) < 1e-17); /* 2.5 rounds to 3 */
    s.interval_factor = 0.01;
    ck_assert_int_eq(kfac_schedule_at(&s, 5000, &fi, NULL, NULL), 0);
    ck_assert_int_eq(fi, 1); /* never below 1 */
    ck_assert(kfac_schedule_due(200, 50) && !kfac_schedule_due(201, 50) && !kfac_schedule_due(5, 0));
    /* invalid schedules */
    s.interval_milestones[1] = 1000;
    ck_assert_int_eq(kfac_schedule_check(&s), -EINVAL);
    s.interval_milestones[1] = 3000;
    ck_assert_int_eq(kfac_schedule_check(&s), 0);
    s.fac_interval = 0;
    ck_assert_int_eq(kfac_schedule_at(&s, 1, &fi, &ii, &dmp), -EINVAL);
    s.fac_interval = 10;
    ck_assert_int_eq(kfac_schedule_at(&s, -1, &fi, &ii, &dmp), -EINVAL);
    s.n_damping_milestones = KFAC_SCHEDULE_MAX + 1;
    ck_assert_int_eq(kfac_schedule_check(&s), -EINVAL);
}
END_TEST

/* ---- adaptive refresh ---------------------------------------------------------------------- */

START_TEST(test_refresh_distance) {
    SEEDED();
    enum { N = 50 };
    float x[N], r[N];
    double num = 0.0, den = 0.0;
    for (int i = 0; i < N; i++) {
        x[i] = (float)rng_normal(&rng);
        r[i] = (float)rng_normal(&rng);
        num += ((double)x[i] - r[i]) * ((double)x[i] - r[i]);
        den += (double)r[i] * r[i];
    }
    s_close("distance", kfac_refresh_distance(x, r, N), sqrt(num / den), 1e-12, seed);
    float z[3] = {0, 0, 0}, o[3] = {0, 1, 0};
    ck_assert(kfac_refresh_distance(z, z, 3) == 0.0);
    ck_assert(isinf(kfac_refresh_distance(o, z, 3)));
}
END_TEST

/* Algorithm 2 branch by branch on crafted values: base B random,
 * X = B (1 + e) so ||X - Y|| / ||Y|| is known exactly in real arithmetic. */
START_TEST(test_refresh_interval_branches) {
    SEEDED();
    enum { N = 40 };
    float b[N], x1[N], x2[N], x[N];
    for (int i = 0; i < N; i++) b[i] = (float)rng_normal(&rng);
    const double alpha = 0.1;
    /* similar to both: Delta = Delta_-1 + Delta_-2 */
    for (int i = 0; i < N; i++) x2[i] = b[i], x1[i] = b[i] * 1.02f, x[i] = b[i] * 1.04f;
    int d = 5, dp = 3;
    ck_assert_int_eq(kfac_refresh_interval(x, x1, x2, N, alpha, &d, &dp), 0);
    ck_assert(d == 8 && dp == 5);
    /* similar to X_-1 (0.07/1.07 = 0.065) but not to X_-2 (0.14): Delta = Delta_-1 */
    for (int i = 0; i < N; i++) x2[i] = b[i], x1[i] = b[i] * 1.07f, x[i] = b[i] * 1.14f;
    d = 5, dp = 3;
    ck_assert_int_eq(kfac_refresh_interval(x, x1, x2, N, alpha, &d, &dp), 0);
    ck_assert(d == 5 && dp == 5);
    /* not similar to X_-1 (0.2): Delta = max(1, floor(Delta_-1 / 2)) */
    for (int i = 0; i < N; i++) x1[i] = b[i], x[i] = b[i] * 1.2f;
    d = 9, dp = 4;
    ck_assert_int_eq(kfac_refresh_interval(x, x1, x2, N, alpha, &d, &dp), 0);
    ck_assert(d == 4 && dp == 9);
    d = 1, dp = 1;
    ck_assert_int_eq(kfac_refresh_interval(x, x1, x2, N, alpha, &d, &dp), 0);
    ck_assert(d == 1 && dp == 1);
    /* missing history counts as not similar */
    d = 6, dp = 2;
    ck_assert_int_eq(kfac_refresh_interval(x, NULL, NULL, N, alpha, &d, &dp), 0);
    ck_assert(d == 3 && dp == 6);
    d = 6, dp = 2;
    ck_assert_int_eq(kfac_refresh_interval(x, x, NULL, N, alpha, &d, &dp), 0);
    ck_assert(d == 6 && dp == 6);
    d = 0;
    ck_assert_int_eq(kfac_refresh_interval(x, x1, x2, N, alpha, &d, &dp), -EINVAL);
}
END_TEST

/* Algorithm 1 with the tracker: an unchanging statistic is refreshed at
 * growing (Fibonacci) intervals; a jump halves the interval. */
START_TEST(test_refresh_tracker_sequences) {
    SEEDED();
    enum { N = 16 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = (float)rng_normal(&rng);
    kfac_refresh_t *r = kfac_refresh_new(N, 0.1, 1);
    ck_assert_ptr_nonnull(r);
    const int want[] = {1, 1, 2, 3, 5, 8, 13};
    long t = 1, refreshes = 0;
    for (; t < 10000 && refreshes < 7; t++) {
        if (!kfac_refresh_due(r, t)) continue;
        ck_assert_int_eq(r->next, t);
        int d = kfac_refresh_record(r, x, t);
        ck_assert_int_eq(d, want[refreshes]);
        ck_assert_int_eq(r->next, t + d);
        refreshes++;
    }
    ck_assert_int_eq(refreshes, 7);
    /* a big change: 13 -> 6 -> 3 while it keeps changing, then growth again */
    const int want2[] = {6, 3, 1, 1, 2, 3, 5};
    for (int k = 0; k < 7; k++) {
        if (k < 3) for (int i = 0; i < N; i++) x[i] *= 2.0f;
        int d = kfac_refresh_record(r, x, r->next);
        ck_assert_msg(d == want2[k], "step %d: interval %d, want %d, seed %llu", k, d, want2[k], SEEDMSG);
    }
    kfac_refresh_free(&r);
    ck_assert_ptr_null(r);
    kfac_refresh_free(&r);
    ck_assert_ptr_null(kfac_refresh_new(0, 0.1, 0));
    ck_assert_ptr_null(kfac_refresh_new(4, 0.0, 0));
}
END_TEST

/* ---- the update's tail (kfac_step_tail, kfac_step_dots, kfac_step_copy_finite) ---- */

/* s_close_vec with one assertion (Check records every assertion it
 * passes: one per element of a long array costs seconds). */
static void s_close_long(const char *what, const float *got, const double *want, size_t n, double rtol, uint64_t seed) {
    double scale = 1e-30, worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) if (fabs(want[i]) > scale) scale = fabs(want[i]);
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= worst)) worst = fabs(got[i] - want[i]), at = i;
    ck_assert_msg(worst <= rtol * scale, "%s[%zu]: got %.9g want %.9g, seed %llu", what, at, (double)got[at], want[at],
                  SEEDMSG);
}

/* Pools of 1 (NULL), 2 and 3 threads: each pass must give the same floats
 * on every one, and the reference's values within the tolerance. */
static nn_par_t *s_pool(int n_threads) {
    if (n_threads == 1) return NULL;
    nn_par_t *p = nn_par_new(n_threads);
    ck_assert_ptr_nonnull(p);
    return p;
}

START_TEST(test_step_tail_matches_reference) {
    SEEDED();
    /* over the pool's threshold (2^18), not a multiple of a cache line or a block */
    const size_t n = 270001 + rng_below(&rng, 5000);
    float *w0 = malloc(n * sizeof(float)), *m0 = malloc(n * sizeof(float)), *a0 = malloc(n * sizeof(float));
    float *v = malloc(n * sizeof(float)), *mask = malloc(n * sizeof(float));
    float *w = malloc(n * sizeof(float)), *m = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float));
    float *w1 = malloc(n * sizeof(float)), *m1 = malloc(n * sizeof(float)), *a1 = malloc(n * sizeof(float));
    double *rw = malloc(n * sizeof(double)), *rm = malloc(n * sizeof(double)), *ra = malloc(n * sizeof(double));
    for (int rep = 0; rep < 8; rep++) {
        const kfac_step_form_t form = rep % 2 ? KFAC_STEP_FORM_SGD : KFAC_STEP_FORM_KFAC;
        const double step = 1e-3 + 0.5 * rng_uniform(&rng), mu = rep % 4 < 2 ? 0.9 * rng_uniform(&rng) : 0.0;
        const double wd = rep % 3 ? 1e-3 + 0.1 * rng_uniform(&rng) : 0.0, dec = 0.99 * rng_uniform(&rng);
        const long count0 = rep < 2 ? 0 : 1 + (long)rng_below(&rng, 10);
        for (size_t i = 0; i < n; i++) {
            w0[i] = (float)rng_normal(&rng);
            m0[i] = (float)(0.1 * rng_normal(&rng));
            a0[i] = (float)rng_normal(&rng);
            v[i] = (float)rng_normal(&rng);
            mask[i] = rng_below(&rng, 3) ? 1.0f : 0.0f;
        }
        /* the reference, in double, from the formulas of kfac_step.h */
        for (size_t i = 0; i < n; i++) {
            double d = (double)v[i] + wd * mask[i] * w0[i];
            double mm = form == KFAC_STEP_FORM_SGD ? mu * m0[i] + d : mu * m0[i] + step * d;
            rm[i] = mm;
            rw[i] = form == KFAC_STEP_FORM_SGD ? w0[i] - step * mm : w0[i] - mm;
            ra[i] = count0 == 0 ? rw[i] : dec * a0[i] + (1.0 - dec) * rw[i];
        }
        for (int threads = 1; threads <= 3; threads++) {
            nn_par_t *par = s_pool(threads);
            memcpy(w, w0, n * sizeof(float));
            memcpy(m, m0, n * sizeof(float));
            memcpy(a, a0, n * sizeof(float));
            long count = count0;
            kfac_step_tail_t t = {.form = form, .n = n, .w = w, .mom = m, .v = v, .wd_mask = mask, .step = step,
                                  .momentum = mu, .wd = wd, .avg = a, .polyak_decay = dec, .polyak_count = &count};
            ck_assert_int_eq(kfac_step_tail(&t, par), 0);
            nn_par_free(&par);
            ck_assert_int_eq(count, count0 + 1);
            s_close_long("tail w", w, rw, n, 1e-6, seed);
            s_close_long("tail momentum", m, rm, n, 1e-6, seed);
            s_close_long("tail polyak", a, ra, n, 1e-6, seed);
            if (threads == 1) {
                memcpy(w1, w, n * sizeof(float));
                memcpy(m1, m, n * sizeof(float));
                memcpy(a1, a, n * sizeof(float));
            } else {
                ck_assert_msg(!memcmp(w, w1, n * sizeof(float)) && !memcmp(m, m1, n * sizeof(float)) &&
                                  !memcmp(a, a1, n * sizeof(float)),
                              "tail on %d threads differs from one thread, seed %llu", threads, SEEDMSG);
            }
        }
    }
    /* bad arguments change nothing */
    memcpy(w, w0, n * sizeof(float));
    long count = 3;
    kfac_step_tail_t bad = {.form = KFAC_STEP_FORM_KFAC, .n = n, .w = w, .mom = m, .v = v, .wd_mask = NULL,
                            .step = 0.1, .momentum = 0.5, .wd = 0.1, .avg = a, .polyak_decay = 0.9,
                            .polyak_count = &count};
    ck_assert_int_eq(kfac_step_tail(&bad, NULL), -EINVAL); /* wd without a mask */
    bad.wd = 0.0;
    bad.momentum = 1.0;
    ck_assert_int_eq(kfac_step_tail(&bad, NULL), -EINVAL);
    bad.momentum = 0.5;
    bad.step = NAN;
    ck_assert_int_eq(kfac_step_tail(&bad, NULL), -EINVAL);
    bad.step = 0.1;
    bad.polyak_decay = 1.0;
    ck_assert_int_eq(kfac_step_tail(&bad, NULL), -EINVAL);
    ck_assert_int_eq(count, 3);
    ck_assert(!memcmp(w, w0, n * sizeof(float)));
    free(w0), free(m0), free(a0), free(v), free(mask), free(w), free(m), free(a), free(w1), free(m1), free(a1);
    free(rw), free(rm), free(ra);
}
END_TEST

START_TEST(test_step_dots_match_reference_on_any_pool) {
    SEEDED();
    enum { N_SEG = 6 };
    kfac_step_seg_t seg[N_SEG];
    size_t off = 0;
    for (int i = 0; i < N_SEG; i++) {
        /* short ones, one chunk exactly, and several chunks with a ragged end */
        size_t len = i == 2   ? KFAC_STEP_DOT_CHUNK
                     : i == 4 ? (1 << 18) + rng_below(&rng, KFAC_STEP_DOT_CHUNK) /* the pool's threshold in all */
                     : i % 2  ? 1 + rng_below(&rng, 300)
                              : 1 + rng_below(&rng, 5 * KFAC_STEP_DOT_CHUNK);
        off += rng_below(&rng, 50); /* gaps between segments are not read */
        seg[i].off = off;
        seg[i].len = len;
        off += len;
    }
    const size_t n = off;
    float *v = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        v[i] = (float)rng_normal(&rng);
        g[i] = (float)(rng_normal(&rng) * exp(2.0 * rng_normal(&rng)));
    }
    size_t n_part = kfac_step_dots_parts(seg, N_SEG);
    double *part = malloc(n_part * sizeof(double)), dot1[N_SEG], dot[N_SEG];
    ck_assert_int_eq(kfac_step_dots(v, g, seg, N_SEG, dot, part, n_part - 1, NULL), -EINVAL); /* too little scratch */
    for (int threads = 1; threads <= 3; threads++) {
        nn_par_t *par = s_pool(threads);
        ck_assert_int_eq(kfac_step_dots(v, g, seg, N_SEG, dot, part, n_part, par), 0);
        nn_par_free(&par);
        for (int i = 0; i < N_SEG; i++) {
            /* the reference: every product exact in double, summed in long double */
            long double ref = 0.0L, mag = 0.0L;
            for (size_t j = seg[i].off; j < seg[i].off + seg[i].len; j++) {
                ref += (long double)((double)v[j] * (double)g[j]);
                mag += fabsl((long double)((double)v[j] * (double)g[j]));
            }
            ck_assert_msg(fabs(dot[i] - (double)ref) <= 1e-12 * (double)mag, "segment %d: got %.17g want %.17Lg, seed %llu",
                          i, dot[i], ref, SEEDMSG);
            if (threads == 1) dot1[i] = dot[i];
            else ck_assert_msg(dot[i] == dot1[i], "segment %d on %d threads: %.17g against %.17g, seed %llu", i,
                               threads, dot[i], dot1[i], SEEDMSG);
        }
    }
    /* a direction that is not finite shows in its segment's sum only */
    int bad = (int)rng_below(&rng, N_SEG);
    v[seg[bad].off + rng_below(&rng, seg[bad].len)] = rng_below(&rng, 2) ? NAN : -INFINITY;
    ck_assert_int_eq(kfac_step_dots(v, g, seg, N_SEG, dot, part, n_part, NULL), 0);
    for (int i = 0; i < N_SEG; i++) ck_assert_int_eq(isfinite(dot[i]) != 0, i != bad);
    free(v), free(g), free(part);
}
END_TEST

/* kfac_step_norm2 against a long double sum in order: each square of a
 * float is exact in double, so the only error is the additions', at most
 * n ulps of the sum (bound n * 2^-52 * sum; the 8 partial sums make it
 * far smaller). Lengths 0 to 40 cover every remainder after the blocks
 * of 8; then a few long ones, values over 12 orders of magnitude. */
START_TEST(test_step_norm2_matches_long_double) {
    SEEDED();
    ck_assert(kfac_step_norm2(NULL, 5) == 0.0);
    for (int rep = 0; rep < 48; rep++) {
        const size_t n = rep <= 40 ? (size_t)rep : (size_t)rng_below(&rng, 200000) + 1;
        float *x = malloc((n ? n : 1) * sizeof(float));
        ck_assert_ptr_nonnull(x);
        long double want = 0.0L;
        for (size_t i = 0; i < n; i++) {
            x[i] = (float)(rng_normal(&rng) * pow(10.0, (double)rng_below(&rng, 13) - 6.0));
            want += (long double)x[i] * (long double)x[i];
        }
        const double got = kfac_step_norm2(x, n);
        const double tol = (double)n * ldexp(1.0, -52) * (double)want;
        ck_assert_msg(fabs(got - (double)want) <= tol, "n %zu: %.17g, want %.17Lg (tol %.3g, seed %llu)", n, got,
                      want, tol, SEEDMSG);
        free(x);
    }
}
END_TEST

START_TEST(test_step_copy_finite_finds_the_first) {
    SEEDED();
    const size_t n = 300000 + rng_below(&rng, 1000); /* over the pool's threshold */
    float *src = malloc(n * sizeof(float)), *dst = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) src[i] = (float)rng_normal(&rng);
    for (int threads = 1; threads <= 3; threads++) {
        nn_par_t *par = s_pool(threads);
        memset(dst, 0, n * sizeof(float));
        ck_assert_uint_eq(kfac_step_copy_finite(dst, src, n, par), n);
        ck_assert(!memcmp(dst, src, n * sizeof(float)));
        /* two bad values, the later one in another thread's range as often as not */
        size_t i1 = rng_below(&rng, n), i2 = rng_below(&rng, n);
        float s1 = src[i1], s2 = src[i2];
        src[i1] = NAN;
        src[i2] = INFINITY;
        size_t want = i1 < i2 ? i1 : i2;
        ck_assert_uint_eq(kfac_step_copy_finite(NULL, src, n, par), want);
        ck_assert_uint_eq(kfac_step_copy_finite(dst, src, n, par), want);
        src[i2] = s2;
        src[i1] = s1;
        nn_par_free(&par);
    }
    ck_assert_uint_eq(kfac_step_copy_finite(NULL, src, 0, NULL), 0);
    free(src), free(dst);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("kfac_step");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30); /* the tail's tests start pools of threads on a machine others share */
    tcase_add_test(tc, test_kl_c_decays_every_period);
    tcase_add_test(tc, test_kl_eta_matches_formula);
    tcase_add_test(tc, test_kl_eta_edge_cases);
    tcase_add_test(tc, test_kl_clip_matches_eq18);
    tcase_add_test(tc, test_apply_momentum_and_weight_decay);
    tcase_add_test(tc, test_polyak_average);
    tcase_add_test(tc, test_step_tail_matches_reference);
    tcase_add_test(tc, test_step_dots_match_reference_on_any_pool);
    tcase_add_test(tc, test_step_copy_finite_finds_the_first);
    tcase_add_test(tc, test_step_norm2_matches_long_double);
    tcase_add_test(tc, test_schedule_intervals_and_damping);
    tcase_add_test(tc, test_refresh_distance);
    tcase_add_test(tc, test_refresh_interval_branches);
    tcase_add_test(tc, test_refresh_tracker_sequences);
    suite_add_tcase(s, tc);
    return s;
}
