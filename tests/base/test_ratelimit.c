/* tests/base/test_ratelimit.c — the log-line limiters: one line per
 * interval (ratelimit_ok) and bursts of lines per window
 * (ratelimit_burst_ok), each with the count of lines held back. */
#include <check.h>
#include <stdint.h>

#include "common/base/ratelimit.h"

#define MS 1000000ULL

START_TEST(test_ratelimit_one_per_interval) {
    ratelimit_t r = {0};
    uint64_t held = 99;
    ck_assert_int_eq(ratelimit_ok(&r, 5 * MS, 1000, &held), 1);
    ck_assert_uint_eq(held, 0);
    for (int i = 0; i < 7; i++) ck_assert_int_eq(ratelimit_ok(&r, (10 + (uint64_t)i) * MS, 1000, &held), 0);
    ck_assert_int_eq(ratelimit_ok(&r, 1005 * MS, 1000, &held), 1);
    ck_assert_uint_eq(held, 7);
}
END_TEST

START_TEST(test_ratelimit_burst_per_window) {
    ratelimit_t r = {0};
    uint64_t held = 99, t = 1 * MS;
    /* 20 joins at once pass, the next 30 are held back */
    for (int i = 0; i < 20; i++) ck_assert_int_eq(ratelimit_burst_ok(&r, t + (uint64_t)i, 10000, 20, &held), 1);
    ck_assert_uint_eq(held, 0);
    for (int i = 0; i < 30; i++) ck_assert_int_eq(ratelimit_burst_ok(&r, t + 5000 * MS, 10000, 20, &held), 0);
    /* the next window: the first line passes and says how many were held */
    ck_assert_int_eq(ratelimit_burst_ok(&r, t + 10000 * MS, 10000, 20, &held), 1);
    ck_assert_uint_eq(held, 30);
    ck_assert_int_eq(ratelimit_burst_ok(&r, t + 10001 * MS, 10000, 20, &held), 1);
    ck_assert_uint_eq(held, 0);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ratelimit");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ratelimit_one_per_interval);
    tcase_add_test(tc, test_ratelimit_burst_per_window);
    suite_add_tcase(s, tc);
    return s;
}
