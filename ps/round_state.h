/* ps/round_state.h — what the parameter server's round of version t owns,
 * apart from the server: the version and step count, the gradients,
 * batch-norm states and statistics of the round summed for the step, the
 * step's bookkeeping, and the encoded Params of the current version. The
 * server holds one ps_round_t (ps_server.round); every change goes through
 * the functions below (called from ps/round.c, ps/round_push.c, and for a
 * start, a resume or a takeover from ps/server.c, ps/persist.c and
 * ps/hello.c), except the encoded Params, which ps_round_send_params
 * (ps/round.c) fills; the other units read it.
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
#include "ps/member.h"
#include "common/kfac/kfac_damping.h"
#include "ps/peers.h"

struct nn_par;

/* Opaque outside ps/round.c, ps/round_push.c and ps/round_state.c (which
 * include ps/round_int.h, its fields); the other units read it through
 * the getters below and change it through the functions after them. */
typedef struct ps_round ps_round_t;

/* A round for net, as ps_round_state_init; NULL when out of memory. */
ps_round_t *ps_round_new(const net_t *net, int with_stats);
/* Release and free *r_p, then NULL it (NULL: a no-op). */
void ps_round_free(ps_round_t **r_p);

/* ---- getters ---------------------------------------------------------------- */

long ps_round_version(const ps_round_t *r);           /* t: the version the round collects gradients of */
uint64_t ps_round_steps_done(const ps_round_t *r);    /* steps of the run (a resume goes on from its checkpoint's) */
uint64_t ps_round_steps_run(const ps_round_t *r);     /* steps applied by this process */
uint64_t ps_round_last_step_ns(const ps_round_t *r);  /* when the last step was applied (or the start) */
int ps_round_n_grads(const ps_round_t *r);            /* gradients in the round */
int ps_round_gate_open(const ps_round_t *r);          /* the first step may start */
int ps_round_folded(const ps_round_t *r);             /* the round's statistics were folded */
double ps_round_grad_weight_mean(const ps_round_t *r); /* sum of age weight * examples over the examples (1: none) */
/* The time the update held the loop thread: sum and largest, ms. */
void ps_round_step_ms(const ps_round_t *r, double *sum, double *max);

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

/* Open the round of the next version: ps_round_state_clear, no norm
 * outliers yet, opened at now_ns. */
void ps_round_state_open(ps_round_t *r, const net_t *net, uint64_t now_ns);

/* The server starts (or resumes) at now_ns: the last step and the round's
 * opening are then. */
void ps_round_state_start(ps_round_t *r, uint64_t now_ns);

/* A checkpoint's round: version t, steps_done steps, and whether round t's
 * statistics were folded (and its blocks marked) already. */
void ps_round_state_restore(ps_round_t *r, long t, uint64_t steps_done, int folded);

/* The step of version t was applied at now_ns: version t + 1, one more
 * step done and run. */
void ps_round_state_advance(ps_round_t *r, uint64_t now_ns);

/* A gradient of `version` is held for the round (its age t - version is
 * recorded); a held one is dropped again (its worker left, or a restarted
 * worker pushes the same batch again). */
void ps_round_state_grad_in(ps_round_t *r, uint64_t version);
void ps_round_state_grad_out(ps_round_t *r);

/* A gradient of this round was refused as a norm outlier. */
void ps_round_state_norm_reject(ps_round_t *r);

/* A worker was sent Params before the first step at now_ns: the start-up
 * gate's wait counts from the first one. */
void ps_round_state_worker_in(ps_round_t *r, uint64_t now_ns);

/* The round's statistics were folded / its blocks marked for refresh. */
void ps_round_state_set_folded(ps_round_t *r);
void ps_round_state_set_marked(ps_round_t *r);

/* An update failed (non-finite): returns the failures in a row so far.
 * One that did not resets the count. */
int ps_round_state_step_failed(ps_round_t *r);
void ps_round_state_step_ok(ps_round_t *r);

/* The update held the loop thread math_ms: recorded; returns 1 the first
 * time it is above slow_ms (worth one warning), else 0. */
int ps_round_state_step_time(ps_round_t *r, double math_ms, double slow_ms);

/* steps.csv's timing of the round: opened at open_ms, with an evaluation
 * pending (eval_busy) or not; no curvature time yet. */
void ps_round_state_open_timing(ps_round_t *r, double open_ms, int eval_busy);

/* Loop time spent folding statistics or installing an inverse. */
void ps_round_state_add_curv_ms(ps_round_t *r, double ms);

/* ---- when to step ------------------------------------------------------------ */

/* What the round needs now, decided by ps_round_state_decide from the
 * round's own state and the facts of ps_round_view_t; the server acts on
 * it and asks again after FOLD and MARK. */
