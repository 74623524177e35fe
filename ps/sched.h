/* ps/sched.h — the parameter server's inversion-job scheduler: pure
 * functions over a small array of block states, no sockets, no clocks (the
 * caller passes the time), so every rule can be unit tested.
 *
 * A "block" is one symmetric Kronecker factor that needs a damped inverse
 * (kfac_opt.h). For each the scheduler knows
 *   factor_version  the newest statistics version folded into the running
 *                   factor (-1: no statistics yet),
 *   inv_version     the factor version the installed inverse came from
 *                   (-1: none yet),
 *   the job in flight (at most one counts as "current") and a short history
 *   of the jobs handed out, so that a late result can still be matched.
 *
 * Rules (docs/architecture.md, "Scheduling"):
 *   - A block is WANTED when it has statistics newer than its inverse
 *     (factor_version > inv_version), newer than its last failed job, and
 *     the refresh policy asks for it: continuous always; every and adaptive
 *     only when `due` was set (by ps_sched_mark_every, ps_sched_mark_bound or
 *     the caller's adaptive rule) or when it has no inverse at all.
 *   - A block is AVAILABLE when no job for it is in flight, or the job in
 *     flight is overdue (handed out more than timeout_ms ago). A job whose
 *     daemon vanished is cleared by ps_sched_owner_gone, which makes the
 *     block available again. So a block is never with two daemons at once
 *     unless the first is overdue or gone.
 *   - Among wanted, available blocks that fit the daemon (n <= max_n, max_n
 *     0 = any) the stalest goes first: a block without an inverse before any
 *     block with one, then larger age = factor_version - inv_version; ties go
 *     to the larger cost (~ n^3) so big blocks spread across daemons; then
 *     to the lower index (deterministic).
 *   - Staleness bound k >= 0: step t may be applied only when every block
 *     holds an inverse with t - inv_version <= k (a block without an inverse
 *     is infinitely old). k < 0: no bound.
 *
 * Ages are in parameter versions. Times are in milliseconds on the caller's
 * monotonic clock. Owners are the inverse daemons' assigned ids (never 0,
 * never reused).
 *
 * Thread safety: none; the PS's loop thread owns the array.
 */
#ifndef KFAC_PS_SCHED_H
#define KFAC_PS_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "common/kfac/kfac_opt.h"
#include "common/run/runcfg.h"

typedef enum {
    PS_SCHED_CONTINUOUS = 0, /* a job whenever the factor changed since the last inverse */
    PS_SCHED_EVERY = 1,      /* every block once every inverse_every steps */
    PS_SCHED_ADAPTIVE = 2,   /* SP-NGD Algorithm 2 per block, decided by the caller */
} ps_sched_policy_t;

/* Jobs remembered per block for matching late results. */
#define PS_SCHED_RECENT 8
/* Daemons whose report that a version of a block could not be inverted is
 * kept: that many distinct daemons (or every daemon there is) make the
 * failure the block's (ps_sched_failed_by). */
#define PS_SCHED_FAIL_QUORUM 2

typedef struct ps_sched_job {
    uint64_t id;        /* 0: empty */
    long version;       /* factor version the job was cut from */
    uint32_t owner;     /* daemon's assigned id */
    double start_ms;    /* when handed out */
    float damping;      /* the damping it was cut with (-1: not cut yet) */
} ps_sched_job_t;

typedef struct ps_sched_block {
    int n;                   /* factor dimension */
    double cost;             /* ~ n^3 */
    long factor_version;     /* newest statistics folded (-1: none) */
    long inv_version;        /* version of the installed inverse (-1: none) */
    long failed_version;     /* newest version whose job failed (-1: none) */
    long fail_try_version;   /* the version some daemons reported they could not invert (-1: none) ... */
    uint32_t fail_owners[PS_SCHED_FAIL_QUORUM]; /* ... those daemons (their ids) */
    int n_fail_owners;
    double failed_seen_ms;   /* when ps_sched_mark_bound first found it failed and holding a step (0: not) */
    int due;                 /* the refresh policy asks for a new inverse */
    long checking_version;   /* a result of this factor version is being checked on the curvature thread (-1:
                                none): the version is not handed out again meanwhile */
    ps_sched_job_t cur;      /* job in flight (cur.id == 0: none) */
    ps_sched_job_t recent[PS_SCHED_RECENT]; /* ring of jobs handed out and not answered */
    int recent_next;         /* next ring slot */
} ps_sched_block_t;

