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

#define RTOL_EXACT 1e-5 /* identities that hold exactly in real arithmetic */
#define RTOL_SUM 2e-5   /* float32 SYRK/GEMV sums vs double */
#define RTOL_NET 1e-4   /* batched net pass vs per-example net passes */

#define SEEDED()                  \
    uint64_t seed = test_seed();     \
    rng_t rng;                    \
    rng_seed(&rng, seed)

static void s_randn(rng_t *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(r);
}

static void *s_alloc(size_t n) {
    void *p = calloc(n ? n : 1, 1);
    ck_assert_ptr_nonnull(p);
    return p;
}
#define NEWF(n) ((float *)s_alloc((size_t)(n) * sizeof(float)))
#define NEWD(n) ((double *)s_alloc((size_t)(n) * sizeof(double)))

/* max |got - ref| <= rtol * max(max |ref|, floor) over n entries (floor: the
 * magnitude of the inputs, when the result may cancel to something smaller). */
static void s_check_close_floor(const char *what, const float *got, const double *ref, size_t n, double rtol,
                                double floor, uint64_t seed) {
    double scale = floor > 1e-30 ? floor : 1e-30, err = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= err)) { err = e; at = i; }
    }
    ck_assert_msg(err <= rtol * scale, "%s: error %.3g at %zu (got %.8g, want %.8g), scale %.3g, rtol %.1g, seed %llu",
                  what, err, at, (double)got[at], ref[at], scale, rtol, (unsigned long long)seed);
}

static void s_check_close(const char *what, const float *got, const double *ref, size_t n, double rtol,
                          uint64_t seed) {
    s_check_close_floor(what, got, ref, n, rtol, 0.0, seed);
}

static double s_max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* A (dA x dA) (x) G (dG x dG) against F ((dA dG) x (dA dG)), column-stacked vec. */
static void s_check_kron(const char *what, const float *A, int dA, const float *G, int dG, const double *F,
                         double rtol, uint64_t seed) {
    size_t N = (size_t)dA * dG;
    float *K = NEWF(N * N);
    for (int j = 0; j < dA; j++)
        for (int o = 0; o < dG; o++)
            for (int j2 = 0; j2 < dA; j2++)
                for (int o2 = 0; o2 < dG; o2++)
                    K[((size_t)j * dG + o) * N + (size_t)j2 * dG + o2] = A[j * dA + j2] * G[o * dG + o2];
    s_check_close(what, K, F, N * N, rtol, seed);
    free(K);
}

/* F += w vec(V) vec(V)^T for V (out, dA) row-major in double. */
static void s_add_fisher(double *F, const double *V, int out, int dA, double w) {
    size_t N = (size_t)out * dA;
    for (int j = 0; j < dA; j++)
        for (int o = 0; o < out; o++)
            for (int j2 = 0; j2 < dA; j2++)
                for (int o2 = 0; o2 < out; o2++)
                    F[((size_t)j * out + o) * N + (size_t)j2 * out + o2] += w * V[o * dA + j] * V[o2 * dA + j2];
}

/* M (d x d) += w x x^T (double). */
static void s_add_outer(double *M, const double *x, int d, double w) {
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) M[(size_t)i * d + j] += w * x[i] * x[j];
}

static void s_check_symmetric(const char *what, const float *F, int d, uint64_t seed) {
    for (int i = 0; i < d; i++)
        for (int j = i + 1; j < d; j++)
            ck_assert_msg(F[(size_t)i * d + j] == F[(size_t)j * d + i], "%s not symmetric at (%d,%d), seed %llu",
                          what, i, j, (unsigned long long)seed);
}

/* ---- a direct double-precision convolution geometry (independent of nn) ---- */

typedef struct { int C, H, W, k, stride, pad, OH, OW; } geom_t;

static geom_t s_geom(int C, int H, int W, int k, int stride, int pad) {
    geom_t g = {C, H, W, k, stride, pad, (H + 2 * pad - k) / stride + 1, (W + 2 * pad - k) / stride + 1};
    return g;
}

/* The patch of example x (C, H, W) at output (oy, ox), with the homogeneous
 * 1 appended when bias: p[(c*k + ky)*k + kx] = x[c][oy*s-pad+ky][ox*s-pad+kx], 0 outside. */
static void s_patch(const geom_t *g, const float *x, int oy, int ox, int bias, double *p) {
    for (int c = 0; c < g->C; c++)
        for (int ky = 0; ky < g->k; ky++)
            for (int kx = 0; kx < g->k; kx++) {
                int iy = oy * g->stride - g->pad + ky, ix = ox * g->stride - g->pad + kx;
                p[(c * g->k + ky) * g->k + kx] =
                    (iy >= 0 && iy < g->H && ix >= 0 && ix < g->W) ? x[((size_t)c * g->H + iy) * g->W + ix] : 0.0;
            }
    if (bias) p[g->C * g->k * g->k] = 1.0;
}

/* Float patch matrix (n*P, K) rows (example, position), from s_patch. */
static float *s_im2col(const geom_t *g, const float *x, int n) {
    int K = g->C * g->k * g->k, P = g->OH * g->OW;
    float *cols = NEWF((size_t)n * P * K);
    double *p = NEWD(K + 1);
    for (int i = 0; i < n; i++)
        for (int oy = 0; oy < g->OH; oy++)
            for (int ox = 0; ox < g->OW; ox++) {
                s_patch(g, x + (size_t)i * g->C * g->H * g->W, oy, ox, 0, p);
                for (int j = 0; j < K; j++) cols[((size_t)i * P + oy * g->OW + ox) * K + j] = (float)p[j];
            }
    free(p);
    return cols;
}

