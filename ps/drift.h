/* ps/drift.h — the verdict on a worker's gradient against kfac-ps's own
 * reference gradient (ps/heldout.h), from the member's history: does the
 * member keep pushing along a direction of its own that the reference does
 * not share?
 *
 * Why from the history: a small consistent bias ("a little is enough",
 * Baruch et al. 2019: every round -c x the parameters) is far below the
 * noise of one batch's gradient. Measured on the demo model: an honest
 * batch-64 gradient's cosine with a 256-example reference is 0 +- 0.25, the
 * hostile one's -0.006; the norms and the cosine of any single push (Zeno++'s
 * score) do not tell them apart. What does: the hostile member's pushes
 * agree with each other (its push against its own running mean direction:
 * cosine 1.0; an honest member's: 0.0-0.06), and the reference does not
 * agree with them. Zeno++'s idea (a reference the members cannot touch)
 * applied to the momentum of each member (Karimireddy, He and Jaggi, ICML
 * 2021: a bias that hides in one step's noise shows in the running mean).
 *
 * The statistic, per member i (every judged push g of it, dense, n_params):
 *   u   = m_i / ||m_i||            m_i: the running mean of i's pushes
 *                                  (m_i <- beta m_i + (1 - beta) g after each
 *                                  judgement, beta = PS_DRIFT_BETA)
 *   e   = <g, u> - <v, u>          v: the reference; honest: E e = 0 (g and
 *                                  v estimate the same gradient, and g's
 *                                  batch is fresh, independent of u)
 *   mu, s2: running mean and variance of e (weight max(alpha, 1/n), alpha =
 *   PS_DRIFT_ALPHA); gbar: running mean of ||g||
 *   z   = mu / sqrt(s2 alpha / (2 - alpha) + (PS_DRIFT_FLOOR gbar)^2)
 * The first term is the variance of the running mean of e; the floor keeps a
 * member whose pushes barely vary (a full-batch worker) from being judged
 * on a difference far below its gradient's own length: a member that pushes
 * the same vector every round, unshared by the reference, has z near
 * 1 / PS_DRIFT_FLOOR = 10. A push is refused when the member has been
 * judged at least PS_DRIFT_MIN_PUSHES times and z > [ps] heldout_z, and
 * another member of its role, judged within the table's last
 * PS_DRIFT_RECENT judgements after at least PS_DRIFT_MIN_PUSHES of its own,
 * was within the bound at its last push: the reference stands for what the
 * honest members share, so when it disagrees with every member at once (a
 * trajectory the reference lags, as under poisoned curvature, where
 * refusing everyone stopped the run) no one is refused: such a push is
 * spared (counted by the caller). A member pushing alone is never refused
 * by this check. Every
 * judged push updates the history, refused or not: a member refused by
 * chance is admitted again as its mean decays, one that keeps its bias
 * stays refused.
 *
 * What it does not catch: a member whose bias is hidden in noise of an
 * honest gradient's size is found only once its running mean shows it
 * (about (noise / bias)^2 rounds, like any test of a mean); a member that
 * comes back under a new member id starts a new history (docs/security.md).
 *
 * Members are kept by identity (role, member id, CURVE key: ps/ident.h), at
 * most PS_DRIFT_MAX; a new one replaces the one judged longest ago. Memory:
 * n_params floats per member kept, plus one scratch gradient.
 *
 * Decisions only: no I/O, no clock; ps/round_push.c refuses, logs and
 * counts. Thread: the loop thread. Unit-tested in tests/ps/test_ps_drift.c.
 * float32 vectors, sums in double.
 */
#ifndef KFAC_PS_DRIFT_H
#define KFAC_PS_DRIFT_H

#include <stddef.h>
#include <stdint.h>

#include "common/nn/nn.h"
#include "proto/msg.h"

#define PS_DRIFT_BETA 0.9        /* the running mean direction of a member's pushes */
#define PS_DRIFT_ALPHA 0.1       /* the running mean and variance of e */
#define PS_DRIFT_FLOOR 0.1       /* the noise floor, a fraction of the member's gradient norm */
#define PS_DRIFT_MIN_PUSHES 10   /* judged pushes before a member may be refused */
#define PS_DRIFT_MAX 64          /* members kept */
#define PS_DRIFT_RECENT 64       /* judgements of the table within which another member's verdict counts */

