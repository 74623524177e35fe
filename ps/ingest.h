/* ps/ingest.h — the parameter server's conversions from wire messages
 * (proto/msg.h) into the optimizer's state (common/kfac/kfac_opt.h):
 * statistics from a message into a kfac_stats_t, a block by its wire name,
 * the wire name of an inverse method, and inverses out of a job result. The model's shapes and message limits,
 * which the clients use too, are common/net/wire.h.
 *
 * Conventions: float32; symmetric matrices travel as packed upper triangles
 * (msg.h), the optimizer holds them full n x n row-major with the upper
 * triangle authoritative. A message's layer index is the net's layer index;
 * its factor index is the position in the layer's factor order
 * (kfac_stats.h), so block (layer, factor) of kfac_opt_t is named the same
 * way on the wire.
 *
 * Threads: the PS's loop thread. Every function here trusts that the message
 * passed msg_validate() with the limits of wire_shape_init(); they still
 * return an error rather than crash if it did not.
 */
#ifndef KFAC_PS_INGEST_H
#define KFAC_PS_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_stats.h"
#include "common/net/wire.h"
#include "common/nn/nn.h"
#include "proto/msg.h"

/* Unpack validated statistics st into out (a container with the model's
 * layout): out is reset first, then each layer of st is unpacked
 * (kfac_stats_layer_unpack: finite, non-negative diagonals) with n_samples =
 * n_examples; layers st does not carry stay empty. scratch holds
 * sh->max_layer_floats floats (caller-owned). Returns 0, or -EINVAL with the
 * reason in err (out is then reset). */
int ps_ingest_stats_unpack(const wire_shape_t *sh, const msg_stats_t *st, double n_examples,
                         kfac_stats_t *out, float *scratch, char *err, size_t err_len);

/* Mark every factor of s empty (n_updates 0, n_samples 0) without touching
 * its data, which the next unpack or merge overwrites. */
void ps_ingest_stats_clear(kfac_stats_t *s);

/* Block index of (layer, factor) in k, or -1. */
int ps_ingest_block_of(const kfac_opt_t *k, uint32_t layer, uint32_t factor);

/* Load a validated, successful job result r for a block of dimension n
 * into the existing holder inv of dimension n (its buffers reused: no
 * allocation once they have their size): cholesky: the packed inverse
 * unpacked (both triangles); eigen: eigenvectors and eigenvalues (clamped
 * >= 0). damping: what the holder records as the damping used (the caller
 * checks the result's own against its job's; an eigen result is applied
 * with the job's). full is scratch of n*n floats. Returns 0, or a negative
 * errno with the reason in err (shape mismatch, non-finite, non-positive
 * diagonal); the holder is then not valid. */
int ps_ingest_result_load(const msg_job_result_t *r, int n, float damping, float *full, kfac_inverse_t *inv,
                        char *err, size_t err_len);

/* Wire method of an inverse method. */
msg_method_t ps_ingest_method(kfac_inv_method_t m);

#endif
