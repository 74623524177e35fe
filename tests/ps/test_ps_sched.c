/* tests/ps/test_ps_sched.c — the parameter server's inversion-job scheduler
 * (ps/sched.c): stalest-first order, the cost tie-break, no double
 * assignment, overdue reassignment, re-queueing when a daemon vanishes, late
 * results, the refresh-policy marks and the staleness-bound predicate;
 * then the server's scheduling state (ps_sched_t): the blocks it mirrors,
 * the refresh state it holds, the intervals and damping by step.
 *
 * The scheduler is pure (no sockets, no clock), so the tests drive it with
 * fresh random block arrays and compare against brute-force oracles written
 * independently of it (lexicographic keys, explicit per-block loops). The
 * seed is printed on failure; KFAC_TEST_SEED=<n> replays a run. Every
 * comparison is exact (integers and exactly representable doubles).
 *
 * Linked with the PS's own objects (ps/module.mk, PS_UNIT_OBJ).
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/base/rng.h"
#include "common/run/runcfg.h"
#include "ps/model.h"
#include "ps/refresh.h"
#include "ps/sched.h"
#include "tests/lib/ps_cfg.h"
#include "tests/lib/seed.h"

#define SEEDED()              \
    uint64_t seed = test_seed(); \
    rng_t rng;                \
    rng_seed(&rng, seed)

#define SEEDMSG (unsigned long long)seed

#define MAXB 24

/* A random block: dimension from a small set (so cost ties happen), random
 * versions (some without statistics or inverse), sometimes a job in flight
 * started at a random time, sometimes due, sometimes a failed version. */
static void s_random_block(rng_t *r, ps_sched_block_t *b, uint64_t *next_id) {
    static const int dims[] = {3, 8, 8, 17, 64, 64, 129};
    ps_sched_block_init(b, dims[rng_below(r, 7)]);
    if (rng_below(r, 8) != 0) {
        b->factor_version = (long)rng_below(r, 40);
        if (rng_below(r, 3) != 0) b->inv_version = (long)rng_below(r, (uint32_t)b->factor_version + 1);
        if (rng_below(r, 6) == 0) b->failed_version = (long)rng_below(r, (uint32_t)b->factor_version + 1);
    }
    b->due = rng_below(r, 2);
    if (rng_below(r, 3) == 0) {
        long v = b->factor_version >= 0 ? b->factor_version : 0;
        ps_sched_assign(b, (*next_id)++, v, 1 + rng_below(r, 4), (double)rng_below(r, 1000));
        b->due = rng_below(r, 2); /* assign clears it; keep the random mark */
    }
}

/* Oracle eligibility, from the raw fields. */
static int s_oracle_eligible(const ps_sched_block_t *b, ps_sched_policy_t pol, uint32_t max_n, double now,
                             double timeout) {
    if (max_n > 0 && b->n > (int)max_n) return 0;
    if (b->factor_version < 0) return 0;
    if (!(b->factor_version > b->inv_version)) return 0;
    if (!(b->factor_version > b->failed_version)) return 0;
    int policy_ok = pol == PS_SCHED_CONTINUOUS || b->inv_version == -1 || b->due;
    if (!policy_ok) return 0;
    int free_now = b->cur.id == 0 || (now - b->cur.start_ms) > timeout;
    return free_now;
}

/* Oracle choice: lexicographic maximum of (has no inverse, age, n, -index). */
static int s_oracle_pick(const ps_sched_block_t *bl, int nb, ps_sched_policy_t pol, uint32_t max_n, double now,
                         double timeout) {
    int best = -1;
    long bk[4] = {0, 0, 0, 0};
    for (int i = 0; i < nb; i++) {
        if (!s_oracle_eligible(&bl[i], pol, max_n, now, timeout)) continue;
        long k[4] = {bl[i].inv_version < 0, bl[i].inv_version < 0 ? 0 : bl[i].factor_version - bl[i].inv_version,
                     bl[i].n, -i};
        int better = best < 0;
        for (int j = 0; j < 4 && !better; j++) {
            if (k[j] > bk[j]) { better = 1; break; }
            if (k[j] < bk[j]) break;
        }
        if (better) { best = i; memcpy(bk, k, sizeof k); }
    }
    return best;
}

