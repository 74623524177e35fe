/* tests/base/test_log.c — the logger's level parsing. */
#include <check.h>
#include <errno.h>

#include "common/base/log.h"

START_TEST(test_log_level_parse_names) {
    log_level_t l;
    ck_assert_int_eq(log_level_parse("debug", &l), 0);
    ck_assert_int_eq(l, LOG_LEVEL_DEBUG);
    ck_assert_int_eq(log_level_parse("warn", &l), 0);
    ck_assert_int_eq(l, LOG_LEVEL_WARN);
    ck_assert_int_eq(log_level_parse("loud", &l), -EINVAL);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_log_level_parse_names);
    suite_add_tcase(s, tc);
    return s;
}
