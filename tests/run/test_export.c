/* tests/run/test_export.c — the weight export (common/run/export.h):
 *   - the .npy header bytes against the NumPy format specification, version
 *     1.0 (numpy.lib.format): magic "\x93NUMPY", major 1, minor 0, header
 *     length as a little-endian uint16, an ASCII dict literal with 'descr',
 *     'fortran_order' and 'shape', padded with spaces and ended by '\n' so
 *     that magic + length + header is a multiple of 64 bytes;
 *   - the data after it: every float's bit pattern, little-endian (fresh
 *     random values, with NaN, infinities, -0 and subnormals);
 *   - the manifest: offsets and shapes of a small model worked out by hand,
 *     and the model text escaped as a JSON string.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/nn/nn.h"
#include "common/run/export.h"
#include "tests/lib/check_main.h"
#include "tests/lib/seed.h"

/* Check one header of n values against the specification. */
static void s_check_header(uint64_t n) {
    uint8_t buf[256];
    int len = export_npy_header(n, buf, sizeof buf);
    ck_assert_int_gt(len, 10);
    ck_assert_int_eq(len % 64, 0);
    ck_assert(memcmp(buf, "\x93NUMPY", 6) == 0);
    ck_assert_int_eq(buf[6], 1);
    ck_assert_int_eq(buf[7], 0);
    int hlen = buf[8] | (buf[9] << 8);
    ck_assert_int_eq(hlen, len - 10);
    char want[128];
    int wl = snprintf(want, sizeof want, "{'descr': '<f4', 'fortran_order': False, 'shape': (%llu,), }",
                      (unsigned long long)n);
    ck_assert_int_lt(wl + 1, hlen + 1);
    ck_assert_msg(memcmp(buf + 10, want, (size_t)wl) == 0, "header dict for n=%llu is not %s",
                  (unsigned long long)n, want);
    for (int i = 10 + wl; i < len - 1; i++) ck_assert_msg(buf[i] == ' ', "byte %d of the padding is %d", i, buf[i]);
    ck_assert_int_eq(buf[len - 1], '\n');
    for (int i = 10; i < len; i++) ck_assert(buf[i] >= 0x0a && buf[i] < 0x7f);
}

START_TEST(test_export_npy_header_spec) {
    uint64_t seed = test_seed();
    printf("test_export_npy_header_spec: seed %llu\n", (unsigned long long)seed);
    rng_t r;
    rng_seed(&r, seed);
    static const uint64_t fixed[] = {0, 1, 9, 10, 99, 235146, 4294967296ULL, UINT64_MAX};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) s_check_header(fixed[i]);
    for (int i = 0; i < 200; i++) s_check_header(rng_u64(&r) >> (rng_u64(&r) % 64));
    /* 10 + the 58-byte dict for (1,) + '\n' = 69: padded to 128, as NumPy's own files */
    uint8_t buf[256];
    ck_assert_int_eq(export_npy_header(1, buf, sizeof buf), 128);
    ck_assert_int_eq(export_npy_header(1, buf, 127), -ENOSPC);
}
END_TEST

START_TEST(test_export_npy_data_little_endian) {
    uint64_t seed = test_seed();
    printf("test_export_npy_data_little_endian: seed %llu\n", (unsigned long long)seed);
    rng_t r;
    rng_seed(&r, seed);
    size_t n = 1 + rng_u64(&r) % 5000;
    float *x = malloc(n * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)rng_u64(&r);
        memcpy(&x[i], &u, 4); /* any bit pattern: NaNs, infinities and subnormals included */
    }
    x[0] = -0.0f;
    if (n > 3) { x[1] = INFINITY; x[2] = 1e-45f; x[3] = NAN; }
    size_t len = 0;
    uint8_t *f = export_npy_f32(x, n, &len);
    ck_assert_ptr_nonnull(f);
    int h = f[8] | (f[9] << 8);
    ck_assert_uint_eq(len, (size_t)(10 + h) + 4 * n);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = f + 10 + h + 4 * i;
        uint32_t got = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24, want;
        memcpy(&want, &x[i], 4);
        ck_assert_msg(got == want, "value %zu: 0x%08x written as 0x%08x", i, want, got);
    }
    free(f);
    free(x);
}
END_TEST