/* An empty block of dimension n (cost n^3, no statistics, no inverse, no
 * job). */
void ps_sched_block_init(ps_sched_block_t *b, int n);

/* A result of factor version `version` went to the curvature thread to be
 * checked (ps_sched_checking), and came back (ps_sched_checked). */
void ps_sched_checking(ps_sched_block_t *b, long version);
void ps_sched_checked(ps_sched_block_t *b);

/* Job `id`, assigned before its factor was cut, was cut from `version`
 * with `damping`: the assignment and the ring say so. */
void ps_sched_recut(ps_sched_block_t *b, uint64_t id, long version, float damping);

/* Job `id` was never sent (its cut failed or its daemon left): it is
 * forgotten, and the block is free when it was the one in flight. */
void ps_sched_unassign(ps_sched_block_t *b, uint64_t id);

/* Does the block want a new inverse under policy (see the rules above)? */
int ps_sched_wanted(const ps_sched_block_t *b, ps_sched_policy_t policy);

/* Can the block be handed out now (no job in flight, or the one in flight
 * is overdue: now_ms - start_ms > timeout_ms)? */
int ps_sched_available(const ps_sched_block_t *b, double now_ms, double timeout_ms);

/* Is the job in flight overdue? 0 when there is none. */
int ps_sched_overdue(const ps_sched_block_t *b, double now_ms, double timeout_ms);

/* Order of two candidate blocks: < 0 when a goes before b (stalest first,
 * then larger cost, then lower index ia < ib), > 0 after, 0 only for ia ==
 * ib. */
int ps_sched_compare(const ps_sched_block_t *a, int ia, const ps_sched_block_t *b, int ib);

/* The block to give a daemon that accepts factors up to max_n (0: any):
 * the first by ps_sched_compare among wanted and available blocks. Returns
 * its index, or -1 when none. blocks: (n_blocks), read only. */
int ps_sched_pick(const ps_sched_block_t *blocks, int n_blocks, ps_sched_policy_t policy, uint32_t max_n,
                  double now_ms, double timeout_ms);

/* ps_sched_pick for daemon `owner` (0: any): a block whose current factor
 * version that daemon reported it could not invert is not given to it. */
int ps_sched_pick_for(const ps_sched_block_t *blocks, int n_blocks, ps_sched_policy_t policy, uint32_t max_n,
                      uint32_t owner, double now_ms, double timeout_ms);

/* Record that job `id` (> 0), cut from factor version `version`, went to
 * daemon `owner` at now_ms. It becomes the block's current job (an overdue
 * one it replaces stays matchable in the history) and `due` is cleared. */
void ps_sched_assign(ps_sched_block_t *b, uint64_t id, long version, uint32_t owner, double now_ms);

/* Match a result for job `id` from daemon `owner` on this block. Returns 1
 * when it is the current job (cleared), 0 when it is a known older job
 * (e.g. overdue and handed out again), -ENOENT when this block never handed
 * it out or it was answered already, -EPERM when the job went to another
 * daemon (it stays matchable for that one: job ids are sequential, so one
 * daemon could otherwise answer, or cancel, any daemon's job). On 0 or 1
 * *version receives the version the job was cut from, *damping (when not
 * NULL) the damping it was cut with (-1: never cut), and the job is
 * forgotten (a second result for it gets -ENOENT). */
int ps_sched_result(ps_sched_block_t *b, uint64_t id, uint32_t owner, long *version, float *damping);

/* The inverse from `version` was installed: inv_version = max(inv_version,
 * version). */
void ps_sched_installed(ps_sched_block_t *b, long version);

/* The job from `version` failed: the block is not wanted again until its
 * factor is newer than version. */
void ps_sched_failed(ps_sched_block_t *b, long version);

/* Daemon `owner` reports it could not invert the block's factor of
 * `version` (a JobResult with an error, or an Error while holding the
 * job). One daemon's word does not fail the block: while fewer than
 * PS_SCHED_FAIL_QUORUM distinct daemons (and fewer than n_daemons, those
 * there are) have said so for that version, the job goes to another
 * daemon (ps_sched_pick_for skips those that failed it) and 0 is
 * returned; then the block fails (ps_sched_failed) and 1 is returned. A
 * hostile daemon that reports every job failed no longer holds a block
 * (and a step waiting on it under a staleness bound) until newer
 * statistics: and when another daemon inverts that version, its report was
 * false (ps_sched_disproved). */
