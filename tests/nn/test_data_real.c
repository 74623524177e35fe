/* tests/nn/test_data_real.c — the real MNIST and Fashion-MNIST test
 * splits under data/ (`make data`): sizes, class histograms, and the
 * normalization with the training-set constants (test-set mean near 0,
 * std near 1). Skipped (exit 77) when the files are not there.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "common/nn/data.h"
#include "tests/lib/check_main.h"
#include "tests/lib/data_skip.h"

int suite_skip_reason(char *why, size_t why_len) {
    static const char *const probes[] = {"data/mnist/t10k-images-idx3-ubyte", "data/mnist/t10k-labels-idx1-ubyte",
                                         "data/fashion-mnist/t10k-images-idx3-ubyte",
                                         "data/fashion-mnist/t10k-labels-idx1-ubyte"};
    return test_skip_without_files(probes, 4, why, why_len);
}

static void s_check_real(const char *name, int lo, int hi) {
    dataset_t *ds = NULL;
    char err[1024] = "";
    ck_assert_msg(dataset_load_named(name, "data", 0, &ds, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ds->n, 10000);
    ck_assert_int_eq(ds->c, 1);
    ck_assert_int_eq(ds->h, 28);
    ck_assert_int_eq(ds->w, 28);
    int hist[10] = {0};
    for (int i = 0; i < ds->n; i++) {
        ck_assert(ds->y[i] >= 0 && ds->y[i] < 10);
        hist[ds->y[i]]++;
    }
    for (int k = 0; k < 10; k++) ck_assert_msg(hist[k] >= lo && hist[k] <= hi, "%s: class %d has %d", name, k, hist[k]);
    /* normalized with training-set statistics: test-set mean near 0, std near 1 */
    double s = 0, s2 = 0;
    size_t m = (size_t)ds->n * 784;
    for (size_t i = 0; i < m; i++) {
        s += ds->x[i];
        s2 += (double)ds->x[i] * ds->x[i];
    }
    double mean = s / m, sd = sqrt(s2 / m - mean * mean);
    ck_assert_msg(fabs(mean) < 0.05 && fabs(sd - 1.0) < 0.05, "%s: mean %g std %g", name, mean, sd);
    dataset_free(&ds);
}

START_TEST(test_mnist_real_test_split) {
    /* MNIST's test classes hold 892..1135 examples */
    s_check_real("mnist", 850, 1200);
}
END_TEST

START_TEST(test_fashion_mnist_real_test_split) {
    /* Fashion-MNIST's test split is balanced: 1000 per class */
    s_check_real("fashion-mnist", 1000, 1000);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("data_real");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_mnist_real_test_split);
    tcase_add_test(tc, test_fashion_mnist_real_test_split);
    suite_add_tcase(s, tc);
    return s;
}
