/* statsd/statsd.c — see statsd.h. Same shape as the worker: the loop keeps
 * the protocol state, the compute thread owns the network while a job runs.
 *
 * Request accounting: n_outstanding counts GetParams / StatsPush not yet
 * answered; a GetParams is sent only when idle with nothing outstanding.
 * Params that arrive while a batch is being computed (duplicates after a
 * re-Hello) are kept (the newest) but dropped once the StatsPush went out,
 * since its answer brings newer parameters anyway.
 */
#include "statsd/statsd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "common/net/client.h"
#include "common/net/compute.h"
#include "common/net/daemon.h"
#include "common/base/log.h"
#include "common/net/wire.h"
#include "common/net/zloop.h"
#include "proto/msg.h"
#include "common/base/ratelimit.h"
#include "common/base/clock.h"

#define S_PROGRESS_EVERY 100 /* pushes between info lines */

typedef enum { S_JOB_SETUP = 0, S_JOB_STATS } s_job_kind_t;

typedef struct s_job {
    s_job_kind_t kind;
    compute_setup_t setup;     /* setup */
    compute_ctx_t cc;      /* setup: built here, installed by the loop */
    msg_t params;             /* stats: the Params message (owned) */
    uint32_t sender_id;
    uint8_t *buf;             /* stats: encoded StatsPush */
    size_t len;
    int n_examples;
    int n_layers;             /* stats: layers computed */
    double compute_ms;
    double cpu_ms;            /* stats: this thread's CPU time for the batch */
    int rc;
    char err[512];
} s_job_t;

struct statsd_server {
    const runcfg_t *cfg;          /* borrowed */
    client_daemon_t d;            /* loop, job pool, connection */
    compute_ctx_t cc;          /* the compute thread's while busy */
    int have_cc;
    int idle_mode;                /* sgd or stats=sync: nothing to compute */
    int busy;
    compute_setup_t *next_setup;
    msg_t *pending;
    int n_outstanding;
    uint64_t n_pushed, n_invalid;
    uint64_t last_version;
    double compute_ms_sum, cpu_ms_sum;
    uint64_t n_layer_stats;       /* layer statistics computed and pushed, all batches */
    int n_layers;                 /* layers with statistics in the model */
    uint64_t *per_layer;          /* (n_layers) statistics pushed per slot */
};

static void s_next(statsd_server_t *s);
static void s_log_layer_counts(const statsd_server_t *s);

/* ---- compute thread -------------------------------------------------------------- */

