/* ps/http.h — kfac-ps's live view: the Prometheus text exposition format
 * (version 0.0.4) served over HTTP at [ps] metrics = HOST:PORT, GET
 * /metrics, with libmicrohttpd.
 *
 * Threads: libmicrohttpd answers on its own thread. The PS's loop thread
 * publishes a snapshot (ps_http_publish, after each step and on its timer);
 * the snapshot is copied under a mutex, and each request formats the copy
 * under the same mutex. Nothing else is shared: the HTTP thread never
 * touches the server's state.
 *
 * Metrics (docs/operations.md lists them with their meaning):
 *   kfac_step, kfac_steps_target, kfac_wall_seconds, kfac_train_loss,
 *   kfac_train_accuracy, kfac_test_accuracy{params="current"|"polyak"},
 *   kfac_test_loss{params=...}, kfac_eval_step, kfac_steps_per_second,
 *   kfac_clients{role="worker"|"statsd"|"invertd"},
 *   kfac_rejected_messages_total{type=...}, and with kind = kfac:
 *   kfac_inverses_installed_total, kfac_stats_folded_total,
 *   kfac_inverses_refused_total, kfac_invertd_distrusted_total,
 *   kfac_grad_clipped_total, kfac_robust_steps_total, kfac_recoveries_total,
 *   kfac_workers_stalled_total, kfac_workers_demoted_total, kfac_grads_repushed_total,
 *   kfac_grads_drift_refused_total, kfac_grads_drift_spared_total,
 *   kfac_checkpoints_total, kfac_checkpoints_failed_total,
 *   kfac_inverse_age_steps{layer=...,factor=...} (-1: none yet),
 *   kfac_curvature_idle_seconds{what="inverses"|"statistics"},
 *   kfac_curvature_stale{what=...} (1 when idle longer than
 *   [ps] curvature_warn_s).
 */
#ifndef KFAC_PS_HTTP_H
#define KFAC_PS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "common/nn/nn.h"
#include "proto/msg.h"

typedef struct ps_http_block {
    char layer[NN_NAME_MAX]; /* the layer's name */
    int factor;              /* factor index within the layer (0: A, 1: G; doubly-factored: 3) */
    long age_steps;          /* t - the factor version of the inverse held (-1: none yet) */
} ps_http_block_t;

typedef struct ps_http_snapshot {
    uint64_t step;           /* parameter version t */
    uint64_t steps_target;   /* [run] steps */
    double wall_s;           /* seconds since the PS started */
    double train_loss, train_acc; /* the last step's */
    int have_eval;
    uint64_t eval_step;
    double test_loss, test_acc, polyak_loss, polyak_acc;
    int workers, statsd, invertd; /* clients present */
    uint64_t rejected[MSG_TYPE_COUNT]; /* by message type; [MSG_NONE]: undecodable */
    int kfac;                /* kind = kfac: the fields below mean something */
    uint64_t inverses_installed, stats_folded;
    double damping;                    /* the damping in force ([kfac] damping_rule) */
    double damping_rho;                /* adaptive: the last decision's rho (NaN: none) */
    uint64_t inverses_refused;         /* results that failed verification or came from the wrong daemon */
    uint64_t invertd_distrusted;       /* inverse daemons given no more jobs for it */
    uint64_t grad_clipped;             /* layer gradients clipped ([ps] grad_clip_ratio) */
    uint64_t robust_steps;             /* steps whose gradients were combined by [ps] aggregate's robust rule */
    uint64_t recoveries;               /* rounds with every gradient refused (ps/recover.h) */
    uint64_t stalled;                  /* members dropped from a round for stalling ([ps] stall_timeout_ms) */
    uint64_t demoted;                  /* workers that stalled [ps] stall_max_drops times */
    uint64_t repushed;                 /* gradients refused: the identity already pushed its share of the round */
    uint64_t drift_refused;            /* gradients refused against the reference gradient (ps/drift.h) */
    uint64_t drift_spared;             /* ... beyond its bound, not refused: no other worker within it */
    uint64_t ckpt_saved, ckpt_failed;  /* checkpoints written, and those that could not be */
    double idle_inverses_s, idle_stats_s; /* since the last install / fold (or the first step) */
    double curv_busy_s;      /* the curvature thread's time in tasks so far */
    uint64_t curv_pending;   /* tasks submitted to it and not back yet */
    int stale_inverses, stale_stats;      /* idle longer than [ps] curvature_warn_s */
    int n_blocks;
    const ps_http_block_t *blocks; /* (n_blocks) borrowed for the call */
} ps_http_snapshot_t;

typedef struct ps_http ps_http_t;

/* Check addr the way ps_http_new reads it, without binding: 0, or -EINVAL
 * with the reason in err ("[ps] metrics = ...: ..."). For the start-up
 * configuration check (a bad address is a usage error, exit 2). */
int ps_http_addr_check(const char *addr, char *err, size_t err_len);

/* Serve on addr "HOST:PORT" (an IPv4 address, or "localhost"; port 0: any
 * free one) for snapshots of up to max_blocks blocks. Returns NULL with
 * the reason in err ("[ps] metrics = ...: ..."). */
ps_http_t *ps_http_new(const char *addr, int max_blocks, char *err, size_t err_len);

/* The port actually bound. */
int ps_http_port(const ps_http_t *h);

/* Copy snap (and its blocks, up to max_blocks) for the next requests.
 * steps/s is computed here from successive snapshots (over windows of at
 * least 2 s). Loop thread. */
void ps_http_publish(ps_http_t *h, const ps_http_snapshot_t *snap);

/* The exposition text of snap (and steps_per_s) as a malloc'd string
 * (caller frees); NULL when out of memory. */
char *ps_http_format(const ps_http_snapshot_t *snap, double steps_per_s);

/* Stop the HTTP thread and free. NULLs *h_p; NULL is a no-op. */
void ps_http_free(ps_http_t **h_p);

#endif
