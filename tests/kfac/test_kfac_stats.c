/* tests/kfac/test_kfac_stats.c — K-FAC factor statistics (common/kfac/kfac_stats.c)
 * against brute-force double-precision oracles on fresh random inputs. The
 * seed is printed on failure; KFAC_TEST_SEED=<n> replays a run.
 *
 * Kronecker convention in the oracles: the gradient matrix V (out, dA) =
 * [dW | db] is vectorized column by column, vec(V)[j*out + o] = V[o][j], so
 * the exact Fisher block is F = E[vec(V) vec(V)^T] and the K-FAC claim is
 * F ~ A (x) G with (A (x) G)[(j,o),(j',o')] = A[j][j'] G[o][o'].
 *
 * Tolerances. All inputs are O(1). A float32 SYRK over m terms has a
 * rounding error of at most ~m * 6e-8 times the largest term (much less in
 * practice); the tiny problems here have m <= ~200, so errors are compared
 * to the largest |reference| entry of the matrix with rtol = 2e-5 (float
 * rounding of exact-equality identities, like A (x) G = vec vec^T for one
 * example, is a few ulp: 1e-5). Comparisons against per-example runs of the
 * network (a different float32 evaluation order than the batched run) use
 * 1e-4. A wrong normalization (1/n, |T|, g_scale), index or transpose gives
 * errors of order 1.
 */
#include <cblas.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/kfac/kfac_linalg.h"
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"
#include "tests/lib/stats_oracle.h"

/* ---- the row-major reference of the conv statistics ---------------------------- */

/* The conv statistics from row-major patches, a float32 twin of the library's
 * kfac_stats_conv_cm (which reads nn's channel-major l->cols) with the same
 * math (kfac_stats.h): patches (n*P, K) rows (example, position), dy (n, out,
 * P) position-minor; writes A (K+bias)^2 and G (out, out), full symmetric.
 * It is itself checked against the double-precision definitions
 * (s_conv_refs) below, and then serves as the reference the library's path
 * is compared with on shapes too large for the quartic double oracles. */
static void s_ref_conv_rowmajor(kfac_mode_t mode, const float *patches, const float *dy, int n, int P, int K,
                                int out, int bias, float g_scale, float *A, float *G) {
    const int dA = K + bias;
    const size_t R = (size_t)n * P;
    const int m = mode == KFAC_MODE_KFC ? (int)R : n; /* rows of x and y below */
    float *x = NEWF((size_t)m * K), *y = NEWF((size_t)m * out), *ones = NEWF(m > P ? m : P);
    for (int i = 0; i < (m > P ? m : P); i++) ones[i] = 1.0f;
    if (mode == KFAC_MODE_KFC) {
        /* x: the patches as they are; y: dy (n, out, P) -> rows (example, position). */
        memcpy(x, patches, R * K * sizeof(float));
        for (int i = 0; i < n; i++)
            for (int o = 0; o < out; o++)
                for (int t = 0; t < P; t++) y[((size_t)i * P + t) * out + o] = dy[((size_t)i * out + o) * P + t];
    } else {
        for (int i = 0; i < n; i++)
            /* x[i] = (1/P) patches_i^T 1: the mean patch; patches_i (P, K) row-major. */
            cblas_sgemv(CblasRowMajor, CblasTrans, P, K, 1.0f / (float)P, patches + (size_t)i * P * K, K, ones, 1,
                        0.0f, x + (size_t)i * K, 1);
        /* y (n*out) = dy (n*out, P) 1: the per-example sum over positions. */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n * out, P, 1.0f, dy, P, ones, 1, 0.0f, y, 1);
    }
    /* A[0:K, 0:K] (upper) = (1/m) x^T x; x (m, K) row-major, leading dim dA. */
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, K, m, 1.0f / (float)m, x, K, 0.0f, A, dA);
    if (bias) {
        /* A[0:K, K] = (1/m) x^T 1 (column means), down column K with stride dA. */
        cblas_sgemv(CblasRowMajor, CblasTrans, m, K, 1.0f / (float)m, x, K, ones, 1, 0.0f, A + K, dA);
        A[(size_t)K * dA + K] = 1.0f;
    }
    kfac_linalg_symmetrize_upper(A, dA);
    /* G (upper) = (g_scale^2 / n) y^T y; y (m, out) row-major. */
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, out, m, g_scale * g_scale / (float)n, y, out, 0.0f, G, out);
    kfac_linalg_symmetrize_upper(G, out);
    free(x); free(y); free(ones);
}

/* ---- fc --------------------------------------------------------------------- */

