/* common/kfac/kfac_step.h — choosing and applying the K-FAC step: the KL-based step
 * size (Ba et al. sec. 5), KL clipping (Pauloski et al. SC20 Eq. 18),
 * momentum, weight decay, Polyak averaging of the iterates, the factor /
 * inverse update-interval and damping schedules (Pauloski et al. sec. V-C),
 * and SP-NGD's adaptive refresh of stale statistics (Osawa et al.
 * Algorithm 1-2).
 *
 * Conventions: float32 parameter arrays, flat (the net's params layout);
 * scalar arithmetic in double. v is the preconditioned update direction
 * (v = F^-1 g with the damped approximate Fisher), g the gradient; the
 * parameters move by w <- w - step * v (plus momentum). Pointers are
 * borrowed for the call unless stated; kfac_refresh_t owns its history.
 * Functions return 0 or a negative errno; bad input is rejected, never
 * asserted.
 */
#ifndef KFAC_STEP_H
#define KFAC_STEP_H

#include <stddef.h>

/* ---- KL-based step size (Ba et al. sec. 5) ----------------------------------- */

/* c_k = c0 * zeta^k with k = floor(t / decay_every), t >= 0 the step;
 * decay_every <= 0 means no decay (c0). */
double kfac_step_kl_c(double c0, double zeta, long t, long decay_every);

/* Ba et al. Eq. 14 with the approximate Fisher (sec. 5, last paragraph):
 *     eta = min(eta_max, sqrt(c / (v^T F^ v))),  v^T F^ v = v^T g,
 * so that the squared (approximate) Fisher norm of the step eta v, i.e.
 * twice the second-order KL estimate of Eq. 13, is at most c.
 * vg = v^T g summed over all preconditioned parameters.
 * Safe handling: vg == 0 (a zero update) gives eta_max; vg < 0 (not
 * possible with a positive-definite damped preconditioner, so only rounding
 * or a stale mix) uses |vg|, the conservative magnitude; NaN/Inf vg, c or
 * eta_max give *eta = 0 and -EDOM (skip the step). c must be >= 0 and
 * eta_max > 0, else -EINVAL (*eta = 0). */
int kfac_step_kl_eta(double vg, double c, double eta_max, double *eta);

/* Pauloski et al. (SC20) Eq. 18:
 *     nu = min(1, sqrt(kl_clip / (lr^2 * sum_i |v_i^T g_i|)))
 * with vg[i] = v_i^T g_i per layer (absolute values summed, as the equation
 * writes). The update is then lr * nu * v. A zero sum gives nu = 1.
 * Returns 0; -EDOM (nu = 0) for non-finite input; -EINVAL for n_layers < 0,
 * vg NULL with n_layers > 0, lr <= 0 or kl_clip < 0. */
int kfac_step_kl_clip(const double *vg, int n_layers, double lr, double kl_clip, double *nu);

/* v^T g accumulated in double (cblas_dsdot). */
double kfac_step_dot(const float *v, const float *g, size_t n);

/* ---- weight decay, momentum ------------------------------------------------------ */

typedef enum {
    /* L2 term in the objective, gradient side only: g <- g + wd w before
     * preconditioning (kfac_step_add_weight_decay). */
    KFAC_WD_GRADIENT = 0,
    /* L2 term in the objective with its curvature folded into the damping
     * (Martens & Grosse 2015; Ba et al. sec. 2.2 note): g <- g + wd w and
     * lambda <- lambda + wd (kfac_step_effective_damping). */
    KFAC_WD_DAMPING,
    /* Decoupled: wd w added to the preconditioned direction, not
     * preconditioned (kfac_step_apply's wd_decoupled), as an SGD optimizer
     * after a K-FAC preconditioner does. */
    KFAC_WD_DECOUPLED,
} kfac_wd_mode_t;

/* g <- g + wd w (n floats). */
void kfac_step_add_weight_decay(float *g, const float *w, size_t n, float wd);

/* Damping actually added to the Fisher: damping + wd for KFAC_WD_DAMPING,
 * damping otherwise. */
double kfac_step_effective_damping(double damping, double wd, kfac_wd_mode_t mode);

/* Heavy-ball momentum step on n parameters:
 *     m <- momentum m + step (v + wd_decoupled w),   w <- w - m
 * (the step size multiplies only the new direction, so a step size that
 * changes every iteration, as the KL rule's does, is applied once; for a
 * constant step this is the usual w <- w - step (momentum buffer)).
 * mom (n) is the caller-owned momentum buffer, zero at the start.
 * Returns 0 or -EINVAL (NULL, momentum outside [0, 1), non-finite step). */
int kfac_step_apply(float *w, float *mom, const float *v, size_t n, double step, double momentum,
                    double wd_decoupled);

/* Exponentially decayed Polyak average of the iterates (Ba et al. sec. 6,
 * after Martens & Grosse 2015) for evaluation:
 *     avg <- decay avg + (1 - decay) w,  and avg = w on the first call
 * (*count == 0). *count counts the calls. decay in [0, 1).
 * Returns 0 or -EINVAL. */
