/* statsd/statsd.c — see statsd.h. A role of the client skeleton
 * (common/net/daemon.h): the setup from Welcome (its own stream of the
 * training split), the statistics of one Params (the work) and the
 * StatsPush (the result). The skeleton keeps the protocol state: the setup
 * job, the newest pending Params and the requests kfac-ps has not
 * answered.
 *
 * Params that arrive while a batch is being computed (duplicates after a
 * re-Hello) are kept (the newest) but dropped once the StatsPush went out,
 * since its answer brings newer parameters anyway.
 */
#include "statsd/statsd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/net/client.h"
#include "common/net/compute.h"
#include "common/net/daemon.h"
#include "common/net/wire.h"
#include "proto/msg.h"

#define S_PROGRESS_EVERY 100 /* pushes between info lines */

typedef struct s_job {
    client_daemon_job_t base; /* in: the Params */
    int n_examples;
    int n_layers;             /* layers computed */
    double cpu_ms;            /* this thread's CPU time for the batch */
} s_job_t;

typedef struct s_statsd {
    int idle_mode;                /* sgd or stats=sync: nothing to compute */
    uint64_t n_pushed;
    uint64_t last_version;
    double compute_ms_sum, cpu_ms_sum;
    uint64_t n_layer_stats;       /* layer statistics computed and pushed, all batches */
    int n_layers;                 /* layers with statistics in the model */
    uint64_t *per_layer;          /* (n_layers) statistics pushed per slot */
} s_statsd_t;

/* ---- compute thread -------------------------------------------------------------- */

