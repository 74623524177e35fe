/* common/kfac/kfac_precond.c — Kronecker, eigen-damped, doubly-factored, BatchNorm
 * 2x2 and identity preconditioning (see kfac_precond.h). float32, row-major.
 *
 * Every Kronecker case is one routine over a 3-way tensor X (d0, d1, d2),
 * row-major, element (i0, i1, i2) at (i0*d1 + i1)*d2 + i2, with at most one
 * factor per mode: mode 0 = output rows (G), mode 1 = channels (Psi), mode 2
 * = the fastest index (A for fc/conv with d1 = 1, K for doubly-factored).
 * "Applying M along mode m" maps X[.., j, ..] to sum_j op(M)[i][j] X[.., j, ..].
 * The steps ping-pong between work and U, so V is read only by the first. */
#include "common/kfac/kfac_precond.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/kfac/kfac_linalg.h"
#include "common/nn/nn_par.h"
#include "common/base/log.h"

size_t kfac_precond_work_len(int n_out, int n_in) {
    if (n_out <= 0 || n_in <= 0) return 0;
    return (size_t)n_out * (size_t)n_in;
}

/* Slabs of mode 1 with fewer columns than PRECOND_SLAB_BATCH_BELOW are
 * taken together by one sgemm (s_apply_slabs), enough of them for about
 * PRECOND_SLAB_COLS columns. Measured on one core (OpenBLAS 0.3.21,
 * SkylakeX kernels; bench/RESULTS.md): slabs of 9 columns gain 8%, of 4
 * nothing, and the wide model's 64 x 49 slabs lose 3-10% to the copies,
 * since a product of 49 columns already runs near the sgemm rate. */
#define PRECOND_SLAB_COLS 512
#define PRECOND_SLAB_BATCH_BELOW 32

/* Y_s = op(M) X_s for the slabs s in [lo, hi) of X (d0, d1, d2), M (d1,
 * d1). Slabs with few columns (d2 < PRECOND_SLAB_BATCH_BELOW) go b at a
 * time through one sgemm: S (d1, b d2) with S[j, q d2 + t] = X[s + q, j,
 * t], T = op(M) S, and back, Y[s + q, i, t] = T[i, q d2 + t]; the copies
 * stay in the cache, and one call replaces b calls whose fixed cost
 * outweighs their few columns. Each element of Y is the same sum over j
 * either way. */
static void s_apply_slabs(const float *M, bool trans, const int d[3], const float *X, float *Y, int lo, int hi) {
    const int n = d[1], d2 = d[2];
    const size_t slab = (size_t)d[1] * (size_t)d[2];
    int b = d2 >= PRECOND_SLAB_BATCH_BELOW ? 1 : (PRECOND_SLAB_COLS + d2 - 1) / d2;
    if (b > hi - lo) b = hi - lo;
    float *S = b > 1 ? malloc(sizeof(float) * 2 * slab * (size_t)b) : NULL;
    if (!S) b = 1; /* one slab at a time, straight from X into Y */
    for (int s = lo; s < hi; s += b) {
        const int nb = s + b <= hi ? b : hi - s;
        if (nb == 1) {
            /* Y_s (d1, d2) = op(M) (d1, d1) * X_s (d1, d2), slab s; row-major. */
            cblas_sgemm(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, CblasNoTrans, n, d2, n, 1.0f, M, n,
                        X + (size_t)s * slab, d2, 0.0f, Y + (size_t)s * slab, d2);
            continue;
        }
        float *T = S + slab * (size_t)b;
        const int ld = nb * d2;
        for (int q = 0; q < nb; q++)
            for (int j = 0; j < n; j++)
                memcpy(S + (size_t)j * ld + (size_t)q * d2, X + (size_t)(s + q) * slab + (size_t)j * d2,
                       sizeof(float) * (size_t)d2);
        /* T (d1, nb d2) = op(M) (d1, d1) * S (d1, nb d2); row-major. */
        cblas_sgemm(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, CblasNoTrans, n, ld, n, 1.0f, M, n, S, ld,
                    0.0f, T, ld);
        for (int q = 0; q < nb; q++)
            for (int i = 0; i < n; i++)
                memcpy(Y + (size_t)(s + q) * slab + (size_t)i * d2, T + (size_t)i * ld + (size_t)q * d2,
                       sizeof(float) * (size_t)d2);
    }
    free(S);
}

