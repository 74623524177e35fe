/* tests/ps/test_ps_recover.c — ps/recover.h: nothing kept at first; a
 * snapshot comes back exactly, with its step and time, however the
 * parameters changed since; a newer save replaces it. Random values from a
 * fresh seed printed on failure. */
#include <check.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "ps/recover.h"
#include "tests/lib/seed.h"

START_TEST(test_ps_recover_roundtrip) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const size_t np = 1 + rng_below(&r, 5000), ns = rng_below(&r, 40);
    ps_recover_t *rc = ps_recover_new(np, ns);
    ck_assert_ptr_nonnull(rc);
    float *p = malloc(np * sizeof *p), *st = malloc((ns ? ns : 1) * sizeof *st);
    float *p0 = malloc(np * sizeof *p0), *st0 = malloc((ns ? ns : 1) * sizeof *st0);
    for (size_t i = 0; i < np; i++) p[i] = (float)rng_normal(&r);
    for (size_t i = 0; i < ns; i++) st[i] = (float)rng_normal(&r);
    double ts = -1.0;
    ck_assert_int_eq(ps_recover_have(rc), 0);
    ck_assert_int_eq(ps_recover_restore(rc, p, st, &ts), -1); /* nothing kept: nothing copied */
    for (int round = 0; round < 3; round++) {
        long step = (long)rng_below(&r, 100000);
        ps_recover_save(rc, p, st, step, 1.5 * step);
        memcpy(p0, p, np * sizeof *p);
        memcpy(st0, st, ns * sizeof *st);
        for (size_t i = 0; i < np; i++) p[i] = 1e6f * (float)rng_normal(&r); /* wrecked */
        for (size_t i = 0; i < ns; i++) st[i] = -1.0f;
        ck_assert_int_eq(ps_recover_have(rc), 1);
        ck_assert_int_eq(ps_recover_restore(rc, p, st, &ts), step);
        ck_assert_msg(ts == 1.5 * step, "seed %" PRIu64 ": time %g, want %g", seed, ts, 1.5 * step);
        ck_assert_msg(memcmp(p, p0, np * sizeof *p) == 0, "seed %" PRIu64 ": parameters not restored", seed);
        ck_assert_msg(ns == 0 || memcmp(st, st0, ns * sizeof *st) == 0, "seed %" PRIu64 ": state not restored", seed);
        for (size_t i = 0; i < np; i++) p[i] += (float)rng_normal(&r);
    }
    free(p);
    free(st);
    free(p0);
    free(st0);
    ps_recover_free(&rc);
    ck_assert_ptr_null(rc);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_recover");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_recover_roundtrip);
    suite_add_tcase(s, tc);
    return s;
}
