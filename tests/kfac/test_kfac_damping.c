/* tests/kfac/test_kfac_damping.c — adaptive damping and the staleness
 * scalings (common/kfac/kfac_damping.c):
 *  - the quadratic model's recursion against g^T delta + 1/2 delta^T F delta
 *    computed directly in double, with momentum, on a fixed random SPD F;
 *  - g^T m with factored (low-rank) weight gradients against the densified
 *    product in double;
 *  - the rule's three branches and its bounds;
 *  - the window's rho against a brute-force reimplementation of its
 *    definition (every difference of the observed sum, every step it spans);
 *  - the whole rule on a quadratic with a known optimum, in both regimes:
 *    a curvature model that underestimates H (steps too long: lambda must
 *    rise) and an exact one with far too much damping (steps too short:
 *    lambda must fall); in both the iterate must reach the optimum;
 *  - the gradient age weight and the inverse-age bound divisor.
 * Fresh random inputs each run; the seed is printed on failure and
 * KFAC_TEST_SEED=<n> replays it.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/kfac/kfac_damping.h"
#include "tests/lib/seed.h"

#define SEEDED()                 \
    uint64_t seed = test_seed(); \
    rng_t rng;                   \
    rng_seed(&rng, seed)
#define SEEDMSG (unsigned long long)seed

#define N 8

static double s_sym(rng_t *r) { return 2.0 * rng_uniform(r) - 1.0; }

/* A random SPD matrix Q diag(ev) Q^T with eigenvalues in [lo, hi] (Q from
 * Gram-Schmidt on random vectors), n x n row-major. */
static void s_spd(rng_t *r, double *A, int n, double lo, double hi) {
    double Q[N * N], ev[N];
    for (int j = 0; j < n; j++) {
        double *q = &Q[j * n]; /* row j = vector j */
        for (int i = 0; i < n; i++) q[i] = s_sym(r);
        for (int k = 0; k < j; k++) {
            double d = 0.0;
            for (int i = 0; i < n; i++) d += q[i] * Q[k * n + i];
            for (int i = 0; i < n; i++) q[i] -= d * Q[k * n + i];
        }
        double nn = 0.0;
        for (int i = 0; i < n; i++) nn += q[i] * q[i];
        for (int i = 0; i < n; i++) q[i] /= sqrt(nn);
        ev[j] = lo + (hi - lo) * (n > 1 ? (double)j / (n - 1) : 0.0);
    }
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            double s = 0.0;
            for (int k = 0; k < n; k++) s += Q[k * n + a] * ev[k] * Q[k * n + b];
            A[a * n + b] = s;
        }
}

/* x = A^-1 b for SPD A (n x n), by Cholesky in double. */
static void s_solve(const double *A, const double *b, double *x, int n) {
    double L[N * N] = {0}, y[N];
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = A[i * n + j];
            for (int k = 0; k < j; k++) s -= L[i * n + k] * L[j * n + k];
            L[i * n + j] = i == j ? sqrt(s) : s / L[j * n + j];
        }
    for (int i = 0; i < n; i++) {
        double s = b[i];
        for (int k = 0; k < i; k++) s -= L[i * n + k] * y[k];
        y[i] = s / L[i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = y[i];
        for (int k = i + 1; k < n; k++) s -= L[k * n + i] * x[k];
        x[i] = s / L[i * n + i];
    }
}

static double s_dot(const double *a, const double *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static double s_quad_form(const double *A, const double *x, int n) {
    double s = 0.0;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) s += x[a] * A[a * n + b] * x[b];
    return s;
}

START_TEST(test_damping_quad_matches_direct) {
    SEEDED();
    double F[N * N];
    s_spd(&rng, F, N, 0.1, 4.0);
    double m[N] = {0}, g[N], v[N];
    const double mu = 0.5 + 0.45 * rng_uniform(&rng);
    kfac_quad_t qs = {0};
    for (int t = 0; t < 30; t++) {
        for (int i = 0; i < N; i++) g[i] = s_sym(&rng);
        s_solve(F, g, v, N);
        const double eta = 0.05 + rng_uniform(&rng);
        const double gm = s_dot(g, m, N), vg = s_dot(v, g, N);
        const double got = kfac_quad_step(&qs, eta, vg, gm, mu);
        double delta[N];
        for (int i = 0; i < N; i++) {
            m[i] = mu * m[i] + eta * v[i];
            delta[i] = -m[i];
        }
        const double want = s_dot(g, delta, N) + 0.5 * s_quad_form(F, delta, N);
        ck_assert_msg(fabs(got - want) <= 1e-9 * (fabs(want) + 1e-12),
                      "step %d: model change %.12g, direct %.12g (seed %llu)", t, got, want, SEEDMSG);
    }
    ck_assert_msg(isnan(kfac_quad_step(&qs, NAN, 1.0, 0.0, 0.9)) && qs.q == 0.0, "NaN input must reset the model");
}
END_TEST