typedef enum {
    PS_ROUND_WAIT = 0,         /* not complete: gradients, members still computing, the start-up gate */
    PS_ROUND_RECOVER,          /* every member's gradient was refused: publish the next version without a step */
    PS_ROUND_FOLD,             /* complete: fold the round's statistics (once), then decide again */
    PS_ROUND_MARK,             /* ... mark the blocks the refresh policy wants (once), then decide again */
    PS_ROUND_WAIT_INVERSES,    /* ... but an inverse is older than the bound: hand out jobs and wait */
    PS_ROUND_STEP,             /* step now (with curvature: hand out jobs first) */
} ps_round_action_t;

/* The facts beyond the round's own state (plain values; the caller reads
 * them from the peer table, the scheduler and the configuration). */
typedef struct ps_round_view {
    int running;          /* the run still takes steps */
    int first_step;       /* no step applied by this process yet: round 0's start-up gate */
    int n_members;        /* present members of the round */
    int n_waiting;        /* ... whose gradient is still awaited (neither pushed nor refused) */
    int all_refused;      /* there are members and every one was refused this round */
    int workers;          /* [cluster] workers: the gate opens when that many are members */
    uint64_t now_ns;      /* the gate's wait counts from the first worker (first_worker_ns) to now */
    uint64_t timeout_ns;  /* [ps] worker_timeout_ms: the gate opens with fewer after that long */
    int quorum;           /* [ps] quorum: after the first step, this many gradients make a round (0: all) */
    int curvature;        /* K-FAC: statistics are folded and blocks marked before the step */
    int bounded;          /* [kfac] max_inverse_staleness >= 0 */
    int bound_ok;         /* ... and every block's inverse is within it now */
} ps_round_view_t;

typedef struct ps_round_verdict {
    ps_round_action_t action;
    ps_gate_t gate;       /* how the start-up gate opened when it opens now (gate_opens), else PS_GATE_OPEN */
    int gate_opens;       /* the gate opens with this decision: record it (ps_round_state_open_gate) */
} ps_round_verdict_t;

/* When to step, as a function of r and v only (r is not changed).
 * Complete means: a gradient is in and no present member is still awaited,
 * or (after the gate opened) [ps] quorum gradients are in; before the first
 * step the start-up gate must open too (ps_member_gate). A round with no
 * gradient whose members were all refused recovers. With curvature a
 * complete round folds once, marks once, and waits while the staleness
 * bound does not hold. Gradients older than [ps] gradient_staleness never
 * reach the round (ps_member_check_push). */
ps_round_verdict_t ps_round_state_decide(const ps_round_t *r, const ps_round_view_t *v);

/* The start-up gate opened (a verdict with gate_opens). */
void ps_round_state_open_gate(ps_round_t *r);

/* [ps] gradient_age_weight: a gradient a = t - its version old enters the
 * sum with n_examples * kfac_age_weight(rule, a); the mean still divides by
 * the examples (KFAC_AGE_WEIGHT_NONE, the default: weight 1). */
void ps_round_state_set_age_weight(ps_round_t *r, kfac_age_weight_t rule);

/* Add worker p's held gradient of this round (and its batch-norm state, if
 * it pushed one) to the sums, weighted by its n_examples, once: p->mb.committed
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
/* The merged statistics handed over (to be folded on another thread):
 * returned, and `fresh` (same layout, cleared here) becomes the round's
 * buffer for the next merge. */
kfac_stats_t *ps_round_state_swap_stats(ps_round_t *r, kfac_stats_t *fresh);

/* The step's gradient: the held gradients not yet summed are added in rank
 * order, then grad_acc (and r->lowrank's D) is divided by acc_n, so that
 * it holds the example-weighted mean gradient. acc_n must be > 0 (a
 * complete round). The dense gradients go in by one pass over the
 * parameters (each coordinate's sum in rank order, then scaled), split
 * over par's threads (common/nn/nn_par.h, borrowed; NULL: the calling
 * thread); the result does not depend on their number. Returns the index
 * of the mean's first NaN or Inf, n_params when every float is finite (the
 * check is part of the pass). */
size_t ps_round_state_average(ps_round_t *r, const net_t *net, const ps_peers_t *peers, struct nn_par *par);

/* The step's gradient, robust to hostile workers ([ps] aggregate): the
 * held gradients not yet summed (dense: the server densifies factored
 * pushes when a robust rule is configured), each its worker's mean over its batch,
 * combined coordinate by coordinate without weights: with trim > 0, the
 * mean of what is left after dropping the trim lowest and trim highest
 * values; with trim < 0, the median (the mean of the middle two for an even
 * count). Loss, accuracy and batch-norm state are summed as for the mean.
 * Needs more than 2 * trim gradients (3 for the median); with fewer it
 * falls back to ps_round_state_average. The coordinates are split over
 * par's threads as for ps_round_state_average. Returns how many gradients
 * were combined robustly, 0 on the fallback. */
int ps_round_state_robust(ps_round_t *r, const net_t *net, const ps_peers_t *peers, int trim, struct nn_par *par);

/* The coordinate rule above for one coordinate: v[0..k) is sorted in place. */
float ps_round_robust_value(float *v, int k, int trim);

#endif
