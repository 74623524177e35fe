/* tests/ps/test_ps_jobs.c — kfac-ps's job flow without sockets
 * (ps/sched.h: ps_sched_pick_waiter, ps_sched_result, ps_sched_judge): the
 * daemon waiting longest gets the stalest block it can take (checked
 * against an oracle on random waiters and blocks, from a fresh seed
 * printed on failure); request -> job -> result -> install with sequential
 * ids; a result from another daemon, for an unknown or answered job, for
 * another factor version, without a probe, with a damping out of bounds or
 * with an error gets its verdict, in that order of checks; a cancelled job
 * (its daemon vanished) goes back to the queue and a late result for it is
 * still matched. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "common/base/rng.h"
#include "ps/sched.h"
#include "tests/lib/seed.h"

#define NB 6

static void s_blocks(ps_sched_block_t *bl) {
    static const int dims[NB] = {8, 64, 8, 129, 17, 64};
    for (int i = 0; i < NB; i++) {
        ps_sched_block_init(&bl[i], dims[i]);
        bl[i].factor_version = 3;
    }
}

START_TEST(test_ps_jobs_first_come_first_served) {
    ps_sched_block_t bl[NB];
    s_blocks(bl);
    ps_sched_waiter_t w[3] = {{5, 0, 0}, {2, 64, 0}, {9, 0, 0}};
    int b = -1;
    /* the one waiting longest (seq 2) gets the stalest block it can take: the largest n <= 64 */
    ck_assert_int_eq(ps_sched_pick_waiter(w, 3, bl, NB, PS_SCHED_CONTINUOUS, 0.0, 1000.0, &b), 1);
    ck_assert_int_eq(b, 1);
    /* a daemon that takes nothing that is left is passed over */
    w[1].max_n = 4;
    ck_assert_int_eq(ps_sched_pick_waiter(w, 3, bl, NB, PS_SCHED_CONTINUOUS, 0.0, 1000.0, &b), 0);
    ck_assert_int_eq(b, 3);
    /* nobody waiting, or nothing wanted */
    ck_assert_int_eq(ps_sched_pick_waiter(w, 0, bl, NB, PS_SCHED_CONTINUOUS, 0.0, 1000.0, &b), -1);
    ck_assert_int_eq(b, -1);
    for (int i = 0; i < NB; i++) bl[i].inv_version = 3;
    ck_assert_int_eq(ps_sched_pick_waiter(w, 3, bl, NB, PS_SCHED_CONTINUOUS, 0.0, 1000.0, &b), -1);
}
END_TEST

START_TEST(test_ps_jobs_pick_waiter_matches_oracle) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int round = 0; round < 2000; round++) {
        ps_sched_block_t bl[NB];
        s_blocks(bl);
        for (int i = 0; i < NB; i++) {
            bl[i].factor_version = (long)rng_below(&r, 5) - 1;
            bl[i].inv_version = (long)rng_below(&r, 5) - 1;
        }
        ps_sched_waiter_t w[5];
        int n = (int)rng_below(&r, 6);
        for (int i = 0; i < n; i++) {
            w[i].wait_seq = rng_below(&r, 1000);
            static const uint32_t caps[] = {0, 8, 17, 64, 200};
            w[i].max_n = caps[rng_below(&r, 5)];
        }
        /* oracle: the lowest wait_seq (first in order on a tie) among those ps_sched_pick serves */
        int want = -1, want_b = -1;
        for (int i = 0; i < n; i++) {
            int b = ps_sched_pick(bl, NB, PS_SCHED_CONTINUOUS, w[i].max_n, 0.0, 1000.0);
            if (b < 0) continue;
            if (want < 0 || w[i].wait_seq < w[want].wait_seq) {
                want = i;
                want_b = b;
            }
        }
        int b = -2;
        int got = ps_sched_pick_waiter(w, n, bl, NB, PS_SCHED_CONTINUOUS, 0.0, 1000.0, &b);
        ck_assert_msg(got == want && b == want_b, "seed %" PRIu64 " round %d: got waiter %d block %d, want %d %d",
                      seed, round, got, b, want, want_b);
    }
}
END_TEST