START_TEST(test_fc_single_example_exact_fisher) {
    SEEDED();
    for (int bias = 0; bias <= 1; bias++) {
        int in = 2 + (int)rng_below(&rng, 5), out = 1 + (int)rng_below(&rng, 4), dA = in + bias;
        float *a = NEWF(in), *dy = NEWF(out), *A = NEWF(dA * dA), *G = NEWF(out * out);
        oracle_randn(&rng, a, in);
        oracle_randn(&rng, dy, out);
        ck_assert_int_eq(kfac_stats_fc(a, dy, 1, in, out, bias, 1.0f, A, G, NULL), 0);
        /* dW = g [a;1]^T: the exact Fisher of one example is vec vec^T. */
        double *V = NEWD(out * dA), *F = NEWD((size_t)out * dA * out * dA);
        for (int o = 0; o < out; o++)
            for (int j = 0; j < dA; j++) V[o * dA + j] = (double)dy[o] * (j < in ? a[j] : 1.0);
        oracle_add_fisher(F, V, out, dA, 1.0);
        oracle_check_kron("fc single example A(x)G", A, dA, G, out, F, RTOL_EXACT, seed);
        free(a); free(dy); free(A); free(G); free(V); free(F);
    }
}
END_TEST

START_TEST(test_fc_batch_matches_definition) {
    SEEDED();
    for (int bias = 0; bias <= 1; bias++) {
        int n = 2 + (int)rng_below(&rng, 30), in = 1 + (int)rng_below(&rng, 20), out = 1 + (int)rng_below(&rng, 12);
        int dA = in + bias;
        float *a = NEWF(n * in), *dy = NEWF(n * out), *A = NEWF(dA * dA), *G = NEWF(out * out);
        oracle_randn(&rng, a, (size_t)n * in);
        oracle_randn(&rng, dy, (size_t)n * out);
        for (int i = 0; i < n * out; i++) dy[i] /= (float)n; /* nn's dy = g / n */
        ck_assert_int_eq(kfac_stats_fc(a, dy, n, in, out, bias, (float)n, A, G, NULL), 0);
        double *Ar = NEWD(dA * dA), *Gr = NEWD(out * out), *x = NEWD(dA), *g = NEWD(out);
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < in; j++) x[j] = a[i * in + j];
            if (bias) x[in] = 1.0;
            for (int o = 0; o < out; o++) g[o] = (double)n * dy[i * out + o];
            oracle_add_outer(Ar, x, dA, 1.0 / n);
            oracle_add_outer(Gr, g, out, 1.0 / n);
        }
        oracle_check_close("fc A", A, Ar, (size_t)dA * dA, RTOL_SUM, seed);
        oracle_check_close("fc G", G, Gr, (size_t)out * out, RTOL_SUM, seed);
        oracle_check_symmetric("fc A", A, dA, seed);
        oracle_check_symmetric("fc G", G, out, seed);
        free(a); free(dy); free(A); free(G); free(Ar); free(Gr); free(x); free(g);
    }
}
END_TEST

START_TEST(test_fc_rejects_bad_dims) {
    float a[4] = {0}, A[4], G[4];
    ck_assert_int_eq(kfac_stats_fc(a, a, 0, 1, 1, 1, 1.0f, A, G, NULL), -EINVAL);
    ck_assert_int_eq(kfac_stats_fc(NULL, a, 1, 1, 1, 1, 1.0f, A, G, NULL), -EINVAL);
    ck_assert_int_eq(kfac_stats_conv_cm(KFAC_MODE_STANDARD, a, a, 1, 1, 1, 1, 1, 1.0f, A, G, NULL), -EINVAL);
}
END_TEST

/* ---- conv --------------------------------------------------------------------- */

START_TEST(test_conv_single_location_exact_fisher) {
    SEEDED();
    /* kernel covering the whole (unpadded) input: one output position. */
    int C = 1 + (int)rng_below(&rng, 3), k = 2 + (int)rng_below(&rng, 2), out = 1 + (int)rng_below(&rng, 3);
    oracle_geom_t g = oracle_geom(C, k, k, k, 1, 0);
    ck_assert_int_eq(g.OH * g.OW, 1);
    int K = C * k * k, dA = K + 1;
    float *x = NEWF(C * k * k), *dy = NEWF(out);
    oracle_randn(&rng, x, (size_t)C * k * k);
    oracle_randn(&rng, dy, out);
    float *cols = oracle_im2col(&g, x, 1);
    for (int mode = KFAC_MODE_KFC; mode <= KFAC_MODE_AVG; mode++) {
        float *A = NEWF(dA * dA), *G = NEWF(out * out);
        /* one position: the channel-major patch matrix (K, 1) is the row-major one */
        ck_assert_int_eq(kfac_stats_conv_cm((kfac_mode_t)mode, cols, dy, 1, 1, K, out, 1, 1.0f, A, G, NULL), 0);
        double *p = NEWD(dA), *V = NEWD(out * dA), *F = NEWD((size_t)out * dA * out * dA);
        oracle_patch(&g, x, 0, 0, 1, p);
        for (int o = 0; o < out; o++)
            for (int j = 0; j < dA; j++) V[o * dA + j] = dy[o] * p[j];
        oracle_add_fisher(F, V, out, dA, 1.0);
        oracle_check_kron(mode == KFAC_MODE_KFC ? "kfc 1 location" : "avg 1 location", A, dA, G, out, F, RTOL_EXACT, seed);
        free(A); free(G); free(p); free(V); free(F);
    }
    free(x); free(dy); free(cols);
}
END_TEST