START_TEST(test_sched_pick_stalest_first_matches_oracle) {
    SEEDED();
    uint64_t next_id = 1;
    for (int trial = 0; trial < 3000; trial++) {
        ps_sched_block_t bl[MAXB];
        int nb = 1 + (int)rng_below(&rng, MAXB);
        for (int i = 0; i < nb; i++) s_random_block(&rng, &bl[i], &next_id);
        ps_sched_policy_t pol = (ps_sched_policy_t)rng_below(&rng, 3);
        uint32_t max_n = rng_below(&rng, 3) == 0 ? 1 + rng_below(&rng, 130) : 0;
        double now = (double)rng_below(&rng, 2000), timeout = (double)(1 + rng_below(&rng, 1500));
        int want = s_oracle_pick(bl, nb, pol, max_n, now, timeout);
        int got = ps_sched_pick(bl, nb, pol, max_n, now, timeout);
        ck_assert_msg(got == want, "trial %d: picked %d, oracle %d (policy %s, max_n %u), seed %llu", trial, got,
                      want, ps_sched_policy_name(pol), max_n, SEEDMSG);
    }
}
END_TEST

START_TEST(test_sched_pick_missing_inverse_before_any_age) {
    ps_sched_block_t bl[3];
    ps_sched_block_init(&bl[0], 100);
    bl[0].factor_version = 1000;
    bl[0].inv_version = 0; /* age 1000 */
    ps_sched_block_init(&bl[1], 2);
    bl[1].factor_version = 5; /* stats, no inverse */
    ps_sched_block_init(&bl[2], 500); /* no stats: never picked */
    ck_assert_int_eq(ps_sched_pick(bl, 3, PS_SCHED_CONTINUOUS, 0, 0, 100), 1);
    ps_sched_assign(&bl[1], 1, 5, 9, 0);
    ck_assert_int_eq(ps_sched_pick(bl, 3, PS_SCHED_CONTINUOUS, 0, 0, 100), 0);
    ps_sched_assign(&bl[0], 2, 1000, 9, 0);
    ck_assert_int_eq(ps_sched_pick(bl, 3, PS_SCHED_CONTINUOUS, 0, 0, 100), -1);
}
END_TEST

START_TEST(test_sched_pick_cost_tiebreak_spreads_big_blocks) {
    SEEDED();
    /* Equal ages, random distinct sizes: successive requests from different
     * daemons receive the blocks in decreasing size. */
    ps_sched_block_t bl[MAXB];
    int nb = 2 + (int)rng_below(&rng, MAXB - 1);
    long age = 1 + rng_below(&rng, 10);
    int used[600] = {0};
    for (int i = 0; i < nb; i++) {
        int n;
        do n = 1 + (int)rng_below(&rng, 512); while (used[n]);
        used[n] = 1;
        ps_sched_block_init(&bl[i], n);
        bl[i].inv_version = 10;
        bl[i].factor_version = 10 + age;
    }
    int prev_n = INT_MAX;
    for (int k = 0; k < nb; k++) {
        int p = ps_sched_pick(bl, nb, PS_SCHED_CONTINUOUS, 0, 0.0, 1e9);
        ck_assert_msg(p >= 0, "request %d got nothing, seed %llu", k, SEEDMSG);
        ck_assert_msg(bl[p].n < prev_n, "request %d got n=%d after n=%d, seed %llu", k, bl[p].n, prev_n, SEEDMSG);
        prev_n = bl[p].n;
        ps_sched_assign(&bl[p], (uint64_t)k + 1, bl[p].factor_version, (uint32_t)k + 1, 0.0);
    }
    ck_assert_int_eq(ps_sched_pick(bl, nb, PS_SCHED_CONTINUOUS, 0, 0.0, 1e9), -1);
    /* Equal ages and equal sizes: lower index first. */
    ps_sched_block_t eq[2];
    for (int i = 0; i < 2; i++) {
        ps_sched_block_init(&eq[i], 7);
        eq[i].factor_version = 3;
    }
    ck_assert_int_eq(ps_sched_pick(eq, 2, PS_SCHED_CONTINUOUS, 0, 0.0, 1.0), 0);
    ck_assert_int_eq(ps_sched_compare(&eq[1], 1, &eq[0], 0), 1);
    ck_assert_int_eq(ps_sched_compare(&eq[0], 0, &eq[0], 0), 0);
}
END_TEST