START_TEST(test_ps_jobs_request_job_result_install) {
    ps_sched_block_t bl[NB];
    s_blocks(bl);
    uint64_t next_id = 1;
    const uint32_t daemon = 7, other = 8;
    ps_sched_waiter_t w = {1, 0, 0};
    int b = -1;
    ck_assert_int_eq(ps_sched_pick_waiter(&w, 1, bl, NB, PS_SCHED_CONTINUOUS, 0.0, 1000.0, &b), 0);
    uint64_t id = next_id++;
    ps_sched_assign(&bl[b], id, bl[b].factor_version, daemon, 0.0);
    ck_assert_int_eq(ps_sched_in_flight(bl, NB), 1);
    /* another daemon's answer is foreign and the job stays with its daemon */
    long version = -1;
    float d = 0.0f;
    char why[200];
    int match = ps_sched_result(&bl[b], id, other, &version, NULL);
    ck_assert_int_eq(ps_sched_judge(match, version, id, 3, 0, 1, 1e-3, 1e-3f, 3, &d, why, sizeof why),
                     PS_RESULT_FOREIGN);
    ck_assert_ptr_nonnull(strstr(why, "another inverse daemon"));
    ck_assert_int_eq(ps_sched_owner_block(bl, NB, daemon), b);
    /* its own: an inverse to check and install */
    match = ps_sched_result(&bl[b], id, daemon, &version, NULL);
    ck_assert_int_eq(match, 1);
    ck_assert_int_eq(version, 3);
    ck_assert_int_eq(ps_sched_judge(match, version, id, 3, 0, 1, 2e-3, 1e-3f, 3, &d, why, sizeof why),
                     PS_RESULT_CHECK);
    ck_assert(d == 2e-3f); /* a Cholesky result applies the damping it used */
    ps_sched_installed(&bl[b], version);
    ck_assert_int_eq(bl[b].inv_version, 3);
    ck_assert_int_eq(ps_sched_in_flight(bl, NB), 0);
    /* a second result for the same job is unknown */
    match = ps_sched_result(&bl[b], id, daemon, &version, NULL);
    ck_assert_int_eq(ps_sched_judge(match, version, id, 3, 0, 1, 1e-3, 1e-3f, 3, &d, NULL, 0), PS_RESULT_UNKNOWN);
    /* the next job gets the next id, never one already used */
    ck_assert_int_eq(ps_sched_pick_waiter(&w, 1, bl, NB, PS_SCHED_CONTINUOUS, 0.0, 1000.0, &b), 0);
    uint64_t id2 = next_id++;
    ck_assert_uint_gt(id2, id);
    ps_sched_assign(&bl[b], id2, bl[b].factor_version, daemon, 10.0);
    /* cancellation: the daemon vanished; the block is free again; a late result is still matched */
    ck_assert_int_eq(ps_sched_owner_gone(bl, NB, daemon), 1);
    ck_assert_int_eq(ps_sched_in_flight(bl, NB), 0);
    ck_assert_int_eq(ps_sched_pick(bl, NB, PS_SCHED_CONTINUOUS, 0, 20.0, 1000.0), b);
    match = ps_sched_result(&bl[b], id2, daemon, &version, NULL);
    ck_assert_int_eq(match, 0); /* a known older job */
    ck_assert_int_eq(ps_sched_judge(match, version, id2, 3, 0, 0, 0.0, 1e-3f, 3, &d, NULL, 0), PS_RESULT_CHECK);
    ck_assert(d == 1e-3f); /* an eigen result is applied with the job's damping */
}
END_TEST

START_TEST(test_ps_jobs_result_verdicts) {
    float d = 0.0f;
    char why[200];
    /* the order of the checks: job, version, error, probe, damping */
    ck_assert_int_eq(ps_sched_judge(-EPERM, 3, 9, 4, 1, 1, -1.0, -1.0f, 3, &d, why, sizeof why), PS_RESULT_FOREIGN);
    ck_assert_int_eq(ps_sched_judge(-ENOENT, 3, 9, 4, 1, 1, -1.0, -1.0f, 3, &d, why, sizeof why), PS_RESULT_UNKNOWN);
    ck_assert_int_eq(ps_sched_judge(1, 3, 9, 4, 1, 1, -1.0, -1.0f, 3, &d, why, sizeof why), PS_RESULT_WRONG_VERSION);
    ck_assert_ptr_nonnull(strstr(why, "factor version 3, the result says 4"));
    ck_assert_int_eq(ps_sched_judge(1, 3, 9, 3, 1, 1, -1.0, -1.0f, 3, &d, why, sizeof why), PS_RESULT_FAILED);
    ck_assert_int_eq(ps_sched_judge(1, 3, 9, 3, 0, 1, -1.0, -1.0f, 3, &d, why, sizeof why), PS_RESULT_NO_PROBE);
    ck_assert_ptr_nonnull(strstr(why, "no probe"));
    /* Cholesky damping: not below the job's, at most 10^3 times it */
    ck_assert_int_eq(ps_sched_judge(0, 3, 9, 3, 0, 1, 0.5e-3, 1e-3f, 3, &d, why, sizeof why), PS_RESULT_BAD_DAMPING);
    ck_assert_int_eq(ps_sched_judge(0, 3, 9, 3, 0, 1, 1.0, 1e-3f, 3, &d, why, sizeof why), PS_RESULT_CHECK);
    ck_assert_int_eq(ps_sched_judge(0, 3, 9, 3, 0, 1, 1.1, 1e-3f, 3, &d, why, sizeof why), PS_RESULT_BAD_DAMPING);
    ck_assert_int_eq(ps_sched_judge(0, 3, 9, 3, 0, 1, 0.0 / 0.0, 1e-3f, 3, &d, why, sizeof why),
                     PS_RESULT_BAD_DAMPING);
    /* eigen: its damping is not looked at */
    ck_assert_int_eq(ps_sched_judge(0, 3, 9, 3, 0, 0, 1e9, 1e-3f, 3, &d, why, sizeof why), PS_RESULT_CHECK);
    ck_assert(d == 1e-3f);
}
END_TEST