/* CPU time of the calling thread in ms (BLAS threads not included). */
static double s_thread_cpu_ms(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0.0;
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void s_work(void *state, compute_ctx_t *cc, client_daemon_job_t *job) {
    (void)state;
    s_job_t *j = (s_job_t *)job;
    double t0 = clock_now_ms(), c0 = s_thread_cpu_ms();
    const msg_params_t *p = &job->in.params;
    double loss = 0.0;
    int hits = 0;
    /* Only the layers the PS asks for ([kfac] refresh = adaptive; none
     * listed: all): the others are neither computed nor sent. */
    j->n_layers = wire_stats_want(cc->stats, p->stats_layers, p->n_stats_layers);
    job->rc = compute_ctx_batch(cc, p->params, p->n_state ? p->state : NULL, 1, 0, &loss, &hits, &j->n_examples,
                                job->err, sizeof job->err);
    if (job->rc < 0) return;
    msg_t m;
    msg_init(&m, MSG_STATS_PUSH, MSG_ROLE_STATSD, job->sender_id);
    msg_stats_push_t *sp = &m.stats_push;
    sp->params_version = p->version;
    sp->n_examples = (uint64_t)j->n_examples;
    client_daemon_job_answer(job, &m, &sp->compute_ms, t0, cc->stats, &sp->stats, "the statistics");
    j->cpu_ms = s_thread_cpu_ms() - c0; /* with the packing and the encoding */
}

/* ---- loop thread ------------------------------------------------------------------ */

/* Idle with optimizer sgd or stats = sync; else the setup: its own stream of
 * the training split. */
static int s_welcome(client_daemon_t *d, const msg_welcome_t *w, const runcfg_t *cfg, compute_setup_t *st) {
    s_statsd_t *s = client_daemon_state(d);
    if (cfg->optimizer != RUNCFG_OPTIMIZER_KFAC || cfg->stats_mode != RUNCFG_STATS_ASYNC) {
        if (!s->idle_mode)
            log_info("nothing to do: the run uses %s; waiting for the end of the run",
                     cfg->optimizer == RUNCFG_OPTIMIZER_SGD ? "sgd (no statistics)"
                                                            : "kfac stats=sync (workers send the statistics)");
        s->idle_mode = 1;
        return CLIENT_DAEMON_WELCOME_IDLE;
    }
    s->idle_mode = 0;
    int rc = compute_setup_init(st, w, cfg);
    if (rc < 0) {
        if (rc == -ENOMEM) log_error("out of memory"); /* -EINVAL: compute_setup_init said why */
        return rc;
    }
    st->device = cfg->daemon[RUNCFG_ROLE_STATSD].device;
    /* Its own stream: the whole training split, seeded from the run seed and
     * this daemon's id (its --id, so a run is reproducible; the id the PS
     * assigned when --id is 0), batches of [statsd] batch (or [data] batch). */
    int local_id = client_daemon_config(d)->daemon[RUNCFG_ROLE_STATSD].id;
    uint64_t id = local_id > 0 ? (uint64_t)local_id : client_id(client_daemon_client(d));
    st->rank = 0;
    st->n_ranks = 1;
    st->batch = cfg->statsd_batch > 0 ? cfg->statsd_batch : cfg->batch;
    st->batch_seed = cfg->seed ^ (0x57a75d0000000000ULL + id * 0x9E3779B97F4A7C15ULL);
    st->label_seed = st->batch_seed ^ 0x1abe1ULL;
    st->with_stats = 1;
    return CLIENT_DAEMON_WELCOME_SETUP;
}

static void s_ready(client_daemon_t *d, const compute_ctx_t *cc, const compute_setup_t *st) {
    (void)st;
    s_statsd_t *s = client_daemon_state(d);
    free(s->per_layer);
    s->n_layers = cc->stats ? cc->stats->n_layers : 0;
    s->per_layer = calloc(s->n_layers ? (size_t)s->n_layers : 1, sizeof *s->per_layer);
    log_info("ready: batches of %d from %d training examples, %s Fisher, %d preconditioned layers", cc->batch,
             batcher_shard_size(cc->bat), cc->fisher == KFAC_FISHER_TRUE ? "true" : "empirical", s->n_layers);
}

static int s_accept(client_daemon_t *d, client_daemon_job_t *j, const client_daemon_job_t *newest, char *err,
                    size_t n) {
    const s_statsd_t *s = client_daemon_state(d);
    const compute_ctx_t *cc = client_daemon_ctx(d);
    if (msg_validate(&j->in, cc ? &cc->shape.limits : NULL, err, n) < 0) return -EINVAL;
    if (s->idle_mode || (newest && newest->in.params.version > j->in.params.version)) return CLIENT_DAEMON_INPUT_DROP;
    return CLIENT_DAEMON_INPUT_NEWEST;
}

static int s_done(client_daemon_t *d, client_daemon_job_t *job) {
    s_statsd_t *s = client_daemon_state(d);
    s_job_t *j = (s_job_t *)job;
    uint64_t v = job->in.params.version;
    if (client_daemon_send_result(d, job) < 0) return 0;
    s->n_pushed++;
    s->last_version = v;
    s->compute_ms_sum += job->compute_ms;
    s->cpu_ms_sum += j->cpu_ms;
    s->n_layer_stats += (uint64_t)j->n_layers;
    const compute_ctx_t *cc = client_daemon_ctx(d);
    for (int i = 0; i < s->n_layers && s->per_layer && cc; i++)
        if (!cc->stats->layers[i].skip) s->per_layer[i]++;
    client_daemon_drop_pending(d); /* the answer brings the newest parameters */
    log_debug("statistics of %d examples at version %" PRIu64 ", %d of %d layers, %.1f ms", j->n_examples, v,
              j->n_layers, s->n_layers, job->compute_ms);
    if (s->n_pushed % S_PROGRESS_EVERY == 0)
        log_info("%" PRIu64 " statistics batches pushed (version %" PRIu64 "), %.1f ms each on average", s->n_pushed,
                 v, s->compute_ms_sum / (double)s->n_pushed);
    return 0;
}

/* The summary the adaptive-refresh measurements read (bench/, tests):
 * layer statistics computed in all and per layer, compute thread CPU time. */
static void s_log_layer_counts(const s_statsd_t *s, const compute_ctx_t *cc) {
    if (!s->per_layer || !cc || s->n_layers == 0) return;
    char per[512];
    size_t off = 0;
    per[0] = 0;
    for (int i = 0; i < s->n_layers && off < sizeof per; i++) {
        int w = snprintf(per + off, sizeof per - off, "%s%d:%" PRIu64, i ? " " : "", cc->stats->layers[i].layer,
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

static void s_stop(client_daemon_t *d) {
    s_statsd_t *s = client_daemon_state(d);
    log_info("%" PRIu64 " statistics batches pushed, %" PRIu64 " invalid params", s->n_pushed,
             client_daemon_n_invalid(d));
    s_log_layer_counts(s, client_daemon_ctx(d));
    free(s->per_layer);
    s->per_layer = NULL;
}

/* The statsd role (common/net/daemon.h). */
static const client_daemon_role_t s_role = {
    .role = RUNCFG_ROLE_STATSD, .job_size = sizeof(s_job_t), .state_size = sizeof(s_statsd_t),
    /* loop thread */
    .welcome = s_welcome, .ready = s_ready, .accept = s_accept, .done = s_done, .stop = s_stop,
    /* compute thread */
    .work = s_work,
};

const client_daemon_role_t *statsd_role(void) { return &s_role; }
