/* common/net/compute.h — the compute context of kfac-worker and kfac-statsd:
 * what a Welcome and the effective configuration say to build (the model,
 * its training shard and batcher, the statistics container, the backend),
 * and one mini-batch through it (gradient, factor statistics, or both).
 *
 * Two steps, on two threads: the loop thread copies what it needs from a
 * Welcome into a compute_setup_t (so it may take the next Welcome
 * meanwhile); the compute thread builds a compute_ctx_t from it (loading
 * the data set takes seconds, and a CUDA context belongs to the thread that
 * creates it) and then runs batches with it.
 *
 *     compute_setup_t su;  compute_setup_init(&su, welcome, cfg);  // loop thread
 *     compute_ctx_t cc;    compute_ctx_init(&cc, &su, err, sizeof err);   // compute thread
 *     compute_ctx_batch(&cc, params, state, want_stats, 1, &loss, &hits, &n, err, sizeof err);
 *     compute_ctx_release(&cc); compute_setup_release(&su);
 *
 * Conventions: float32; params and state are the flat arrays of
 * common/nn/nn.h; the statistics are those of common/kfac/kfac_stats.h.
 *
 * Threads: a context is used by one thread at a time (hand it over with
 * compute_ctx_move()); nothing here touches the network connection.
 *
 * Ownership: each struct owns what it points to; errors are negative errno
 * values with a sentence in err.
 */
#ifndef KFAC_NET_COMPUTE_H
#define KFAC_NET_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend.h"
#include "common/base/rng.h"
#include "common/kfac/kfac_stats.h"
#include "common/net/wire.h"
#include "common/nn/data.h"
#include "common/nn/nn.h"
#include "common/run/runcfg.h"
#include "proto/msg.h"

/* What the compute thread needs from a Welcome and the configuration, copied
 * so the loop thread may take the next Welcome meanwhile. Strings are
 * malloc'd and owned (compute_setup_release()). */
typedef struct compute_setup {
    char *model_text;
    uint64_t n_params, n_state;
    dataset_source_t data;    /* [data]: the PS's set and files, this host's dir (plain values) */
    int train_n;              /* 0: all */
    double doubly_min_in;
    nn_conv_engine_t conv_engine; /* [model] conv_engine */
    int batch;                /* examples per batch */
    int augment;              /* crop + flip */
    int with_stats;           /* build a statistics container (optimizer kfac) */
    kfac_fisher_t fisher;     /* [kfac] fisher: sampled labels (true) or the data's (empirical) */
    uint64_t batch_seed;      /* batcher stream (mixed with rank inside the batcher) */
    uint64_t label_seed;      /* sampled labels and dropout */
    int rank, n_ranks;        /* the shard */
    backend_kind_t device;    /* auto, cpu or cuda (the caller sets it) */
    uint64_t skip_batches;    /* batches of the shard's sequence passed over first (0; a gradient worker sets
                                 the Welcome's params_version: batch v of its shard is the one of version v) */
} compute_setup_t;

/* Fill s from w and cfg (both borrowed): the seeds are cfg->seed, the shard
 * (rank, n_ranks) from w (n_ranks 0 becomes 1), batch = cfg->batch,
 * with_stats when the optimizer is kfac. The caller adjusts seeds, shard or
 * batch afterwards. Returns 0; -EINVAL when cfg's [data] source is not
 * usable (logged, naming the key: a configuration error, exit 78), or
 * -ENOMEM (s is then released either way). */
int compute_setup_init(compute_setup_t *s, const msg_welcome_t *w, const runcfg_t *cfg);

/* Free the strings and zero s. NULL is a no-op. */
void compute_setup_release(compute_setup_t *s);

/* The network, its training data, the batcher, the statistics container and
 * the scratch for one batch. Owned by one thread at a time. */
typedef struct compute_ctx {
    net_t *net;
    backend_t *be;            /* where the forward/backward/statistics run (common/backend/backend.h) */
    float *probs;             /* (batch, n_classes) for sampled labels */
    dataset_t *train;
    batcher_t *bat;
    kfac_stats_t *stats;      /* NULL unless setup.with_stats */
    wire_shape_t shape;       /* the model's limits, for msg_validate() of Params */
    rng_t label_rng;
    kfac_fisher_t fisher;
    int batch;
    float *x;                 /* (batch, in_size) */
    int *y, *ys;              /* (batch) data labels, sampled labels */
} compute_ctx_t;

/* Build everything from s (borrowed; loads the data set: seconds, run it on
 * the compute thread). Returns 0, or a negative errno with err; cc is then
 * empty. */
int compute_ctx_init(compute_ctx_t *cc, const compute_setup_t *s, char *err, size_t err_len);

/* Move src into dst (dst released first; src left empty). The context holds
 * a pointer into itself (shape.limits.model), so never copy it by
 * assignment: move it with this. */
void compute_ctx_move(compute_ctx_t *dst, compute_ctx_t *src);

/* Free everything and zero cc. NULL and an empty cc are no-ops. */
void compute_ctx_release(compute_ctx_t *cc);

/* One mini-batch with params (n_params floats) and state (n_state floats or
 * NULL), both borrowed: the next batch of the shard, a training forward pass,
 * then
 *   stats: labels sampled from the model (true Fisher) or the data labels
 *          (empirical), a backward pass with them and kfac_stats_compute()
 *          into cc->stats (the order of common/run/train.c);
 *   grad:  the backward pass with the data labels: cc->net->grads holds the
 *          mean gradient, *loss / *n_correct the batch's mean loss / hits.
 * *n_examples receives the batch size. Returns 0 or a negative errno with
 * err. */
int compute_ctx_batch(compute_ctx_t *cc, const float *params, const float *state, int stats, int grad,
                      double *loss, int *n_correct, int *n_examples, char *err, size_t err_len);

#endif
