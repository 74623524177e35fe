/* common/nn/sgd.h — stochastic gradient descent with momentum and weight decay
 * over a network's flat parameter arena, and learning-rate schedules.
 *
 * Update (PyTorch convention, decay folded into the gradient):
 *   d = g + wd * w        (wd only on fc/conv weights, never biases or bn)
 *   v = mu * v + d
 *   w = w - lr * v
 * Ownership: sgd_t owns its velocity buffer and mask; the net is borrowed
 * only by sgd_new (to read the layout).
 */
#ifndef KFAC_SGD_H
#define KFAC_SGD_H

#include <stddef.h>

#include "common/nn/nn.h"

typedef enum { SGD_LR_CONSTANT = 0, SGD_LR_STEP, SGD_LR_COSINE } sgd_lr_schedule_t;

typedef struct sgd_lr_sched {
    sgd_lr_schedule_t kind;
    double base;       /* learning rate at step 0 */
    double gamma;      /* SGD_LR_STEP: multiply by gamma every `every` steps */
    long every;
    long total;        /* SGD_LR_COSINE: steps to reach `floor` */
    double floor;      /* SGD_LR_COSINE: final learning rate */
    long warmup;       /* linear warm-up steps (0 = none) */
} sgd_lr_sched_t;

/* The learning rate at step t (0-based). */
double sgd_lr_at(const sgd_lr_sched_t *s, long t);

/* Parse "constant", "step" or "cosine"; 0 or -EINVAL. */
int sgd_lr_schedule_parse(const char *s, sgd_lr_schedule_t *out);

typedef struct sgd {
    size_t n;
    float *v;          /* (n) velocity */
    float *decay_mask; /* (n) 1 where weight decay applies, else 0 */
    double momentum;
    double weight_decay;
} sgd_t;

/* New optimizer for net's parameter layout; NULL on allocation failure. */
sgd_t *sgd_new(const net_t *net, double momentum, double weight_decay);
void sgd_free(sgd_t **s_p);

/* Add wd * w to g where the mask says so (g and w are (n)). Shared with
 * K-FAC, which applies weight decay before preconditioning. */
void sgd_add_weight_decay(const sgd_t *s, const float *w, float *g);

/* One step with learning rate lr: params -= lr * v after the momentum
 * update with grads (both (n), grads is read only). */
void sgd_step(sgd_t *s, float *params, const float *grads, double lr);

#endif
