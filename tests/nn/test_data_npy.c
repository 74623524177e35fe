/* tests/nn/test_data_npy.c — the .npy header reader (common/nn/npy.h):
 * headers as numpy writes them (versions 1.0 and 2.0, every accepted dtype,
 * 1 to 4 dimensions, keys in any order, Python 2's "5L"), and every
 * malformed preamble and dict refused with a message naming the field.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/nn/npy.h"
#include "tests/lib/seed.h"

/* Parse dict text; 0 or -EINVAL with err. */
static int s_dict(const char *dict, npy_header_t *h, char *err, size_t err_len) {
    memset(h, 0, sizeof *h);
    err[0] = 0;
    return npy_parse_dict(dict, strlen(dict), h, err, err_len);
}

START_TEST(test_npy_dict_as_numpy_writes_it) {
    npy_header_t h;
    char err[256];
    ck_assert_int_eq(s_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }      \n", &h, err,
                            sizeof err), 0);
    ck_assert_int_eq(h.dtype, NPY_DTYPE_F32);
    ck_assert_int_eq(h.ndim, 3);
    ck_assert(h.shape[0] == 60000 && h.shape[1] == 28 && h.shape[2] == 28);
    ck_assert(npy_count(&h) == 60000LL * 784);
    char text[64];
    npy_shape_text(&h, text, sizeof text);
    ck_assert_str_eq(text, "(60000, 28, 28)");

    ck_assert_int_eq(s_dict("{'descr': '|u1', 'fortran_order': False, 'shape': (7,), }", &h, err, sizeof err), 0);
    ck_assert_int_eq(h.dtype, NPY_DTYPE_U8);
    ck_assert_int_eq(h.ndim, 1);
    npy_shape_text(&h, text, sizeof text);
    ck_assert_str_eq(text, "(7,)");
    /* any key order, double quotes, no trailing comma, Python 2 longs */
    ck_assert_int_eq(s_dict("{\"shape\": (3L, 2L), \"fortran_order\": False, \"descr\": \"<i8\"}", &h, err, sizeof err), 0);
    ck_assert_int_eq(h.dtype, NPY_DTYPE_I64);
    ck_assert(h.ndim == 2 && h.shape[0] == 3 && h.shape[1] == 2);
    ck_assert_int_eq(s_dict("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3, 4, 5)}", &h, err, sizeof err), 0);
    ck_assert_int_eq(h.dtype, NPY_DTYPE_I32);
    ck_assert(h.ndim == 4 && npy_count(&h) == 120);
    ck_assert_int_eq(s_dict("{'descr': '|i1', 'fortran_order': False, 'shape': ()}", &h, err, sizeof err), 0);
    ck_assert(h.ndim == 0 && npy_count(&h) == 1);
    ck_assert_uint_eq(npy_dtype_size(NPY_DTYPE_U8), 1);
    ck_assert_uint_eq(npy_dtype_size(NPY_DTYPE_I32), 4);
    ck_assert_uint_eq(npy_dtype_size(NPY_DTYPE_I64), 8);
    ck_assert_uint_eq(npy_dtype_size(NPY_DTYPE_F32), 4);
}
END_TEST

/* Each malformed dict: -EINVAL and the message names the field. */
START_TEST(test_npy_dict_errors_name_the_field) {
    static const struct { const char *dict, *field, *also; } cases[] = {
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (2,)}", "descr", "big-endian"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}", "descr", "astype"},
        {"{'descr': '<U3', 'fortran_order': False, 'shape': (2,)}", "descr", "'<U3'"},
        {"{'descr': 5, 'fortran_order': False, 'shape': (2,)}", "descr", "quoted string"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3)}", "fortran_order", "ascontiguousarray"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", "fortran_order", "True or False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", "shape", "(N,)"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", "shape", "non-negative"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", "shape", "tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", "shape", "','"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4, 5, 6, 7, 8, 9)}", "shape", "dimensions"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "shape", "too large"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4000000000, 4000000000)}", "shape", "too many"},
        {"{'descr': '<f4', 'fortran_order': False}", "shape", "missing"},
        {"{'fortran_order': False, 'shape': (2,)}", "descr", "missing"},
        {"{'descr': '<f4', 'shape': (2,)}", "fortran_order", "missing"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", "descr", "twice"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", "extra", "unknown key"},
        {"{'descr': '<f4' 'fortran_order': False}", "descr", "','"},
        {"{'descr' '<f4'}", "descr", "':'"},
        {"{'descr': '<f4, 'fortran_order': False}", "descr", "'<f4, '"},
        {"'descr': '<f4'", "header", "'{'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk", "header", "after the dict"},
        {"{'descr': '<f\\4', 'fortran_order': False, 'shape': (2,)}", "descr", "character"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,", "shape", ""},
        {"", "header", "'{'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        npy_header_t h;
        char err[512];
        int rc = s_dict(cases[i].dict, &h, err, sizeof err);
        ck_assert_msg(rc == -EINVAL, "case %zu (%s): accepted", i, cases[i].dict);
        ck_assert_msg(strstr(err, cases[i].field) != NULL, "case %zu: '%s' does not name %s", i, err, cases[i].field);
        ck_assert_msg(strstr(err, cases[i].also) != NULL, "case %zu: '%s' lacks '%s'", i, err, cases[i].also);
    }
}
END_TEST

