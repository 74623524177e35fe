/* ps/server_int.h — the parameter server's private state, shared by
 * ps/server.c (life cycle, socket, clients, liveness, shutdown), ps/hello.c
 * (a Hello), ps/round.c and ps/round_push.c (gradient rounds, statistics,
 * the step, evaluation and progress), ps/jobs.c (inversion jobs),
 * ps/persist.c (checkpoints), ps/report.c (the operator's lines) and
 * ps/io.c (sending). Calls go one way, down from the server
 * (docs/architecture.md, section 10; tools/check-calls.sh); the round never
 * calls the server (it asks for the end of the run with
 * ps_round_request_shutdown). Each field has one writer
 * (tools/check-fields.sh): the counters are ps/counters.h's table, the life
 * cycle ps/life.h's, the round ps/round_state.h's; the state of the jobs,
 * Hello, sending, the operator's view, the evaluation, the checkpoints,
 * the gradient defences and the K-FAC scheduling is opaque, defined in
 * jobs.c, hello.c, io.c, report.c, eval.c, persist.c, guard.c and sched.c
 * (docs/architecture.md, section
 * 4, "Who owns which state"); the model and the optimizer are
 * ps/model.h's (ps_model_t, read directly, changed through its
 * functions). What is left here is the loop's own state, one handle or
 * embedded struct per unit, and the buffers and limits the model's
 * messages need. The decisions are
 * in units without I/O (ps/round_state.h, ps/member.h, ps/greet.h,
 * ps/owner.h, ps/sched.h, ps/guard.h). Not for other modules.
 *
 * Versions: t is the version of the current parameters; the round collects
 * gradients of version t; the step turns t into t + 1 and publishes it.
 * Threads: everything here belongs to the loop thread.
 */
#ifndef KFAC_PS_SERVER_INT_H
#define KFAC_PS_SERVER_INT_H

#include <stdint.h>
#include <uv.h>

#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_step.h"
#include "common/kfac/kfac_refresh.h"
#include "common/kfac/kfac_schedule.h"
#include "common/nn/nn.h"
#include "common/run/runcfg.h"
#include "common/nn/sgd.h"
#include "common/net/auth.h"
#include "common/net/zloop.h"
#include "proto/msg.h"
#include "ps/counters.h"
#include "ps/curv.h"
#include "ps/damping.h"
#include "ps/eval.h"
#include "ps/guard.h"
#include "ps/heldout.h"
#include "ps/drift.h"
#include "ps/life.h"
#include "ps/member.h"
#include "ps/model.h"
#include "ps/http.h"
#include "ps/metrics.h"
#include "ps/owner.h"
#include "ps/peers.h"
#include "ps/refresh.h"
#include "ps/round_state.h"
#include "ps/stats_guard.h"
#include "ps/sched.h"
#include "ps/server.h"
#include "ps/trim.h"
#include "ps/verify.h"
#include "ps/ingest.h"
#include "common/base/ratelimit.h"

/* The units' own state, defined in their .c files. */
typedef struct ps_report ps_report_t;
typedef struct ps_jobs ps_jobs_t;
typedef struct ps_persist ps_persist_t;
typedef struct ps_hello ps_hello_t;
typedef struct ps_io ps_io_t;

/* Most clients held at once. */
#define PS_MAX_PEERS 1024
/* ZMQ_SNDHWM of the ROUTER: messages queued per client before a send to
 * it fails with EAGAIN (ZMQ_ROUTER_MANDATORY) instead of queueing more;
 * ZeroMQ's default is 1000. A client holds at most one Params reply queued
 * besides (ps_round_send_params). */
#define PS_SNDHWM 16
/* ZMQ_RCVHWM of the ROUTER: messages queued from one client before ZeroMQ
 * stops reading its connection (TCP pushes back on the client; nothing is
 * dropped); ZeroMQ's default, 1000, let one client park 1000 frames of the
 * largest size in kfac-ps's memory. An honest client has one request and a
 * heartbeat or two in flight. */
#define PS_RCVHWM 16
/* The largest frame a connection may send before its Hello (a Hello is a
 * few hundred bytes): a larger one is refused undecoded. */
#define PS_PRE_HELLO_MAX_BYTES 65536
/* Requests that cost kfac-ps work (GetParams, JobRequest), per client: at
 * most PS_REQ_BURST at once, PS_REQ_PER_S a second after that (an honest
 * client sends one at start-up and after an error: its pushes and results
 * carry the next request). More are refused (Error INTERNAL). */
#define PS_REQ_PER_S 20.0
#define PS_REQ_BURST 40.0
/* ZMQ_LINGER of the ROUTER: how long Shutdown messages may take to leave. */
#define PS_LINGER_MS 2000
/* After Shutdown the socket stays open this long so that every client reads
 * it before the connection drops (a client drops unread messages when its
 * connection goes). */
#define PS_SHUTDOWN_GRACE_MS 1000
/* Interval of "rejected ..." and similar warning lines. */
#define PS_LOG_EVERY_MS 1000
/* Join and leave lines: at most PS_JOIN_LOG_BURST per role in each
 * PS_JOIN_LOG_WINDOW_MS; the next line that passes says how many were not
 * logged (a reconnect storm cannot fill the log). */
