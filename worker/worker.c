/* worker/worker.c — see worker.h. A role of the client skeleton
 * (common/net/daemon.h): the setup from Welcome (this worker's shard), the
 * gradient of one Params (the work) and the GradPush (the result). The
 * skeleton keeps the protocol state: the setup job, the newest pending
 * Params and the requests kfac-ps has not answered.
 *
 * Duplicates: a Params for a version already pushed is a duplicate and
 * ignored; one that arrives while a job runs waits (the newest only) until
 * the job is done.
 */
#include "worker/worker.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/rng.h"
#include "common/kfac/kfac_lowrank.h"
#include "common/net/client.h"
#include "common/net/compute.h"
#include "common/net/daemon.h"
#include "common/net/wire.h"
#include "proto/msg.h"

#define S_PROGRESS_EVERY 100 /* gradients between info lines */

typedef struct s_job {
    client_daemon_job_t base; /* in: the Params */
    double loss;
    int n_correct, n_examples, with_stats;
} s_job_t;

typedef struct s_worker {
    uint64_t delay_ms; /* [worker] delay_ms (set at Welcome, read by the compute thread) */
    rng_t delay_rng;   /* its draws (compute thread) */
    int have_pushed;
    uint64_t last_pushed;
    uint64_t n_pushed, n_duplicates;
    double compute_ms_sum;
    /* factored fc gradients (compute thread; common/kfac/kfac_lowrank.h) */
    int lr_decided;          /* the layers below are chosen (at the first gradient of a context) */
    const net_t *lr_net;     /* ... for this net (a new Welcome builds a new one) */
    int lr_batch;            /* ... and batch */
    size_t lr_n_params;      /* ... and shape (a new net may reuse the old one's address) */
    int lr_n_layers;
    int n_lr;                /* layers sent factored */
    msg_lowrank_t *lr;       /* (n_lr) their entries, d and x into lr_buf */
    float *lr_buf;           /* batch * (out + in) floats per layer */
    float *lr_grad;          /* (n_params) the arena without their weights */
    uint64_t n_lr_pushes;    /* gradients sent with factored layers */
} s_worker_t;

/* ---- compute thread -------------------------------------------------------------- */

/* [worker] delay_ms: a slow worker on demand (gradient staleness studies),
 * uniform in [0, 2 x delay_ms] so that the gradients' ages spread. */
