/* common/kfac/kfac_precond.h — apply K-FAC inverse Fisher blocks to gradients.
 *
 * Conventions: float32, row-major; inverses come from kfac_inverse.h.
 *  - fc/conv layer: gradient V (n_out, n_in) = [dW | db] (bias as the last,
 *    homogeneous column, so n_in = in + 1). Fisher block ~ A (x) G on vec(V)
 *    stacked column by column, A (n_in, n_in), G (n_out, n_out); hence
 *    (A (x) G)^{-1} vec(V) = vec(G^{-1} V A^{-1}).
 *  - doubly-factored layer (Ba et al. §4): weight gradient V (n_out, n_c*n_t)
 *    whose input feature map is flattened channel-major, column c*n_t + t.
 *    Rank-1 activations a = Psi (x) K in that flattening, so the block is
 *        F ~ Psi (x) K (x) G   on vec(V), index (c*n_t + t)*n_out + o,
 *    with K (n_t, n_t) over spatial positions, Psi (n_c, n_c) over channels
 *    and G (n_out, n_out). Its inverse is applied as the nested reshapes of
 *    Eq. 9: along t by K^{-1}, along c by Psi^{-1}, along o by G^{-1}. The
 *    bias has its own full block G (kfac_precond_block).
 *  - BatchNorm, unit-wise (Osawa et al. SP-NGD §4): channel i has the 2x2
 *    Fisher [[f_gg, f_gb], [f_gb, f_bb]] of (gamma_i, beta_i), stored as 3
 *    floats per channel: fisher[3i + 0] = f_gg, [3i + 1] = f_gb, [3i + 2] = f_bb.
 *
 * Damping, by the form of the inverses held:
 *  - every factor in the CHOLESKY form: the inverses already contain their
 *    damping (factored Tikhonov: the caller inverted A + pi sqrt(lambda) I and
 *    G + sqrt(lambda)/pi I, or for three factors F_i + pi_i lambda^(1/3) I with
 *    the pi's of Eq. 12, see kfac_linalg.h); lambda is not used.
 *  - every factor in the EIGEN form: exact Tikhonov damping of the whole
 *    Kronecker product (Pauloski et al. SC20 Eq. 13-15, KAISA Eq. 15-17):
 *        U = Q_G [ (Q_G^T V Q_A) ./ (v_G v_A^T + lambda) ] Q_A^T,
 *    and for three factors the divisor is v_Psi[c] v_K[t] v_G[o] + lambda.
 *    lambda must then be > 0.
 *  - mixed forms (after a fallback): each factor is applied on its own, an
 *    EIGEN-form factor as Q diag(1 / (v + damping_used)) Q^T.
 *
 * Ownership: all pointers are borrowed for the call. U may alias V (the
 * gradient is read completely before U is written as a scratch buffer); work
 * must alias neither. On error the content of U is unspecified unless the
 * function says otherwise; callers keep the gradient elsewhere if they need
 * it (see kfac_precond_identity for layers without inverses).
 */
#ifndef KFAC_PRECOND_H
#define KFAC_PRECOND_H

#include <stddef.h>

#include "common/kfac/kfac_inverse.h"

struct nn_par;

typedef enum {
    KFAC_IDENTITY_SGD = 0,    /* U = V: plain gradient until inverses exist */
    KFAC_IDENTITY_DAMPED = 1, /* U = V / lambda: (0 + lambda I)^{-1} V, the limit of the
                                 damped inverse with an empty factor */
} kfac_identity_mode_t;

/* Floats of work needed by kfac_precond_kron (n_in = columns of V) and by
 * kfac_precond_kron3 (n_in = n_c * n_t): n_out * n_in. */
size_t kfac_precond_work_len(int n_out, int n_in);

/* Kronecker-factored preconditioning of an fc/conv gradient:
 *     U = (A (x) G + damping)^{-1} V   (n_out, n_in),
 * with Ainv->n == n_in and Ginv->n == n_out, damping by the forms held (see
 * above; lambda used only by EIGEN-form factors). work: n_out*n_in floats,
 * or NULL to allocate internally for this call.
 * Returns 0; -EINVAL bad shapes/arguments (or lambda <= 0 with both factors
 * EIGEN, or an EIGEN factor with damping_used 0 and a zero eigenvalue in
 * mixed mode); -ENODATA if either holder has no inverse yet (U untouched:
 * the caller uses kfac_precond_identity); -ENOMEM; -ERANGE if the result is
 * not finite (e.g. V had NaN/Inf).
 * par: a pool (common/nn/nn_par.h) over whose threads each large sgemm is
 * split, with single-threaded BLAS inside each part: by the rows of the
 * factor when the factor is larger than the gradient (each thread then
 * reads only its rows of the factor, e.g. of a large A^-1), else by the
 * gradient's columns, rows or slabs; NULL computes on the calling thread.
 * A doubly-factored layer's Psi side takes several slabs per sgemm where
 * they have few columns (n_t < 32). The
 * result does not depend on the split beyond float rounding of the BLAS
 * kernels. */
int kfac_precond_kron(const kfac_inverse_t *Ainv, const kfac_inverse_t *Ginv, float lambda,
                      const float *V, int n_out, int n_in, float *U, float *work,
                      struct nn_par *par);

