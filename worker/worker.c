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

#include "common/base/clock.h"
#include "common/base/log.h"
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

struct worker_server {
    const runcfg_t *cfg;          /* borrowed */
    client_daemon_t *d;           /* loop, compute thread, connection, protocol state */
    int have_pushed;
    uint64_t last_pushed;
    uint64_t n_pushed, n_duplicates;
    double compute_ms_sum;
};

/* ---- compute thread -------------------------------------------------------------- */

static void s_work(void *user, compute_ctx_t *cc, client_daemon_job_t *job) {
    (void)user;
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
    float *packed = NULL;
    if (j->with_stats && (job->rc = wire_stats_to_msg(cc->stats, &g->stats, &packed)) < 0) {
        snprintf(job->err, sizeof job->err, "packing the statistics failed (%d)", job->rc);
        return;
    }
    job->compute_ms = clock_now_ms() - t0;
    g->compute_ms = job->compute_ms;
    job->rc = msg_encode(&m, &job->buf, &job->len);
    if (job->rc < 0) snprintf(job->err, sizeof job->err, "encoding the gradient failed (%d)", job->rc);
    wire_stats_release(&g->stats, &packed);
}

/* ---- loop thread ------------------------------------------------------------------ */

/* The setup: the model, this worker's shard, its device. */
static int s_welcome(void *user, const msg_welcome_t *w, const runcfg_t *cfg, compute_setup_t *st) {
    worker_server_t *s = user;
    int rc = compute_setup_init(st, w, cfg);
    if (rc < 0) {
        if (rc == -ENOMEM) log_error("out of memory"); /* -EINVAL: compute_setup_init said why */
        return rc;
    }
    st->device = cfg->device;
    st->skip_batches = w->params_version; /* the data position of a worker present since step 0 */
    s->have_pushed = 0;
    return CLIENT_DAEMON_WELCOME_SETUP;
}

static void s_ready(void *user, const compute_ctx_t *cc, const compute_setup_t *st) {
    (void)user;
    log_info("ready: shard %d of %d (%d examples), batch %d, %zu parameters, statistics %s", st->rank, st->n_ranks,
             batcher_shard_size(cc->bat), cc->batch, cc->net->n_params,
             cc->stats ? (cc->fisher == KFAC_FISHER_TRUE ? "on request (true Fisher)" : "on request (empirical Fisher)")
                       : "never (sgd)");
}

static int s_accept(void *user, client_daemon_job_t *j, const client_daemon_job_t *newest, char *err, size_t n) {
    worker_server_t *s = user;
    const compute_ctx_t *cc = client_daemon_ctx(s->d);
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

static int s_done(void *user, client_daemon_job_t *job) {
    worker_server_t *s = user;
    s_job_t *j = (s_job_t *)job;
    uint64_t v = job->in.params.version;
    if (job->rc < 0) {
        log_error("gradient of version %" PRIu64 " failed: %s", v, job->err);
        client_stop(client_daemon_client(s->d), 1, "compute failed", 1);
        return 0;
    }
    int rc = client_daemon_send_result(s->d, job);
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

static void s_stop(void *user) {
    worker_server_t *s = user;
    log_info("%" PRIu64 " gradients pushed, %" PRIu64 " duplicate params ignored, %" PRIu64 " invalid", s->n_pushed,
             s->n_duplicates, client_daemon_n_invalid(s->d));
}

static const client_daemon_role_t s_role = {
    .role = MSG_ROLE_WORKER,
    .cfg_role = RUNCFG_ROLE_WORKER,
    .input_type = MSG_PARAMS,
    .input_what = "params",
    .request_type = MSG_GET_PARAMS, /* min_version 0: the newest */
    .job_size = sizeof(s_job_t),
    .welcome = s_welcome,
    .ready = s_ready,
    .accept = s_accept,
    .work = s_work,
    .done = s_done,
    .stop = s_stop,
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
    s->d = client_daemon_new(&s_role, cfg, s);
    if (!s->d) {
        free(s);
        return NULL;
    }
    return s;
}

int worker_server_run(worker_server_t *s) { return client_daemon_run(s->d); }

void worker_server_free(worker_server_t **sp) {
    if (!sp || !*sp) return;
    worker_server_t *s = *sp;
    *sp = NULL;
    client_daemon_free(&s->d);
    free(s);
}
