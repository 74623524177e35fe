/* ps/sched.c — see sched.h. Pure functions over ps_sched_block_t arrays,
 * then the server's scheduling state (ps_sched_t), whose fields are written
 * here only. */
#include "ps/sched.h"
#include "ps/refresh.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "common/kfac/kfac_schedule.h"

void ps_sched_block_init(ps_sched_block_t *b, int n) {
    memset(b, 0, sizeof *b);
    b->n = n;
    b->cost = (double)n * n * n;
    b->factor_version = -1;
    b->inv_version = -1;
    b->failed_version = -1;
    b->fail_try_version = -1;
    b->checking_version = -1;
}

void ps_sched_checking(ps_sched_block_t *b, long version) {
    if (version > b->checking_version) b->checking_version = version;
}

void ps_sched_checked(ps_sched_block_t *b) { b->checking_version = -1; }

void ps_sched_recut(ps_sched_block_t *b, uint64_t id, long version, float damping) {
    if (id == 0) return;
    if (b->cur.id == id) {
        b->cur.version = version;
        b->cur.damping = damping;
    }
    for (int i = 0; i < PS_SCHED_RECENT; i++)
        if (b->recent[i].id == id) {
            b->recent[i].version = version;
            b->recent[i].damping = damping;
        }
}

void ps_sched_unassign(ps_sched_block_t *b, uint64_t id) {
    if (id == 0) return;
    if (b->cur.id == id) memset(&b->cur, 0, sizeof b->cur);
    for (int i = 0; i < PS_SCHED_RECENT; i++)
        if (b->recent[i].id == id) b->recent[i].id = 0;
}

int ps_sched_wanted(const ps_sched_block_t *b, ps_sched_policy_t policy) {
    if (b->factor_version < 0 || b->factor_version <= b->inv_version) return 0;
    if (b->factor_version <= b->checking_version) return 0;
    if (b->factor_version <= b->failed_version) return 0;
    if (policy == PS_SCHED_CONTINUOUS || b->inv_version < 0) return 1;
    return b->due != 0;
}

int ps_sched_overdue(const ps_sched_block_t *b, double now_ms, double timeout_ms) {
    return b->cur.id != 0 && now_ms - b->cur.start_ms > timeout_ms;
}

int ps_sched_available(const ps_sched_block_t *b, double now_ms, double timeout_ms) {
    return b->cur.id == 0 || ps_sched_overdue(b, now_ms, timeout_ms);
}

/* Age for ordering: no inverse counts as older than any inverse. */
static long s_age(const ps_sched_block_t *b) {
    if (b->inv_version < 0) return LONG_MAX;
    return b->factor_version - b->inv_version;
}

int ps_sched_compare(const ps_sched_block_t *a, int ia, const ps_sched_block_t *b, int ib) {
    long aa = s_age(a), ab = s_age(b);
    if (aa != ab) return aa > ab ? -1 : 1;
    if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
    return ia < ib ? -1 : ia > ib ? 1 : 0;
}

/* Did daemon owner report the block's current factor version failed? */
static int s_failed_by(const ps_sched_block_t *b, uint32_t owner) {
    if (owner == 0 || b->fail_try_version != b->factor_version) return 0;
    for (int k = 0; k < b->n_fail_owners; k++)
        if (b->fail_owners[k] == owner) return 1;
    return 0;
}

int ps_sched_pick(const ps_sched_block_t *blocks, int n_blocks, ps_sched_policy_t policy, uint32_t max_n,
                  double now_ms, double timeout_ms) {
    return ps_sched_pick_for(blocks, n_blocks, policy, max_n, 0, now_ms, timeout_ms);
}

int ps_sched_pick_for(const ps_sched_block_t *blocks, int n_blocks, ps_sched_policy_t policy, uint32_t max_n,
                      uint32_t owner, double now_ms, double timeout_ms) {
    int best = -1;
    for (int i = 0; i < n_blocks; i++) {
        const ps_sched_block_t *b = &blocks[i];
        if (max_n > 0 && (uint32_t)b->n > max_n) continue;
        if (s_failed_by(b, owner)) continue;
        if (!ps_sched_wanted(b, policy) || !ps_sched_available(b, now_ms, timeout_ms)) continue;
        if (best < 0 || ps_sched_compare(b, i, &blocks[best], best) < 0) best = i;
    }
    return best;
}