START_TEST(test_npy_preamble_versions) {
    npy_header_t h;
    size_t dict_len = 0, pre = 0;
    char err[256];
    uint8_t v1[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0x76, 0x00};
    ck_assert_int_eq(npy_parse_preamble(v1, sizeof v1, &h, &dict_len, &pre, err, sizeof err), 0);
    ck_assert(h.major == 1 && h.minor == 0 && dict_len == 0x76 && pre == 10 && h.data_offset == 128);
    uint8_t v2[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0x34, 0x12, 0x00, 0x00};
    ck_assert_int_eq(npy_parse_preamble(v2, sizeof v2, &h, &dict_len, &pre, err, sizeof err), 0);
    ck_assert(h.major == 2 && dict_len == 0x1234 && pre == 12 && h.data_offset == 12 + 0x1234);
    /* version 2 with only 10 bytes seen so far: asks for the whole preamble */
    ck_assert_int_eq(npy_parse_preamble(v2, 10, &h, &dict_len, &pre, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "header length") != NULL, "%s", err);
}
END_TEST

START_TEST(test_npy_preamble_errors_name_the_field) {
    static const struct { uint8_t b[12]; size_t n; const char *field; } cases[] = {
        {{'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0}, 10, "magic"},                      /* a zip file (.npz) */
        {{0x93, 'N', 'U', 'M', 'P', 'X', 1, 0, 10, 0}, 10, "magic"},
        {{0x93, 'N', 'U', 'M'}, 4, "magic"},
        {{0}, 0, "magic"},
        {{0x93, 'N', 'U', 'M', 'P', 'Y', 1}, 7, "version"},
        {{0x93, 'N', 'U', 'M', 'P', 'Y', 3, 0, 10, 0, 0, 0}, 12, "version"},
        {{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 1, 10, 0}, 10, "version"},
        {{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 10}, 9, "header length"},
        {{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0}, 10, "header length"},
        {{0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0, 2, 0}, 12, "header length"}, /* 128 KiB of header */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        npy_header_t h;
        size_t dict_len = 0, pre = 0;
        char err[256] = "";
        int rc = npy_parse_preamble(cases[i].b, cases[i].n, &h, &dict_len, &pre, err, sizeof err);
        ck_assert_msg(rc == -EINVAL, "case %zu accepted", i);
        ck_assert_msg(strstr(err, cases[i].field) != NULL, "case %zu: '%s' does not name %s", i, err, cases[i].field);
    }
}
END_TEST

/* Random mutations of valid headers (bytes replaced, inserted, deleted,
 * truncated) never crash and never read outside the text: each either
 * parses to a consistent header or is -EINVAL with a message. */
START_TEST(test_npy_dict_mutations_never_crash) {
    uint64_t seed = test_seed();
    printf("test_npy_dict_mutations_never_crash: seed %llu\n", (unsigned long long)seed);
    rng_t r;
    rng_seed(&r, seed);
    static const char *const base[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }          \n",
        "{'descr': '|u1', 'fortran_order': False, 'shape': (7,), }\n",
        "{\"shape\": (3L, 2L), \"fortran_order\": False, \"descr\": \"<i8\"}",
    };
    static const char alphabet[] = "{}()[]:,'\" 0123456789L-TrueFalsedescrshapefortran_order<|>fiu\n\\";
    int parsed = 0, refused = 0;
    for (int iter = 0; iter < 20000; iter++) {
        char buf[256];
        const char *b = base[rng_below(&r, 3)];
        size_t n = strlen(b);
        memcpy(buf, b, n);
        int edits = 1 + (int)rng_below(&r, 4);
        for (int e = 0; e < edits; e++) {
            size_t at = n ? rng_below(&r, (uint32_t)n) : 0;
            char ch = alphabet[rng_below(&r, sizeof alphabet - 1)];
            switch (rng_below(&r, 4)) {
            case 0: if (n) buf[at] = ch; break;
            case 1: if (n < sizeof buf - 1) { memmove(buf + at + 1, buf + at, n - at); buf[at] = ch; n++; } break;
            case 2: if (n) { memmove(buf + at, buf + at + 1, n - at - 1); n--; } break;
            default: n = at; break;
            }
        }
        /* exactly n bytes, no terminator: a read past the end would be caught under ASan */
        char *text = malloc(n ? n : 1);
        memcpy(text, buf, n);
        npy_header_t h;
        memset(&h, 0, sizeof h);
        char err[512] = "";
        int rc = npy_parse_dict(text, n, &h, err, sizeof err);
        free(text);
        if (rc == 0) {
            parsed++;
            ck_assert(h.ndim >= 0 && h.ndim <= NPY_MAX_DIMS);
            for (int d = 0; d < h.ndim; d++) ck_assert(h.shape[d] >= 0);
            ck_assert(npy_dtype_size(h.dtype) > 0);
        } else {
            refused++;
            ck_assert_int_eq(rc, -EINVAL);
            ck_assert_msg(err[0] != 0, "refused without a message");
        }
    }
    printf("  %d parsed, %d refused\n", parsed, refused);
    ck_assert_int_gt(refused, 0);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("npy");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_npy_dict_as_numpy_writes_it);
    tcase_add_test(tc, test_npy_dict_errors_name_the_field);
    tcase_add_test(tc, test_npy_preamble_versions);
    tcase_add_test(tc, test_npy_preamble_errors_name_the_field);
    tcase_add_test(tc, test_npy_dict_mutations_never_crash);
    suite_add_tcase(s, tc);
    return s;
}
