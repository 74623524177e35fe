/* tests/run/test_runcfg_data.c — [data] set = idx | npy in the run
 * configuration (common/run/runcfg.h): the checks of runcfg_validate (the
 * four file keys, mean and std), runcfg_data_source, and
 * runcfg_data_prepare computing the normalization once and storing it as
 * text that reads back to the same floats (compared with a double-precision
 * mean and std of the files it wrote, within 1e-6 relative).
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/rng.h"
#include "common/run/runcfg.h"
#include "tests/lib/seed.h"

static int s_load(runcfg_t *c, int argc, const char *const *argv, char *err, size_t err_len) {
    char *av[24];
    av[0] = "kfac-train";
    for (int i = 0; i < argc; i++) av[i + 1] = (char *)argv[i];
    return runcfg_load(c, RUNCFG_ROLE_TRAIN, argc + 1, av, err, err_len);
}

/* Each bad [data] combination: a usage error (-EINVAL) whose message holds frag. */
START_TEST(test_runcfg_data_validate) {
    static const struct { const char *args[12]; int argc; const char *frag; } bad[] = {
        {{"--data.set", "npy"}, 2, "missing: train_images, train_labels, test_images, test_labels"},
        {{"--data.set", "idx", "--train-images", "a", "--train-labels", "b", "--test-images", "c"}, 8,
         "missing: test_labels"},
        {{"--data.set", "mnist", "--train-images", "a"}, 4, "train_images is read only with set = idx or npy"},
        {{"--data.set", "cifar10", "--data.mean", "0.5", "--data.std", "0.2"}, 6, "fixed constants"},
        {{"--data.set", "npy", "--train-images", "a", "--train-labels", "b", "--test-images", "c", "--test-labels", "d",
          "--data.mean", "0.5"}, 12, "mean is set but std is not"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        runcfg_t c;
        char err[1024] = "";
        int rc = s_load(&c, bad[i].argc, bad[i].args, err, sizeof err);
        ck_assert_msg(rc == -EINVAL, "case %zu accepted", i);
        ck_assert_msg(strstr(err, bad[i].frag) != NULL, "case %zu: '%s' lacks '%s'", i, err, bad[i].frag);
        runcfg_release(&c);
    }
    static const struct { const char *mean, *std, *frag; } lists[] = {
        {"0.1, x", "0.3, 0.3", "[data] mean = 0.1, x"},
        {"0.1", "0", "[data] std = 0"},
        {"0.1", "-1", "positive"},
        {"1,2,3,4", "1,1,1,1", "1 to 3"},
        {"0.1, 0.2", "0.3", "mean has 2 values but std has 1"},
        {"0.1 0.2", "0.3 0.3", "separated by commas"},
        {"nan", "1", "[data] mean = nan"},
    };
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        const char *args[] = {"--data.set", "npy", "--train-images", "a", "--train-labels", "b", "--test-images", "c",
                              "--test-labels", "d", "--data.mean", lists[i].mean, "--data.std", lists[i].std};
        runcfg_t c;
        char err[1024] = "";
        int rc = s_load(&c, 14, args, err, sizeof err);
        ck_assert_msg(rc == -EINVAL, "list case %zu accepted", i);
        ck_assert_msg(strstr(err, lists[i].frag) != NULL, "list case %zu: '%s' lacks '%s'", i, err, lists[i].frag);
        runcfg_release(&c);
    }
}
END_TEST

