/* tests/kfac/test_kfac_inverse.c — damped inverses and eigendecompositions of one
 * factor against a double-precision Cholesky oracle on fresh random SPD
 * factors, and the numerical defence (singular, indefinite, NaN, Inf,
 * overflowing factors) with its counters. The seed is printed on failure;
 * KFAC_TEST_SEED replays one, KFAC_TEST_VERBOSE=1 prints measured errors.
 *
 * Tolerance argument. F = X X^T / m with X (n, m) normal and m = 2n + 8 has,
 * by Marchenko-Pastur, eigenvalues in about [0.086, 2.91] (ratio n/m <= 1/2),
 * and damping 0.01 is added, so cond(F + dI) <= ~3e2 (small n can be worse
 * conditioned; 0.01 bounds it by ~1e3). A backward-stable float32 inverse
 * has relative error about cond * eps32 * c(n) with eps32 = 6e-8; for cond
 * 1e3 and a modest c(n) this is ~1e-4. We assert relative Frobenius error
 * <= 1e-4 for cond <= 1e3 (measured cond, see s_tol), typical errors are
 * 1e-6..1e-5. */
#include <cblas.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_linalg.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"

static int s_verbose(void) {
    const char *e = getenv("KFAC_TEST_VERBOSE");
    return e && *e && *e != '0';
}

/* F (n, n), both triangles = X X^T / m, X (n, m) standard normal. Built with
 * ssyrk in float: the oracle below inverts exactly these float values. */
static float *s_random_spd(rng_t *r, int n, int m) {
    float *X = malloc(sizeof(float) * (size_t)n * m);
    float *F = calloc((size_t)n * n, sizeof(float));
    for (size_t i = 0; i < (size_t)n * m; i++) X[i] = (float)rng_normal(r);
    /* F (upper) = X X^T / m; row-major. */
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, n, m, 1.0f / m, X, m, 0.0f, F, n);
    kfac_linalg_symmetrize_upper(F, n);
    free(X);
    return F;
}

/* Double-precision oracle: lower Cholesky factor L (row-major) of F + d I.
 * Returns 0, or -1 if F + dI is not positive definite. */
static int s_chol_d(const float *F, int n, double d, double *L) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = (double)F[(size_t)j * n + i] + (i == j ? d : 0.0); /* upper of F */
            const double *Li = L + (size_t)i * n, *Lj = L + (size_t)j * n;
            for (int k = 0; k < j; k++) s -= Li[k] * Lj[k];
            if (i == j) {
                if (!(s > 0)) return -1;
                L[(size_t)i * n + i] = sqrt(s);
            } else {
                L[(size_t)i * n + j] = s / L[(size_t)j * n + j];
            }
        }
    return 0;
}

