/* common/net/daemon.h — what every client daemon (kfac-worker, kfac-statsd,
 * kfac-invertd) is made of besides its role: a libuv loop, a one-thread job
 * pool for the heavy math (work on its thread, done on the loop), the
 * connection to kfac-ps (client.h), and the handling of the messages every
 * role treats alike (an Error from kfac-ps, a message of an unexpected type,
 * answering an invalid message). A role embeds a client_daemon_t in its
 * server and keeps only what it computes and sends.
 *
 *     s->d: client_daemon_init(&s->d, MSG_ROLE_WORKER, RUNCFG_ROLE_WORKER, cfg,
 *                              s_work, s_done, &s_handlers, s);
 *     client_daemon_run(&s->d);     // until Shutdown, a signal or a fatal error
 *     client_daemon_release(&s->d);
 *
 * Threads: the loop thread, except the pool's work function. */
#ifndef KFAC_NET_DAEMON_H
#define KFAC_NET_DAEMON_H

#include <stdint.h>
#include <time.h>
#include <uv.h>

#include "common/base/ratelimit.h"
#include "common/net/client.h"
#include "common/net/zloop.h"
#include "common/run/runcfg.h"
#include "proto/msg.h"

typedef struct client_daemon {
    uv_loop_t loop;
    client_t *client;    /* owned */
    zloop_pool_t *pool;  /* owned; a role may free it early (zloop_pool_free NULLs it) */
    ratelimit_t rl_err;  /* log lines about kfac-ps's answers: one per 5 s */
    zloop_work_fn work;  /* the role's work and done functions and their user */
    zloop_done_fn done;
    void *user;
    runcfg_priority_t prio; /* [statsd]/[invertd] priority: the pool thread lowers itself on its first job */
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
} client_daemon_t;

/* Initialise the loop, a pool of one thread running work(job, user) and then
 * done(job, status, user) on the loop, and the client of role (cfg_role's
 * option view of cfg, borrowed) with handlers h (static) and user. Returns 0,
 * or -1 with the reason logged and everything released. kfac-statsd and
 * kfac-invertd with [statsd]/[invertd] priority = idle (the default): the
 * pool thread, where the role computes, drops to SCHED_IDLE (nice 19 where
 * refused) before its second job (the first, kfac-statsd's setup, runs at
 * the process's priority) and logs which; the loop thread (messages,
 * heartbeats) keeps its priority. With priority = yield (the default) the
 * pool thread goes to nice 10 and then SCHED_IDLE, and a once-a-second timer
 * on the loop is the floor: when a job has run for two whole ticks while the
 * compute thread got under a tenth of a CPU, the idle threads are lifted to
 * nice 10 (SCHED_OTHER), and the daemon says so; they go back to SCHED_IDLE
 * once a tick finds the lifted thread getting half a CPU or more. On a machine
 * with spare CPU the floor never acts; on one busy with other work it keeps
 * the curvature moving instead of starving (SCHED_IDLE alone may get no
 * CPU time at all). Lifting needs CAP_SYS_NICE or RLIMIT_NICE >= 10 (the
 * shipped units set LimitNICE=+10); where refused it is logged once. */
int client_daemon_init(client_daemon_t *d, msg_role_t role, runcfg_role_t cfg_role, const runcfg_t *cfg,
                       zloop_work_fn work, zloop_done_fn done, const client_handlers_t *h, void *user);

/* Connect and run the loop until the client stops. Returns the exit code:
 * 0 clean, 1 fatal. */
int client_daemon_run(client_daemon_t *d);

/* Stop the client if it still runs, free the pool (waits for a running job,
 * cancels the rest), let the loop close every handle, free the client and
 * close the loop. The role frees its own state afterwards. */
void client_daemon_release(client_daemon_t *d);

/* The messages every role treats alike. Returns CLIENT_DAEMON_ERROR for an
 * Error from kfac-ps (logged, rate-limited: the caller counts its request as
 * answered and moves on), CLIENT_DAEMON_IGNORED for any other type (logged
 * as unexpected, rate-limited). */
enum { CLIENT_DAEMON_ERROR = 1, CLIENT_DAEMON_IGNORED = 2 };
int client_daemon_other_message(client_daemon_t *d, const msg_t *m);

/* A message from kfac-ps failed validation: log it (rate-limited; what is
 * "params" or "a job", *n_invalid the running count) and answer
 * Error(INVALID, err). */
void client_daemon_reject(client_daemon_t *d, const char *what, const char *err, uint64_t n_invalid);

#endif
