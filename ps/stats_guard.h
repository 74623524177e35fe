/* ps/stats_guard.h — what one statistics push may put into the curvature.
 *
 * A kfac-statsd's push is, per factor, the second moment of one batch: a
 * Gram matrix (1/n) sum_k v_k v_k^T, which is positive semi-definite. The
 * fold gives it weight 1 - stat_decay, so a push that is not such a matrix,
 * or is far larger or smaller than the recent ones, moves the curvature
 * where no batch could: indefinite factors make the honest Cholesky jobs
 * fail, huge ones shrink every step of the layer, tiny ones make the
 * inverse the damping's alone. Checked before the fold, per factor:
 *   - every 2 x 2 principal minor of a Gram matrix is >= 0:
 *     F_ij^2 <= F_ii F_jj (a necessary condition for positive
 *     semi-definiteness, O(n^2), as cheap as the fold itself; an indefinite
 *     matrix whose every 2 x 2 minor is >= 0 passes it: the trace rule and
 *     one push per version bound what such a push can do);
 *   - its trace (a Gram matrix's: the mean squared norm of its vectors) at
 *     most [ps] stats_trace_max_ratio times the median of that factor's
 *     last accepted traces (no rule before PS_NORM_MIN_HISTORY are
 *     recorded). No lower bound: an honest output-gradient factor of the
 *     true Fisher falls 20x below its median when the model is sure of a
 *     batch, and a small push only moves the factor by its fold weight.
 *     The default (1000) is far above what honest statistics do: the demo
 *     model's fc2 input factor grew 172x over its first 8 pushes. A bound
 *     that honest statistics cross refuses them for good (a refused push
 *     does not enter the history), so it must stay generous.
 * Finiteness and non-negative diagonals are checked by the unpack
 * (kfac_stats_layer_unpack). Owns only the trace histories; no I/O. */
#ifndef KFAC_PS_STATS_GUARD_H
#define KFAC_PS_STATS_GUARD_H

#include <stddef.h>

#include "common/kfac/kfac_stats.h"
#include "ps/member.h"

typedef struct ps_stats_guard ps_stats_guard_t;

/* A guard for statistics laid out as `layout` (the PS's statistics
 * scratch); NULL when out of memory. */
ps_stats_guard_t *ps_stats_guard_new(const kfac_stats_t *layout);
void ps_stats_guard_free(ps_stats_guard_t *g);

/* Judge the factors of st that hold a value (n_updates > 0). Returns 0 when
 * all may be folded; else -1 with the layer (st's layer index, named by
 * layer_name when not NULL), the factor and the broken rule in err.
 * max_ratio: [ps] stats_trace_max_ratio (0: no trace rule). */
int ps_stats_guard_check(const ps_stats_guard_t *g, const kfac_stats_t *st, double max_ratio,
                         const char *(*layer_name)(const void *ctx, int layer), const void *ctx, char *err,
                         size_t err_len);

/* Record the traces of st's factors that hold a value (after the fold). */
void ps_stats_guard_accept(ps_stats_guard_t *g, const kfac_stats_t *st);

/* The trace histories, one per factor (layer by layer, in the layout's
 * order), for the checkpoint: the array and its length in *n. */
ps_norm_hist_t *ps_stats_guard_hists(ps_stats_guard_t *g, int *n);

/* The trace of factor f (SYM: sum of the diagonal; DIAG2X2: sum of both
 * diagonals of every 2 x 2 block). */
double ps_stats_guard_trace(const kfac_factor_t *f);

#endif
