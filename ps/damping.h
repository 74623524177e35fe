/* ps/damping.h — [kfac] damping_rule = adaptive and [kfac]
 * inverse_age_damping in the parameter server: the Levenberg-Marquardt rule
 * and the staleness-aware KL bound of common/kfac/kfac_damping.h, fed with
 * the server's steps.
 *
 * How the damping flows. [kfac] damping and its milestones give the
 * scheduled damping of step t (ps_sched_at); under the adaptive rule the
 * damping in force is psi times it, clamped to [damping_min, damping_max],
 * where psi (1 at the start) is what the rule's decisions multiplied in.
 * ps_round_schedule writes that value into the optimizer's opts.damping
 * at every round's start, exactly where the milestones' value went: the
 * next inversion jobs are cut with it (each job keeps the damping it was
 * cut with, which the result is checked against: an inverse computed with
 * an older damping stays valid), and the eigen method's steps use it at
 * once.
 *
 * Per step: before the update, g^T m_{t-1} (the round's mean gradient, its
 * factored rows included, against the momentum) for the quadratic model,
 * and the KL bound divided by 1 + kappa * mean inverse age; after it, the
 * model's change of the step and the round's mean training loss go into
 * the rule's window (kfac_lm_observe).
 *
 * Threads: the PS's loop thread. Ownership: ps_damping_t is the caller's
 * (ps_damping_free); the optimizer and arrays passed are borrowed for the
 * call. A resumed run starts psi from the checkpoint's damping over the
 * scheduled one (ps_damping_at's first call), its window empty.
 */
#ifndef KFAC_PS_DAMPING_H
#define KFAC_PS_DAMPING_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_damping.h"
#include "common/kfac/kfac_lowrank.h"
#include "common/kfac/kfac_opt.h"
#include "common/run/runcfg.h"

typedef struct ps_damping ps_damping_t;

/* From the configuration ([kfac] damping_rule and its keys, step_rule,
 * kl_c0, kl_clip, momentum, inverse_age_damping). Returns NULL with the
 * reason in err (bad options, out of memory). */
ps_damping_t *ps_damping_new(const runcfg_t *c, char *err, size_t err_len);
void ps_damping_free(ps_damping_t **d_p);

/* The damping in force at a step whose scheduled damping (ps_sched_at) is
 * scheduled: scheduled under damping_rule = fixed, psi * scheduled clamped
 * to the bounds under adaptive. current is the optimizer's damping now
 * (a checkpoint's, before the first call): the first call under adaptive
 * starts psi from current / scheduled. */
double ps_damping_at(ps_damping_t *d, double scheduled, double current);

/* Before the update of version t: with adaptive, g^T m_{t-1} from grad
 * (n_params floats, the round's mean) and lr (its factored rows, may be
 * NULL) against k->mom; with inverse_age_damping, k's KL bound (opts.kl_c0
 * or opts.kl_clip) set to the configured one over 1 + kappa * the mean
 * inverse age at t. */
void ps_damping_before_step(ps_damping_t *d, kfac_opt_t *k, const float *grad, const kfac_lowrank_set_t *lr, long t);

/* After a successful update of version t (info: kfac_opt_step's) with the
 * round's mean training loss: the model's change into the window; a
 * decision updates psi (the next ps_damping_at applies it). Returns 1
 * when a decision was made, else 0. */
int ps_damping_after_step(ps_damping_t *d, long t, double loss, const kfac_step_info_t *info);

/* The state was restored from a checkpoint: the next ps_damping_at starts
 * psi again from the optimizer's (restored) damping; the window restarts. */
void ps_damping_restart(ps_damping_t *d);

/* The update of version t failed (nothing moved): the window restarts. */
void ps_damping_step_failed(ps_damping_t *d);

/* The last decision's rho (NaN: none yet), the divisor of the last step's
 * KL bound (1: off), the rule's counts. */
double ps_damping_rho(const ps_damping_t *d);
double ps_damping_bound_divisor(const ps_damping_t *d);
const kfac_lm_t *ps_damping_lm(const ps_damping_t *d); /* NULL under fixed */
int ps_damping_adaptive(const ps_damping_t *d);

/* For the run's summary line: ", adaptive damping L (N decisions: ...)"
 * and ", KL bound divided by inverse age: mean X, max Y over N steps" as
 * they apply (damping: the one in force), else "". */
void ps_damping_summary(const ps_damping_t *d, double damping, char *buf, size_t len);

#endif
