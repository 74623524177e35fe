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
 * A role supplies a client_daemon_role_t (what it computes on, how it
 * answers) and keeps only what it computes and sends:
 *
 *     s->d = client_daemon_new(&s_role, cfg, s);
 *     client_daemon_run(s->d);      // until Shutdown, a signal or a fatal error
 *     client_daemon_free(&s->d);
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
 * thread). Ownership: the daemon borrows the configuration, the role table
 * and the role's user pointer (all must outlive it) and owns the rest.
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

/* What a role is. Every callback gets the user pointer of client_daemon_new. */
typedef struct client_daemon_role {
    msg_role_t role;             /* the envelope's role */
    runcfg_role_t cfg_role;      /* the configuration view the role reads */
    msg_type_t input_type;       /* what kfac-ps sends it to compute on: MSG_PARAMS or MSG_JOB */
    const char *input_what;      /* its name in a rejection line: "params", "a job" */
    msg_type_t request_type;     /* what it asks with: MSG_GET_PARAMS or MSG_JOB_REQUEST */
    size_t job_size;             /* sizeof the role's job struct (>= sizeof(client_daemon_job_t)) */
    /* Loop: a Welcome came (w borrowed; cfg is the effective configuration,
     * the client's). The pending input and the request count are already
     * reset. setup is zeroed and the daemon's: fill it (compute_setup_init)
     * and return CLIENT_DAEMON_WELCOME_SETUP, or return _READY or _IDLE and
     * leave it; a negative errno stops the client with exit code 1 (log why
     * first). */
    int (*welcome)(void *user, const msg_welcome_t *w, const runcfg_t *cfg, compute_setup_t *setup);
    /* Loop: the context of a setup is built (cc and setup borrowed). NULL: nothing to say. */
    void (*ready)(void *user, const compute_ctx_t *cc, const compute_setup_t *setup);
    /* Loop: an input arrived and is moved into j->in; newest is the newest
     * pending job or NULL (borrowed). Validate it (msg_validate and the
     * role's own rules) and say where it goes: a client_daemon_input_t, or a
     * negative errno with err filled (answered with Error(INVALID)). The
     * role may set its own fields of j. */
    int (*accept)(void *user, client_daemon_job_t *j, const client_daemon_job_t *newest, char *err, size_t err_len);
    /* Compute thread: the work of j; cc is the compute context (NULL when
     * no Welcome asked for one). Set j->rc (and j->err), and on success
     * j->buf/len, the encoded answer. */
    void (*work)(void *user, compute_ctx_t *cc, client_daemon_job_t *j);
    /* Loop: j's work is done (j->rc says how). Send the answer
     * (client_daemon_send_result) or report the failure. Return 0 to have
     * the daemon free j, 1 when the role keeps it (client_daemon_job_free
     * it later). */
    int (*done)(void *user, client_daemon_job_t *j);
    /* Loop: idle, nothing pending or outstanding: m is a request_type
     * message with its envelope; fill it and return 0 to send it, or 1 to
     * ask nothing now (call client_daemon_next when that changes). NULL:
     * send it as it is. */
    int (*request)(void *user, msg_t *m);
    /* Loop: the client is stopping and the compute thread has finished
     * (its state is readable): log the summary, close the role's handles. */
    void (*stop)(void *user);
} client_daemon_role_t;

/* A daemon of role r (static) for cfg (the local configuration, borrowed),
 * calling r's functions with user (borrowed). Returns NULL with the reason
 * logged. */
client_daemon_t *client_daemon_new(const client_daemon_role_t *r, const runcfg_t *cfg, void *user);

/* Connect and run the loop until the client stops. Returns the exit code:
 * 0 clean, 1 fatal. */
int client_daemon_run(client_daemon_t *d);

/* Stop the client if it still runs, wait for a running job, drop the rest,
 * let the loop close every handle (the role closes its own in stop or
 * before this), free the client and close the loop. NULLs *dp; NULL is a
 * no-op. */
void client_daemon_free(client_daemon_t **dp);

/* ---- for the role's callbacks (loop thread) ------------------------------- */

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

#endif
