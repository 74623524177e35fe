/* common/kfac/kfac_step.h — choosing and applying the K-FAC step: the KL-based step
 * size (Ba et al. sec. 5), KL clipping (Pauloski et al. SC20 Eq. 18),
 * momentum, weight decay and Polyak averaging of the iterates. The interval
 * and damping schedules are kfac_schedule.h; SP-NGD's adaptive refresh is
 * kfac_refresh.h.
 *
 * Conventions: float32 parameter arrays, flat (the net's params layout);
 * scalar arithmetic in double. v is the preconditioned update direction
 * (v = F^-1 g with the damped approximate Fisher), g the gradient; the
 * parameters move by w <- w - step * v (plus momentum). Pointers are
 * borrowed for the call.
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
/* sum_i x_i^2 in double, over 8 partial sums (fixed order, the same on
 * every machine): a single running sum is one dependent add per float,
 * which made kfac-ps's norm checks of a 3.3M-float gradient take ~5 ms
 * each; 8 independent sums let the adds overlap and vectorize. */
double kfac_step_norm2(const float *x, size_t n);

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

/* ---- the update's tail: the passes over the parameters, fused ------------------ */

struct nn_par;

/* How the direction moves the parameters (both with weight decay
 * d = v + wd mask w, on the masked parameters only):
 *   KFAC_STEP_FORM_KFAC: m <- momentum m + step d,  w <- w - m
 *                        (kfac_step_apply with wd_decoupled = wd)
 *   KFAC_STEP_FORM_SGD:  m <- momentum m + d,       w <- w - step m
 *                        (sgd_step, common/nn/sgd.h) */
typedef enum {
    KFAC_STEP_FORM_KFAC = 0,
    KFAC_STEP_FORM_SGD,
} kfac_step_form_t;

/* One update's element-wise tail: weight decay, momentum, the parameters
 * and the Polyak average of the iterates (kfac_step_polyak's rule) in one
 * pass over the n parameters. Every pointer is borrowed for the call. */
typedef struct kfac_step_tail {
    kfac_step_form_t form;
    size_t n;
    float *w;              /* (n) parameters, moved in place */
    float *mom;            /* (n) momentum (SGD's velocity), zero at the start */
    const float *v;        /* (n) direction: the preconditioned gradient, or SGD's gradient */
    const float *wd_mask;  /* (n) 1 where weight decay applies, 0 elsewhere; read only when wd > 0 */
    double step;           /* see the forms */
    double momentum;       /* [0, 1) */
    double wd;             /* >= 0 */
    float *avg;            /* (n) Polyak average, or NULL for none */
    double polyak_decay;   /* [0, 1) */
    long *polyak_count;    /* the average's count (kfac_step_polyak); with avg */
} kfac_step_tail_t;

/* Apply t: every element independently, so the result does not depend on
 * par (common/nn/nn_par.h; NULL: the calling thread), over whose threads
 * the parameters are split in contiguous ranges. Equals kfac_step_apply or
 * sgd_step followed by kfac_step_polyak up to float rounding (one rounding
 * of the average's two terms instead of two). Returns 0, or -EINVAL (NULL
 * arrays, momentum or decay outside [0, 1), wd < 0 or a non-finite step;
 * nothing changed). */
int kfac_step_tail(const kfac_step_tail_t *t, struct nn_par *par);

/* A range [off, off + len) of the parameters: a layer's, for the dot
 * products of kfac_step_dots. */
typedef struct kfac_step_seg {
    size_t off, len;
} kfac_step_seg_t;

/* Floats per chunk of kfac_step_dots: its partial sums are taken over
 * chunks of this many floats at fixed offsets from each segment's start. */
#define KFAC_STEP_DOT_CHUNK 16384

/* Partial sums kfac_step_dots needs for these segments: the sum over them
 * of ceil(len / KFAC_STEP_DOT_CHUNK). */
size_t kfac_step_dots_parts(const kfac_step_seg_t *seg, int n_seg);

/* dot[i] = v^T g over segment i, for every i < n_seg, in double: each
 * chunk's sum as kfac_step_dot, the chunks of a segment then added in
 * order, so that the result does not depend on par's threads (the chunks
 * are split over them; NULL: the calling thread). part: n_part >=
 * kfac_step_dots_parts doubles of scratch. With finite g, a dot is finite
 * exactly when its segment of v is (a product of floats cannot overflow a
 * double). Returns 0 or -EINVAL. */
int kfac_step_dots(const float *v, const float *g, const kfac_step_seg_t *seg, int n_seg, double *dot, double *part,
                   size_t n_part, struct nn_par *par);

/* dst = src (n floats, dst may be NULL: only the check), split over par's
 * threads. Returns the index of the first value of src that is not finite,
 * or n when every one is. */
size_t kfac_step_copy_finite(float *dst, const float *src, size_t n, struct nn_par *par);

#endif