/* Both modes against their definitions on a padded / strided geometry, and
 * the Kronecker products against Ba et al. App. A Eq. 15 and Eq. 19 written
 * out with per-position statistics: first the row-major reference
 * (s_ref_conv_rowmajor), then the library's channel-major path. */
START_TEST(test_conv_factors_match_definition) {
    SEEDED();
    for (int rep = 0; rep < 3; rep++) {
        int n = 1 + (int)rng_below(&rng, 4), C = 1 + (int)rng_below(&rng, 3), k = 1 + (int)rng_below(&rng, 3);
        int stride = 1 + (int)rng_below(&rng, 2), pad = (int)rng_below(&rng, (uint32_t)k);
        int H = k + (int)rng_below(&rng, 4), W = k + (int)rng_below(&rng, 4), out = 1 + (int)rng_below(&rng, 5);
        int bias = rep != 1;
        oracle_geom_t g = oracle_geom(C, H, W, k, stride, pad);
        int K = C * k * k, dA = K + bias, P = g.OH * g.OW;
        float *x = NEWF((size_t)n * C * H * W), *dy = NEWF((size_t)n * out * P);
        oracle_randn(&rng, x, (size_t)n * C * H * W);
        oracle_randn(&rng, dy, (size_t)n * out * P);
        for (size_t i = 0; i < (size_t)n * out * P; i++) dy[i] /= (float)n;
        double *gs = NEWD((size_t)n * out * P);
        for (size_t i = 0; i < (size_t)n * out * P; i++) gs[i] = (double)n * dy[i];
        float *cols = oracle_im2col(&g, x, n);
        double *Ak = NEWD(dA * dA), *Gk = NEWD(out * out), *Aa = NEWD(dA * dA), *Ga = NEWD(out * out);
        oracle_conv_refs(&g, x, gs, n, out, bias, Ak, Gk, Aa, Ga);
        float *A = NEWF(dA * dA), *G = NEWF(out * out);
        s_ref_conv_rowmajor(KFAC_MODE_KFC, cols, dy, n, P, K, out, bias, (float)n, A, G);
        oracle_check_close("kfc A", A, Ak, (size_t)dA * dA, RTOL_SUM, seed);
        oracle_check_close("kfc G", G, Gk, (size_t)out * out, RTOL_SUM, seed);
        oracle_check_symmetric("kfc G", G, out, seed);
        /* Eq. 15: A (x) G = |T| E_{i,t}[p p^T] (x) E_{i,t}[g g^T]. */
        {
            size_t N = (size_t)dA * out;
            double *F = NEWD(N * N);
            for (int j = 0; j < dA; j++)
                for (int o = 0; o < out; o++)
                    for (int j2 = 0; j2 < dA; j2++)
                        for (int o2 = 0; o2 < out; o2++)
                            F[((size_t)j * out + o) * N + (size_t)j2 * out + o2] =
                                P * Ak[j * dA + j2] * (Gk[o * out + o2] / P);
            oracle_check_kron("kfc Eq. 15", A, dA, G, out, F, RTOL_SUM, seed);
            free(F);
        }
        s_ref_conv_rowmajor(KFAC_MODE_AVG, cols, dy, n, P, K, out, bias, (float)n, A, G);
        oracle_check_close("avg A", A, Aa, (size_t)dA * dA, RTOL_SUM, seed);
        oracle_check_close("avg G", G, Ga, (size_t)out * out, RTOL_SUM, seed);
        /* Eq. 19: |T|^2 E[E_t[A_t] E_t[A_t]^T] (x) E[E_t[Ds_t] E_t[Ds_t]^T], built from
         * position means in double. */
        {
            size_t N = (size_t)dA * out;
            double *F = NEWD(N * N), *mg = NEWD(out), *Em = NEWD(out * out);
            for (int i = 0; i < n; i++) {
                for (int o = 0; o < out; o++) {
                    mg[o] = 0.0;
                    for (int t = 0; t < P; t++) mg[o] += gs[((size_t)i * out + o) * P + t] / P;
                }
                oracle_add_outer(Em, mg, out, 1.0 / n);
            }
            for (int j = 0; j < dA; j++)
                for (int o = 0; o < out; o++)
                    for (int j2 = 0; j2 < dA; j2++)
                        for (int o2 = 0; o2 < out; o2++)
                            F[((size_t)j * out + o) * N + (size_t)j2 * out + o2] =
                                (double)P * P * Aa[j * dA + j2] * Em[o * out + o2];
            oracle_check_kron("avg Eq. 19", A, dA, G, out, F, RTOL_SUM, seed);
            free(F); free(mg); free(Em);
        }
        /* The channel-major entry point (nn's own patch layout) gives the same factors
         * against the same double-precision references. */
        {
            size_t R = (size_t)n * P;
            float *cm = NEWF(R * K);
            for (size_t r = 0; r < R; r++)
                for (int j = 0; j < K; j++) cm[(size_t)j * R + r] = cols[r * K + j];
            for (int mode = KFAC_MODE_KFC; mode <= KFAC_MODE_AVG; mode++) {
                ck_assert_int_eq(kfac_stats_conv_cm((kfac_mode_t)mode, cm, dy, n, P, K, out, bias, (float)n, A, G, NULL), 0);
                oracle_check_close("cm A", A, mode == KFAC_MODE_KFC ? Ak : Aa, (size_t)dA * dA, RTOL_SUM, seed);
                oracle_check_close("cm G", G, mode == KFAC_MODE_KFC ? Gk : Ga, (size_t)out * out, RTOL_SUM, seed);
            }
            free(cm);
        }
        free(x); free(dy); free(gs); free(cols); free(Ak); free(Gk); free(Aa); free(Ga); free(A); free(G);
    }
}
END_TEST

