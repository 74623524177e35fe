/* tests/kfac/test_kfac_linalg.c — packing, symmetrizing, finiteness, traces, the
 * factored-Tikhonov pi's and the Kronecker identity, against double-precision
 * brute force on fresh random inputs (seed printed on failure; set
 * KFAC_TEST_SEED to replay one). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/kfac/kfac_linalg.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"

static void s_fill_normal(rng_t *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(r);
}

/* Random symmetric PSD (n, n): X X^T / m with X (n, m) normal, both triangles. */
static void s_random_spd(rng_t *r, float *F, int n, int m) {
    double *X = malloc(sizeof(double) * (size_t)n * (size_t)m);
    for (size_t i = 0; i < (size_t)n * (size_t)m; i++) X[i] = rng_normal(r);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < m; k++) s += X[(size_t)i * m + k] * X[(size_t)j * m + k];
            F[(size_t)i * n + j] = (float)(s / m);
        }
    free(X);
}

START_TEST(test_pack_upper_roundtrip_exact) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const int sizes[] = {1, 2, 3, 17, 64};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        size_t len = kfac_linalg_packed_len(n);
        ck_assert_uint_eq(len, (size_t)n * (n + 1) / 2);
        float *F = malloc(sizeof(float) * n * n), *P = malloc(sizeof(float) * len),
              *B = malloc(sizeof(float) * n * n);
        s_fill_normal(&r, F, (size_t)n * n); /* not symmetric: lower must be ignored */
        ck_assert_int_eq(kfac_linalg_pack_upper(F, n, P), 0);
        for (int i = 0; i < n; i++)
            for (int j = i; j < n; j++)
                ck_assert_msg(memcmp(&P[kfac_linalg_packed_index(n, i, j)], &F[i * n + j],
                                     sizeof(float)) == 0,
                              "packed index (%d,%d) n=%d seed=%llu", i, j, n,
                              (unsigned long long)seed);
        ck_assert_int_eq(kfac_linalg_unpack_upper(P, n, B), 0);
        for (int i = 0; i < n; i++)
            for (int j = i; j < n; j++) {
                /* bit-exact: packing is a copy, no arithmetic */
                ck_assert(memcmp(&B[i * n + j], &F[i * n + j], sizeof(float)) == 0);
                ck_assert(memcmp(&B[j * n + i], &F[i * n + j], sizeof(float)) == 0);
            }
        free(F);
        free(P);
        free(B);
    }
    ck_assert_int_eq(kfac_linalg_pack_upper(NULL, 3, NULL), -EINVAL);
    float one = 1;
    ck_assert_int_eq(kfac_linalg_unpack_upper(&one, 0, &one), -EINVAL);
    ck_assert_uint_eq(kfac_linalg_packed_len(0), 0);
}
END_TEST

START_TEST(test_symmetrize_upper_and_average) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const int sizes[] = {1, 13, 77}; /* 77: several 32-wide tiles and a ragged edge */
    for (int s = 0; s < 3; s++) {
        int n = sizes[s];
        float *F = malloc(sizeof(float) * n * n), *G = malloc(sizeof(float) * n * n),
              *orig = malloc(sizeof(float) * n * n);
        s_fill_normal(&r, orig, (size_t)n * n);
        memcpy(F, orig, sizeof(float) * n * n);
        memcpy(G, orig, sizeof(float) * n * n);
        kfac_linalg_symmetrize_upper(F, n);
        kfac_linalg_symmetrize_average(G, n);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                float up = orig[(i < j ? i : j) * n + (i < j ? j : i)];
                ck_assert_msg(F[i * n + j] == up, "upper copy (%d,%d) n=%d seed=%llu", i, j, n,
                              (unsigned long long)seed);
                /* one float add and a multiply by 0.5: exact to 1 ulp of the sum */
                double avg = 0.5 * ((double)orig[i * n + j] + (double)orig[j * n + i]);
                ck_assert_msg(fabs(G[i * n + j] - avg) <= 1e-6 * (1 + fabs(avg)),
                              "average (%d,%d)", i, j);
                ck_assert(G[i * n + j] == G[j * n + i]);
            }
        free(F);
        free(G);
        free(orig);
    }
}
END_TEST

