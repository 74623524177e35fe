/* tests/base/test_log.c — the logger's level parsing, and log_escape (peer
 * strings made safe to log: no control characters, capped length). */
#include <check.h>
#include <errno.h>
#include <string.h>

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

START_TEST(test_log_escape_controls_and_cap) {
    char b[16];
    ck_assert_str_eq(log_escape("host-1", b, sizeof b), "host-1");
    ck_assert_str_eq(log_escape(NULL, b, sizeof b), "");
    /* a forged log line, an escape sequence, a backslash, a byte >= 0x7f */
    ck_assert_str_eq(log_escape("a\nERR", b, sizeof b), "a\\x0aERR");
    ck_assert_str_eq(log_escape("\x1b[2J", b, sizeof b), "\\x1b[2J");
    ck_assert_str_eq(log_escape("a\\b", b, sizeof b), "a\\\\b");
    ck_assert_str_eq(log_escape("\xc3\xa9", b, sizeof b), "\\xc3\\xa9");
    /* exactly the room: kept whole; one more: cut with "..." */
    ck_assert_str_eq(log_escape("0123456789abcde", b, sizeof b), "0123456789abcde");
    ck_assert_str_eq(log_escape("0123456789abcdef", b, sizeof b), "0123456789ab...");
    /* an escape is never cut in half */
    ck_assert_str_eq(log_escape("0123456789\n\n", b, sizeof b), "0123456789...");
    char big[5000];
    memset(big, '\n', sizeof big - 1);
    big[sizeof big - 1] = 0;
    char out[256];
    log_escape(big, out, sizeof out);
    ck_assert_uint_le(strlen(out), sizeof out - 1);
    ck_assert_ptr_null(strchr(out, '\n'));
    ck_assert_str_eq(out + strlen(out) - 3, "...");
    ck_assert_str_eq(log_escape("abc", b, 3), "");
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_log_level_parse_names);
    tcase_add_test(tc, test_log_escape_controls_and_cap);
    suite_add_tcase(s, tc);
    return s;
}
