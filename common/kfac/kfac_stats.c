/* common/kfac/kfac_stats.c — K-FAC factor statistics (see kfac_stats.h for the
 * math, the normalizations and the factor order).
 *
 * float32 row-major; symmetric factors full with the upper triangle
 * authoritative (mirrored onto the lower one after each computation). All
 * O(n d^2) work is SYRK; the O(n d) reductions (column means, position sums)
 * are GEMV or short loops. */
#include "common/kfac/kfac_stats.h"

#include <cblas.h>
#include <errno.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/kfac/kfac_linalg.h"
#include "common/base/log.h"

/* ---- scratch ------------------------------------------------------------- */

/* Return work if given, else a fresh allocation of n floats recorded in
 * *owned (freed by the caller). NULL on allocation failure. */
static float *s_scratch(float *work, size_t n, float **owned) {
    *owned = NULL;
    if (work) return work;
    *owned = malloc((n ? n : 1) * sizeof(float));
    return *owned;
}

static void s_fill(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}

/* ---- building blocks ----------------------------------------------------- */

/* A (dA, dA) with dA = d + has_bias from rows x (m, d):
 *     A = (1/m) [x 1]^T [x 1].
 * ones: m floats of scratch. */
static void s_input_factor(const float *x, int m, int d, int has_bias, float *A, float *ones) {
    int dA = d + (has_bias ? 1 : 0);
    float inv_m = 1.0f / (float)m;
    /* A[0:d, 0:d] (upper) = inv_m * x^T x; x (m, d) row-major, C leading dim dA. */
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, d, m, inv_m, x, d, 0.0f, A, dA);
    if (has_bias) {
        s_fill(ones, (size_t)m, 1.0f);
        /* A[0:d, d] = inv_m * x^T 1 (column means), written with stride dA down column d. */
        cblas_sgemv(CblasRowMajor, CblasTrans, m, d, inv_m, x, d, ones, 1, 0.0f, A + d, dA);
        A[(size_t)d * dA + d] = 1.0f;
    }
    kfac_linalg_symmetrize_upper(A, dA);
}

/* The same for column samples: X (d, m) row-major, A = (1/m) [X; 1^T] [X; 1^T]^T. */
static void s_input_factor_cm(const float *X, int m, int d, int has_bias, float *A, float *ones) {
    int dA = d + (has_bias ? 1 : 0);
    float inv_m = 1.0f / (float)m;
    /* A[0:d, 0:d] (upper) = inv_m * X X^T; X (d, m) row-major, C leading dim dA. */
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, d, m, inv_m, X, m, 0.0f, A, dA);
    if (has_bias) {
        s_fill(ones, (size_t)m, 1.0f);
        /* A[0:d, d] = inv_m * X 1 (row means), written with stride dA down column d. */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, d, m, inv_m, X, m, ones, 1, 0.0f, A + d, dA);
        A[(size_t)d * dA + d] = 1.0f;
    }
    kfac_linalg_symmetrize_upper(A, dA);
}

/* G (d, d) = alpha * y^T y for rows y (m, d). */
static void s_gram(const float *y, int m, int d, float alpha, float *G) {
    /* G (upper) = alpha * y^T y; y (m, d) row-major. */
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, d, m, alpha, y, d, 0.0f, G, d);
    kfac_linalg_symmetrize_upper(G, d);
}

static int s_check_dims(const char *what, int n, int a, int b) {
    if (n < 1 || a < 1 || b < 1) {
        log_error("kfac_stats_%s: bad dimensions n=%d, %d, %d", what, n, a, b);
        return -EINVAL;
    }
    return 0;
}

/* ---- mode selection ------------------------------------------------------- */