/* KFC / AVG references in double from the raw input x (n, C, H, W) and the
 * per-example output gradients gs (n, out, P) (already g, not g/n). */
static void s_conv_refs(const geom_t *g, const float *x, const double *gs, int n, int out, int bias,
                        double *A_kfc, double *G_kfc, double *A_avg, double *G_avg) {
    int K = g->C * g->k * g->k, dA = K + bias, P = g->OH * g->OW;
    double *p = NEWD(dA), *m = NEWD(dA), *gt = NEWD(out), *s = NEWD(out);
    for (int i = 0; i < n; i++) {
        memset(m, 0, (size_t)dA * sizeof *m);
        memset(s, 0, (size_t)out * sizeof *s);
        for (int t = 0; t < P; t++) {
            s_patch(g, x + (size_t)i * g->C * g->H * g->W, t / g->OW, t % g->OW, bias, p);
            if (A_kfc) s_add_outer(A_kfc, p, dA, 1.0 / ((double)n * P));
            for (int j = 0; j < dA; j++) m[j] += p[j] / P;
            for (int o = 0; o < out; o++) gt[o] = gs[((size_t)i * out + o) * P + t], s[o] += gt[o];
            if (G_kfc) s_add_outer(G_kfc, gt, out, 1.0 / n);
        }
        if (A_avg) s_add_outer(A_avg, m, dA, 1.0 / n);
        if (G_avg) s_add_outer(G_avg, s, out, 1.0 / n);
    }
    free(p); free(m); free(gt); free(s);
}

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
        s_randn(&rng, a, in);
        s_randn(&rng, dy, out);
        ck_assert_int_eq(kfac_stats_fc(a, dy, 1, in, out, bias, 1.0f, A, G, NULL), 0);
        /* dW = g [a;1]^T: the exact Fisher of one example is vec vec^T. */
        double *V = NEWD(out * dA), *F = NEWD((size_t)out * dA * out * dA);
        for (int o = 0; o < out; o++)
            for (int j = 0; j < dA; j++) V[o * dA + j] = (double)dy[o] * (j < in ? a[j] : 1.0);
        s_add_fisher(F, V, out, dA, 1.0);
        s_check_kron("fc single example A(x)G", A, dA, G, out, F, RTOL_EXACT, seed);
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
        s_randn(&rng, a, (size_t)n * in);
        s_randn(&rng, dy, (size_t)n * out);
        for (int i = 0; i < n * out; i++) dy[i] /= (float)n; /* nn's dy = g / n */
        ck_assert_int_eq(kfac_stats_fc(a, dy, n, in, out, bias, (float)n, A, G, NULL), 0);
        double *Ar = NEWD(dA * dA), *Gr = NEWD(out * out), *x = NEWD(dA), *g = NEWD(out);
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < in; j++) x[j] = a[i * in + j];
            if (bias) x[in] = 1.0;
            for (int o = 0; o < out; o++) g[o] = (double)n * dy[i * out + o];
            s_add_outer(Ar, x, dA, 1.0 / n);
            s_add_outer(Gr, g, out, 1.0 / n);
        }
        s_check_close("fc A", A, Ar, (size_t)dA * dA, RTOL_SUM, seed);
        s_check_close("fc G", G, Gr, (size_t)out * out, RTOL_SUM, seed);
        s_check_symmetric("fc A", A, dA, seed);
        s_check_symmetric("fc G", G, out, seed);
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
    geom_t g = s_geom(C, k, k, k, 1, 0);
    ck_assert_int_eq(g.OH * g.OW, 1);
    int K = C * k * k, dA = K + 1;
    float *x = NEWF(C * k * k), *dy = NEWF(out);
    s_randn(&rng, x, (size_t)C * k * k);
    s_randn(&rng, dy, out);
    float *cols = s_im2col(&g, x, 1);
    for (int mode = KFAC_MODE_KFC; mode <= KFAC_MODE_AVG; mode++) {
        float *A = NEWF(dA * dA), *G = NEWF(out * out);
        /* one position: the channel-major patch matrix (K, 1) is the row-major one */
        ck_assert_int_eq(kfac_stats_conv_cm((kfac_mode_t)mode, cols, dy, 1, 1, K, out, 1, 1.0f, A, G, NULL), 0);
        double *p = NEWD(dA), *V = NEWD(out * dA), *F = NEWD((size_t)out * dA * out * dA);
        s_patch(&g, x, 0, 0, 1, p);
        for (int o = 0; o < out; o++)
            for (int j = 0; j < dA; j++) V[o * dA + j] = dy[o] * p[j];
        s_add_fisher(F, V, out, dA, 1.0);
        s_check_kron(mode == KFAC_MODE_KFC ? "kfc 1 location" : "avg 1 location", A, dA, G, out, F, RTOL_EXACT, seed);
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
        geom_t g = s_geom(C, H, W, k, stride, pad);
        int K = C * k * k, dA = K + bias, P = g.OH * g.OW;
        float *x = NEWF((size_t)n * C * H * W), *dy = NEWF((size_t)n * out * P);
        s_randn(&rng, x, (size_t)n * C * H * W);
        s_randn(&rng, dy, (size_t)n * out * P);
        for (size_t i = 0; i < (size_t)n * out * P; i++) dy[i] /= (float)n;
        double *gs = NEWD((size_t)n * out * P);
        for (size_t i = 0; i < (size_t)n * out * P; i++) gs[i] = (double)n * dy[i];
        float *cols = s_im2col(&g, x, n);
        double *Ak = NEWD(dA * dA), *Gk = NEWD(out * out), *Aa = NEWD(dA * dA), *Ga = NEWD(out * out);
        s_conv_refs(&g, x, gs, n, out, bias, Ak, Gk, Aa, Ga);
        float *A = NEWF(dA * dA), *G = NEWF(out * out);
        s_ref_conv_rowmajor(KFAC_MODE_KFC, cols, dy, n, P, K, out, bias, (float)n, A, G);
        s_check_close("kfc A", A, Ak, (size_t)dA * dA, RTOL_SUM, seed);
        s_check_close("kfc G", G, Gk, (size_t)out * out, RTOL_SUM, seed);
        s_check_symmetric("kfc G", G, out, seed);
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
            s_check_kron("kfc Eq. 15", A, dA, G, out, F, RTOL_SUM, seed);
            free(F);
        }
        s_ref_conv_rowmajor(KFAC_MODE_AVG, cols, dy, n, P, K, out, bias, (float)n, A, G);
        s_check_close("avg A", A, Aa, (size_t)dA * dA, RTOL_SUM, seed);
        s_check_close("avg G", G, Ga, (size_t)out * out, RTOL_SUM, seed);
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
                s_add_outer(Em, mg, out, 1.0 / n);
            }
            for (int j = 0; j < dA; j++)
                for (int o = 0; o < out; o++)
                    for (int j2 = 0; j2 < dA; j2++)
                        for (int o2 = 0; o2 < out; o2++)
                            F[((size_t)j * out + o) * N + (size_t)j2 * out + o2] =
                                (double)P * P * Aa[j * dA + j2] * Em[o * out + o2];
            s_check_kron("avg Eq. 19", A, dA, G, out, F, RTOL_SUM, seed);
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
                s_check_close("cm A", A, mode == KFAC_MODE_KFC ? Ak : Aa, (size_t)dA * dA, RTOL_SUM, seed);
                s_check_close("cm G", G, mode == KFAC_MODE_KFC ? Gk : Ga, (size_t)out * out, RTOL_SUM, seed);
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
        s_randn(&rng, rm, R * K);
        s_randn(&rng, dy, (size_t)n * out * P);
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
            s_check_close(mode == KFAC_MODE_KFC ? "kfc cm A vs row-major" : "avg cm A vs row-major", A, Ad,
                          (size_t)dA * dA, RTOL_SUM, seed);
            s_check_close(mode == KFAC_MODE_KFC ? "kfc cm G vs row-major" : "avg cm G vs row-major", G, Gd,
                          (size_t)out * out, RTOL_SUM, seed);
            s_check_symmetric("cm A", A, dA, seed);
            s_check_symmetric("cm G", G, out, seed);
            free(A); free(G); free(Ar); free(Gr); free(Ad); free(Gd); free(work);
        }
        free(rm); free(cm); free(dy);
    }
}
END_TEST

