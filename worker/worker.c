/* worker/worker.c — see worker.h. The loop side keeps the protocol state
 * (what was asked, what came, what is pending); the compute thread owns the
 * network while a job runs.
 *
 * Request accounting: n_outstanding counts requests (GetParams, GradPush)
 * whose answer has not come. A new GetParams is sent only when the worker is
 * idle and nothing is outstanding, so a re-Hello after a silent spell never
 * doubles the stream of Params. A Params for a version already pushed is a
 * duplicate and ignored; one that arrives while a job runs waits (the newest
 * only) until the job is done.
 */
#include "worker/worker.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/net/client.h"
#include "common/net/compute.h"
#include "common/net/daemon.h"
#include "common/base/log.h"
#include "common/net/wire.h"
#include "common/net/zloop.h"
#include "proto/msg.h"
#include "common/base/ratelimit.h"
#include "common/base/clock.h"

#define S_PROGRESS_EVERY 100 /* gradients between info lines */

typedef enum { S_JOB_SETUP = 0, S_JOB_GRAD } s_job_kind_t;

typedef struct s_job {
    s_job_kind_t kind;
    /* setup */
    compute_setup_t setup;
    compute_ctx_t cc;      /* built here, installed by the loop */
    /* gradient */
    msg_t params;             /* the Params message (owned) */
    uint32_t sender_id;
    uint8_t *buf;             /* encoded GradPush */
    size_t len;
    double loss, compute_ms;
    int n_correct, n_examples, with_stats;
    /* both */
    int rc;
    char err[512];
} s_job_t;

struct worker_server {
    const runcfg_t *cfg;          /* borrowed */
    rng_t delay_rng;              /* [worker] delay_ms draws (pool thread) */
    client_daemon_t d;            /* loop, job pool, connection */
    compute_ctx_t cc;          /* the compute thread's while busy */
    int have_cc;
    int busy;
    compute_setup_t *next_setup;   /* a Welcome that came while busy */
    msg_t *pending;               /* newest Params not yet computed */
    int n_outstanding;
    int have_pushed;
    uint64_t last_pushed;
    uint64_t n_pushed, n_duplicates, n_invalid;
    double compute_ms_sum;
};

static void s_next(worker_server_t *s);

/* ---- compute thread -------------------------------------------------------------- */

