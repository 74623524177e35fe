/* ps/round_state.h — what the parameter server's round of version t owns,
 * apart from the server: the version and step count, the gradients,
 * batch-norm states and statistics of the round summed for the step, the
 * step's bookkeeping, and the encoded Params of the current version. The
 * server holds one ps_round_t (ps_server.round); ps/round.c changes it, the
 * server and ps/report.c read it.
 *
 * The sums are taken in rank order (ps_member_order), whatever order the
 * gradients arrived in, so that a run with a synchronous schedule repeats
 * bit for bit (floating-point addition is not associative).
 *
 * Conventions: float32 sums of n_examples-weighted arrays; loss and counts
 * in double. Threads: the PS's loop thread. No I/O: unit-tested in
 * tests/ps/test_ps_round_state.c.
 */
#ifndef KFAC_PS_ROUND_STATE_H
#define KFAC_PS_ROUND_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_lowrank.h"
#include "common/kfac/kfac_stats.h"
#include "common/net/zloop.h"
#include "common/nn/nn.h"
#include "ps/peers.h"

typedef struct ps_round {
    long t;                        /* version of the current parameters; the round collects gradients of t */
    uint64_t steps_done;
    float *grad_acc;               /* (n_params) sum of n_examples * gradient; the mean after averaging */
    kfac_lowrank_set_t lowrank;    /* the factored fc weight gradients, rows of every worker in rank
                                      order, D scaled as grad_acc (common/kfac/kfac_lowrank.h): the
                                      gradient is grad_acc plus D^T X in those weight slices */
    double acc_n, acc_loss;        /* sum of n_examples, of n_examples * loss */
    uint64_t acc_correct;
    int n_grads;                   /* gradients in */
    double grad_age_sum;           /* sum over them of t - their version ([ps] gradient_staleness) */
    long grad_age_max;
    float *state_acc;              /* (n_state) sum of n_examples * state */
    double state_n;                /* sum of n_examples of the pushes that carried state */
    kfac_stats_t *stats;           /* stats = sync: the round's statistics merged (NULL: optimizer sgd) */
    int stats_have;                /* stats holds something */
    int folded, marked;            /* the round's statistics folded, its blocks marked for refresh */
    int gate_open;                 /* the first step may start */
    uint64_t first_worker_ns;      /* when the first worker joined */
    uint64_t last_step_ns;         /* when the last step was applied (or the start) */
    int consecutive_failures;
    double step_ms_sum, step_ms_max; /* time the update held the loop thread */
    int warned_slow_step;

    /* Params of version pver[i] with want_stats = i, encoded once per
     * version into pbuf[i] (owned; shared by every send of it, and
     * refilled in place for the next version once no send holds it) and
     * plen[i] bytes long; pver[i] = -1: none encoded */
    zloop_buf_t *pbuf[2];
    size_t plen[2];
    long pver[2];
} ps_round_t;

/* Make r for net (borrowed, only its sizes are read): the sums of n_params
 * and n_state floats, zeroed, and with with_stats a statistics container
 * for the round (stats = sync). Version 0, no Params encoded yet. Returns 0
 * or -ENOMEM (r is then released). */
int ps_round_state_init(ps_round_t *r, const net_t *net, int with_stats);

/* Free what r owns and zero it. NULL is a no-op. */
void ps_round_state_release(ps_round_t *r);

/* Free the encoded Params buffers (the next send encodes again, into a new
 * one; a buffer a send still holds goes when that send is written out). */
void ps_round_state_drop_params(ps_round_t *r);

/* Empty the sums, the gradient count and the round's statistics for the
 * next version (the step bookkeeping stays). */
void ps_round_state_clear(ps_round_t *r, const net_t *net);

/* Add worker p's held gradient of this round (and its batch-norm state, if
 * it pushed one) to the sums, weighted by its n_examples, once: p->committed
 * is set, and a second call adds nothing. Nothing happens unless p pushed.
 * Its factored layers' rows are appended to r->lowrank, D scaled by
 * n_examples (out of memory: densified into grad_acc instead). */
void ps_round_state_commit_grad(ps_round_t *r, const net_t *net, ps_peer_t *p);

/* Merge worker p's held statistics of this round into r->stats
 * (kfac_stats_merge, weighted by their sample counts) and mark them used. */
void ps_round_state_commit_stats(ps_round_t *r, ps_peer_t *p);

/* The statistics of every worker whose gradient is held and not summed,
 * in rank order, merged into r->stats. Returns r->stats_have. */
int ps_round_state_merge_stats(ps_round_t *r, const ps_peers_t *peers);

/* The step's gradient: the held gradients not yet summed are added in rank
 * order, then grad_acc (and r->lowrank's D) is divided by acc_n, so that
 * it holds the example-weighted mean gradient. acc_n must be > 0 (a
 * complete round). */
void ps_round_state_average(ps_round_t *r, const net_t *net, const ps_peers_t *peers);

/* The step's gradient, robust to hostile workers ([ps] aggregate): the
 * held gradients not yet summed (dense: the server densifies factored
 * pushes when a robust rule is configured), each its worker's mean over its batch,
 * combined coordinate by coordinate without weights: with trim > 0, the
 * mean of what is left after dropping the trim lowest and trim highest
 * values; with trim < 0, the median (the mean of the middle two for an even
 * count). Loss, accuracy and batch-norm state are summed as for the mean.
 * Needs more than 2 * trim gradients (3 for the median); with fewer it
 * falls back to ps_round_state_average. Returns how many gradients were
 * combined robustly, 0 on the fallback. */
int ps_round_state_robust(ps_round_t *r, const net_t *net, const ps_peers_t *peers, int trim);

/* The coordinate rule above for one coordinate: v[0..k) is sorted in place. */
float ps_round_robust_value(float *v, int k, int trim);

#endif
