/* tests/ps/test_ps_guard.c — ps/guard.h, the gradient defences without a
 * socket: the norm rule waits for a history, then refuses outliers and
 * reports the median; the examples rule; a layer's slice is clipped to
 * ratio x its median and the clipped norm is what its history keeps (a
 * run of long slices cannot raise the bound), each layer on its own; the
 * push times feed the stall median; a recovery restores the kept
 * parameters only after outliers, empties the histories, and gives up
 * after PS_RECOVER_MAX_IN_A_ROW in a row, which a step resets. Random
 * values from a fresh seed printed on failure. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "ps/guard.h"
#include "tests/lib/seed.h"

START_TEST(test_ps_guard_norm_rule) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    ps_guard_t *g = ps_guard_new(3, 10, 0);
    ck_assert_ptr_nonnull(g);
    double med = -1.0;
    int n = -1;
    const double base = 0.5 + rng_uniform(&r);
    /* no history: no norm rule yet, however long */
    ck_assert_int_eq(ps_guard_check_grad(g, 32, 32, 1e6 * base, 4.0, &med, &n), PS_GRAD_OK);
    ck_assert_int_eq(n, 0);
    ck_assert(med == 0.0);
    ck_assert_int_eq(ps_guard_check_grad(g, 33, 32, base, 4.0, &med, &n), PS_GRAD_TOO_MANY_EXAMPLES);
    ck_assert_int_eq(ps_guard_check_grad(g, 1, 32, NAN, 4.0, &med, &n), PS_GRAD_NORM_OUTLIER);
    for (int i = 0; i < PS_NORM_MIN_HISTORY; i++) ps_guard_accepted(g, base, 0);
    ck_assert_int_eq(ps_guard_check_grad(g, 32, 32, 3.9 * base, 4.0, &med, &n), PS_GRAD_OK);
    ck_assert_msg(med == base, "seed %" PRIu64 ": median %g, want %g", seed, med, base);
    ck_assert_int_eq(n, PS_NORM_MIN_HISTORY);
    ck_assert_int_eq(ps_guard_check_grad(g, 32, 32, 4.1 * base, 4.0, &med, &n), PS_GRAD_NORM_OUTLIER);
    ck_assert_int_eq(ps_guard_check_grad(g, 32, 32, 4.1 * base, 0.0, &med, &n), PS_GRAD_OK); /* no norm rule */
    /* the checkpoint's view is the same history */
    ck_assert_int_eq(ps_guard_norms(g)->n, PS_NORM_MIN_HISTORY);
    ck_assert_ptr_nonnull(ps_guard_rl(g, PS_GUARD_LINE_NORM));
    ck_assert_ptr_ne(ps_guard_rl(g, PS_GUARD_LINE_NORM), ps_guard_rl(g, PS_GUARD_LINE_CLIP));
    ps_guard_free(&g);
    ck_assert_ptr_null(g);
    ps_guard_free(&g); /* idempotent */
}
END_TEST

START_TEST(test_ps_guard_clip) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    ps_guard_t *g = ps_guard_new(2, 10, 0);
    ck_assert_ptr_nonnull(g);
    const double base = 0.5 + rng_uniform(&r), ratio = 2.0;
    double med = -1.0;
    int n = -1;
    /* no history: nothing clipped */
    for (int i = 0; i < PS_NORM_MIN_HISTORY; i++) {
        ck_assert(ps_guard_clip(g, 0, base, ratio, &med, &n) == 0.0);
        ck_assert_int_eq(n, i);
    }
    ck_assert(ps_guard_clip(g, 0, 1.9 * base, ratio, &med, &n) == 0.0);
    /* layer 1 has its own history: nothing there yet */
    ck_assert(ps_guard_clip(g, 1, 1e6 * base, ratio, &med, &n) == 0.0);
    ck_assert_int_eq(n, 0);
    /* long slices: each clipped to ratio x the median, and the history
     * keeps the clipped norm, so the bound grows by at most ratio every
     * PS_NORM_HISTORY / 2 slices (were the raw norms kept, the median would
     * be 100 x base after about PS_NORM_MIN_HISTORY of them, and clipping
     * would stop) */
    for (int i = 0; i < 2 * PS_NORM_HISTORY; i++) {
        double bound = ps_guard_clip(g, 0, 100.0 * base, ratio, &med, &n);
        ck_assert_msg(bound > 0.0 && bound < 100.0 * base, "seed %" PRIu64 ": slice %d: bound %g (median %g, base %g)",
                      seed, i, bound, med, base);
        ck_assert(bound == ratio * med);
    }
    ck_assert(ps_guard_clip(g, -1, 1.0, ratio, &med, &n) == 0.0); /* no such layer */
    ck_assert(ps_guard_clip(g, 2, 1.0, ratio, &med, &n) == 0.0);
    ps_guard_free(&g);
}
END_TEST

