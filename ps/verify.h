/* ps/verify.h — kfac-ps checks every inverse a kfac-invertd sends back
 * against the factor its job was cut from, before it is installed.
 *
 * At the cut the PS keeps a probe: a k-dimensional subspace
 * (k = PS_VERIFY_PROBES) and its image under the damped factor, computed
 * in double from the factor F it sends and the job's damping d. The span
 * is that of R and F R for R (n x k/2) N(0, 1): k/2 random directions and
 * one power step of F on each, so that the eigenvectors of F's largest
 * eigenvalues lie nearly in it. Its orthonormal basis V (n x k) and
 * W = (F + d I) V are kept, with tr F. With E = H (F + d_H I) - I
 * for a result H, E V = H (W + (d_H - d) V) - V (k products with H), and
 * for every u in span V (k x k eigenvalue problems: block power iteration
 * on E carried to its limit on the subspace) H passes when
 *   ||E u|| <= PS_VERIFY_TOL_MAX ||u||   and
 *   ||E u||^2 <= PS_VERIFY_TOL^2 ||u||^2 + (PS_VERIFY_COND_TOL / d_H)^2 ||(F + d_H I) u||^2:
 * the second term is what rounding a float inverse costs in that direction
 * (E u = dH (F + d_H I) u, ||dH|| a small multiple of ||H|| <= 1 / d_H),
 * large along F's largest eigenvectors, small elsewhere.
 * So at most sqrt(2) ps_verify_tol(||F||_F, d_H) passes in any direction.
 * d_H is the damping the result says it used (Cholesky may add more than
 * asked, up to 10^KFAC_INVERSE_MAX_ESCALATIONS times; d_H is checked to
 * lie in that range). A Cholesky-form result must also be positive
 * definite as far as PS_VERIFY_LANCZOS Lanczos steps on H (from a random
 * start, no F needed) can see: its smallest Ritz value, u^T H u for some
 * unit u, may not fall below -PS_VERIFY_DEF_TOL times its largest. An
 * eigen result must have eigenvalues in [0, tr F] (up to rounding) and
 * orthonormal vectors on a second probe: || Q^T Q u - u || small; it is
 * positive definite by its form (loading clamps eigenvalues at 0).
 *
 * The daemon never sees V, so it cannot fit a wrong inverse to the check:
 * an indefinite matrix, a scaled inverse or another factor's inverse fail
 * it. The true inverse with its sign flipped along eigenvectors q of F
 * (E q = -2 q) is what one random probe x let through (residual
 * 2 |q . x| / ||x||, about 2 / sqrt(n): 0.03 at n = 4096). Now:
 *  - q among F's largest eigenvalues: q lies nearly in span V, residual
 *    near 2 (bench/bench_ps_verify.c: 0.3 to 1.9, allowed at most 0.25);
 *  - q with lambda_q + d up to about 100 d (the smallest eigenvalues, the
 *    null space of a singular factor): H has the eigenvalue
 *    -1 / (lambda_q + d), which the Lanczos steps find;
 *  - any q: E u = -2 (q . u) q on the span, so it passes only where
 *    2 ||P_V q|| stays under the allowance of the direction P_V q; from
 *    the k/2 random directions alone ||P_V q||^2 ~ Beta(k/4, (n - k/2)/2),
 *    so with the allowance at its floor PS_VERIFY_TOL it passes with
 *    probability at most P(chi2_{k/2} < n TOL^2 / 4): for k = 16, 1.6e-6
 *    at n = 257, 3.4e-4 at 1025, 0.018 at 3137, 0.041 at 4096.
 * Measured (bench/RESULTS.md, 100 flips of a random eigenvector in each
 * of 16 cases, n = 513 and 1025, kappa 88 to 9e4): 1 of 1,600 passed (at
 * kappa 9e4, where the honest residual is 0.07), against 42 to 100 of 100
 * per case with one probe; at n = 3137, 3 of 160 (20 per case, all at
 * kappa 9e4 and 6e5). Several flips fail more surely than one.
 * The tolerance: an honest float inverse's residual in direction u is
 * about 2.2e-8 sqrt(n) ||(F + d I) u|| / d (1.2e-6 kappa along F's top
 * eigenvector at n = 3137, the worst measured); PS_VERIFY_COND_TOL allows
 * 4 times that up to n = 4096. Along F's largest eigenvectors, where the
 * allowance reaches PS_VERIFY_TOL_MAX (kappa above 4e4), an honest float
 * inverse is itself that inexact, so a flip there is as large as its
 * rounding.
 * Cost (bench/bench_ps_verify.c, bench/RESULTS.md): the cut 2 passes over
 * F's upper triangle (k n^2 multiply-adds), the check k n^2 for E V,
 * PS_VERIFY_LANCZOS matrix-vector products with H (sgemv), and for eigen
 * results 2 k n^2 + 2 n^2; against the daemon's n^3. Memory: 2 n k
 * doubles per job in flight (256 kB at n = 1025).
 *
 * Pure data and math: no sockets, no clocks; the thread that cuts the jobs
 * and takes their results owns it (OpenBLAS's sgemv for the Lanczos steps).
 */