START_TEST(test_all_finite_detects_nan_inf) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    enum { N = 10000 }; /* spans several 4096-value scan blocks */
    static float x[N];
    s_fill_normal(&r, x, N);
    x[17] = 3e38f; /* large but finite */
    ck_assert(kfac_linalg_all_finite(x, N));
    ck_assert(kfac_linalg_all_finite(NULL, 0));
    ck_assert(!kfac_linalg_all_finite(NULL, 1));
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int b = 0; b < 3; b++) {
        size_t pos = rng_below(&r, N);
        float keep = x[pos];
        x[pos] = bad[b];
        ck_assert_msg(!kfac_linalg_all_finite(x, N), "missed %g at %zu seed=%llu", bad[b], pos,
                      (unsigned long long)seed);
        x[pos] = keep;
    }
    x[N - 1] = NAN; /* last value of a ragged last block */
    ck_assert(!kfac_linalg_all_finite(x, N));
    ck_assert(kfac_linalg_all_finite(x, N - 1));
    /* upper-only check ignores the lower triangle */
    float F[9] = {1, 2, 3, NAN, 5, 6, INFINITY, NAN, 9};
    ck_assert(kfac_linalg_upper_finite(F, 3));
    F[5] = NAN;
    ck_assert(!kfac_linalg_upper_finite(F, 3));
}
END_TEST

START_TEST(test_trace_and_add_diagonal) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    int n = 31;
    float F[31 * 31];
    s_fill_normal(&r, F, (size_t)n * n);
    double t = 0;
    for (int i = 0; i < n; i++) t += F[i * n + i];
    ck_assert(fabs(kfac_linalg_trace(F, n) - t) <= 1e-12 * (1 + fabs(t)));
    kfac_linalg_add_diagonal(F, n, 0.5f);
    /* n float additions of 0.5 to O(1) values: each rounds by <= 2^-24 relative */
    ck_assert(fabs(kfac_linalg_trace(F, n) - (t + 0.5 * n)) <= 1e-5 * n);
    ck_assert(isnan(kfac_linalg_trace(NULL, 2)));
}
END_TEST

START_TEST(test_kron_apply_matches_explicit_kronecker) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int rep = 0; rep < 4; rep++) {
        int ma = 1 + (int)rng_below(&r, 6), na = 1 + (int)rng_below(&r, 6);
        int mb = 1 + (int)rng_below(&r, 6), nb = 1 + (int)rng_below(&r, 6);
        float *A = malloc(sizeof(float) * ma * na), *B = malloc(sizeof(float) * mb * nb);
        float *C = malloc(sizeof(float) * nb * na), *out = malloc(sizeof(float) * mb * ma);
        float *work = malloc(sizeof(float) * nb * ma);
        s_fill_normal(&r, A, (size_t)ma * na);
        s_fill_normal(&r, B, (size_t)mb * nb);
        s_fill_normal(&r, C, (size_t)nb * na);
        ck_assert_int_eq(kfac_linalg_kron_apply(A, ma, na, B, mb, nb, C, out, work), 0);
        /* Explicit (A (x) B): entry ((i, k), (j, l)) = A[i][j] B[k][l], row index
         * i*mb + k, column index j*nb + l; vec(C)[j*nb + l] = C[l][j] (columns
         * stacked); vec(out)[i*mb + k] = out[k][i]. */
        for (int i = 0; i < ma; i++)
            for (int k = 0; k < mb; k++) {
                double y = 0, ay = 0;
                for (int j = 0; j < na; j++)
                    for (int l = 0; l < nb; l++) {
                        double kij = (double)A[i * na + j] * (double)B[k * nb + l];
                        y += kij * (double)C[l * na + j];
                        ay += fabs(kij * (double)C[l * na + j]);
                    }
                /* float gemm of <= 36 terms: error <= ~2 * 36 * 2^-24 * sum|terms| */
                ck_assert_msg(fabs(out[k * ma + i] - y) <= 1e-5 * (ay + 1e-30),
                              "kron (%d,%d): %g vs %g, seed=%llu", k, i, out[k * ma + i], y,
                              (unsigned long long)seed);
            }
        free(A);
        free(B);
        free(C);
        free(out);
        free(work);
    }
}
END_TEST

