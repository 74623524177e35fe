/* tests/base/test_textbuf.c — common/base/textbuf.h: random appends (short
 * and long pieces, across the first 4096-byte allocation and the doublings)
 * give exactly the text one big snprintf-built reference holds; an empty
 * append still leaves a NUL-terminated text; a failed buffer ignores appends. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/base/textbuf.h"
#include "tests/lib/seed.h"

START_TEST(test_textbuf_matches_reference) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    static char ref[1 << 20];
    size_t ref_len = 0;
    textbuf_t b = {0};
    char piece[3000];
    for (int i = 0; i < 400; i++) {
        int n = (int)rng_below(&r, 2999);
        for (int j = 0; j < n; j++) piece[j] = (char)('a' + rng_below(&r, 26));
        piece[n] = '\0';
        int k = (int)rng_below(&r, 1000);
        textbuf_printf(&b, "%s|%d;", piece, k);
        ref_len += (size_t)snprintf(ref + ref_len, sizeof ref - ref_len, "%s|%d;", piece, k);
        ck_assert_msg(ref_len < sizeof ref, "reference buffer too small");
    }
    ck_assert(!b.failed);
    ck_assert_uint_eq(b.len, ref_len);
    ck_assert_uint_gt(b.cap, b.len);
    ck_assert_msg(memcmp(b.s, ref, ref_len + 1) == 0, "seed %llu: the text differs", (unsigned long long)seed);
    free(b.s);
}
END_TEST

START_TEST(test_textbuf_empty_and_failed) {
    textbuf_t b = {0};
    textbuf_printf(&b, "%s", "");
    ck_assert(!b.failed);
    ck_assert_ptr_nonnull(b.s);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.s, "");
    textbuf_printf(&b, "x=%d", 42);
    ck_assert_str_eq(b.s, "x=42");
    b.failed = 1;
    textbuf_printf(&b, "more");
    ck_assert_str_eq(b.s, "x=42");
    ck_assert_uint_eq(b.len, 4);
    free(b.s);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("textbuf");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_textbuf_matches_reference);
    tcase_add_test(tc, test_textbuf_empty_and_failed);
    suite_add_tcase(s, tc);
    return s;
}