START_TEST(test_sched_pick_respects_max_n) {
    ps_sched_block_t bl[2];
    ps_sched_block_init(&bl[0], 1000);
    bl[0].factor_version = 4;
    ps_sched_block_init(&bl[1], 10);
    bl[1].factor_version = 4;
    ck_assert_int_eq(ps_sched_pick(bl, 2, PS_SCHED_CONTINUOUS, 0, 0, 1), 0);
    ck_assert_int_eq(ps_sched_pick(bl, 2, PS_SCHED_CONTINUOUS, 999, 0, 1), 1);
    ck_assert_int_eq(ps_sched_pick(bl, 2, PS_SCHED_CONTINUOUS, 1000, 0, 1), 0);
    ck_assert_int_eq(ps_sched_pick(bl, 2, PS_SCHED_CONTINUOUS, 9, 0, 1), -1);
}
END_TEST

/* Random event simulation: daemons ask for jobs, answer some, vanish, time
 * moves on. Invariant checked from the test's own bookkeeping: no block is
 * ever held by two daemons whose jobs are both younger than the timeout. */
START_TEST(test_sched_no_double_assignment) {
    SEEDED();
    enum { ND = 5 };
    ps_sched_block_t bl[MAXB];
    int nb = 1 + (int)rng_below(&rng, MAXB);
    for (int i = 0; i < nb; i++) {
        ps_sched_block_init(&bl[i], 1 + (int)rng_below(&rng, 200));
        bl[i].factor_version = (long)rng_below(&rng, 3);
    }
    const double timeout = 100.0;
    int held[ND + 1];        /* daemon -> block index, -1 none */
    double start[ND + 1];
    uint64_t job[ND + 1];
    for (int d = 0; d <= ND; d++) held[d] = -1;
    uint64_t next_id = 1;
    double now = 0.0;
    long version = 3;
    for (int ev = 0; ev < 20000; ev++) {
        now += (double)rng_below(&rng, 20);
        uint32_t d = 1 + rng_below(&rng, ND);
        switch (rng_below(&rng, 5)) {
        case 0: /* new statistics on a random block */
            ps_sched_folded(&bl[rng_below(&rng, (uint32_t)nb)], ++version);
            break;
        case 1: { /* request */
            if (held[d] >= 0) break;
            int p = ps_sched_pick(bl, nb, PS_SCHED_CONTINUOUS, 0, now, timeout);
            if (p < 0) break;
            for (uint32_t o = 1; o <= ND; o++)
                ck_assert_msg(!(held[o] == p && now - start[o] <= timeout),
                              "event %d: block %d handed to daemon %u while daemon %u holds it for %.0f ms, "
                              "seed %llu",
                              ev, p, d, o, now - start[o], SEEDMSG);
            ps_sched_assign(&bl[p], next_id, bl[p].factor_version, d, now);
            held[d] = p;
            start[d] = now;
            job[d] = next_id++;
            break;
        }
        case 2: { /* result */
            if (held[d] < 0) break;
            long v;
            int rc = ps_sched_result(&bl[held[d]], job[d], (uint32_t)d, &v, NULL);
            ck_assert_msg(rc == 0 || rc == 1 || rc == -ENOENT, "rc %d, seed %llu", rc, SEEDMSG);
            if (rc >= 0) ps_sched_installed(&bl[held[d]], v);
            held[d] = -1;
            break;
        }
        case 3: /* vanish */
            if (held[d] < 0) break;
            ps_sched_owner_gone(bl, nb, d);
            held[d] = -1;
            break;
        default: /* idle */
            break;
        }
        ck_assert_int_le(ps_sched_in_flight(bl, nb), ND);
    }
}
END_TEST