/* ---- doubly factored ------------------------------------------------------------ */

/* Leading singular triple of the T x C matrix M[t][c] = x[c*T + t] by power
 * iteration in double on M^T M (inputs here have a dominant direction, so it
 * converges fast). Returns sigma; u (T), v (C) unit, sign: sum(v) >= 0. */
static double s_power_svd(const float *x, int C, int T, double *u, double *v) {
    for (int c = 0; c < C; c++) v[c] = 1.0 + 0.01 * c;
    double sigma = 0.0;
    for (int it = 0; it < 5000; it++) {
        for (int t = 0; t < T; t++) {
            u[t] = 0.0;
            for (int c = 0; c < C; c++) u[t] += x[(size_t)c * T + t] * v[c];
        }
        double nu = 0.0, nv = 0.0;
        for (int t = 0; t < T; t++) nu += u[t] * u[t];
        nu = sqrt(nu);
        if (nu == 0.0) return 0.0;
        for (int t = 0; t < T; t++) u[t] /= nu;
        double change = 0.0;
        for (int c = 0; c < C; c++) {
            double w = 0.0;
            for (int t = 0; t < T; t++) w += x[(size_t)c * T + t] * u[t];
            change += fabs(w - sigma * v[c]);
            v[c] = w;
            nv += w * w;
        }
        sigma = sqrt(nv);
        for (int c = 0; c < C; c++) v[c] /= sigma;
        if (it > 10 && change < 1e-15 * sigma) break;
    }
    double s = 0.0;
    for (int c = 0; c < C; c++) s += v[c];
    if (s < 0.0) {
        for (int c = 0; c < C; c++) v[c] = -v[c];
        for (int t = 0; t < T; t++) u[t] = -u[t];
    }
    return sigma;
}

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
        s_check_close("K psi^T = A", prod, ref, (size_t)C * T, RTOL_EXACT, seed);
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
        double sr = s_power_svd(x, C, T, u, v);
        ck_assert_msg(fabs(sigma - sr) <= 1e-6 * sr, "sigma %g vs power iteration %g, seed %llu", sigma, sr,
                      (unsigned long long)seed);
        for (int t = 0; t < T; t++) Kr[t] = sqrt(sr) * u[t];
        for (int c = 0; c < C; c++) Pr[c] = sqrt(sr) * v[c];
        s_check_close("K", K, Kr, T, RTOL_EXACT * 10, seed);
        s_check_close("Psi", psi, Pr, C, RTOL_EXACT * 10, seed);
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
        s_randn(&rng, dy, (size_t)n * out);
        for (int i = 0; i < n * out; i++) dy[i] /= (float)n;
        float *KK = NEWF(T * T), *PP = NEWF(C * C), *G = NEWF(out * out), *Gb = NEWF(out * out);
        ck_assert_int_eq(kfac_stats_doubly(a, dy, n, C, T, out, (float)n, KK, PP, G, Gb, NULL), 0);
        double *KKr = NEWD(T * T), *PPr = NEWD(C * C), *Gr = NEWD(out * out);
        double *u = NEWD(T), *v = NEWD(C), *g = NEWD(out);
        for (int i = 0; i < n; i++) {
            double s = s_power_svd(a + (size_t)i * C * T, C, T, u, v);
            for (int t = 0; t < T; t++) u[t] *= sqrt(s);
            for (int c = 0; c < C; c++) v[c] *= sqrt(s);
            s_add_outer(KKr, u, T, 1.0 / n);
            s_add_outer(PPr, v, C, 1.0 / n);
            for (int o = 0; o < out; o++) g[o] = (double)n * dy[i * out + o];
            s_add_outer(Gr, g, out, 1.0 / n);
        }
        s_check_close("E[K K^T]", KK, KKr, (size_t)T * T, RTOL_EXACT * 10, seed);
        s_check_close("E[Psi Psi^T]", PP, PPr, (size_t)C * C, RTOL_EXACT * 10, seed);
        s_check_close("doubly G", G, Gr, (size_t)out * out, RTOL_SUM, seed);
        s_check_close("doubly Gbias", Gb, Gr, (size_t)out * out, RTOL_SUM, seed);
        s_check_symmetric("E[K K^T]", KK, T, seed);
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
    s_randn(&rng, dy, out);
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
    s_add_fisher(F, V, out, in, 1.0);
    s_check_kron("doubly single example", Ain, in, G, out, F, RTOL_EXACT * 10, seed);
    free(a); free(dy); free(KK); free(PP); free(G); free(Ain); free(V); free(F);
}
END_TEST

