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
#include <time.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/rng.h"
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
    st->device = cfg->device;
    st->skip_batches = w->params_version; /* the data position of a worker present since step 0 */
    s->have_pushed = 0;
    s->delay_ms = cfg->worker_delay_ms;
    rng_seed(&s->delay_rng, cfg->seed * 1000003ULL + (uint64_t)cfg->worker_id);
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
    log_info("%" PRIu64 " gradients pushed (%.1f ms compute each on average), %" PRIu64 " duplicate params ignored, %" PRIu64
             " invalid",
             s->n_pushed, s->n_pushed ? s->compute_ms_sum / (double)s->n_pushed : 0.0, s->n_duplicates,
             client_daemon_n_invalid(d));
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