/* The library's channel-major path against the row-major reference on
 * network-sized shapes (K up to 150, |T| up to 100, out up to 40), where the
 * double-precision oracles above would cost O(n |T| K^2) per entry check:
 * both are float32 SYRK/GEMV sums of the same terms in different orders,
 * RTOL_SUM of the largest entry. A transposed or mis-strided patch matrix,
 * a wrong 1/|T| or 1/n gives errors of order 1. */
START_TEST(test_conv_cm_matches_rowmajor_reference) {
    SEEDED();
    for (int rep = 0; rep < 4; rep++) {
        int n = 1 + (int)rng_below(&rng, 8), P = 1 + (int)rng_below(&rng, 100), K = 1 + (int)rng_below(&rng, 150);
        int out = 1 + (int)rng_below(&rng, 40), bias = rep != 2, dA = K + bias;
        size_t R = (size_t)n * P;
        float *rm = NEWF(R * K), *cm = NEWF(R * K), *dy = NEWF((size_t)n * out * P);
        oracle_randn(&rng, rm, R * K);
        oracle_randn(&rng, dy, (size_t)n * out * P);
        for (size_t r = 0; r < R; r++)
            for (int j = 0; j < K; j++) cm[(size_t)j * R + r] = rm[r * K + j];
        for (int mode = KFAC_MODE_KFC; mode <= KFAC_MODE_AVG; mode++) {
            float *A = NEWF((size_t)dA * dA), *G = NEWF((size_t)out * out);
            float *Ar = NEWF((size_t)dA * dA), *Gr = NEWF((size_t)out * out);
            double *Ad = NEWD((size_t)dA * dA), *Gd = NEWD((size_t)out * out);
            float *work = NEWF(kfac_stats_conv_cm_work_len((kfac_mode_t)mode, n, P, K, out));
            s_ref_conv_rowmajor((kfac_mode_t)mode, rm, dy, n, P, K, out, bias, (float)n, Ar, Gr);
            ck_assert_int_eq(kfac_stats_conv_cm((kfac_mode_t)mode, cm, dy, n, P, K, out, bias, (float)n, A, G, work),
                             0);
            for (size_t i = 0; i < (size_t)dA * dA; i++) Ad[i] = Ar[i];
            for (size_t i = 0; i < (size_t)out * out; i++) Gd[i] = Gr[i];
            oracle_check_close(mode == KFAC_MODE_KFC ? "kfc cm A vs row-major" : "avg cm A vs row-major", A, Ad,
                          (size_t)dA * dA, RTOL_SUM, seed);
            oracle_check_close(mode == KFAC_MODE_KFC ? "kfc cm G vs row-major" : "avg cm G vs row-major", G, Gd,
                          (size_t)out * out, RTOL_SUM, seed);
            oracle_check_symmetric("cm A", A, dA, seed);
            oracle_check_symmetric("cm G", G, out, seed);
            free(A); free(G); free(Ar); free(Gr); free(Ad); free(Gd); free(work);
        }
        free(rm); free(cm); free(dy);
    }
}
END_TEST