/* ---- batch norm ------------------------------------------------------------------ */

START_TEST(test_bn_blocks_match_direct) {
    SEEDED();
    int n = 1 + (int)rng_below(&rng, 8), c = 1 + (int)rng_below(&rng, 6), P = 1 + (int)rng_below(&rng, 20);
    size_t sz = (size_t)n * c * P;
    float *xh = NEWF(sz), *dy = NEWF(sz), *F = NEWF(3 * c);
    s_randn(&rng, xh, sz);
    s_randn(&rng, dy, sz);
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
    s_check_close("bn 2x2 blocks", F, ref, 3 * (size_t)c, RTOL_SUM, seed);
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
    int *lab = (int *)s_alloc(N * sizeof(int)), *lab2 = (int *)s_alloc(N * sizeof(int));
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
        s_randn(&rng, fresh, (size_t)d * d);
        mag = fmax(mag, s_max_abs(fresh, (size_t)d * d));
        double nf = 1 + rng_below(&rng, 100);
        ck_assert_int_eq(kfac_factor_update(&f, fresh, nf, decay), 0);
        for (int i = 0; i < d * d; i++) ref[i] = step == 0 ? fresh[i] : decay * ref[i] + (1.0 - decay) * fresh[i];
        samples += nf;
        /* a few float roundings per step on O(1) values; the average may
         * cancel to a small number, so the error is measured against the inputs */
        s_check_close_floor("running average", data, ref, (size_t)d * d, 1e-6, mag, seed);
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

/* ---- with a real network ----------------------------------------------------------------- */

static net_t *s_net(const char *text, int cap, uint64_t seed) {
    char err[256] = "";
    net_t *net = net_parse(text, "test", cap, err, sizeof err);
    ck_assert_msg(net != NULL, "net_parse: %s", err);
    net_init_params(net, seed);
    /* non-trivial biases so every term of the factors is exercised */
    rng_t r;
    rng_seed(&r, seed + 1);
    for (int i = 0; i < net->n_layers; i++) {
        layer_t *l = &net->layers[i];
        if (l->bias)
            for (size_t j = 0; j < l->n_b; j++) l->bias[j] = (float)(0.3 * rng_normal(&r));
    }
    return net;
}

static int s_slot(const kfac_stats_t *s, const net_t *net, const char *name) {
    int li = net_find_layer(net, name);
    ck_assert_int_ge(li, 0);
    int slot = kfac_stats_find(s, li);
    ck_assert_int_ge(slot, 0);
    return slot;
}

/* One example: for the fc layer A (x) G is the exact Fisher block of its
 * V = [dW | db] taken from the network's own gradient; for a conv with a
 * single output position the same holds. */
START_TEST(test_compute_single_example_exact_fisher) {
    SEEDED();
    const char *text =
        "input 2x3x3\n"
        "conv name=c1 out=3 k=3\n"      /* 1x1 output: one location */
        "relu\n"
        "flatten\n"
        "fc name=f1 out=4\n"
        "tanh\n"
        "fc name=f2 out=3\n"
        "softmax_xent\n";
    net_t *net = s_net(text, 4, seed);
    kfac_stats_t *s = kfac_stats_new(net);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(s->n_layers, 3);
    float x[18];
    s_randn(&rng, x, 18);
    int label = (int)rng_below(&rng, 3);
    ck_assert_int_eq(net_forward(net, x, 1, 1), 0);
    net_backward(net, &label, NULL, NULL);
    ck_assert_int_eq(kfac_stats_compute(s, net), 0);
    const char *names[3] = {"c1", "f1", "f2"};
    for (int q = 0; q < 3; q++) {
        int slot = s_slot(s, net, names[q]);
        const kfac_layer_stats_t *ls = &s->layers[slot];
        const layer_t *l = &net->layers[ls->layer];
        int out = ls->out, in = ls->in, dA = in + 1;
        ck_assert_int_eq(ls->f[0].dim, dA);
        double *V = NEWD(out * dA), *F = NEWD((size_t)out * dA * out * dA);
        for (int o = 0; o < out; o++) {
            for (int j = 0; j < in; j++) V[o * dA + j] = l->dweight[o * in + j];
            V[o * dA + in] = l->dbias[o];
        }
        s_add_fisher(F, V, out, dA, 1.0);
        s_check_kron(names[q], ls->f[0].data, dA, ls->f[1].data, out, F, RTOL_EXACT * 10, seed);
        ck_assert(ls->f[0].n_samples == 1.0 && ls->f[1].n_updates == 1);
        free(V); free(F);
    }
    kfac_stats_free(&s);
    ck_assert_ptr_null(s);
    net_free(&net);
}
END_TEST

/* A batch of n against n single-example passes: fc factors from the inputs
 * and the bias gradients (db_i = g_i), conv KFC factors from a double im2col
 * of the raw input and the per-example output gradients, conv AVG G from the
 * conv bias gradients (db_i = sum_t g_{i,t}), doubly factors from a double
 * SVD of the per-example inputs. */
START_TEST(test_compute_batch_vs_single_examples) {
    SEEDED();
    for (int variant = 0; variant < 2; variant++) {
        const char *text = variant == 0 ?
            "input 2x5x4\n"
            "conv name=c1 out=3 k=3 pad=1\n"
            "relu\n"
            "conv name=c2 out=2 k=3 stride=2 kfac=avg\n"
            "relu\n"
            "flatten\n"
            "fc name=f1 out=3\n"
            "softmax_xent\n"
            :
            "input 2x5x4\n"
            "conv name=c1 out=3 k=3 pad=1 kfac=avg\n"
            "relu\n"
            "fc name=f1 out=3 kfac=doubly\n"   /* directly on the 3x5x4 map */
            "softmax_xent\n";
        int n = 2 + (int)rng_below(&rng, 4);
        net_t *net = s_net(text, n, seed + (uint64_t)variant);
        kfac_stats_t *s = kfac_stats_new(net);
        ck_assert_ptr_nonnull(s);
        int in_size = net->in_size, classes = net->n_classes;
        float *x = NEWF(n * in_size);
        int *lab = (int *)s_alloc((size_t)n * sizeof(int));
        s_randn(&rng, x, (size_t)n * in_size);
        for (int i = 0; i < n; i++) lab[i] = (int)rng_below(&rng, (uint32_t)classes);
        ck_assert_int_eq(net_forward(net, x, n, 1), 0);
        net_backward(net, lab, NULL, NULL);
        ck_assert_int_eq(kfac_stats_compute(s, net), 0);

        int c1 = net_find_layer(net, "c1"), f1 = net_find_layer(net, "f1");
        const layer_t *lc = &net->layers[c1], *lf = &net->layers[f1];
        geom_t g = s_geom(lc->in_c, lc->in_h, lc->in_w, lc->k, lc->stride, lc->pad);
        int P = lc->h * lc->w, outc = lc->out, Kc = lc->in_c * lc->k * lc->k;
        int fin = lf->in_c * lf->in_h * lf->in_w, fout = lf->out;
        double *gs = NEWD((size_t)n * outc * P), *Gcb = NEWD(outc * outc);
        double *Af = NEWD((fin + 1) * (fin + 1)), *Gf = NEWD(fout * fout), *vec = NEWD(fin + 1);
        double *KKr = NEWD(fin * fin), *PPr = NEWD(fin * fin);
        double *u = NEWD(fin), *v = NEWD(fin);
        float *ain = NEWF(fin);
        for (int i = 0; i < n; i++) {
            ck_assert_int_eq(net_forward(net, x + (size_t)i * in_size, 1, 1), 0);
            net_backward(net, lab + i, NULL, NULL);
            for (int j = 0; j < outc * P; j++) gs[(size_t)i * outc * P + j] = lc->dy[j];
            for (int o = 0; o < outc; o++) vec[o] = lc->dbias[o];
            s_add_outer(Gcb, vec, outc, 1.0 / n);
            const float *a = net_layer_input(net, lf);
            memcpy(ain, a, (size_t)fin * sizeof *ain);
            for (int j = 0; j < fin; j++) vec[j] = a[j];
            vec[fin] = 1.0;
            s_add_outer(Af, vec, fin + 1, 1.0 / n);
            for (int o = 0; o < fout; o++) vec[o] = lf->dbias[o];
            s_add_outer(Gf, vec, fout, 1.0 / n);
            if (variant == 1) {
                int C = lf->in_c, T = lf->in_h * lf->in_w;
                double sg = s_power_svd(ain, C, T, u, v);
                for (int t = 0; t < T; t++) u[t] *= sqrt(sg);
                for (int c = 0; c < C; c++) v[c] *= sqrt(sg);
                s_add_outer(KKr, u, T, 1.0 / n);
                s_add_outer(PPr, v, C, 1.0 / n);
            }
        }
        /* conv c1 */
        const kfac_layer_stats_t *ls = &s->layers[s_slot(s, net, "c1")];
        int dA = Kc + 1;
        double *Ak = NEWD(dA * dA), *Gk = NEWD(outc * outc), *Aa = NEWD(dA * dA), *Ga = NEWD(outc * outc);
        s_conv_refs(&g, x, gs, n, outc, 1, Ak, Gk, Aa, Ga);
        if (variant == 0) {
            ck_assert_int_eq(ls->mode, KFAC_MODE_KFC);
            s_check_close("net kfc A", ls->f[0].data, Ak, (size_t)dA * dA, RTOL_NET, seed);
            s_check_close("net kfc G", ls->f[1].data, Gk, (size_t)outc * outc, RTOL_NET, seed);
        } else {
            ck_assert_int_eq(ls->mode, KFAC_MODE_AVG);
            s_check_close("net avg A", ls->f[0].data, Aa, (size_t)dA * dA, RTOL_NET, seed);
            s_check_close("net avg G", ls->f[1].data, Ga, (size_t)outc * outc, RTOL_NET, seed);
            s_check_close("net avg G = E[db db^T]", ls->f[1].data, Gcb, (size_t)outc * outc, RTOL_NET, seed);
        }
        /* fc f1 */
        ls = &s->layers[s_slot(s, net, "f1")];
        if (variant == 0) {
            ck_assert_int_eq(ls->mode, KFAC_MODE_STANDARD);
            s_check_close("net fc A", ls->f[0].data, Af, (size_t)(fin + 1) * (fin + 1), RTOL_NET, seed);
            s_check_close("net fc G", ls->f[1].data, Gf, (size_t)fout * fout, RTOL_NET, seed);
        } else {
            int C = lf->in_c, T = lf->in_h * lf->in_w;
            ck_assert_int_eq(ls->mode, KFAC_MODE_DOUBLY);
            ck_assert_int_eq(ls->n_factors, 4);
            ck_assert_int_eq(ls->f[0].dim, T);
            ck_assert_int_eq(ls->f[1].dim, C);
            /* relu feature maps are not dominated by one direction: the SVD
             * reference may converge to a looser 1e-9; 1e-3 still catches any
             * wrong normalization or layout */
            s_check_close("net E[K K^T]", ls->f[0].data, KKr, (size_t)T * T, 1e-3, seed);
            s_check_close("net E[Psi Psi^T]", ls->f[1].data, PPr, (size_t)C * C, 1e-3, seed);
            s_check_close("net doubly G", ls->f[2].data, Gf, (size_t)fout * fout, RTOL_NET, seed);
            s_check_close("net doubly Gbias", ls->f[3].data, Gf, (size_t)fout * fout, RTOL_NET, seed);
        }
        free(x); free(lab); free(gs); free(Gcb); free(Af); free(Gf); free(vec); free(KKr); free(PPr);
        free(u); free(v); free(ain); free(Ak); free(Gk); free(Aa); free(Ga);
        kfac_stats_free(&s);
        net_free(&net);
    }
}
END_TEST

/* Batch norm through the network: the 2x2 blocks equal the direct double
 * formula on the layer's own xhat and dy; an fc behind a flatten of a
 * feature map resolves its doubly factors through the flatten. */
START_TEST(test_compute_bn_and_flatten_doubly) {
    SEEDED();
    const char *text =
        "input 2x4x4\n"
        "conv name=c1 out=3 k=3 pad=1\n"
        "batchnorm name=b1\n"
        "relu\n"
        "flatten\n"
        "fc name=f1 out=3 kfac=doubly\n"
        "softmax_xent\n";
    int n = 3 + (int)rng_below(&rng, 4);
    net_t *net = s_net(text, n, seed);
    kfac_stats_t *s = kfac_stats_new(net);
    ck_assert_ptr_nonnull(s);
    const kfac_layer_stats_t *lf = &s->layers[s_slot(s, net, "f1")];
    ck_assert_int_eq(lf->mode, KFAC_MODE_DOUBLY);
    ck_assert_int_eq(lf->fm_c, 3);
    ck_assert_int_eq(lf->fm_t, 16);
    float *x = NEWF(n * 32);
    int *lab = (int *)s_alloc((size_t)n * sizeof(int));
    s_randn(&rng, x, (size_t)n * 32);
    for (int i = 0; i < n; i++) lab[i] = (int)rng_below(&rng, 3);
    ck_assert_int_eq(net_forward(net, x, n, 1), 0);
    net_backward(net, lab, NULL, NULL);
    ck_assert_int_eq(kfac_stats_compute(s, net), 0);
    const kfac_layer_stats_t *lb = &s->layers[s_slot(s, net, "b1")];
    const layer_t *l = &net->layers[lb->layer];
    ck_assert_int_eq(lb->f[0].kind, KFAC_FACTOR_DIAG2X2);
    int c = l->c, P = l->h * l->w;
    double *ref = NEWD(3 * c);
    for (int ch = 0; ch < c; ch++)
        for (int i = 0; i < n; i++) {
            double dg = 0.0, db = 0.0;
            for (int t = 0; t < P; t++) {
                size_t q = ((size_t)i * c + ch) * P + t;
                dg += (double)n * l->dy[q] * l->xhat[q];
                db += (double)n * l->dy[q];
            }
            ref[3 * ch] += dg * dg / n;
            ref[3 * ch + 1] += dg * db / n;
            ref[3 * ch + 2] += db * db / n;
        }
    s_check_close("net bn blocks", lb->f[0].data, ref, 3 * (size_t)c, RTOL_SUM, seed);
    free(x); free(lab); free(ref);
    kfac_stats_free(&s);
    net_free(&net);
}
END_TEST

/* True Fisher end to end: sampled labels from net_probs, backward with them;
 * the last fc's G is then E[(p_i - e_{y_i})(p_i - e_{y_i})^T] with the
 * sampled y_i (softmax cross-entropy: g = p - onehot). */
START_TEST(test_compute_true_fisher_sampled_labels) {
    SEEDED();
    const char *text = "input 1x2x3\nflatten\nfc name=f1 out=4\nsoftmax_xent\n";
    int n = 5;
    net_t *net = s_net(text, n, seed);
    kfac_stats_t *s = kfac_stats_new(net);
    ck_assert_ptr_nonnull(s);
    float *x = NEWF(n * 6);
    s_randn(&rng, x, (size_t)n * 6);
    ck_assert_int_eq(net_forward(net, x, n, 1), 0);
    const float *pr = net_probs(net);
    float *probs = NEWF(n * 4);
    memcpy(probs, pr, (size_t)n * 4 * sizeof *probs);
    int lab[5];
    rng_t r;
    rng_seed(&r, seed);
    ck_assert_int_eq(kfac_sample_labels(probs, n, 4, &r, lab), 0);
    net_backward(net, lab, NULL, NULL);
    ck_assert_int_eq(kfac_stats_compute(s, net), 0);
    double *Gr = NEWD(16), g[4];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++) g[k] = probs[i * 4 + k] - (k == lab[i] ? 1.0 : 0.0);
        s_add_outer(Gr, g, 4, 1.0 / n);
    }
    s_check_close("true-Fisher G", s->layers[0].f[1].data, Gr, 16, RTOL_NET, seed);
    free(x); free(probs); free(Gr);
    kfac_stats_free(&s);
    net_free(&net);
}
END_TEST