START_TEST(test_damping_grad_dot_lowrank) {
    SEEDED();
    const int n_out = 5, n_in = 7, rows = 4, off = 3;
    const size_t n = off + (size_t)n_out * n_in + 2;
    float *g = calloc(n, sizeof(float)), *m = calloc(n, sizeof(float));
    float D[4 * 5], X[4 * 7];
    for (size_t i = 0; i < n; i++) {
        g[i] = (float)s_sym(&rng);
        m[i] = (float)s_sym(&rng);
    }
    for (int i = 0; i < rows * n_out; i++) D[i] = (float)s_sym(&rng);
    for (int i = 0; i < rows * n_in; i++) X[i] = (float)s_sym(&rng);
    /* the dense gradient is zero in the factored weight's slice */
    for (int i = 0; i < n_out * n_in; i++) g[off + i] = 0.0f;
    kfac_lowrank_t e = {.layer = 0, .n_out = n_out, .n_in = n_in, .w_off = off, .n_rows = rows, .cap_rows = rows,
                        .D = D, .X = X};
    kfac_lowrank_set_t set = {.n = 1, .v = &e};
    double want = 0.0;
    for (size_t i = 0; i < n; i++) want += (double)g[i] * m[i];
    for (int o = 0; o < n_out; o++)
        for (int i = 0; i < n_in; i++) {
            double w = 0.0; /* (D^T X)[o][i] */
            for (int r = 0; r < rows; r++) w += (double)D[r * n_out + o] * X[r * n_in + i];
            want += w * m[off + (size_t)o * n_in + i];
        }
    const double got = kfac_quad_grad_dot(g, m, n, &set);
    ck_assert_msg(fabs(got - want) <= 1e-5 * (fabs(want) + 1.0), "g^T m %.9g, densified %.9g (seed %llu)", got, want,
                  SEEDMSG);
    /* without the factored rows: the dense part alone */
    double dense = 0.0;
    for (size_t i = 0; i < n; i++) dense += (double)g[i] * m[i];
    ck_assert_double_eq_tol(kfac_quad_grad_dot(g, m, n, NULL), dense, 1e-5 * (fabs(dense) + 1.0));
    free(g);
    free(m);
}
END_TEST

START_TEST(test_damping_rule_branches) {
    const double omega = pow(19.0 / 20.0, 5);
    ck_assert_double_eq_tol(kfac_lm_rule(1.0, 0.9, omega, 1e-6, 1e6), omega, 1e-15);       /* good model: less damping */
    ck_assert_double_eq_tol(kfac_lm_rule(1.0, 0.1, omega, 1e-6, 1e6), 1.0 / omega, 1e-15); /* bad: more */
    ck_assert_double_eq_tol(kfac_lm_rule(1.0, -3.0, omega, 1e-6, 1e6), 1.0 / omega, 1e-15); /* loss rose */
    ck_assert_double_eq(kfac_lm_rule(1.0, 0.5, omega, 1e-6, 1e6), 1.0);            /* in between: kept */
    ck_assert_double_eq(kfac_lm_rule(1.0, NAN, omega, 1e-6, 1e6), 1.0);
    ck_assert_double_eq(kfac_lm_rule(1.0, 0.9, omega, 0.99, 1e6), 0.99);  /* the lower bound */
    ck_assert_double_eq(kfac_lm_rule(1.0, 0.1, omega, 1e-6, 1.01), 1.01); /* the upper bound */
    kfac_lm_opts_t o = {.interval = 0, .decay = 0.95, .lo = 1e-4, .hi = 1.0};
    char err[128];
    ck_assert_int_lt(kfac_lm_check(&o, err, sizeof err), 0);
    o.interval = 5;
    o.decay = 1.0;
    ck_assert_int_lt(kfac_lm_check(&o, err, sizeof err), 0);
    o.decay = 0.95;
    o.hi = 1e-5;
    ck_assert_int_lt(kfac_lm_check(&o, err, sizeof err), 0);
    o.hi = 1.0;
    ck_assert_int_eq(kfac_lm_check(&o, err, sizeof err), 0);
}
END_TEST