/* ---- doubly factored ------------------------------------------------------------ */

/* An activation with a dominant rank-1 part: 3 k0 psi0^T + noise * E. psi0 > 0
 * keeps sum(psi) far from 0 so the sign convention is unambiguous. */
static void s_dominant_activation(rng_t *r, int C, int T, double noise, float *x) {
    double *k0 = NEWD(T), *p0 = NEWD(C);
    for (int t = 0; t < T; t++) k0[t] = rng_normal(r);
    for (int c = 0; c < C; c++) p0[c] = fabs(rng_normal(r)) + 0.2;
    for (int c = 0; c < C; c++)
        for (int t = 0; t < T; t++) x[(size_t)c * T + t] = (float)(3.0 * k0[t] * p0[c] + noise * rng_normal(r));
    free(k0); free(p0);
}

START_TEST(test_doubly_rank1_reproduces_rank1_matrix) {
    SEEDED();
    for (int rep = 0; rep < 6; rep++) {
        /* both branches: T <= C (Gram on the spatial side) and T > C */
        int C = 1 + (int)rng_below(&rng, 9), T = 1 + (int)rng_below(&rng, 9);
        float *x = NEWF(C * T), *K = NEWF(T), *psi = NEWF(C);
        s_dominant_activation(&rng, C, T, 0.0, x);
        if (rep == 5) for (int c = 0; c < C; c++) for (int t = 0; t < T; t++) x[c * T + t] = -x[c * T + t];
        double sigma = 0.0;
        ck_assert_int_eq(kfac_stats_rank1(x, C, T, K, psi, &sigma), 0);
        double *ref = NEWD(C * T);
        for (int c = 0; c < C; c++)
            for (int t = 0; t < T; t++) ref[c * T + t] = x[c * T + t];
        float *prod = NEWF(C * T);
        for (int c = 0; c < C; c++)
            for (int t = 0; t < T; t++) prod[c * T + t] = K[t] * psi[c];
        oracle_check_close("K psi^T = A", prod, ref, (size_t)C * T, RTOL_EXACT, seed);
        /* the singular value splits evenly: |K|^2 = |psi|^2 = sigma */
        double nk = 0.0, np = 0.0, sp = 0.0;
        for (int t = 0; t < T; t++) nk += (double)K[t] * K[t];
        for (int c = 0; c < C; c++) np += (double)psi[c] * psi[c], sp += psi[c];
        ck_assert_msg(fabs(nk - sigma) <= 1e-5 * sigma && fabs(np - sigma) <= 1e-5 * sigma,
                      "|K|^2 %g |psi|^2 %g sigma %g, seed %llu", nk, np, sigma, (unsigned long long)seed);
        ck_assert_msg(sp >= 0.0, "sign convention: sum(psi) = %g, seed %llu", sp, (unsigned long long)seed);
        free(x); free(K); free(psi); free(ref); free(prod);
    }
    /* all-zero activation */
    float z[6] = {0}, K[3] = {1, 1, 1}, psi[2] = {1, 1};
    ck_assert_int_eq(kfac_stats_rank1(z, 2, 3, K, psi, NULL), 0);
    ck_assert(K[0] == 0.0f && K[2] == 0.0f && psi[1] == 0.0f);
}
END_TEST

START_TEST(test_doubly_rank1_is_leading_singular_triple) {
    SEEDED();
    for (int rep = 0; rep < 6; rep++) {
        int C = 2 + (int)rng_below(&rng, 8), T = 2 + (int)rng_below(&rng, 8);
        float *x = NEWF(C * T), *K = NEWF(T), *psi = NEWF(C);
        s_dominant_activation(&rng, C, T, 0.3, x);
        double sigma, *u = NEWD(T), *v = NEWD(C), *Kr = NEWD(T), *Pr = NEWD(C);
        ck_assert_int_eq(kfac_stats_rank1(x, C, T, K, psi, &sigma), 0);
        double sr = oracle_power_svd(x, C, T, u, v);
        ck_assert_msg(fabs(sigma - sr) <= 1e-6 * sr, "sigma %g vs power iteration %g, seed %llu", sigma, sr,
                      (unsigned long long)seed);
        for (int t = 0; t < T; t++) Kr[t] = sqrt(sr) * u[t];
        for (int c = 0; c < C; c++) Pr[c] = sqrt(sr) * v[c];
        oracle_check_close("K", K, Kr, T, RTOL_EXACT * 10, seed);
        oracle_check_close("Psi", psi, Pr, C, RTOL_EXACT * 10, seed);
        free(x); free(K); free(psi); free(u); free(v); free(Kr); free(Pr);
    }
}
END_TEST