/* x <- (L L^T)^{-1} e_c (column c of the inverse). */
static void s_chol_solve_col(const double *L, int n, int c, double *x) {
    for (int i = 0; i < n; i++) {
        double s = (i == c) ? 1.0 : 0.0;
        for (int k = 0; k < i; k++) s -= L[(size_t)i * n + k] * x[k];
        x[i] = s / L[(size_t)i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = x[i];
        for (int k = i + 1; k < n; k++) s -= L[(size_t)k * n + i] * x[k];
        x[i] = s / L[(size_t)i * n + i];
    }
}

/* Columns of the exact inverse to compare: all for n <= 300, else 48 random
 * ones (a full double inverse of n = 1024 would dominate the test time). */
static int s_pick_cols(rng_t *r, int n, int *cols) {
    if (n <= 300) {
        for (int c = 0; c < n; c++) cols[c] = c;
        return n;
    }
    int k = 48;
    for (int i = 0; i < k; i++) cols[i] = (int)rng_below(r, (uint32_t)n);
    return k;
}

/* Relative Frobenius error, over the chosen columns, of the float matrix
 * M (n, n) against the double inverse of F + dI. Also returns, through
 * cond_out, ||F + dI||_1 * max column 1-norm of the inverse seen (a lower
 * bound of the 1-norm condition number, exact when all columns are seen). */
static double s_inverse_error(const float *F, int n, double d, const float *M, const int *cols,
                              int k, double *cond_out) {
    double *L = calloc((size_t)n * n, sizeof(double));
    double *x = malloc(sizeof(double) * n);
    ck_assert_int_eq(s_chol_d(F, n, d, L), 0);
    double num = 0, den = 0, inv1 = 0, f1 = 0;
    for (int j = 0; j < n; j++) {
        double cs = 0;
        for (int i = 0; i < n; i++) {
            int a = i < j ? i : j, b = i < j ? j : i;
            cs += fabs((double)F[(size_t)a * n + b] + (i == j ? d : 0.0));
        }
        f1 = cs > f1 ? cs : f1;
    }
    for (int t = 0; t < k; t++) {
        int c = cols[t];
        s_chol_solve_col(L, n, c, x);
        double cs = 0;
        for (int i = 0; i < n; i++) {
            double e = (double)M[(size_t)i * n + c] - x[i];
            num += e * e;
            den += x[i] * x[i];
            cs += fabs(x[i]);
        }
        inv1 = cs > inv1 ? cs : inv1;
    }
    free(L);
    free(x);
    *cond_out = f1 * inv1;
    return sqrt(num / den);
}

/* Tolerance for a float32 inverse of condition number cond: 1e-4 up to
 * cond 1e3 (header comment), growing linearly beyond (never reached with
 * the damping used here; kept so a rare ill-conditioned small draw does not
 * fail spuriously). */
static double s_tol(double cond) { return cond <= 1e3 ? 1e-4 : 1e-7 * cond; }

/* Columns cols[0..k-1] of M (n, n) <- Q diag(1 / (v + d)) Q^T from an
 * EIGEN-form holder, accumulated in double and rounded once. */
static void s_inverse_from_eigen(const kfac_inverse_t *h, float d, float *M, const int *cols,
                                 int k) {
    int n = h->n;
    double *s = malloc(sizeof(double) * n);
    for (int t = 0; t < k; t++) {
        int c = cols[t];
        for (int j = 0; j < n; j++) s[j] = (double)h->Q[(size_t)c * n + j] / ((double)h->v[j] + d);
        for (int i = 0; i < n; i++) {
            double acc = 0;
            const float *qi = h->Q + (size_t)i * n;
            for (int j = 0; j < n; j++) acc += qi[j] * s[j];
            M[(size_t)i * n + c] = (float)acc;
        }
    }
    free(s);
}

static void s_check_method(int n, kfac_inv_method_t method) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const float d = 0.01f;
    float *F = s_random_spd(&r, n, 2 * n + 8);
    /* Garbage in the lower triangle: only the upper one may be read. */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) F[(size_t)i * n + j] = (i + j) % 2 ? NAN : 1e30f;
    kfac_inverse_t *h = kfac_inverse_new(n);
    ck_assert_ptr_nonnull(h);
    kfac_inverse_stats_t st = {0};
    ck_assert_int_eq(kfac_inverse_compute(F, n, d, method, h, &st), 0);
    ck_assert(h->valid);
    ck_assert_int_eq(h->method, method);
    ck_assert(h->damping_used == d);
    ck_assert_uint_eq(st.n_calls, 1);
    ck_assert_uint_eq(st.n_ok_first_try, 1);
    ck_assert_uint_eq(st.n_failures, 0);
    int *cols = malloc(sizeof(int) * n);
    int k = s_pick_cols(&r, n, cols);
    float *M = h->inv;
    float *tmp = NULL;
    if (method == KFAC_INV_EIGEN) {
        for (int i = 1; i < n; i++) ck_assert(h->v[i - 1] <= h->v[i]);
        ck_assert(h->v[0] >= 0.0f);
        tmp = malloc(sizeof(float) * (size_t)n * n);
        s_inverse_from_eigen(h, d, tmp, cols, k);
        M = tmp;
    } else {
        for (int i = 0; i < n; i++) /* exactly symmetric: the triangle was mirrored */
            for (int j = 0; j < i; j++)
                ck_assert(h->inv[(size_t)i * n + j] == h->inv[(size_t)j * n + i]);
    }
    double cond = 0;
    double err = s_inverse_error(F, n, d, M, cols, k, &cond);
    if (s_verbose())
        printf("%s n=%d cond>=%.3g rel_frob_err=%.3g\n", kfac_inverse_method_name(method), n,
               cond, err);
    ck_assert_msg(err <= s_tol(cond), "%s n=%d: rel err %.3g > tol %.3g (cond %.3g), seed=%llu",
                  kfac_inverse_method_name(method), n, err, s_tol(cond), cond,
                  (unsigned long long)seed);
    free(tmp);
    free(cols);
    free(F);
    kfac_inverse_free(&h);
    ck_assert_ptr_null(h);
}

