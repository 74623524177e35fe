/* ps/heldout.h — kfac-ps's own reference gradient, on examples it holds
 * itself (Zeno++, Xie, Koyejo and Gupta, ICML 2020): what a worker's
 * gradients are judged against (ps/drift.h), whatever the other members
 * send.
 *
 * Why a reference of the server's own: a small consistent bias (every round
 * -c x the parameters, "a little is enough", Baruch et al. 2019) is inside
 * every norm bound and moves the mean of two workers and the coordinate
 * median of three alike; comparing members only with each other cannot
 * tell one honest worker from one hostile one. The server computes the gradient of the loss on a slice
 * of the training split it holds itself: the last [ps] heldout_n examples
 * (not the test split, whose figures the evaluation reports and which must
 * stay unseen; honest workers train on the same examples unless [data]
 * train_n leaves them out, which only makes the reference closer to theirs).
 *
 * The verdict on a push against the reference is ps/drift.h's.
 *
 * Threads: the gradient is computed on a thread of its own (a zloop_pool of
 * one thread, at the evaluation's priority, [ps] eval_priority), from a copy
 * of the parameters of version r taken on the loop thread; the result
 * replaces the reference on the loop thread (a pointer swap in the pool's
 * done callback). The step never waits for it: pushes of version t are
 * judged against the newest reference, of a version r <= t (Zeno++ is
 * designed for that staleness); ps_heldout_ref says which. Every
 * ps_heldout_* call is made on the loop thread; the network and the slice
 * belong to the reference thread after ps_heldout_new returns.
 *
 * Numbers: float32 parameters and gradients.
 */
#ifndef KFAC_PS_HELDOUT_H
#define KFAC_PS_HELDOUT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/run/runcfg.h"

typedef struct ps_heldout ps_heldout_t;

/* Parse model_text (batch capacity n_examples), load the training split of
 * cfg's data set, keep its last n_examples examples (all when it has fewer)
 * and start the thread. The whole split is read once and freed: kfac-ps's
 * resident memory peaks by its size at start-up. Returns NULL with the
 * reason in err and the negative errno in *rc_out (the loader's for the
 * data, -EINVAL for n_examples < 1 or a data set that does not fit the
 * model, -ENOMEM otherwise). */
ps_heldout_t *ps_heldout_new(uv_loop_t *loop, const char *model_text, const runcfg_t *cfg, int n_examples,
                             int *rc_out, char *err, size_t err_len);

/* Queue the gradient of the mean loss on the slice at the parameters of
 * version `version` (params: n_params floats; state: the batch-norm state,
 * n_state floats, or NULL), both copied. Only one is computed at a time:
 * while one is queued or running nothing is queued and -EBUSY returned.
 * Returns 0, -EBUSY, -ENOMEM or -EPIPE (stopped). */
int ps_heldout_submit(ps_heldout_t *h, uint64_t version, const float *params, const float *state);

/* Is a reference being computed? (0 for NULL) */
int ps_heldout_busy(const ps_heldout_t *h);

/* The newest reference (n_params floats, borrowed until the next call on
 * the loop thread that may deliver one), its version into *version and its
 * norm into *norm; NULL while none has come (or h is NULL). */
const float *ps_heldout_ref(const ps_heldout_t *h, uint64_t *version, double *norm);

/* Examples of the slice. */
int ps_heldout_n(const ps_heldout_t *h);

/* References computed so far, and the milliseconds the last one took. */
uint64_t ps_heldout_count(const ps_heldout_t *h);
double ps_heldout_last_ms(const ps_heldout_t *h);

/* Stop: a queued reference is dropped, a running one waited for; the
 * thread, the network and the slice are freed. What ps_heldout_ref says
 * stays. Idempotent; NULL is a no-op. */
void ps_heldout_stop(ps_heldout_t *h);

/* Stop, then free everything. NULLs *h_p; NULL is a no-op. */
void ps_heldout_free(ps_heldout_t **h_p);

#endif