START_TEST(test_doubly_factors_match_definition) {
    SEEDED();
    for (int rep = 0; rep < 3; rep++) {
        int n = 1 + (int)rng_below(&rng, 6), C = 1 + (int)rng_below(&rng, 6), T = 1 + (int)rng_below(&rng, 6);
        int out = 1 + (int)rng_below(&rng, 5);
        float *a = NEWF((size_t)n * C * T), *dy = NEWF(n * out);
        for (int i = 0; i < n; i++) s_dominant_activation(&rng, C, T, rep == 0 ? 0.0 : 0.3, a + (size_t)i * C * T);
        oracle_randn(&rng, dy, (size_t)n * out);
        for (int i = 0; i < n * out; i++) dy[i] /= (float)n;
        float *KK = NEWF(T * T), *PP = NEWF(C * C), *G = NEWF(out * out), *Gb = NEWF(out * out);
        ck_assert_int_eq(kfac_stats_doubly(a, dy, n, C, T, out, (float)n, KK, PP, G, Gb, NULL), 0);
        double *KKr = NEWD(T * T), *PPr = NEWD(C * C), *Gr = NEWD(out * out);
        double *u = NEWD(T), *v = NEWD(C), *g = NEWD(out);
        for (int i = 0; i < n; i++) {
            double s = oracle_power_svd(a + (size_t)i * C * T, C, T, u, v);
            for (int t = 0; t < T; t++) u[t] *= sqrt(s);
            for (int c = 0; c < C; c++) v[c] *= sqrt(s);
            oracle_add_outer(KKr, u, T, 1.0 / n);
            oracle_add_outer(PPr, v, C, 1.0 / n);
            for (int o = 0; o < out; o++) g[o] = (double)n * dy[i * out + o];
            oracle_add_outer(Gr, g, out, 1.0 / n);
        }
        oracle_check_close("E[K K^T]", KK, KKr, (size_t)T * T, RTOL_EXACT * 10, seed);
        oracle_check_close("E[Psi Psi^T]", PP, PPr, (size_t)C * C, RTOL_EXACT * 10, seed);
        oracle_check_close("doubly G", G, Gr, (size_t)out * out, RTOL_SUM, seed);
        oracle_check_close("doubly Gbias", Gb, Gr, (size_t)out * out, RTOL_SUM, seed);
        oracle_check_symmetric("E[K K^T]", KK, T, seed);
        free(a); free(dy); free(KK); free(PP); free(G); free(Gb); free(KKr); free(PPr); free(Gr);
        free(u); free(v); free(g);
    }
}
END_TEST

/* For one example whose activation is exactly rank 1, the three-way product
 * E[Psi Psi^T] (x) E[K K^T] (x) G (input index c*T + t, then the output)
 * equals the exact weight Fisher block vec(dW) vec(dW)^T. */
START_TEST(test_doubly_single_rank1_example_exact_fisher) {
    SEEDED();
    int C = 1 + (int)rng_below(&rng, 4), T = 1 + (int)rng_below(&rng, 4), out = 1 + (int)rng_below(&rng, 3);
    int in = C * T;
    float *a = NEWF(in), *dy = NEWF(out);
    s_dominant_activation(&rng, C, T, 0.0, a);
    oracle_randn(&rng, dy, out);
    float *KK = NEWF(T * T), *PP = NEWF(C * C), *G = NEWF(out * out);
    ck_assert_int_eq(kfac_stats_doubly(a, dy, 1, C, T, out, 1.0f, KK, PP, G, NULL, NULL), 0);
    /* A_in = PP (x) KK over the input index c*T + t */
    float *Ain = NEWF(in * in);
    for (int c = 0; c < C; c++)
        for (int t = 0; t < T; t++)
            for (int c2 = 0; c2 < C; c2++)
                for (int t2 = 0; t2 < T; t2++)
                    Ain[(c * T + t) * in + c2 * T + t2] = PP[c * C + c2] * KK[t * T + t2];
    double *V = NEWD(out * in), *F = NEWD((size_t)out * in * out * in);
    for (int o = 0; o < out; o++)
        for (int j = 0; j < in; j++) V[o * in + j] = (double)dy[o] * a[j];
    oracle_add_fisher(F, V, out, in, 1.0);
    oracle_check_kron("doubly single example", Ain, in, G, out, F, RTOL_EXACT * 10, seed);
    free(a); free(dy); free(KK); free(PP); free(G); free(Ain); free(V); free(F);
}
END_TEST

/* ---- batch norm ------------------------------------------------------------------ */

