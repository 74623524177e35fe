/* ps/eval.c — see eval.h. */
#include "ps/eval.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/nn/data.h"
#include "common/base/log.h"
#include "common/nn/nn.h"
#include "common/net/zloop.h"
#include "common/base/clock.h"
#include "common/base/prio.h"

struct ps_eval {
    zloop_pool_t *pool;
    net_t *net;          /* evaluation thread only, after construction */
    runcfg_priority_t prio; /* [ps] eval_priority */
    int threads;         /* [ps] eval_threads */
    int started;         /* evaluation thread: priority and threads set */
    dataset_t *test;     /* read only */
    int n;               /* examples used */
    ps_eval_done_fn done;
    void *user;
    /* loop thread: what the server asks about its evaluations */
    ps_eval_result_t last;  /* the newest result delivered */
    int have_last;
    long queued_step;       /* the newest step submitted (-1: none) */
    uint64_t eval_every;    /* [run] eval_every, for the line about skipped ones */
    int warned_slow;        /* that line was logged */
};

typedef struct s_job {
    ps_eval_result_t r;
    float *params;       /* (n_params) */
    float *polyak;       /* (n_params) or NULL */
    float *state;        /* (n_state) or NULL */
} s_job_t;

static void s_job_free(s_job_t *j) {
    if (!j) return;
    free(j->params);
    free(j->polyak);
    free(j->state);
    free(j);
}

/* Evaluation thread. */
static void s_work(void *job, void *user) {
    s_job_t *j = job;
    ps_eval_t *e = user;
    net_t *net = e->net;
    if (!e->started) {
        /* Once, on this thread: its priority first, so that the net's
         * threads (started by it) inherit it. */
        e->started = 1;
        char what[160] = "normal (as started)";
        int rc = e->prio == RUNCFG_PRIORITY_IDLE  ? prio_idle_self(what, sizeof what)
                 : e->prio == RUNCFG_PRIORITY_LOW ? prio_nice_self(10, what, sizeof what)
                                                  : 0;
        if (rc < 0) log_warn("evaluation thread priority: %s", what);
        if (net_set_threads(net, e->threads) < 0) log_warn("evaluation: cannot start %d threads; using one", e->threads);
        log_info("evaluation: %d thread(s) at priority %s, batch %d", net_threads(net), what, PS_EVAL_BATCH);
    }
    double t0 = clock_now_ms();
    if (net->n_state && j->state) memcpy(net->state, j->state, net->n_state * sizeof(float));
    memcpy(net->params, j->params, net->n_params * sizeof(float));
    net_evaluate(net, e->test->x, e->test->y, e->n, &j->r.loss, &j->r.acc);
    if (j->polyak) {
        memcpy(net->params, j->polyak, net->n_params * sizeof(float));
        net_evaluate(net, e->test->x, e->test->y, e->n, &j->r.polyak_loss, &j->r.polyak_acc);
        j->r.has_polyak = 1;
    } else {
        j->r.polyak_loss = j->r.loss;
        j->r.polyak_acc = j->r.acc;
    }
    j->r.n = e->n;
    j->r.eval_ms = clock_now_ms() - t0;
}

/* Loop thread. */
static void s_done(void *job, int status, void *user) {
    s_job_t *j = job;
    ps_eval_t *e = user;
    if (status == 0) {
        e->last = j->r;
        e->have_last = 1;
    }
    if (e->done) e->done(&j->r, status, e->user);
    s_job_free(j);
}

