/* ps/curv.h — kfac-ps's curvature threads: the statistics folds, the job
 * cuts and the checks of returned inverses, off the loop thread that the
 * rounds and the workers wait on. Two threads: one folds, one cuts and
 * checks, so that a statistics worker's fold does not wait behind a
 * check, nor a job behind a fold (one thread for both delivered half the
 * inverses and folds per step on 2 cores: bench/RESULTS.md).
 *
 * What each thread owns:
 *  - the fold thread: the running factor averages (kfac->avg), each
 *    block's factor_version and the fold count, the statistics guard's
 *    histories, a layer's packed floats (all under the unit's mutex, which
 *    a cut takes to copy its factor and ps_curv_lock takes);
 *  - the job thread: the probes of the jobs in flight (ps/verify.h), its
 *    scratch (a factor, an inverse unpacked), the blocks' packed buffers;
 *  - the loop thread: everything else, the installed inverses above all
 *    (the step reads them), the scheduler's records, the peers, the
 *    batch-norm view of the factors the step reads (kfac_opt_bn_view);
 *  - handed over in a task: its statistics batch, its message (taken from
 *    the loop with msg_take), its inverse holder, its block's packed
 *    buffer. Only the task's side touches them between ps_curv_submit and
 *    the task's return through `done` on the loop thread.
 * Tasks run one at a time in submission order (one thread), so what comes
 * back is what a serial kfac-ps would have computed: a cut after a fold
 * sees that fold, a check follows its cut. The loop never waits for a
 * task, except for the rare reads of the whole curvature state
 * (ps_curv_lock: a checkpoint, the guard of statistics that ride in a
 * gradient push), which wait for the task running, if any, to end.
 *
 * The kinds:
 *  - FOLD: statistics (a StatsPush's message, or the round's merged
 *    statistics, whose buffer goes with the task) checked by the statistics guard (StatsPush) and folded into
 *    kfac->avg at `version`; back come the blocks' factor versions and the
 *    batch-norm factors after it, or the reason it was refused;
 *  - CUT: block b's factor at damping lambda copied, packed into the
 *    block's buffer and probed for job job_id; back come the damping, the
 *    factor version and the packed floats;
 *  - CHECK: a JobResult's inverse loaded into the task's holder and checked
 *    against its job's probe; back comes the verdict with the residual;
 *  - FORGET: the probe of a job whose result holds no inverse.
 */
#ifndef KFAC_PS_CURV_H
#define KFAC_PS_CURV_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_stats.h"
#include "common/net/wire.h"
#include "proto/msg.h"
#include "ps/stats_guard.h"

typedef enum {
    PS_CURV_FOLD = 1,
    PS_CURV_CUT,
    PS_CURV_CHECK,
    PS_CURV_FORGET,
} ps_curv_kind_t;

typedef struct ps_curv_task {
    ps_curv_kind_t kind;
    uint32_t peer_id;          /* the peer to answer when it comes back (0: none) */
    int block;                 /* CUT, CHECK, FORGET */
    uint64_t job_id;           /* CUT, CHECK, FORGET */
    long version;              /* FOLD: the statistics' version; CUT: out, the factor version cut; CHECK: the job's */
    int guard;                 /* FOLD: judge by the statistics guard first (a statistics worker's push) */
    int current;               /* CHECK: the result answers the block's job in flight (0: a late one) */
    double lambda;             /* CUT: the damping in force when it was asked for */
    float damping;             /* CUT: out, the block's damping; CHECK: in, the damping the result used */
    msg_t msg;                 /* FOLD (StatsPush) and CHECK (JobResult): the message, owned */
    kfac_stats_t *batch;       /* FOLD: the statistics (owned): a message's unpacked into it, or the round's
                                  merged ones (ps_round_state_swap_stats) */
    float *packed;             /* CUT: out, the block's packed factor (the curvature unit's; valid until the
                                  block's next cut) */
    kfac_inverse_t *inv;       /* CHECK: the holder the inverse is loaded into (owned) */
    long *versions;            /* FOLD: out, each block's factor version after it (n_blocks) */
    float *bn;                 /* FOLD: out, the batch-norm factors after it (kfac_opt_bn_len) */
    unsigned char *bn_has;     /* FOLD: out, per statistics slot */
    int rc;                    /* out: 0, or a negative errno with the reason in err */
    double residual;           /* CHECK: out */
    double ms;                 /* out: the task's time on the curvature thread */
    uint64_t after_folds;      /* CUT: the folds submitted before it (set by ps_curv_submit) */
    char err[700];
    struct ps_curv_task *next; /* the free list */
} ps_curv_task_t;

typedef struct ps_curv ps_curv_t;

/* Runs on the loop thread for every submitted task (status 0), or with
 * -ECANCELED for one the thread never started (closing). The callee hands
 * the task back with ps_curv_release. */
typedef void (*ps_curv_done_fn)(ps_curv_task_t *t, int status, void *user);

/* The thread for optimizer k (borrowed; its avg and factor versions belong
 * to the thread from now on), statistics guard g (borrowed) with its bound
 * max_ratio ([kfac] stats_trace_max_ratio) and the layers' names for its
 * messages (layer_name(name_ctx, layer)), message shape sh (borrowed),
 * probes drawn from seed. Turns on k's batch-norm view. Returns NULL when
 * out of memory or when the thread cannot start. */
ps_curv_t *ps_curv_new(uv_loop_t *loop, kfac_opt_t *k, ps_stats_guard_t *g, double max_ratio,
                       const char *(*layer_name)(const void *ctx, int layer), const void *name_ctx,
                       const wire_shape_t *sh, uint64_t seed, ps_curv_done_fn done, void *user);

/* Tasks not started come back cancelled, the one running is waited for. */
void ps_curv_free(ps_curv_t **c);

/* A cleared task of that kind (FOLD ones with their output arrays), or
 * NULL when out of memory. Loop thread. */
ps_curv_task_t *ps_curv_task(ps_curv_t *c, ps_curv_kind_t kind);

/* An inverse holder for block b, from the block's spares (CHECK). */
kfac_inverse_t *ps_curv_holder(ps_curv_t *c, int b);

/* Queue t. Returns 0, or a negative errno (t is then the caller's). */
int ps_curv_submit(ps_curv_t *c, ps_curv_task_t *t);

/* Give back a task that came back (its message freed, its batch and its
 * holder kept for the next ones). */
void ps_curv_release(ps_curv_t *c, ps_curv_task_t *t);

/* The loop's exclusive access to the curvature state (checkpoints; the
 * statistics guard of a GradPush): waits for the task running, if any. */
void ps_curv_lock(ps_curv_t *c);
/* The same after every fold submitted so far has run (a checkpoint: the
 * factors it writes are those of the round it records as folded). */
void ps_curv_lock_all(ps_curv_t *c);
void ps_curv_unlock(ps_curv_t *c);

/* Tasks submitted and not yet come back. */
size_t ps_curv_pending(const ps_curv_t *c);

/* Milliseconds the threads have spent in tasks so far. */
double ps_curv_busy_ms(ps_curv_t *c);

#endif