/* rho of the window loss[0 .. 2T-1], pred[0 .. 2T-1] by the definition */
static double s_ref_rho(const double *loss, const double *pred, int T) {
    double obs = 0.0, pr = 0.0;
    for (int i = 0; i < T; i++) {
        obs += loss[T + i] - loss[i];
        for (int j = i; j <= i + T - 1; j++) pr += pred[j];
    }
    return (obs / T) / (pr / T);
}

START_TEST(test_damping_window_matches_bruteforce) {
    SEEDED();
    const int T = 1 + (int)rng_below(&rng, 9);
    kfac_lm_opts_t o = {.interval = T, .decay = 0.9, .lo = 1e-9, .hi = 1e9};
    kfac_lm_t lm;
    ck_assert_int_eq(kfac_lm_init(&lm, &o), 0);
    const int n = 12 * T;
    double *loss = malloc(sizeof(double) * n), *pred = malloc(sizeof(double) * n);
    double lambda = 1.0;
    int decisions = 0;
    for (int t = 0; t < n; t++) {
        loss[t] = 2.0 - 0.01 * t + 0.02 * s_sym(&rng);
        pred[t] = -0.01 * (0.2 + rng_uniform(&rng));
        double before = lambda;
        int d = kfac_lm_observe(&lm, 100 + t, loss[t], pred[t], &lambda);
        ck_assert_int_ge(d, 0);
        /* a decision exactly when 2T versions are in and T more since the last */
        const int due = t + 1 >= 2 * T && (t + 1 - 2 * T) % T == 0;
        ck_assert_msg(d == due, "t = %d, T = %d: decision %d, expected %d (seed %llu)", t, T, d, due, SEEDMSG);
        if (!d) {
            ck_assert_double_eq(lambda, before);
            continue;
        }
        decisions++;
        const double want = s_ref_rho(loss + t + 1 - 2 * T, pred + t + 1 - 2 * T, T);
        ck_assert_msg(fabs(lm.rho - want) <= 1e-9 * (fabs(want) + 1e-12), "rho %.12g, reference %.12g (seed %llu)",
                      lm.rho, want, SEEDMSG);
        ck_assert_double_eq_tol(lambda, kfac_lm_rule(before, want, lm.omega, o.lo, o.hi), 1e-12 * lambda);
    }
    ck_assert_int_eq(decisions, 11);
    /* a gap in the versions starts the window again */
    ck_assert_int_eq(kfac_lm_observe(&lm, 5000, 1.0, -0.1, &lambda), 0);
    ck_assert_int_eq(lm.n, 1);
    /* a window whose model predicts no decrease is skipped */
    kfac_lm_reset(&lm);
    uint64_t skipped = lm.n_skipped;
    for (int t = 0; t < 2 * T; t++) ck_assert_int_eq(kfac_lm_observe(&lm, t, 1.0, 0.0, &lambda), 0);
    ck_assert_uint_eq(lm.n_skipped, skipped + 1);
    kfac_lm_release(&lm);
    free(loss);
    free(pred);
}
END_TEST

/* Damped-Newton iterations on h(x) = 1/2 x^T H x - b^T x (optimum H^-1 b)
 * with the curvature model s H + lambda I, lambda set by the rule from the
 * exact losses and kfac_quad_step's predictions (no momentum, eta = 1).
 * Returns the final distance to the optimum relative to the start's;
 * *lambda_out the final damping, *ups / *downs the rule's moves. */
static double s_run_quadratic(rng_t *rng, double s, double lambda0, double decay, int T, int steps, double *lambda_out,
                              uint64_t *ups, uint64_t *downs) {
    double H[N * N], b[N], xs[N], x[N] = {0};
    s_spd(rng, H, N, 0.5, 5.0);
    for (int i = 0; i < N; i++) b[i] = s_sym(rng);
    s_solve(H, b, xs, N);
    double d0 = 0.0;
    for (int i = 0; i < N; i++) d0 += xs[i] * xs[i];
    kfac_lm_opts_t o = {.interval = T, .decay = decay, .lo = 1e-8, .hi = 1e4};
    kfac_lm_t lm;
    ck_assert_int_eq(kfac_lm_init(&lm, &o), 0);
    kfac_quad_t qs = {0};
    double lambda = lambda0;
    for (int t = 0; t < steps; t++) {
        double g[N], Hx[N], Fd[N * N], v[N];
        for (int i = 0; i < N; i++) {
            Hx[i] = 0.0;
            for (int j = 0; j < N; j++) Hx[i] += H[i * N + j] * x[j];
            g[i] = Hx[i] - b[i];
        }
        const double loss = 0.5 * s_dot(x, Hx, N) - s_dot(b, x, N);
        for (int i = 0; i < N * N; i++) Fd[i] = s * H[i];
        for (int i = 0; i < N; i++) Fd[i * N + i] += lambda;
        s_solve(Fd, g, v, N);
        const double pred = kfac_quad_step(&qs, 1.0, s_dot(v, g, N), 0.0, 0.0);
        for (int i = 0; i < N; i++) x[i] -= v[i];
        ck_assert_int_ge(kfac_lm_observe(&lm, t, loss, pred, &lambda), 0);
    }
    double d = 0.0;
    for (int i = 0; i < N; i++) d += (x[i] - xs[i]) * (x[i] - xs[i]);
    *lambda_out = lambda;
    *ups = lm.n_up;
    *downs = lm.n_down;
    kfac_lm_release(&lm);
    return sqrt(d / d0);
}