/* CPU time of the calling thread in ms (BLAS threads not included). */
static double s_thread_cpu_ms(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0.0;
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void s_work_stats(statsd_server_t *s, s_job_t *j) {
    double t0 = clock_now_ms(), c0 = s_thread_cpu_ms();
    compute_ctx_t *cc = &s->cc;
    const msg_params_t *p = &j->params.params;
    double loss = 0.0;
    int hits = 0;
    /* Only the layers the PS asks for ([kfac] refresh = adaptive; none
     * listed: all): the others are neither computed nor sent. */
    j->n_layers = wire_stats_want(cc->stats, p->stats_layers, p->n_stats_layers);
    j->rc = compute_ctx_batch(cc, p->params, p->n_state ? p->state : NULL, 1, 0, &loss, &hits, &j->n_examples,
                                 j->err, sizeof j->err);
    if (j->rc < 0) return;
    msg_t m;
    msg_init(&m, MSG_STATS_PUSH, MSG_ROLE_STATSD, j->sender_id);
    msg_stats_push_t *sp = &m.stats_push;
    sp->params_version = p->version;
    sp->n_examples = (uint64_t)j->n_examples;
    float *packed = NULL;
    if ((j->rc = wire_stats_to_msg(cc->stats, &sp->stats, &packed)) < 0) {
        snprintf(j->err, sizeof j->err, "packing the statistics failed (%d)", j->rc);
        return;
    }
    j->compute_ms = clock_now_ms() - t0;
    j->cpu_ms = s_thread_cpu_ms() - c0;
    sp->compute_ms = j->compute_ms;
    j->rc = msg_encode(&m, &j->buf, &j->len);
    if (j->rc < 0) snprintf(j->err, sizeof j->err, "encoding the statistics failed (%d)", j->rc);
    wire_stats_release(&sp->stats, &packed);
}

static void s_work(void *job, void *user) {
    s_job_t *j = job;
    if (j->kind == S_JOB_SETUP) j->rc = compute_ctx_init(&j->cc, &j->setup, j->err, sizeof j->err);
    else s_work_stats(user, j);
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

static void s_drop_pending(statsd_server_t *s) {
    if (!s->pending) return;
    msg_clear(s->pending);
    free(s->pending);
    s->pending = NULL;
}

static void s_done(void *job, int status, void *user) {
    statsd_server_t *s = user;
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
        free(s->per_layer);
        s->n_layers = s->cc.stats ? s->cc.stats->n_layers : 0;
        s->per_layer = calloc(s->n_layers ? (size_t)s->n_layers : 1, sizeof *s->per_layer);
        log_info("ready: batches of %d from %d training examples, %s Fisher, %d preconditioned layers", s->cc.batch,
                 batcher_shard_size(s->cc.bat), s->cc.fisher == KFAC_FISHER_TRUE ? "true" : "empirical",
                 s->cc.stats ? s->cc.stats->n_layers : 0);
    } else {
        if (j->rc < 0) {
            log_error("statistics at version %" PRIu64 " failed: %s", j->params.params.version, j->err);
            s_job_free(j);
            client_stop(s->d.client, 1, "compute failed", 1);
            return;
        }
        uint64_t v = j->params.params.version;
        if (client_send_take(s->d.client, &j->buf, j->len) == 0) {
            s->n_outstanding++;
            s->n_pushed++;
            s->last_version = v;
            s->compute_ms_sum += j->compute_ms;
            s->cpu_ms_sum += j->cpu_ms;
            s->n_layer_stats += (uint64_t)j->n_layers;
            for (int i = 0; i < s->n_layers && s->per_layer && s->have_cc; i++)
                if (!s->cc.stats->layers[i].skip) s->per_layer[i]++;
            s_drop_pending(s); /* the answer brings the newest parameters */
            log_debug("statistics of %d examples at version %" PRIu64 ", %d of %d layers, %.1f ms", j->n_examples, v,
                      j->n_layers, s->n_layers, j->compute_ms);
            if (s->n_pushed % S_PROGRESS_EVERY == 0)
                log_info("%" PRIu64 " statistics batches pushed (version %" PRIu64 "), %.1f ms each on average",
                         s->n_pushed, v, s->compute_ms_sum / (double)s->n_pushed);
        }
    }
    s_job_free(j);
    s_next(s);
}

static void s_submit(statsd_server_t *s, s_job_t *j) {
    int rc = zloop_pool_submit(s->d.pool, j);
    if (rc < 0) {
        log_error("cannot queue work: %s", strerror(-rc));
        s_job_free(j);
        client_stop(s->d.client, 1, "internal error", 1);
        return;
    }
    s->busy = 1;
}

static void s_next(statsd_server_t *s) {
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
    if (s->idle_mode || !s->have_cc || !client_welcomed(s->d.client)) return;
    if (s->pending) {
        s_job_t *j = calloc(1, sizeof *j);
        if (!j) {
            client_stop(s->d.client, 1, "out of memory", 1);
            return;
        }
        j->kind = S_JOB_STATS;
        j->params = *s->pending;
        free(s->pending);
        s->pending = NULL;
        j->sender_id = client_id(s->d.client);
        s_submit(s, j);
        return;
    }
    if (s->n_outstanding == 0) {
        msg_t m;
        client_msg_init(s->d.client, &m, MSG_GET_PARAMS);
        m.get_params.min_version = 0;
        if (client_send(s->d.client, &m) == 0) s->n_outstanding++;
    }
}

static int s_on_welcome(client_t *c, const msg_welcome_t *w, const runcfg_t *cfg, void *user) {
    statsd_server_t *s = user;
    s->n_outstanding = 0;
    s_drop_pending(s);
    if (cfg->optimizer != RUNCFG_OPTIMIZER_KFAC || cfg->stats_mode != RUNCFG_STATS_ASYNC) {
        if (!s->idle_mode)
            log_info("nothing to do: the run uses %s; waiting for the end of the run",
                     cfg->optimizer == RUNCFG_OPTIMIZER_SGD ? "sgd (no statistics)" : "kfac stats=sync (workers send the statistics)");
        s->idle_mode = 1;
        return 0;
    }
    s->idle_mode = 0;
    compute_setup_t *st = calloc(1, sizeof *st);
    int rc = -ENOMEM;
    if (!st || (rc = compute_setup_init(st, w, cfg)) < 0) {
        free(st);
        if (rc == -ENOMEM) log_error("out of memory"); /* -EINVAL: compute_setup_init said why */
        return rc;
    }
    st->device = cfg->statsd_device;
    /* Its own stream: the whole training split, seeded from the run seed and
     * this daemon's id (its --id, so a run is reproducible; the id the PS
     * assigned when --id is 0), batches of [statsd] batch (or [data] batch). */
    uint64_t id = s->cfg->statsd_id > 0 ? (uint64_t)s->cfg->statsd_id : client_id(c);
    st->rank = 0;
    st->n_ranks = 1;
    st->batch = cfg->statsd_batch > 0 ? cfg->statsd_batch : cfg->batch;
    st->batch_seed = cfg->seed ^ (0x57a75d0000000000ULL + id * 0x9E3779B97F4A7C15ULL);
    st->label_seed = st->batch_seed ^ 0x1abe1ULL;
    st->with_stats = 1;
    if (s->next_setup) {
        compute_setup_release(s->next_setup);
        free(s->next_setup);
    }
    s->next_setup = st;
    s_next(s);
    return 0;
}

static void s_on_params(statsd_server_t *s, msg_t *m) {
    char err[512];
    if (s->n_outstanding > 0) s->n_outstanding--;
    if (msg_validate(m, s->have_cc ? &s->cc.shape.limits : NULL, err, sizeof err) < 0) {
        client_daemon_reject(&s->d, "params", err, ++s->n_invalid);
        s_next(s);
        return;
    }
    if (s->idle_mode) return;
    if (s->pending && s->pending->params.version > m->params.version) return;
    msg_t *keep = malloc(sizeof *keep);
    if (!keep) {
        client_stop(s->d.client, 1, "out of memory", 1);
        return;
    }
    *keep = *m;
    memset(m, 0, sizeof *m);
    s_drop_pending(s);
    s->pending = keep;
    s_next(s);
}

static void s_on_message(client_t *c, msg_t *m, void *user) {
    (void)c;
    statsd_server_t *s = user;
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
    statsd_server_t *s = user;
    log_info("%" PRIu64 " statistics batches pushed, %" PRIu64 " invalid params", s->n_pushed, s->n_invalid);
    s_log_layer_counts(s);
    zloop_pool_free(&s->d.pool);
}

/* The summary the adaptive-refresh measurements read (bench/, tests):
 * layer statistics computed in all and per layer, compute thread CPU time. */
static void s_log_layer_counts(const statsd_server_t *s) {
    if (!s->per_layer || !s->have_cc || s->n_layers == 0) return;
    char per[512];
    size_t off = 0;
    per[0] = 0;
    for (int i = 0; i < s->n_layers && off < sizeof per; i++) {
        int w = snprintf(per + off, sizeof per - off, "%s%d:%" PRIu64, i ? " " : "", s->cc.stats->layers[i].layer,
                         s->per_layer[i]);
        if (w < 0) break;
        off += (size_t)w;
    }
    log_info("layer statistics: %" PRIu64 " computed in %" PRIu64 " batches (%.2f of %d layers per batch; by layer "
             "%s); compute thread CPU %.0f ms",
             s->n_layer_stats, s->n_pushed, s->n_pushed ? (double)s->n_layer_stats / (double)s->n_pushed : 0.0,
             s->n_layers, per, s->cpu_ms_sum);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        log_info("process CPU time: %.2f s user, %.2f s system (with the data set load)",
                 (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec,
                 (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec);
}

static const client_handlers_t s_handlers = {
    .on_welcome = s_on_welcome,
    .on_message = s_on_message,
    .on_stop = s_on_stop,
};

statsd_server_t *statsd_server_new(const runcfg_t *cfg) {
    char why[256];
    if (cfg->statsd_device == BACKEND_CUDA && !backend_gpu_probe(why, sizeof why)) {
        log_error("--device cuda: %s; use --device cpu or auto", why);
        return NULL;
    }
    client_blas_threads(cfg->statsd_threads);
    statsd_server_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cfg = cfg;
    if (client_daemon_init(&s->d, MSG_ROLE_STATSD, RUNCFG_ROLE_STATSD, cfg, s_work, s_done, &s_handlers, s) < 0) {
        free(s);
        return NULL;
    }
    return s;
}

int statsd_server_run(statsd_server_t *s) { return client_daemon_run(&s->d); }

void statsd_server_free(statsd_server_t **sp) {
    if (!sp || !*sp) return;
    statsd_server_t *s = *sp;
    *sp = NULL;
    client_daemon_release(&s->d);
    compute_ctx_release(&s->cc);
    if (s->next_setup) {
        compute_setup_release(s->next_setup);
        free(s->next_setup);
    }
    s_drop_pending(s);
    free(s->per_layer);
    free(s);
}