int kfac_stats_choose_mode(const layer_t *l, double doubly_min_in) {
    if (!l) return -EINVAL;
    switch (l->kind) {
    case LAYER_FC: {
        int t = l->in_h * l->in_w;
        double in = (double)l->in_c * l->in_h * l->in_w;
        switch (l->kfac) {
        case KFAC_MODE_DEFAULT:
            return (t > 1 && in > doubly_min_in) ? KFAC_MODE_DOUBLY : KFAC_MODE_STANDARD;
        case KFAC_MODE_STANDARD:
        case KFAC_MODE_NONE:
            return l->kfac;
        case KFAC_MODE_DOUBLY:
            if (t <= 1) {
                log_error("layer %s: kfac=doubly needs a feature-map input (h*w > 1), got %dx%dx%d",
                          l->name, l->in_c, l->in_h, l->in_w);
                return -EINVAL;
            }
            return KFAC_MODE_DOUBLY;
        default:
            log_error("layer %s: fc cannot use the convolution approximation %d", l->name, (int)l->kfac);
            return -EINVAL;
        }
    }
    case LAYER_CONV:
        switch (l->kfac) {
        case KFAC_MODE_DEFAULT:
        case KFAC_MODE_KFC:
            return KFAC_MODE_KFC;
        case KFAC_MODE_AVG:
        case KFAC_MODE_NONE:
            return l->kfac;
        default:
            log_error("layer %s: conv supports kfac=kfc, avg or none (got %d)", l->name, (int)l->kfac);
            return -EINVAL;
        }
    case LAYER_BATCHNORM:
        return l->kfac == KFAC_MODE_NONE ? KFAC_MODE_NONE : KFAC_MODE_STANDARD;
    default:
        return KFAC_MODE_NONE;
    }
}

/* ---- raw-buffer statistics -------------------------------------------------- */

int kfac_stats_fc(const float *a, const float *dy, int n, int in, int out, int has_bias,
                  float g_scale, float *A, float *G, float *work) {
    if (!a || !dy || !A || !G) return -EINVAL;
    int rc = s_check_dims("fc", n, in, out);
    if (rc) return rc;
    float *owned, *ones = s_scratch(work, (size_t)n, &owned);
    if (!ones) return -ENOMEM;
    s_input_factor(a, n, in, has_bias, A, ones);
    s_gram(dy, n, out, g_scale * g_scale / (float)n, G);
    free(owned);
    return 0;
}

size_t kfac_stats_conv_cm_work_len(kfac_mode_t mode, int n, int positions, int K, int out) {
    if (mode == KFAC_MODE_AVG)
        /* per-example mean patches (K, n), position sums (n, out), ones (n), ones (positions) */
        return (size_t)n * K + (size_t)n * out + (size_t)n + (size_t)positions;
    return (size_t)n * (size_t)positions; /* KFC: ones (n*positions) */
}

int kfac_stats_conv_cm(kfac_mode_t mode, const float *cols, const float *dy, int n, int positions,
                       int K, int out, int has_bias, float g_scale, float *A, float *G, float *work) {
    if (!cols || !dy || !A || !G) return -EINVAL;
    if (mode != KFAC_MODE_KFC && mode != KFAC_MODE_AVG) {
        log_error("kfac_stats_conv_cm: mode %d is neither KFC nor AVG", (int)mode);
        return -EINVAL;
    }
    int rc = s_check_dims("conv", n, K, out);
    if (rc) return rc;
    if (positions < 1) return -EINVAL;
    const int P = positions;
    const size_t R = (size_t)n * (size_t)P;
    float *owned, *ws = s_scratch(work, kfac_stats_conv_cm_work_len(mode, n, P, K, out), &owned);
    if (!ws) return -ENOMEM;
    const float alpha = g_scale * g_scale / (float)n;
    if (mode == KFAC_MODE_KFC) {
        /* A = (1/(nP)) sum over all (example, position) columns of [p;1][p;1]^T. */
        s_input_factor_cm(cols, (int)R, K, has_bias, A, ws);
        /* G = (1/n) sum_i sum_t g g^T = alpha sum_i dy_i dy_i^T, dy_i (out, P) row-major. */
        for (int i = 0; i < n; i++)
            cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, out, P, alpha, dy + (size_t)i * out * P, P,
                        i ? 1.0f : 0.0f, G, out);
        kfac_linalg_symmetrize_upper(G, out);
    } else {
        float *means = ws;                              /* (K, n) */
        float *sums = means + (size_t)n * K;            /* (n, out) */
        float *ones = sums + (size_t)n * out;           /* (n) */
        float *ones_p = ones + n;                       /* (P) */
        s_fill(ones_p, (size_t)P, 1.0f);
        /* means (K*n) = (1/P) cols (K*n, P) 1: per (row, example) mean over positions. */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)((size_t)K * n), P, 1.0f / (float)P, cols, P, ones_p, 1, 0.0f, means, 1);
        /* sums (n*out) = dy (n*out, P) 1: the per-example sum over positions. */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n * out, P, 1.0f, dy, P, ones_p, 1, 0.0f, sums, 1);
        s_input_factor_cm(means, n, K, has_bias, A, ones);
        s_gram(sums, n, out, alpha, G);
    }
    free(owned);
    return 0;
}

