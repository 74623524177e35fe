/* ps/round_int.h — the fields of ps_round_t (ps/round_state.h), private
 * to the round's own files: ps/round.c, ps/round_push.c, ps/round_state.c
 * and their unit tests (tools/check-layers.sh holds the rule). Every other
 * unit reads the round through ps/round_state.h's getters. */
#ifndef KFAC_PS_ROUND_INT_H
#define KFAC_PS_ROUND_INT_H

#include "ps/round_state.h"

struct ps_round {
    long t;                        /* version of the current parameters; the round collects gradients of t */
    uint64_t steps_done;           /* steps of the run (a resume goes on from the checkpoint's) */
    uint64_t steps_run;            /* steps applied by this process: round 0's rules (every worker that asks is a
                                      member, the start-up gate) hold for the first round after a resume too */
    float *grad_acc;               /* (n_params) sum of n_examples * gradient; the mean after averaging */
    int acc_zero;                  /* grad_acc reads as zeros (cleared without a pass: the first sum writes it) */
    kfac_lowrank_set_t lowrank;    /* the factored fc weight gradients, rows of every worker in rank
                                      order, D scaled as grad_acc (common/kfac/kfac_lowrank.h): the
                                      gradient is grad_acc plus D^T X in those weight slices */
    double acc_n, acc_loss;        /* sum of n_examples, of n_examples * loss */
    double acc_wn;                 /* sum of age weight * n_examples ([ps] gradient_age_weight) */
    kfac_age_weight_t age_rule;    /* [ps] gradient_age_weight */
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
    int norm_rejects;              /* gradients of this round refused as norm outliers */
    uint64_t open_ns;              /* when the round of version t opened (clock_now_ns; stall rule, push times) */
    double open_ms;                /* steps.csv timing: when the round of t opened (clock_now_ms; 0: the first) */
    double curv_ms;                /* ... loop time on folds and installs since */
    int eval_busy;                 /* ... an evaluation was pending when it opened */

    /* Params of version pver[i] with want_stats = i, encoded once per
     * version into pbuf[i] (owned; shared by every send of it, and
     * refilled in place for the next version once no send holds it) and
     * plen[i] bytes long; pver[i] = -1: none encoded */
    zloop_buf_t *pbuf[2];
    size_t plen[2];
    long pver[2];
};

#endif