static void s_delay(s_worker_t *s) {
    if (!s->delay_ms) return;
    uint64_t us = rng_below(&s->delay_rng, (uint32_t)(2 * s->delay_ms * 1000 + 1));
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The fc layers whose weight gradient goes factored (kfac_lowrank.h, the
 * worker's rule): K-FAC preconditions them (a statistics slot) and
 * 4 b (in + out) <= in out at this batch. KFAC_DENSE_GRADS=1 in the
 * environment sends every gradient dense (the benchmark's other arm). */
static void s_lowrank_decide(s_worker_t *s, const compute_ctx_t *cc) {
    free(s->lr), free(s->lr_buf), free(s->lr_grad);
    s->lr = NULL, s->lr_buf = s->lr_grad = NULL;
    s->n_lr = 0;
    s->lr_decided = 1;
    s->lr_net = cc->net;
    s->lr_batch = cc->batch;
    s->lr_n_params = cc->net->n_params;
    s->lr_n_layers = cc->net->n_layers;
    const char *env = getenv("KFAC_DENSE_GRADS");
    if (!cc->stats || (env && *env && strcmp(env, "0") != 0)) return;
    const net_t *net = cc->net;
    size_t floats = 0;
    int n = 0;
    for (int i = 0; i < cc->stats->n_layers; i++) {
        const layer_t *l = &net->layers[cc->stats->layers[i].layer];
        if (l->kind != LAYER_FC || !kfac_lowrank_wire_pays(cc->batch, l->out, l->in_c * l->in_h * l->in_w)) continue;
        n++;
        floats += (size_t)cc->batch * (size_t)(l->out + l->in_c * l->in_h * l->in_w);
    }
    if (!n) return;
    s->lr = calloc((size_t)n, sizeof *s->lr);
    s->lr_buf = malloc(floats * sizeof(float));
    s->lr_grad = malloc(net->n_params * sizeof(float));
    if (!s->lr || !s->lr_buf || !s->lr_grad) {
        log_warn("out of memory for factored gradients: every gradient goes dense");
        free(s->lr), free(s->lr_buf), free(s->lr_grad);
        s->lr = NULL, s->lr_buf = s->lr_grad = NULL;
        return;
    }
    size_t off = 0;
    for (int i = 0; i < cc->stats->n_layers; i++) {
        const int li = cc->stats->layers[i].layer;
        const layer_t *l = &net->layers[li];
        const int in = l->in_c * l->in_h * l->in_w;
        if (l->kind != LAYER_FC || !kfac_lowrank_wire_pays(cc->batch, l->out, in)) continue;
        msg_lowrank_t *e = &s->lr[s->n_lr++];
        e->layer = (uint32_t)li;
        e->d = s->lr_buf + off;
        off += (size_t)cc->batch * l->out;
        e->x = s->lr_buf + off;
        off += (size_t)cc->batch * in;
        log_info("layer %s (%d -> %d): its weight gradient goes factored, %d x (%d + %d) floats instead of %d x %d",
                 l->name, in, l->out, cc->batch, l->out, in, l->out, in);
    }
}

/* Fill g's grad and lowrank from the batch just computed (n examples):
 * each factored layer's D (its output gradients) and X (its inputs) from
 * the backend, and the arena without their weights. Returns 0, or a
 * negative errno (the caller then sends the dense gradient). */
static int s_lowrank_fill(s_worker_t *s, const compute_ctx_t *cc, int n, msg_grad_push_t *g) {
    const net_t *net = cc->net;
    size_t at = 0, from = 0;
    for (int i = 0; i < s->n_lr; i++) {
        msg_lowrank_t *e = &s->lr[i];
        const layer_t *l = &net->layers[e->layer];
        const int in = l->in_c * l->in_h * l->in_w;
        int rc = backend_layer_copy(cc->be, (int)e->layer, NULL, e->d);
        if (rc < 0) return rc;
        if (l->in < 0)
            memcpy(e->x, cc->x, (size_t)n * in * sizeof(float));
        else if ((rc = backend_layer_copy(cc->be, l->in, e->x, NULL)) < 0)
            return rc;
        e->n_rows = (uint32_t)n;
        e->n_d = (size_t)n * l->out;
        e->n_x = (size_t)n * in;
        /* the arena up to this weight, then past it (layers in increasing order) */
        memcpy(s->lr_grad + at, net->grads + from, (l->w_off - from) * sizeof(float));
        at += l->w_off - from;
        from = l->w_off + l->n_w;
    }
    memcpy(s->lr_grad + at, net->grads + from, (net->n_params - from) * sizeof(float));
    at += net->n_params - from;
    g->grad = s->lr_grad;
    g->n_grad = at;
    g->lowrank = s->lr;
    g->n_lowrank = (size_t)s->n_lr;
    return 0;
}

static void s_work(void *state, compute_ctx_t *cc, client_daemon_job_t *job) {
    s_job_t *j = (s_job_t *)job;
    double t0 = clock_now_ms();
    const msg_params_t *p = &job->in.params;
    j->with_stats = p->want_stats && cc->stats != NULL;
    /* The layers the PS asks for (none listed: all); the others are neither
     * computed nor sent. */
    if (j->with_stats && wire_stats_want(cc->stats, p->stats_layers, p->n_stats_layers) == 0) j->with_stats = 0;
    job->rc = compute_ctx_batch(cc, p->params, p->n_state ? p->state : NULL, j->with_stats, 1, &j->loss,
                                &j->n_correct, &j->n_examples, job->err, sizeof job->err);
    if (job->rc < 0) return;
    msg_t m;
    msg_init(&m, MSG_GRAD_PUSH, MSG_ROLE_WORKER, job->sender_id);
    msg_grad_push_t *g = &m.grad_push;
    g->version = p->version;
    g->loss = j->loss;
    g->n_examples = (uint64_t)j->n_examples;
    g->n_correct = (uint64_t)j->n_correct;
    g->grad = cc->net->grads;
    g->n_grad = cc->net->n_params;
    g->state = cc->net->n_state ? cc->net->state : NULL;
    g->n_state = cc->net->n_state;
    s_worker_t *w = state;
    if (!w->lr_decided || w->lr_net != cc->net || w->lr_batch != cc->batch || w->lr_n_params != cc->net->n_params ||
        w->lr_n_layers != cc->net->n_layers)
        s_lowrank_decide(w, cc);
    if (w->n_lr > 0) {
        if (s_lowrank_fill(w, cc, j->n_examples, g) == 0) {
            w->n_lr_pushes++;
        } else {
            g->grad = cc->net->grads; /* the dense gradient, as ever */
            g->n_grad = cc->net->n_params;
            g->lowrank = NULL;
            g->n_lowrank = 0;
        }
    }
    s_delay(state);
    client_daemon_job_answer(job, &m, &g->compute_ms, t0, j->with_stats ? cc->stats : NULL, &g->stats, "the gradient");
}

/* ---- loop thread ------------------------------------------------------------------ */

/* The setup: the model, this worker's shard, its device. */
static int s_welcome(client_daemon_t *d, const msg_welcome_t *w, const runcfg_t *cfg, compute_setup_t *st) {
    s_worker_t *s = client_daemon_state(d);
    int rc = compute_setup_init(st, w, cfg);
    if (rc < 0) {
        if (rc == -ENOMEM) log_error("out of memory"); /* -EINVAL: compute_setup_init said why */
        return rc;
    }
    st->device = cfg->daemon[RUNCFG_ROLE_WORKER].device;
    st->skip_batches = w->params_version; /* the data position of a worker present since step 0 */
    s->have_pushed = 0;
    s->delay_ms = cfg->worker_delay_ms;
    rng_seed(&s->delay_rng, cfg->seed * 1000003ULL + (uint64_t)cfg->daemon[RUNCFG_ROLE_WORKER].id);
    return CLIENT_DAEMON_WELCOME_SETUP;
}

static void s_ready(client_daemon_t *d, const compute_ctx_t *cc, const compute_setup_t *st) {
    (void)d;
    log_info("ready: shard %d of %d (%d examples), batch %d, %zu parameters, statistics %s", st->rank, st->n_ranks,
             batcher_shard_size(cc->bat), cc->batch, cc->net->n_params,
             cc->stats ? (cc->fisher == KFAC_FISHER_TRUE ? "on request (true Fisher)" : "on request (empirical Fisher)")
                       : "never (sgd)");
}

static int s_accept(client_daemon_t *d, client_daemon_job_t *j, const client_daemon_job_t *newest, char *err,
                    size_t n) {
    s_worker_t *s = client_daemon_state(d);
    const compute_ctx_t *cc = client_daemon_ctx(d);
    /* The shape is only read by msg_validate; a running job does not change it. */
    if (msg_validate(&j->in, cc ? &cc->shape.limits : NULL, err, n) < 0) return -EINVAL;
    uint64_t v = j->in.params.version;
    if (s->have_pushed && v <= s->last_pushed) {
        s->n_duplicates++;
        log_debug("params version %" PRIu64 " already done: ignored", v);
        return CLIENT_DAEMON_INPUT_DROP;
    }
    if (newest && newest->in.params.version >= v) {
        s->n_duplicates++;
        return CLIENT_DAEMON_INPUT_DROP;
    }
    return CLIENT_DAEMON_INPUT_NEWEST;
}

static int s_done(client_daemon_t *d, client_daemon_job_t *job) {
    s_worker_t *s = client_daemon_state(d);
    s_job_t *j = (s_job_t *)job;
    uint64_t v = job->in.params.version;
    int rc = client_daemon_send_result(d, job);
    s->have_pushed = 1;
    s->last_pushed = v;
    if (rc < 0) return 0;
    s->n_pushed++;
    s->compute_ms_sum += job->compute_ms;
    log_debug("gradient of version %" PRIu64 ": loss %.4f, %d/%d correct, %.1f ms%s", v, j->loss, j->n_correct,
              j->n_examples, job->compute_ms, j->with_stats ? ", with statistics" : "");
    if (s->n_pushed % S_PROGRESS_EVERY == 0)
        log_info("%" PRIu64 " gradients pushed (version %" PRIu64 ", loss %.4f), %.1f ms each on average", s->n_pushed,
                 v, j->loss, s->compute_ms_sum / (double)s->n_pushed);
    return 0;
}

static void s_stop(client_daemon_t *d) {
    s_worker_t *s = client_daemon_state(d);
    /* The mean compute per gradient is an input of the scale model (docs/scaling.md). */
    log_info("%" PRIu64 " gradients pushed (%.1f ms compute each on average, %" PRIu64 " with factored layers), %" PRIu64
             " duplicate params ignored, %" PRIu64 " invalid",
             s->n_pushed, s->n_pushed ? s->compute_ms_sum / (double)s->n_pushed : 0.0, s->n_lr_pushes, s->n_duplicates,
             client_daemon_n_invalid(d));
    free(s->lr), free(s->lr_buf), free(s->lr_grad);
    s->lr = NULL, s->lr_buf = s->lr_grad = NULL;
    s->n_lr = 0, s->lr_decided = 0;
}

/* The worker role (common/net/daemon.h). */
static const client_daemon_role_t s_role = {
    .role = RUNCFG_ROLE_WORKER, .job_size = sizeof(s_job_t), .state_size = sizeof(s_worker_t),
    /* loop thread */
    .welcome = s_welcome, .ready = s_ready, .accept = s_accept, .done = s_done, .stop = s_stop,
    /* compute thread */
    .work = s_work,
};

const client_daemon_role_t *worker_role(void) { return &s_role; }
