/* common/kfac/kfac_inverse.c — damped inverses and eigendecompositions of one
 * symmetric factor with LAPACKE, with retries, fallbacks and counters (see
 * kfac_inverse.h). float32, row-major, upper triangle authoritative.
 *
 * Layout trick: LAPACK is column-major, and a row-major n x n array viewed
 * column-major is its transpose. So the row-major UPPER triangle is the
 * column-major LOWER one, and every call below is LAPACK_COL_MAJOR on the
 * row-major array: no transposed copies are made. ssyevd uses uplo 'L' on
 * the upper triangle; the Cholesky path mirrors the factor and uses 'U' on
 * the row-major lower one (see s_try_cholesky for why). The
 * *_work entry points are used because the inputs are checked here already
 * (LAPACKE's own NaN scan would be a second pass) and the workspace is ours.
 *
 * Results are computed in the private workspace and swapped into the output
 * only when they passed every check, so a failed call leaves the output as
 * it was without copying it first. */
#include "common/kfac/kfac_inverse.h"

#include <cblas.h>
#include <errno.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/kfac/kfac_linalg.h"
#include "common/base/log.h"

struct kfac_inverse_ws {
    float *a;        /* (n, n) factorization scratch */
    float *b;        /* (n, n) second scratch: inverse rebuilt from eigenvectors */
    float *w;        /* (n) eigenvalues */
    float *lwork;    /* ssyevd float workspace */
    lapack_int *iwork;
    lapack_int n_lwork, n_iwork;
};

#define STAT_INC(st, field) \
    do { if (st) (st)->field++; } while (0)

static size_t s_nn(int n) { return (size_t)n * (size_t)n; }

static float *s_alloc_floats(size_t count) { return malloc(sizeof(float) * count); }

static void s_swap(float **x, float **y) {
    float *t = *x;
    *x = *y;
    *y = t;
}

/* Transpose the n x n row-major X in place. */
static void s_transpose_square(float *X, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            float *u = &X[(size_t)i * (size_t)n + (size_t)j];
            float *l = &X[(size_t)j * (size_t)n + (size_t)i];
            float t = *u;
            *u = *l;
            *l = t;
        }
}

/* True when the full n x n X is finite and its diagonal strictly positive:
 * both hold for the inverse of any symmetric positive definite matrix. */
static bool s_spd_inverse_plausible(const float *X, int n) {
    if (!kfac_linalg_all_finite(X, s_nn(n))) return false;
    for (int i = 0; i < n; i++)
        if (!(X[(size_t)i * (size_t)n + (size_t)i] > 0.0f)) return false;
    return true;
}

kfac_inverse_t *kfac_inverse_new(int n) {
    if (n <= 0 || n > 46340) { /* n*n must fit an int for LAPACK's lda*n products */
        log_error("kfac_inverse_new: bad dimension n=%d (need 1..46340)", n);
        return NULL;
    }
    kfac_inverse_t *inv = calloc(1, sizeof *inv);
    if (!inv) return NULL;
    inv->ws = calloc(1, sizeof *inv->ws);
    if (!inv->ws) {
        free(inv);
        return NULL;
    }
    inv->n = n;
    inv->method = KFAC_INV_CHOLESKY;
    inv->valid = false;
    return inv;
}

void kfac_inverse_trim(kfac_inverse_t *inv) {
    if (!inv || !inv->ws) return;
    kfac_inverse_ws_t *ws = inv->ws;
    free(ws->a);
    free(ws->b);
    free(ws->w);
    free(ws->lwork);
    free(ws->iwork);
    memset(ws, 0, sizeof *ws);
}

void kfac_inverse_free(kfac_inverse_t **p) {
    if (!p || !*p) return;
    kfac_inverse_t *inv = *p;
    kfac_inverse_trim(inv);
    free(inv->ws);
    free(inv->inv);
    free(inv->Q);
    free(inv->v);
    free(inv);
    *p = NULL;
}

/* Make sure *buf holds count floats (allocated lazily, kept for reuse). */
static int s_ensure(float **buf, size_t count) {
    if (*buf) return 0;
    *buf = s_alloc_floats(count);
    return *buf ? 0 : -ENOMEM;
}

/* Copy the row-major lower triangle of the n x n a onto the upper one. */
static void s_mirror_lower(float *a, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) a[(size_t)i * n + j] = a[(size_t)j * n + i];
}

/* ws->a <- (F + d I)^{-1} (full, symmetric). 0, -ENOMEM, or -1 when the
 * factorization failed or the result is implausible (counted in stats). */
