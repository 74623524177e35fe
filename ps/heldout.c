/* ps/heldout.c — see heldout.h. */
#include "ps/heldout.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/kfac/kfac_step.h"
#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/prio.h"
#include "common/net/zloop.h"
#include "common/nn/data.h"

/* Examples per forward and backward pass of the reference (the network's
 * buffers hold this many: a conv layer's patches grow with the batch). */
#define PS_HELDOUT_BATCH 64

/* The one job in flight: its buffers are allocated once (a reference
 * every few versions must not take fresh pages from the heap each time). */
typedef struct s_job {
    uint64_t version;
    float *params;          /* (n_params) */
    float *state;           /* (n_state) or NULL when the model has none */
    int has_state;
    float *grad;            /* (n_params) the result; swapped with the reference held */
    double norm, ms;
} s_job_t;

struct ps_heldout {
    zloop_pool_t *pool;
    net_t *net;             /* reference thread only, after construction */
    dataset_t *slice;       /* the held-out examples; read only */
    runcfg_priority_t prio; /* [ps] eval_priority */
    int started;            /* reference thread: priority set */
    size_t n_params, n_state;
    s_job_t job;            /* loop thread while !busy, the reference thread while busy */
    /* loop thread */
    float *ref;             /* (n_params) the newest reference (valid when has_ref) */
    int has_ref;
    uint64_t ref_version;
    double ref_norm;
    uint64_t n_done;
    double last_ms;
    int busy;               /* the job is queued or running */
};

/* Reference thread: grad = (1/N) sum over the slice of d loss / d params,
 * in chunks of PS_HELDOUT_BATCH (each chunk's mean gradient weighted by its
 * examples). */
static void s_work(void *job, void *user) {
    s_job_t *j = job;
    ps_heldout_t *h = user;
    net_t *net = h->net;
    if (!h->started) {
        h->started = 1;
        char what[160] = "normal (as started)";
        int rc = h->prio == RUNCFG_PRIORITY_IDLE  ? prio_idle_self(what, sizeof what)
                 : h->prio == RUNCFG_PRIORITY_LOW ? prio_nice_self(10, what, sizeof what)
                                                  : 0;
        if (rc < 0) log_warn("held-out reference thread priority: %s", what);
        log_info("held-out reference: %d examples of the training split, at priority %s", h->slice->n, what);
    }
    const double t0 = clock_now_ms();
    memcpy(net->params, j->params, h->n_params * sizeof(float));
    if (h->n_state && j->has_state) memcpy(net->state, j->state, h->n_state * sizeof(float));
    memset(j->grad, 0, h->n_params * sizeof(float));
    const int n = h->slice->n, dim = net->in_size;
    for (int at = 0; at < n; at += PS_HELDOUT_BATCH) {
        const int b = n - at < PS_HELDOUT_BATCH ? n - at : PS_HELDOUT_BATCH;
        if (net_forward(net, h->slice->x + (size_t)at * (size_t)dim, b, 1) < 0) continue;
        net_backward(net, h->slice->y + at, NULL, NULL);
        const float w = (float)b / (float)n;
        /* grad += (b / N) * net->grads  (n_params floats) */
        for (size_t i = 0; i < h->n_params; i++) j->grad[i] += w * net->grads[i];
    }
    j->norm = sqrt(kfac_step_norm2(j->grad, h->n_params));
    j->ms = clock_now_ms() - t0;
}

/* Loop thread: the newest reference replaces the one held (the buffers
 * change hands). */
static void s_done(void *job, int status, void *user) {
    s_job_t *j = job;
    ps_heldout_t *h = user;
    h->busy = 0;
    if (status == 0 && isfinite(j->norm)) {
        float *old = h->ref;
        h->ref = j->grad;
        j->grad = old;
        h->has_ref = 1;
        h->ref_version = j->version;
        h->ref_norm = j->norm;
        h->last_ms = j->ms;
        h->n_done++;
    } else if (status == 0) {
        log_warn("held-out reference of version %llu is not finite: the previous one is kept",
                 (unsigned long long)j->version);
    }
}

/* The buffers of h (job and reference) freed; accepts a partly built h. */
static void s_buffers_free(ps_heldout_t *h) {
    free(h->job.params);
    free(h->job.state);
    free(h->job.grad);
    free(h->ref);
    h->job.params = h->job.state = h->job.grad = h->ref = NULL;
}