START_TEST(test_sched_overdue_job_is_reassigned) {
    SEEDED();
    double timeout = 10.0 + rng_below(&rng, 1000);
    ps_sched_block_t b;
    ps_sched_block_init(&b, 50);
    b.factor_version = 7;
    ck_assert_int_eq(ps_sched_pick(&b, 1, PS_SCHED_CONTINUOUS, 0, 0.0, timeout), 0);
    ps_sched_assign(&b, 11, 7, 1, 0.0);
    /* Not before the timeout, also not at exactly the timeout. */
    ck_assert_int_eq(ps_sched_pick(&b, 1, PS_SCHED_CONTINUOUS, 0, timeout, timeout), -1);
    ck_assert(!ps_sched_overdue(&b, timeout, timeout));
    ck_assert(ps_sched_overdue(&b, timeout + 1.0, timeout));
    ck_assert_int_eq(ps_sched_pick(&b, 1, PS_SCHED_CONTINUOUS, 0, timeout + 1.0, timeout), 0);
    b.factor_version = 8; /* newer statistics meanwhile */
    ps_sched_assign(&b, 12, 8, 2, timeout + 1.0);
    ps_sched_recut(&b, 12, 9, 0.25f); /* its cut found version 9, damping 0.25 */
    ck_assert_int_eq(ps_sched_pick(&b, 1, PS_SCHED_CONTINUOUS, 0, timeout + 2.0, timeout), -1);
    /* The first daemon's late result is still known (0), with its version. */
    long v = -5;
    float d = 0.0f;
    ck_assert_int_eq(ps_sched_result(&b, 11, 2, &v, NULL), -EPERM); /* daemon 2 cannot answer daemon 1's job */
    ck_assert_int_eq(ps_sched_result(&b, 12, 1, &v, NULL), -EPERM); /* nor daemon 1 daemon 2's */
    ck_assert_int_eq(v, -5);
    ck_assert_int_eq(ps_sched_result(&b, 11, 1, &v, &d), 0);
    ck_assert_int_eq(v, 7);
    ck_assert(d == -1.0f); /* never recut here: no damping known */
    ps_sched_installed(&b, v);
    ck_assert_int_eq(b.inv_version, 7);
    ck_assert_uint_eq(b.cur.id, 12); /* the reassigned job is still current */
    ck_assert_int_eq(ps_sched_result(&b, 11, 1, &v, NULL), -ENOENT); /* answered once only */
    ck_assert_int_eq(ps_sched_result(&b, 12, 2, &v, &d), 1);
    ck_assert_int_eq(v, 9);
    ck_assert(d == 0.25f);
    ck_assert_uint_eq(b.cur.id, 0);
    ps_sched_installed(&b, v);
    ps_sched_installed(&b, 7); /* an older install never moves it back */
    ck_assert_int_eq(b.inv_version, 9);
    ck_assert_int_eq(ps_sched_result(&b, 999, 1, &v, NULL), -ENOENT);
    ck_assert_int_eq(ps_sched_result(&b, 0, 1, &v, NULL), -ENOENT);
}
END_TEST