START_TEST(test_inverse_cholesky_matches_double_small) {
    const int sizes[] = {1, 2, 17, 300};
    for (int i = 0; i < 4; i++) s_check_method(sizes[i], KFAC_INV_CHOLESKY);
}
END_TEST

START_TEST(test_inverse_eigen_matches_double_small) {
    const int sizes[] = {1, 2, 17, 300};
    for (int i = 0; i < 4; i++) s_check_method(sizes[i], KFAC_INV_EIGEN);
}
END_TEST

START_TEST(test_inverse_cholesky_matches_double_1024) { s_check_method(1024, KFAC_INV_CHOLESKY); }
END_TEST

START_TEST(test_inverse_eigen_matches_double_1024) { s_check_method(1024, KFAC_INV_EIGEN); }
END_TEST

/* The decomposition itself: F Q = Q diag(v) and Q^T Q = I, in double. */
START_TEST(test_inverse_eigen_decomposition_residual) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    int n = 64;
    float *F = s_random_spd(&r, n, 2 * n + 8);
    kfac_inverse_t *h = kfac_inverse_new(n);
    ck_assert_int_eq(kfac_inverse_compute(F, n, 0.0f, KFAC_INV_EIGEN, h, NULL), 0);
    double res = 0, fro = 0, orth = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double fq = 0, qq = 0;
            for (int k = 0; k < n; k++) {
                fq += (double)F[(size_t)i * n + k] * h->Q[(size_t)k * n + j];
                qq += (double)h->Q[(size_t)k * n + i] * h->Q[(size_t)k * n + j];
            }
            double e = fq - (double)h->Q[(size_t)i * n + j] * h->v[j];
            res += e * e;
            fro += (double)F[(size_t)i * n + j] * F[(size_t)i * n + j];
            orth += (qq - (i == j)) * (qq - (i == j));
        }
    /* backward-stable eigensolver: residual ~ n^0.5 eps32 ||F|| ~ 1e-6 */
    ck_assert_msg(sqrt(res / fro) <= 1e-5, "residual %g seed=%llu", sqrt(res / fro),
                  (unsigned long long)seed);
    ck_assert_msg(sqrt(orth) <= 1e-5 * n, "orthogonality %g seed=%llu", sqrt(orth),
                  (unsigned long long)seed);
    free(F);
    kfac_inverse_free(&h);
}
END_TEST

/* Zero factor, no damping: Cholesky fails at the first pivot, one escalation
 * from the floor 1e-6 (x10 = 1e-5) succeeds with inv = 1e5 I. */
START_TEST(test_inverse_singular_escalates_damping) {
    int n = 5;
    float F[25] = {0};
    kfac_inverse_t *h = kfac_inverse_new(n);
    kfac_inverse_stats_t st = {0};
    ck_assert_int_eq(kfac_inverse_compute(F, n, 0.0f, KFAC_INV_CHOLESKY, h, &st), 0);
    ck_assert_uint_eq(st.n_cholesky_failures, 1);
    ck_assert_uint_eq(st.n_damping_escalations, 1);
    ck_assert_uint_eq(st.n_ok, 1);
    ck_assert_uint_eq(st.n_ok_first_try, 0);
    ck_assert_uint_eq(st.n_method_fallbacks, 0);
    ck_assert(fabsf(h->damping_used - 1e-5f) <= 1e-11f);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            ck_assert(fabs(h->inv[i * n + j] - (i == j ? 1.0 / h->damping_used : 0.0)) <=
                      1e-6 / h->damping_used);
    kfac_inverse_free(&h);
}
END_TEST

