/* ps/eval.h — the parameter server's evaluation thread: test loss and
 * accuracy of a copy of the parameters (and of their Polyak average), on a
 * thread of its own so that steps go on meanwhile.
 *
 * The evaluator owns a second network parsed from the same model text (with
 * buffers for PS_EVAL_BATCH examples), the test split (first eval_n
 * examples, 0 = all) and one zloop_pool thread. Each submission copies the
 * arrays it is given; the thread loads them into its network, runs
 * net_evaluate in eval mode (batch-norm running statistics from `state`) and
 * the result comes back on the loop thread through `done`, in submission
 * order.
 *
 * Threads: ps_eval_* are called on the loop thread; the network and the test
 * set are used only by the evaluation thread after ps_eval_new returns.
 * Before its first evaluation that thread lowers its priority ([ps]
 * eval_priority: low, the default, is nice 10, a bounded share of about a
 * tenth of a nice-0 thread's; idle is SCHED_IDLE, only CPU time nothing
 * else wants, which can starve on a host busy with other work) and starts
 * the network's [ps] eval_threads threads (net_set_threads), which inherit
 * it: an evaluation barely slows a step and takes both cores when the
 * workers wait. The first evaluation logs what it got.
 */
#ifndef KFAC_PS_EVAL_H
#define KFAC_PS_EVAL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/run/runcfg.h"

/* Examples per forward pass of the evaluator. */
#define PS_EVAL_BATCH 256

typedef struct ps_eval_result {
    uint64_t step;          /* parameter version evaluated */
    double wall_s;          /* PS clock when the copy was taken */
    double loss, acc;       /* current parameters */
    double polyak_loss, polyak_acc; /* Polyak average (= current when there is none) */
    int has_polyak;
    int final;              /* the run's last evaluation */
    double eval_ms;         /* time the evaluation took */
    int n;                  /* test examples used */
} ps_eval_result_t;

/* Runs on the loop thread for every submission (status 0), or with status
 * -ECANCELED for one the evaluator was closed before starting (r then holds
 * only step and final). */
typedef void (*ps_eval_done_fn)(const ps_eval_result_t *r, int status, void *user);

typedef struct ps_eval ps_eval_t;

/* Parse model_text, load the test split of cfg's data set ([data] set, dir;
 * [run] eval_n) and start the thread. Returns NULL with the reason in err
 * (e.g. the data loader's message naming the missing file and `make data`)
 * and the negative errno in *rc_out (not NULL): the loader's for the data,
 * -EINVAL for a data set that does not fit the model, -ENOMEM otherwise. */
ps_eval_t *ps_eval_new(uv_loop_t *loop, const char *model_text, const runcfg_t *cfg, ps_eval_done_fn done,
                       void *user, int *rc_out, char *err, size_t err_len);

/* Queue an evaluation of params (n_params floats), polyak (n_params floats
 * or NULL) and state (n_state floats, or NULL when the model has none), all
 * copied. A periodic one (final = 0) while two are still pending is
 * skipped, the first time with a warning: evaluations fall behind. Returns
 * 0, -EBUSY (skipped), -ENOMEM or -EPIPE (closing). */
int ps_eval_submit(ps_eval_t *e, uint64_t step, double wall_s, const float *params, const float *polyak,
                   const float *state, int final);

/* Submissions whose result has not come back yet. */
size_t ps_eval_pending(const ps_eval_t *e);

/* The newest result delivered with status 0 (recorded before done runs),
 * borrowed until the next one; NULL while there is none (or e is NULL). */
const ps_eval_result_t *ps_eval_last(const ps_eval_t *e);

/* The step of the newest submission accepted (-1: none, or e is NULL). */
long ps_eval_queued_step(const ps_eval_t *e);

/* Test examples each evaluation uses. */
int ps_eval_n(const ps_eval_t *e);

/* Stop: queued evaluations are cancelled (done with -ECANCELED), a running
 * one is waited for (done with 0), the thread, the network and the test set
 * are freed. What ps_eval_last and ps_eval_queued_step say stays (the
 * summary and the weights' manifest read it after the end); a submission
 * returns -EPIPE. Idempotent; NULL is a no-op. Loop thread. */
void ps_eval_stop(ps_eval_t *e);

/* Stop (ps_eval_stop), then free everything. NULLs *e_p; NULL is a no-op.
 * Loop thread. */
void ps_eval_free(ps_eval_t **e_p);

#endif