START_TEST(test_sched_vanished_daemon_requeues_its_job) {
    SEEDED();
    ps_sched_block_t bl[MAXB];
    int nb = 2 + (int)rng_below(&rng, MAXB - 1);
    for (int i = 0; i < nb; i++) {
        ps_sched_block_init(&bl[i], 1 + (int)rng_below(&rng, 100));
        bl[i].factor_version = 1 + rng_below(&rng, 5);
    }
    /* Daemons 1..nb each take one block; then a random subset vanishes. */
    uint32_t owner_of[MAXB];
    for (int k = 0; k < nb; k++) {
        int p = ps_sched_pick(bl, nb, PS_SCHED_CONTINUOUS, 0, 0.0, 1e9);
        ck_assert_int_ge(p, 0);
        ps_sched_assign(&bl[p], 100 + (uint64_t)k, bl[p].factor_version, (uint32_t)k + 1, 0.0);
        owner_of[p] = (uint32_t)k + 1;
        ck_assert_int_eq(ps_sched_owner_block(bl, nb, (uint32_t)k + 1), p);
    }
    ck_assert_int_eq(ps_sched_pick(bl, nb, PS_SCHED_CONTINUOUS, 0, 0.0, 1e9), -1);
    int gone[MAXB + 1] = {0}, n_gone = 0;
    for (uint32_t d = 1; d <= (uint32_t)nb; d++)
        if (rng_below(&rng, 2)) {
            ck_assert_int_eq(ps_sched_owner_gone(bl, nb, d), 1);
            gone[d] = 1;
            n_gone++;
        }
    ck_assert_int_eq(ps_sched_owner_gone(bl, nb, 9999), 0);
    ck_assert_int_eq(ps_sched_in_flight(bl, nb), nb - n_gone);
    /* Exactly the vanished daemons' blocks come back, each once. */
    int seen = 0;
    for (;;) {
        int p = ps_sched_pick(bl, nb, PS_SCHED_CONTINUOUS, 0, 0.0, 1e9);
        if (p < 0) break;
        ck_assert_msg(gone[owner_of[p]], "block %d of a live daemon handed out again, seed %llu", p, SEEDMSG);
        ps_sched_assign(&bl[p], 1000 + (uint64_t)seen, bl[p].factor_version, 500, 0.0);
        seen++;
    }
    ck_assert_int_eq(seen, n_gone);
    ck_assert_int_eq(ps_sched_owner_block(bl, nb, 12345), -1);
}
END_TEST

START_TEST(test_sched_failed_job_not_retried_until_new_stats) {
    ps_sched_block_t b;
    ps_sched_block_init(&b, 9);
    b.factor_version = 4;
    ps_sched_assign(&b, 1, 4, 1, 0.0);
    long v;
    ck_assert_int_eq(ps_sched_result(&b, 1, 1, &v, NULL), 1);
    ps_sched_failed(&b, v);
    ck_assert(!ps_sched_wanted(&b, PS_SCHED_CONTINUOUS));
    ck_assert_int_eq(ps_sched_pick(&b, 1, PS_SCHED_CONTINUOUS, 0, 0.0, 1.0), -1);
    ps_sched_folded(&b, 5);
    ck_assert(ps_sched_wanted(&b, PS_SCHED_CONTINUOUS));
    ps_sched_folded(&b, 3); /* older statistics never move the version back */
    ck_assert_int_eq(b.factor_version, 5);
}
END_TEST

