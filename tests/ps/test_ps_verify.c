/* tests/ps/test_ps_verify.c — ps/verify.h: an inverse from an inverse daemon
 * is checked against the factor its job was cut from. Oracle: the honest
 * inverses of kfac_inverse_compute (the daemons' own code) pass with a
 * residual far below their tolerance, for random SPD factors of several
 * sizes (up to 3137, the largest block of models/ and experiments/) and
 * conditionings, both methods, and escalated damping; every attack of the
 * hostile-member list fails: an indefinite symmetric matrix with a
 * positive diagonal, a scaled inverse (1e6 and 0.5), the inverse of
 * another factor, the true inverse with its sign flipped along one or
 * several eigenvectors (the largest, the smallest, random ones), an eigen
 * result with an eigenvalue above tr F, a flipped one or vectors that are
 * not orthonormal, a result for a job never cut, a second result for one
 * job. Fresh random factors (seed printed; KFAC_TEST_SEED replays). */
#include <cblas.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_linalg.h"
#include "ps/verify.h"
#include "tests/lib/check_main.h"
#include "tests/lib/seed.h"

/* A random SPD factor F = (1/m) X^T X of dimension n from m rows (m < n:
 * singular, as K-FAC factors of small batches are) scaled by s. */
static float *s_factor(rng_t *r, int n, int m, double s) {
    float *X = malloc((size_t)m * n * sizeof(float)), *F = calloc((size_t)n * n, sizeof(float));
    ck_assert(X && F);
    for (size_t i = 0; i < (size_t)m * n; i++) X[i] = (float)rng_normal(r);
    for (int i = 0; i < n; i++)
        for (int j = i; j < n; j++) {
            double a = 0.0;
            for (int k = 0; k < m; k++) a += (double)X[(size_t)k * n + i] * X[(size_t)k * n + j];
            F[(size_t)i * n + j] = F[(size_t)j * n + i] = (float)(s * a / m);
        }
    free(X);
    return F;
}

static ps_verify_t *s_verify(int n, uint64_t seed) {
    int bn[2] = {n, n};
    ps_verify_t *v = ps_verify_new(bn, 2, seed);
    ck_assert(v != NULL);
    return v;
}

/* The check of inv for a job cut from F at damping d. */
static int s_check(int n, const float *F, float d, const kfac_inverse_t *inv, float d_used, double *resid,
                   uint64_t seed) {
    ps_verify_t *v = s_verify(n, seed);
    ck_assert_int_eq(ps_verify_cut(v, 1, 42, F, n, d), 0);
    ck_assert(fabsf(ps_verify_damping(v, 1, 42) - d) == 0.0f);
    char why[400];
    int rc = ps_verify_check(v, 1, 42, inv, d_used, resid, why, sizeof why);
    if (rc != 0) printf("  refused: %s\n", why);
    ck_assert_int_eq(ps_verify_check(v, 1, 42, inv, d_used, NULL, why, sizeof why), -ENOENT); /* once */
    ps_verify_free(&v);
    return rc;
}