/* A daemon's report that it could not invert a version does not fail the
 * block while another daemon may try it: the job goes to the others (the
 * one that failed it is passed over), and a second daemon's failure (or
 * the same daemon's second, or the only daemon's) fails the block until
 * newer statistics. An install of that version disproves the reports. */
START_TEST(test_ps_jobs_failure_needs_two_daemons) {
    ps_sched_block_t bl[NB];
    s_blocks(bl);
    const uint32_t bad = 7, good = 8;
    int b = -1;
    ps_sched_waiter_t w[2] = {{1, 0, bad}, {2, 0, good}};
    ck_assert_int_eq(ps_sched_pick_waiter(w, 2, bl, NB, PS_SCHED_CONTINUOUS, 0.0, 1000.0, &b), 0);
    const int blk = b;
    const long v = bl[blk].factor_version;
    /* the bad daemon reports failure, 2 daemons present: not failed */
    ck_assert_int_eq(ps_sched_failed_by(&bl[blk], v, bad, 2), 0);
    ck_assert_int_eq(ps_sched_wanted(&bl[blk], PS_SCHED_CONTINUOUS), 1);
    /* the bad daemon, first in line, is not given that block again; the good one is */
    ck_assert_int_ne(ps_sched_pick_for(bl, NB, PS_SCHED_CONTINUOUS, 0, bad, 0.0, 1000.0), blk);
    for (int i = 0; i < NB; i++) /* only blk wanted: the bad daemon gets nothing, the good one blk */
        if (i != blk) bl[i].inv_version = bl[i].factor_version;
    ck_assert_int_eq(ps_sched_pick_for(bl, NB, PS_SCHED_CONTINUOUS, 0, bad, 0.0, 1000.0), -1);
    ck_assert_int_eq(ps_sched_pick_waiter(w, 2, bl, NB, PS_SCHED_CONTINUOUS, 0.0, 1000.0, &b), 1);
    ck_assert_int_eq(b, blk);
    /* the good daemon inverts it: the bad one's report is disproved, once */
    ps_sched_installed(&bl[blk], v);
    uint32_t out[PS_SCHED_FAIL_QUORUM];
    ck_assert_int_eq(ps_sched_disproved(&bl[blk], v, out, PS_SCHED_FAIL_QUORUM), 1);
    ck_assert_uint_eq(out[0], bad);
    ck_assert_int_eq(ps_sched_disproved(&bl[blk], v, out, PS_SCHED_FAIL_QUORUM), 0);
    /* a report is disproved by an install of its version or a newer one, not an older one */
    ck_assert_int_eq(ps_sched_failed_by(&bl[blk], v, bad, 2), 0);
    ck_assert_int_eq(ps_sched_disproved(&bl[blk], v - 1, out, PS_SCHED_FAIL_QUORUM), 0);
    ck_assert_int_eq(ps_sched_disproved(&bl[blk], v + 3, out, PS_SCHED_FAIL_QUORUM), 1);
    /* newer statistics: everyone may take the new version */
    bl[blk].factor_version = v + 1;
    ck_assert_int_eq(ps_sched_pick_for(bl, NB, PS_SCHED_CONTINUOUS, 0, bad, 0.0, 1000.0), blk);
    /* two distinct daemons fail it: the block fails until newer statistics */
    ck_assert_int_eq(ps_sched_failed_by(&bl[blk], v + 1, bad, 3), 0);
    ck_assert_int_eq(ps_sched_failed_by(&bl[blk], v + 1, good, 3), 1);
    ck_assert_int_eq(ps_sched_wanted(&bl[blk], PS_SCHED_CONTINUOUS), 0);
    /* the same daemon twice fails it too (an Error after a failed result) */
    bl[blk].factor_version = v + 2;
    ck_assert_int_eq(ps_sched_failed_by(&bl[blk], v + 2, good, 3), 0);
    ck_assert_int_eq(ps_sched_failed_by(&bl[blk], v + 2, good, 3), 1);
    /* the only daemon there is: its word is enough, as before */
    bl[blk].factor_version = v + 3;
    ck_assert_int_eq(ps_sched_failed_by(&bl[blk], v + 3, good, 1), 1);
    ck_assert_int_eq(ps_sched_wanted(&bl[blk], PS_SCHED_CONTINUOUS), 0);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_jobs");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_jobs_first_come_first_served);
    tcase_add_test(tc, test_ps_jobs_failure_needs_two_daemons);
    tcase_add_test(tc, test_ps_jobs_pick_waiter_matches_oracle);
    tcase_add_test(tc, test_ps_jobs_request_job_result_install);
    tcase_add_test(tc, test_ps_jobs_result_verdicts);
    suite_add_tcase(s, tc);
    return s;
}