ps_heldout_t *ps_heldout_new(uv_loop_t *loop, const char *model_text, const runcfg_t *cfg, int n_examples,
                             int *rc_out, char *err, size_t err_len) {
    *rc_out = -EINVAL;
    if (n_examples < 1) {
        snprintf(err, err_len, "held-out reference: %d examples (at least 1)", n_examples);
        return NULL;
    }
    *rc_out = -ENOMEM;
    ps_heldout_t *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, err_len, "held-out reference: out of memory");
        return NULL;
    }
    h->prio = cfg->ps_eval_priority;
    char perr[512] = "";
    *rc_out = -EINVAL;
    if (!(h->net = net_parse(model_text, cfg->model, PS_HELDOUT_BATCH, perr, sizeof perr))) {
        snprintf(err, err_len, "held-out reference: %s", perr);
        goto fail;
    }
    if (net_set_conv_engine(h->net, cfg->conv_engine, perr, sizeof perr) < 0)
        log_warn("held-out reference: %s; im2col + OpenBLAS for its conv layers", perr);
    h->n_params = h->net->n_params;
    h->n_state = h->net->n_state;
    *rc_out = -ENOMEM;
    const size_t np = h->n_params ? h->n_params : 1;
    if (!(h->job.params = malloc(np * sizeof(float))) || !(h->job.grad = malloc(np * sizeof(float))) ||
        !(h->ref = malloc(np * sizeof(float))) ||
        (h->n_state && !(h->job.state = malloc(h->n_state * sizeof(float))))) {
        snprintf(err, err_len, "held-out reference: out of memory");
        goto fail;
    }
    *rc_out = -EINVAL;
    if ((*rc_out = runcfg_data_load(cfg, h->net, 1, &h->slice, perr, sizeof perr)) < 0) {
        snprintf(err, err_len, "held-out reference: %s", perr);
        goto fail;
    }
    *rc_out = -EINVAL;
    dataset_t *d = h->slice;
    if (d->c * d->h * d->w != h->net->in_size || d->n_classes != h->net->n_classes) {
        snprintf(err, err_len,
                 "held-out reference: %s training examples are %dx%dx%d of %d classes but the model's input is "
                 "%dx%dx%d of %d; check [data] set and [model] file",
                 runcfg_dataset_name(cfg), d->c, d->h, d->w, d->n_classes, h->net->in_c, h->net->in_h, h->net->in_w,
                 h->net->n_classes);
        goto fail;
    }
    if (d->n > n_examples) { /* the last n_examples: to the front, then the rest dropped */
        const size_t dim = (size_t)h->net->in_size, from = (size_t)(d->n - n_examples);
        memmove(d->x, d->x + from * dim, (size_t)n_examples * dim * sizeof(float));
        memmove(d->y, d->y + from, (size_t)n_examples * sizeof(int));
        dataset_truncate(d, n_examples);
    }
    *rc_out = -ENOMEM;
    if (!(h->pool = zloop_pool_new(loop, 1, s_work, s_done, h))) {
        snprintf(err, err_len, "held-out reference: cannot start its thread");
        goto fail;
    }
    return h;
fail:
    net_free(&h->net);
    dataset_free(&h->slice);
    s_buffers_free(h);
    free(h);
    return NULL;
}

int ps_heldout_submit(ps_heldout_t *h, uint64_t version, const float *params, const float *state) {
    if (!h || !h->pool) return -EPIPE;
    if (h->busy) return -EBUSY;
    s_job_t *j = &h->job;
    j->version = version;
    memcpy(j->params, params, h->n_params * sizeof(float));
    j->has_state = state && h->n_state;
    if (j->has_state) memcpy(j->state, state, h->n_state * sizeof(float));
    int rc = zloop_pool_submit(h->pool, j);
    if (rc < 0) return rc;
    h->busy = 1;
    return 0;
}

int ps_heldout_busy(const ps_heldout_t *h) { return h ? h->busy : 0; }

const float *ps_heldout_ref(const ps_heldout_t *h, uint64_t *version, double *norm) {
    if (!h || !h->has_ref) return NULL;
    if (version) *version = h->ref_version;
    if (norm) *norm = h->ref_norm;
    return h->ref;
}

int ps_heldout_n(const ps_heldout_t *h) { return h && h->slice ? h->slice->n : 0; }

uint64_t ps_heldout_count(const ps_heldout_t *h) { return h ? h->n_done : 0; }

double ps_heldout_last_ms(const ps_heldout_t *h) { return h ? h->last_ms : 0.0; }

void ps_heldout_stop(ps_heldout_t *h) {
    if (!h) return;
    zloop_pool_free(&h->pool); /* joins the thread: the network is free to go */
    net_free(&h->net);
    dataset_free(&h->slice);
}

void ps_heldout_free(ps_heldout_t **h_p) {
    if (!h_p || !*h_p) return;
    ps_heldout_t *h = *h_p;
    *h_p = NULL;
    ps_heldout_stop(h);
    s_buffers_free(h);
    free(h);
}