START_TEST(test_bn_blocks_match_direct) {
    SEEDED();
    int n = 1 + (int)rng_below(&rng, 8), c = 1 + (int)rng_below(&rng, 6), P = 1 + (int)rng_below(&rng, 20);
    size_t sz = (size_t)n * c * P;
    float *xh = NEWF(sz), *dy = NEWF(sz), *F = NEWF(3 * c);
    oracle_randn(&rng, xh, sz);
    oracle_randn(&rng, dy, sz);
    for (size_t i = 0; i < sz; i++) dy[i] /= (float)n;
    ck_assert_int_eq(kfac_stats_bn(xh, dy, n, c, P, (float)n, F), 0);
    double *ref = NEWD(3 * c);
    for (int ch = 0; ch < c; ch++)
        for (int i = 0; i < n; i++) {
            double dg = 0.0, db = 0.0;
            for (int t = 0; t < P; t++) {
                size_t q = ((size_t)i * c + ch) * P + t;
                dg += (double)n * dy[q] * xh[q];
                db += (double)n * dy[q];
            }
            ref[3 * ch] += dg * dg / n;
            ref[3 * ch + 1] += dg * db / n;
            ref[3 * ch + 2] += db * db / n;
        }
    oracle_check_close("bn 2x2 blocks", F, ref, 3 * (size_t)c, RTOL_SUM, seed);
    free(xh); free(dy); free(F); free(ref);
}
END_TEST

/* ---- sampled labels ----------------------------------------------------------------- */

/* n = 200000 rows drawn from random per-row distributions over 5 classes
 * (one class of probability 0 everywhere). Pearson's statistic of the class
 * counts against sum_i p_i: for independent draws it is at most chi-square
 * with 3 degrees of freedom (4 classes with mass; non-identical rows only
 * shrink the variance), and P(chi2_3 > 40) ~ 1e-8, so the bound 40 fails
 * only for a biased sampler: moving 5% of one class's draws to another gives
 * chi2 ~ 250. */
START_TEST(test_sample_labels_follow_distribution) {
    SEEDED();
    enum { N = 200000, CL = 5 };
    float *p = NEWF(N * CL);
    int *lab = (int *)oracle_alloc(N * sizeof(int)), *lab2 = (int *)oracle_alloc(N * sizeof(int));
    double expect[CL] = {0}, count[CL] = {0};
    for (int i = 0; i < N; i++) {
        double s = 0.0;
        for (int k = 0; k < CL; k++) {
            p[i * CL + k] = k == 2 ? 0.0f : (float)(rng_uniform(&rng) + 0.05);
            s += p[i * CL + k];
        }
        for (int k = 0; k < CL; k++) p[i * CL + k] = (float)(p[i * CL + k] / s);
        for (int k = 0; k < CL; k++) expect[k] += p[i * CL + k];
    }
    rng_t r1, r2;
    rng_seed(&r1, seed ^ 0x1234);
    ck_assert_int_eq(kfac_sample_labels(p, N, CL, &r1, lab), 0);
    for (int i = 0; i < N; i++) {
        ck_assert(lab[i] >= 0 && lab[i] < CL);
        count[lab[i]] += 1.0;
    }
    ck_assert_msg(count[2] == 0.0, "a class of probability 0 was drawn, seed %llu", (unsigned long long)seed);
    double chi2 = 0.0;
    for (int k = 0; k < CL; k++)
        if (expect[k] > 0.0) chi2 += (count[k] - expect[k]) * (count[k] - expect[k]) / expect[k];
    ck_assert_msg(chi2 < 40.0, "chi-square %g >= 40, seed %llu", chi2, (unsigned long long)seed);
    /* same seed, same labels; another seed, other labels */
    rng_seed(&r2, seed ^ 0x1234);
    ck_assert_int_eq(kfac_sample_labels(p, N, CL, &r2, lab2), 0);
    ck_assert(memcmp(lab, lab2, N * sizeof(int)) == 0);
    rng_seed(&r2, seed ^ 0x5678);
    ck_assert_int_eq(kfac_sample_labels(p, N, CL, &r2, lab2), 0);
    ck_assert(memcmp(lab, lab2, N * sizeof(int)) != 0);
    /* bad rows are rejected */
    p[3] = -0.1f;
    ck_assert_int_eq(kfac_sample_labels(p, 1, CL, &r2, lab2), -EINVAL);
    p[3] = NAN;
    ck_assert_int_eq(kfac_sample_labels(p, 1, CL, &r2, lab2), -EINVAL);
    for (int k = 0; k < CL; k++) p[k] = 0.0f;
    ck_assert_int_eq(kfac_sample_labels(p, 1, CL, &r2, lab2), -EINVAL);
    free(p); free(lab); free(lab2);
}
END_TEST

