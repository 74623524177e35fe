/* tests/ps/test_ps_life.c — kfac-ps's life cycle (ps/life.c): a running
 * run finishes once, at its final step; the end asked for is carried out
 * once, with the largest exit code asked for, and stops the steps; nothing
 * is asked or carried out once closed, and closing twice does nothing. */
#include <check.h>

#include "ps/life.h"

START_TEST(test_ps_life_finish_once) {
    ps_life_t l;
    ps_life_init(&l);
    ck_assert_int_eq(l.phase, PS_PHASE_RUNNING);
    ck_assert_int_eq(l.final_step, -1);
    ck_assert_int_eq(ps_life_finish(&l, 30), 1);
    ck_assert_int_eq(l.phase, PS_PHASE_FINISHING);
    ck_assert_int_eq(l.final_step, 30);
    ck_assert_int_eq(ps_life_finish(&l, 31), 0); /* a second reason does not move the final step */
    ck_assert_int_eq(l.final_step, 30);
    int code = -1;
    ck_assert_int_eq(ps_life_take_shutdown(&l, &code), 0); /* nothing asked yet */
}
END_TEST

START_TEST(test_ps_life_shutdown_request) {
    ps_life_t l;
    ps_life_init(&l);
    ps_life_request_shutdown(&l, 1);
    ps_life_request_shutdown(&l, 0); /* the larger code wins */
    ck_assert_int_eq(l.phase, PS_PHASE_FINISHING); /* no more steps */
    ck_assert_int_eq(ps_life_finish(&l, 5), 0);
    int code = -1;
    ck_assert_int_eq(ps_life_take_shutdown(&l, &code), 1);
    ck_assert_int_eq(code, 1);
    ck_assert_int_eq(ps_life_take_shutdown(&l, &code), 0); /* once */
    ck_assert_int_eq(ps_life_close(&l), 1);
    ck_assert_int_eq(ps_life_close(&l), 0);
    ps_life_request_shutdown(&l, 2); /* closed: nothing pending */
    ck_assert_int_eq(ps_life_take_shutdown(&l, &code), 0);
    ck_assert_int_eq(l.phase, PS_PHASE_CLOSED);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_life");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_life_finish_once);
    tcase_add_test(tc, test_ps_life_shutdown_request);
    suite_add_tcase(s, tc);
    return s;
}