/* Y = X applied with op(M) along mode m; M is n x n row-major with n = d[m];
 * trans selects op(M) = M^T. X and Y distinct. Only the slice [lo, hi) of
 * one index is computed, so that parts of a pool can share one
 * application: with by_m false, the free index (columns for mode 0, rows
 * for mode 2, slabs for mode 1), each part then reading all of M; with
 * by_m true (modes 0 and 2), the index of op(M)'s rows, i.e. the output
 * rows for mode 0 and the output columns for mode 2, each part then
 * reading its own rows of op(M) and all of X. */
static void s_apply_mode_part(const float *M, bool trans, int m, const int d[3], const float *X,
                              float *Y, int lo, int hi, bool by_m) {
    int n = d[m];
    if (hi <= lo) return;
    if (m == 0 && !by_m) {
        int cols = d[1] * d[2];
        /* Y[:, lo:hi] (d0, hi-lo) = op(M) (d0, d0) * X[:, lo:hi]; row-major. */
        cblas_sgemm(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, CblasNoTrans, n, hi - lo, n,
                    1.0f, M, n, X + lo, cols, 0.0f, Y + lo, cols);
    } else if (m == 0) {
        int cols = d[1] * d[2];
        /* Y[lo:hi, :] (hi-lo, cols) = op(M)[lo:hi, :] (hi-lo, d0) * X (d0, cols); row-major.
         * op(M) = M: rows lo..hi of M; op(M) = M^T: columns lo..hi of M, transposed. */
        cblas_sgemm(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, CblasNoTrans, hi - lo, cols, n, 1.0f,
                    trans ? M + lo : M + (size_t)lo * n, n, X, cols, 0.0f, Y + (size_t)lo * cols, cols);
    } else if (m == 2 && !by_m) {
        /* Y[lo:hi] (hi-lo, d2) = X[lo:hi] (hi-lo, d2) * op(M)^T; row-major. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, trans ? CblasNoTrans : CblasTrans, hi - lo, n, n,
                    1.0f, X + (size_t)lo * n, n, M, n, 0.0f, Y + (size_t)lo * n, n);
    } else if (m == 2) {
        int rows = d[0] * d[1];
        /* Y[:, lo:hi] (rows, hi-lo) = X (rows, d2) * op(M)^T[:, lo:hi]; row-major.
         * op(M) = M: op(M)^T[:, lo:hi] = M[lo:hi, :]^T; op(M) = M^T: M[:, lo:hi]. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, trans ? CblasNoTrans : CblasTrans, rows, hi - lo, n, 1.0f, X, n,
                    trans ? M + lo : M + (size_t)lo * n, n, 0.0f, Y + lo, n);
    } else {
        s_apply_slabs(M, trans, d, X, Y, lo, hi);
    }
}

/* The extent of the index that s_apply_mode_part slices. */
static int s_split_extent(int m, const int d[3], bool by_m) {
    if (by_m) return d[m];
    return m == 0 ? d[1] * d[2] : m == 2 ? d[0] * d[1] : d[0];
}

/* Split modes 0 and 2 by op(M)'s rows when M is larger than X: each part
 * then streams 1/p of M and all of X (n^2/p + len floats) instead of all
 * of M and 1/p of X (n^2 + len/p). For fc1 of the demo model A^-1 is 1569
 * x 1569 (9.8 MB) against a gradient of 128 x 1569. */
static bool s_split_by_m(int m, const int d[3]) {
    if (m == 1) return false;
    double len = (double)d[0] * d[1] * d[2];
    return (double)d[m] * d[m] > len;
}

typedef struct {
    const float *M;
    bool trans;
    int m;
    const int *d;
    const float *X;
    float *Y;
    bool by_m;
} apply_job_t;

static void s_apply_part(void *arg, int part, int n_parts) {
    const apply_job_t *j = arg;
    int lo, hi;
    int ext = s_split_extent(j->m, j->d, j->by_m);
    if (j->by_m && j->m == 2) {
        /* output columns: whole cache lines of 16 floats per part, so that
         * no two parts write the same line of a row */
        int lines = (ext + 15) / 16;
        nn_par_range(lines, part, n_parts, &lo, &hi);
        lo *= 16;
        hi = hi * 16 < ext ? hi * 16 : ext;
    } else {
        nn_par_range(ext, part, n_parts, &lo, &hi);
    }
    s_apply_mode_part(j->M, j->trans, j->m, j->d, j->X, j->Y, lo, hi, j->by_m);
}

/* Below this many multiply-adds one thread does the whole application: the
 * pool's hand-off costs more than it saves. */
#define PRECOND_PAR_MIN_MACS (1L << 20)

/* Y = X applied with op(M) along mode m, split over the pool's threads
 * (each part one slice, single-threaded BLAS inside it); par NULL: serial. */
static void s_apply_mode(const float *M, bool trans, int m, const int d[3], const float *X,
                         float *Y, nn_par_t *par) {
    double macs = (double)d[0] * d[1] * d[2] * d[m];
    if (nn_par_threads(par) > 1 && macs >= (double)PRECOND_PAR_MIN_MACS) {
        apply_job_t j = {M, trans, m, d, X, Y, s_split_by_m(m, d)};
        nn_par_run(par, s_apply_part, &j);
        return;
    }
    s_apply_mode_part(M, trans, m, d, X, Y, 0, s_split_extent(m, d, false), false);
}

/* X[.., i, ..] *= s[i] along mode m, in place. */
static void s_scale_mode(float *X, const int d[3], int m, const float *s) {
    size_t idx = 0;
    for (int i0 = 0; i0 < d[0]; i0++)
        for (int i1 = 0; i1 < d[1]; i1++) {
            float *row = X + idx;
            if (m == 2) {
                for (int i2 = 0; i2 < d[2]; i2++) row[i2] *= s[i2];
            } else {
                float f = s[m == 0 ? i0 : i1];
                for (int i2 = 0; i2 < d[2]; i2++) row[i2] *= f;
            }
            idx += (size_t)d[2];
        }
}

/* X[i0, i1, i2] /= v0[i0] v1[i1] v2[i2] + lambda, with absent modes as 1. */
static void s_divide_eigen(float *X, const int d[3], const float *v0, const float *v1,
                           const float *v2, float lambda) {
    size_t idx = 0;
    for (int i0 = 0; i0 < d[0]; i0++) {
        float a = v0 ? v0[i0] : 1.0f;
        for (int i1 = 0; i1 < d[1]; i1++) {
            float ab = a * (v1 ? v1[i1] : 1.0f);
            float *row = X + idx;
            for (int i2 = 0; i2 < d[2]; i2++) row[i2] /= ab * (v2 ? v2[i2] : 1.0f) + lambda;
            idx += (size_t)d[2];
        }
    }
}

/* A factor in EIGEN form applied on its own needs v + damping_used > 0. */
static bool s_eigen_alone_ok(const kfac_inverse_t *f) {
    for (int i = 0; i < f->n; i++)
        if (!(f->v[i] + f->damping_used > 0.0f)) return false;
    return true;
}

/* The shared engine. fac[m] is the factor for mode m or NULL (then d[m] = 1,
 * unless separate). separate: the factors are those of one side of a
 * Kronecker product whose other side is applied elsewhere (the low-rank
 * path): a NULL factor leaves its mode as it is (any d[m]), and every
 * factor is applied on its own (an EIGEN factor as Q diag(1 / (v +
 * damping_used)) Q^T), since the joint eigen damping does not factor. */
static int s_precond_modes(const kfac_inverse_t *const fac[3], const int d[3], float lambda,
                           const float *V, float *U, float *work, nn_par_t *par, const char *who, bool separate) {
    for (int m = 0; m < 3; m++) {
        if (d[m] <= 0 || (!fac[m] && d[m] != 1 && !separate) || (fac[m] && fac[m]->n != d[m])) {
            log_error("%s: factor %d has n=%d but the gradient needs %d", who, m,
                      fac[m] ? fac[m]->n : 1, d[m]);
            return -EINVAL;
        }
    }
    if (!V || !U || !isfinite(lambda) || lambda < 0.0f) {
        log_error("%s: bad arguments (lambda=%g)", who, (double)lambda);
        return -EINVAL;
    }
    bool all_eigen = true;
    for (int m = 0; m < 3; m++) {
        if (!fac[m]) continue;
        if (!fac[m]->valid) return -ENODATA;
        if (fac[m]->method != KFAC_INV_EIGEN) all_eigen = false;
    }
    if (separate) all_eigen = false;
    if (all_eigen && !(lambda > 0.0f)) {
        log_error("%s: eigen-form damping needs lambda > 0 (got %g)", who, (double)lambda);
        return -EINVAL;
    }
    if (!all_eigen)
        for (int m = 0; m < 3; m++)
            if (fac[m] && fac[m]->method == KFAC_INV_EIGEN && !s_eigen_alone_ok(fac[m])) {
                log_error("%s: eigen-form factor %d has a zero eigenvalue and no damping", who, m);
                return -EINVAL;
            }

    size_t len = (size_t)d[0] * (size_t)d[1] * (size_t)d[2];
    float *own = NULL, *scale = NULL;
    int rc = 0;
    if (!work) {
        own = malloc(sizeof(float) * len);
        if (!own) return -ENOMEM;
        work = own;
    }
    bool any_eigen = false; /* mixed forms: an EIGEN factor among CHOLESKY ones needs a row of scales */
    for (int m = 0; m < 3; m++) any_eigen = any_eigen || (fac[m] && fac[m]->method == KFAC_INV_EIGEN);
    if (!all_eigen && any_eigen) {
        /* d[m] of a mode without a factor may be large (separate): sized by the factors */
        int nmax = 1;
        for (int m = 0; m < 3; m++)
            if (fac[m] && fac[m]->n > nmax) nmax = fac[m]->n;
        scale = malloc(sizeof(float) * (size_t)nmax);
        if (!scale) {
            rc = -ENOMEM;
            goto cleanup;
        }
    }

    /* Ping-pong: the first step reads V and writes work, so U may alias V. */
    const float *cur = V;
    float *bufs[2] = {work, U};
    int n_steps = 0;
    for (int m = 0; m < 3; m++)
        if (fac[m]) n_steps += (all_eigen || fac[m]->method == KFAC_INV_EIGEN) ? 2 : 1;
    /* Land the last step in U: start in U for an odd count unless U is V. */
    int next = (n_steps % 2 == 1 && (const float *)U != V) ? 1 : 0;
#define STEP(M, trans, m)                                      \
    do {                                                       \
        s_apply_mode((M), (trans), (m), d, cur, bufs[next], par); \
        cur = bufs[next];                                      \
        next ^= 1;                                             \
    } while (0)

    /* Modes are visited fastest first (K or A, then Psi, then G): the order
     * of Ba et al. Eq. 9. The factors act on different modes, so any order
     * gives the same result; the flop count is the same too. */
    if (all_eigen) {
        for (int m = 2; m >= 0; m--)
            if (fac[m]) STEP(fac[m]->Q, true, m); /* rotate into the eigenbasis: Q^T */
        s_divide_eigen((float *)cur, d, fac[0] ? fac[0]->v : NULL, fac[1] ? fac[1]->v : NULL,
                       fac[2] ? fac[2]->v : NULL, lambda);
        for (int m = 2; m >= 0; m--)
            if (fac[m]) STEP(fac[m]->Q, false, m); /* and back: Q */
    } else {
        for (int m = 2; m >= 0; m--) {
            const kfac_inverse_t *f = fac[m];
            if (!f) continue;
            if (f->method == KFAC_INV_CHOLESKY) {
                STEP(f->inv, false, m);
            } else {
                STEP(f->Q, true, m);
                for (int i = 0; i < f->n; i++) scale[i] = 1.0f / (f->v[i] + f->damping_used);
                s_scale_mode((float *)cur, d, m, scale);
                STEP(f->Q, false, m);
            }
        }
    }
#undef STEP
    if (cur != U) memcpy(U, cur, sizeof(float) * len);
    if (!kfac_linalg_all_finite(U, len)) {
        log_warn("%s: preconditioned gradient is not finite", who);
        rc = -ERANGE;
    }
cleanup:
    free(own);
    free(scale);
    return rc;
}

int kfac_precond_kron(const kfac_inverse_t *Ainv, const kfac_inverse_t *Ginv, float lambda,
                      const float *V, int n_out, int n_in, float *U, float *work, nn_par_t *par) {
    if (!Ainv || !Ginv || n_out <= 0 || n_in <= 0) {
        log_error("kfac_precond_kron: bad arguments (n_out=%d, n_in=%d)", n_out, n_in);
        return -EINVAL;
    }
    const kfac_inverse_t *fac[3] = {Ginv, NULL, Ainv};
    const int d[3] = {n_out, 1, n_in};
    return s_precond_modes(fac, d, lambda, V, U, work, par, "kfac_precond_kron", false);
}

int kfac_precond_kron3(const kfac_inverse_t *Kinv, const kfac_inverse_t *Psiinv,
                       const kfac_inverse_t *Ginv, float lambda, const float *V, int n_out,
                       int n_c, int n_t, float *U, float *work, nn_par_t *par) {
    if (!Kinv || !Psiinv || !Ginv || n_out <= 0 || n_c <= 0 || n_t <= 0) {
        log_error("kfac_precond_kron3: bad arguments (n_out=%d, n_c=%d, n_t=%d)", n_out, n_c,
                  n_t);
        return -EINVAL;
    }
    const kfac_inverse_t *fac[3] = {Ginv, Psiinv, Kinv};
    const int d[3] = {n_out, n_c, n_t};
    return s_precond_modes(fac, d, lambda, V, U, work, par, "kfac_precond_kron3", false);
}

/* Every factor of a layer in the EIGEN form: the damping is that of the
 * whole product, which does not factor (kfac_precond.h). */
static bool s_all_eigen(const kfac_inverse_t *const *f, int n) {
    for (int i = 0; i < n; i++)
        if (f[i]->method != KFAC_INV_EIGEN) return false;
    return true;
}

int kfac_precond_kron_lowrank(const kfac_inverse_t *Ainv, const kfac_inverse_t *Ginv, const float *D,
                              const float *X, int n_rows, int n_out, int n_in, float *Pt, float *Q, float *work,
                              nn_par_t *par) {
    if (!Ainv || !Ginv || !D || !X || !Pt || !Q || !work || n_rows <= 0 || n_out <= 0 || n_in <= 0) {
        log_error("kfac_precond_kron_lowrank: bad arguments (n_rows=%d, n_out=%d, n_in=%d)", n_rows, n_out, n_in);
        return -EINVAL;
    }
    if (!Ainv->valid || !Ginv->valid) return -ENODATA;
    const kfac_inverse_t *all[2] = {Ainv, Ginv};
    if (s_all_eigen(all, 2)) return -ENOTSUP;
    /* Pt (n_rows, n_out) = D G^-1: G along the last mode of (n_rows, 1, n_out). */
    const kfac_inverse_t *fg[3] = {NULL, NULL, Ginv};
    const int dg[3] = {n_rows, 1, n_out};
    int rc = s_precond_modes(fg, dg, 0.0f, D, Pt, work, par, "kfac_precond_kron_lowrank", true);
    if (rc) return rc;
    /* Q (n_rows, n_in) = X A^-1. */
    const kfac_inverse_t *fa[3] = {NULL, NULL, Ainv};
    const int da[3] = {n_rows, 1, n_in};
    return s_precond_modes(fa, da, 0.0f, X, Q, work, par, "kfac_precond_kron_lowrank", true);
}

int kfac_precond_kron3_lowrank(const kfac_inverse_t *Kinv, const kfac_inverse_t *Psiinv,
                               const kfac_inverse_t *Ginv, const float *D, const float *X, int n_rows, int n_out,
                               int n_c, int n_t, float *Pt, float *Q, float *work, nn_par_t *par) {
    if (!Kinv || !Psiinv || !Ginv || !D || !X || !Pt || !Q || !work || n_rows <= 0 || n_out <= 0 || n_c <= 0 ||
        n_t <= 0) {
        log_error("kfac_precond_kron3_lowrank: bad arguments (n_rows=%d, n_out=%d, n_c=%d, n_t=%d)", n_rows, n_out,
                  n_c, n_t);
        return -EINVAL;
    }
    if (!Kinv->valid || !Psiinv->valid || !Ginv->valid) return -ENODATA;
    const kfac_inverse_t *all[3] = {Kinv, Psiinv, Ginv};
    if (s_all_eigen(all, 3)) return -ENOTSUP;
    const kfac_inverse_t *fg[3] = {NULL, NULL, Ginv};
    const int dg[3] = {n_rows, 1, n_out};
    int rc = s_precond_modes(fg, dg, 0.0f, D, Pt, work, par, "kfac_precond_kron3_lowrank", true);
    if (rc) return rc;
    /* Q: each row of X as (n_c, n_t) -> Psi^-1 X_r K^-1: modes 1 and 2 of (n_rows, n_c, n_t). */
    const kfac_inverse_t *fx[3] = {NULL, Psiinv, Kinv};
    const int dx[3] = {n_rows, n_c, n_t};
    return s_precond_modes(fx, dx, 0.0f, X, Q, work, par, "kfac_precond_kron3_lowrank", true);
}

typedef struct {
    const float *Pt, *Q;
    int n_rows, n_out, n_in, ldu;
    float *U;
} form_job_t;

static void s_form_part(void *arg, int part, int n_parts) {
    const form_job_t *j = arg;
    int lo, hi;
    nn_par_range(j->n_out, part, n_parts, &lo, &hi);
    if (hi <= lo) return;
    /* U[lo:hi] (hi-lo, n_in) = Pt[:, lo:hi]^T (hi-lo, n_rows) Q (n_rows, n_in); row-major. */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, hi - lo, j->n_in, j->n_rows, 1.0f, j->Pt + lo, j->n_out,
                j->Q, j->n_in, 0.0f, j->U + (size_t)lo * j->ldu, j->ldu);
}

int kfac_precond_lowrank_form(const float *Pt, const float *Q, int n_rows, int n_out, int n_in, float *U, int ldu,
                              nn_par_t *par) {
    if (!Pt || !Q || !U || n_rows <= 0 || n_out <= 0 || n_in <= 0 || ldu < n_in) return -EINVAL;
    form_job_t j = {Pt, Q, n_rows, n_out, n_in, ldu, U};
    double macs = (double)n_rows * n_out * n_in;
    if (nn_par_threads(par) > 1 && macs >= (double)PRECOND_PAR_MIN_MACS)
        nn_par_run(par, s_form_part, &j);
    else
        s_form_part(&j, 0, 1);
    for (int o = 0; o < n_out; o++)
        if (!kfac_linalg_all_finite(U + (size_t)o * ldu, (size_t)n_in)) return -ERANGE;
    return 0;
}

int kfac_precond_block(const kfac_inverse_t *inv, float lambda, const float *x, float *y, float *work) {
    if (!inv || !x || !y || !isfinite(lambda) || lambda < 0.0f) {
        log_error("kfac_precond_block: bad arguments");
        return -EINVAL;
    }
    if (!inv->valid) return -ENODATA;
    int n = inv->n;
    float *own = work ? NULL : malloc(sizeof(float) * (size_t)n);
    float *t = work ? work : own;
    if (!t) return -ENOMEM;
    int rc = 0;
    if (inv->method == KFAC_INV_CHOLESKY) {
        /* t = (F + dI)^{-1} x; inv is full symmetric row-major. */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, n, 1.0f, inv->inv, n, x, 1, 0.0f, t, 1);
        memcpy(y, t, sizeof(float) * (size_t)n);
    } else {
        for (int i = 0; i < n; i++)
            if (!(inv->v[i] + lambda > 0.0f)) {
                log_error("kfac_precond_block: zero eigenvalue and lambda = 0");
                rc = -EINVAL;
                goto cleanup;
            }
        /* t = Q^T x; Q row-major with eigenvectors in columns. */
        cblas_sgemv(CblasRowMajor, CblasTrans, n, n, 1.0f, inv->Q, n, x, 1, 0.0f, t, 1);
        for (int i = 0; i < n; i++) t[i] /= inv->v[i] + lambda;
        /* y = Q t. */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, n, 1.0f, inv->Q, n, t, 1, 0.0f, y, 1);
    }
    if (!kfac_linalg_all_finite(y, (size_t)n)) rc = -ERANGE;
