/* common/kfac/kfac_inverse.h — damped inverse of one symmetric Kronecker factor.
 *
 * Two forms, chosen per call:
 *  - KFAC_INV_CHOLESKY: inv = (F + d I)^{-1}, a full symmetric n x n matrix
 *    (both triangles written), from LAPACK spotrf + spotri. Used with
 *    factored Tikhonov damping (d = pi sqrt(lambda) or sqrt(lambda) / pi).
 *  - KFAC_INV_EIGEN: F = Q diag(v) Q^T with v clamped at >= 0, from ssyevd.
 *    Damping is applied at preconditioning time (Pauloski et al. SC20 Eq.
 *    13-15, KAISA Eq. 15-17): 1 / (v_G v_A^T + lambda).
 *
 * Conventions: float32, row-major; the input factor F is n x n row-major and
 * only its UPPER triangle is read (the project's authoritative half; the
 * lower one may hold anything). Q is row-major with COLUMN j = eigenvector j,
 * i.e. Q[i*n + j] is component i of eigenvector j, and F ~ Q diag(v) Q^T;
 * eigenvalues ascend.
 *
 * Numerical defence: the input is symmetrized by construction (upper copied
 * onto lower), NaN/Inf input is rejected, and a failed factorization is
 * retried: Cholesky with 10x, 100x, 1000x the damping, then the
 * eigendecomposition (negative eigenvalues clamped, still in the Cholesky
 * form); an eigendecomposition that fails falls back to the Cholesky form.
 * Every result is checked finite. If everything fails the call returns < 0
 * and leaves the output exactly as it was, so the caller keeps using its
 * last good inverse. Every retry and fallback is counted in
 * kfac_inverse_stats_t.
 *
 * Ownership and threads: a kfac_inverse_t owns its buffers (and a private
 * workspace reused across calls, so repeated inversions allocate nothing);
 * one object must not be used by two threads at once, distinct objects may.
 */
#ifndef KFAC_INVERSE_H
#define KFAC_INVERSE_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    KFAC_INV_CHOLESKY = 0,
    KFAC_INV_EIGEN = 1,
} kfac_inv_method_t;

/* How many times a failed Cholesky is retried with 10x more damping. */
#define KFAC_INVERSE_MAX_ESCALATIONS 3

/* Counters for every outcome; caller-owned, zero-initialise, only ever
 * incremented by kfac_inverse_compute (may be NULL there). */
typedef struct kfac_inverse_stats {
    uint64_t n_calls;              /* kfac_inverse_compute calls */
    uint64_t n_ok;                 /* calls that returned 0 (with or without fallbacks) */
    uint64_t n_ok_first_try;       /* ... of which with the requested method and damping */
    uint64_t n_rejected_args;      /* bad n, NULL pointers, negative/non-finite damping */
    uint64_t n_rejected_nonfinite; /* NaN or Inf in the factor's upper triangle */
    uint64_t n_cholesky_failures;  /* spotrf/spotri reported info != 0 */
    uint64_t n_eigen_failures;     /* ssyevd reported info != 0 */
    uint64_t n_nonfinite_outputs;  /* a factorization "succeeded" but gave NaN/Inf or a
                                      non-positive diagonal of the inverse */
    uint64_t n_damping_escalations;/* Cholesky retries with 10x damping */
    uint64_t n_method_fallbacks;   /* switches to the other method */
    uint64_t n_eigen_clamped;      /* decompositions that had eigenvalues < 0 set to 0 */
    uint64_t n_failures;           /* calls that returned < 0, rejections included
                                      (the output was left as it was) */
} kfac_inverse_stats_t;

typedef struct kfac_inverse_ws kfac_inverse_ws_t; /* private workspace */