static int s_try_cholesky(const float *F, int n, float d, kfac_inverse_ws_t *ws,
                          kfac_inverse_stats_t *st) {
    if (s_ensure(&ws->a, s_nn(n))) return -ENOMEM;
    float *a = ws->a;
    /* The factor's upper triangle is mirrored onto the lower one, which is
     * what LAPACK works on here: uplo 'U' column-major is the row-major
     * lower triangle. Not 'L': with OpenBLAS 0.3.21's generic (Prescott)
     * kernels and one thread, spotrf 'L' crashes in strsm_kernel_RT for most
     * odd n >= 133 (bench/RESULTS.md); the 'U' path does not. */
    memcpy(a, F, sizeof(float) * s_nn(n));
    kfac_linalg_symmetrize_upper(a, n);
    kfac_linalg_add_diagonal(a, n, d);
    /* Cholesky F + dI = U^T U; column-major upper = row-major lower of a. */
    lapack_int info = LAPACKE_spotrf_work(LAPACK_COL_MAJOR, 'U', n, a, n);
    if (info == 0)
        /* (U^T U)^{-1} from the factor, written over the same (upper, col-major) triangle. */
        info = LAPACKE_spotri_work(LAPACK_COL_MAJOR, 'U', n, a, n);
    if (info != 0) {
        STAT_INC(st, n_cholesky_failures);
        log_debug("kfac_inverse: Cholesky failed (n=%d, damping=%g, info=%d)", n, (double)d,
                  (int)info);
        return -1;
    }
    s_mirror_lower(a, n);
    if (!s_spd_inverse_plausible(a, n)) {
        STAT_INC(st, n_nonfinite_outputs);
        log_debug("kfac_inverse: Cholesky inverse not finite/positive (n=%d, damping=%g)", n,
                  (double)d);
        return -1;
    }
    return 0;
}

/* ws->a <- eigenvectors, one per ROW (LAPACK's column-major output seen
 * row-major), ws->w <- eigenvalues ascending, clamped at >= 0. 0, -ENOMEM,
 * or -1 on failure (counted). */
static int s_try_eigen(const float *F, int n, kfac_inverse_ws_t *ws,
                       kfac_inverse_stats_t *st) {
    if (s_ensure(&ws->a, s_nn(n)) || s_ensure(&ws->w, (size_t)n)) return -ENOMEM;
    if (!ws->lwork) {
        float wq = 0;
        lapack_int iq = 0;
        /* Workspace query (lwork = liwork = -1): optimal sizes for n. */
        lapack_int info = LAPACKE_ssyevd_work(LAPACK_COL_MAJOR, 'V', 'L', n, ws->a, n, ws->w,
                                              &wq, -1, &iq, -1);
        if (info != 0) {
            STAT_INC(st, n_eigen_failures);
            return -1;
        }
        lapack_int nl = (lapack_int)wq + 1, ni = iq + 1;
        ws->lwork = s_alloc_floats((size_t)nl);
        ws->iwork = malloc(sizeof(lapack_int) * (size_t)ni);
        if (!ws->lwork || !ws->iwork) {
            free(ws->lwork);
            free(ws->iwork);
            ws->lwork = NULL;
            ws->iwork = NULL;
            return -ENOMEM;
        }
        ws->n_lwork = nl;
        ws->n_iwork = ni;
    }
    float *a = ws->a;
    memcpy(a, F, sizeof(float) * s_nn(n));
    /* F = Q diag(w) Q^T, divide and conquer; reads the column-major lower =
     * row-major upper triangle; Q overwrites a column-major (= rows here). */
    lapack_int info = LAPACKE_ssyevd_work(LAPACK_COL_MAJOR, 'V', 'L', n, a, n, ws->w,
                                          ws->lwork, ws->n_lwork, ws->iwork, ws->n_iwork);
    if (info != 0) {
        STAT_INC(st, n_eigen_failures);
        log_debug("kfac_inverse: ssyevd failed (n=%d, info=%d)", n, (int)info);
        return -1;
    }
    if (!kfac_linalg_all_finite(ws->w, (size_t)n) || !kfac_linalg_all_finite(a, s_nn(n))) {
        STAT_INC(st, n_nonfinite_outputs);
        return -1;
    }
    bool clamped = false;
    for (int i = 0; i < n; i++)
        if (ws->w[i] < 0.0f) {
            ws->w[i] = 0.0f;
            clamped = true;
        }
    if (clamped) STAT_INC(st, n_eigen_clamped);
    return 0;
}