/* ---- running averages ------------------------------------------------------------------ */

START_TEST(test_factor_update_running_average) {
    SEEDED();
    int d = 1 + (int)rng_below(&rng, 6);
    double decay = 0.5 + 0.49 * rng_uniform(&rng);
    float *data = NEWF(d * d), *fresh = NEWF(d * d);
    kfac_factor_t f = {.kind = KFAC_FACTOR_SYM, .role = KFAC_FACTOR_ROLE_A, .dim = d, .data = data};
    double *ref = NEWD(d * d), samples = 0.0, mag = 0.0;
    for (int step = 0; step < 5; step++) {
        oracle_randn(&rng, fresh, (size_t)d * d);
        mag = fmax(mag, oracle_max_abs(fresh, (size_t)d * d));
        double nf = 1 + rng_below(&rng, 100);
        ck_assert_int_eq(kfac_factor_update(&f, fresh, nf, decay), 0);
        for (int i = 0; i < d * d; i++) ref[i] = step == 0 ? fresh[i] : decay * ref[i] + (1.0 - decay) * fresh[i];
        samples += nf;
        /* a few float roundings per step on O(1) values; the average may
         * cancel to a small number, so the error is measured against the inputs */
        oracle_check_close_floor("running average", data, ref, (size_t)d * d, 1e-6, mag, seed);
        ck_assert(f.n_samples == samples);
        ck_assert_int_eq(f.n_updates, step + 1);
    }
    ck_assert_int_eq(kfac_factor_update(&f, fresh, 1.0, 1.5), -EINVAL);
    ck_assert_int_eq(kfac_factor_update(&f, fresh, -1.0, 0.9), -EINVAL);
    free(data); free(fresh); free(ref);
}
END_TEST

/* ---- mode selection -------------------------------------------------------------------- */

START_TEST(test_choose_mode_rules) {
    layer_t l;
    memset(&l, 0, sizeof l);
    l.kind = LAYER_FC;
    l.in_c = 64; l.in_h = 7; l.in_w = 7;
    l.kfac = KFAC_MODE_DEFAULT;
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 3000), KFAC_MODE_DOUBLY);   /* 3136 > 3000 */
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 3136), KFAC_MODE_STANDARD); /* not above */
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 1e30), KFAC_MODE_STANDARD);
    l.kfac = KFAC_MODE_DOUBLY;
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 1e30), KFAC_MODE_DOUBLY);
    l.in_c = 3136; l.in_h = 1; l.in_w = 1; /* flat input */
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 1e30), -EINVAL);
    l.kfac = KFAC_MODE_DEFAULT;
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 10), KFAC_MODE_STANDARD);
    l.kfac = KFAC_MODE_AVG;
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 10), -EINVAL);
    l.kind = LAYER_CONV;
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 10), KFAC_MODE_AVG);
    l.kfac = KFAC_MODE_DEFAULT;
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 10), KFAC_MODE_KFC);
    l.kfac = KFAC_MODE_DOUBLY;
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 10), -EINVAL);
    l.kfac = KFAC_MODE_NONE;
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 10), KFAC_MODE_NONE);
    l.kind = LAYER_BATCHNORM;
    l.kfac = KFAC_MODE_DEFAULT;
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 10), KFAC_MODE_STANDARD);
    l.kind = LAYER_RELU;
    ck_assert_int_eq(kfac_stats_choose_mode(&l, 10), KFAC_MODE_NONE);
    ck_assert_int_eq(kfac_stats_choose_mode(NULL, 10), -EINVAL);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("kfac_stats");
    TCase *tc = tcase_create("raw");
    tcase_add_test(tc, test_fc_single_example_exact_fisher);
    tcase_add_test(tc, test_fc_batch_matches_definition);
    tcase_add_test(tc, test_fc_rejects_bad_dims);
    tcase_add_test(tc, test_conv_single_location_exact_fisher);
    tcase_add_test(tc, test_conv_factors_match_definition);
    tcase_add_test(tc, test_conv_cm_matches_rowmajor_reference);
    tcase_add_test(tc, test_doubly_rank1_reproduces_rank1_matrix);
    tcase_add_test(tc, test_doubly_rank1_is_leading_singular_triple);
    tcase_add_test(tc, test_doubly_factors_match_definition);
    tcase_add_test(tc, test_doubly_single_rank1_example_exact_fisher);
    tcase_add_test(tc, test_bn_blocks_match_direct);
    tcase_add_test(tc, test_sample_labels_follow_distribution);
    tcase_add_test(tc, test_factor_update_running_average);
    tcase_add_test(tc, test_choose_mode_rules);
    suite_add_tcase(s, tc);
    return s;
}