START_TEST(test_verify_honest_inverses_pass) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    static const int sizes[] = {1, 7, 65, 257};
    static const double scales[] = {1e-3, 1.0, 1e3};
    double worst = 0.0;
    for (size_t a = 0; a < sizeof sizes / sizeof sizes[0]; a++)
        for (size_t c = 0; c < sizeof scales / sizeof scales[0]; c++)
            for (int method = 0; method < 2; method++) {
                const int n = sizes[a];
                float *F = s_factor(&r, n, n > 8 ? n / 4 : 3, scales[c]);
                /* damping: K-FAC's per-factor share, 1e-3 .. 1e-1 of the mean eigenvalue */
                double tr = 0.0;
                for (int i = 0; i < n; i++) tr += F[(size_t)i * n + i];
                const float d = (float)(tr / n * pow(10.0, -1.0 - 2.0 * rng_uniform(&r)));
                kfac_inverse_t *inv = kfac_inverse_new(n);
                ck_assert_int_eq(kfac_inverse_compute(F, n, d, method ? KFAC_INV_EIGEN : KFAC_INV_CHOLESKY, inv, NULL),
                                 0);
                double res = -1.0;
                int rc = s_check(n, F, d, inv, inv->method == KFAC_INV_CHOLESKY ? inv->damping_used : d, &res, seed);
                ck_assert_msg(rc == 0, "honest %s inverse refused: n=%d scale %g damping %g (seed %llu)",
                              method ? "eigen" : "cholesky", n, scales[c], (double)d, (unsigned long long)seed);
                if (res > worst) worst = res;
                kfac_inverse_free(&inv);
                free(F);
            }
    printf("honest inverses: worst residual %.3g (tolerance at least %.2g)\n", worst, PS_VERIFY_TOL);
    ck_assert(worst < PS_VERIFY_TOL / 4.0); /* a wide margin */
    /* the tolerance: PS_VERIFY_TOL for well conditioned factors, looser for bad ones, never above the cap */
    ck_assert(ps_verify_tol(10.0, 0.1f) == PS_VERIFY_TOL);
    ck_assert(ps_verify_tol(1e6, 0.01f) > PS_VERIFY_TOL && ps_verify_tol(1e6, 0.01f) <= PS_VERIFY_TOL_MAX);
    ck_assert(ps_verify_tol(1e12, 1e-6f) == PS_VERIFY_TOL_MAX);
    ck_assert(ps_verify_tol(10.0, 0.0f) == PS_VERIFY_TOL);
}
END_TEST

/* A Cholesky result computed with 10x the damping (the daemon's escalation) passes when it says so, and fails
 * when it claims the job's damping. */
START_TEST(test_verify_escalated_damping) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const int n = 40;
    float *F = s_factor(&r, n, 10, 1.0);
    const float d = 0.01f;
    kfac_inverse_t *inv = kfac_inverse_new(n);
    ck_assert_int_eq(kfac_inverse_compute(F, n, 10.0f * d, KFAC_INV_CHOLESKY, inv, NULL), 0);
    ck_assert_int_eq(s_check(n, F, d, inv, 10.0f * d, NULL, seed), 0);
    ck_assert_int_eq(s_check(n, F, d, inv, d, NULL, seed), -EDOM);
    kfac_inverse_free(&inv);
    free(F);
}
END_TEST

START_TEST(test_verify_attacks_fail) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const int n = 33;
    float *F = s_factor(&r, n, 12, 1.0), *G = s_factor(&r, n, 12, 1.0);
    const float d = 0.03f;
    kfac_inverse_t *inv = kfac_inverse_new(n), *bad = kfac_inverse_new(n);
    ck_assert_int_eq(kfac_inverse_compute(F, n, d, KFAC_INV_CHOLESKY, inv, NULL), 0);
    float *M = malloc((size_t)n * n * sizeof(float));
    ck_assert(M != NULL);

    /* symmetric, positive diagonal, indefinite: I + 2 (e0 e1^T + e1 e0^T) has eigenvalue -1 */
    for (int i = 0; i < n * n; i++) M[i] = 0.0f;
    for (int i = 0; i < n; i++) M[(size_t)i * n + i] = 1.0f;
    M[1] = M[n] = 2.0f;
    ck_assert_int_eq(kfac_inverse_load_cholesky(bad, M, d), 0);
    ck_assert_int_eq(s_check(n, F, d, bad, d, NULL, seed), -EDOM);

    /* the honest inverse scaled by 1e6, and by 0.5 */
    static const float scale[] = {1e6f, 0.5f};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < n * n; i++) M[i] = inv->inv[i] * scale[k];
        ck_assert_int_eq(kfac_inverse_load_cholesky(bad, M, d), 0);
        ck_assert_int_eq(s_check(n, F, d, bad, d, NULL, seed), -EDOM);
    }

    /* the inverse of another factor (G), honest in itself */
    ck_assert_int_eq(kfac_inverse_compute(G, n, d, KFAC_INV_CHOLESKY, bad, NULL), 0);
    ck_assert_int_eq(s_check(n, F, d, bad, d, NULL, seed), -EDOM);

    /* eigen: honest, then an eigenvalue far above tr F, then vectors scaled by 2 (not orthonormal) */
    ck_assert_int_eq(kfac_inverse_compute(F, n, d, KFAC_INV_EIGEN, bad, NULL), 0);
    ck_assert_int_eq(s_check(n, F, d, bad, d, NULL, seed), 0);
    float *Q = malloc((size_t)n * n * sizeof(float)), *v = malloc((size_t)n * sizeof(float));
    ck_assert(Q && v);
    memcpy(Q, bad->Q, (size_t)n * n * sizeof(float));
    memcpy(v, bad->v, (size_t)n * sizeof(float));
    v[n - 1] = 1e9f;
    ck_assert_int_eq(kfac_inverse_load_eigen(bad, Q, v, d), 0);
    ck_assert_int_eq(s_check(n, F, d, bad, d, NULL, seed), -EDOM);
    ck_assert_int_eq(kfac_inverse_compute(F, n, d, KFAC_INV_EIGEN, bad, NULL), 0);
    memcpy(v, bad->v, (size_t)n * sizeof(float));
    for (int i = 0; i < n * n; i++) Q[i] = bad->Q[i] * 2.0f;
    ck_assert_int_eq(kfac_inverse_load_eigen(bad, Q, v, d), 0);
    ck_assert_int_eq(s_check(n, F, d, bad, d, NULL, seed), -EDOM);

    /* a job that was never cut, and a block out of range */
    ps_verify_t *vf = s_verify(n, seed);
    char why[200];
    ck_assert_int_eq(ps_verify_check(vf, 0, 7, inv, d, NULL, why, sizeof why), -ENOENT);
    ck_assert_int_eq(ps_verify_cut(vf, 2, 7, F, n, d), -EINVAL);
    ck_assert_int_eq(ps_verify_cut(vf, 0, 7, F, n + 1, d), -EINVAL);
    ck_assert(ps_verify_damping(vf, 0, 7) < 0.0f);
    ps_verify_free(&vf);

    free(Q);
    free(v);
    free(M);
    kfac_inverse_free(&inv);
    kfac_inverse_free(&bad);
    free(F);
    free(G);
}
END_TEST