/* After s_try_eigen: ws->b <- Q diag(1 / (w + d)) Q^T (full), d > 0. */
static int s_inverse_from_eigen(int n, float d, kfac_inverse_ws_t *ws,
                                kfac_inverse_stats_t *st) {
    if (s_ensure(&ws->b, s_nn(n))) return -ENOMEM;
    float *R = ws->a; /* row j = eigenvector j */
    for (int j = 0; j < n; j++) {
        float s = 1.0f / sqrtf(ws->w[j] + d);
        cblas_sscal(n, s, R + (size_t)j * (size_t)n, 1); /* row j *= (w_j + d)^{-1/2} */
    }
    /* b (upper) = R^T R = sum_j q_j q_j^T / (w_j + d); row-major, R read transposed. */
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, n, n, 1.0f, R, n, 0.0f, ws->b, n);
    kfac_linalg_symmetrize_upper(ws->b, n);
    if (!s_spd_inverse_plausible(ws->b, n)) {
        STAT_INC(st, n_nonfinite_outputs);
        return -1;
    }
    return 0;
}

static void s_commit_cholesky(kfac_inverse_t *out, float **buf, float d) {
    s_swap(&out->inv, buf);
    out->method = KFAC_INV_CHOLESKY;
    out->damping_used = d;
    out->valid = true;
    out->n_updates++;
}

static void s_commit_eigen(kfac_inverse_t *out, float d) {
    kfac_inverse_ws_t *ws = out->ws;
    s_transpose_square(ws->a, out->n); /* rows = vectors -> columns = vectors */
    s_swap(&out->Q, &ws->a);
    s_swap(&out->v, &ws->w);
    out->method = KFAC_INV_EIGEN;
    out->damping_used = d;
    out->valid = true;
    out->n_updates++;
}

/* Starting damping for retries when the caller asked for none. */
static float s_retry_floor(const float *F, int n) {
    double m = kfac_linalg_trace(F, n) / n;
    float f = (float)(1e-6 * m);
    return (isfinite(f) && f > 0.0f) ? f : 1e-6f;
}

/* Cholesky with d, then 10x, 100x, 1000x (from the floor when d == 0). */
static int s_cholesky_chain(const float *F, int n, float d, kfac_inverse_t *out,
                            kfac_inverse_stats_t *st, bool *first_try) {
    int rc = s_try_cholesky(F, n, d, out->ws, st);
    if (rc == 0) {
        s_commit_cholesky(out, &out->ws->a, d);
        return 0;
    }
    if (rc == -ENOMEM) return rc;
    *first_try = false;
    float base = d > 0.0f ? d : s_retry_floor(F, n);
    float dk = base;
    for (int k = 1; k <= KFAC_INVERSE_MAX_ESCALATIONS; k++) {
        dk *= 10.0f;
        if (!isfinite(dk)) break;
        STAT_INC(st, n_damping_escalations);
        rc = s_try_cholesky(F, n, dk, out->ws, st);
        if (rc == 0) {
            log_warn("kfac_inverse: n=%d Cholesky needed damping %g instead of %g", n,
                     (double)dk, (double)d);
            s_commit_cholesky(out, &out->ws->a, dk);
            return 0;
        }
        if (rc == -ENOMEM) return rc;
    }
    return -ERANGE;
}

int kfac_inverse_compute(const float *F, int n, float damping, kfac_inv_method_t method,
                         kfac_inverse_t *out, kfac_inverse_stats_t *stats) {
    STAT_INC(stats, n_calls);
    if (!F || !out || !out->ws || n <= 0 || n != out->n || !isfinite(damping) ||
        damping < 0.0f || (method != KFAC_INV_CHOLESKY && method != KFAC_INV_EIGEN)) {
        STAT_INC(stats, n_rejected_args);
        STAT_INC(stats, n_failures);
        log_error("kfac_inverse_compute: bad arguments (n=%d, holder n=%d, damping=%g, "
                  "method=%d)", n, out ? out->n : -1, (double)damping, (int)method);
        return -EINVAL;
    }
    if (!kfac_linalg_upper_finite(F, n)) {
        STAT_INC(stats, n_rejected_nonfinite);
        STAT_INC(stats, n_failures);
        log_warn("kfac_inverse_compute: factor (n=%d) has NaN/Inf; keeping the last inverse", n);
        return -EDOM;
    }
    bool first_try = true;
    int rc;
    if (method == KFAC_INV_CHOLESKY) {
        rc = s_cholesky_chain(F, n, damping, out, stats, &first_try);
        if (rc == 0 || rc == -ENOMEM) goto done;
        /* Other method: clamp the spectrum, then invert with positive damping. */
        STAT_INC(stats, n_method_fallbacks);
        float d = damping > 0.0f ? damping : s_retry_floor(F, n);
        rc = s_try_eigen(F, n, out->ws, stats);
        if (rc == 0) rc = s_inverse_from_eigen(n, d, out->ws, stats);
        if (rc == 0) {
            log_warn("kfac_inverse: n=%d Cholesky failed; inverse from the eigendecomposition", n);
            s_commit_cholesky(out, &out->ws->b, d);
            goto done;
        }
        if (rc != -ENOMEM) rc = -ERANGE;
    } else {
        rc = s_try_eigen(F, n, out->ws, stats);
        if (rc == 0) {
            s_commit_eigen(out, damping);
            goto done;
        }
        if (rc == -ENOMEM) goto done;
        /* ssyevd's failures are convergence failures, which damping does not
         * cure: go straight to the Cholesky form with this damping. */
        first_try = false;
        STAT_INC(stats, n_method_fallbacks);
        rc = s_cholesky_chain(F, n, damping, out, stats, &first_try);
        if (rc == 0) log_warn("kfac_inverse: n=%d eigendecomposition failed; Cholesky form", n);
    }
done:
    if (rc == 0) {
        STAT_INC(stats, n_ok);
        if (first_try) STAT_INC(stats, n_ok_first_try);
        return 0;
    }
    STAT_INC(stats, n_failures);
    log_warn("kfac_inverse_compute: n=%d %s inverse failed (%s); keeping the last inverse", n,
             kfac_inverse_method_name(method), rc == -ENOMEM ? "out of memory" : "all retries");
    return rc;
}