typedef struct kfac_inverse {
    kfac_inv_method_t method; /* form of the current content (may differ from the
                                 method requested after a fallback) */
    int n;                    /* factor dimension, fixed at kfac_inverse_new */
    bool valid;               /* false until the first successful compute/load */
    float *inv;               /* (n, n) CHOLESKY: (F + damping_used I)^{-1}, both triangles */
    float *Q;                 /* (n, n) EIGEN: row-major, column j = eigenvector j */
    float *v;                 /* (n) EIGEN: eigenvalues, ascending, >= 0 */
    float damping_used;       /* CHOLESKY: the d actually added (after escalation).
                                 EIGEN: the damping passed to compute; used when this
                                 factor is applied on its own, as Q diag(1/(v+d)) Q^T */
    uint64_t n_updates;       /* successful compute/load calls so far */
    kfac_inverse_ws_t *ws;    /* private: scratch buffers reused across calls */
} kfac_inverse_t;

/* New empty (valid == false) inverse holder for an n x n factor, n >= 1.
 * Buffers are allocated on first use. Returns NULL on bad n or no memory. */
kfac_inverse_t *kfac_inverse_new(int n);

/* Free everything and set *p to NULL; accepts NULL and *p == NULL. */
void kfac_inverse_free(kfac_inverse_t **p);

/* Damped inverse of the symmetric factor F (n x n row-major, upper triangle
 * read, borrowed) into out (whose n must equal n).
 *   CHOLESKY: out->inv = (F + damping I)^{-1}; damping >= 0 (0 is allowed for
 *             a positive definite F). On failure retried as described above;
 *             out->damping_used tells the d finally used.
 *   EIGEN:    out->Q, out->v with F = Q diag(v) Q^T, v clamped at >= 0;
 *             damping is only recorded (damping_used). On ssyevd failure the
 *             Cholesky form with this damping is produced instead (out->method
 *             says which form is held). Pass the factor's own share of the
 *             damping here (e.g. sqrt(lambda), or the factored-Tikhonov value)
 *             so that such a fallback, and preconditioning with a partner
 *             held in the other form, stay well defined.
 * If damping is 0 and a retry needs damping, the retry starts from
 * 1e-6 * tr(F)/n (or 1e-6 if that is not positive).
 * stats (caller-owned, may be NULL) is updated.
 * Returns 0 on success (possibly after fallbacks); -EINVAL bad arguments;
 * -EDOM NaN/Inf in F; -ENOMEM; -ERANGE every attempt failed. On any error
 * out is untouched. */
int kfac_inverse_compute(const float *F, int n, float damping, kfac_inv_method_t method,
                         kfac_inverse_t *out, kfac_inverse_stats_t *stats);

/* Load a ready inverse (e.g. received from an inverse daemon) into out:
 * inv_full (n x n row-major, upper triangle read and mirrored, borrowed) is
 * (F + damping I)^{-1}. Validated finite with a positive diagonal. Returns 0,
 * -EINVAL (shape/NULL) or -EDOM (non-finite); out untouched on error. */
int kfac_inverse_load_cholesky(kfac_inverse_t *out, const float *inv_full, float damping);

/* Load a ready eigendecomposition: Q (n x n row-major, column j = vector j)
 * and v (n), both borrowed and copied; v is clamped at >= 0. Returns 0,
 * -EINVAL or -EDOM; out untouched on error. */
int kfac_inverse_load_eigen(kfac_inverse_t *out, const float *Q, const float *v, float damping);

/* Release the private workspace (up to ~3 n^2 floats kept between calls for
 * reuse); the content stays valid and the next compute reallocates. For
 * holders that are loaded once and then only read (e.g. on the server). */
void kfac_inverse_trim(kfac_inverse_t *inv);

/* Copy src's current content into dst (same n). Returns 0, -EINVAL, -ENOMEM,
 * or -ENODATA when src holds nothing yet. */
int kfac_inverse_copy(kfac_inverse_t *dst, const kfac_inverse_t *src);

/* Method name for logs: "cholesky" / "eigen" / "unknown". */
const char *kfac_inverse_method_name(kfac_inv_method_t m);

/* Parse "cholesky" or "eigen"; returns 0 or -EINVAL. */
int kfac_inverse_method_parse(const char *s, kfac_inv_method_t *out);

#endif
