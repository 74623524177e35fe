/* tests/net/test_admit.c — the retry window of a client whose CURVE key
 * kfac-ps refused (common/net/admit.h), against the schedule written out by
 * hand: pauses of 1, 2, 4, 8, 16 s, then 30 s each; the last pause
 * shortened to end at the window's end; give up at the first refusal after
 * the window (or at once with a window of 0); a Welcome starts afresh. The
 * clock is a number the test advances. */
#include <check.h>
#include <stdint.h>

#include "common/net/admit.h"

#define MS 1000000ULL

START_TEST(test_admit_backoff_schedule) {
    const uint64_t want[] = {1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000};
    uint64_t d = 0;
    for (unsigned i = 0; i < sizeof want / sizeof want[0]; i++) {
        d = admit_backoff_next_ms(d);
        ck_assert_uint_eq(d, want[i]);
    }
    ck_assert_uint_eq(admit_backoff_next_ms(ADMIT_BACKOFF_MAX_MS), ADMIT_BACKOFF_MAX_MS);
    ck_assert_uint_eq(admit_backoff_next_ms(UINT64_MAX), ADMIT_BACKOFF_MAX_MS);
}
END_TEST

START_TEST(test_admit_window_ends_in_give_up) {
    admit_t a;
    admit_init(&a, 100000); /* 100 s */
    /* Each refusal comes right when the pause before it ends. */
    const uint64_t delays[] = {1000, 2000, 4000, 8000, 16000, 30000, 30000, 9000};
    const uint64_t lefts[] = {100000, 99000, 97000, 93000, 85000, 69000, 39000, 9000};
    uint64_t now = 5000 * MS, delay = 0, left = 0;
    for (unsigned i = 0; i < sizeof delays / sizeof delays[0]; i++) {
        ck_assert_int_eq(admit_refused(&a, now, &delay, &left), ADMIT_DECISION_RETRY);
        ck_assert_uint_eq(delay, delays[i]);
        ck_assert_uint_eq(left, lefts[i]);
        now += delay * MS;
    }
    ck_assert_int_eq(admit_refused(&a, now, &delay, &left), ADMIT_DECISION_GIVE_UP);
    ck_assert_uint_eq(delay, 0);
    ck_assert_uint_eq(left, 0);
    ck_assert_uint_eq(a.n_refused, 9);
}
END_TEST

START_TEST(test_admit_zero_gives_up_at_once) {
    admit_t a;
    admit_init(&a, 0);
    uint64_t delay = 7, left = 7;
    ck_assert_int_eq(admit_refused(&a, 1 * MS, &delay, &left), ADMIT_DECISION_GIVE_UP);
    ck_assert_uint_eq(delay, 0);
    ck_assert_uint_eq(left, 0);
}
END_TEST

START_TEST(test_admit_reset_starts_a_new_window) {
    admit_t a;
    admit_init(&a, 3000);
    uint64_t delay = 0, left = 0;
    ck_assert_int_eq(admit_refused(&a, 1000 * MS, &delay, &left), ADMIT_DECISION_RETRY);
    ck_assert_int_eq(admit_refused(&a, 2000 * MS, &delay, &left), ADMIT_DECISION_RETRY);
    ck_assert_uint_eq(delay, 2000);
    ck_assert_int_eq(admit_refused(&a, 4000 * MS, &delay, &left), ADMIT_DECISION_GIVE_UP);
    /* Welcomed, later revoked: a fresh window and schedule. */
    admit_reset(&a);
    ck_assert_int_eq(admit_refused(&a, 60000 * MS, &delay, &left), ADMIT_DECISION_RETRY);
    ck_assert_uint_eq(delay, 1000);
    ck_assert_uint_eq(left, 3000);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("admit");
    TCase *tc = tcase_create("admit");
    tcase_add_test(tc, test_admit_backoff_schedule);
    tcase_add_test(tc, test_admit_window_ends_in_give_up);
    tcase_add_test(tc, test_admit_zero_gives_up_at_once);
    tcase_add_test(tc, test_admit_reset_starts_a_new_window);
    suite_add_tcase(s, tc);
    return s;
}