int kfac_inverse_load_cholesky(kfac_inverse_t *out, const float *inv_full, float damping) {
    if (!out || !out->ws || !inv_full || !isfinite(damping) || damping < 0.0f) {
        log_error("kfac_inverse_load_cholesky: bad arguments");
        return -EINVAL;
    }
    int n = out->n;
    if (s_ensure(&out->ws->a, s_nn(n))) return -ENOMEM;
    memcpy(out->ws->a, inv_full, sizeof(float) * s_nn(n));
    kfac_linalg_symmetrize_upper(out->ws->a, n);
    if (!s_spd_inverse_plausible(out->ws->a, n)) {
        log_error("kfac_inverse_load_cholesky: inverse (n=%d) has NaN/Inf or a non-positive "
                  "diagonal; rejected", n);
        return -EDOM;
    }
    s_commit_cholesky(out, &out->ws->a, damping);
    return 0;
}

int kfac_inverse_load_eigen(kfac_inverse_t *out, const float *Q, const float *v, float damping) {
    if (!out || !out->ws || !Q || !v || !isfinite(damping) || damping < 0.0f) {
        log_error("kfac_inverse_load_eigen: bad arguments");
        return -EINVAL;
    }
    int n = out->n;
    if (!kfac_linalg_all_finite(Q, s_nn(n)) || !kfac_linalg_all_finite(v, (size_t)n)) {
        log_error("kfac_inverse_load_eigen: decomposition (n=%d) has NaN/Inf; rejected", n);
        return -EDOM;
    }
    kfac_inverse_ws_t *ws = out->ws;
    if (s_ensure(&ws->a, s_nn(n)) || s_ensure(&ws->w, (size_t)n)) return -ENOMEM;
    /* Stored transposed (rows = vectors) because s_commit_eigen transposes. */
    memcpy(ws->a, Q, sizeof(float) * s_nn(n));
    s_transpose_square(ws->a, n);
    for (int i = 0; i < n; i++) ws->w[i] = v[i] < 0.0f ? 0.0f : v[i];
    s_commit_eigen(out, damping);
    return 0;
}

int kfac_inverse_copy(kfac_inverse_t *dst, const kfac_inverse_t *src) {
    if (!dst || !src || dst->n != src->n) {
        log_error("kfac_inverse_copy: bad arguments");
        return -EINVAL;
    }
    if (!src->valid) return -ENODATA;
    int n = src->n;
    if (src->method == KFAC_INV_CHOLESKY) {
        if (s_ensure(&dst->inv, s_nn(n))) return -ENOMEM;
        memcpy(dst->inv, src->inv, sizeof(float) * s_nn(n));
    } else {
        if (s_ensure(&dst->Q, s_nn(n)) || s_ensure(&dst->v, (size_t)n)) return -ENOMEM;
        memcpy(dst->Q, src->Q, sizeof(float) * s_nn(n));
        memcpy(dst->v, src->v, sizeof(float) * (size_t)n);
    }
    dst->method = src->method;
    dst->damping_used = src->damping_used;
    dst->valid = true;
    dst->n_updates++;
    return 0;
}

const char *kfac_inverse_method_name(kfac_inv_method_t m) {
    switch (m) {
    case KFAC_INV_CHOLESKY: return "cholesky";
    case KFAC_INV_EIGEN: return "eigen";
    }
    return "unknown";
}

int kfac_inverse_method_parse(const char *s, kfac_inv_method_t *out) {
    if (!s || !out) return -EINVAL;
    if (strcmp(s, "cholesky") == 0) {
        *out = KFAC_INV_CHOLESKY;
        return 0;
    }
    if (strcmp(s, "eigen") == 0) {
        *out = KFAC_INV_EIGEN;
        return 0;
    }
    return -EINVAL;
}