int ps_sched_failed_by(ps_sched_block_t *b, long version, uint32_t owner, int n_daemons);

/* The inverse of `version` was installed: the daemons that reported that
 * version, or an older one still kept, could not be inverted are put into
 * out (up to cap; their ids) and forgotten: the factor was invertible, at
 * the version they had or a few folds later (each fold moves it by
 * 1 - stat_decay, and with the guarded statistics and the damping an honest
 * Cholesky does not fail). Returns their number. */
int ps_sched_disproved(ps_sched_block_t *b, long version, uint32_t *out, int cap);

/* New statistics: factor_version = max(factor_version, version). */
void ps_sched_folded(ps_sched_block_t *b, long version);

/* Daemon `owner` vanished (or gave up its job): clear every current job it
 * holds so the blocks can be handed out again; the jobs stay matchable in
 * the history. Returns the number of jobs re-queued. */
int ps_sched_owner_gone(ps_sched_block_t *blocks, int n_blocks, uint32_t owner);

/* Index of the block whose current job `owner` holds, or -1. */
int ps_sched_owner_block(const ps_sched_block_t *blocks, int n_blocks, uint32_t owner);

/* Number of jobs in flight. */
int ps_sched_in_flight(const ps_sched_block_t *blocks, int n_blocks);

/* Refresh policy "every": at a step t with t % every == 0 set `due` on every
 * block whose factor is newer than its inverse. every < 1 does nothing. */
void ps_sched_mark_every(ps_sched_block_t *blocks, int n_blocks, long t, int every);

/* Staleness bound: set `due` on every block that would block step t under
 * bound k (no inverse, or t - inv_version > k), so the bound overrides the
 * refresh policy; a blocking block whose job failed at its newest
 * statistics is tried again once it has held the step for timeout_ms (no
 * statistics come while the step waits); except a block whose job in flight was cut from a version
 * that satisfies the bound (t - version <= k) and is not overdue
 * (now_ms - start_ms <= timeout_ms): its result will do, and a second job
 * would make the schedule depend on timing. k < 0 does nothing. */
void ps_sched_mark_bound(ps_sched_block_t *blocks, int n_blocks, long t, int k, double now_ms, double timeout_ms);

/* May step t be applied under staleness bound k? 1 yes, 0 no; k < 0 always
 * yes. *n_blocking (may be NULL) receives the number of blocks that are too
 * old or have no inverse. */
int ps_sched_bound_ok(const ps_sched_block_t *blocks, int n_blocks, long t, int k, int *n_blocking);

/* Ages at version t: mean and max of t - inv_version over blocks holding an
 * inverse (mean 0 and max -1 when none), and the mean of t - factor_version
 * over blocks with statistics (0 when none). Any pointer may be NULL. */
void ps_sched_ages(const ps_sched_block_t *blocks, int n_blocks, long t, double *inv_mean, long *inv_max,
                   double *stats_mean);

/* ---- the job flow: which daemon, and what a result means ------------------ */

/* An inverse daemon waiting for a job: when it started waiting (a sequence
 * number: first come, first served) and the largest block it takes. */
typedef struct ps_sched_waiter {
    uint64_t wait_seq;
    uint32_t max_n;
    uint32_t owner; /* its id (ps_sched_pick_for; 0: any) */
} ps_sched_waiter_t;

/* The next job to hand out: among the n_waiters daemons waiting, the one
 * waiting longest (lowest wait_seq) for which ps_sched_pick finds a block.
 * Returns the waiter's index and the block in *block, or -1 when no waiter
 * gets a block now. */
int ps_sched_pick_waiter(const ps_sched_waiter_t *waiters, int n_waiters, const ps_sched_block_t *blocks,
                         int n_blocks, ps_sched_policy_t policy, double now_ms, double timeout_ms, int *block);

/* What a JobResult means, given match: ps_sched_result's return for it
 * (job_version: the version it gave); result_version: the factor version
 * the result names; failed: it carries an error (the daemon could not
 * invert); cholesky: a Cholesky result (it may have added damping);
 * result_damping: the damping it says it used; job_damping: the damping the
 * job asked for (< 0: no probe was kept for the job, ps_verify_damping);
 * max_escalations: how many times tenfold a daemon may raise it. The
 * checks go in this order: the job (foreign, unknown), the version, the
 * error, the probe, the damping. */
