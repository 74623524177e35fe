/* common/net/daemon.h — the compute-client skeleton every client daemon
 * (kfac-worker, kfac-statsd, kfac-invertd) is: a libuv loop, one compute
 * thread for the heavy math (a common/net/zloop.h pool of one), the
 * connection to kfac-ps (client.h), and the protocol state the three share:
 *
 *   - the setup job: a Welcome may ask for a compute context (model, data,
 *     backend; common/net/compute.h), built on the compute thread before any
 *     work, at the process's priority;
 *   - the pending input: the Params (or Jobs) that came while the compute
 *     thread was busy, the newest only or in order, as the role says; a
 *     Welcome voids them (a new session);
 *   - the request count: requests (GetParams, JobRequest, the answers the
 *     role pushes) kfac-ps has not answered yet. A new request goes out only
 *     when the daemon is idle and nothing is outstanding, so a re-Hello after
 *     a silent spell never doubles the stream of work;
 *   - one job at a time: the daemon submits the next job only once the last
 *     is done, so it can always pick what comes next (setup first, then the
 *     oldest pending input) and the pool's own queue never holds a second;
 *   - the messages every role treats alike (an Error from kfac-ps counts as
 *     the answer to a request, a message of an unexpected type is logged, an
 *     invalid input is answered with Error(INVALID)), and the shutdown.
 *
 * A role supplies a client_daemon_role_t (its functions and the size of
 * its state) and keeps only what it computes and sends; its program is
 *
 *     int main(int argc, char **argv) { return client_daemon_main(worker_role(), argc, argv); }
 *
 * which is, spelled out (configuration and logging, then the daemon):
 *
 *     client_config_load(&cfg, r->role, argc, argv, &code);
 *     client_daemon_t *d = client_daemon_new(r, &cfg);
 *     code = client_daemon_run(d);  // until Shutdown, a signal or a fatal error
 *     client_daemon_free(&d);
 *
 * Priority ([statsd]/[invertd] priority; kfac-worker keeps the process's):
 * idle: the compute thread drops to SCHED_IDLE (nice 19 where refused)
 * before its second job (the first, a setup, runs at the process's
 * priority) and logs which; low: nice 10; yield (the default): nice 10 and
 * then SCHED_IDLE, and a twice-a-second timer on the loop is the floor: when
 * a job has run for two whole ticks while the compute thread got under a
 * tenth of a CPU, the idle threads are lifted to nice 10 (SCHED_OTHER), and
 * the daemon says so; they go back to SCHED_IDLE once a tick finds the
 * lifted thread getting half a CPU or more. On a machine with spare CPU the
 * floor never acts; on one busy with other work it keeps the curvature
 * moving instead of starving (SCHED_IDLE alone may get no CPU time at all).
 * Lifting needs CAP_SYS_NICE or RLIMIT_NICE >= 10 (the shipped units set
 * LimitNICE=+10); where refused it is logged once. The loop thread
 * (messages, heartbeats) keeps its priority.
 *
 * Threads: the loop thread, except the role's work function (the compute
 * thread). Ownership: the daemon borrows the configuration and the role
 * table (both must outlive it) and owns the rest, the role's state
 * included.
 */
#ifndef KFAC_NET_DAEMON_H
#define KFAC_NET_DAEMON_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/net/client.h"
#include "common/net/compute.h"
#include "common/run/runcfg.h"
#include "proto/msg.h"

typedef struct client_daemon client_daemon_t;

/* One unit of work. A role's job struct begins with this one (the daemon
 * allocates role->job_size bytes, zeroed); what follows is the role's own
 * plain values (no pointers the daemon would have to free). */
typedef struct client_daemon_job {
    msg_t in;            /* the Params or Job it computes on (owned) */
    uint32_t sender_id;  /* the client's sender id when the job started */
    uint8_t *buf;        /* work: the encoded answer (owned; client_daemon_send_result takes it) */
    size_t len;
    double compute_ms;   /* work: wall time of the computation */
    int rc;              /* work: 0, or a negative errno with err */
    char err[512];
    struct client_daemon_job *next; /* the daemon's: the pending list */
    int is_setup;                   /* the daemon's: a setup job (struct s_setup_job in daemon.c) */
} client_daemon_job_t;

