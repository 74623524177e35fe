/* common/kfac/kfac_damping.h — adaptive (Levenberg-Marquardt) damping and
 * the staleness-aware scalings of a step: the decisions only, no I/O.
 *
 * 1. The quadratic model of a step. The K-FAC step is w <- w + delta with
 *    delta = -m_t, m_t = mu m_{t-1} + eta v (kfac_step_apply), v = F~^-1 g
 *    and F~ the damped Kronecker-factored curvature the step used (its
 *    inverses; factored Tikhonov damping included). The model's change is
 *        M(delta) - M(0) = g^T delta + 1/2 delta^T F~ delta.
 *    Since F~ v = g, every term comes from scalars the update has anyway,
 *    plus gm = g^T m_{t-1}:
 *        g^T delta       = -(mu gm + eta v^T g)
 *        delta^T F~ delta = q_t = mu^2 q_{t-1} + 2 mu eta gm + eta^2 v^T g,
 *    the recursion exact while F~ stays the same (it changes only when an
 *    inverse is installed or the damping moves: q is then an estimate).
 *    Without momentum the change is -eta (1 - eta/2) v^T g.
 *
 * 2. The rule (Martens & Grosse 2015, sec. 6.5, as docs/experiments.md
 *    section 10.2 states it): every T steps rho = observed / predicted change of
 *    the objective h; rho > 3/4: lambda <- omega lambda; rho < 1/4:
 *    lambda <- lambda / omega; omega = decay^T; lambda kept in [lo, hi].
 *    The observed change comes from noisy mini-batch losses, so it is a
 *    window estimate: with L_s the mean training loss reported at version
 *    s and P_s the model's change of the step s -> s + 1, over the last 2T
 *    versions s0 .. s0 + 2T - 1
 *        observed  = mean(L, s0+T .. s0+2T-1) - mean(L, s0 .. s0+T-1)
 *                  = 1/T sum_i (L_{s0+T+i} - L_{s0+i}),  i = 0 .. T-1
 *        predicted = 1/T sum_i sum_{j = s0+i}^{s0+T+i-1} P_j,
 *    the same linear functional of the per-step changes (each difference of
 *    the observed sum spans T steps), so rho = 1 when the model is right.
 *    Decisions come every T versions (windows overlap by T).
 *
 * 3. Staleness. A gradient a versions old enters the round's mean with
 *    weight 1 / (1 + a) (Zhang et al. 2016's staleness-aware rate). A
 *    step whose inverses are a versions old (mean over blocks) divides the
 *    KL bound by 1 + kappa a (docs/experiments.md, section 10.2,
 *    derives it: a curvature error growing like kappa a lambda bounded by
 *    raising the damping, which a held Cholesky inverse cannot change, is
 *    equivalent to that smaller bound).
 *
 * Conventions: double scalars; float32 arrays row-major; pointers borrowed
 * for the call. Functions return 0 or a negative errno; bad input is
 * rejected, never asserted. Not thread-safe: one owner per kfac_lm_t.
 */
#ifndef KFAC_DAMPING_H
#define KFAC_DAMPING_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_lowrank.h"

/* Longest interval T (the window holds 2T versions). */
#define KFAC_LM_MAX_INTERVAL 1000

/* ---- the quadratic model of a step ------------------------------------------------ */

typedef struct kfac_quad {
    double q; /* delta^T F~ delta of the last step (the recursion's state; 0 at the start) */
} kfac_quad_t;

/* The model's change M(delta) - M(0) of the step just applied, from its
 * step size eta, v^T g (vg), gm = g^T m_{t-1} (the momentum before the
 * step) and the momentum mu; advances q. Non-finite input: NaN returned,
 * q reset to 0. */
double kfac_quad_step(kfac_quad_t *qs, double eta, double vg, double gm, double mu);

/* g^T m for a gradient held as a dense array g (n floats) plus factored
 * fc weight gradients lr (may be NULL; an entry with rows adds
 * sum_r d_r^T M x_r, M its (n_out, n_in) slice of m, whose slice of g is
 * zero). Accumulated in double. NaN when a scratch vector of n_out floats
 * cannot be allocated. */
double kfac_quad_grad_dot(const float *g, const float *m, size_t n, const kfac_lowrank_set_t *lr);

/* ---- the Levenberg-Marquardt rule ------------------------------------------------- */

typedef struct kfac_lm_opts {
    int interval;     /* T, 1 .. KFAC_LM_MAX_INTERVAL */
    double decay;     /* per-step factor, omega = decay^T; in (0, 1) (19/20 in the paper) */
    double lo, hi;    /* bounds of lambda, 0 < lo <= hi */
} kfac_lm_opts_t;

typedef struct kfac_lm {
    kfac_lm_opts_t o;
    double omega;     /* decay^T */
    double *loss;     /* (2T) ring: L_s of the last versions */
    double *pred;     /* (2T) ring: P_s */
    long next;        /* the version the next record must be (-1: none yet) */
    int n;            /* records held (at most 2T) */
    int since;        /* records since the last decision */
    double rho;       /* the last decision's rho (NaN: none yet) */
    double observed, predicted; /* ... and its two halves */
    uint64_t n_up, n_down, n_kept, n_skipped; /* decisions: lambda raised, lowered, kept; windows skipped */
} kfac_lm_t;

/* Check o: 0, or -EINVAL with the reason in err. */
int kfac_lm_check(const kfac_lm_opts_t *o, char *err, size_t err_len);

/* Initialize lm with options o (checked). Returns 0, -EINVAL or -ENOMEM. */
int kfac_lm_init(kfac_lm_t *lm, const kfac_lm_opts_t *o);
void kfac_lm_release(kfac_lm_t *lm);

/* Forget the window (a jump of the version, a restart). */
void kfac_lm_reset(kfac_lm_t *lm);

/* The pure rule: lambda scaled by omega (rho > 3/4) or 1/omega (rho <
 * 1/4), else kept, then clamped to [lo, hi]. Returns the new lambda;
 * non-finite rho keeps lambda (clamped). */
double kfac_lm_rule(double lambda, double rho, double omega, double lo, double hi);

/* Record version t: its mean training loss and the model's change of the
 * step t -> t + 1 (kfac_quad_step). A version that does not follow the
 * previous one starts a new window. Every T records once 2T are held, rho
 * is estimated (see the header comment) and *lambda is updated by
 * kfac_lm_rule; a window whose predicted change is not negative or not
 * finite or below 1e-12 of the mean loss's size (nothing left to
 * predict, e.g. at the optimum), or whose losses are not finite, is
 * skipped (lambda kept).
 * Returns 1 when a decision was made (lambda may be unchanged), 0 when
 * not, -EINVAL for NULL arguments. */
int kfac_lm_observe(kfac_lm_t *lm, long t, double loss, double pred, double *lambda);

/* ---- staleness --------------------------------------------------------------------- */

typedef enum {
    KFAC_AGE_WEIGHT_NONE = 0, /* every gradient weighs its examples */
    KFAC_AGE_WEIGHT_INVERSE,  /* 1 / (1 + age) (Zhang et al. 2016) */
} kfac_age_weight_t;

/* The weight of a gradient age versions old (age < 0 counts as 0). */
double kfac_age_weight(kfac_age_weight_t rule, long age);

/* The factor by which a step's KL bound is divided: 1 + kappa * age
 * (kappa >= 0, age the mean inverse age in versions, < 0 counts as 0). */
double kfac_age_bound_divisor(double kappa, double age);

#endif