START_TEST(test_export_manifest_layout) {
    /* conv 1->2 k3: w 2*1*3*3 = 18 at 0, b 2 at 18; fc 2*3*3 = 18 -> 4: w 72 at 20, b 4 at 92 */
    const char *model = "# a \"quoted\" \\ comment\twith a tab\ninput 1x5x5\nconv name=c1 out=2 k=3\nrelu\n"
                        "fc name=f1 out=4\nsoftmax_xent\n";
    char err[512] = "";
    net_t *net = net_parse(model, "test", 2, err, sizeof err);
    ck_assert_msg(net != NULL, "%s", err);
    ck_assert_uint_eq(net->n_params, 96);
    export_info_t info = {.step = 12, .test_acc = 0.5, .polyak_acc = NAN, .eval_n = 100, .eval_step = 10,
                          .program = "test", .dataset = "mnist"};
    char *j = export_manifest_json(net, &info);
    ck_assert_ptr_nonnull(j);
    static const char *const want[] = {
        "\"step\": 12,",
        "\"n_params\": 96,",
        "{\"name\": \"w\", \"shape\": [2, 1, 3, 3], \"offset\": 0, \"count\": 18}",
        "{\"name\": \"b\", \"shape\": [2], \"offset\": 18, \"count\": 2}",
        "{\"name\": \"w\", \"shape\": [4, 18], \"offset\": 20, \"count\": 72}",
        "{\"name\": \"b\", \"shape\": [4], \"offset\": 92, \"count\": 4}",
        "\"test_examples\": 100",
        "\"test_acc\": 0.5,",
        "\"polyak_acc\": null}", /* NaN has no JSON form */
        "\"input_normalization\": {\"mean\": [0.130700007], \"std\": [0.308099985]}",
        "\"model\": \"# a \\\"quoted\\\" \\\\ comment\\twith a tab\\ninput 1x5x5\\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(j, want[i]) != NULL, "manifest lacks %s:\n%s", want[i], j);
    free(j);
    net_free(&net);
    /* batch norm: gamma and beta among the parameters, the running
     * statistics at their offsets into the state arena */
    const char *bn = "input 1x4x4\nconv name=c1 out=3 k=3 bias=0\nbatchnorm name=bn1\nrelu\nfc name=f1 out=2\nsoftmax_xent\n";
    ck_assert_ptr_nonnull(net = net_parse(bn, "test", 2, err, sizeof err));
    ck_assert_uint_eq(net->n_state, 6);
    ck_assert_ptr_nonnull(j = export_manifest_json(net, &info));
    static const char *const want_bn[] = {
        "{\"name\": \"w\", \"shape\": [3, 1, 3, 3], \"offset\": 0, \"count\": 27}]}", /* no bias */
        "{\"name\": \"gamma\", \"shape\": [3], \"offset\": 27, \"count\": 3}, "
        "{\"name\": \"beta\", \"shape\": [3], \"offset\": 30, \"count\": 3}], \"state\": ["
        "{\"name\": \"run_mean\", \"shape\": [3], \"offset\": 0, \"count\": 3}, "
        "{\"name\": \"run_var\", \"shape\": [3], \"offset\": 3, \"count\": 3}]}",
        "{\"name\": \"w\", \"shape\": [2, 12], \"offset\": 33, \"count\": 24}",
        "\"state\": \"state.npy\"",
        "\"n_state\": 6,",
    };
    for (size_t i = 0; i < sizeof want_bn / sizeof want_bn[0]; i++)
        ck_assert_msg(strstr(j, want_bn[i]) != NULL, "manifest lacks %s:\n%s", want_bn[i], j);
    free(j);
    net_free(&net);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("export");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_export_npy_header_spec);
    tcase_add_test(tc, test_export_npy_data_little_endian);
    tcase_add_test(tc, test_export_manifest_layout);
    suite_add_tcase(s, tc);
    return s;
}