int kfac_stats_rank1(const float *x, int C, int T, float *K, float *psi, double *sigma) {
    if (!x || !K || !psi || C < 1 || T < 1) return -EINVAL;
    const int m = C < T ? C : T;
    const size_t CT = (size_t)C * T;
    double *buf = malloc((CT + (size_t)m * m + (size_t)T + (size_t)C + 1) * sizeof(double));
    lapack_int *isuppz = malloc(2 * sizeof(lapack_int));
    int rc = 0;
    if (!buf || !isuppz) { rc = -ENOMEM; goto cleanup; }
    double *M = buf;            /* (C, T) = A^T, row-major */
    double *S = M + CT;         /* (m, m) Gram of the smaller side */
    double *u = S + (size_t)m * m; /* (T) left singular vector of A */
    double *v = u + T;          /* (C) right singular vector of A */
    double lam = 0.0;
    for (size_t i = 0; i < CT; i++) M[i] = x[i];
    if (T <= C) {
        /* S (T, T) = M^T M = A A^T; M (C, T) row-major. */
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, T, C, 1.0, M, T, 0.0, S, T);
    } else {
        /* S (C, C) = M M^T = A^T A; M (C, T) row-major. */
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, C, T, 1.0, M, T, 0.0, S, C);
    }
    double *z = (T <= C) ? u : v;
    lapack_int found = 0;
    /* Largest eigenpair (il = iu = m) of the symmetric S. Its row-major upper triangle is the
     * column-major lower one, so LAPACK reads it in place ('L', no transposed copy); z (m). */
    lapack_int info = LAPACKE_dsyevr(LAPACK_COL_MAJOR, 'V', 'I', 'L', m, S, m, 0.0, 0.0, m, m,
                                     LAPACKE_dlamch('S'), &found, &lam, z, m, isuppz);
    if (info != 0 || found != 1) {
        log_error("kfac_stats_rank1: LAPACK dsyevr failed (info %d) on a %dx%d activation", (int)info, T, C);
        rc = -EIO;
        goto cleanup;
    }
    double sig = lam > 0.0 ? sqrt(lam) : 0.0;
    if (sigma) *sigma = sig;
    if (!(sig > 0.0) || !isfinite(sig)) {
        memset(K, 0, (size_t)T * sizeof *K);
        memset(psi, 0, (size_t)C * sizeof *psi);
        goto cleanup;
    }
    if (T <= C) {
        /* v (C) = M u / sigma = A^T u / sigma; M (C, T) row-major. */
        cblas_dgemv(CblasRowMajor, CblasNoTrans, C, T, 1.0 / sig, M, T, u, 1, 0.0, v, 1);
    } else {
        /* u (T) = M^T v / sigma = A v / sigma; M (C, T) row-major. */
        cblas_dgemv(CblasRowMajor, CblasTrans, C, T, 1.0 / sig, M, T, v, 1, 0.0, u, 1);
    }
    /* Sign: sum(psi) >= 0, ties broken by the largest |psi_c| being positive. */
    double sum = 0.0, big = 0.0;
    for (int c = 0; c < C; c++) {
        sum += v[c];
        if (fabs(v[c]) > fabs(big)) big = v[c];
    }
    double sgn = (sum < 0.0 || (sum == 0.0 && big < 0.0)) ? -1.0 : 1.0;
    double r = sgn * sqrt(sig);
    for (int t = 0; t < T; t++) K[t] = (float)(r * u[t]);
    for (int c = 0; c < C; c++) psi[c] = (float)(r * v[c]);
cleanup:
    free(buf);
    free(isuppz);
    return rc;
}

size_t kfac_stats_doubly_work_len(int n, int C, int T) {
    return (size_t)n * T + (size_t)n * C;
}

int kfac_stats_doubly(const float *a, const float *dy, int n, int C, int T, int out, float g_scale,
                      float *KK, float *PP, float *G, float *Gbias, float *work) {
    if (!a || !dy || !KK || !PP || !G) return -EINVAL;
    int rc = s_check_dims("doubly", n, C, T);
    if (rc || out < 1) return rc ? rc : -EINVAL;
    float *owned, *ws = s_scratch(work, kfac_stats_doubly_work_len(n, C, T), &owned);
    if (!ws) return -ENOMEM;
    float *Km = ws;                      /* (n, T) */
    float *Pm = ws + (size_t)n * T;      /* (n, C) */
    for (int i = 0; i < n; i++) {
        rc = kfac_stats_rank1(a + (size_t)i * C * T, C, T, Km + (size_t)i * T, Pm + (size_t)i * C, NULL);
        if (rc) goto cleanup;
    }
    s_gram(Km, n, T, 1.0f / (float)n, KK);   /* E[K K^T] */
    s_gram(Pm, n, C, 1.0f / (float)n, PP);   /* E[Psi Psi^T] */
    s_gram(dy, n, out, g_scale * g_scale / (float)n, G);
    if (Gbias) memcpy(Gbias, G, (size_t)out * out * sizeof *G);
cleanup:
    free(owned);
    return rc;
}