START_TEST(test_runcfg_data_source_fields) {
    const char *args[] = {"--data.set", "idx", "--data.dir", "/d", "--train-images", "ti", "--train-labels", "tl",
                          "--test-images", "/abs/ei", "--test-labels", "el", "--data.mean", "0.5, 0.25, 0.125",
                          "--data.std", "1,2,4"};
    runcfg_t c;
    char err[1024];
    ck_assert_msg(s_load(&c, 16, args, err, sizeof err) == 0, "%s", err);
    dataset_source_t *s = malloc(sizeof *s);
    ck_assert_int_eq(runcfg_data_source(&c, s, err, sizeof err), 0);
    ck_assert_int_eq(s->kind, DATASET_SOURCE_IDX);
    ck_assert_str_eq(s->name, "idx");
    ck_assert_str_eq(s->dir, "/d");
    ck_assert_str_eq(s->train_images, "ti");
    ck_assert_str_eq(s->test_images, "/abs/ei");
    ck_assert_int_eq(s->has_norm, 1);
    ck_assert_int_eq(s->norm.c, 3);
    ck_assert(s->norm.mean[1] == 0.25f && s->norm.std[2] == 4.0f);
    runcfg_release(&c);
    /* a built-in set: no files, no constants */
    ck_assert_msg(s_load(&c, 0, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(runcfg_data_source(&c, s, err, sizeof err), 0);
    ck_assert_int_eq(s->kind, DATASET_SOURCE_NAMED);
    ck_assert_str_eq(s->name, "mnist");
    ck_assert_int_eq(s->has_norm, 0);
    runcfg_release(&c);
    free(s);
}
END_TEST

/* Write a version 1.0 .npy file. */
static void s_npy(const char *path, const char *descr, const char *shape, const void *body, size_t len) {
    char dict[200];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    size_t hl = (size_t)n + 1, pad = (64 - (10 + hl) % 64) % 64;
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)((hl + pad) & 0xff),
                             (unsigned char)((hl + pad) >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(dict, 1, (size_t)n, f);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(body, 1, len, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* runcfg_data_prepare: flat float images read in the model's shape (3 x 2 x 2
 * in a model file the test writes), constants stored as text that parses
 * back to the same floats, near the double oracle; nothing to do when set. */
START_TEST(test_runcfg_data_prepare_computes_once) {
    uint64_t seed = test_seed();
    printf("test_runcfg_data_prepare_computes_once: seed %" PRIu64 "\n", seed);
    rng_t r;
    rng_seed(&r, seed);
    char dir[] = "/tmp/kfac-test-runcfg-data-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char model[128], img[128], lab[128];
    snprintf(model, sizeof model, "%s/m.model", dir);
    snprintf(img, sizeof img, "%s/x.npy", dir);
    snprintf(lab, sizeof lab, "%s/y.npy", dir);
    FILE *f = fopen(model, "w");
    fprintf(f, "input 3x2x2\nflatten\nfc name=out out=4\nsoftmax_xent\n");
    fclose(f);
    int n = 20 + (int)rng_below(&r, 30);
    float x[50 * 12];
    int64_t y[50];
    for (int i = 0; i < n * 12; i++) x[i] = (float)((i / 4) % 3 * 10.0 + rng_normal(&r) * (1 + (i / 4) % 3));
    for (int i = 0; i < n; i++) y[i] = (int64_t)rng_below(&r, 4);
    char shape[32], lshape[32];
    snprintf(shape, sizeof shape, "(%d, 12)", n);
    snprintf(lshape, sizeof lshape, "(%d,)", n);
    s_npy(img, "<f4", shape, x, (size_t)n * 12 * sizeof(float));
    s_npy(lab, "<i8", lshape, y, (size_t)n * sizeof(int64_t));
    const char *args[] = {"--model.file", model, "--data.set", "npy", "--data.dir", dir, "--train-images", "x.npy",
                          "--train-labels", "y.npy", "--test-images", "x.npy", "--test-labels", "y.npy"};
    runcfg_t c;
    char err[1024];
    ck_assert_msg(s_load(&c, 14, args, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(runcfg_data_prepare(&c, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(c.data_mean[0] && c.data_std[0], "nothing stored");
    ck_assert_msg(runcfg_validate(&c, err, sizeof err) == 0, "stored constants do not validate: %s", err);
    dataset_source_t *s = malloc(sizeof *s);
    ck_assert_int_eq(runcfg_data_source(&c, s, err, sizeof err), 0);
    ck_assert_int_eq(s->norm.c, 3);
    for (int ch = 0; ch < 3; ch++) {
        double sum = 0, sq = 0, m = (double)n * 4;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < 4; k++) sum += x[i * 12 + ch * 4 + k];
        double mean = sum / m;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < 4; k++) sq += (x[i * 12 + ch * 4 + k] - mean) * (x[i * 12 + ch * 4 + k] - mean);
        double sd = sqrt(sq / m);
        ck_assert_msg(fabs(s->norm.mean[ch] - mean) <= 1e-6 * fmax(1, fabs(mean)), "channel %d mean %.9g vs %.9g", ch,
                      s->norm.mean[ch], mean);
        ck_assert_msg(fabs(s->norm.std[ch] - sd) <= 1e-6 * sd, "channel %d std %.9g vs %.9g", ch, s->norm.std[ch], sd);
        ck_assert(s->norm.mean[ch] == (float)mean); /* the text reads back to the float nearest the double */
    }
    /* the constants now travel as configuration text (a Welcome) */
    char *text = runcfg_shared_text(&c);
    ck_assert_msg(strstr(text, "mean = ") && strstr(text, c.data_mean), "%s", text);
    free(text);
    /* a second call has nothing to do: the same text stays */
    char *before = strdup(c.data_mean);
    unlink(img); /* it would fail if it read the images again */
    ck_assert_msg(runcfg_data_prepare(&c, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(c.data_mean, before);
    free(before);
    free(s);
    runcfg_release(&c);
    /* a missing training file: the loader's errno and the path */
    ck_assert_msg(s_load(&c, 14, args, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(runcfg_data_prepare(&c, err, sizeof err), -ENOENT);
    ck_assert_msg(strstr(err, img) != NULL, "%s", err);
    runcfg_release(&c);
    unlink(lab);
    unlink(model);
    rmdir(dir);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("runcfg_data");
    TCase *tc = tcase_create("data");
    tcase_add_test(tc, test_runcfg_data_validate);
    tcase_add_test(tc, test_runcfg_data_source_fields);
    tcase_add_test(tc, test_runcfg_data_prepare_computes_once);
    suite_add_tcase(s, tc);
    return s;
}