START_TEST(test_ps_guard_push_times) {
    ps_guard_t *g = ps_guard_new(1, 4, 0);
    ck_assert_ptr_nonnull(g);
    for (int i = 0; i < 2 * PS_NORM_MIN_HISTORY; i++) ps_guard_accepted(g, 1.0, 0); /* 0: not recorded */
    ck_assert(ps_guard_push_median_ns(g) == 0.0);
    for (int i = 0; i < PS_NORM_MIN_HISTORY; i++) ps_guard_accepted(g, 1.0, 1000000u * (uint64_t)(i + 1));
    ck_assert(ps_guard_push_median_ns(g) == 4.5e6);
    ps_guard_free(&g);
}
END_TEST

START_TEST(test_ps_guard_recover) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const size_t np = 1 + rng_below(&r, 300), ns = 1 + rng_below(&r, 20);
    ps_guard_t *g = ps_guard_new(2, np, ns);
    ck_assert_ptr_nonnull(g);
    float *p = malloc(np * sizeof *p), *st = malloc(ns * sizeof *st);
    float *p0 = malloc(np * sizeof *p0), *st0 = malloc(ns * sizeof *st0);
    for (size_t i = 0; i < np; i++) p[i] = (float)rng_normal(&r);
    for (size_t i = 0; i < ns; i++) st[i] = (float)rng_normal(&r);
    long step = 0;
    double ts = -1.0;
    /* nothing kept: the same parameters again, even after outliers */
    ck_assert_int_eq(ps_guard_recover(g, 3, p, st, &step, &ts), PS_GUARD_RECOVER_SAME);
    ck_assert_int_eq(step, -1);
    /* a step whose round refused an outlier keeps nothing; one that refused
     * none, at a multiple of PS_RECOVER_EVERY, keeps its parameters */
    ps_guard_step(g, 1, 0, p, st, 5, 1.0);
    ck_assert_int_eq(ps_guard_recover(g, 1, p, st, &step, &ts), PS_GUARD_RECOVER_SAME);
    ps_guard_step(g, 0, PS_RECOVER_EVERY, p, st, 7, 2.5);
    memcpy(p0, p, np * sizeof *p);
    memcpy(st0, st, ns * sizeof *st);
    ps_guard_step(g, 0, PS_RECOVER_EVERY + 1, p, st, 8, 3.0); /* not a multiple: the kept ones stay */
    for (size_t i = 0; i < np; i++) p[i] = 1e6f * (float)rng_normal(&r); /* wrecked */
    for (size_t i = 0; i < ns; i++) st[i] = -1.0f;
    for (int i = 0; i < PS_NORM_MIN_HISTORY; i++) {
        ps_guard_accepted(g, 1.0, 0);
        ps_guard_clip(g, 1, 1.0, 2.0, &(double){0}, &(int){0});
    }
    /* no outlier refused: the parameters stay as they are */
    ck_assert_int_eq(ps_guard_recover(g, 0, p, st, &step, &ts), PS_GUARD_RECOVER_SAME);
    ck_assert_msg(memcmp(p, p0, np * sizeof *p) != 0, "seed %" PRIu64 ": restored without outliers", seed);
    /* the histories are empty after a recovery */
    ck_assert_int_eq(ps_guard_norms(g)->n, 0);
    double med = -1.0;
    int n = -1;
    ps_guard_clip(g, 1, 1.0, 2.0, &med, &n);
    ck_assert_int_eq(n, 0);
    /* outliers refused: back to the kept ones */
    ck_assert_int_eq(ps_guard_recover(g, 2, p, st, &step, &ts), PS_GUARD_RECOVER_RESTORED);
    ck_assert_int_eq(step, 7);
    ck_assert(ts == 2.5);
    ck_assert_msg(memcmp(p, p0, np * sizeof *p) == 0, "seed %" PRIu64 ": parameters not restored", seed);
    ck_assert_msg(memcmp(st, st0, ns * sizeof *st) == 0, "seed %" PRIu64 ": state not restored", seed);
    /* a step resets the count: PS_RECOVER_MAX_IN_A_ROW recoveries pass,
     * the next gives up; after a step they pass again */
    ps_guard_step(g, 1, 3, p, st, 9, 4.0);
    for (int i = 0; i < PS_RECOVER_MAX_IN_A_ROW; i++)
        ck_assert_int_ne(ps_guard_recover(g, 1, p, st, &step, &ts), PS_GUARD_RECOVER_GIVE_UP);
    ck_assert_int_eq(ps_guard_recover(g, 1, p, st, &step, &ts), PS_GUARD_RECOVER_GIVE_UP);
    ps_guard_step(g, 1, 3, p, st, 9, 4.0);
    ck_assert_int_eq(ps_guard_recover(g, 1, p, st, &step, &ts), PS_GUARD_RECOVER_RESTORED);
    free(p);
    free(st);
    free(p0);
    free(st0);
    ps_guard_free(&g);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_guard");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_guard_norm_rule);
    tcase_add_test(tc, test_ps_guard_clip);
    tcase_add_test(tc, test_ps_guard_push_times);
    tcase_add_test(tc, test_ps_guard_recover);
    suite_add_tcase(s, tc);
    return s;
}