START_TEST(test_pi_trace_matches_formula) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    int nA = 9, nG = 5;
    float A[81], G[25];
    s_random_spd(&r, A, nA, 20);
    s_random_spd(&r, G, nG, 20);
    double scale = exp(3.0 * rng_normal(&r)); /* make the traces differ by orders */
    for (int i = 0; i < nA * nA; i++) A[i] = (float)(A[i] * scale);
    double tA = 0, tG = 0;
    for (int i = 0; i < nA; i++) tA += A[i * nA + i];
    for (int i = 0; i < nG; i++) tG += G[i * nG + i];
    double want = sqrt((tA / nA) / (tG / nG));
    float pi = kfac_pi_trace(A, nA, G, nG);
    /* double arithmetic rounded once to float */
    ck_assert_msg(fabs(pi - want) <= 1e-6 * want, "pi %g vs %g seed=%llu", pi, want,
                  (unsigned long long)seed);
    ck_assert(fabs(kfac_pi_trace(G, nG, A, nA) * pi - 1.0) <= 1e-6);

    /* guards: zero, negative, NaN and Inf traces fall back to 1 */
    float Z[25] = {0};
    ck_assert(kfac_pi_trace(Z, nG, A, nA) == 1.0f);
    ck_assert(kfac_pi_trace(A, nA, Z, nG) == 1.0f);
    float Nn[25];
    memcpy(Nn, G, sizeof Nn);
    Nn[6] = NAN;
    ck_assert(kfac_pi_trace(A, nA, Nn, nG) == 1.0f);
    Nn[6] = INFINITY;
    ck_assert(kfac_pi_trace(Nn, nG, A, nA) == 1.0f);
    Nn[6] = -1e9f;
    ck_assert(kfac_pi_trace(Nn, nG, A, nA) == 1.0f);
    ck_assert(kfac_pi_trace(NULL, 3, A, nA) == 1.0f);
    ck_assert(kfac_pi_from_norms2(1e-300, 1e300) == 1.0f); /* underflows float */
}
END_TEST

START_TEST(test_pi_trace3_matches_eq12) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    int nA = 4, nB = 7, nC = 3;
    float A[16], B[49], C[9];
    s_random_spd(&r, A, nA, 10);
    s_random_spd(&r, B, nB, 10);
    s_random_spd(&r, C, nC, 10);
    double sb = exp(2.0 * rng_normal(&r));
    for (int i = 0; i < nB * nB; i++) B[i] = (float)(B[i] * sb);
    double ra = 0, rb = 0, rc = 0;
    for (int i = 0; i < nA; i++) ra += A[i * nA + i];
    for (int i = 0; i < nB; i++) rb += B[i * nB + i];
    for (int i = 0; i < nC; i++) rc += C[i * nC + i];
    ra /= nA;
    rb /= nB;
    rc /= nC;
    /* Eq. 12 written out literally for each factor */
    double want[3] = {cbrt(ra * ra / (rb * rc)), cbrt(rb * rb / (ra * rc)),
                      cbrt(rc * rc / (ra * rb))};
    float pi[3];
    ck_assert_int_eq(kfac_pi_trace3(A, nA, B, nB, C, nC, pi), 0);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(fabs(pi[i] - want[i]) <= 1e-6 * want[i], "pi[%d] %g vs %g seed=%llu", i,
                      pi[i], want[i], (unsigned long long)seed);
    ck_assert(fabs((double)pi[0] * pi[1] * pi[2] - 1.0) <= 1e-6);

    /* guards */
    float Z[9] = {0};
    ck_assert_int_eq(kfac_pi_trace3(A, nA, B, nB, Z, nC, pi), 0);
    ck_assert(pi[0] == 1.0f && pi[1] == 1.0f && pi[2] == 1.0f);
    C[4] = NAN;
    ck_assert_int_eq(kfac_pi_trace3(A, nA, B, nB, C, nC, pi), 0);
    ck_assert(pi[0] == 1.0f && pi[1] == 1.0f && pi[2] == 1.0f);
    ck_assert_int_eq(kfac_pi_trace3(A, nA, NULL, nB, C, nC, pi), -EINVAL);
    ck_assert(pi[0] == 1.0f && pi[1] == 1.0f && pi[2] == 1.0f);
    ck_assert_int_eq(kfac_pi_trace3(A, nA, B, nB, C, nC, NULL), -EINVAL);
    /* extreme but finite ratios do not overflow through the product */
    double r3[3] = {1e200, 1e-200, 1.0};
    kfac_pi_from_norms3(r3, pi);
    ck_assert(pi[0] == 1.0f && pi[1] == 1.0f && pi[2] == 1.0f); /* 1e200 not a float */
    double r4[3] = {1e20, 1e-10, 1e-10};
    kfac_pi_from_norms3(r4, pi);
    ck_assert(fabs(pi[0] - 1e20) <= 1e14 && fabs(pi[1] - 1e-10) <= 1e-16);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("kfac_linalg");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_pack_upper_roundtrip_exact);
    tcase_add_test(tc, test_symmetrize_upper_and_average);
    tcase_add_test(tc, test_all_finite_detects_nan_inf);
    tcase_add_test(tc, test_trace_and_add_diagonal);
    tcase_add_test(tc, test_kron_apply_matches_explicit_kronecker);
    tcase_add_test(tc, test_pi_trace_matches_formula);
    tcase_add_test(tc, test_pi_trace3_matches_eq12);
    suite_add_tcase(s, tc);
    return s;
}