#ifndef KFAC_PS_VERIFY_H
#define KFAC_PS_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_inverse.h"

#define PS_VERIFY_TOL 0.05    /* relative residual an inverse may have in a direction u of the probe's span ... */
#define PS_VERIFY_COND_TOL 6e-6 /* ... plus (in quadrature) this times ||(F + d I) u|| / (d ||u||), where a float
                                   inverse is less exact (badly conditioned factors, F's largest eigenvectors) ... */
#define PS_VERIFY_TOL_MAX 0.25 /* ... but never more (a result half or twice the inverse always fails) */
#define PS_VERIFY_ORTHO_TOL 1e-3 /* eigen results: || Q^T Q u - u || / ||u|| */
#define PS_VERIFY_RING 8      /* probes kept per block: jobs in flight, late results included */
#define PS_VERIFY_LANCZOS 24  /* Lanczos steps on a Cholesky-form result: its smallest Ritz value ... */
#define PS_VERIFY_DEF_TOL 1e-4 /* ... below -this times the largest proves it indefinite */
#define PS_VERIFY_PROBES 16   /* directions of a probe: 8 random ones and their images under F (even) */

typedef struct ps_verify ps_verify_t;

/* Probes for n_blocks blocks of dimensions block_n[b], drawn from seed.
 * Scratch of 5 k max_n doubles is allocated here; each probe's V and W
 * (2 k n doubles) at its block's first cut. Returns NULL when out of
 * memory. */
ps_verify_t *ps_verify_new(const int *block_n, int n_blocks, uint64_t seed);
void ps_verify_free(ps_verify_t **v);

/* Job job_id (> 0) of block b was cut from F (n x n, row-major, upper
 * triangle authoritative, borrowed) with damping d: keep its probe (the
 * oldest of the block's PS_VERIFY_RING is forgotten). Cost: k n^2
 * multiply-adds. Returns 0, -EINVAL or -ENOMEM. */
int ps_verify_cut(ps_verify_t *v, int b, uint64_t job_id, const float *F, int n, float damping);

/* The largest residual ||E u|| / ||u|| allowed in any direction for a
 * factor whose largest eigenvalue is at most `trace` (tr F, or ||F||_F)
 * at damping d: PS_VERIFY_COND_TOL (trace + d) / d, at least
 * PS_VERIFY_TOL, at most PS_VERIFY_TOL_MAX (the check's allowance in
 * direction u replaces trace + d by ||(F + d I) u|| / ||u||). */
double ps_verify_tol(double trace, float damping);

/* The damping job job_id of block b was cut with; -1 when unknown. */
float ps_verify_damping(const ps_verify_t *v, int b, uint64_t job_id);

/* Forget the probe of job job_id of block b (a result without an inverse
 * to check: the daemon's error, a wrong factor version). */
void ps_verify_forget(ps_verify_t *v, int b, uint64_t job_id);

/* Check inv, the result of job job_id of block b, and forget the probe.
 * damping_used: the damping the result says it used (Cholesky) or the
 * job's (eigen). Returns 0 when it passes, -ENOENT when no probe is kept
 * for that job, -EDOM when it fails; why (why_len) says how, with the
 * residual. *residual (may be NULL) receives the relative residual: the
 * largest over the probe's span. Cost: k n^2 multiply-adds, and
 * PS_VERIFY_LANCZOS products with H (Cholesky) or 2 k n^2 + 2 n^2 more
 * (eigen). */
int ps_verify_check(ps_verify_t *v, int b, uint64_t job_id, const kfac_inverse_t *inv, float damping_used,
                    double *residual, char *why, size_t why_len);

#endif