/* diag(1, -1, 2) + 0.1: fails at 0.1 and 1 (pivot -0.9, then 0), succeeds at 10. */
START_TEST(test_inverse_indefinite_escalates_then_succeeds) {
    float F[9] = {1, 0.f, 0.f, 12345.f, -1, 0.f, NAN, 7.f, 2}; /* lower: garbage */
    kfac_inverse_t *h = kfac_inverse_new(3);
    kfac_inverse_stats_t st = {0};
    ck_assert_int_eq(kfac_inverse_compute(F, 3, 0.1f, KFAC_INV_CHOLESKY, h, &st), 0);
    ck_assert_uint_eq(st.n_cholesky_failures, 2);
    ck_assert_uint_eq(st.n_damping_escalations, 2);
    ck_assert_uint_eq(st.n_method_fallbacks, 0);
    ck_assert(fabsf(h->damping_used - 10.0f) <= 1e-5f);
    const double want[3] = {1.0 / 11, 1.0 / 9, 1.0 / 12};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            ck_assert(fabs(h->inv[i * 3 + j] - (i == j ? want[i] : 0.0)) <= 1e-6);
    kfac_inverse_free(&h);
}
END_TEST

/* -100 I + 0.1: every Cholesky fails (0.1, 1, 10, 100 -> pivot 0), the
 * eigen fallback clamps the spectrum to 0 and gives (0 + 0.1 I)^{-1} = 10 I. */
START_TEST(test_inverse_indefinite_falls_back_to_eigen) {
    int n = 4;
    float F[16] = {0};
    for (int i = 0; i < n; i++) F[i * n + i] = -100.0f;
    kfac_inverse_t *h = kfac_inverse_new(n);
    kfac_inverse_stats_t st = {0};
    ck_assert_int_eq(kfac_inverse_compute(F, n, 0.1f, KFAC_INV_CHOLESKY, h, &st), 0);
    ck_assert_uint_eq(st.n_cholesky_failures, 1 + KFAC_INVERSE_MAX_ESCALATIONS);
    ck_assert_uint_eq(st.n_damping_escalations, KFAC_INVERSE_MAX_ESCALATIONS);
    ck_assert_uint_eq(st.n_method_fallbacks, 1);
    ck_assert_uint_eq(st.n_eigen_clamped, 1);
    ck_assert_uint_eq(st.n_ok, 1);
    ck_assert_int_eq(h->method, KFAC_INV_CHOLESKY);
    ck_assert(h->damping_used == 0.1f);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            ck_assert(fabs(h->inv[i * n + j] - (i == j ? 10.0 : 0.0)) <= 1e-4);
    /* the eigen form clamps too */
    ck_assert_int_eq(kfac_inverse_compute(F, n, 0.1f, KFAC_INV_EIGEN, h, &st), 0);
    ck_assert_uint_eq(st.n_eigen_clamped, 2);
    for (int i = 0; i < n; i++) ck_assert(h->v[i] == 0.0f);
    kfac_inverse_free(&h);
}
END_TEST

static void s_expect_untouched(const kfac_inverse_t *h, const float *inv_before, int n) {
    ck_assert(h->valid);
    ck_assert_int_eq(h->method, KFAC_INV_CHOLESKY);
    ck_assert(memcmp(h->inv, inv_before, sizeof(float) * (size_t)n * n) == 0);
}

