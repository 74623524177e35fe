/* ps/wire.h — the parameter server's conversions between wire messages
 * (proto/msg.h) and the optimizer's state (common/kfac/kfac_opt.h): the model's
 * factor shapes and message limits for msg_validate(), statistics from a
 * message into a kfac_stats_t, inversion jobs out of a block, and inverses
 * out of a job result.
 *
 * Conventions: float32; symmetric matrices travel as packed upper triangles
 * (msg.h), the optimizer holds them full n x n row-major with the upper
 * triangle authoritative. A message's layer index is the net's layer index;
 * its factor index is the position in the layer's factor order
 * (kfac_stats.h), so block (layer, factor) of kfac_opt_t is named the same
 * way on the wire.
 *
 * Threads: the PS's loop thread. Every function here trusts that the message
 * passed msg_validate() with the limits of ps_wire_shape_init(); they still
 * return an error rather than crash if it did not.
 */
#ifndef KFAC_PS_WIRE_H
#define KFAC_PS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#include "proto/msg.h"

/* The model's factor shapes and the message limits built from them.
 * Ownership: owns `layers`; limits.model points at `model` inside the same
 * struct, so never copy it by value (use it in place). */
typedef struct ps_wire_shape {
    msg_layer_shape_t *layers; /* (model.n_layers) indexed by net layer */
    msg_model_shape_t model;
    msg_limits_t limits;
    size_t max_layer_floats;   /* largest layer's statistics, packed */
    uint32_t max_n;            /* largest symmetric factor */
} ps_wire_shape_t;

/* Fill sh from net and its statistics layout stats (NULL: no factors, e.g.
 * optimizer sgd). Limits: max_n = the largest factor (>= 2), max_floats =
 * the largest array any message may carry for this model (params, state,
 * a factor, an n x n eigenvector matrix), max_layers = net->n_layers.
 * Returns 0 or -ENOMEM. */
int ps_wire_shape_init(ps_wire_shape_t *sh, const net_t *net, const kfac_stats_t *stats);
void ps_wire_shape_release(ps_wire_shape_t *sh);

/* Wire kind of a statistics factor. */
msg_factor_kind_t ps_wire_factor_kind(const kfac_factor_t *f);

/* Unpack validated statistics st into out (a container with the model's
 * layout): out is reset first, then each layer of st is unpacked
 * (kfac_stats_layer_unpack: finite, non-negative diagonals) with n_samples =
 * n_examples; layers st does not carry stay empty. scratch holds
 * sh->max_layer_floats floats (caller-owned). Returns 0, or -EINVAL with the
 * reason in err (out is then reset). */
int ps_wire_stats_unpack(const ps_wire_shape_t *sh, const msg_stats_t *st, double n_examples,
                         kfac_stats_t *out, float *scratch, char *err, size_t err_len);

/* Mark every factor of s empty (n_updates 0, n_samples 0) without touching
 * its data, which the next unpack or merge overwrites. */
void ps_wire_stats_clear(kfac_stats_t *s);

/* Block index of (layer, factor) in k, or -1. */
int ps_wire_block_of(const kfac_opt_t *k, uint32_t layer, uint32_t factor);

/* An inverse holder filled from a validated, successful job result r for a
 * block of dimension n: cholesky: the packed inverse unpacked (both
 * triangles); eigen: eigenvectors and eigenvalues (clamped >= 0). full is
 * scratch of n*n floats. Returns the new holder (caller frees with
 * kfac_inverse_free), or NULL with the reason in err (shape mismatch,
 * non-finite, non-positive diagonal, no memory). */
kfac_inverse_t *ps_wire_result_inverse(const msg_job_result_t *r, int n, float *full, char *err, size_t err_len);

/* Wire method of an inverse method. */
msg_method_t ps_wire_method(kfac_inv_method_t m);

#endif