#define PS_JOIN_LOG_BURST 20
#define PS_JOIN_LOG_WINDOW_MS 10000
/* Interval of "step t waits for ..." lines while a step is held up. */
#define PS_WAIT_LOG_MS 10000
/* An update that holds the loop thread longer than this is worth a warning. */
#define PS_SLOW_STEP_MS 250.0
/* Consecutive failed updates (non-finite direction) before giving up. */
#define PS_MAX_STEP_FAILURES 10
/* Bad results after which an inverse daemon gets no more jobs. */
#define PS_BAD_INVERSES_MAX 3
/* Batch-norm running statistics a push may carry, against the published
 * ones it was computed from (a worker's are one moving-average step away:
 * (1 - momentum) x published + momentum x its batch's): a variance at most
 * PS_BN_VAR_MAX_RATIO x (published variance + eps), a mean at most
 * PS_BN_MEAN_MAX_DEV x sqrt(published variance + eps) + 1 away from the
 * published mean. Generous for any batch; a value near 3e38 (two of which
 * average to Inf) is far outside. */
#define PS_BN_VAR_MAX_RATIO 1e4
#define PS_BN_MEAN_MAX_DEV 100.0
/* Quiet time after large messages before freed memory goes back to the
 * system (ps/trim.h). */
#define PS_TRIM_IDLE_MS 500

struct ps_server {
    const runcfg_t *cfg;           /* borrowed */
    uv_loop_t loop;
    int loop_ok;
    void *zctx;
    zloop_socket_t *sock;
    auth_server_t *auth;           /* CURVE and the ZAP handler (common/net/auth.h) */
    zloop_signals_t *sigs;
    uv_timer_t tick, hb;
    int tick_ok, hb_ok;
    uint64_t tick_ms;
    char endpoint[256];            /* bound */
    uint64_t t0_ns;                /* start (clock_now_ns) */

    /* model and optimizer */
    ps_model_t model;              /* net, K-FAC or SGD, Polyak, the update (ps/model.h) */
    char *config_text;             /* runcfg_shared_text, sent in Welcome */
    wire_shape_t shape;            /* message limits from the model */
    kfac_stats_t *scratch;         /* statistics of one message */
    ps_stats_guard_t *stats_guard; /* what a statistics push may put in (ps/stats_guard.h) */
    float *unpack_buf;             /* (shape.max_layer_floats) */
    ps_sched_t *sched;             /* the blocks' scheduling records, the refresh policy and state, the
                                    * interval and damping schedule, the intervals in force (ps/sched.h's, opaque) */
    ps_jobs_t *jobs;               /* job ids, the dampings they were cut with, the queue's order (ps/jobs.c's,
                                    * opaque) */
    ps_curv_t *curv;               /* the curvature thread: folds, cuts, checks (ps/curv.h); NULL for sgd */
    int curv_closing;              /* tasks coming back now are only released */
    ps_damping_t *damping;         /* [kfac] damping_rule and inverse_age_damping (ps/damping.h; server.c makes it) */

    ps_round_t *round;             /* the round of version t (round.c's; opaque elsewhere: ps/round_state.h) */

    ps_trim_t trim;                /* when freed memory goes back (ps/trim.h) */

    /* clients */
    ps_peers_t peers;
    ps_hello_t *hello;             /* client ids, member ids bound to keys, join lines (ps/hello.c's, opaque) */
    ps_io_t *io;                   /* the send and rejection lines' limits (ps/io.c's, opaque) */

    /* evaluation */
    ps_eval_t *eval;               /* the evaluation thread, its newest result and submission (ps/eval.h) */

    /* metrics and progress */
    rundir_t *metrics;             /* [run] out_dir */
    ps_report_t *report;           /* progress, curvature watch, live view (ps/report.c's, opaque) */

    /* counters: every event count of the run (ps/counters.h; written there only) */
    ps_counters_t ctr;

    /* members that may not poison or hold the run */
    ps_guard_t *guard;             /* norm histories, per-layer norms, the last good parameters (ps/guard.h) */
    ps_heldout_t *heldout;         /* the server's own reference gradient and its thread (ps/heldout.h); NULL:
                                    * [ps] heldout_n = 0 */
    ps_drift_t *drift;             /* each worker's history against the reference (ps/drift.h); NULL likewise */
    ratelimit_t rl_rate, rl_expired; /* server.c's lines: requests over the rate limit, handshakes expired */
    /* checkpoints (ps/persist.c) */
    ps_persist_t *persist;         /* the checkpoint folder, the step resumed from, whether that ended the
                                    * run (ps/persist.c's, opaque) */

    /* life cycle */
    ps_life_t life;                /* running, finishing, closed; the end asked for (ps/life.h) */
    int exit_code;
    int signum;                    /* the signal that stopped the run (0: none) */
    char reason[200];              /* why the run ended */
};

/* ---- server.c ------------------------------------------------------------ */

/* Stop the run: print the summary, send Shutdown to every client, close
 * everything; uv_run then returns and ps_server_run returns exit_code.
 * Called by the server only; the round asks for it with
 * ps_round_request_shutdown(). */
void ps_srv_shutdown(ps_server_t *s, int exit_code);

#endif
