/* ps/model.h — kfac-ps's model and optimizer: the network (its parameters
 * and batch-norm state), K-FAC or SGD, the Polyak average of the iterates,
 * the update's thread pool and the update step.
 *
 * ps_model_t is not opaque: the parameters, the state and the K-FAC blocks
 * are read in nearly every file of ps/ (Params, statistics, jobs, the
 * checkpoint, the live view). It is written here (set up, updated,
 * released) and through the pointers it hands out: jobs install inverses
 * into kfac's blocks, the round folds statistics into them and averages
 * the batch-norm state into net, a resume restores all of it (ps/ckpt.h).
 * The server holds one (ps_server_t.model).
 *
 * Float32 parameters, row-major as common/nn/nn.h lays them out. Thread:
 * the PS's loop thread (the update fans out to update_par's threads and
 * returns when they are done).
 */
#ifndef KFAC_PS_MODEL_H
#define KFAC_PS_MODEL_H

#include <stddef.h>

#include "common/kfac/kfac_lowrank.h"
#include "common/kfac/kfac_opt.h"
#include "common/nn/nn.h"
#include "common/nn/sgd.h"
#include "common/run/runcfg.h"

typedef struct ps_model {
    net_t *net;                /* params (n_params) and state (n_state) live here */
    kfac_opt_t *kfac;          /* optimizer kfac, else NULL */
    struct nn_par *update_par; /* [ps] update_threads > 1: the update's pool, else NULL */
    sgd_t *sgd;                /* optimizer sgd, else NULL */
    float *sgd_polyak;         /* (n_params) sgd's Polyak average of the iterates, else NULL */
    long sgd_polyak_count;     /* iterates averaged into sgd_polyak so far */
    double sgd_polyak_decay;   /* runcfg_polyak_decay() */
    sgd_lr_sched_t lr;         /* sgd's learning rate by step */
    kfac_step_info_t last;     /* kfac: the last successful update's step size, v^T g and ages (ps/damping.h) */
} ps_model_t;

/* m (caller-allocated, zeroed or not) from the configuration c (borrowed
 * for the call): [model] file loaded, parameters initialized from [run]
 * seed, the update's pool of [ps] update_threads threads (one per core
 * when 0), and K-FAC or SGD with its Polyak average (SGD's momentum must
 * be in [0, 1) and its weight decay >= 0). Returns 0, or -EINVAL /
 * -ENOMEM with the reason in err; ps_model_release frees what was set up
 * either way. */
int ps_model_init(ps_model_t *m, const runcfg_t *c, char *err, size_t err_len);

/* Free what m holds and zero it; accepts a zeroed m. */
void ps_model_release(ps_model_t *m);

/* The update of version t from the mean gradient grad (n_params) and, with
 * K-FAC, the factored fc gradients lowrank (borrowed; may be empty): K-FAC's
 * preconditioned step (kfac_opt_step_lowrank), or SGD's step at the
 * learning rate of step t with its Polyak average (sgd_step's rule; one
 * pass over the parameters after the check, kfac_step_tail), both split
 * over update_par's threads. *step_size
 * receives the step's size (K-FAC: the step taken; SGD: the learning rate).
 * Returns 0; a negative errno when K-FAC's direction is not finite; -ERANGE
 * with *bad_index set when SGD's mean gradient is not (a mean of finite
 * gradients can still overflow). The parameters are unchanged on failure.
 * grad_finite: the caller checked every float of grad finite (the mean's
 * own pass, ps_round_state_average), so the update makes no pass to check. */
int ps_model_update(ps_model_t *m, const float *grad, int grad_finite, const kfac_lowrank_set_t *lowrank, long t,
                    double *step_size, size_t *bad_index);

/* The Polyak average of the iterates (n_params, borrowed), or NULL while
 * none has been taken. */
const float *ps_model_polyak(const ps_model_t *m);

/* Back to older parameters: momentum zeroed, and with K-FAC the inverses
 * installed at since_s or later (the caller's monotonic seconds) forgotten.
 * Returns how many were. */
int ps_model_forget(ps_model_t *m, double since_s);

/* The name of layer `layer` of net (a net_t), NULL when there is none: for
 * the lines of ps_stats_guard_check. */
const char *ps_model_layer_name(const void *net, int layer);

#endif