int kfac_step_polyak(float *avg, const float *w, size_t n, double decay, long *count);

/* ---- schedules (Pauloski et al. sec. V-C) ------------------------------------------- */

#define KFAC_SCHEDULE_MAX 16

/* Factor and inverse update intervals and damping as functions of the step.
 * At every interval milestone passed (t >= milestone) both intervals are
 * multiplied by interval_factor (rounded, at least 1); at every damping
 * milestone the damping is multiplied by damping_factor. Milestones are
 * steps, strictly increasing. Pauloski et al. keep the factor interval a
 * tenth of the inverse interval (factors every kfac-update-freq / 10 steps);
 * here the two base intervals are independent. */
typedef struct kfac_schedule {
    int fac_interval;            /* steps between factor (statistics) updates at t = 0, >= 1 */
    int inv_interval;            /* steps between inverse updates at t = 0, >= 1 */
    double damping;              /* lambda at t = 0, > 0 */
    int n_interval_milestones;
    long interval_milestones[KFAC_SCHEDULE_MAX];
    double interval_factor;      /* > 0 */
    int n_damping_milestones;
    long damping_milestones[KFAC_SCHEDULE_MAX];
    double damping_factor;       /* > 0 */
} kfac_schedule_t;

/* Validate a schedule (positive intervals and factors, increasing
 * milestones, counts within KFAC_SCHEDULE_MAX). Returns 0 or -EINVAL. */
int kfac_schedule_check(const kfac_schedule_t *s);

/* Intervals and damping in force at step t >= 0 (any output may be NULL).
 * Returns 0 or -EINVAL. */
int kfac_schedule_at(const kfac_schedule_t *s, long t, int *fac_interval, int *inv_interval,
                     double *damping);

/* Is an update with this interval due at step t (t % interval == 0)? */
static inline int kfac_schedule_due(long t, int interval) {
    return interval > 0 && t >= 0 && t % interval == 0;
}

/* ---- SP-NGD adaptive refresh (Algorithm 2) ----------------------------------------- */

/* Relative Frobenius distance ||x - ref||_F / ||ref||_F (n floats, double
 * accumulation): SP-NGD's similarity measure, "x is similar to ref" when it
 * is < alpha. ref == 0: 0 if x == 0 too, else +Inf. */
double kfac_refresh_distance(const float *x, const float *ref, size_t n);

/* One call of Algorithm 2. x is the statistic just recomputed, x1 the
 * previous recorded value X_{-1}, x2 the one before X_{-2} (NULL when that
 * history does not exist yet: treated as not similar). On entry *delta is
 * the last interval Delta_{-1} and *delta_prev the one before Delta_{-2};
 * on return *delta is the next interval and *delta_prev the last one:
 *     X not similar to X_{-1}:        Delta = max(1, floor(Delta_{-1} / 2))
 *     else X not similar to X_{-2}:   Delta = Delta_{-1}
 *     else                            Delta = Delta_{-1} + Delta_{-2}
 * with "similar" meaning kfac_refresh_distance(x, x_k) < alpha (alpha > 0,
 * SP-NGD uses 0.1). Intervals must be >= 1. Returns 0 or -EINVAL. */
int kfac_refresh_interval(const float *x, const float *x1, const float *x2, size_t n, double alpha,
                          int *delta, int *delta_prev);

/* Algorithm 1's bookkeeping for one statistic X: its history (owned
 * copies of the last two recorded values), the intervals, and the step at
 * which X is next refreshed. */
typedef struct kfac_refresh {
    size_t n;          /* floats per value (a matrix, or a summary of it) */
    double alpha;      /* similarity threshold */
    float *x1, *x2;    /* (n) X_{-1}, X_{-2}, owned */
    int have;          /* recorded values held (0, 1, 2) */
    int delta;         /* current interval */
    int delta_prev;    /* interval before it */
    long next;         /* step t_X of the next refresh */
} kfac_refresh_t;

/* A tracker for n-float values, first refresh at step t0, intervals 1.
 * Returns NULL on bad arguments (n == 0, alpha <= 0) or out of memory. */
kfac_refresh_t *kfac_refresh_new(size_t n, double alpha, long t0);

/* Free; NULL is a no-op and *r_p is set to NULL. */
void kfac_refresh_free(kfac_refresh_t **r_p);

/* Is X due for a refresh at step t (t >= next)? */
static inline int kfac_refresh_due(const kfac_refresh_t *r, long t) {
    return r && t >= r->next;
}

/* Record the value x just computed at step t: run Algorithm 2 against the
 * history, set next = t + Delta, and shift the history (X_{-2} <- X_{-1},
 * X_{-1} <- x). Returns the new interval (>= 1) or -EINVAL. */
int kfac_refresh_record(kfac_refresh_t *r, const float *x, long t);

#endif