/* client_daemon_role_t.welcome's answers. */
typedef enum {
    CLIENT_DAEMON_WELCOME_SETUP = 0, /* build a compute context from *setup first */
    CLIENT_DAEMON_WELCOME_READY,     /* no context: work comes at once */
    CLIENT_DAEMON_WELCOME_IDLE,      /* nothing to compute in this run: stay connected, ask nothing */
} client_daemon_welcome_t;

/* client_daemon_role_t.accept's answers (a negative errno: invalid). */
typedef enum {
    CLIENT_DAEMON_INPUT_NEWEST = 0, /* replace whatever is pending: only the newest counts */
    CLIENT_DAEMON_INPUT_QUEUE,      /* after what is pending: each is computed, in order */
    CLIENT_DAEMON_INPUT_DROP,       /* not wanted (a duplicate, or nothing to compute) */
} client_daemon_input_t;

/* What a role is: its configuration role and its functions. The daemon
 * derives the rest from the role (docs/protocol.md, docs/configuration.md):
 *
 *   role     computes      on      asks with     device          OpenBLAS threads
 *   worker   a gradient    Params  GetParams(0)  [worker] device  [worker] threads
 *   statsd   statistics    Params  GetParams(0)  [statsd] device  [statsd] threads
 *   invertd  an inverse    Job     JobRequest    the CPU          [invertd] threads
 *
 * Every callback but work runs on the loop thread and gets the daemon;
 * client_daemon_state(d) is the role's state (state_size bytes, zeroed,
 * the daemon's). work runs on the compute thread and gets the state only:
 * nothing of the daemon is the compute thread's. */
typedef struct client_daemon_role {
    runcfg_role_t role;          /* RUNCFG_ROLE_WORKER, _STATSD or _INVERTD */
    size_t job_size;             /* sizeof the role's job struct (>= sizeof(client_daemon_job_t)) */
    size_t state_size;           /* sizeof the role's state */
    /* The daemon is made: open the role's own handles on
     * client_daemon_loop(d). Return 0, or -1 with the reason logged. NULL:
     * nothing. */
    int (*init)(client_daemon_t *d);
    /* A Welcome came (w borrowed; cfg is the effective configuration, the
     * client's). The pending input and the request count are already reset.
     * setup is zeroed and the daemon's: fill it (compute_setup_init) and
     * return CLIENT_DAEMON_WELCOME_SETUP, or return _READY or _IDLE and leave
     * it; a negative errno stops the client with exit code 1 (log why
     * first). */
    int (*welcome)(client_daemon_t *d, const msg_welcome_t *w, const runcfg_t *cfg, compute_setup_t *setup);
    /* The context of a setup is built (cc and setup borrowed). NULL: nothing
     * to say. */
    void (*ready)(client_daemon_t *d, const compute_ctx_t *cc, const compute_setup_t *setup);
    /* An input arrived and is moved into j->in; newest is the newest pending
     * job or NULL (borrowed). Validate it (msg_validate and the role's own
     * rules) and say where it goes: a client_daemon_input_t, or a negative
     * errno with err filled (answered with Error(INVALID)). The role may set
     * its own fields of j. */
    int (*accept)(client_daemon_t *d, client_daemon_job_t *j, const client_daemon_job_t *newest, char *err,
                  size_t err_len);
    /* Compute thread: the work of j; cc is the compute context (NULL when no
     * Welcome asked for one). Set j->rc (and j->err), and on success
     * j->buf/len, the encoded answer. */
    void (*work)(void *state, compute_ctx_t *cc, client_daemon_job_t *j);
    /* j's work succeeded: send the answer (client_daemon_send_result) or
     * hold it. Return 0 to have the daemon free j, 1 when the role keeps it
     * (client_daemon_job_free it later). */
    int (*done)(client_daemon_t *d, client_daemon_job_t *j);
    /* j's work failed (j->rc < 0, j->err says why): report it and go on; the
     * daemon frees j. NULL: a failure is fatal: "<what the role computes>
     * of version <t> failed: <why>" is logged and the client stops with
     * exit code 1. */
    void (*failed)(client_daemon_t *d, client_daemon_job_t *j);
    /* Idle, nothing pending or outstanding: m is the request with its
     * envelope; fill it and return 0 to send it, or 1 to ask nothing now
     * (call client_daemon_next when that changes). NULL: send it as it is. */
    int (*request)(client_daemon_t *d, msg_t *m);
    /* The client is stopping and the compute thread has finished for good:
     * log the summary, close the role's handles, free what the state points
     * to (not the state). Called once, also when init failed. */
    void (*stop)(client_daemon_t *d);
} client_daemon_role_t;