int kfac_stats_bn(const float *xhat, const float *dy, int n, int c, int positions, float g_scale,
                  float *F) {
    if (!xhat || !dy || !F) return -EINVAL;
    int rc = s_check_dims("bn", n, c, positions);
    if (rc) return rc;
    const int P = positions;
    for (int ch = 0; ch < c; ch++) {
        double gg = 0.0, gb = 0.0, bb = 0.0;
        for (int i = 0; i < n; i++) {
            const float *d = dy + ((size_t)i * c + ch) * P;
            const float *xh = xhat + ((size_t)i * c + ch) * P;
            double dg = 0.0, db = 0.0;
            for (int t = 0; t < P; t++) {
                dg += (double)d[t] * xh[t];
                db += d[t];
            }
            dg *= g_scale;
            db *= g_scale;
            gg += dg * dg;
            gb += dg * db;
            bb += db * db;
        }
        F[3 * ch + 0] = (float)(gg / n);
        F[3 * ch + 1] = (float)(gb / n);
        F[3 * ch + 2] = (float)(bb / n);
    }
    return 0;
}

/* ---- Fisher type -------------------------------------------------------------- */

int kfac_sample_labels(const float *probs, int n, int classes, rng_t *rng, int *labels) {
    if (!probs || !rng || !labels || n < 1 || classes < 1) return -EINVAL;
    for (int i = 0; i < n; i++) {
        const float *p = probs + (size_t)i * classes;
        double sum = 0.0;
        for (int k = 0; k < classes; k++) {
            if (!(p[k] >= 0.0f) || !isfinite(p[k])) {
                log_error("kfac_sample_labels: row %d has probability %g for class %d", i, (double)p[k], k);
                return -EINVAL;
            }
            sum += p[k];
        }
        if (!(sum > 0.0)) {
            log_error("kfac_sample_labels: row %d sums to 0", i);
            return -EINVAL;
        }
        double u = rng_uniform(rng) * sum, cum = 0.0;
        int pick = -1, last = 0;
        for (int k = 0; k < classes; k++) {
            if (p[k] > 0.0f) last = k;
            cum += p[k];
            if (pick < 0 && u < cum) pick = k;
        }
        labels[i] = pick >= 0 ? pick : last; /* u == sum by rounding: last non-zero class */
    }
    return 0;
}

/* ---- running averages ------------------------------------------------------------ */

size_t kfac_factor_len(const kfac_factor_t *f) {
    if (!f || f->dim < 1) return 0;
    return f->kind == KFAC_FACTOR_DIAG2X2 ? 3 * (size_t)f->dim : (size_t)f->dim * f->dim;
}

int kfac_factor_update(kfac_factor_t *f, const float *fresh, double n_fresh, double decay) {
    if (!f || !fresh || !f->data || !(decay >= 0.0 && decay <= 1.0) || !(n_fresh >= 0.0)) {
        log_error("kfac_factor_update: bad argument (decay %g, n_fresh %g)", decay, n_fresh);
        return -EINVAL;
    }
    size_t len = kfac_factor_len(f);
    if (f->n_updates == 0) {
        memcpy(f->data, fresh, len * sizeof *fresh);
    } else {
        /* F <- decay F, then F <- F + (1 - decay) F_new (flat arrays of len floats). */
        cblas_sscal((int)len, (float)decay, f->data, 1);
        cblas_saxpy((int)len, (float)(1.0 - decay), fresh, 1, f->data, 1);
    }
    f->n_samples += n_fresh;
    f->n_updates += 1;
    return 0;
}

/* ---- the container ----------------------------------------------------------------- */

/* The feature map seen by an fc: its own input shape, or, behind a flatten,
 * the flatten's input (same channel-major order). */
