/* common/nn/sgd.c — see sgd.h. */
#include "common/nn/sgd.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

double sgd_lr_at(const sgd_lr_sched_t *s, long t) {
    double lr = s->base;
    if (s->kind == SGD_LR_STEP && s->every > 0) lr = s->base * pow(s->gamma, (double)(t / s->every));
    if (s->kind == SGD_LR_COSINE && s->total > 0) {
        double f = t >= s->total ? 1.0 : (double)t / (double)s->total;
        lr = s->floor + 0.5 * (s->base - s->floor) * (1.0 + cos(M_PI * f));
    }
    if (s->warmup > 0 && t < s->warmup) lr *= (double)(t + 1) / (double)s->warmup;
    return lr;
}

int sgd_lr_schedule_parse(const char *s, sgd_lr_schedule_t *out) {
    if (strcmp(s, "constant") == 0) *out = SGD_LR_CONSTANT;
    else if (strcmp(s, "step") == 0) *out = SGD_LR_STEP;
    else if (strcmp(s, "cosine") == 0) *out = SGD_LR_COSINE;
    else return -EINVAL;
    return 0;
}

sgd_t *sgd_new(const net_t *net, double momentum, double weight_decay) {
    sgd_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n = net->n_params;
    s->momentum = momentum;
    s->weight_decay = weight_decay;
    s->v = calloc(s->n ? s->n : 1, sizeof(float));
    s->decay_mask = calloc(s->n ? s->n : 1, sizeof(float));
    if (!s->v || !s->decay_mask) { sgd_free(&s); return NULL; }
    for (int i = 0; i < net->n_layers; i++) {
        const layer_t *l = &net->layers[i];
        if (l->kind == LAYER_FC || l->kind == LAYER_CONV)
            for (size_t j = 0; j < l->n_w; j++) s->decay_mask[l->w_off + j] = 1.0f;
    }
    return s;
}

void sgd_free(sgd_t **s_p) {
    if (!s_p || !*s_p) return;
    free((*s_p)->v);
    free((*s_p)->decay_mask);
    free(*s_p);
    *s_p = NULL;
}

void sgd_add_weight_decay(const sgd_t *s, const float *w, float *g) {
    if (s->weight_decay == 0.0) return;
    const float wd = (float)s->weight_decay;
    for (size_t j = 0; j < s->n; j++) g[j] += wd * s->decay_mask[j] * w[j];
}

void sgd_step(sgd_t *s, float *params, const float *grads, double lr) {
    const float mu = (float)s->momentum, wd = (float)s->weight_decay, a = (float)lr;
    for (size_t j = 0; j < s->n; j++) {
        float d = grads[j] + wd * s->decay_mask[j] * params[j];
        s->v[j] = mu * s->v[j] + d;
        params[j] -= a * s->v[j];
    }
}