void ps_sched_assign(ps_sched_block_t *b, uint64_t id, long version, uint32_t owner, double now_ms) {
    ps_sched_job_t j = {.id = id, .version = version, .owner = owner, .start_ms = now_ms, .damping = -1.0f};
    b->cur = j;
    b->recent[b->recent_next] = j;
    b->recent_next = (b->recent_next + 1) % PS_SCHED_RECENT;
    b->due = 0;
}

int ps_sched_result(ps_sched_block_t *b, uint64_t id, uint32_t owner, long *version, float *damping) {
    if (id == 0) return -ENOENT;
    for (int i = 0; i < PS_SCHED_RECENT; i++) {
        if (b->recent[i].id != id) continue;
        if (b->recent[i].owner != owner) return -EPERM; /* not this daemon's job: kept for its owner */
        *version = b->recent[i].version;
        if (damping) *damping = b->recent[i].damping;
        b->recent[i].id = 0;
        if (b->cur.id == id) {
            memset(&b->cur, 0, sizeof b->cur);
            return 1;
        }
        return 0;
    }
    return -ENOENT;
}

void ps_sched_installed(ps_sched_block_t *b, long version) {
    if (version > b->inv_version) b->inv_version = version;
}

void ps_sched_failed(ps_sched_block_t *b, long version) {
    if (version > b->failed_version) b->failed_version = version;
}

int ps_sched_failed_by(ps_sched_block_t *b, long version, uint32_t owner, int n_daemons) {
    if (version != b->fail_try_version) {
        b->fail_try_version = version;
        b->n_fail_owners = 0;
    }
    int known = 0;
    for (int k = 0; k < b->n_fail_owners; k++) known |= b->fail_owners[k] == owner;
    if (!known && b->n_fail_owners < PS_SCHED_FAIL_QUORUM) b->fail_owners[b->n_fail_owners++] = owner;
    /* the same daemon twice, or as many as there are, or the quorum: the block fails */
    if (known || b->n_fail_owners >= PS_SCHED_FAIL_QUORUM || b->n_fail_owners >= n_daemons) {
        ps_sched_failed(b, version);
        return 1;
    }
    return 0;
}

int ps_sched_disproved(ps_sched_block_t *b, long version, uint32_t *out, int cap) {
    if (b->n_fail_owners == 0 || b->fail_try_version < 0 || version < b->fail_try_version) return 0;
    int n = 0;
    for (int k = 0; k < b->n_fail_owners && n < cap; k++) out[n++] = b->fail_owners[k];
    b->n_fail_owners = 0;
    b->fail_try_version = -1;
    return n;
}

void ps_sched_folded(ps_sched_block_t *b, long version) {
    if (version > b->factor_version) b->factor_version = version;
}

int ps_sched_owner_gone(ps_sched_block_t *blocks, int n_blocks, uint32_t owner) {
    int n = 0;
    for (int i = 0; i < n_blocks; i++) {
        if (blocks[i].cur.id != 0 && blocks[i].cur.owner == owner) {
            memset(&blocks[i].cur, 0, sizeof blocks[i].cur);
            n++;
        }
    }
    return n;
}

int ps_sched_owner_block(const ps_sched_block_t *blocks, int n_blocks, uint32_t owner) {
    for (int i = 0; i < n_blocks; i++)
        if (blocks[i].cur.id != 0 && blocks[i].cur.owner == owner) return i;
    return -1;
}

int ps_sched_in_flight(const ps_sched_block_t *blocks, int n_blocks) {
    int n = 0;
    for (int i = 0; i < n_blocks; i++) n += blocks[i].cur.id != 0;
    return n;
}

void ps_sched_mark_every(ps_sched_block_t *blocks, int n_blocks, long t, int every) {
    if (every < 1 || t % every != 0) return;
    for (int i = 0; i < n_blocks; i++)
        if (blocks[i].factor_version > blocks[i].inv_version) blocks[i].due = 1;
}

/* Would block b hold up step t under bound k >= 0? */
static int s_blocks_step(const ps_sched_block_t *b, long t, int k) {
    return b->inv_version < 0 || t - b->inv_version > (long)k;
}

