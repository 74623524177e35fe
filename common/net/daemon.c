/* common/net/daemon.c — see daemon.h.
 *
 * Threads: everything runs on the loop thread except s_work (the compute
 * thread), which reads d->cc, the job it was handed, the priority fields
 * marked "pool thread" and the floor's atomics. The loop touches d->cc only
 * while no job runs (s_setup_done installs it), or reads what no job
 * changes (client_daemon_ctx).
 */
#include "common/net/daemon.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/config.h"
#include "common/base/log.h"
#include "common/base/prio.h"
#include "common/base/ratelimit.h"
#include "common/net/zloop.h"

#define S_LOG_EVERY_MS 5000
#define S_FLOOR_TICK_MS 500  /* the floor's look at the compute thread */
#define S_FLOOR_SHARE 0.10   /* of one CPU: under this with a job running, a tick is starved */
#define S_FLOOR_TICKS 2      /* consecutive starved ticks before the floor acts */
#define S_FLOOR_NICE 10      /* the nice value the threads are lifted to */
#define S_FLOOR_SPARE 0.50   /* lifted, and at this share or more: the host has spare CPU again */

struct client_daemon {
    uv_loop_t loop;
    client_t *client;    /* owned */
    zloop_pool_t *pool;  /* owned; freed when the client stops (zloop_pool_free NULLs it) */
    ratelimit_t rl_err;  /* log lines about kfac-ps's answers: one per 5 s */
    const client_daemon_role_t *r; /* borrowed */
    void *state;         /* the role's state (owned) */
    const runcfg_t *cfg; /* the local configuration (borrowed) */
    msg_role_t msg_role;      /* derived from r->role (daemon.h) */
    msg_type_t input_type;
    msg_type_t request_type;
    const char *input_what;   /* in a rejection line */
    const char *work_what;    /* in a failure line */
    /* the protocol state (loop thread) */
    compute_ctx_t cc;    /* the compute thread's while a job runs */
    int have_cc;
    client_daemon_welcome_t mode;  /* the last Welcome's answer */
    compute_setup_t *next_setup;   /* a setup not yet started (owned) */
    client_daemon_job_t *qhead, *qtail; /* pending input, oldest first (owned) */
    int busy;            /* a job is on the compute thread */
    int n_outstanding;   /* requests kfac-ps has not answered */
    uint64_t n_invalid;
    /* priority */
    runcfg_priority_t prio; /* [statsd]/[invertd] priority: the pool thread lowers itself on its second job */
    int prio_done;       /* pool thread only */
    uint64_t n_jobs;     /* pool thread only: jobs started */
    /* priority = yield: the floor (loop thread, but busy_since_ns) */
    _Atomic uint64_t busy_since_ns; /* when the running job started; 0: none (pool thread writes) */
    uv_timer_t floor_timer;
    int floor_on;          /* the timer was started (and must be closed) */
    clockid_t compute_clock;        /* the pool thread's CPU clock, set by it before its first job */
    _Atomic int compute_clock_set;
    uint64_t floor_cpu_ns; /* compute thread's CPU time and the clock at the last tick */
    uint64_t floor_at_ns;
    int floor_starved;     /* consecutive ticks under the floor with a job running */
    int boosted[64], n_boosted; /* threads lifted out of SCHED_IDLE until the job ends */
    uint64_t n_boosts;     /* times the floor acted */
    int floor_refused;     /* lifting was refused once (logged once) */
    ratelimit_t rl_floor;
};

/* A setup job: the role's Welcome made setup; the compute thread builds cc. */
typedef struct s_setup_job {
    client_daemon_job_t base; /* base.is_setup = 1 */
    compute_setup_t setup;
    compute_ctx_t cc;         /* built here, installed by the loop */
} s_setup_job_t;

/* ---- compute thread -------------------------------------------------------------- */

