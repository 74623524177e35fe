/* common/net/compute.c — see compute.h. */
#include "common/net/compute.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"

/* ---- the compute context ------------------------------------------------------- */

static char *s_strdup(const char *s) {
    size_t n = strlen(s ? s : "") + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s ? s : "", n);
    return d;
}

int compute_setup_init(compute_setup_t *s, const msg_welcome_t *w, const runcfg_t *cfg) {
    memset(s, 0, sizeof *s);
    s->model_text = s_strdup(w->model_text);
    char derr[256];
    if (runcfg_data_source(cfg, &s->data, derr, sizeof derr) < 0) { /* not after runcfg_validate */
        log_error("%s", derr);
        compute_setup_release(s);
        return -EINVAL;
    }
    if (!s->model_text) {
        compute_setup_release(s);
        return -ENOMEM;
    }
    s->n_params = w->n_params;
    s->n_state = w->n_state;
    s->train_n = cfg->train_n;
    s->doubly_min_in = cfg->doubly_min_in;
    s->conv_engine = cfg->conv_engine;
    s->batch = cfg->batch;
    s->augment = cfg->augment;
    s->with_stats = cfg->optimizer == RUNCFG_OPTIMIZER_KFAC;
    s->fisher = cfg->fisher;
    s->batch_seed = cfg->seed;
    s->label_seed = cfg->seed;
    s->rank = (int)w->rank;
    s->n_ranks = w->n_ranks ? (int)w->n_ranks : 1;
    return 0;
}

void compute_setup_release(compute_setup_t *s) {
    if (!s) return;
    free(s->model_text);
    memset(s, 0, sizeof *s);
}

void compute_ctx_release(compute_ctx_t *cc) {
    if (!cc) return;
    backend_free(&cc->be);
    free(cc->probs);
    batcher_free(&cc->bat);
    dataset_free(&cc->train);
    kfac_stats_free(&cc->stats);
    wire_shape_release(&cc->shape);
    net_free(&cc->net);
    free(cc->x);
    free(cc->y);
    free(cc->ys);
    memset(cc, 0, sizeof *cc);
}

int compute_ctx_init(compute_ctx_t *cc, const compute_setup_t *s, char *err, size_t err_len) {
    memset(cc, 0, sizeof *cc);
    int rc = -EINVAL;
    if (s->batch < 1 || s->n_ranks < 1 || s->rank < 0 || s->rank >= s->n_ranks) {
        snprintf(err, err_len, "bad shard %d of %d or batch %d", s->rank, s->n_ranks, s->batch);
        return -EINVAL;
    }
    if (!(cc->net = net_parse(s->model_text, "welcome model", s->batch, err, err_len))) goto fail;
    cc->net->fc_doubly_min_in = s->doubly_min_in;
    if ((uint64_t)cc->net->n_params != s->n_params || (uint64_t)cc->net->n_state != s->n_state) {
        snprintf(err, err_len,
                 "the welcome's model has %zu parameters and %zu state values here, but kfac-ps says %" PRIu64
                 " and %" PRIu64 " (different builds?)",
                 cc->net->n_params, cc->net->n_state, s->n_params, s->n_state);
        goto fail;
    }
    cc->net->dropout_seed = s->label_seed ^ 0x5eedd0d0ULL ^ ((uint64_t)s->rank << 32);
    if ((rc = runcfg_data_load_source(&s->data, cc->net, "the model kfac-ps sent", 1, &cc->train, err, err_len)) < 0)
        goto fail;
    rc = -EINVAL;
    if (s->train_n > 0) dataset_truncate(cc->train, s->train_n);
    if (cc->train->c * cc->train->h * cc->train->w != cc->net->in_size) {
        snprintf(err, err_len, "data set %s has %dx%dx%d examples but the model's input is %dx%dx%d",
                 cc->train->name, cc->train->c, cc->train->h, cc->train->w, cc->net->in_c, cc->net->in_h,
                 cc->net->in_w);
        goto fail;
    }
    batcher_opts_t bo = {.batch = s->batch, .seed = s->batch_seed, .rank = s->rank, .n_ranks = s->n_ranks,
                         .shuffle = 1, .aug_crop_pad = s->augment ? 4 : 0, .aug_flip = s->augment,
                         .drop_last = 1};
    if (!(cc->bat = batcher_new(cc->train, &bo, err, err_len))) goto fail;
    rc = -ENOMEM;
    if (!(cc->x = malloc((size_t)s->batch * (size_t)cc->net->in_size * sizeof(float))) ||
        !(cc->y = malloc((size_t)s->batch * sizeof(int)))) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < s->skip_batches; i++) batcher_next(cc->bat, cc->x, cc->y);
    if (s->skip_batches) log_info("data: shard position %" PRIu64 " (one batch per version before it)", s->skip_batches);
    rc = -EINVAL;
    if (s->with_stats && !(cc->stats = kfac_stats_new(cc->net))) {
        snprintf(err, err_len, "cannot build the K-FAC statistics of this model (see the log)");
        goto fail;
    }
    rc = -ENOMEM;
    if (wire_shape_init(&cc->shape, cc->net, cc->stats) < 0) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    cc->ys = malloc((size_t)s->batch * sizeof(int));
    cc->probs = malloc((size_t)s->batch * (size_t)cc->net->n_classes * sizeof(float));
    if (!cc->x || !cc->y || !cc->ys || !cc->probs) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    /* The backend is made on the compute thread that will use it (a CUDA
     * context belongs to the thread that creates it). */
    if (!(cc->be = backend_new_with_stats(s->device, cc->net, cc->stats, err, err_len))) goto fail;
    /* The CPU backend runs nn.c on this net: its conv layers' engine ([model] conv_engine). */
    if (backend_kind(cc->be) == BACKEND_CPU && (rc = net_set_conv_engine(cc->net, s->conv_engine, err, err_len)) < 0)
        goto fail;
    log_info("device: %s", backend_describe(cc->be));
    rng_seed(&cc->label_rng, s->label_seed ^ 0xfeedULL ^ ((uint64_t)s->rank * 0x9E3779B97F4A7C15ULL));
    cc->fisher = s->fisher;
    cc->batch = s->batch;
    return 0;