static void s_fc_feature_map(const net_t *net, const layer_t *l, int *c, int *h, int *w) {
    *c = l->in_c; *h = l->in_h; *w = l->in_w;
    if (l->in_h * l->in_w == 1 && l->in >= 0 && net->layers[l->in].kind == LAYER_FLATTEN) {
        const layer_t *f = &net->layers[l->in];
        *c = f->in_c; *h = f->in_h; *w = f->in_w;
    }
}

static void s_set_factor(kfac_factor_t *f, kfac_factor_kind_t kind, kfac_factor_role_t role, int dim) {
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->role = role;
    f->dim = dim;
}

kfac_stats_t *kfac_stats_new(const net_t *net) {
    if (!net || net->n_layers < 1 || net->batch_cap < 1) {
        log_error("kfac_stats_new: no network");
        return NULL;
    }
    kfac_stats_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->layers = calloc((size_t)net->n_layers, sizeof *s->layers);
    if (!s->layers) goto fail;
    s->batch_cap = net->batch_cap;
    const int n = net->batch_cap;
    size_t work = 0;
    for (int i = 0; i < net->n_layers; i++) {
        const layer_t *l = &net->layers[i];
        if (!layer_has_params(l)) continue;
        layer_t view = *l;
        if (l->kind == LAYER_FC) s_fc_feature_map(net, l, &view.in_c, &view.in_h, &view.in_w);
        int mode = kfac_stats_choose_mode(&view, net->fc_doubly_min_in);
        if (mode < 0) {
            log_error("kfac_stats_new: layer %d (%s, line %d) has no valid K-FAC approximation",
                      i, l->name, l->line);
            goto fail;
        }
        if (mode == KFAC_MODE_NONE) continue;
        kfac_layer_stats_t *ls = &s->layers[s->n_layers++];
        ls->layer = i;
        ls->kind = l->kind;
        ls->mode = (kfac_mode_t)mode;
        ls->positions = 1;
        size_t need = 0;
        if (l->kind == LAYER_FC) {
            int in = l->in_c * l->in_h * l->in_w;
            ls->has_bias = l->has_bias ? 1 : 0;
            ls->in = in;
            ls->out = l->out;
            if (mode == KFAC_MODE_DOUBLY) {
                ls->fm_c = view.in_c;
                ls->fm_t = view.in_h * view.in_w;
                s_set_factor(&ls->f[0], KFAC_FACTOR_SYM, KFAC_FACTOR_ROLE_K, ls->fm_t);
                s_set_factor(&ls->f[1], KFAC_FACTOR_SYM, KFAC_FACTOR_ROLE_PSI, ls->fm_c);
                s_set_factor(&ls->f[2], KFAC_FACTOR_SYM, KFAC_FACTOR_ROLE_G, l->out);
                ls->n_factors = 3;
                if (ls->has_bias) s_set_factor(&ls->f[ls->n_factors++], KFAC_FACTOR_SYM, KFAC_FACTOR_ROLE_GBIAS, l->out);
                need = kfac_stats_doubly_work_len(n, ls->fm_c, ls->fm_t);
            } else {
                s_set_factor(&ls->f[0], KFAC_FACTOR_SYM, KFAC_FACTOR_ROLE_A, in + ls->has_bias);
                s_set_factor(&ls->f[1], KFAC_FACTOR_SYM, KFAC_FACTOR_ROLE_G, l->out);
                ls->n_factors = 2;
                need = (size_t)n;
            }
        } else if (l->kind == LAYER_CONV) {
            ls->has_bias = l->has_bias ? 1 : 0;
            ls->in = l->in_c * l->k * l->k;
            ls->out = l->out;
            ls->positions = l->h * l->w;
            s_set_factor(&ls->f[0], KFAC_FACTOR_SYM, KFAC_FACTOR_ROLE_A, ls->in + ls->has_bias);
            s_set_factor(&ls->f[1], KFAC_FACTOR_SYM, KFAC_FACTOR_ROLE_G, l->out);
            ls->n_factors = 2;
            need = kfac_stats_conv_cm_work_len(ls->mode, n, ls->positions, ls->in, ls->out);
        } else { /* batchnorm */
            ls->in = ls->out = l->c;
            ls->positions = l->h * l->w;
            s_set_factor(&ls->f[0], KFAC_FACTOR_DIAG2X2, KFAC_FACTOR_ROLE_BN, l->c);
            ls->n_factors = 1;
        }
        if (need > work) work = need;
    }
    size_t total = 0;
    for (int j = 0; j < s->n_layers; j++)
        for (int k = 0; k < s->layers[j].n_factors; k++) total += kfac_factor_len(&s->layers[j].f[k]);
    s->n_floats = total;
    s->arena = calloc(total ? total : 1, sizeof(float));
    s->work_len = work;
    s->work = malloc((work ? work : 1) * sizeof(float));
    if (!s->arena || !s->work) {
        log_error("kfac_stats_new: out of memory (%zu factor floats, %zu scratch floats)", total, work);
        goto fail;
    }
    size_t off = 0;
    for (int j = 0; j < s->n_layers; j++)
        for (int k = 0; k < s->layers[j].n_factors; k++) {
            kfac_factor_t *f = &s->layers[j].f[k];
            f->data = s->arena + off;
            off += kfac_factor_len(f);
        }
    return s;
fail:
    kfac_stats_free(&s);
    return NULL;
}

