/* common/kfac/kfac_opt.h — the K-FAC optimizer: running averages of every
 * layer's Kronecker factors, the newest damped inverse of every factor with
 * the statistics version it came from, and the update step
 * (precondition -> step size -> momentum -> Polyak average).
 *
 * It is the one piece both the in-process trainer (tools/kfac-train) and the
 * parameter server (ps/) drive; the difference is only who computes the
 * inverses (kfac_opt_invert_block here, or an inverse daemon whose result is
 * installed with kfac_opt_block_install).
 *
 * Blocks. Every symmetric factor that needs an inverse is a "block", the
 * unit of inversion work: fc/conv have blocks A and G; doubly-factored fc
 * layers have K, Psi, G and the bias's own block Gbias; batch-norm layers
 * have none (their 2x2 unit-wise blocks are inverted in closed form during
 * the step). A block's cost is ~ n^3.
 *
 * Damping (lambda = opts.damping, plus weight decay when wd_mode is
 * KFAC_WD_DAMPING):
 *  - CHOLESKY method: factored Tikhonov. A gets pi sqrt(lambda), G gets
 *    sqrt(lambda) / pi with pi = kfac_pi_trace(A, G) computed when the job
 *    is cut; doubly-factored K, Psi, G get pi_i lambda^(1/3) (Ba Eq. 12);
 *    Gbias gets lambda.
 *  - EIGEN method: the blocks hold eigendecompositions; lambda enters at
 *    preconditioning time as 1 / (v_G v_A^T + lambda) (Pauloski Eq. 13-15).
 *
 * Versions. The caller tags every statistics batch with the parameter
 * version it was computed at (stats_version). A block's factor_version is
 * the newest stats_version folded into it; an inverse remembers the
 * factor_version it was computed from, so its age at step t is
 * t - inv_version. Blocks with no inverse yet precondition with the damped
 * identity (opts.identity_mode).
 *
 * Low-rank gradients. kfac_opt_step_lowrank takes some fc layers' weight
 * gradients as rows D and X (dW = D^T X, kfac_lowrank.h) and
 * preconditions them in factored form where that pays and is exact
 * (each factor applied on its own), densifying otherwise.
 *
 * Threads: not thread-safe. kfac-ps splits it between two threads: its
 * curvature thread folds and cuts jobs (avg, the blocks' factor_version,
 * n_folds), the loop thread steps and installs (the blocks' inverses,
 * momentum, Polyak average, the batch-norm view); see ps/curv.h. Ownership: the optimizer borrows net for its
 * lifetime (layout only) and owns everything else.
 */
#ifndef KFAC_OPT_H
#define KFAC_OPT_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_lowrank.h"
#include "common/kfac/kfac_precond.h"
#include "common/kfac/kfac_stats.h"
#include "common/kfac/kfac_step.h"
#include "common/nn/nn.h"

typedef enum {
    KFAC_STEP_RULE_KL = 0,   /* Ba et al. sec. 5: eta = min(eta_max, sqrt(c / v^T g)) */
    KFAC_STEP_RULE_KL_CLIP,  /* Pauloski Eq. 18: lr * min(1, sqrt(kl_clip / (lr^2 sum|v^T g|))) */
    KFAC_STEP_RULE_FIXED,    /* lr */
} kfac_step_rule_t;

typedef struct kfac_opts {
    kfac_inv_method_t method;   /* cholesky | eigen */
    double damping;             /* lambda */
    double stat_decay;          /* running-average decay d, F <- d F + (1-d) F_new */
    kfac_step_rule_t step_rule;
    double lr;                  /* FIXED and KL_CLIP: learning rate */
    double eta_max;             /* KL: largest step */
    double kl_c0, kl_zeta;      /* KL: c_k = c0 zeta^k ... */
    long kl_decay_every;        /* ... k = floor(t / kl_decay_every) */
    double kl_clip;             /* KL_CLIP: the bound */
    double momentum;
    double weight_decay;
    kfac_wd_mode_t wd_mode;
    double polyak_decay;        /* Polyak average of the iterates */
    kfac_identity_mode_t identity_mode; /* layers without inverses yet */
} kfac_opts_t;

/* Defaults: cholesky, damping 1e-3, decay 0.95, KL rule (eta_max 1, c0 1e-2,
 * zeta 1, no decay), momentum 0.9, wd 0 (gradient), Polyak 0.99, identity
 * = plain gradient. */
void kfac_opts_default(kfac_opts_t *o);

/* Parse "kl" | "kl_clip" | "fixed"; 0 or -EINVAL. */
int kfac_step_rule_parse(const char *s, kfac_step_rule_t *out);
const char *kfac_step_rule_name(kfac_step_rule_t r);