typedef struct ps_drift ps_drift_t;

/* What ps_drift_judge found. */
typedef struct ps_drift_verdict {
    int refuse;       /* 1: refuse the push */
    int spared;       /* 1: beyond the bound, but no other member of its role is within it now: not refused */
    double z;         /* the member's statistic after this push (0 while it has no direction yet) */
    double mu;        /* running mean of e */
    double e;         /* this push's e */
    double g_norm;    /* ||g|| */
    int n_judged;     /* pushes of this member judged, this one included */
} ps_drift_verdict_t;

/* For gradients of n_params floats. NULL when out of memory. ps_drift_free
 * NULLs the pointer and accepts NULL. */
ps_drift_t *ps_drift_new(size_t n_params);
void ps_drift_free(ps_drift_t **d_p);

/* The push g of the member (role, id, key: its identity, key "" without
 * CURVE) against the reference v (n_params floats, borrowed), with [ps]
 * heldout_z = z_max: updates the member's history and fills *out. g is a
 * GradPush's gradient (proto/kfac.proto: the factored layers' weights as
 * D^T X rows), densified with net's shapes (borrowed). Returns 0, -EINVAL
 * when g does not fit net (checked before by the wire rules), -ENOMEM. */
int ps_drift_judge(ps_drift_t *d, const net_t *net, msg_role_t role, uint32_t id, const char *key,
                   const msg_grad_push_t *g, const float *v, double z_max, ps_drift_verdict_t *out);

/* The same on a dense gradient g (n_params floats): the unit's core, for
 * the tests. */
int ps_drift_judge_dense(ps_drift_t *d, msg_role_t role, uint32_t id, const char *key, const float *g,
                         const float *v, double z_max, ps_drift_verdict_t *out);

/* Members whose pushes are being refused now (their last verdict). */
int ps_drift_refusing(const ps_drift_t *d);

/* ---- the table in a checkpoint (ps/ckpt.h, record DRFT) ---- */

#define PS_DRIFT_KEY_LEN 64

/* One member's history as a checkpoint holds it; the table keeps each
 * member in this form too (ps/drift.c), with m apart. */
typedef struct ps_drift_saved {
    msg_role_t role;
    uint32_t id;
    char key[PS_DRIFT_KEY_LEN]; /* NUL-terminated */
    uint64_t judged_at;         /* the table's judgement count when it was last judged */
    int has_m;                  /* m holds its running mean direction */
    int refusing;               /* its last verdict */
    int n, n_judged;            /* e values seen; pushes judged */
    double mu, s2, gbar, z;
    const float *m;             /* (n_params) with has_m; borrowed */
} ps_drift_saved_t;

/* The table's judgement count and gradient length. */
uint64_t ps_drift_judged(const ps_drift_t *d);
size_t ps_drift_n_params(const ps_drift_t *d);

/* The members into out (at most max; out NULL: only counted); their m
 * point into the table (valid until its next change). Returns the number
 * of members. */
int ps_drift_save(const ps_drift_t *d, ps_drift_saved_t *out, int max);

/* Whether x can be a member of a table of n_judged judgements (role, key
 * terminated, counts, finite statistics with s2 and gbar >= 0, judged_at
 * <= n_judged); its m is not looked at (the caller checks n_params finite
 * floats). 0, or -EINVAL with the reason in why. */
int ps_drift_validate_one(const ps_drift_saved_t *x, uint64_t n_judged, char *why, size_t why_len);

/* Replace the whole table by nothing, with judgement count n_judged, then
 * add members one at a time (ps_drift_put: x validated, at most
 * PS_DRIFT_MAX, no identity twice; returns the member's m, n_params
 * floats to fill when x->has_m, or NULL: -ENOMEM / -EINVAL with errno-style
 * code in *rc). */
void ps_drift_clear(ps_drift_t *d, uint64_t n_judged);
float *ps_drift_put(ps_drift_t *d, const ps_drift_saved_t *x, int *rc);

#endif