START_TEST(test_sched_policies_want_only_when_due) {
    ps_sched_block_t bl[3];
    for (int i = 0; i < 3; i++) ps_sched_block_init(&bl[i], 4);
    bl[0].factor_version = 10; /* no inverse: always wanted */
    bl[1].factor_version = 10;
    bl[1].inv_version = 5;
    bl[2].factor_version = 10;
    bl[2].inv_version = 10; /* up to date: never wanted */
    for (int pol = 0; pol < 3; pol++) {
        ck_assert(ps_sched_wanted(&bl[0], (ps_sched_policy_t)pol));
        ck_assert(!ps_sched_wanted(&bl[2], (ps_sched_policy_t)pol));
    }
    ck_assert(ps_sched_wanted(&bl[1], PS_SCHED_CONTINUOUS));
    ck_assert(!ps_sched_wanted(&bl[1], PS_SCHED_EVERY));
    ck_assert(!ps_sched_wanted(&bl[1], PS_SCHED_ADAPTIVE));
    ps_sched_mark_every(bl, 3, 21, 20); /* not a multiple: nothing */
    ck_assert(!bl[1].due);
    ps_sched_mark_every(bl, 3, 40, 20);
    ck_assert(bl[1].due && !bl[2].due);
    ck_assert(ps_sched_wanted(&bl[1], PS_SCHED_EVERY));
    ps_sched_assign(&bl[1], 1, 10, 1, 0.0);
    ck_assert(!bl[1].due); /* handed out: the mark is spent */
    /* The bound marks blocks that would hold up the step. */
    bl[1].cur.id = 0;
    ps_sched_mark_bound(bl, 3, 12, 3, 0.0, 1000.0); /* ages 12-5=7 > 3, 12-10=2 <= 3 */
    ck_assert(bl[1].due && !bl[2].due && bl[0].due);
    bl[1].due = 0;
    ps_sched_mark_bound(bl, 3, 12, -1, 0.0, 1000.0);
    ck_assert(!bl[1].due);
    /* A job in flight that will satisfy the bound is enough (no second
     * job, so the schedule does not depend on when results arrive); one
     * cut from too old a version, or overdue, is not. */
    ps_sched_assign(&bl[1], 2, 10, 1, 0.0);
    ps_sched_mark_bound(bl, 3, 13, 3, 500.0, 1000.0); /* 13-10=3 <= 3, in flight 500 ms */
    ck_assert(!bl[1].due);
    ps_sched_mark_bound(bl, 3, 13, 3, 1500.0, 1000.0); /* overdue */
    ck_assert(bl[1].due);
    bl[1].due = 0;
    ps_sched_mark_bound(bl, 3, 15, 3, 500.0, 1000.0); /* 15-10=5 > 3: that job will not do */
    ck_assert(bl[1].due);
    /* A block failed at its newest statistics while it holds the step: no
     * statistics come while the step waits, so after timeout_ms it is
     * wanted again (and not before). */
    memset(&bl[1].cur, 0, sizeof bl[1].cur);
    bl[1].due = 0;
    ps_sched_failed(&bl[1], bl[1].factor_version);
    ck_assert(!ps_sched_wanted(&bl[1], PS_SCHED_CONTINUOUS));
    ps_sched_mark_bound(bl, 3, 15, 3, 2000.0, 1000.0); /* first seen failed */
    ck_assert(!ps_sched_wanted(&bl[1], PS_SCHED_CONTINUOUS));
    ps_sched_mark_bound(bl, 3, 15, 3, 2900.0, 1000.0); /* 900 ms: still failed */
    ck_assert(!ps_sched_wanted(&bl[1], PS_SCHED_CONTINUOUS));
    ps_sched_mark_bound(bl, 3, 15, 3, 3100.0, 1000.0); /* 1100 ms: tried again */
    ck_assert(ps_sched_wanted(&bl[1], PS_SCHED_CONTINUOUS) && bl[1].due);
}
END_TEST

START_TEST(test_sched_bound_predicate_matches_oracle) {
    SEEDED();
    for (int trial = 0; trial < 3000; trial++) {
        ps_sched_block_t bl[MAXB];
        int nb = 1 + (int)rng_below(&rng, MAXB);
        long t = 20 + rng_below(&rng, 20);
        for (int i = 0; i < nb; i++) {
            ps_sched_block_init(&bl[i], 5);
            if (rng_below(&rng, 10) != 0) {
                bl[i].factor_version = t - (long)rng_below(&rng, 8);
                bl[i].inv_version = bl[i].factor_version - (long)rng_below(&rng, 8);
                if (rng_below(&rng, 10) == 0) bl[i].inv_version = -1;
            }
        }
        int k = (int)rng_below(&rng, 12) - 1;
        /* Oracle: the oldest inverse, or "missing". */
        long oldest = -1;
        int missing = 0, blocking = 0;
        for (int i = 0; i < nb; i++) {
            if (bl[i].inv_version < 0) { missing = 1; blocking++; continue; }
            long age = t - bl[i].inv_version;
            if (age > oldest) oldest = age;
            if (k >= 0 && age > k) blocking++;
        }
        if (k < 0) blocking = 0;
        int want = k < 0 || (!missing && oldest <= k);
        int nbk = -1;
        int got = ps_sched_bound_ok(bl, nb, t, k, &nbk);
        ck_assert_msg(got == want, "trial %d: k=%d t=%ld got %d want %d, seed %llu", trial, k, t, got, want,
                      SEEDMSG);
        ck_assert_msg(nbk == blocking, "trial %d: %d blocking, oracle %d, seed %llu", trial, nbk, blocking, SEEDMSG);
    }
    /* k = 0: only inverses of exactly version t pass. */
    ps_sched_block_t b;
    ps_sched_block_init(&b, 3);
    b.factor_version = b.inv_version = 9;
    ck_assert(ps_sched_bound_ok(&b, 1, 9, 0, NULL));
    ck_assert(!ps_sched_bound_ok(&b, 1, 10, 0, NULL));
    ck_assert(ps_sched_bound_ok(&b, 1, 10, 1, NULL));
    ck_assert(ps_sched_bound_ok(NULL, 0, 10, 0, NULL)); /* no blocks (sgd-like model): nothing to wait for */
}
END_TEST