/* Containers: pack/unpack round trip (bit-exact upper triangles), rejection
 * of corrupt input without side effects, running average and merge with
 * sample counts. */
START_TEST(test_container_pack_update_merge) {
    SEEDED();
    const char *text =
        "input 2x4x4\n"
        "conv name=c1 out=3 k=3 pad=1\n"
        "batchnorm name=b1\n"
        "relu\n"
        "fc name=f1 out=3 kfac=doubly\n"
        "softmax_xent\n";
    int n = 4;
    net_t *net = s_net(text, n, seed);
    kfac_stats_t *a = kfac_stats_new(net), *b = kfac_stats_new(net), *avg = kfac_stats_new(net);
    ck_assert(a && b && avg);
    float *x = NEWF(n * 32);
    int lab[4] = {0, 1, 2, 1};
    s_randn(&rng, x, (size_t)n * 32);
    ck_assert_int_eq(net_forward(net, x, n, 1), 0);
    net_backward(net, lab, NULL, NULL);
    ck_assert_int_eq(kfac_stats_compute(a, net), 0);

    size_t len = kfac_stats_packed_len(a);
    size_t expect = 0;
    for (int j = 0; j < a->n_layers; j++)
        for (int k = 0; k < a->layers[j].n_factors; k++) {
            const kfac_factor_t *f = &a->layers[j].f[k];
            expect += f->kind == KFAC_FACTOR_DIAG2X2 ? 3 * (size_t)f->dim : kfac_linalg_packed_len(f->dim);
        }
    ck_assert_uint_eq(len, expect);
    float *buf = NEWF(len);
    ck_assert_int_eq(kfac_stats_pack(a, buf, len), 0);
    ck_assert_int_eq(kfac_stats_unpack(b, buf, len, 4.0), 0);
    for (int j = 0; j < a->n_layers; j++)
        for (int k = 0; k < a->layers[j].n_factors; k++) {
            const kfac_factor_t *fa = &a->layers[j].f[k], *fb = &b->layers[j].f[k];
            ck_assert(memcmp(fa->data, fb->data, kfac_factor_len(fa) * sizeof(float)) == 0);
            ck_assert(fb->n_samples == 4.0 && fb->n_updates == 1);
        }
    int dims[KFAC_STATS_MAX_FACTORS];
    int fl = s_slot(a, net, "f1");
    ck_assert_int_eq(kfac_stats_layer_dims(&a->layers[fl], dims, KFAC_STATS_MAX_FACTORS), 4);
    ck_assert_int_eq(dims[0], 16);
    ck_assert_int_eq(dims[1], 3);
    ck_assert_int_eq(dims[2], 3);

    /* corrupt input: NaN, negative diagonal, wrong length; b keeps its values */
    kfac_stats_reset(b);
    buf[1] = NAN;
    ck_assert_int_eq(kfac_stats_unpack(b, buf, len, 4.0), -EINVAL);
    ck_assert_int_eq(b->layers[0].f[0].n_updates, 0);
    buf[1] = 0.0f;
    buf[0] = -1.0f;
    ck_assert_int_eq(kfac_stats_unpack(b, buf, len, 4.0), -EINVAL);
    ck_assert_int_eq(kfac_stats_unpack(b, buf, len - 1, 4.0), -EINVAL);
    size_t l0 = kfac_stats_layer_packed_len(&a->layers[0]);
    ck_assert_int_eq(kfac_stats_layer_unpack(&b->layers[0], buf, l0, 4.0), -EINVAL);
    ck_assert_int_eq(b->layers[0].f[0].n_updates, 0);

    /* running average over two batches and the merge of two batches */
    ck_assert_int_eq(kfac_stats_update(avg, a, 0.9), 0); /* first: copy */
    kfac_stats_reset(b);
    s_randn(&rng, x, (size_t)n * 32);
    ck_assert_int_eq(net_forward(net, x, n, 1), 0);
    net_backward(net, lab, NULL, NULL);
    ck_assert_int_eq(kfac_stats_compute(b, net), 0);
    ck_assert_int_eq(kfac_stats_update(avg, b, 0.9), 0);
    for (int j = 0; j < a->n_layers; j++)
        for (int k = 0; k < a->layers[j].n_factors; k++) {
            const kfac_factor_t *fa = &a->layers[j].f[k], *fb = &b->layers[j].f[k], *fv = &avg->layers[j].f[k];
            size_t m = kfac_factor_len(fa);
            double *ref = NEWD(m);
            for (size_t q = 0; q < m; q++) ref[q] = 0.9 * fa->data[q] + 0.1 * fb->data[q];
            s_check_close_floor("container running average", fv->data, ref, m, 1e-6,
                                fmax(s_max_abs(fa->data, m), s_max_abs(fb->data, m)), seed);
            ck_assert(fv->n_samples == 2.0 * n && fv->n_updates == 2);
            free(ref);
        }
    /* merge: b (n samples) into a copy of a with 3n samples -> weights 3/4, 1/4 */
    kfac_stats_t *m = kfac_stats_new(net);
    ck_assert_int_eq(kfac_stats_merge(m, a), 0);
    for (int j = 0; j < m->n_layers; j++)
        for (int k = 0; k < m->layers[j].n_factors; k++) m->layers[j].f[k].n_samples = 3.0 * n;
    ck_assert_int_eq(kfac_stats_merge(m, b), 0);
    for (int j = 0; j < a->n_layers; j++)
        for (int k = 0; k < a->layers[j].n_factors; k++) {
            const kfac_factor_t *fa = &a->layers[j].f[k], *fb = &b->layers[j].f[k], *fm = &m->layers[j].f[k];
            size_t mm = kfac_factor_len(fa);
            double *ref = NEWD(mm);
            for (size_t q = 0; q < mm; q++) ref[q] = 0.75 * fa->data[q] + 0.25 * fb->data[q];
            s_check_close_floor("container merge", fm->data, ref, mm, 1e-6,
                                fmax(s_max_abs(fa->data, mm), s_max_abs(fb->data, mm)), seed);
            ck_assert(fm->n_samples == 4.0 * n);
            free(ref);
        }
    /* layouts must match */
    net_t *other = s_net("input 1x2x2\nflatten\nfc out=2\nsoftmax_xent\n", 2, seed);
    kfac_stats_t *o = kfac_stats_new(other);
    ck_assert_int_eq(kfac_stats_update(avg, o, 0.9), -EINVAL);
    ck_assert_int_eq(kfac_stats_merge(avg, o), -EINVAL);
    ck_assert_int_eq(kfac_stats_compute(o, net), -EINVAL);
    kfac_stats_free(&o);
    net_free(&other);
    kfac_stats_free(&m);
    kfac_stats_free(&a);
    kfac_stats_free(&b);
    kfac_stats_free(&avg);
    kfac_stats_free(&avg); /* idempotent */
    free(x); free(buf);
    net_free(&net);
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
    TCase *tn = tcase_create("net");
    tcase_set_timeout(tn, 20);
    tcase_add_test(tn, test_compute_single_example_exact_fisher);
    tcase_add_test(tn, test_compute_batch_vs_single_examples);
    tcase_add_test(tn, test_compute_bn_and_flatten_doubly);
    tcase_add_test(tn, test_compute_true_fisher_sampled_labels);
    tcase_add_test(tn, test_container_pack_update_merge);
    suite_add_tcase(s, tn);
    return s;
}
