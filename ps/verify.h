/* ps/verify.h — kfac-ps checks every inverse a kfac-invertd sends back
 * against the factor its job was cut from, before it is installed.
 *
 * At the cut the PS draws a random probe x (N(0,1), n values) and keeps
 * y = (F + d I) x, computed in double from the factor F it sends and the
 * job's damping d, with tr F. A result H passes when
 *   || H (F + d_H I) x - x || <= PS_VERIFY_TOL ||x||,
 * (or a looser bound for badly conditioned F + d_H I: ps_verify_tol),
 * where d_H is the damping the result says it used (Cholesky may add more
 * than asked, up to 10^KFAC_INVERSE_MAX_ESCALATIONS times; d_H is checked
 * to lie in that range), using (F + d_H I) x = y + (d_H - d) x. An eigen
 * result must also have eigenvalues in [0, tr F] (up to rounding) and
 * orthonormal vectors on a second probe: || Q^T Q u - u || small.
 * The daemon never sees x, so it cannot fit a wrong inverse to the check:
 * an indefinite matrix, a scaled inverse or another factor's inverse fail
 * it. An honest float inverse passes by a wide margin (the tests measure
 * it). Probes cost O(n^2) at the cut and at the check, against the
 * daemon's O(n^3).
 *
 * Pure data and math: no sockets, no clocks; the PS's loop thread owns it.
 */
#ifndef KFAC_PS_VERIFY_H
#define KFAC_PS_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_inverse.h"

#define PS_VERIFY_TOL 0.05    /* relative residual an inverse may have on the probe ... */
#define PS_VERIFY_COND_TOL 1e-6 /* ... or this times a bound on the condition number of F + d I, (tr F + d) / d,
                                   for badly conditioned factors, where a float inverse is less exact ... */
#define PS_VERIFY_TOL_MAX 0.25 /* ... but never more (a result half or twice the inverse always fails) */
#define PS_VERIFY_ORTHO_TOL 1e-3 /* eigen results: || Q^T Q u - u || / ||u|| */
#define PS_VERIFY_RING 8      /* probes kept per block: jobs in flight, late results included */

typedef struct ps_verify ps_verify_t;

/* Probes for n_blocks blocks of dimensions block_n[b], drawn from seed.
 * Returns NULL when out of memory. */
ps_verify_t *ps_verify_new(const int *block_n, int n_blocks, uint64_t seed);
void ps_verify_free(ps_verify_t **v);

/* Job job_id (> 0) of block b was cut from F (n x n, row-major, upper
 * triangle authoritative) with damping d: keep its probe (the oldest of
 * the block's PS_VERIFY_RING is forgotten). Returns 0 or -EINVAL. */
int ps_verify_cut(ps_verify_t *v, int b, uint64_t job_id, const float *F, int n, float damping);

/* The residual allowed for a factor of trace `trace` at damping d. */
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
 * residual. *residual (may be NULL) receives the relative residual. */
int ps_verify_check(ps_verify_t *v, int b, uint64_t job_id, const kfac_inverse_t *inv, float damping_used,
                    double *residual, char *why, size_t why_len);

#endif