void kfac_stats_free(kfac_stats_t **s_p) {
    if (!s_p || !*s_p) return;
    kfac_stats_t *s = *s_p;
    free(s->layers);
    free(s->arena);
    free(s->work);
    free(s);
    *s_p = NULL;
}

void kfac_stats_reset(kfac_stats_t *s) {
    if (!s) return;
    if (s->arena) memset(s->arena, 0, s->n_floats * sizeof *s->arena);
    for (int j = 0; j < s->n_layers; j++)
        for (int k = 0; k < s->layers[j].n_factors; k++) {
            s->layers[j].f[k].n_samples = 0.0;
            s->layers[j].f[k].n_updates = 0;
        }
}

int kfac_stats_find(const kfac_stats_t *s, int layer) {
    if (!s) return -1;
    for (int j = 0; j < s->n_layers; j++)
        if (s->layers[j].layer == layer) return j;
    return -1;
}

/* Does layer slot ls still describe net's layer? */
static int s_layer_matches(const kfac_layer_stats_t *ls, const net_t *net) {
    if (ls->layer < 0 || ls->layer >= net->n_layers) return 0;
    const layer_t *l = &net->layers[ls->layer];
    if (l->kind != ls->kind) return 0;
    if (l->kind == LAYER_FC)
        return l->in_c * l->in_h * l->in_w == ls->in && l->out == ls->out && (l->has_bias ? 1 : 0) == ls->has_bias;
    if (l->kind == LAYER_CONV)
        return l->in_c * l->k * l->k == ls->in && l->out == ls->out && l->h * l->w == ls->positions &&
               (l->has_bias ? 1 : 0) == ls->has_bias && l->cols != NULL;
    return l->c == ls->in && l->h * l->w == ls->positions && l->xhat != NULL;
}

int kfac_stats_compute(kfac_stats_t *s, net_t *net) {
    if (!s || !net) return -EINVAL;
    const int n = net->batch_n;
    if (n < 1 || n > s->batch_cap || n > net->batch_cap) {
        log_error("kfac_stats_compute: batch of %d examples, scratch sized for %d", n, s->batch_cap);
        return -EINVAL;
    }
    const float g_scale = (float)n; /* nn's loss is the batch mean: g = n dy */
    for (int j = 0; j < s->n_layers; j++) {
        kfac_layer_stats_t *ls = &s->layers[j];
        if (!s_layer_matches(ls, net)) {
            log_error("kfac_stats_compute: layer %d does not match the statistics layout", ls->layer);
            return -EINVAL;
        }
        if (ls->skip) { /* not wanted this time (adaptive refresh): empty */
            for (int k = 0; k < ls->n_factors; k++) ls->f[k].n_samples = 0.0, ls->f[k].n_updates = 0;
            continue;
        }
        const layer_t *l = &net->layers[ls->layer];
        int rc;
        if (ls->kind == LAYER_FC) {
            const float *a = net_layer_input(net, l);
            if (ls->mode == KFAC_MODE_DOUBLY)
                rc = kfac_stats_doubly(a, l->dy, n, ls->fm_c, ls->fm_t, ls->out, g_scale, ls->f[0].data,
                                       ls->f[1].data, ls->f[2].data, ls->has_bias ? ls->f[3].data : NULL,
                                       s->work);
            else
                rc = kfac_stats_fc(a, l->dy, n, ls->in, ls->out, ls->has_bias, g_scale, ls->f[0].data,
                                   ls->f[1].data, s->work);
        } else if (ls->kind == LAYER_CONV) {
            /* The oneDNN engine forms no patches in its forward pass: im2col now. */
            if ((rc = net_conv_patches(net, &net->layers[ls->layer])) == 0)
                rc = kfac_stats_conv_cm(ls->mode, l->cols, l->dy, n, ls->positions, ls->in, ls->out, ls->has_bias,
                                        g_scale, ls->f[0].data, ls->f[1].data, s->work);
        } else {
            rc = kfac_stats_bn(l->xhat, l->dy, n, ls->in, ls->positions, g_scale, ls->f[0].data);
        }
        if (rc) {
            log_error("kfac_stats_compute: layer %d (%s): statistics failed (%d)", ls->layer, l->name, rc);
            return rc;
        }
        for (int k = 0; k < ls->n_factors; k++) {
            ls->f[k].n_samples = n;
            ls->f[k].n_updates = 1;
        }
    }
    return 0;
}