void ps_sched_mark_bound(ps_sched_block_t *blocks, int n_blocks, long t, int k, double now_ms, double timeout_ms) {
    if (k < 0) return;
    for (int i = 0; i < n_blocks; i++) {
        ps_sched_block_t *b = &blocks[i];
        if (!s_blocks_step(b, t, k)) {
            b->failed_seen_ms = 0.0;
            continue;
        }
        /* Failed at its newest statistics while a step waits on it: with
         * asynchronous statistics none come until a step is taken, so the
         * failure would hold the run for good (an honest daemon's, or one
         * a single daemon got in alone). After timeout_ms it is tried
         * again, by every daemon. */
        if (b->factor_version >= 0 && b->factor_version <= b->failed_version) {
            if (b->failed_seen_ms <= 0.0) b->failed_seen_ms = now_ms > 0.0 ? now_ms : 1e-9;
            if (now_ms - b->failed_seen_ms < timeout_ms) continue;
            b->failed_version = b->factor_version - 1;
            b->n_fail_owners = 0;
            b->fail_try_version = -1;
        }
        b->failed_seen_ms = 0.0;
        /* A job in flight whose inverse will satisfy the bound is enough:
         * asking for another would make the number of jobs, and so the
         * inverses the next steps use, depend on timing. */
        if (b->cur.id != 0 && t - b->cur.version <= (long)k && !ps_sched_overdue(b, now_ms, timeout_ms)) continue;
        /* so is a result being checked on the curvature thread */
        if (b->checking_version >= 0 && t - b->checking_version <= (long)k) continue;
        b->due = 1;
    }
}

int ps_sched_bound_ok(const ps_sched_block_t *blocks, int n_blocks, long t, int k, int *n_blocking) {
    int n = 0;
    if (k >= 0)
        for (int i = 0; i < n_blocks; i++) n += s_blocks_step(&blocks[i], t, k);
    if (n_blocking) *n_blocking = n;
    return n == 0;
}

void ps_sched_ages(const ps_sched_block_t *blocks, int n_blocks, long t, double *inv_mean, long *inv_max,
                   double *stats_mean) {
    double si = 0.0, ss = 0.0;
    long mx = -1;
    int ni = 0, ns = 0;
    for (int i = 0; i < n_blocks; i++) {
        const ps_sched_block_t *b = &blocks[i];
        if (b->inv_version >= 0) {
            long age = t - b->inv_version;
            si += (double)age;
            if (age > mx) mx = age;
            ni++;
        }
        if (b->factor_version >= 0) {
            ss += (double)(t - b->factor_version);
            ns++;
        }
    }
    if (inv_mean) *inv_mean = ni ? si / ni : 0.0;
    if (inv_max) *inv_max = mx;
    if (stats_mean) *stats_mean = ns ? ss / ns : 0.0;
}

const char *ps_sched_policy_name(ps_sched_policy_t p) {
    switch (p) {
    case PS_SCHED_CONTINUOUS: return "continuous";
    case PS_SCHED_EVERY: return "every";
    case PS_SCHED_ADAPTIVE: return "adaptive";
    }
    return "?";
}

int ps_sched_pick_waiter(const ps_sched_waiter_t *waiters, int n_waiters, const ps_sched_block_t *blocks,
                         int n_blocks, ps_sched_policy_t policy, double now_ms, double timeout_ms, int *block) {
    int best = -1, best_b = -1;
    for (int i = 0; i < n_waiters; i++) {
        if (best >= 0 && waiters[i].wait_seq >= waiters[best].wait_seq) continue;
        int b = ps_sched_pick_for(blocks, n_blocks, policy, waiters[i].max_n, waiters[i].owner, now_ms, timeout_ms);
        if (b < 0) continue;
        best = i;
        best_b = b;
    }
    if (block) *block = best_b;
    return best;
}

ps_sched_result_t ps_sched_judge(int match, long job_version, uint64_t job_id, uint64_t result_version, int failed,
                                 int cholesky, double result_damping, float job_damping, int max_escalations,
                                 float *damping, char *why, size_t why_len) {
    char dummy[8];
    if (!why) {
        why = dummy;
        why_len = sizeof dummy;
    }
    if (why_len) why[0] = '\0';
    *damping = job_damping;
    if (match == -EPERM) {
        snprintf(why, why_len, "job %" PRIu64 " was handed to another inverse daemon", job_id);
        return PS_RESULT_FOREIGN;
    }
    if (match < 0) return PS_RESULT_UNKNOWN;
    if ((long)result_version != job_version) {
        snprintf(why, why_len, "job %" PRIu64 " was cut from factor version %ld, the result says %" PRIu64, job_id,
                 job_version, result_version);
        return PS_RESULT_WRONG_VERSION;
    }
    if (failed) return PS_RESULT_FAILED;
    if (job_damping < 0.0f) {
        snprintf(why, why_len, "no probe is kept for job %" PRIu64, job_id);
        return PS_RESULT_NO_PROBE;
    }
    if (cholesky) {
        /* a Cholesky result may say it added damping (the daemon's escalations, at most
         * 10^max_escalations times the job's), never less */
        const double d_max = (double)job_damping * pow(10.0, max_escalations) * (1.0 + 1e-5);
        *damping = (float)result_damping;
        if (!(isfinite(result_damping) && result_damping >= (double)job_damping * (1.0 - 1e-5) &&
              result_damping <= d_max)) {
            snprintf(why, why_len, "damping %g: the job asked for %g (at most %g after escalations)", result_damping,
                     (double)job_damping, d_max);
            return PS_RESULT_BAD_DAMPING;
        }
    }
    return PS_RESULT_CHECK;
}