static void s_work_grad(worker_server_t *s, s_job_t *j) {
    double t0 = clock_now_ms();
    compute_ctx_t *cc = &s->cc;
    const msg_params_t *p = &j->params.params;
    j->with_stats = p->want_stats && cc->stats != NULL;
    /* The layers the PS asks for (none listed: all); the others are neither
     * computed nor sent. */
    if (j->with_stats && wire_stats_want(cc->stats, p->stats_layers, p->n_stats_layers) == 0) j->with_stats = 0;
    j->rc = compute_ctx_batch(cc, p->params, p->n_state ? p->state : NULL, j->with_stats, 1, &j->loss,
                                 &j->n_correct, &j->n_examples, j->err, sizeof j->err);
    if (j->rc < 0) return;
    msg_t m;
    msg_init(&m, MSG_GRAD_PUSH, MSG_ROLE_WORKER, j->sender_id);
    msg_grad_push_t *g = &m.grad_push;
    g->version = p->version;
    g->loss = j->loss;
    g->n_examples = (uint64_t)j->n_examples;
    g->n_correct = (uint64_t)j->n_correct;
    g->grad = cc->net->grads;
    g->n_grad = cc->net->n_params;
    g->state = cc->net->n_state ? cc->net->state : NULL;
    g->n_state = cc->net->n_state;
    float *packed = NULL;
    if (j->with_stats && (j->rc = wire_stats_to_msg(cc->stats, &g->stats, &packed)) < 0) {
        snprintf(j->err, sizeof j->err, "packing the statistics failed (%d)", j->rc);
        return;
    }
    /* [worker] delay_ms: a slow worker on demand (gradient staleness studies) */
    if (s->cfg->worker_delay_ms) {
        /* uniform in [0, 2 x delay_ms], so that the gradients' ages spread */
        uint64_t us = rng_below(&s->delay_rng, (uint32_t)(2 * s->cfg->worker_delay_ms * 1000 + 1));
        struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    j->compute_ms = clock_now_ms() - t0;
    g->compute_ms = j->compute_ms;
    j->rc = msg_encode(&m, &j->buf, &j->len);
    if (j->rc < 0) snprintf(j->err, sizeof j->err, "encoding the gradient failed (%d)", j->rc);
    wire_stats_release(&g->stats, &packed);
}

static void s_work(void *job, void *user) {
    s_job_t *j = job;
    if (j->kind == S_JOB_SETUP) j->rc = compute_ctx_init(&j->cc, &j->setup, j->err, sizeof j->err);
    else s_work_grad(user, j);
}

/* ---- loop thread ------------------------------------------------------------------ */

static void s_job_free(s_job_t *j) {
    if (!j) return;
    compute_setup_release(&j->setup);
    compute_ctx_release(&j->cc);
    msg_clear(&j->params);
    free(j->buf);
    free(j);
}

static void s_done(void *job, int status, void *user) {
    worker_server_t *s = user;
    s_job_t *j = job;
    s->busy = 0;
    if (status < 0 || client_stopping(s->d.client)) {
        s_job_free(j);
        return;
    }
    if (j->kind == S_JOB_SETUP) {
        if (j->rc < 0) {
            int code = config_exit_status(j->rc); /* 78: the data files or their shape */
            log_error("cannot set up the model and data: %s", j->err);
            s_job_free(j);
            client_stop(s->d.client, code, "setup failed", 1);
            return;
        }
        compute_ctx_move(&s->cc, &j->cc);
        s->have_cc = 1;
        log_info("ready: shard %d of %d (%d examples), batch %d, %zu parameters, statistics %s", j->setup.rank,
                 j->setup.n_ranks, batcher_shard_size(s->cc.bat), s->cc.batch, s->cc.net->n_params,
                 s->cc.stats ? (s->cc.fisher == KFAC_FISHER_TRUE ? "on request (true Fisher)"
                                                                 : "on request (empirical Fisher)")
                             : "never (sgd)");
    } else {
        if (j->rc < 0) {
            log_error("gradient of version %" PRIu64 " failed: %s", j->params.params.version, j->err);
            s_job_free(j);
            client_stop(s->d.client, 1, "compute failed", 1);
            return;
        }
        uint64_t v = j->params.params.version;
        int rc = client_send_take(s->d.client, &j->buf, j->len);
        s->have_pushed = 1;
        s->last_pushed = v;
        if (rc == 0) {
            s->n_outstanding++;
            s->n_pushed++;
            s->compute_ms_sum += j->compute_ms;
            log_debug("gradient of version %" PRIu64 ": loss %.4f, %d/%d correct, %.1f ms%s", v, j->loss,
                      j->n_correct, j->n_examples, j->compute_ms, j->with_stats ? ", with statistics" : "");
            if (s->n_pushed % S_PROGRESS_EVERY == 0)
                log_info("%" PRIu64 " gradients pushed (version %" PRIu64 ", loss %.4f), %.1f ms each on average",
                         s->n_pushed, v, j->loss, s->compute_ms_sum / (double)s->n_pushed);
        }
    }
    s_job_free(j);
    s_next(s);
}

static void s_submit(worker_server_t *s, s_job_t *j) {
    int rc = zloop_pool_submit(s->d.pool, j);
    if (rc < 0) {
        log_error("cannot queue work: %s", strerror(-rc));
        s_job_free(j);
        client_stop(s->d.client, 1, "internal error", 1);
        return;
    }
    s->busy = 1;
}

static void s_get_params(worker_server_t *s) {
    msg_t m;
    client_msg_init(s->d.client, &m, MSG_GET_PARAMS);
    m.get_params.min_version = 0;
    if (client_send(s->d.client, &m) == 0) s->n_outstanding++;
}

/* Start whatever comes next when idle. */
static void s_next(worker_server_t *s) {
    if (s->busy || client_stopping(s->d.client)) return;
    if (s->next_setup) {
        s_job_t *j = calloc(1, sizeof *j);
        if (!j) {
            client_stop(s->d.client, 1, "out of memory", 1);
            return;
        }
        j->kind = S_JOB_SETUP;
        j->setup = *s->next_setup;
        free(s->next_setup);
        s->next_setup = NULL;
        s_submit(s, j);
        return;
    }
    if (!s->have_cc || !client_welcomed(s->d.client)) return;
    if (s->pending) {
        msg_t *p = s->pending;
        s->pending = NULL;
        s_job_t *j = calloc(1, sizeof *j);
        if (!j) {
            msg_clear(p);
            free(p);
            client_stop(s->d.client, 1, "out of memory", 1);
            return;
        }
        j->kind = S_JOB_GRAD;
        j->params = *p;
        free(p);
        j->sender_id = client_id(s->d.client);
        s_submit(s, j);
        return;
    }
    if (s->n_outstanding == 0) s_get_params(s);
}

static int s_on_welcome(client_t *c, const msg_welcome_t *w, const runcfg_t *cfg, void *user) {
    (void)c;
    worker_server_t *s = user;
    compute_setup_t *st = calloc(1, sizeof *st);
    int rc = -ENOMEM;
    if (!st || (rc = compute_setup_init(st, w, cfg)) < 0) {
        free(st);
        if (rc == -ENOMEM) log_error("out of memory"); /* -EINVAL: compute_setup_init said why */
        return rc;
    }
    st->device = cfg->device;
    st->skip_batches = w->params_version; /* the data position of a worker present since step 0 */
    if (s->next_setup) {
        compute_setup_release(s->next_setup);
        free(s->next_setup);
    }
    s->next_setup = st;
    /* A new session: nothing asked of this PS yet. */
    s->n_outstanding = 0;
    s->have_pushed = 0;
    if (s->pending) {
        msg_clear(s->pending);
        free(s->pending);
        s->pending = NULL;
    }
    s_next(s);
    return 0;
}

static void s_on_params(worker_server_t *s, msg_t *m) {
    char err[512];
    const msg_limits_t *lim = s->have_cc ? &s->cc.shape.limits : NULL;
    if (s->n_outstanding > 0) s->n_outstanding--;
    /* The shape is only read by msg_validate; a running job does not change it. */
    if (msg_validate(m, lim, err, sizeof err) < 0) {
        client_daemon_reject(&s->d, "params", err, ++s->n_invalid);
        s_next(s);
        return;
    }
    if (s->have_pushed && m->params.version <= s->last_pushed) {
        s->n_duplicates++;
        log_debug("params version %" PRIu64 " already done: ignored", m->params.version);
        s_next(s);
        return;
    }
    if (s->pending && s->pending->params.version >= m->params.version) {
        s->n_duplicates++;
        return;
    }
    msg_t *keep = malloc(sizeof *keep);
    if (!keep) {
        client_stop(s->d.client, 1, "out of memory", 1);
        return;
    }
    *keep = *m;
    memset(m, 0, sizeof *m); /* the arrays are ours now */
    if (s->pending) {
        msg_clear(s->pending);
        free(s->pending);
    }
    s->pending = keep;
    s_next(s);
}

static void s_on_message(client_t *c, msg_t *m, void *user) {
    (void)c;
    worker_server_t *s = user;
    switch (m->type) {
    case MSG_PARAMS:
        s_on_params(s, m);
        break;
    default:
        if (client_daemon_other_message(&s->d, m) == CLIENT_DAEMON_ERROR) {
            if (s->n_outstanding > 0) s->n_outstanding--;
            s_next(s);
        }
        break;
    }
}

static void s_on_stop(client_t *c, int exit_code, const char *reason, void *user) {
    (void)c;
    (void)exit_code;
    (void)reason;
    worker_server_t *s = user;
    /* The mean compute per gradient is an input of the scale model (docs/scaling.md). */
    log_info("%" PRIu64 " gradients pushed (%.1f ms compute each on average), %" PRIu64 " duplicate params ignored, %" PRIu64
             " invalid",
             s->n_pushed, s->n_pushed ? s->compute_ms_sum / (double)s->n_pushed : 0.0, s->n_duplicates, s->n_invalid);
    zloop_pool_free(&s->d.pool); /* waits for a running job, cancels the rest */
}

static const client_handlers_t s_handlers = {
    .on_welcome = s_on_welcome,
    .on_message = s_on_message,
    .on_stop = s_on_stop,
};

worker_server_t *worker_server_new(const runcfg_t *cfg) {
    /* --device cuda must fail before anything starts when no GPU can answer;
     * auto is resolved (with one log line) when the backend is made. */
    char why[256];
    if (cfg->device == BACKEND_CUDA && !backend_gpu_probe(why, sizeof why)) {
        log_error("--device cuda: %s; use --device cpu or auto", why);
        return NULL;
    }
    client_blas_threads(cfg->worker_threads);
    worker_server_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cfg = cfg;
    rng_seed(&s->delay_rng, cfg->seed * 1000003ULL + (uint64_t)cfg->worker_id);
    if (client_daemon_init(&s->d, MSG_ROLE_WORKER, RUNCFG_ROLE_WORKER, cfg, s_work, s_done, &s_handlers, s) < 0) {
        free(s);
        return NULL;
    }
    return s;
}

int worker_server_run(worker_server_t *s) { return client_daemon_run(&s->d); }

void worker_server_free(worker_server_t **sp) {
    if (!sp || !*sp) return;
    worker_server_t *s = *sp;
    *sp = NULL;
    client_daemon_release(&s->d);
    compute_ctx_release(&s->cc);
    if (s->next_setup) {
        compute_setup_release(s->next_setup);
        free(s->next_setup);
    }
    if (s->pending) {
        msg_clear(s->pending);
        free(s->pending);
    }
    free(s);
}