fail:
    compute_ctx_release(cc);
    return rc;
}

int compute_ctx_batch(compute_ctx_t *cc, const float *params, const float *state, int stats, int grad,
                         double *loss, int *n_correct, int *n_examples, char *err, size_t err_len) {
    net_t *net = cc->net;
    int rc = backend_set_params(cc->be, params, state && net->n_state ? state : NULL);
    if (rc < 0) {
        snprintf(err, err_len, "uploading the parameters failed: %s", backend_describe(cc->be));
        return rc;
    }
    int n = batcher_next(cc->bat, cc->x, cc->y);
    if (n <= 0) {
        snprintf(err, err_len, "the batcher returned no examples");
        return -EIO;
    }
    if ((rc = backend_forward(cc->be, cc->x, n, 1)) < 0) {
        snprintf(err, err_len, "forward pass failed (%d): %s", rc, backend_describe(cc->be));
        return rc;
    }
    *n_examples = n;
    if (stats && cc->stats) {
        const int *lab = cc->y;
        if (cc->fisher == KFAC_FISHER_TRUE) {
            /* True Fisher: one label per example drawn from the model. */
            if ((rc = backend_probs(cc->be, cc->probs)) < 0 ||
                (rc = kfac_sample_labels(cc->probs, n, net->n_classes, &cc->label_rng, cc->ys)) < 0) {
                snprintf(err, err_len, "sampling labels failed: the model's probabilities are not available or not finite");
                return rc;
            }
            lab = cc->ys;
        }
        float l;
        int h;
        if ((rc = backend_backward(cc->be, lab, 0, &l, &h)) < 0 || (rc = backend_stats(cc->be, cc->stats)) < 0) {
            snprintf(err, err_len, "computing the statistics failed (%d): %s", rc, backend_describe(cc->be));
            return rc;
        }
    }
    if (grad) {
        int hits = 0;
        float l = 0.0f;
        if ((rc = backend_backward(cc->be, cc->y, 1, &l, &hits)) < 0) {
            snprintf(err, err_len, "backward pass failed (%d): %s", rc, backend_describe(cc->be));
            return rc;
        }
        *loss = l;
        *n_correct = hits;
    }
    return 0;
}

void compute_ctx_move(compute_ctx_t *dst, compute_ctx_t *src) {
    if (dst == src) return;
    compute_ctx_release(dst);
    *dst = *src;
    if (dst->shape.limits.model) dst->shape.limits.model = &dst->shape.model;
    memset(src, 0, sizeof *src);
}