ps_eval_t *ps_eval_new(uv_loop_t *loop, const char *model_text, const runcfg_t *cfg, ps_eval_done_fn done,
                       void *user, int *rc_out, char *err, size_t err_len) {
    *rc_out = -ENOMEM;
    ps_eval_t *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, err_len, "evaluation: out of memory");
        return NULL;
    }
    e->queued_step = -1;
    e->eval_every = cfg->eval_every;
    e->done = done;
    e->user = user;
    e->prio = cfg->ps_eval_priority;
    e->threads = cfg->ps_eval_threads > 0 ? cfg->ps_eval_threads : 1;
    char perr[512] = "";
    *rc_out = -EINVAL;
    if (!(e->net = net_parse(model_text, cfg->model, PS_EVAL_BATCH, perr, sizeof perr))) {
        snprintf(err, err_len, "evaluation: %s", perr);
        goto fail;
    }
    if (net_set_conv_engine(e->net, cfg->conv_engine, perr, sizeof perr) < 0) /* onednn where it cannot run */
        log_warn("evaluation: %s; im2col + OpenBLAS for its conv layers", perr);
    const char *set = runcfg_dataset_name(cfg);
    if ((*rc_out = runcfg_data_load(cfg, e->net, 0, &e->test, perr, sizeof perr)) < 0) {
        snprintf(err, err_len, "evaluation: %s", perr);
        goto fail;
    }
    *rc_out = -EINVAL;
    if (e->test->c * e->test->h * e->test->w != e->net->in_size) {
        snprintf(err, err_len,
                 "evaluation: %s test examples are %dx%dx%d but the model's input is %dx%dx%d; check [data] set "
                 "and [model] file",
                 set, e->test->c, e->test->h, e->test->w, e->net->in_c, e->net->in_h, e->net->in_w);
        goto fail;
    }
    if (e->test->n_classes != e->net->n_classes) {
        snprintf(err, err_len, "evaluation: %s has %d classes but the model outputs %d", set, e->test->n_classes,
                 e->net->n_classes);
        goto fail;
    }
    e->n = cfg->eval_n > 0 && cfg->eval_n < e->test->n ? cfg->eval_n : e->test->n;
    *rc_out = -ENOMEM;
    if (!(e->pool = zloop_pool_new(loop, 1, s_work, s_done, e))) {
        snprintf(err, err_len, "evaluation: cannot start its thread");
        goto fail;
    }
    return e;
fail:
    net_free(&e->net);
    dataset_free(&e->test);
    free(e);
    return NULL;
}

static float *s_dup(const float *x, size_t n) {
    float *y = malloc((n ? n : 1) * sizeof(float));
    if (y && n) memcpy(y, x, n * sizeof(float));
    return y;
}

int ps_eval_submit(ps_eval_t *e, uint64_t step, double wall_s, const float *params, const float *polyak,
                   const float *state, int final) {
    if (!e || !e->pool) return -EPIPE;
    if (!final && zloop_pool_pending(e->pool) >= 2) {
        if (!e->warned_slow++)
            log_warn("evaluation is slower than [run] eval_every = %" PRIu64 " steps: skipping some (lower eval_n?)",
                     e->eval_every);
        return -EBUSY;
    }
    s_job_t *j = calloc(1, sizeof *j);
    if (!j) return -ENOMEM;
    j->r.step = step;
    j->r.wall_s = wall_s;
    j->r.final = final;
    j->params = s_dup(params, e->net->n_params);
    if (polyak) j->polyak = s_dup(polyak, e->net->n_params);
    if (state && e->net->n_state) j->state = s_dup(state, e->net->n_state);
    if (!j->params || (polyak && !j->polyak) || (state && e->net->n_state && !j->state)) {
        s_job_free(j);
        return -ENOMEM;
    }
    int rc = zloop_pool_submit(e->pool, j);
    if (rc < 0) s_job_free(j);
    else e->queued_step = (long)step;
    return rc;
}

const ps_eval_result_t *ps_eval_last(const ps_eval_t *e) { return e && e->have_last ? &e->last : NULL; }

long ps_eval_queued_step(const ps_eval_t *e) { return e ? e->queued_step : -1; }

size_t ps_eval_pending(const ps_eval_t *e) { return e ? zloop_pool_pending(e->pool) : 0; }

int ps_eval_n(const ps_eval_t *e) { return e ? e->n : 0; }

void ps_eval_stop(ps_eval_t *e) {
    if (!e) return;
    /* Joins the thread: the network is free to go afterwards. */
    zloop_pool_free(&e->pool);
    net_free(&e->net);
    dataset_free(&e->test);
}

void ps_eval_free(ps_eval_t **e_p) {
    if (!e_p || !*e_p) return;
    ps_eval_t *e = *e_p;
    *e_p = NULL;
    ps_eval_stop(e);
    free(e);
}
