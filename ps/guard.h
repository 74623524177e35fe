/* ps/guard.h — kfac-ps's gradient defences: what one member's gradient may
 * put into a round, when a member that does not push leaves it, and the
 * way out of a round in which every gradient was refused.
 *
 * Its state (ps_guard_t, opaque, defined in guard.c): the norms of recently
 * accepted gradients ([ps] grad_norm_max_ratio), how long recently accepted
 * pushes took after their round opened (the stall timeout, [ps]
 * stall_factor), each layer's norms of recently accepted gradients ([ps]
 * grad_clip_ratio), the last good parameters (ps/recover.h) and the
 * recoveries in a row, and the limits of the defences' log lines.
 *
 * Verdicts only: no I/O, no clock (the caller passes times); ps/round_push.c
 * and ps/round.c reject, scale, restore, log and count. Unit-tested without
 * a socket in tests/ps/test_ps_guard.c. Thread: the PS's loop thread.
 */
#ifndef KFAC_PS_GUARD_H
#define KFAC_PS_GUARD_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/ratelimit.h"
#include "ps/member.h"
#include "ps/recover.h"

typedef struct ps_guard ps_guard_t;

/* The defences' log lines, each limited on its own (one a second). */
typedef enum {
    PS_GUARD_LINE_EXAMPLES = 0, /* a push with more examples than a batch */
    PS_GUARD_LINE_NORM,         /* a push whose norm is an outlier */
    PS_GUARD_LINE_CLIP,         /* a layer's slice clipped */
    PS_GUARD_LINE_STALL,        /* a member dropped from the rounds for not pushing */
    PS_GUARD_LINE_ROBUST,       /* too few gradients for the robust rule: their mean used */
    PS_GUARD_LINE_HELDOUT,      /* a push refused against the server's reference gradient (ps/heldout.h) */
    PS_GUARD_LINE_COUNT
} ps_guard_line_t;

/* The result of ps_guard_recover. */
typedef enum {
    PS_GUARD_RECOVER_SAME = 0, /* publish the same parameters again (no outlier refused, or none kept) */
    PS_GUARD_RECOVER_RESTORED, /* the last good parameters were copied back */
    PS_GUARD_RECOVER_GIVE_UP,  /* more than PS_RECOVER_MAX_IN_A_ROW recoveries without a step: end the run */
} ps_guard_recover_t;

/* For a model of n_layers layers, n_params parameters and n_state
 * batch-norm state floats: empty histories, nothing kept. NULL when out
 * of memory. ps_guard_free NULLs the pointer and accepts NULL. */
ps_guard_t *ps_guard_new(int n_layers, size_t n_params, size_t n_state);
void ps_guard_free(ps_guard_t **g_p);

/* May a gradient of n_examples examples and L2 norm `norm` enter the
 * round (ps_member_check_grad over the recent accepted norms; batch: [data]
 * batch; max_ratio: [ps] grad_norm_max_ratio, 0: no norm rule)? *median
 * and *n_recent receive the median of the recent norms (0 while fewer than
 * PS_NORM_MIN_HISTORY) and their count, for the refusal's line. */
ps_grad_verdict_t ps_guard_check_grad(const ps_guard_t *g, uint64_t n_examples, int batch, double norm,
                                      double max_ratio, double *median, int *n_recent);

/* A gradient of norm `norm` was accepted, wait_ns after its round opened
 * (or its Params left, whichever was later; 0: not recorded). */
void ps_guard_accepted(ps_guard_t *g, double norm, uint64_t wait_ns);

/* [ps] grad_clip_ratio = ratio > 0: the slice of layer `layer` of an
 * accepted gradient has norm `norm`. Returns the bound it is to be scaled
 * to (ratio x the median of the layer's recent norms) when norm exceeds it,
 * else 0; the norm, clipped to the bound, joins the layer's history (a
 * member cannot raise the bound by pushing long slices). *median and
 * *n_recent receive the median and the count before this one. */
double ps_guard_clip(ps_guard_t *g, int layer, double norm, double ratio, double *median, int *n_recent);

/* n_layers doubles the push being judged keeps its layers' squared norms
 * in (ps/round_push.c: measured in the pass that checks the gradient, used
 * by the clip); the guard's, never NULL. */
double *ps_guard_layer_n2(ps_guard_t *g);

/* The median of how long recently accepted pushes took (ns; 0 while fewer
 * than PS_NORM_MIN_HISTORY), for the stall timeout (ps_member_stall_ns). */
double ps_guard_push_median_ns(const ps_guard_t *g);

/* A step of version t is taken, steps_done steps done before it, its round
 * having refused norm_rejects gradients as outliers: no recovery in a row
 * any more, and the parameters the step starts from (params, state: n_state
 * floats, may be NULL when 0) are kept as good ones every PS_RECOVER_EVERY
 * steps when no outlier was refused. now_s: the caller's monotonic seconds. */
void ps_guard_step(ps_guard_t *g, int norm_rejects, long steps_done, const float *params, const float *state,
                   long t, double now_s);

/* Every member's gradient of the round was refused, norm_rejects of them
 * as outliers. PS_GUARD_RECOVER_GIVE_UP after PS_RECOVER_MAX_IN_A_ROW such
 * rounds without a step (nothing changed); else the norm histories and the
 * layers' are emptied and, when outliers were refused and good parameters
 * are kept, those are copied into params and state (PS_GUARD_RECOVER_RESTORED:
 * *step and *time_s receive their step and when they were kept; the caller
 * then forgets momentum and the inverses installed since). */
ps_guard_recover_t ps_guard_recover(ps_guard_t *g, int norm_rejects, float *params, float *state, long *step,
                                    double *time_s);

/* The recent accepted norms, borrowed: a checkpoint saves them and a resume
 * writes them back (ps/ckpt.h). */
ps_norm_hist_t *ps_guard_norms(ps_guard_t *g);

/* Each layer's history of (clipped) gradient norms ([ps] grad_clip_ratio),
 * for the checkpoint: the array and its length in *n. */
ps_norm_hist_t *ps_guard_layer_norms(ps_guard_t *g, int *n);

/* The limiter of one of the defences' log lines, borrowed (for
 * ratelimit_ok and ps_io_reject_rl). */
ratelimit_t *ps_guard_rl(ps_guard_t *g, ps_guard_line_t line);

#endif