/* ---- the server's scheduling state --------------------------------------- */

struct ps_sched {
    int n_blocks;
    ps_sched_block_t *blocks;      /* (n_blocks), mirrors kfac->blocks; NULL under sgd */
    ps_sched_policy_t policy;      /* [kfac] refresh */
    kfac_schedule_t schedule;      /* statistics / inverse intervals and damping by step (Pauloski sec. V-C) */
    int stats_every, inverse_every; /* [kfac]'s, what kfac_schedule_at starts from */
    double damping;                /* [kfac] damping, likewise */
    int fac_interval, inv_interval; /* the intervals in force (0: none yet) */
    ps_refresh_t *refresh;         /* adaptive policy under kfac only (ps/refresh.h) */
};

ps_sched_t *ps_sched_new(const runcfg_t *c, const kfac_opt_t *kfac, int *rc, char *err, size_t err_len) {
    int r = -ENOMEM;
    ps_sched_t *sc = calloc(1, sizeof *sc);
    if (!sc) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    sc->policy = c->refresh == RUNCFG_REFRESH_EVERY      ? PS_SCHED_EVERY
                 : c->refresh == RUNCFG_REFRESH_ADAPTIVE ? PS_SCHED_ADAPTIVE
                                                         : PS_SCHED_CONTINUOUS;
    sc->stats_every = c->stats_every;
    sc->inverse_every = c->inverse_every;
    sc->damping = c->damping;
    if (runcfg_kfac_schedule(c, &sc->schedule, err, err_len) < 0) {
        r = -EINVAL;
        goto fail;
    }
    if (kfac) {
        sc->n_blocks = kfac->n_blocks;
        sc->blocks = calloc(sc->n_blocks ? (size_t)sc->n_blocks : 1, sizeof *sc->blocks);
        if (!sc->blocks) {
            snprintf(err, err_len, "out of memory");
            goto fail;
        }
        for (int b = 0; b < sc->n_blocks; b++) ps_sched_block_init(&sc->blocks[b], kfac->blocks[b].n);
        if (sc->policy == PS_SCHED_ADAPTIVE && !(sc->refresh = ps_refresh_new(kfac, c->refresh_alpha, 0))) {
            snprintf(err, err_len, "adaptive refresh needs [kfac] refresh_alpha > 0 (it is %g), or out of memory",
                     c->refresh_alpha);
            r = -EINVAL;
            goto fail;
        }
    }
    if (rc) *rc = 0;
    return sc;
fail:
    if (rc) *rc = r;
    ps_sched_free(&sc);
    return NULL;
}

void ps_sched_free(ps_sched_t **sc_p) {
    if (!sc_p || !*sc_p) return;
    ps_sched_t *sc = *sc_p;
    *sc_p = NULL;
    ps_refresh_free(&sc->refresh);
    free(sc->blocks);
    free(sc);
}

int ps_sched_at(ps_sched_t *sc, long t, double *damping) {
    int fi = sc->stats_every, ii = sc->inverse_every;
    double d = sc->damping;
    if (kfac_schedule_at(&sc->schedule, t, &fi, &ii, &d) < 0) return -EINVAL;
    int changed = sc->fac_interval && (fi != sc->fac_interval || ii != sc->inv_interval);
    sc->fac_interval = fi;
    sc->inv_interval = ii;
    if (damping) *damping = d;
    return changed;
}

int ps_sched_fac_interval(const ps_sched_t *sc) { return sc->fac_interval; }
int ps_sched_inv_interval(const ps_sched_t *sc) { return sc->inv_interval; }
ps_sched_policy_t ps_sched_policy(const ps_sched_t *sc) { return sc->policy; }
ps_sched_block_t *ps_sched_blocks(ps_sched_t *sc) { return sc->blocks; }
int ps_sched_n_blocks(const ps_sched_t *sc) { return sc->n_blocks; }
ps_refresh_t *ps_sched_refresh(ps_sched_t *sc) { return sc->refresh; }