/* Doubly-factored preconditioning (Ba et al. Eq. 9) of the weight gradient V
 * (n_out, n_c*n_t), column c*n_t + t:
 *     U = (Psi (x) K (x) G + damping)^{-1} vec(V),
 * i.e. per output row o, X_o (n_c, n_t) -> Psi^{-1} X_o K^{-1}, then
 * U = G^{-1} [rows]. Kinv->n == n_t, Psiinv->n == n_c, Ginv->n == n_out.
 * Damping by the forms held, as for kfac_precond_kron. work as above with
 * n_in = n_c * n_t. Return codes and par as kfac_precond_kron. */
int kfac_precond_kron3(const kfac_inverse_t *Kinv, const kfac_inverse_t *Psiinv,
                       const kfac_inverse_t *Ginv, float lambda, const float *V, int n_out,
                       int n_c, int n_t, float *U, float *work, struct nn_par *par);

/* Low-rank preconditioning (common/kfac/kfac_lowrank.h): for a weight
 * gradient V = D^T X with D (n_rows, n_out) and X (n_rows, n_in),
 *     G^-1 V A^-1 = Pt^T Q,   Pt = D G^-1 (n_rows, n_out),  Q = X A^-1 (n_rows, n_in)
 * (the factors are symmetric), which costs n_rows (n_out^2 + n_in^2)
 * multiply-adds instead of n_out n_in (n_out + n_in); kfac_precond_lowrank_form
 * then forms Pt^T Q. A homogeneous bias column is the caller's: one more
 * row [db^T] in D and [0 .. 0 1] in X, with X (n_rows, n_in + 1).
 * Each factor is applied on its own: exactly kfac_precond_kron's result for
 * CHOLESKY and mixed forms; when every factor is EIGEN the damping
 * 1 / (v_G v_A^T + lambda) couples both sides and does not factor:
 * -ENOTSUP (the caller densifies). work: n_rows * max(n_out, n_in) floats,
 * aliasing nothing. Returns 0, -EINVAL, -ENODATA (an inverse missing),
 * -ENOTSUP, -ENOMEM, -ERANGE (not finite). par as kfac_precond_kron. */
int kfac_precond_kron_lowrank(const kfac_inverse_t *Ainv, const kfac_inverse_t *Ginv, const float *D,
                              const float *X, int n_rows, int n_out, int n_in, float *Pt, float *Q, float *work,
                              struct nn_par *par);

/* The doubly-factored twin: Pt = D G^-1, and each row of X, seen as
 * (n_c, n_t) in the column order c*n_t + t, becomes Psi^-1 X_r K^-1, so
 * that Pt^T Q = kfac_precond_kron3 of D^T X. X (n_rows, n_c*n_t); work:
 * n_rows * max(n_out, n_c*n_t) floats. Returns as kfac_precond_kron_lowrank. */
int kfac_precond_kron3_lowrank(const kfac_inverse_t *Kinv, const kfac_inverse_t *Psiinv,
                               const kfac_inverse_t *Ginv, const float *D, const float *X, int n_rows, int n_out,
                               int n_c, int n_t, float *Pt, float *Q, float *work, struct nn_par *par);

/* U (n_out, n_in; row stride ldu >= n_in) = Pt^T Q, Pt (n_rows, n_out), Q
 * (n_rows, n_in), split by rows of U over par's threads. Returns 0, -EINVAL
 * or -ERANGE (not finite). */
int kfac_precond_lowrank_form(const float *Pt, const float *Q, int n_rows, int n_out, int n_in, float *U, int ldu,
                              struct nn_par *par);

/* One full block applied to a vector (the doubly-factored layer's bias,
 * whose block is G): y = (F + lambda I)^{-1} x, n = inv->n.
 * EIGEN form: y = Q diag(1 / (v + lambda)) Q^T x, exact for any lambda > 0,
 * so G's own decomposition serves. CHOLESKY form: y = inv x; the holder must
 * then have been computed with damping lambda (a separate holder from the
 * factored-damped G^{-1}); lambda is not used. y may alias x. work: n
 * floats of scratch (caller-owned, e.g. the optimizer's, so that a step
 * allocates nothing), or NULL to allocate it here.
 * Returns 0, -EINVAL, -ENODATA (no inverse yet, y untouched), -ENOMEM, or
 * -ERANGE (non-finite result). */
int kfac_precond_block(const kfac_inverse_t *inv, float lambda, const float *x, float *y, float *work);

/* Unit-wise BatchNorm preconditioning: for each channel i < n_c,
 *     (pg_i, pb_i) = ([[f_gg, f_gb], [f_gb, f_bb]] + lambda I)^{-1} (dg_i, db_i)
 * by the closed-form 2x2 inverse (in double). Guards: negative diagonals are
 * clamped to 0 and |f_gb| to sqrt(f_gg f_bb) (a Fisher block is PSD); a
 * channel whose block is not finite, or numerically singular after damping
 * (det <= 1e-12 (f_gg + lambda)(f_bb + lambda), possible only for tiny
 * lambda), is preconditioned by (lambda I)^{-1} (left as is if lambda == 0).
 * lambda >= 0. Outputs may alias inputs. Returns the number of guarded
 * channels (>= 0) or -EINVAL. */
int kfac_precond_bn(const float *fisher, int n_c, float lambda, const float *dgamma,
                    const float *dbeta, float *pgamma, float *pbeta);

/* Damped identity for a layer without inverses yet: U = V (KFAC_IDENTITY_SGD)
 * or U = V / lambda (KFAC_IDENTITY_DAMPED, lambda > 0). U may alias V.
 * Returns 0 or -EINVAL. */
int kfac_precond_identity(const float *V, size_t n_elems, float lambda,
                          kfac_identity_mode_t mode, float *U);

#endif