START_TEST(test_damping_lm_quadratic_both_regimes) {
    SEEDED();
    double lambda;
    uint64_t up, down;
    /* curvature underestimated (0.3 H): undamped steps overshoot, the loss
     * rises, rho < 1/4: lambda must grow until the steps contract */
    const double lambda_a = 1e-3;
    double dist = s_run_quadratic(&rng, 0.3, lambda_a, 0.7, 2, 400, &lambda, &up, &down);
    ck_assert_msg(up > 0 && lambda > 100 * lambda_a, "underestimated curvature: lambda %g from %g, %llu up, %llu down "
                  "(seed %llu)", lambda, lambda_a, (unsigned long long)up, (unsigned long long)down, SEEDMSG);
    ck_assert_msg(dist < 1e-6, "underestimated curvature: distance to the optimum %g of the start's (lambda %g, seed "
                  "%llu)", dist, lambda, SEEDMSG);
    /* exact curvature, far too much damping: tiny steps the model predicts
     * well (rho near 1 and above): lambda must fall by orders of magnitude
     * (until the iterate is at the optimum, where nothing is left to predict
     * and the rule stops deciding) */
    const double lambda_b = 500.0;
    dist = s_run_quadratic(&rng, 1.0, lambda_b, 0.7, 2, 400, &lambda, &up, &down);
    ck_assert_msg(down > 0 && up == 0 && lambda < lambda_b * 1e-3, "exact curvature: lambda %g from %g, %llu up, %llu down "
                  "(seed %llu)", lambda, lambda_b, (unsigned long long)up, (unsigned long long)down, SEEDMSG);
    ck_assert_msg(dist < 1e-6, "exact curvature: distance to the optimum %g of the start's (seed %llu)", dist, SEEDMSG);
    /* the same run with the rule held still (a decay so close to 1 that
     * lambda barely moves) is far from the optimum: the rule did the work */
    dist = s_run_quadratic(&rng, 1.0, lambda_b, 1.0 - 1e-12, 2, 400, &lambda, &up, &down);
    ck_assert_msg(dist > 1e-2, "fixed damping 500 should not converge in 400 steps (distance %g, seed %llu)", dist,
                  SEEDMSG);
}
END_TEST

START_TEST(test_damping_age_weight) {
    ck_assert_double_eq(kfac_age_weight(KFAC_AGE_WEIGHT_NONE, 7), 1.0);
    ck_assert_double_eq(kfac_age_weight(KFAC_AGE_WEIGHT_INVERSE, 0), 1.0);
    ck_assert_double_eq(kfac_age_weight(KFAC_AGE_WEIGHT_INVERSE, -2), 1.0);
    double prev = 1.0;
    for (long a = 1; a < 50; a++) {
        double w = kfac_age_weight(KFAC_AGE_WEIGHT_INVERSE, a);
        ck_assert_double_eq_tol(w, 1.0 / (1.0 + (double)a), 1e-15);
        ck_assert(w < prev);
        prev = w;
    }
    ck_assert_double_eq(kfac_age_bound_divisor(0.0, 30.0), 1.0);
    ck_assert_double_eq(kfac_age_bound_divisor(0.1, -3.0), 1.0);
    ck_assert_double_eq_tol(kfac_age_bound_divisor(0.05, 40.0), 3.0, 1e-12);
    ck_assert(kfac_age_bound_divisor(0.05, 41.0) > kfac_age_bound_divisor(0.05, 40.0));
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("kfac_damping");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_damping_quad_matches_direct);
    tcase_add_test(tc, test_damping_grad_dot_lowrank);
    tcase_add_test(tc, test_damping_rule_branches);
    tcase_add_test(tc, test_damping_window_matches_bruteforce);
    tcase_add_test(tc, test_damping_lm_quadratic_both_regimes);
    tcase_add_test(tc, test_damping_age_weight);
    suite_add_tcase(s, tc);
    return s;
}