/* NaN / Inf in the upper triangle: clean -EDOM, counters, last inverse kept. */
START_TEST(test_inverse_nonfinite_rejected_keeps_last) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    int n = 9;
    float *F = s_random_spd(&r, n, 30);
    kfac_inverse_t *h = kfac_inverse_new(n);
    kfac_inverse_stats_t st = {0};
    ck_assert_int_eq(kfac_inverse_compute(F, n, 0.01f, KFAC_INV_CHOLESKY, h, &st), 0);
    float before[81];
    memcpy(before, h->inv, sizeof before);
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int b = 0; b < 3; b++) {
        int i = (int)rng_below(&r, (uint32_t)n), j = (int)rng_below(&r, (uint32_t)n);
        if (j < i) { int t = i; i = j; j = t; }
        float keep = F[i * n + j];
        F[i * n + j] = bad[b];
        for (int m = 0; m < 2; m++)
            ck_assert_int_eq(kfac_inverse_compute(F, n, 0.01f, m, h, &st), -EDOM);
        F[i * n + j] = keep;
        s_expect_untouched(h, before, n);
    }
    ck_assert_uint_eq(st.n_rejected_nonfinite, 6);
    ck_assert_uint_eq(st.n_failures, 6);
    ck_assert_uint_eq(st.n_ok, 1);
    ck_assert_uint_eq(h->n_updates, 1);
    /* bad arguments: wrong n, negative or NaN damping, bad method */
    ck_assert_int_eq(kfac_inverse_compute(F, n - 1, 0.01f, KFAC_INV_CHOLESKY, h, &st), -EINVAL);
    ck_assert_int_eq(kfac_inverse_compute(F, n, -1.0f, KFAC_INV_CHOLESKY, h, &st), -EINVAL);
    ck_assert_int_eq(kfac_inverse_compute(F, n, NAN, KFAC_INV_EIGEN, h, &st), -EINVAL);
    ck_assert_int_eq(kfac_inverse_compute(F, n, 0.1f, (kfac_inv_method_t)7, h, &st), -EINVAL);
    ck_assert_int_eq(kfac_inverse_compute(NULL, n, 0.1f, KFAC_INV_EIGEN, h, &st), -EINVAL);
    ck_assert_uint_eq(st.n_rejected_args, 5);
    s_expect_untouched(h, before, n);
    ck_assert_ptr_null(kfac_inverse_new(0));
    kfac_inverse_free(NULL);
    free(F);
    kfac_inverse_free(&h);
}
END_TEST

/* Finite entries and damping whose sums and eigenvalues overflow float (all
 * entries 3e38, damping 3e38): no retry of either method can give a finite
 * inverse. The call must fail cleanly with -ERANGE, count the fallback to
 * the other method, and leave the last inverse in place. */
START_TEST(test_inverse_overflow_fails_cleanly) {
    int n = 2;
    float good[4] = {2, 0.5f, 0.5f, 1};
    float F[4] = {3e38f, 3e38f, 3e38f, 3e38f};
    for (int m = 0; m < 2; m++) {
        kfac_inverse_t *h = kfac_inverse_new(n);
        kfac_inverse_stats_t st = {0};
        ck_assert_int_eq(kfac_inverse_compute(good, n, 0.0f, KFAC_INV_CHOLESKY, h, &st), 0);
        float before[4];
        memcpy(before, h->inv, sizeof before);
        ck_assert_int_eq(kfac_inverse_compute(F, n, 3e38f, (kfac_inv_method_t)m, h, &st),
                         -ERANGE);
        ck_assert_uint_eq(st.n_calls, 2);
        ck_assert_uint_eq(st.n_ok, 1);
        ck_assert_uint_eq(st.n_failures, 1);
        ck_assert_uint_eq(st.n_method_fallbacks, 1);
        ck_assert_uint_ge(st.n_cholesky_failures + st.n_eigen_failures + st.n_nonfinite_outputs,
                          2);
        s_expect_untouched(h, before, n);
        kfac_inverse_free(&h);
    }
}
END_TEST