typedef enum {
    PS_RESULT_CHECK = 0,     /* an inverse to load, verify against its probe and install, with *damping */
    PS_RESULT_FAILED,        /* the daemon could not invert: the block waits for newer statistics */
    PS_RESULT_UNKNOWN,       /* not handed out by this block, or answered already: dropped and counted */
    PS_RESULT_FOREIGN,       /* the job went to another daemon: a bad result */
    PS_RESULT_WRONG_VERSION, /* it names another factor version than its job's: a bad result */
    PS_RESULT_NO_PROBE,      /* no probe was kept for the job: a bad result */
    PS_RESULT_BAD_DAMPING,   /* a Cholesky damping below the job's, or above its escalations: a bad result */
} ps_sched_result_t;

/* Decide on a result as above; *damping gets the damping to apply it with
 * (the job's; a Cholesky result's own when it passes). why (may be NULL)
 * gets the reason for FOREIGN, WRONG_VERSION, NO_PROBE and BAD_DAMPING;
 * job_id only names the job in it. */
ps_sched_result_t ps_sched_judge(int match, long job_version, uint64_t job_id, uint64_t result_version, int failed,
                                 int cholesky, double result_damping, float job_damping, int max_escalations,
                                 float *damping, char *why, size_t why_len);

/* Policy name ("continuous", "every", "adaptive"). */
const char *ps_sched_policy_name(ps_sched_policy_t p);

/* ---- the server's scheduling state ----------------------------------------
 *
 * ps_sched_t is kfac-ps's K-FAC scheduling group in one place (opaque,
 * defined in sched.c, written there only): the block array mirroring
 * kfac->blocks, the refresh policy, the interval and damping schedule
 * ([kfac] interval_milestones, damping_milestones; Pauloski sec. V-C), the
 * intervals in force at the current step, and, under refresh = adaptive,
 * the SP-NGD refresh state (ps/refresh.h). It decides nothing by itself and
 * does no I/O: the server's units read it through the functions below and
 * pass its block array to the pure functions above. */
typedef struct ps_sched ps_sched_t;
typedef struct ps_refresh ps_refresh_t;

/* The scheduling state of a run of configuration c ([kfac] refresh,
 * refresh_alpha, stats_every, inverse_every, damping and the milestones)
 * for the optimizer kfac (borrowed; NULL under sgd: no blocks, no refresh
 * state). No intervals are in force until ps_sched_at. Returns NULL with
 * *rc (may be NULL) = -EINVAL and the reason in err for a bad schedule or
 * refresh_alpha, -ENOMEM when out of memory. ps_sched_free NULLs the
 * pointer and accepts NULL. */
ps_sched_t *ps_sched_new(const runcfg_t *c, const kfac_opt_t *kfac, int *rc, char *err, size_t err_len);
void ps_sched_free(ps_sched_t **sc_p);

/* The schedule at step t: the intervals in force become those of the
 * schedule at t, and *damping (may be NULL) gets its damping. Returns 1
 * when intervals were in force before and changed (an interval milestone),
 * 0 when not, -EINVAL when the schedule refuses t (nothing changes). */
int ps_sched_at(ps_sched_t *sc, long t, double *damping);

/* The statistics interval (stats = sync) and the inverse interval (refresh
 * = every) in force; 0 before the first ps_sched_at. */
int ps_sched_fac_interval(const ps_sched_t *sc);
int ps_sched_inv_interval(const ps_sched_t *sc);

/* The refresh policy ([kfac] refresh). */
ps_sched_policy_t ps_sched_policy(const ps_sched_t *sc);

/* The blocks: (ps_sched_n_blocks) entries mirroring kfac->blocks, owned by
 * sc and borrowed by the caller, who changes them through the functions
 * above (and a checkpoint's restore, ps/ckpt.h); NULL and 0 under sgd. */
ps_sched_block_t *ps_sched_blocks(ps_sched_t *sc);
int ps_sched_n_blocks(const ps_sched_t *sc);

/* The adaptive refresh state (ps/refresh.h; owned by sc, borrowed): NULL
 * unless refresh = adaptive under kfac. */
ps_refresh_t *ps_sched_refresh(ps_sched_t *sc);

#endif
