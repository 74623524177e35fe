/* common/net/wire.h — the mapping between K-FAC objects (common/kfac/) and
 * wire messages (proto/msg.h) that more than one daemon needs: the model's
 * factor shapes and the message limits msg_validate() enforces (kfac-ps,
 * kfac-worker, kfac-statsd), a statistics container in wire form (the
 * worker and the stats worker), and an inverse in JobResult form
 * (kfac-invertd; kfac-ps reads it back with ps/ingest.h).
 *
 * Conventions: float32. Symmetric matrices travel as packed upper
 * triangles, row by row (kfac_linalg_packed_index); a batch-norm factor as
 * dim 2x2 blocks of 3 floats each. A message's layer index is the net's
 * layer index and its factor index the position in the layer's factor
 * order (kfac_stats.h). An eigen result carries Q as is: (n, n) row-major,
 * column j = eigenvector j (kfac_inverse.h), and the n eigenvalues.
 *
 * Threads: every function is reentrant; nothing here keeps state.
 *
 * Ownership is stated per function; errors are negative errno values.
 */
#ifndef KFAC_NET_WIRE_H
#define KFAC_NET_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#include "proto/msg.h"

/* ---- the model's shapes and the message limits ----------------------------- */

/* The model's factor shapes and the limits built from them, computed once
 * per model and used by every daemon that validates messages about it.
 * Ownership: owns `layers`; limits.model points at `model` inside the same
 * struct, so never copy it by value: use it in place. */
typedef struct wire_shape {
    msg_layer_shape_t *layers; /* (model.n_layers) indexed by net layer; n_factors 0: no statistics */
    msg_model_shape_t model;
    msg_limits_t limits;       /* for msg_validate() and msg_limits_max_bytes() */
    size_t max_layer_floats;   /* the largest layer's statistics, packed (>= 1) */
} wire_shape_t;

/* Fill sh from net and its statistics layout stats (NULL: no factors, e.g.
 * optimizer sgd). Every layer of stats gets its factor kinds, n (a
 * symmetric factor: its dimension; batch norm: 2) and n_blocks (1; batch
 * norm: its channels). The limits are the model's own, not the protocol's
 * defaults:
 *   max_n      = the largest symmetric factor (at least 2, the batch-norm
 *                block size), the largest job there can be;
 *   max_floats = the longest float array a message about this model can
 *                carry: params / grad (n_params), state (n_state), a
 *                factor's packed data, a JobResult's packed inverse
 *                (n(n+1)/2) and an eigen JobResult's eigenvectors (n * n,
 *                the largest for every factor with n > 1);
 *   max_layers = net->n_layers (at least 1);
 * the string and text limits stay msg_limits_default()'s.
 * Returns 0, -EINVAL (stats does not belong to net) or -ENOMEM; sh is
 * empty on error. */
int wire_shape_init(wire_shape_t *sh, const net_t *net, const kfac_stats_t *stats);

/* Free the layer array and zero sh. NULL and an empty sh are no-ops. */
void wire_shape_release(wire_shape_t *sh);

/* Wire kind of a statistics factor (A, G, K, PSI, G_BIAS, BN). */
msg_factor_kind_t wire_factor_kind(const kfac_factor_t *f);

/* ---- statistics ------------------------------------------------------------ */

/* Mark the layers of s wanted by a Params' stats_layers (n_layers net
 * layer indices; 0: every layer): skip = 0 for those, 1 for the others, so
 * that kfac_stats_compute and wire_stats_to_msg leave them out. Returns the
 * number of layers of s wanted. */
int wire_stats_want(kfac_stats_t *s, const uint32_t *layers, size_t n_layers);

/* The statistics of s (after kfac_stats_compute) in wire form: out->layers
 * is malloc'd (one entry per preconditioned layer not marked skip, layer = net layer index,
 * factors in the layer's order) and the factor data point into *packed
 * (malloc'd here, kfac_stats_packed_len(s) floats). Free both with
 * wire_stats_release(). Returns 0, -EINVAL or -ENOMEM (nothing to free). */
int wire_stats_to_msg(const kfac_stats_t *s, msg_stats_t *out, float **packed);
void wire_stats_release(msg_stats_t *st, float **packed);

/* ---- inverses ------------------------------------------------------------- */

/* Fill the method, n, damping and arrays of the JobResult r from a computed
 * inverse inv (inv->valid), in the form inv holds (which may differ from the
 * method the job asked for, after a fallback):
 *   cholesky: r->inverse = the packed upper triangle of inv->inv, in
 *             *packed (malloc'd here, n(n+1)/2 floats; free it after the
 *             message is encoded);
 *   eigen:    r->eigvecs = inv->Q (n * n), r->eigvals = inv->v (n), both
 *             borrowed from inv (keep inv alive until encoded); *packed
 *             is NULL.
 * damping = inv->damping_used. The job's identity (job_id, layer, factor,
 * factor_version) and compute_ms are the caller's to set.
 * Returns 0, -EINVAL (no inverse) or -ENOMEM. */
int wire_result_from_inverse(const kfac_inverse_t *inv, msg_job_result_t *r, float **packed);

#endif
