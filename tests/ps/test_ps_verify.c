/* tests/ps/test_ps_verify.c — ps/verify.h: an inverse from an inverse daemon
 * is checked against the factor its job was cut from. Oracle: the honest
 * inverses of kfac_inverse_compute (the daemons' own code) pass with a
 * residual far below PS_VERIFY_TOL, for random SPD factors of several
 * sizes and conditionings, both methods, and escalated damping; every
 * attack of the hostile-member list fails: an indefinite symmetric matrix
 * with a positive diagonal, a scaled inverse (1e6 and 0.5), the inverse of
 * another factor, an eigen result with an eigenvalue above tr F or
 * vectors that are not orthonormal, a result for a job never cut, a second
 * result for one job. Fresh random factors (seed printed; KFAC_TEST_SEED
 * replays). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/kfac/kfac_inverse.h"
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
    ck_assert(worst < PS_VERIFY_TOL / 10.0); /* a wide margin */
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

Suite *make_suite(void) {
    Suite *s = suite_create("ps_verify");
    TCase *tc = tcase_create("verify");
    tcase_add_test(tc, test_verify_honest_inverses_pass);
    tcase_add_test(tc, test_verify_escalated_damping);
    tcase_add_test(tc, test_verify_attacks_fail);
    tcase_add_test(tc, test_verify_ring);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}