cleanup:
    free(own);
    return rc;
}

int kfac_precond_bn(const float *fisher, int n_c, float lambda, const float *dgamma,
                    const float *dbeta, float *pgamma, float *pbeta) {
    if (!fisher || !dgamma || !dbeta || !pgamma || !pbeta || n_c <= 0 || !isfinite(lambda) ||
        lambda < 0.0f) {
        log_error("kfac_precond_bn: bad arguments (n_c=%d, lambda=%g)", n_c, (double)lambda);
        return -EINVAL;
    }
    int guarded = 0;
    for (int i = 0; i < n_c; i++) {
        double gg = fisher[3 * i], gb = fisher[3 * i + 1], bb = fisher[3 * i + 2];
        double xg = dgamma[i], xb = dbeta[i];
        double det = 0, a = 0, c = 0;
        bool ok = isfinite(gg) && isfinite(gb) && isfinite(bb);
        if (ok) {
            gg = gg > 0 ? gg : 0;
            bb = bb > 0 ? bb : 0;
            double lim = sqrt(gg * bb); /* Cauchy-Schwarz bound of a PSD block */
            gb = gb > lim ? lim : (gb < -lim ? -lim : gb);
            a = gg + lambda;
            c = bb + lambda;
            det = a * c - gb * gb;
            ok = isfinite(det) && det > 1e-12 * a * c;
        }
        if (ok) {
            /* [[a, gb], [gb, c]]^{-1} = [[c, -gb], [-gb, a]] / det */
            pgamma[i] = (float)((c * xg - gb * xb) / det);
            pbeta[i] = (float)((a * xb - gb * xg) / det);
        } else {
            guarded++;
            double s = lambda > 0 ? 1.0 / lambda : 1.0;
            pgamma[i] = (float)(xg * s);
            pbeta[i] = (float)(xb * s);
        }
    }
    return guarded;
}

int kfac_precond_identity(const float *V, size_t n_elems, float lambda,
                          kfac_identity_mode_t mode, float *U) {
    if ((!V || !U) && n_elems > 0) return -EINVAL;
    if (mode == KFAC_IDENTITY_SGD) {
        if (U != V && n_elems) memmove(U, V, sizeof(float) * n_elems);
        return 0;
    }
    if (mode != KFAC_IDENTITY_DAMPED || !isfinite(lambda) || !(lambda > 0.0f)) {
        log_error("kfac_precond_identity: bad mode %d or lambda %g", (int)mode, (double)lambda);
        return -EINVAL;
    }
    float s = 1.0f / lambda;
    for (size_t i = 0; i < n_elems; i++) U[i] = V[i] * s;
    return 0;
}