static void s_job_work(client_daemon_t *d, client_daemon_job_t *j) {
    if (j->is_setup) {
        s_setup_job_t *sj = (s_setup_job_t *)j;
        j->rc = compute_ctx_init(&sj->cc, &sj->setup, j->err, sizeof j->err);
        return;
    }
    d->r->work(d->state, d->have_cc ? &d->cc : NULL, j);
}

void client_daemon_job_answer(client_daemon_job_t *j, msg_t *m, double *m_compute_ms, double t0_ms,
                              const kfac_stats_t *stats, msg_stats_t *m_stats, const char *what) {
    float *packed = NULL;
    if (stats && (j->rc = wire_stats_to_msg(stats, m_stats, &packed)) < 0) {
        snprintf(j->err, sizeof j->err, "packing the statistics failed (%d)", j->rc);
        return;
    }
    j->compute_ms = clock_now_ms() - t0_ms;
    *m_compute_ms = j->compute_ms;
    j->rc = msg_encode(m, &j->buf, &j->len);
    if (j->rc < 0) snprintf(j->err, sizeof j->err, "encoding %s failed (%d)", what, j->rc);
    if (stats) wire_stats_release(m_stats, &packed);
}

/* Pool thread: the role's work. The first job (a setup from Welcome: data
 * and model) runs at the process's priority, as nothing of the curvature
 * can start before it; the thread lowers itself once, before its second
 * job. */
static void s_work(void *job, void *user) {
    client_daemon_t *d = user;
    if (d->prio != RUNCFG_PRIORITY_NORMAL && !d->prio_done && d->n_jobs++ > 0) {
        char what[160];
        d->prio_done = 1;
        int rc = d->prio == RUNCFG_PRIORITY_LOW     ? prio_nice_self(10, what, sizeof what)
                 : d->prio == RUNCFG_PRIORITY_YIELD ? prio_yield_self(S_FLOOR_NICE, what, sizeof what)
                                                    : prio_idle_self(what, sizeof what);
        if (rc == 0) log_info("compute thread priority: %s", what);
        else log_warn("compute thread priority: %s", what);
    }
    if (!atomic_load(&d->compute_clock_set) && pthread_getcpuclockid(pthread_self(), &d->compute_clock) == 0)
        atomic_store(&d->compute_clock_set, 1);
    atomic_store(&d->busy_since_ns, clock_now_ns());
    s_job_work(d, job);
    atomic_store(&d->busy_since_ns, 0);
}

/* ---- the floor (loop thread) ---------------------------------------------------- */