/* The ring keeps the last PS_VERIFY_RING probes of a block. */
START_TEST(test_verify_ring) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const int n = 5;
    float *F = s_factor(&r, n, 3, 1.0);
    ps_verify_t *v = s_verify(n, seed);
    for (uint64_t id = 1; id <= PS_VERIFY_RING + 2; id++) ck_assert_int_eq(ps_verify_cut(v, 0, id, F, n, 0.1f), 0);
    ck_assert(ps_verify_damping(v, 0, 1) < 0.0f);
    ck_assert(ps_verify_damping(v, 0, 2) < 0.0f);
    ck_assert(ps_verify_damping(v, 0, 3) == 0.1f);
    ck_assert(ps_verify_damping(v, 1, 3) < 0.0f); /* another block */
    ps_verify_forget(v, 0, 3); /* a result without an inverse to check */
    ck_assert(ps_verify_damping(v, 0, 3) < 0.0f);
    ck_assert(ps_verify_damping(v, 0, 4) == 0.1f);
    ps_verify_free(&v);
    free(F);
}
END_TEST


/* F = X^T X / m (n x n) from m Gaussian rows: "white" (m = n / 4, singular)
 * or "decaying" (m = 2n, column j of X scaled by 1 / (1 + j / 8): a
 * spectrum falling over four orders of magnitude). BLAS: the sizes here
 * reach 3137. */
static float *s_factor_blas(rng_t *r, int n, int decaying) {
    const int m = decaying ? 2 * n : (n / 4 > 1 ? n / 4 : 1);
    float *X = malloc((size_t)m * n * sizeof(float)), *F = calloc((size_t)n * n, sizeof(float));
    ck_assert(X && F);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            X[(size_t)i * n + j] = (float)(rng_normal(r) * (decaying ? 1.0 / (1.0 + j / 8.0) : 1.0));
    /* F (upper) = X^T X / m, row-major n x n */
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, n, m, 1.0f / (float)m, X, n, 0.0f, F, n);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) F[(size_t)i * n + j] = F[(size_t)j * n + i];
    free(X);
    return F;
}

/* ||F||_F, the bound on F's largest eigenvalue the check's tolerance uses. */
static double s_fro(const float *F, int n) {
    double s = 0.0;
    for (size_t e = 0; e < (size_t)n * n; e++) s += (double)F[e] * F[e];
    return sqrt(s);
}