START_TEST(test_sched_ages_match_oracle) {
    SEEDED();
    ps_sched_block_t bl[MAXB];
    int nb = 1 + (int)rng_below(&rng, MAXB);
    long t = 100;
    double si = 0, ss = 0;
    long mx = -1;
    int ni = 0, ns = 0;
    for (int i = 0; i < nb; i++) {
        ps_sched_block_init(&bl[i], 2);
        if (rng_below(&rng, 4)) {
            bl[i].factor_version = t - (long)rng_below(&rng, 30);
            ss += (double)(t - bl[i].factor_version);
            ns++;
            if (rng_below(&rng, 4)) {
                bl[i].inv_version = bl[i].factor_version - (long)rng_below(&rng, 30);
                long a = t - bl[i].inv_version;
                si += (double)a;
                ni++;
                if (a > mx) mx = a;
            }
        }
    }
    double im = -1, sm = -1;
    long imx = -2;
    ps_sched_ages(bl, nb, t, &im, &imx, &sm);
    ck_assert_msg(im == (ni ? si / ni : 0.0), "inv mean %g, seed %llu", im, SEEDMSG);
    ck_assert_msg(imx == mx, "inv max %ld want %ld, seed %llu", imx, mx, SEEDMSG);
    ck_assert_msg(sm == (ns ? ss / ns : 0.0), "stats mean %g, seed %llu", sm, SEEDMSG);
    ps_sched_ages(bl, nb, t, NULL, NULL, NULL);
}
END_TEST

/* ---- ps_sched_t ---------------------------------------------------------- */

static void s_cfg(runcfg_t *c, const char *kind, char *path, size_t path_len, char **extra, int n_extra) {
    test_ps_cfg(c, "test_ps_sched", kind, path, path_len, extra, n_extra);
}

START_TEST(test_sched_state_intervals_follow_milestones) {
    char *extra[] = {"--kfac.stats_every", "2", "--kfac.inverse_every", "5", "--kfac.interval_milestones", "10",
                     "--kfac.interval_factor", "2", "--kfac.damping", "0.01", "--kfac.damping_milestones", "15",
                     "--kfac.damping_factor", "0.5", "--kfac.refresh", "every"};
    runcfg_t c;
    char path[64], err[256];
    s_cfg(&c, "sgd", path, sizeof path, extra, (int)(sizeof extra / sizeof extra[0]));
    int rc = 1;
    ps_sched_t *sc = ps_sched_new(&c, NULL, &rc, err, sizeof err);
    ck_assert_msg(sc != NULL && rc == 0, "%s", err);
    /* sgd: no blocks, no refresh state; no intervals before the first step */
    ck_assert_ptr_null(ps_sched_blocks(sc));
    ck_assert_int_eq(ps_sched_n_blocks(sc), 0);
    ck_assert_ptr_null(ps_sched_refresh(sc));
    ck_assert_int_eq(ps_sched_policy(sc), PS_SCHED_EVERY);
    ck_assert_int_eq(ps_sched_fac_interval(sc), 0);
    double d = 0;
    ck_assert_int_eq(ps_sched_at(sc, 0, &d), 0); /* the first intervals are no milestone */
    ck_assert_int_eq(ps_sched_fac_interval(sc), 2);
    ck_assert_int_eq(ps_sched_inv_interval(sc), 5);
    ck_assert(d == 0.01);
    ck_assert_int_eq(ps_sched_at(sc, 9, NULL), 0);
    ck_assert_int_eq(ps_sched_at(sc, 10, &d), 1); /* the interval milestone */
    ck_assert_int_eq(ps_sched_fac_interval(sc), 4);
    ck_assert_int_eq(ps_sched_inv_interval(sc), 10);
    ck_assert_int_eq(ps_sched_at(sc, 14, &d), 0);
    ck_assert(d == 0.01);
    ck_assert_int_eq(ps_sched_at(sc, 15, &d), 0); /* a damping milestone changes no interval */
    ck_assert(d == 0.005);
    ck_assert_int_eq(ps_sched_at(sc, -1, &d), -EINVAL); /* refused: nothing changes */
    ck_assert_int_eq(ps_sched_fac_interval(sc), 4);
    ck_assert(d == 0.005);
    ps_sched_free(&sc);
    ck_assert_ptr_null(sc);
    ps_sched_free(&sc); /* NULL: a no-op */
    unlink(path);
    runcfg_release(&c);
}
END_TEST