START_TEST(test_inverse_load_and_copy) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    int n = 6;
    float *F = s_random_spd(&r, n, 20);
    kfac_inverse_t *a = kfac_inverse_new(n), *b = kfac_inverse_new(n), *c = kfac_inverse_new(n);
    ck_assert_int_eq(kfac_inverse_copy(b, a), -ENODATA);
    ck_assert_int_eq(kfac_inverse_compute(F, n, 0.05f, KFAC_INV_EIGEN, a, NULL), 0);
    ck_assert_int_eq(kfac_inverse_copy(b, a), 0);
    ck_assert_int_eq(b->method, KFAC_INV_EIGEN);
    ck_assert(memcmp(a->Q, b->Q, sizeof(float) * n * n) == 0);
    ck_assert_int_eq(kfac_inverse_load_eigen(c, a->Q, a->v, 0.05f), 0);
    ck_assert(memcmp(a->Q, c->Q, sizeof(float) * n * n) == 0);
    ck_assert(memcmp(a->v, c->v, sizeof(float) * n) == 0);

    ck_assert_int_eq(kfac_inverse_compute(F, n, 0.05f, KFAC_INV_CHOLESKY, a, NULL), 0);
    float *packed = malloc(sizeof(float) * kfac_linalg_packed_len(n));
    float *full = malloc(sizeof(float) * n * n);
    kfac_linalg_pack_upper(a->inv, n, packed); /* as it travels */
    kfac_linalg_unpack_upper(packed, n, full);
    ck_assert_int_eq(kfac_inverse_load_cholesky(c, full, 0.05f), 0);
    ck_assert_int_eq(c->method, KFAC_INV_CHOLESKY);
    ck_assert(memcmp(a->inv, c->inv, sizeof(float) * n * n) == 0);
    float keep[36];
    memcpy(keep, c->inv, sizeof keep);
    full[1] = NAN;
    ck_assert_int_eq(kfac_inverse_load_cholesky(c, full, 0.05f), -EDOM);
    full[1] = keep[1];
    full[7] = -1.0f; /* non-positive diagonal: not an SPD inverse */
    ck_assert_int_eq(kfac_inverse_load_cholesky(c, full, 0.05f), -EDOM);
    ck_assert(memcmp(keep, c->inv, sizeof keep) == 0);
    kfac_inverse_trim(c); /* content survives a trim */
    ck_assert(memcmp(keep, c->inv, sizeof keep) == 0);
    ck_assert_int_eq(kfac_inverse_compute(F, n, 0.05f, KFAC_INV_CHOLESKY, c, NULL), 0);

    kfac_inv_method_t m;
    ck_assert_int_eq(kfac_inverse_method_parse("eigen", &m), 0);
    ck_assert_int_eq(m, KFAC_INV_EIGEN);
    ck_assert_int_eq(kfac_inverse_method_parse("lu", &m), -EINVAL);
    ck_assert_str_eq(kfac_inverse_method_name(KFAC_INV_CHOLESKY), "cholesky");
    free(packed);
    free(full);
    free(F);
    kfac_inverse_free(&a);
    kfac_inverse_free(&b);
    kfac_inverse_free(&c);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("kfac_inverse");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_inverse_cholesky_matches_double_small);
    tcase_add_test(tc, test_inverse_eigen_matches_double_small);
    tcase_add_test(tc, test_inverse_eigen_decomposition_residual);
    tcase_add_test(tc, test_inverse_singular_escalates_damping);
    tcase_add_test(tc, test_inverse_indefinite_escalates_then_succeeds);
    tcase_add_test(tc, test_inverse_indefinite_falls_back_to_eigen);
    tcase_add_test(tc, test_inverse_nonfinite_rejected_keeps_last);
    tcase_add_test(tc, test_inverse_overflow_fails_cleanly);
    tcase_add_test(tc, test_inverse_load_and_copy);
    suite_add_tcase(s, tc);
    /* n = 1024: a second or two each, more under the sanitizers */
    TCase *big = tcase_create("n1024");
    tcase_set_timeout(big, 120);
    tcase_add_test(big, test_inverse_cholesky_matches_double_1024);
    tcase_add_test(big, test_inverse_eigen_matches_double_1024);
    suite_add_tcase(s, big);
    return s;
}