/* Honest float inverses of large factors, both methods, pass with at most
 * half their tolerance: n = 1025 (white and decaying spectra, damping
 * 1e-1 .. 1e-3 of the mean eigenvalue) and n = 3137 (decaying, 1e-2). */
START_TEST(test_verify_honest_large_pass) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    static const struct { int n, decaying; double ratio; } cases[] = {
        {1025, 0, 1e-1}, {1025, 0, 1e-2}, {1025, 0, 1e-3}, {1025, 1, 1e-1}, {1025, 1, 1e-2}, {1025, 1, 1e-3},
        {3137, 1, 1e-2},
    };
    double worst = 0.0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].n;
        float *F = s_factor_blas(&r, n, cases[c].decaying);
        const float d = (float)(cases[c].ratio * kfac_linalg_trace(F, n) / n);
        const double tol = ps_verify_tol(s_fro(F, n), d);
        for (int method = 0; method < 2; method++) {
            kfac_inverse_t *inv = kfac_inverse_new(n);
            ck_assert_int_eq(kfac_inverse_compute(F, n, d, method ? KFAC_INV_EIGEN : KFAC_INV_CHOLESKY, inv, NULL), 0);
            double res = -1.0;
            int rc = s_check(n, F, d, inv, inv->method == KFAC_INV_CHOLESKY ? inv->damping_used : d, &res, seed);
            printf("honest %-8s n=%d %s d/mean %.0e: residual %.3g, tolerance %.3g\n", method ? "eigen" : "cholesky", n,
                   cases[c].decaying ? "decaying" : "white", cases[c].ratio, res, tol);
            ck_assert_msg(rc == 0 && res <= tol / 2.0, "honest %s inverse: residual %.3g against %.3g (n=%d, seed %llu)",
                          method ? "eigen" : "cholesky", res, tol, n, (unsigned long long)seed);
            if (res / tol > worst) worst = res / tol;
            kfac_inverse_free(&inv);
        }
        free(F);
    }
    printf("honest large inverses: worst residual / tolerance %.3g\n", worst);
}
END_TEST

/* The honest inverse (Cholesky form) with its sign flipped along nq
 * eigenvectors q of F (columns of eig->Q): H - 2 / (v_q + d) q q^T. */
static void s_flipped(const kfac_inverse_t *chol, const kfac_inverse_t *eig, const int *q, int nq, float *H) {
    const int n = chol->n;
    const float d = chol->damping_used;
    memcpy(H, chol->inv, (size_t)n * n * sizeof(float));
    for (int f = 0; f < nq; f++) {
        const double s = -2.0 / ((double)eig->v[q[f]] + d);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                H[(size_t)i * n + j] += (float)(s * eig->Q[(size_t)i * n + q[f]] * eig->Q[(size_t)j * n + q[f]]);
    }
}

/* The true inverse with its sign flipped along one eigenvector of F (the
 * largest, the smallest, a random one) or 4 (the largest, random ones),
 * which the one random probe of before passed about half the time (its
 * residual was 2 |q . x| / ||x||, about 2 / sqrt(n)), is refused. Random
 * flips at n = 257 and 385 with the tolerance at its floor (damping 1e-2
 * of the mean eigenvalue), where ps/verify.h's bound on the rate at which
 * one passes is below 1e-5; the largest and smallest, alone or 4 of the
 * largest, also at n = 1025 with damping 1e-3 and 1e-4 of the mean, where
 * the tolerance is at its cap (the span's images under F find the first,
 * the Lanczos steps the second). An eigen-form result cannot carry a flip
 * (its eigenvalues are clamped at 0 when loaded): the largest set to
 * -v - 2d is refused as the wrong eigenvalue it becomes. */
