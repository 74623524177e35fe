/* common/net/daemon.c — see daemon.h. */
#include "common/net/daemon.h"

#include <inttypes.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/prio.h"

#define S_LOG_EVERY_MS 5000

/* Pool thread: the role's work, after lowering this thread's priority once. */
static void s_work(void *job, void *user) {
    client_daemon_t *d = user;
    if (d->prio != RUNCFG_PRIORITY_NORMAL && !d->prio_done) {
        char what[160];
        d->prio_done = 1;
        int rc = d->prio == RUNCFG_PRIORITY_LOW ? prio_nice_self(10, what, sizeof what) : prio_idle_self(what, sizeof what);
        if (rc == 0) log_info("compute thread priority: %s", what);
        else log_warn("compute thread priority: %s", what);
    }
    d->work(job, d->user);
}

/* Loop thread. */
static void s_done(void *job, int status, void *user) {
    client_daemon_t *d = user;
    d->done(job, status, d->user);
}

int client_daemon_init(client_daemon_t *d, msg_role_t role, runcfg_role_t cfg_role, const runcfg_t *cfg,
                       zloop_work_fn work, zloop_done_fn done, const client_handlers_t *h, void *user) {
    int rc = uv_loop_init(&d->loop);
    if (rc < 0) {
        log_error("uv_loop_init: %s", uv_strerror(rc));
        return -1;
    }
    d->work = work;
    d->done = done;
    d->user = user;
    d->prio_done = 0;
    runcfg_priority_t pr = cfg_role == RUNCFG_ROLE_STATSD    ? cfg->statsd_priority
                           : cfg_role == RUNCFG_ROLE_INVERTD ? cfg->invertd_priority
                                                             : RUNCFG_PRIORITY_NORMAL;
    d->prio = pr;
    if (cfg_role == RUNCFG_ROLE_STATSD || cfg_role == RUNCFG_ROLE_INVERTD)
        log_info("[%s] priority = %s: the compute thread %s", cfg_role == RUNCFG_ROLE_STATSD ? "statsd" : "invertd",
                 pr == RUNCFG_PRIORITY_IDLE ? "idle" : pr == RUNCFG_PRIORITY_LOW ? "low" : "normal",
                 pr == RUNCFG_PRIORITY_IDLE  ? "runs only on CPU time the gradient path leaves (SCHED_IDLE)"
                 : pr == RUNCFG_PRIORITY_LOW ? "runs at nice 10"
                                             : "keeps the process's priority");
    d->pool = zloop_pool_new(&d->loop, 1, s_work, s_done, d);
    d->client = d->pool ? client_new(&d->loop, role, cfg_role, cfg, h, user) : NULL;
    if (!d->client) {
        zloop_pool_free(&d->pool);
        uv_run(&d->loop, UV_RUN_DEFAULT);
        uv_loop_close(&d->loop);
        return -1;
    }
    return 0;
}

int client_daemon_run(client_daemon_t *d) {
    if (client_start(d->client) < 0) client_stop(d->client, 1, "cannot start", 0);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    return client_exit_code(d->client);
}

void client_daemon_release(client_daemon_t *d) {
    if (d->client && !client_stopping(d->client)) client_stop(d->client, 0, "destroyed", 1);
    zloop_pool_free(&d->pool);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    client_free(&d->client);
    if (uv_loop_close(&d->loop) != 0) log_warn("the event loop still had open handles at exit");
}

int client_daemon_other_message(client_daemon_t *d, const msg_t *m) {
    uint64_t skipped = 0;
    if (m->type == MSG_ERROR) {
        if (ratelimit_ok(&d->rl_err, clock_now_ns(), S_LOG_EVERY_MS, &skipped))
            log_warn("kfac-ps answered with error %s: %s", msg_error_code_name(m->error.code),
                     m->error.text ? m->error.text : "");
        return CLIENT_DAEMON_ERROR;
    }
    if (ratelimit_ok(&d->rl_err, clock_now_ns(), S_LOG_EVERY_MS, &skipped))
        log_warn("unexpected %s message from kfac-ps: ignored", msg_type_name(m->type));
    return CLIENT_DAEMON_IGNORED;
}

void client_daemon_reject(client_daemon_t *d, const char *what, const char *err, uint64_t n_invalid) {
    uint64_t skipped = 0;
    if (ratelimit_ok(&d->rl_err, clock_now_ns(), S_LOG_EVERY_MS, &skipped))
        log_error("rejected %s from kfac-ps: %s (%" PRIu64 " rejected so far)", what, err, n_invalid);
    msg_t e;
    client_msg_init(d->client, &e, MSG_ERROR);
    e.error.code = MSG_ERR_INVALID;
    e.error.text = (char *)err;
    (void)client_send(d->client, &e);
}
