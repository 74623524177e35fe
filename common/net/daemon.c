/* common/net/daemon.c — see daemon.h. */
#include "common/net/daemon.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/prio.h"

#define S_LOG_EVERY_MS 5000
#define S_FLOOR_TICK_MS 500  /* the floor's look at the compute thread */
#define S_FLOOR_SHARE 0.10   /* of one CPU: under this with a job running, a tick is starved */
#define S_FLOOR_TICKS 2      /* consecutive starved ticks before the floor acts */
#define S_FLOOR_NICE 10      /* the nice value the threads are lifted to */
#define S_FLOOR_SPARE 0.50   /* lifted, and at this share or more: the host has spare CPU again */

/* Pool thread: the role's work. The first job (kfac-statsd's setup from
 * Welcome: data and model) runs at the process's priority, as nothing of the
 * curvature can start before it; the thread lowers itself once, before its
 * second job. */
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
    d->work(job, d->user);
    atomic_store(&d->busy_since_ns, 0);
}

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
                 pr == RUNCFG_PRIORITY_IDLE    ? "idle"
                 : pr == RUNCFG_PRIORITY_LOW   ? "low"
                 : pr == RUNCFG_PRIORITY_YIELD ? "yield"
                                               : "normal",
                 pr == RUNCFG_PRIORITY_IDLE    ? "runs only on CPU time the gradient path leaves (SCHED_IDLE)"
                 : pr == RUNCFG_PRIORITY_LOW   ? "runs at nice 10"
                 : pr == RUNCFG_PRIORITY_YIELD ? "runs on CPU time the gradient path leaves (SCHED_IDLE), with a floor "
                                                 "of nice 10 while it is starved"
                                               : "keeps the process's priority");
    if (pr == RUNCFG_PRIORITY_YIELD && (cfg_role == RUNCFG_ROLE_STATSD || cfg_role == RUNCFG_ROLE_INVERTD)) {
        uv_timer_init(&d->loop, &d->floor_timer);
        d->floor_timer.data = d;
        d->floor_at_ns = clock_now_ns();
        uv_timer_start(&d->floor_timer, s_floor_tick, S_FLOOR_TICK_MS, S_FLOOR_TICK_MS);
        uv_unref((uv_handle_t *)&d->floor_timer); /* the loop ends with the client, not with this timer */
        d->floor_on = 1;
    }
    d->pool = zloop_pool_new(&d->loop, 1, s_work, s_done, d);
    d->client = d->pool ? client_new(&d->loop, role, cfg_role, cfg, h, user) : NULL;
    if (!d->client) {
        zloop_pool_free(&d->pool);
        s_floor_close(d);
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
    s_floor_release(d);
    s_floor_close(d);
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