static int s_same_layout(const kfac_stats_t *a, const kfac_stats_t *b) {
    if (a->n_layers != b->n_layers) return 0;
    for (int j = 0; j < a->n_layers; j++) {
        const kfac_layer_stats_t *x = &a->layers[j], *y = &b->layers[j];
        if (x->layer != y->layer || x->n_factors != y->n_factors) return 0;
        for (int k = 0; k < x->n_factors; k++)
            if (x->f[k].kind != y->f[k].kind || x->f[k].dim != y->f[k].dim) return 0;
    }
    return 1;
}

int kfac_stats_update(kfac_stats_t *avg, const kfac_stats_t *batch, double decay) {
    if (!avg || !batch || !s_same_layout(avg, batch)) {
        log_error("kfac_stats_update: statistics layouts differ");
        return -EINVAL;
    }
    for (int j = 0; j < avg->n_layers; j++)
        for (int k = 0; k < avg->layers[j].n_factors; k++) {
            const kfac_factor_t *src = &batch->layers[j].f[k];
            if (src->n_updates == 0) continue;
            int rc = kfac_factor_update(&avg->layers[j].f[k], src->data, src->n_samples, decay);
            if (rc) return rc;
        }
    return 0;
}

int kfac_stats_merge(kfac_stats_t *dst, const kfac_stats_t *src) {
    if (!dst || !src || !s_same_layout(dst, src)) {
        log_error("kfac_stats_merge: statistics layouts differ");
        return -EINVAL;
    }
    for (int j = 0; j < dst->n_layers; j++)
        for (int k = 0; k < dst->layers[j].n_factors; k++) {
            kfac_factor_t *d = &dst->layers[j].f[k];
            const kfac_factor_t *s = &src->layers[j].f[k];
            if (s->n_updates == 0) continue;
            size_t len = kfac_factor_len(d);
            double tot = d->n_samples + s->n_samples;
            if (d->n_updates == 0 || !(tot > 0.0)) {
                memcpy(d->data, s->data, len * sizeof *d->data);
                d->n_samples = s->n_samples;
                d->n_updates = s->n_updates;
                continue;
            }
            float wd = (float)(d->n_samples / tot), ws = (float)(s->n_samples / tot);
            /* d <- wd d + ws s over the flat data (len floats). */
            cblas_sscal((int)len, wd, d->data, 1);
            cblas_saxpy((int)len, ws, s->data, 1, d->data, 1);
            d->n_samples = tot;
            d->n_updates = d->n_updates > s->n_updates ? d->n_updates : s->n_updates;
        }
    return 0;
}

/* ---- wire form ---------------------------------------------------------------------- */

size_t kfac_factor_packed_len(const kfac_factor_t *f) {
    if (!f || f->dim < 1) return 0;
    return f->kind == KFAC_FACTOR_DIAG2X2 ? 3 * (size_t)f->dim : kfac_linalg_packed_len(f->dim);
}

int kfac_stats_layer_dims(const kfac_layer_stats_t *ls, int *dims, int max_dims) {
    if (!ls || (max_dims > 0 && !dims)) return -EINVAL;
    for (int k = 0; k < ls->n_factors && k < max_dims; k++) dims[k] = ls->f[k].dim;
    return ls->n_factors;
}

size_t kfac_stats_layer_packed_len(const kfac_layer_stats_t *ls) {
    size_t len = 0;
    if (!ls) return 0;
    for (int k = 0; k < ls->n_factors; k++) len += kfac_factor_packed_len(&ls->f[k]);
    return len;
}