typedef struct kfac_block {
    int stat;               /* slot in stats->layers */
    int factor;             /* factor index within that layer */
    int layer;              /* net layer index */
    int n;                  /* dimension */
    double cost;            /* n^3 */
    long factor_version;    /* newest stats_version folded in (-1: empty) */
    kfac_inverse_t *inv;    /* newest inverse (inv->valid false until one exists) */
    long inv_version;       /* factor_version the inverse came from (-1: none) */
    double inv_time_s;      /* monotonic seconds when installed */
    uint64_t n_installed;   /* inverses installed */
} kfac_block_t;

typedef struct kfac_opt {
    kfac_opts_t opts;
    const net_t *net;          /* borrowed */
    kfac_stats_t *avg;         /* running averages */
    int n_blocks;
    kfac_block_t *blocks;      /* (n_blocks) */
    float *mom;                /* (n_params) momentum */
    float *polyak;             /* (n_params) Polyak average */
    long polyak_count;
    float *v;                  /* (n_params) preconditioned direction of the last step (scratch; the
                                  decoupled weight decay is added in the tail, not here) */
    float *g;                  /* (n_params) the gradient with densified low-rank entries (scratch; a
                                  step without them reads the caller's gradient instead) */
    float *wd_mask;            /* (n_params) 1 on fc/conv weights */
    float *work, *vbuf, *ubuf; /* preconditioning scratch */
    size_t work_len, vbuf_len;
    kfac_inverse_stats_t inv_stats;
    uint64_t n_folds;
    uint64_t n_identity_layers; /* layer-steps preconditioned by the identity */
    uint64_t n_precond_errors;  /* layer-steps whose preconditioning failed (identity used) */
    struct nn_par *par;         /* kfac_opt_set_par: borrowed pool of the preconditioning, or NULL */
    float *lr_buf;              /* (lr_len) scratch of the low-rank path, grown on demand */
    size_t lr_len;
    uint64_t n_lowrank_layers;  /* layer-steps preconditioned in factored (low-rank) form */
    /* kfac_opt_bn_view: the batch-norm factors the step reads, a copy kept
     * apart from avg (NULL: the step reads avg) */
    float *bn_view;             /* (bn_len) */
    size_t bn_len;
    size_t *bn_off;             /* (avg->n_layers) offset of slot s's factor in bn_view (SIZE_MAX: not batch norm) */
    unsigned char *bn_has;      /* (avg->n_layers) the copy holds statistics for slot s */
    kfac_step_seg_t *seg;       /* (avg->n_layers) each stats slot's parameters: weights, then bias */
    kfac_step_seg_t *seg_step;  /* (avg->n_layers) scratch: the step's dense part of each slot (the bias
                                   alone where the weights are preconditioned in factored form) */
    double *seg_vg;             /* (avg->n_layers) scratch: v^T g of each slot */
    double *dot_part;           /* (n_dot_part) scratch of kfac_step_dots */
    size_t n_dot_part;
} kfac_opt_t;

/* New optimizer for net (borrowed, must outlive it). Returns NULL with a
 * message in err on bad options or no memory. */
kfac_opt_t *kfac_opt_new(const net_t *net, const kfac_opts_t *opts, char *err, size_t err_len);
void kfac_opt_free(kfac_opt_t **k_p);

/* Fold one batch of statistics (same layout as k->avg, e.g. from
 * kfac_stats_compute or kfac_stats_unpack) computed at parameter version
 * stats_version into the running averages. Every factor must be finite,
 * else nothing changes and -EDOM is returned. Returns 0 or -EINVAL/-EDOM. */
int kfac_opt_fold(kfac_opt_t *k, const kfac_stats_t *batch, long stats_version);

/* The current factor of block b and the damping to add to it before
 * inversion (see the header comment), copied into F (n*n floats, full
 * symmetric) — the content of an inversion job. *factor_version receives
 * the block's factor_version. Returns 0, -EINVAL, or -ENODATA (no statistics
 * yet). */
int kfac_opt_block_job(const kfac_opt_t *k, int b, float *F, float *damping, long *factor_version);

/* kfac_opt_block_job with the damping lambda given instead of
 * opts.damping (a caller whose damping changes on another thread passes
 * the value it read there). */
int kfac_opt_block_job_at(const kfac_opt_t *k, int b, double lambda, float *F, float *damping, long *factor_version);

/* Install an inverse computed from factor_version into block b (copied).
 * An inverse older than the one held is ignored (returns 1). Returns 0, 1,
 * or a negative errno (shape mismatch, not finite). */
int kfac_opt_block_install(kfac_opt_t *k, int b, const kfac_inverse_t *inv, long factor_version);

