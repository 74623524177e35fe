/* tests/lib/stats_oracle.c — see stats_oracle.h. */
#include "tests/lib/stats_oracle.h"

#include <cblas.h>
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void oracle_randn(rng_t *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(r);
}

void *oracle_alloc(size_t n) {
    void *p = calloc(n ? n : 1, 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* max |got - ref| <= rtol * max(max |ref|, floor) over n entries (floor: the
 * magnitude of the inputs, when the result may cancel to something smaller). */
void oracle_check_close_floor(const char *what, const float *got, const double *ref, size_t n, double rtol,
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

void oracle_check_close(const char *what, const float *got, const double *ref, size_t n, double rtol,
                          uint64_t seed) {
    oracle_check_close_floor(what, got, ref, n, rtol, 0.0, seed);
}

double oracle_max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* A (dA x dA) (x) G (dG x dG) against F ((dA dG) x (dA dG)), column-stacked vec. */
void oracle_check_kron(const char *what, const float *A, int dA, const float *G, int dG, const double *F,
                         double rtol, uint64_t seed) {
    size_t N = (size_t)dA * dG;
    float *K = NEWF(N * N);
    for (int j = 0; j < dA; j++)
        for (int o = 0; o < dG; o++)
            for (int j2 = 0; j2 < dA; j2++)
                for (int o2 = 0; o2 < dG; o2++)
                    K[((size_t)j * dG + o) * N + (size_t)j2 * dG + o2] = A[j * dA + j2] * G[o * dG + o2];
    oracle_check_close(what, K, F, N * N, rtol, seed);
    free(K);
}

/* F += w vec(V) vec(V)^T for V (out, dA) row-major in double. */
void oracle_add_fisher(double *F, const double *V, int out, int dA, double w) {
    size_t N = (size_t)out * dA;
    for (int j = 0; j < dA; j++)
        for (int o = 0; o < out; o++)
            for (int j2 = 0; j2 < dA; j2++)
                for (int o2 = 0; o2 < out; o2++)
                    F[((size_t)j * out + o) * N + (size_t)j2 * out + o2] += w * V[o * dA + j] * V[o2 * dA + j2];
}

/* M (d x d) += w x x^T (double). */
void oracle_add_outer(double *M, const double *x, int d, double w) {
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) M[(size_t)i * d + j] += w * x[i] * x[j];
}

void oracle_check_symmetric(const char *what, const float *F, int d, uint64_t seed) {
    for (int i = 0; i < d; i++)
        for (int j = i + 1; j < d; j++)
            ck_assert_msg(F[(size_t)i * d + j] == F[(size_t)j * d + i], "%s not symmetric at (%d,%d), seed %llu",
                          what, i, j, (unsigned long long)seed);
}

/* ---- a direct double-precision convolution geometry (independent of nn) ---- */


oracle_geom_t oracle_geom(int C, int H, int W, int k, int stride, int pad) {
    oracle_geom_t g = {C, H, W, k, stride, pad, (H + 2 * pad - k) / stride + 1, (W + 2 * pad - k) / stride + 1};
    return g;
}

/* The patch of example x (C, H, W) at output (oy, ox), with the homogeneous
 * 1 appended when bias: p[(c*k + ky)*k + kx] = x[c][oy*s-pad+ky][ox*s-pad+kx], 0 outside. */
void oracle_patch(const oracle_geom_t *g, const float *x, int oy, int ox, int bias, double *p) {
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
float *oracle_im2col(const oracle_geom_t *g, const float *x, int n) {
    int K = g->C * g->k * g->k, P = g->OH * g->OW;
    float *cols = NEWF((size_t)n * P * K);
    double *p = NEWD(K + 1);
    for (int i = 0; i < n; i++)
        for (int oy = 0; oy < g->OH; oy++)
            for (int ox = 0; ox < g->OW; ox++) {
                oracle_patch(g, x + (size_t)i * g->C * g->H * g->W, oy, ox, 0, p);
                for (int j = 0; j < K; j++) cols[((size_t)i * P + oy * g->OW + ox) * K + j] = (float)p[j];
            }
    free(p);
    return cols;
}

/* KFC / AVG references in double from the raw input x (n, C, H, W) and the
 * per-example output gradients gs (n, out, P) (already g, not g/n). */
void oracle_conv_refs(const oracle_geom_t *g, const float *x, const double *gs, int n, int out, int bias,
                        double *A_kfc, double *G_kfc, double *A_avg, double *G_avg) {
    int K = g->C * g->k * g->k, dA = K + bias, P = g->OH * g->OW;
    double *p = NEWD(dA), *m = NEWD(dA), *gt = NEWD(out), *s = NEWD(out);
    for (int i = 0; i < n; i++) {
        memset(m, 0, (size_t)dA * sizeof *m);
        memset(s, 0, (size_t)out * sizeof *s);
        for (int t = 0; t < P; t++) {
            oracle_patch(g, x + (size_t)i * g->C * g->H * g->W, t / g->OW, t % g->OW, bias, p);
            if (A_kfc) oracle_add_outer(A_kfc, p, dA, 1.0 / ((double)n * P));
            for (int j = 0; j < dA; j++) m[j] += p[j] / P;
            for (int o = 0; o < out; o++) gt[o] = gs[((size_t)i * out + o) * P + t], s[o] += gt[o];
            if (G_kfc) oracle_add_outer(G_kfc, gt, out, 1.0 / n);
        }
        if (A_avg) oracle_add_outer(A_avg, m, dA, 1.0 / n);
        if (G_avg) oracle_add_outer(G_avg, s, out, 1.0 / n);
    }
    free(p); free(m); free(gt); free(s);
}

/* Leading singular triple of the T x C matrix M[t][c] = x[c*T + t] by power
 * iteration in double on M^T M (inputs here have a dominant direction, so it
 * converges fast). Returns sigma; u (T), v (C) unit, sign: sum(v) >= 0. */
double oracle_power_svd(const float *x, int C, int T, double *u, double *v) {
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
