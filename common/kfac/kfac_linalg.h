/* common/kfac/kfac_linalg.h — small dense linear-algebra helpers for K-FAC factors.
 *
 * Conventions (fixed for the whole project):
 *  - float32, row-major. A symmetric n x n factor F is stored as a full n*n
 *    row-major array, and its UPPER triangle (F[i*n + j] with j >= i) is the
 *    authoritative half. Seen by a column-major library (LAPACK) the same
 *    memory is F^T, whose LOWER triangle holds those values: row-major
 *    LAPACKE calls use uplo = 'U'.
 *  - On the wire a symmetric factor travels as its packed upper triangle,
 *    n(n+1)/2 floats, row by row: row 0 columns 0..n-1, row 1 columns
 *    1..n-1, ..., row n-1 column n-1 (kfac_linalg_packed_index).
 *  - Kronecker convention: a layer's gradient is the matrix V (out, in+1) =
 *    [dW | db] (bias as the homogeneous coordinate, last column); the Fisher
 *    block is approximated by A (x) G acting on vec(V) stacked column by
 *    column, with A (in+1, in+1) from the activations and G (out, out) from
 *    the back-propagated derivatives. The identity
 *        (A (x) B) vec(C) = vec(B C A^T)
 *    turns every Kronecker product into two matrix products.
 *
 * Ownership: every pointer argument is borrowed for the duration of the call;
 * nothing is retained or freed. Functions that can fail return 0 or a
 * negative errno and log what was wrong.
 */
#ifndef KFAC_LINALG_H
#define KFAC_LINALG_H

#include <stdbool.h>
#include <stddef.h>

/* Number of floats in the packed upper triangle of an n x n matrix. */
static inline size_t kfac_linalg_packed_len(int n) {
    return n > 0 ? (size_t)n * (size_t)(n + 1) / 2 : 0;
}

/* Position of element (i, j), i <= j < n, in the packed upper triangle:
 * rows 0..i-1 contribute n + (n-1) + ... + (n-i+1) = i*n - i*(i-1)/2 floats. */
static inline size_t kfac_linalg_packed_index(int n, int i, int j) {
    return (size_t)i * (size_t)n - (size_t)i * (size_t)(i - 1) / 2 + (size_t)(j - i);
}

/* Copy the upper triangle of the n x n row-major F into packed
 * (n(n+1)/2 floats, caller-owned). The lower triangle of F is not read.
 * Returns 0, or -EINVAL for n <= 0 or NULL pointers. */
int kfac_linalg_pack_upper(const float *F, int n, float *packed);

/* Expand a packed upper triangle into the full n x n row-major F (caller-
 * owned, n*n floats): both triangles are written, so F is exactly symmetric.
 * pack followed by unpack is bit-exact. Returns 0 or -EINVAL. */
int kfac_linalg_unpack_upper(const float *packed, int n, float *F);

/* Make F exactly symmetric in place by copying the upper triangle onto the
 * lower one (the project's convention: the upper triangle is authoritative). */
void kfac_linalg_symmetrize_upper(float *F, int n);

/* Make F exactly symmetric in place with F <- (F + F^T) / 2; for factors
 * whose two triangles were both accumulated (e.g. by a full sgemm). */
void kfac_linalg_symmetrize_average(float *F, int n);

/* True when all n_elems values are finite (no NaN, no +-Inf). True for
 * n_elems == 0; false for x == NULL with n_elems > 0. */
bool kfac_linalg_all_finite(const float *x, size_t n_elems);

/* True when the upper triangle (diagonal included) of the n x n F is finite;
 * the lower triangle is not read. */
bool kfac_linalg_upper_finite(const float *F, int n);

/* Trace of the n x n F, accumulated in double. NaN if a diagonal entry is. */
double kfac_linalg_trace(const float *F, int n);

/* F <- F + d I in place (n x n row-major). */
void kfac_linalg_add_diagonal(float *F, int n, float d);

/* Factored Tikhonov damping (Martens & Grosse 2015; Ba et al. Eq. 3):
 *     pi = sqrt( (tr A / nA) / (tr G / nG) ),
 * so that lambda I added to A (x) G is approximated by adding
 * pi * sqrt(lambda) I to A and sqrt(lambda) / pi I to G. For a symmetric
 * positive semi-definite factor the trace is its nuclear norm.
 * Guard: if either normalised trace is zero, negative, NaN or Inf, or the
 * ratio is not a finite positive number, returns 1 (plain split damping).
 * A, G may be NULL only when the matching n is <= 0, which also returns 1. */
float kfac_pi_trace(const float *A, int nA, const float *G, int nG);

/* The same from already computed normalised norms rA = nuc(A) / nA and
 * rG = nuc(G) / nG: sqrt(rA / rG), with the same guard (returns 1). */
float kfac_pi_from_norms2(double rA, double rG);

/* Three-factor damping for the doubly-factored approximation A (x) B (x) C
 * (Ba et al. §4.1, Eq. 11-12): lambda I is approximated by adding
 * pi_a lambda^(1/3) I, pi_b lambda^(1/3) I, pi_c lambda^(1/3) I to A, B, C with
 *     pi_a = cbrt( (nuc(A)/dA)^2 / ((nuc(B)/dB) (nuc(C)/dC)) )
 * and pi_b, pi_c analogous, so pi_a pi_b pi_c = 1. The nuclear norms are the
 * traces (the factors are symmetric PSD; nuc() is the nuclear norm). Writes pi[0..2] = pi_a, pi_b, pi_c.
 * Guard: if any normalised trace is not a finite positive number, or any
 * result is not finite and positive, all three are set to 1.
 * Returns 0, or -EINVAL for NULL pi / a factor pointer NULL with n > 0 /
 * n <= 0 (pi is then set to 1, 1, 1). */
int kfac_pi_trace3(const float *A, int nA, const float *B, int nB,
                   const float *C, int nC, float pi[3]);

/* The same from normalised norms r[0..2] = nuc(F_i) / d_i: pi_i is r_i
 * divided by the geometric mean of r (the k-factor generalisation of
 * Eq. 12, here k = 3). Same guard. */
void kfac_pi_from_norms3(const double r[3], float pi[3]);

/* Kronecker matrix-vector product by the identity
 *     (A (x) B) vec(C) = vec(B C A^T),
 * with A (na, na) or any (ma, na), B (mb, nb), C (nb, na) all row-major,
 * out (mb, ma) row-major = B C A^T; work holds nb*ma floats (caller-owned).
 * vec() stacks columns. A and B need not be symmetric. out must not alias C.
 * Returns 0 or -EINVAL. */
int kfac_linalg_kron_apply(const float *A, int ma, int na,
                           const float *B, int mb, int nb,
                           const float *C, float *out, float *work);

#endif