int kfac_stats_layer_pack(const kfac_layer_stats_t *ls, float *out, size_t out_len) {
    if (!ls || !out || out_len < kfac_stats_layer_packed_len(ls)) {
        log_error("kfac_stats_layer_pack: output buffer too small");
        return -EINVAL;
    }
    for (int k = 0; k < ls->n_factors; k++) {
        const kfac_factor_t *f = &ls->f[k];
        if (f->kind == KFAC_FACTOR_DIAG2X2) {
            memcpy(out, f->data, 3 * (size_t)f->dim * sizeof *out);
        } else {
            int rc = kfac_linalg_pack_upper(f->data, f->dim, out);
            if (rc) return rc;
        }
        out += kfac_factor_packed_len(f);
    }
    return 0;
}

/* Validate one layer's packed factors: finite, non-negative diagonals. */
static int s_validate_packed(const kfac_layer_stats_t *ls, const float *in, size_t in_len) {
    if (in_len != kfac_stats_layer_packed_len(ls)) {
        log_error("kfac_stats unpack: layer %d: %zu floats, expected %zu", ls->layer, in_len,
                  kfac_stats_layer_packed_len(ls));
        return -EINVAL;
    }
    for (int k = 0; k < ls->n_factors; k++) {
        const kfac_factor_t *f = &ls->f[k];
        size_t len = kfac_factor_packed_len(f);
        if (!kfac_linalg_all_finite(in, len)) {
            log_error("kfac_stats unpack: layer %d factor %d has NaN or Inf", ls->layer, k);
            return -EINVAL;
        }
        for (int i = 0; i < f->dim; i++) {
            int bad = f->kind == KFAC_FACTOR_DIAG2X2
                          ? (in[3 * i] < 0.0f || in[3 * i + 2] < 0.0f)
                          : in[kfac_linalg_packed_index(f->dim, i, i)] < 0.0f;
            if (bad) {
                log_error("kfac_stats unpack: layer %d factor %d has a negative second moment at %d",
                          ls->layer, k, i);
                return -EINVAL;
            }
        }
        in += len;
    }
    return 0;
}

static void s_unpack_valid(kfac_layer_stats_t *ls, const float *in, double n_samples) {
    for (int k = 0; k < ls->n_factors; k++) {
        kfac_factor_t *f = &ls->f[k];
        if (f->kind == KFAC_FACTOR_DIAG2X2)
            memcpy(f->data, in, 3 * (size_t)f->dim * sizeof *in);
        else
            kfac_linalg_unpack_upper(in, f->dim, f->data);
        f->n_samples = n_samples;
        f->n_updates = 1;
        in += kfac_factor_packed_len(f);
    }
}

int kfac_stats_layer_unpack(kfac_layer_stats_t *ls, const float *in, size_t in_len, double n_samples) {
    if (!ls || !in || !(n_samples >= 0.0)) return -EINVAL;
    int rc = s_validate_packed(ls, in, in_len);
    if (rc) return rc;
    s_unpack_valid(ls, in, n_samples);
    return 0;
}

size_t kfac_stats_packed_len(const kfac_stats_t *s) {
    size_t len = 0;
    if (!s) return 0;
    for (int j = 0; j < s->n_layers; j++) len += kfac_stats_layer_packed_len(&s->layers[j]);
    return len;
}

int kfac_stats_pack(const kfac_stats_t *s, float *out, size_t out_len) {
    if (!s || !out || out_len < kfac_stats_packed_len(s)) {
        log_error("kfac_stats_pack: output buffer too small");
        return -EINVAL;
    }
    for (int j = 0; j < s->n_layers; j++) {
        size_t len = kfac_stats_layer_packed_len(&s->layers[j]);
        int rc = kfac_stats_layer_pack(&s->layers[j], out, len);
        if (rc) return rc;
        out += len;
    }
    return 0;
}

int kfac_stats_unpack(kfac_stats_t *s, const float *in, size_t in_len, double n_samples) {
    if (!s || !in || !(n_samples >= 0.0)) return -EINVAL;
    if (in_len != kfac_stats_packed_len(s)) {
        log_error("kfac_stats_unpack: %zu floats, expected %zu", in_len, kfac_stats_packed_len(s));
        return -EINVAL;
    }
    const float *p = in;
    for (int j = 0; j < s->n_layers; j++) {
        size_t len = kfac_stats_layer_packed_len(&s->layers[j]);
        int rc = s_validate_packed(&s->layers[j], p, len);
        if (rc) return rc;
        p += len;
    }
    p = in;
    for (int j = 0; j < s->n_layers; j++) {
        s_unpack_valid(&s->layers[j], p, n_samples);
        p += kfac_stats_layer_packed_len(&s->layers[j]);
    }
    return 0;
}