START_TEST(test_sched_state_mirrors_kfac_blocks) {
    char *adaptive[] = {"--kfac.refresh", "adaptive", "--kfac.refresh_alpha", "0.1"};
    char *no_alpha[] = {"--kfac.refresh", "adaptive", "--kfac.refresh_alpha", "0"};
    char path[64], err[256];
    runcfg_t c;
    s_cfg(&c, "kfac", path, sizeof path, adaptive, 4);
    ps_model_t m;
    ck_assert_msg(ps_model_init(&m, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(m.kfac);
    int rc = 1;
    ps_sched_t *sc = ps_sched_new(&c, m.kfac, &rc, err, sizeof err);
    ck_assert_msg(sc != NULL && rc == 0, "%s", err);
    ck_assert_int_eq(ps_sched_n_blocks(sc), m.kfac->n_blocks);
    ck_assert_int_ge(ps_sched_n_blocks(sc), 2);
    for (int b = 0; b < ps_sched_n_blocks(sc); b++) {
        const ps_sched_block_t *sb = &ps_sched_blocks(sc)[b];
        ck_assert_int_eq(sb->n, m.kfac->blocks[b].n);
        ck_assert_int_eq(sb->factor_version, -1);
        ck_assert_int_eq(sb->inv_version, -1);
        ck_assert_int_eq(sb->cur.id, 0);
    }
    ck_assert_int_eq(ps_sched_policy(sc), PS_SCHED_ADAPTIVE);
    ck_assert_ptr_nonnull(ps_sched_refresh(sc));
    ps_sched_free(&sc);
    ps_model_release(&m);
    unlink(path);
    runcfg_release(&c);

    /* adaptive refresh with alpha 0 is refused with the reason */
    s_cfg(&c, "kfac", path, sizeof path, no_alpha, 4);
    ck_assert_msg(ps_model_init(&m, &c, err, sizeof err) == 0, "%s", err);
    err[0] = 0;
    ck_assert_ptr_null(ps_sched_new(&c, m.kfac, &rc, err, sizeof err));
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err, "refresh_alpha") != NULL, "%s", err);
    ps_model_release(&m);
    unlink(path);
    runcfg_release(&c);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_sched");
    TCase *tc = tcase_create("sched");
    tcase_add_test(tc, test_sched_pick_stalest_first_matches_oracle);
    tcase_add_test(tc, test_sched_pick_missing_inverse_before_any_age);
    tcase_add_test(tc, test_sched_pick_cost_tiebreak_spreads_big_blocks);
    tcase_add_test(tc, test_sched_pick_respects_max_n);
    tcase_add_test(tc, test_sched_no_double_assignment);
    tcase_add_test(tc, test_sched_overdue_job_is_reassigned);
    tcase_add_test(tc, test_sched_vanished_daemon_requeues_its_job);
    tcase_add_test(tc, test_sched_failed_job_not_retried_until_new_stats);
    tcase_add_test(tc, test_sched_policies_want_only_when_due);
    tcase_add_test(tc, test_sched_bound_predicate_matches_oracle);
    tcase_add_test(tc, test_sched_ages_match_oracle);
    tcase_add_test(tc, test_sched_state_intervals_follow_milestones);
    tcase_add_test(tc, test_sched_state_mirrors_kfac_blocks);
    suite_add_tcase(s, tc);
    return s;
}