/* Loop thread: the compute thread's CPU time (ns), 0 before its first job. */
static uint64_t s_compute_cpu_ns(client_daemon_t *d) {
    if (!atomic_load(&d->compute_clock_set)) return 0;
    struct timespec ts;
    if (clock_gettime(d->compute_clock, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void s_floor_release(client_daemon_t *d) {
    if (!d->n_boosted) return;
    prio_unboost(d->boosted, d->n_boosted);
    d->n_boosted = 0;
}

/* Loop thread, once a tick: judge the compute thread's share over a tick in
 * which a job ran throughout. Under S_FLOOR_SHARE for S_FLOOR_TICKS ticks in
 * a row: lift it (and every idle thread) to nice S_FLOOR_NICE. Lifted, and
 * at S_FLOOR_SPARE or more: the host has spare CPU again; back to idle. */
static void s_floor_tick(uv_timer_t *t) {
    client_daemon_t *d = t->data;
    uint64_t now = clock_now_ns(), cpu = s_compute_cpu_ns(d);
    uint64_t since = atomic_load(&d->busy_since_ns);
    uint64_t dt = now - d->floor_at_ns, dcpu = cpu - d->floor_cpu_ns;
    int running_all_tick = since && since <= d->floor_at_ns && d->floor_cpu_ns;
    d->floor_at_ns = now;
    d->floor_cpu_ns = cpu;
    if (!running_all_tick) {
        d->floor_starved = 0;
        return;
    }
    double share = dt ? (double)dcpu / (double)dt : 1.0;
    uint64_t skipped = 0;
    if (d->n_boosted) {
        if (share < S_FLOOR_SPARE) return;
        s_floor_release(d);
        if (ratelimit_ok(&d->rl_floor, now, 30000, &skipped))
            log_info("the compute thread got %.0f%% of a CPU at nice %d: the host has spare CPU again, back to "
                     "SCHED_IDLE", 100.0 * share, S_FLOOR_NICE);
        return;
    }
    if (d->floor_refused) return;
    d->floor_starved = share < S_FLOOR_SHARE ? d->floor_starved + 1 : 0;
    if (d->floor_starved < S_FLOOR_TICKS) return;
    d->floor_starved = 0;
    int rc = prio_boost_idle(d->boosted, (int)(sizeof d->boosted / sizeof d->boosted[0]), &d->n_boosted);
    if (rc < 0) {
        d->floor_refused = 1;
        log_warn("the compute thread is starved (%.0f%% of a CPU for %.1fs with a job running) and lifting it out of "
                 "SCHED_IDLE was refused: %s. The curvature stays as old as this host's load makes it; allow nice %d "
                 "(systemd: LimitNICE=+%d; shell: ulimit -e %d) or set priority = low",
                 100.0 * share, S_FLOOR_TICKS * S_FLOOR_TICK_MS * 1e-3, strerror(-rc), S_FLOOR_NICE, S_FLOOR_NICE,
                 20 - S_FLOOR_NICE);
        s_floor_release(d);
        return;
    }
    if (!d->n_boosted) return;
    d->n_boosts++;
    if (ratelimit_ok(&d->rl_floor, now, 30000, &skipped))
        log_warn("the compute thread is starved: %.0f%% of a CPU for %.1fs with a job running (this host is busy with "
                 "other work); lifted %d thread%s from SCHED_IDLE to nice %d until the host has spare CPU again (the "
                 "floor acted %" PRIu64 " time%s)",
                 100.0 * share, S_FLOOR_TICKS * S_FLOOR_TICK_MS * 1e-3, d->n_boosted, d->n_boosted == 1 ? "" : "s",
                 S_FLOOR_NICE, d->n_boosts, d->n_boosts == 1 ? "" : "s");
}

static void s_floor_close(client_daemon_t *d) {
    if (!d->floor_on) return;
    d->floor_on = 0;
    uv_timer_stop(&d->floor_timer);
    uv_close((uv_handle_t *)&d->floor_timer, NULL);
}

/* ---- jobs and pending input (loop thread) --------------------------------------- */

void client_daemon_job_free(client_daemon_job_t *j) {
    if (!j) return;
    if (j->is_setup) {
        s_setup_job_t *sj = (s_setup_job_t *)j;
        compute_setup_release(&sj->setup);
        compute_ctx_release(&sj->cc);
    }
    msg_clear(&j->in);
    free(j->buf);
    free(j);
}

static void s_setup_free(compute_setup_t **sp) {
    if (!*sp) return;
    compute_setup_release(*sp);
    free(*sp);
    *sp = NULL;
}

void client_daemon_drop_pending(client_daemon_t *d) {
    while (d->qhead) {
        client_daemon_job_t *j = d->qhead;
        d->qhead = j->next;
        client_daemon_job_free(j);
    }
    d->qtail = NULL;
}

static client_daemon_job_t *s_pending_pop(client_daemon_t *d) {
    client_daemon_job_t *j = d->qhead;
    d->qhead = j->next;
    if (!d->qhead) d->qtail = NULL;
    j->next = NULL;
    return j;
}

static void s_pending_push(client_daemon_t *d, client_daemon_job_t *j) {
    if (d->qtail) d->qtail->next = j;
    else d->qhead = j;
    d->qtail = j;
}

/* Hand j to the compute thread; on failure the client stops. */
static void s_submit(client_daemon_t *d, client_daemon_job_t *j) {
    int rc = zloop_pool_submit(d->pool, j);
    if (rc < 0) {
        log_error("cannot queue work: %s", strerror(-rc));
        client_daemon_job_free(j);
        client_stop(d->client, 1, "internal error", 1);
        return;
    }
    d->busy = 1;
}

static void s_submit_setup(client_daemon_t *d) {
    s_setup_job_t *sj = calloc(1, sizeof *sj);
    if (!sj) {
        client_stop(d->client, 1, "out of memory", 1);
        return;
    }
    sj->base.is_setup = 1;
    sj->setup = *d->next_setup;
    free(d->next_setup);
    d->next_setup = NULL;
    s_submit(d, &sj->base);
}

static void s_request(client_daemon_t *d) {
    msg_t m;
    client_msg_init(d->client, &m, d->request_type);
    if (d->r->request && d->r->request(d, &m) != 0) return;
    if (client_send(d->client, &m) == 0) d->n_outstanding++;
}

void client_daemon_next(client_daemon_t *d) {
    if (d->busy || client_stopping(d->client)) return;
    if (d->next_setup) {
        s_submit_setup(d);
        return;
    }
    if (d->mode == CLIENT_DAEMON_WELCOME_IDLE || (d->mode == CLIENT_DAEMON_WELCOME_SETUP && !d->have_cc) ||
        !client_welcomed(d->client))
        return;
    if (d->qhead) {
        client_daemon_job_t *j = s_pending_pop(d);
        j->sender_id = client_id(d->client);
        s_submit(d, j);
        return;
    }
    if (d->n_outstanding == 0) s_request(d);
}

/* Loop thread: the compute context is built (or not). */
static void s_setup_done(client_daemon_t *d, s_setup_job_t *sj) {
    if (sj->base.rc < 0) {
        int code = config_exit_status(sj->base.rc); /* 78: the data files or their shape */
        log_error("cannot set up the model and data: %s", sj->base.err);
        client_daemon_job_free(&sj->base);
        client_stop(d->client, code, "setup failed", 1);
        return;
    }
    compute_ctx_move(&d->cc, &sj->cc);
    d->have_cc = 1;
    if (d->r->ready) d->r->ready(d, &d->cc, &sj->setup);
    client_daemon_job_free(&sj->base);
    client_daemon_next(d);
}

/* Loop thread: the role's work failed: the role reports it, or the client
 * stops. */
static void s_work_failed(client_daemon_t *d, client_daemon_job_t *j) {
    if (d->r->failed) {
        d->r->failed(d, j);
        return;
    }
    uint64_t v = d->input_type == MSG_PARAMS ? j->in.params.version : j->in.job.factor_version;
    log_error("%s of version %" PRIu64 " failed: %s", d->work_what, v, j->err);
    client_stop(d->client, 1, "compute failed", 1);
}

/* Loop thread: a job came back from the compute thread (status < 0: it
 * never ran, the pool closed). */
static void s_done(void *job, int status, void *user) {
    client_daemon_t *d = user;
    client_daemon_job_t *j = job;
    d->busy = 0;
    if (status < 0 || client_stopping(d->client)) {
        client_daemon_job_free(j);
        return;
    }
    if (j->is_setup) {
        s_setup_done(d, (s_setup_job_t *)j);
        return;
    }
    if (j->rc < 0) s_work_failed(d, j);
    else if (d->r->done(d, j) != 0) j = NULL; /* the role's now */
    client_daemon_job_free(j);
    client_daemon_next(d);
}

/* ---- messages (loop thread) ------------------------------------------------------ */

static int s_on_welcome(client_t *c, const msg_welcome_t *w, const runcfg_t *cfg, void *user) {
    (void)c;
    client_daemon_t *d = user;
    /* A new session: nothing asked of this PS yet, and what the last one
     * sent is void. */
    d->n_outstanding = 0;
    client_daemon_drop_pending(d);
    compute_setup_t *st = calloc(1, sizeof *st);
    if (!st) {
        log_error("out of memory");
        return -ENOMEM;
    }
    int rc = d->r->welcome(d, w, cfg, st);
    if (rc < 0 || rc != CLIENT_DAEMON_WELCOME_SETUP) s_setup_free(&st);
    if (rc < 0) return rc;
    d->mode = (client_daemon_welcome_t)rc;
    s_setup_free(&d->next_setup); /* a setup of the last session not yet started */
    d->next_setup = st;
    client_daemon_next(d);
    return 0;
}

/* A message from kfac-ps failed validation: log it (rate-limited, with the
 * running count) and answer Error(INVALID, err). */
static void s_reject(client_daemon_t *d, const char *err) {
    uint64_t skipped = 0;
    d->n_invalid++;
    if (ratelimit_ok(&d->rl_err, clock_now_ns(), S_LOG_EVERY_MS, &skipped))
        log_error("rejected %s from kfac-ps: %s (%" PRIu64 " rejected so far)", d->input_what, err, d->n_invalid);
    msg_t e;
    client_msg_init(d->client, &e, MSG_ERROR);
    e.error.code = MSG_ERR_INVALID;
    e.error.text = (char *)err;
    (void)client_send(d->client, &e);
}

/* The role's input (Params or Job): an answer to a request; the role says
 * whether it is valid and where it goes. */
static void s_on_input(client_daemon_t *d, msg_t *m) {
    if (d->n_outstanding > 0) d->n_outstanding--;
    client_daemon_job_t *j = calloc(1, d->r->job_size);
    if (!j) {
        client_stop(d->client, 1, "out of memory", 1);
        return;
    }
    j->in = *m;
    memset(m, 0, sizeof *m); /* the arrays are the job's now */
    char err[512];
    int rc = d->r->accept(d, j, d->qtail, err, sizeof err);
    if (rc < 0) s_reject(d, err);
    if (rc < 0 || rc == CLIENT_DAEMON_INPUT_DROP) client_daemon_job_free(j);
    else {
        if (rc == CLIENT_DAEMON_INPUT_NEWEST) client_daemon_drop_pending(d);
        s_pending_push(d, j);
    }
    client_daemon_next(d);
}

/* Anything else from kfac-ps: an Error answers a request (logged,
 * rate-limited); any other type is unexpected (logged, ignored). */
static void s_on_other(client_daemon_t *d, const msg_t *m) {
    uint64_t skipped = 0;
    int ok = ratelimit_ok(&d->rl_err, clock_now_ns(), S_LOG_EVERY_MS, &skipped);
    if (m->type != MSG_ERROR) {
        if (ok) log_warn("unexpected %s message from kfac-ps: ignored", msg_type_name(m->type));
        return;
    }
    if (ok) log_warn("kfac-ps answered with error %s: %s", msg_error_code_name(m->error.code),
                     m->error.text ? m->error.text : "");
    if (d->n_outstanding > 0) d->n_outstanding--;
    client_daemon_next(d);
}

static void s_on_message(client_t *c, msg_t *m, void *user) {
    (void)c;
    client_daemon_t *d = user;
    if (m->type == d->input_type) s_on_input(d, m);
    else s_on_other(d, m);
}

static void s_on_stop(client_t *c, int exit_code, const char *reason, void *user) {
    (void)c;
    (void)exit_code;
    (void)reason;
    client_daemon_t *d = user;
    zloop_pool_free(&d->pool); /* waits for a running job, cancels the rest */
    if (d->r->stop) d->r->stop(d);
}

static const client_handlers_t s_handlers = {
    .on_welcome = s_on_welcome,
    .on_message = s_on_message,
    .on_stop = s_on_stop,
};

/* ---- life cycle ------------------------------------------------------------------ */

static void s_priority_init(client_daemon_t *d, runcfg_role_t cfg_role, const runcfg_t *cfg) {
    runcfg_priority_t pr = cfg->daemon[cfg_role].priority;
    d->prio = pr;
    if (cfg_role == RUNCFG_ROLE_STATSD || cfg_role == RUNCFG_ROLE_INVERTD)
        log_info("[%s] priority = %s: the compute thread %s", cfg_role == RUNCFG_ROLE_STATSD ? "statsd" : "invertd",
                 pr == RUNCFG_PRIORITY_IDLE    ? "idle"
                 : pr == RUNCFG_PRIORITY_LOW   ? "low"
                 : pr == RUNCFG_PRIORITY_YIELD ? "yield"
                                               : "normal",
                 pr == RUNCFG_PRIORITY_IDLE    ? "runs only on CPU time the gradient path leaves (SCHED_IDLE)"
                 : pr == RUNCFG_PRIORITY_LOW   ? "runs at nice 10"
                 : pr == RUNCFG_PRIORITY_YIELD ? "runs on CPU time the gradient path leaves (SCHED_IDLE), with a floor "
                                                 "of nice 10 while it is starved"
                                               : "keeps the process's priority");
    char why[160];
    if (pr == RUNCFG_PRIORITY_YIELD && (cfg_role == RUNCFG_ROLE_STATSD || cfg_role == RUNCFG_ROLE_INVERTD) &&
        !prio_can_lift(S_FLOOR_NICE, why, sizeof why))
        /* Known before any job: say so once, with the fix, instead of trying
         * and being refused when the host is already busy. The progress line
         * of kfac-ps still says when the curvature falls behind. */
        log_warn("[%s] priority = yield: the floor is off here (%s), so on a busy host the compute thread may get no "
                 "CPU at all. Allow nice %d (systemd: LimitNICE=+%d, which a container or sandbox with a lower hard "
                 "limit cannot apply; shell: ulimit -e %d) or set priority = low",
                 cfg_role == RUNCFG_ROLE_STATSD ? "statsd" : "invertd", why, S_FLOOR_NICE, S_FLOOR_NICE,
                 20 - S_FLOOR_NICE);
    else if (pr == RUNCFG_PRIORITY_YIELD && (cfg_role == RUNCFG_ROLE_STATSD || cfg_role == RUNCFG_ROLE_INVERTD)) {
        uv_timer_init(&d->loop, &d->floor_timer);
        d->floor_timer.data = d;
        d->floor_at_ns = clock_now_ns();
        uv_timer_start(&d->floor_timer, s_floor_tick, S_FLOOR_TICK_MS, S_FLOOR_TICK_MS);
        uv_unref((uv_handle_t *)&d->floor_timer); /* the loop ends with the client, not with this timer */
        d->floor_on = 1;
    }
}

/* The role's section: where its math runs and its OpenBLAS threads. */
static int s_prepare(runcfg_role_t role, const runcfg_t *cfg) {
    backend_kind_t dev = cfg->daemon[role].device; /* kfac-invertd: the CPU (LAPACK) */
    char why[256];
    /* --device cuda must fail before anything starts when no GPU can answer;
     * auto is resolved (with one log line) when the backend is made. */
    if (dev == BACKEND_CUDA && !backend_gpu_probe(why, sizeof why)) {
        log_error("--device cuda: %s; use --device cpu or auto", why);
        return -1;
    }
    client_blas_threads(cfg->daemon[role].threads);
    return 0;
}

/* What the role computes on and asks with (docs/protocol.md). */
static void s_protocol_init(client_daemon_t *d, runcfg_role_t role) {
    int inv = role == RUNCFG_ROLE_INVERTD;
    d->msg_role = role == RUNCFG_ROLE_WORKER ? MSG_ROLE_WORKER : role == RUNCFG_ROLE_STATSD ? MSG_ROLE_STATSD
                                                                                           : MSG_ROLE_INVERTD;
    d->input_type = inv ? MSG_JOB : MSG_PARAMS;
    d->request_type = inv ? MSG_JOB_REQUEST : MSG_GET_PARAMS; /* GetParams(min_version 0): the newest */
    d->input_what = inv ? "a job" : "params";
    d->work_what = inv ? "inverse" : role == RUNCFG_ROLE_WORKER ? "gradient" : "statistics";
}

client_daemon_t *client_daemon_new(const client_daemon_role_t *r, const runcfg_t *cfg) {
    assert(r && r->job_size >= sizeof(client_daemon_job_t) && r->welcome && r->accept && r->work && r->done);
    if (s_prepare(r->role, cfg) < 0) return NULL;
    client_daemon_t *d = calloc(1, sizeof *d);
    void *user = r->state_size ? calloc(1, r->state_size) : NULL;
    if (!d || (r->state_size && !user)) {
        log_error("out of memory");
        free(d);
        free(user);
        return NULL;
    }
    int rc = uv_loop_init(&d->loop);
    if (rc < 0) {
        log_error("uv_loop_init: %s", uv_strerror(rc));
        free(d);
        free(user);
        return NULL;
    }
    d->r = r;
    d->state = user;
    d->cfg = cfg;
    s_protocol_init(d, r->role);
    s_priority_init(d, r->role, cfg);
    d->pool = zloop_pool_new(&d->loop, 1, s_work, s_done, d);
    d->client = d->pool ? client_new(&d->loop, d->msg_role, r->role, cfg, &s_handlers, d) : NULL;
    if (!d->client) {
        zloop_pool_free(&d->pool);
        s_floor_close(d);
        uv_run(&d->loop, UV_RUN_DEFAULT);
        uv_loop_close(&d->loop);
        free(d);
        free(user);
        return NULL;
    }
    if (r->init && r->init(d) < 0) client_daemon_free(&d);
    return d;
}

int client_daemon_run(client_daemon_t *d) {
    if (client_start(d->client) < 0) client_stop(d->client, 1, "cannot start", 0);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    return client_exit_code(d->client);
}

void client_daemon_free(client_daemon_t **dp) {
    if (!dp || !*dp) return;
    client_daemon_t *d = *dp;
    *dp = NULL;
    if (d->client && !client_stopping(d->client)) client_stop(d->client, 0, "destroyed", 1);
    zloop_pool_free(&d->pool);
    s_floor_release(d);
    s_floor_close(d);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    client_free(&d->client);
    if (uv_loop_close(&d->loop) != 0) log_warn("the event loop still had open handles at exit");
    compute_ctx_release(&d->cc);
    s_setup_free(&d->next_setup);
    client_daemon_drop_pending(d);
    free(d->state);
    free(d);
}

int client_daemon_main(const client_daemon_role_t *r, int argc, char **argv) {
    runcfg_t cfg;
    int code = 0;
    if (client_config_load(&cfg, r->role, argc, argv, &code)) {
        runcfg_release(&cfg);
        return code;
    }
    client_daemon_t *d = client_daemon_new(r, &cfg);
    code = d ? client_daemon_run(d) : 1;
    client_daemon_free(&d);
    runcfg_release(&cfg);
    return code;
}

/* ---- for the roles --------------------------------------------------------------- */

void *client_daemon_state(client_daemon_t *d) { return d->state; }

const runcfg_t *client_daemon_config(const client_daemon_t *d) { return d->cfg; }

uv_loop_t *client_daemon_loop(client_daemon_t *d) { return &d->loop; }

client_t *client_daemon_client(client_daemon_t *d) { return d->client; }

const compute_ctx_t *client_daemon_ctx(const client_daemon_t *d) { return d->have_cc ? &d->cc : NULL; }

int client_daemon_send_result(client_daemon_t *d, client_daemon_job_t *j) {
    int rc = client_send_take(d->client, &j->buf, j->len);
    if (rc == 0) d->n_outstanding++;
    return rc;
}

uint64_t client_daemon_n_invalid(const client_daemon_t *d) { return d->n_invalid; }