START_TEST(test_verify_sign_flips_fail) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    static const struct { int n, decaying; double ratio; int random; } cases[] = {
        {257, 0, 1e-2, 1}, {385, 1, 1e-2, 1}, {1025, 0, 1e-3, 0}, {1025, 1, 1e-4, 0},
    };
    int refused = 0, tried = 0, old_passed = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].n;
        float *F = s_factor_blas(&r, n, cases[c].decaying), *H = malloc((size_t)n * n * sizeof(float));
        ck_assert(H != NULL);
        const float d = (float)(cases[c].ratio * kfac_linalg_trace(F, n) / n);
        kfac_inverse_t *chol = kfac_inverse_new(n), *eig = kfac_inverse_new(n), *bad = kfac_inverse_new(n);
        ck_assert_int_eq(kfac_inverse_compute(F, n, d, KFAC_INV_CHOLESKY, chol, NULL), 0);
        ck_assert_int_eq(kfac_inverse_compute(F, n, d, KFAC_INV_EIGEN, eig, NULL), 0);
        ck_assert(chol->method == KFAC_INV_CHOLESKY && eig->method == KFAC_INV_EIGEN);
        const float du = chol->damping_used;
        for (int kind = 0; kind < 7; kind++) { /* largest, smallest, 3 x random, 4 largest, 4 random */
            if (!cases[c].random && kind != 0 && kind != 1 && kind != 5) continue;
            int q[4], nq = kind >= 5 ? 4 : 1;
            for (int f = 0; f < nq; f++)
                q[f] = kind == 0 ? n - 1 : kind == 1 ? 0 : kind == 5 ? n - 1 - f : (int)rng_below(&r, (uint32_t)n);
            s_flipped(chol, eig, q, nq, H);
            if (kfac_inverse_load_cholesky(bad, H, du) != 0) continue; /* a non-positive diagonal: the loader refuses it */
            /* what the one probe of before saw: 2 |q . x| / ||x|| for one flip */
            double qx = 0.0, xn = 0.0;
            for (int i = 0; i < n; i++) {
                const double x = rng_normal(&r);
                qx += x * eig->Q[(size_t)i * n + q[0]];
                xn += x * x;
            }
            if (nq == 1 && 2.0 * fabs(qx) / sqrt(xn) <= ps_verify_tol(kfac_linalg_trace(F, n), du)) old_passed++;
            double res = -1.0;
            const int rc = s_check(n, F, d, bad, du, &res, seed);
            tried++;
            ck_assert_msg(rc == -EDOM, "an inverse flipped along %d eigenvector(s) (the first %d of n=%d, %s, d/mean %.0e) "
                          "passed with residual %.3g (seed %llu)", nq, q[0], n, cases[c].decaying ? "decaying" : "white",
                          cases[c].ratio, res, (unsigned long long)seed);
            refused++;
        }
        /* eigen form: the loader clamps eigenvalues at 0, so H = Q diag(1 / (v + d)) Q^T stays positive
         * definite and no flip can be expressed; the largest set to -v - 2d loads as 0, a wrong eigenvalue */
        float *Q = malloc((size_t)n * n * sizeof(float)), *v = malloc((size_t)n * sizeof(float));
        ck_assert(Q && v);
        memcpy(Q, eig->Q, (size_t)n * n * sizeof(float));
        memcpy(v, eig->v, (size_t)n * sizeof(float));
        v[n - 1] = -v[n - 1] - 2.0f * d;
        ck_assert_int_eq(kfac_inverse_load_eigen(bad, Q, v, d), 0);
        ck_assert_int_eq(s_check(n, F, d, bad, d, NULL, seed), -EDOM);
        free(Q);
        free(v);
        kfac_inverse_free(&chol);
        kfac_inverse_free(&eig);
        kfac_inverse_free(&bad);
        free(H);
        free(F);
    }
    printf("sign flips: %d of %d refused (one random probe, as before, would have passed %d of the single flips)\n",
           refused, tried, old_passed);
    ck_assert_int_ge(tried, 12);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_verify");
    TCase *tc = tcase_create("verify");
    tcase_add_test(tc, test_verify_honest_inverses_pass);
    tcase_add_test(tc, test_verify_escalated_damping);
    tcase_add_test(tc, test_verify_attacks_fail);
    tcase_add_test(tc, test_verify_ring);
    tcase_add_test(tc, test_verify_sign_flips_fail);
    tcase_add_test(tc, test_verify_honest_large_pass);
    tcase_set_timeout(tc, 600);
    suite_add_tcase(s, tc);
    return s;
}