/* Install by exchange: *inv (same n, valid) becomes block b's inverse and
 * *inv receives the holder it replaces (no copy, no allocation). An
 * inverse older than the one held is ignored (returns 1, *inv unchanged).
 * Returns 0, 1 or -EINVAL. */
int kfac_opt_block_swap(kfac_opt_t *k, int b, kfac_inverse_t **inv, long factor_version);

/* Batch-norm factors kept apart from the running averages, for a caller
 * that folds statistics on one thread and steps on another: after
 * kfac_opt_bn_view(k) the step reads the batch-norm factors from a copy
 * that only kfac_opt_bn_publish changes. kfac_opt_bn_snapshot copies
 * avg's batch-norm factors (on the folding thread) into dst
 * (kfac_opt_bn_len(k) floats, plus one count per layer slot in has);
 * kfac_opt_bn_publish copies such a snapshot into the view (on the
 * stepping thread). Returns 0 or -ENOMEM. */
int kfac_opt_bn_view(kfac_opt_t *k);
size_t kfac_opt_bn_len(const kfac_opt_t *k);
void kfac_opt_bn_snapshot(const kfac_opt_t *k, float *dst, unsigned char *has);
void kfac_opt_bn_publish(kfac_opt_t *k, const float *src, const unsigned char *has);

/* Compute block b's inverse here (job + kfac_inverse_compute + install).
 * Returns 0, -ENODATA (no statistics), or the inverse's error (the previous
 * inverse is kept). */
int kfac_opt_invert_block(kfac_opt_t *k, int b);

/* All blocks, in order; returns the number of failures. */
int kfac_opt_invert_all(kfac_opt_t *k);

typedef struct kfac_step_info {
    double step;            /* the step size applied to v */
    double vg;              /* v^T g */
    int n_layers_identity;  /* layers without (usable) inverses this step */
    double inv_age_mean;    /* mean over blocks with inverses of t - inv_version */
    long inv_age_max;       /* max of the same (-1: no inverses yet) */
    int n_blocks_missing;   /* blocks without an inverse */
} kfac_step_info_t;

/* Split the update over a pool's threads (common/nn/nn_par.h; borrowed,
 * must outlive k or be unset with NULL): the preconditioning's large
 * products, and the passes over all parameters (the gradient's check, the
 * dot products v^T g, and one fused pass of weight decay, momentum,
 * parameters and Polyak average, kfac_step_tail). The result does not
 * depend on the thread count beyond the BLAS kernels' float rounding of
 * the products. NULL (the default) computes on the caller's thread.
 * kfac_opt_step must then not run while another user of the same pool
 * runs it. */
void kfac_opt_set_par(kfac_opt_t *k, struct nn_par *par);

/* One update at parameter version t: params (n_params) move using grads
 * (n_params, averaged gradient, read only). Non-finite gradients are
 * rejected (-EDOM) without changing anything. Returns 0 or a negative
 * errno; info (may be NULL) is filled. */
int kfac_opt_step(kfac_opt_t *k, float *params, const float *grads, long t, kfac_step_info_t *info);

/* kfac_opt_step with some fc layers' weight gradients in low-rank form
 * (kfac_lowrank.h; lr may be NULL: kfac_opt_step): the gradient is grads,
 * except that the weight slice of every entry of lr holding rows is
 * grads' slice + D^T X (the parameter server passes zeros there). Such a
 * layer is preconditioned in factored form when it can be (its inverses
 * held, not all EIGEN, no gradient-mode weight decay, and
 * kfac_lowrank_update_pays); otherwise, or when that fails, the gradient
 * is densified and the layer takes the dense path. v^T g of a factored
 * layer comes from Gram products (kfac_lowrank_inner); the step size
 * rules, momentum and the Polyak average act on the dense direction as
 * ever. The result equals kfac_opt_step on the densified gradient up to
 * float rounding (the summation order differs). Non-finite D or X: -EDOM,
 * nothing changed. Returns as kfac_opt_step. */
int kfac_opt_step_lowrank(kfac_opt_t *k, float *params, const float *grads, const kfac_lowrank_set_t *lr, long t,
                          kfac_step_info_t *info);

/* kfac_opt_step_lowrank for a caller that has checked every float of grads
 * finite (kfac-ps, in the pass that averaged them): the pass that checks
 * the gradient is left out where nothing else reads it first. */
int kfac_opt_step_finite(kfac_opt_t *k, float *params, const float *grads, const kfac_lowrank_set_t *lr, long t,
                         kfac_step_info_t *info);

/* Inverse ages at version t over blocks that hold inverses: mean and max
 * (max = -1 when none). */
void kfac_opt_inverse_age(const kfac_opt_t *k, long t, double *mean, long *max);

#endif