/* A client program of role r: the configuration (client_config_load of
 * r->role: defaults < --config file < command line) and logging, then
 * client_daemon_new, _run and _free. Returns main()'s exit code: 0 clean
 * (and after --help), 1 fatal, 2 usage error, 78 configuration error. */
int client_daemon_main(const client_daemon_role_t *r, int argc, char **argv);

/* A daemon of role r (static) for cfg (the local configuration, borrowed):
 * the role's device checked (--device cuda fails here when no GPU answers;
 * auto is resolved, with one log line, when the backend is made) and its
 * OpenBLAS threads set, then the loop, the compute thread, the connection,
 * the role's state and r->init. Returns NULL with the reason logged. */
client_daemon_t *client_daemon_new(const client_daemon_role_t *r, const runcfg_t *cfg);

/* Connect and run the loop until the client stops. Returns the exit code:
 * 0 clean, 1 fatal. */
int client_daemon_run(client_daemon_t *d);

/* Stop the client if it still runs (the role's stop), wait for a running
 * job, drop the rest, let the loop close every handle, free the client,
 * close the loop and free the role's state. NULLs *dp; NULL is a no-op. */
void client_daemon_free(client_daemon_t **dp);

/* ---- for the role's callbacks (loop thread) ------------------------------- */

/* The role's state (state_size bytes; the daemon's). */
void *client_daemon_state(client_daemon_t *d);

/* The local configuration the daemon was made with (borrowed): the role's
 * own section ([worker], [statsd], [invertd]) as this host set it. */
const runcfg_t *client_daemon_config(const client_daemon_t *d);

/* The loop, for the role's own handles (borrowed). */
uv_loop_t *client_daemon_loop(client_daemon_t *d);

/* The connection (borrowed): client_id, client_msg_init, client_send,
 * client_stop, client_stopping. */
client_t *client_daemon_client(client_daemon_t *d);

/* The compute context the last setup built, or NULL before one. It is the
 * compute thread's while a job runs: read only what no job changes
 * (shapes, the statistics' layer list). */
const compute_ctx_t *client_daemon_ctx(const client_daemon_t *d);

/* Send j's encoded answer (taking j->buf) and count it as a request
 * awaiting kfac-ps's answer. Returns client_send's code. */
int client_daemon_send_result(client_daemon_t *d, client_daemon_job_t *j);

/* Drop the pending input (e.g. once an answer went out whose reply brings
 * newer parameters anyway). */
void client_daemon_drop_pending(client_daemon_t *d);

/* Start whatever comes next if idle: the setup, the oldest pending input,
 * or a request. The daemon calls it after every event of its own; a role
 * calls it after one of its own (a timer). */
void client_daemon_next(client_daemon_t *d);

/* Inputs rejected as invalid so far. */
uint64_t client_daemon_n_invalid(const client_daemon_t *d);

/* Free a job the role kept (done returned 1). NULL is a no-op. */
void client_daemon_job_free(client_daemon_job_t *j);

/* ---- for the role's work (compute thread) -------------------------------- */

/* j's answer is m (only read, but for the fields named here): with stats
 * non-NULL, its statistics (borrowed, after kfac_stats_compute) are packed
 * into *m_stats for the encoding and released after it; j->compute_ms, the
 * wall time since t0_ms (clock_now_ms), is written to *m_compute_ms too;
 * then m is encoded into j->buf/len. Sets j->rc, and on failure j->err
 * ("packing the statistics failed", "encoding <what> failed"). */
void client_daemon_job_answer(client_daemon_job_t *j, msg_t *m, double *m_compute_ms, double t0_ms,
                              const kfac_stats_t *stats, msg_stats_t *m_stats, const char *what);

#endif
