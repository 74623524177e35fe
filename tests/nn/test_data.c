/* tests/nn/test_data.c — the data-set loaders: IDX (plain and gzip) and
 * CIFAR-10 files generated in a mkdtemp directory, every corrupt-file error,
 * loading by name, the normalization constants and truncation. The batcher
 * is tested in test_data_batcher.c, the real MNIST / Fashion-MNIST files in
 * test_data_real.c, user files ([data] set = idx | npy) in test_data_user.c.
 *
 * Normalized values are compared exactly against the float formula
 * ((float)v / 255.0f - mean) / std (the loader must evaluate exactly that),
 * and within 1e-5 against the same formula in double (inputs in [0, 255],
 * results below 4 in magnitude: float rounding of three operations is under
 * 1e-6).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/nn/data.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"
#include "tests/nn/test_data_fixture.h"

/* ---- IDX round trips ---------------------------------------------------- */

static void s_idx_roundtrip(int gz) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    tmpdir_t t;
    s_tmp_new(&t);
    uint32_t n = 1 + rng_below(&r, 40), h = 1 + rng_below(&r, 12), w = 1 + rng_below(&r, 12);
    size_t npix = (size_t)n * h * w;
    uint8_t *pix = malloc(npix), *lab = malloc(n);
    s_fill_random(&r, pix, npix, 256);
    s_fill_random(&r, lab, n, 10);
    pix[0] = 0;
    pix[npix - 1] = 255;
    char ip[512], lp[512];
    s_join(ip, sizeof ip, t.path, gz ? "fashion-images.gz" : "images");
    s_join(lp, sizeof lp, t.path, gz ? "fashion-labels.gz" : "labels");
    s_write_idx_images(ip, 0x803, n, h, w, pix, npix, gz);
    s_write_idx_labels(lp, 0x801, n, lab, n, gz);

    dataset_t *ds = NULL;
    char err[512] = "";
    int rc = dataset_load_idx(ip, lp, &ds, err, sizeof err);
    ck_assert_msg(rc == 0, "seed %llu: %s", (unsigned long long)seed, err);
    ck_assert_int_eq(ds->n, (int)n);
    ck_assert_int_eq(ds->c, 1);
    ck_assert_int_eq(ds->h, (int)h);
    ck_assert_int_eq(ds->w, (int)w);
    ck_assert_int_eq(ds->n_classes, 10);
    ck_assert_str_eq(ds->name, gz ? "fashion-mnist" : "mnist");
    float mean = gz ? 0.2860f : 0.1307f, std = gz ? 0.3530f : 0.3081f;
    ck_assert(ds->mean[0] == mean && ds->std[0] == std);
    s_check_values(ds, pix, (size_t)h * w, 0, &mean, &std, seed);
    for (uint32_t i = 0; i < n; i++) ck_assert_int_eq(ds->y[i], lab[i]);
    dataset_free(&ds);
    ck_assert_ptr_null(ds);
    dataset_free(&ds); /* idempotent */

    /* explicit constants */
    dataset_norm_t norm = {.c = 1, .mean = {0.5f}, .std = {0.25f}};
    rc = dataset_load_idx_norm(ip, lp, &norm, "custom", &ds, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(ds->name, "custom");
    s_check_values(ds, pix, (size_t)h * w, 0, norm.mean, norm.std, seed);
    dataset_free(&ds);

    free(pix);
    free(lab);
    s_rm_rf(t.path);
}

START_TEST(test_idx_plain_roundtrip) { s_idx_roundtrip(0); }
END_TEST

START_TEST(test_idx_gz_roundtrip) { s_idx_roundtrip(1); }
END_TEST

/* ---- IDX errors --------------------------------------------------------- */

/* Load must fail with a message naming `file` and containing `what` and the fix. */
static void s_expect_idx_error(const char *ip, const char *lp, const char *file, const char *what) {
    dataset_t *ds = (dataset_t *)0x1;
    char err[1024] = "";
    int rc = dataset_load_idx(ip, lp, &ds, err, sizeof err);
    ck_assert_msg(rc < 0, "expected an error mentioning '%s', got success", what);
    ck_assert_ptr_null(ds);
    ck_assert_msg(strstr(err, file) != NULL, "message does not name %s: %s", file, err);
    ck_assert_msg(strstr(err, what) != NULL, "message lacks '%s': %s", what, err);
    ck_assert_msg(strstr(err, "make data") && strstr(err, "sh tools/fetch-data.sh"),
                  "message lacks the fix: %s", err);
}

typedef struct idx_case {
    tmpdir_t t;
    char ip[512], lp[512];
    uint8_t pix[5 * 4 * 4], lab[5];
} idx_case_t;

/* A valid 5 x 4 x 4 pair to break in one place. */
static void s_idx_case(idx_case_t *c) {
    s_tmp_new(&c->t);
    s_join(c->ip, sizeof c->ip, c->t.path, "img-idx3-ubyte");
    s_join(c->lp, sizeof c->lp, c->t.path, "lab-idx1-ubyte");
    for (int i = 0; i < 80; i++) c->pix[i] = (uint8_t)(i * 3);
    for (int i = 0; i < 5; i++) c->lab[i] = (uint8_t)(9 - i);
    s_write_idx_images(c->ip, 0x803, 5, 4, 4, c->pix, 80, 0);
    s_write_idx_labels(c->lp, 0x801, 5, c->lab, 5, 0);
}

START_TEST(test_idx_wrong_magic) {
    idx_case_t c;
    for (int gz = 0; gz <= 1; gz++) {
        s_idx_case(&c);
        s_write_idx_images(c.ip, 0x801, 5, 4, 4, c.pix, 80, gz);  /* a label magic */
        s_expect_idx_error(c.ip, c.lp, c.ip, "wrong magic 0x00000801");
        s_write_idx_images(c.ip, 0x12345678, 5, 4, 4, c.pix, 80, gz);
        s_expect_idx_error(c.ip, c.lp, c.ip, "wrong magic 0x12345678");
        s_write_idx_images(c.ip, 0x803, 5, 4, 4, c.pix, 80, gz);
        s_write_idx_labels(c.lp, 0x803, 5, c.lab, 5, gz);
        s_expect_idx_error(c.ip, c.lp, c.lp, "wrong magic 0x00000803");
        s_rm_rf(c.t.path);
    }
}
END_TEST

START_TEST(test_idx_truncated_images) {
    idx_case_t c;
    for (int gz = 0; gz <= 1; gz++) {
        s_idx_case(&c);
        s_write_idx_images(c.ip, 0x803, 5, 4, 4, c.pix, 70, gz);
        s_expect_idx_error(c.ip, c.lp, c.ip, "truncated: expected 96 bytes got 86");
        s_write(c.ip, "\0\0\x08\x03\0\0\0\x05\0\0", 10, NULL, 0, gz);  /* half a header */
        s_expect_idx_error(c.ip, c.lp, c.ip, "truncated: expected 16 bytes got 10");
        s_write(c.ip, "\0\0", 2, NULL, 0, gz);
        s_expect_idx_error(c.ip, c.lp, c.ip, "truncated: expected 16 bytes got 2");
        /* a header announcing 784 MB in a tiny file: rejected, not allocated */
        s_write_idx_images(c.ip, 0x803, 1000000, 28, 28, c.pix, 80, gz);
        s_expect_idx_error(c.ip, c.lp, c.ip, "truncated: expected 784000016 bytes got 96");
        /* extra bytes after the last image */
        uint8_t more[81];
        memcpy(more, c.pix, 80);
        more[80] = 7;
        s_write_idx_images(c.ip, 0x803, 5, 4, 4, more, 81, gz);
        s_expect_idx_error(c.ip, c.lp, c.ip, "extra data");
        s_rm_rf(c.t.path);
    }
}
END_TEST

START_TEST(test_idx_truncated_gzip_stream) {
    idx_case_t c;
    s_idx_case(&c);
    /* incompressible pixels so the compressed file is long enough to cut */
    enum { N = 50, HW = 16 * 16 };
    uint8_t *pix = malloc(N * HW), lab[N];
    rng_t r;
    rng_seed(&r, test_seed());
    s_fill_random(&r, pix, N * HW, 256);
    s_fill_random(&r, lab, N, 10);
    s_write_idx_images(c.ip, 0x803, N, 16, 16, pix, N * HW, 1);
    s_write_idx_labels(c.lp, 0x801, N, lab, N, 0);
    FILE *f = fopen(c.ip, "rb");
    ck_assert_ptr_nonnull(f);
    uint8_t *gzbuf = malloc(N * HW * 2);
    size_t len = fread(gzbuf, 1, N * HW * 2, f);
    fclose(f);
    ck_assert_uint_gt(len, 1000);
    s_write(c.ip, gzbuf, len / 2, NULL, 0, 0);
    dataset_t *ds = NULL;
    char err[1024] = "";
    ck_assert_int_lt(dataset_load_idx(c.ip, c.lp, &ds, err, sizeof err), 0);
    ck_assert_ptr_null(ds);
    ck_assert_msg(strstr(err, c.ip) && (strstr(err, "truncated: expected 12816 bytes") ||
                                        strstr(err, "corrupt gzip")), "%s", err);
    free(gzbuf);
    free(pix);
    s_rm_rf(c.t.path);
}
END_TEST

START_TEST(test_idx_truncated_labels) {
    idx_case_t c;
    for (int gz = 0; gz <= 1; gz++) {
        s_idx_case(&c);
        s_write_idx_labels(c.lp, 0x801, 5, c.lab, 3, gz);
        s_expect_idx_error(c.ip, c.lp, c.lp, "truncated: expected 13 bytes got 11");
        s_rm_rf(c.t.path);
    }
}
END_TEST

START_TEST(test_idx_bad_dimensions) {
    idx_case_t c;
    s_idx_case(&c);
    const uint32_t dims[][3] = {{0, 4, 4}, {5, 0, 4}, {5, 4, 0}, {0xffffffffu, 0xffffffffu, 0xffffffffu},
                                {60000, 65536, 65536}, {2000000, 28, 28}, {1, 100000, 100000}};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        s_write_idx_images(c.ip, 0x803, dims[k][0], dims[k][1], dims[k][2], c.pix, 80, 0);
        char what[128];
        snprintf(what, sizeof what, "bad dimensions %u x %u x %u", dims[k][0], dims[k][1], dims[k][2]);
        s_expect_idx_error(c.ip, c.lp, c.ip, what);
    }
    s_write_idx_labels(c.lp, 0x801, 0, NULL, 0, 0);
    s_write_idx_images(c.ip, 0x803, 5, 4, 4, c.pix, 80, 0);
    s_expect_idx_error(c.ip, c.lp, c.lp, "bad dimensions: 0 labels");
    s_rm_rf(c.t.path);
}
END_TEST

START_TEST(test_idx_label_out_of_range) {
    idx_case_t c;
    s_idx_case(&c);
    c.lab[3] = 10;
    s_write_idx_labels(c.lp, 0x801, 5, c.lab, 5, 0);
    s_expect_idx_error(c.ip, c.lp, c.lp, "label 10 at index 3 out of range [0, 10)");
    c.lab[3] = 255;
    s_write_idx_labels(c.lp, 0x801, 5, c.lab, 5, 1);
    s_expect_idx_error(c.ip, c.lp, c.lp, "label 255 at index 3 out of range");
    s_rm_rf(c.t.path);
}
END_TEST

START_TEST(test_idx_count_mismatch) {
    idx_case_t c;
    s_idx_case(&c);
    s_write_idx_labels(c.lp, 0x801, 4, c.lab, 4, 0);
    s_expect_idx_error(c.ip, c.lp, c.ip, "image/label count mismatch");
    s_expect_idx_error(c.ip, c.lp, c.lp, "has 5 images");
    s_expect_idx_error(c.ip, c.lp, c.lp, "has 4 labels");
    s_rm_rf(c.t.path);
}
END_TEST

START_TEST(test_idx_missing_file) {
    idx_case_t c;
    s_idx_case(&c);
    char nope[600];
    s_join(nope, sizeof nope, c.t.path, "no-such-file");
    s_expect_idx_error(nope, c.lp, nope, "cannot open: No such file");
    s_expect_idx_error(c.ip, nope, nope, "cannot open: No such file");
    s_expect_idx_error(c.t.path, c.lp, c.t.path, "not a regular file");
    /* tiny or absent error buffers are fine */
    dataset_t *ds = NULL;
    char small[8];
    memset(small, 'x', sizeof small);
    ck_assert_int_eq(dataset_load_idx(nope, c.lp, &ds, small, sizeof small), -ENOENT);
    ck_assert_uint_eq(strlen(small), 7);
    ck_assert_int_eq(dataset_load_idx(nope, c.lp, &ds, NULL, 0), -ENOENT);
    ck_assert_int_eq(dataset_load_idx(NULL, c.lp, &ds, NULL, 0), -EINVAL);
    ck_assert_ptr_null(ds);
    s_rm_rf(c.t.path);
}
END_TEST

/* ---- CIFAR-10 ----------------------------------------------------------- */

#define REC 3073

static uint8_t *s_cifar_records(rng_t *r, int n) {
    uint8_t *b = malloc((size_t)n * REC);
    s_fill_random(r, b, (size_t)n * REC, 256);
    for (int i = 0; i < n; i++) b[(size_t)i * REC] = (uint8_t)rng_below(r, 10);
    return b;
}

START_TEST(test_cifar10_load_batches) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    tmpdir_t t;
    s_tmp_new(&t);
    int n1 = 1 + (int)rng_below(&r, 5), n2 = 1 + (int)rng_below(&r, 5);
    uint8_t *all = malloc((size_t)(n1 + n2) * REC);
    uint8_t *b1 = s_cifar_records(&r, n1), *b2 = s_cifar_records(&r, n2);
    memcpy(all, b1, (size_t)n1 * REC);
    memcpy(all + (size_t)n1 * REC, b2, (size_t)n2 * REC);
    char p1[512], p2[512];
    s_join(p1, sizeof p1, t.path, "data_batch_1.bin");
    s_join(p2, sizeof p2, t.path, "data_batch_2.bin");
    s_write(p1, b1, (size_t)n1 * REC, NULL, 0, 0);
    s_write(p2, b2, (size_t)n2 * REC, NULL, 0, 1);  /* a gzip batch is read too */
    const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, std[3] = {0.2470f, 0.2435f, 0.2616f};

    const char *one[] = {p1};
    dataset_t *ds = NULL;
    char err[1024] = "";
    ck_assert_msg(dataset_load_cifar10(one, 1, &ds, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ds->n, n1);
    ck_assert_int_eq(ds->c, 3);
    ck_assert_int_eq(ds->h, 32);
    ck_assert_int_eq(ds->w, 32);
    ck_assert_int_eq(ds->n_classes, 10);
    ck_assert_str_eq(ds->name, "cifar10");
    s_check_values(ds, b1, REC, 1, mean, std, seed);
    dataset_free(&ds);

    const char *both[] = {p1, p2};
    ck_assert_msg(dataset_load_cifar10(both, 2, &ds, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ds->n, n1 + n2);
    s_check_values(ds, all, REC, 1, mean, std, seed);
    for (int i = 0; i < n1 + n2; i++) ck_assert_int_eq(ds->y[i], all[(size_t)i * REC]);
    /* channel planes: the R plane of example 0 comes first, then G, then B */
    ck_assert(ds->x[1024] == ((float)all[1 + 1024] / 255.0f - mean[1]) / std[1]);
    dataset_free(&ds);

    free(all);
    free(b1);
    free(b2);
    s_rm_rf(t.path);
}
END_TEST

/* Load must fail, naming `file`, saying `what` and where CIFAR-10 goes. */
static void s_expect_cifar_error(const char *const *paths, int n, const char *file, const char *what) {
    dataset_t *ds = NULL;
    char err[2048] = "";
    ck_assert_int_lt(dataset_load_cifar10(paths, n, &ds, err, sizeof err), 0);
    ck_assert_ptr_null(ds);
    ck_assert_msg(strstr(err, file) != NULL, "message does not name %s: %s", file, err);
    ck_assert_msg(strstr(err, what) != NULL, "message lacks '%s': %s", what, err);
    ck_assert_msg(strstr(err, "cifar-10-binary.tar.gz"), "message lacks the fix: %s", err);
}

START_TEST(test_cifar10_errors) {
    rng_t r;
    rng_seed(&r, test_seed());
    tmpdir_t t;
    s_tmp_new(&t);
    char p1[512], p2[512], nope[512];
    s_join(p1, sizeof p1, t.path, "data_batch_1.bin");
    s_join(p2, sizeof p2, t.path, "data_batch_2.bin");
    s_join(nope, sizeof nope, t.path, "data_batch_3.bin");
    uint8_t *b = s_cifar_records(&r, 3);
    s_write(p1, b, 2 * REC, NULL, 0, 0);
    s_write(p2, b, 2 * REC + 100, NULL, 0, 0);
    const char *ok_bad[] = {p1, p2};
    s_expect_cifar_error(ok_bad, 2, p2, "truncated: expected 9219 bytes got 6246");
    s_write(p2, b, 2 * REC + 100, NULL, 0, 1);
    s_expect_cifar_error(ok_bad, 2, p2, "truncated: expected 9219 bytes got 6246");
    s_write(p2, NULL, 0, NULL, 0, 0);
    s_expect_cifar_error(ok_bad, 2, p2, "empty: no records");
    b[REC] = 11;
    s_write(p2, b, 3 * REC, NULL, 0, 0);
    s_expect_cifar_error(ok_bad, 2, p2, "label 11 in record 1 out of range [0, 10)");
    const char *missing[] = {p1, nope};
    s_expect_cifar_error(missing, 2, nope, "cannot open: No such file");
    s_expect_cifar_error(missing, 2, t.path, "put data_batch_1.bin..data_batch_5.bin and test_batch.bin in");
    dataset_t *ds = NULL;
    ck_assert_int_eq(dataset_load_cifar10(missing, 0, &ds, NULL, 0), -EINVAL);
    free(b);
    s_rm_rf(t.path);
}
END_TEST

/* ---- by name, normalization, truncation --------------------------------- */

START_TEST(test_dataset_load_named_layout) {
    rng_t r;
    rng_seed(&r, test_seed());
    tmpdir_t t;
    s_tmp_new(&t);
    char p[1024], d[600];
    uint8_t pix[3 * 28 * 28], lab[3] = {1, 2, 3};
    s_fill_random(&r, pix, sizeof pix, 256);
    s_join(d, sizeof d, t.path, "mnist");
    mkdir(d, 0700);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", d);
    s_write_idx_images(p, 0x803, 3, 28, 28, pix, sizeof pix, 0);
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", d);
    s_write_idx_labels(p, 0x801, 3, lab, 3, 0);
    s_join(d, sizeof d, t.path, "fashion-mnist");
    mkdir(d, 0700);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d);
    s_write_idx_images(p, 0x803, 2, 28, 28, pix, 2 * 28 * 28, 1);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", d);
    s_write_idx_labels(p, 0x801, 2, lab, 2, 1);
    s_join(d, sizeof d, t.path, DATASET_CIFAR10_SUBDIR);
    mkdir(d, 0700);
    snprintf(p, sizeof p, "%s/test_batch.bin", d);
    uint8_t *rec = s_cifar_records(&r, 4);
    s_write(p, rec, 4 * REC, NULL, 0, 0);

    dataset_t *ds = NULL;
    char err[2048] = "";
    ck_assert_msg(dataset_load_named("mnist", t.path, 0, &ds, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ds->n, 3);
    ck_assert_str_eq(ds->name, "mnist");
    ck_assert(ds->x[0] == ((float)pix[0] / 255.0f - 0.1307f) / 0.3081f);
    dataset_free(&ds);
    ck_assert_msg(dataset_load_named("fashion-mnist", t.path, 1, &ds, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ds->n, 2);
    ck_assert_str_eq(ds->name, "fashion-mnist");
    ck_assert(ds->x[5] == ((float)pix[5] / 255.0f - 0.2860f) / 0.3530f);
    dataset_free(&ds);
    ck_assert_msg(dataset_load_named("cifar10", t.path, 0, &ds, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ds->n, 4);
    ck_assert_int_eq(ds->c, 3);
    ck_assert_int_eq(ds->y[2], rec[2 * REC]);
    dataset_free(&ds);

    /* missing splits name the file and the fix */
    ck_assert_int_eq(dataset_load_named("mnist", t.path, 1, &ds, err, sizeof err), -ENOENT);
    ck_assert_msg(strstr(err, "mnist/train-images-idx3-ubyte") && strstr(err, "make data"), "%s", err);
    ck_assert_int_eq(dataset_load_named("cifar10", t.path, 1, &ds, err, sizeof err), -ENOENT);
    ck_assert_msg(strstr(err, DATASET_CIFAR10_SUBDIR "/data_batch_1.bin: cannot open") &&
                  strstr(err, "cifar-10-binary.tar.gz"), "%s", err);
    ck_assert_int_eq(dataset_load_named("imagenet", t.path, 1, &ds, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "unknown data set 'imagenet'"), "%s", err);
    ck_assert_ptr_null(ds);
    free(rec);
    s_rm_rf(t.path);
}
END_TEST

START_TEST(test_dataset_norm_constants) {
    dataset_norm_t n;
    ck_assert_int_eq(dataset_norm_lookup("mnist", &n), 0);
    ck_assert(n.c == 1 && n.mean[0] == 0.1307f && n.std[0] == 0.3081f);
    ck_assert_int_eq(dataset_norm_lookup("fashion-mnist", &n), 0);
    ck_assert(n.c == 1 && n.mean[0] == 0.2860f && n.std[0] == 0.3530f);
    ck_assert_int_eq(dataset_norm_lookup("cifar10", &n), 0);
    ck_assert(n.c == 3 && n.mean[2] == 0.4465f && n.std[1] == 0.2435f);
    ck_assert_int_eq(dataset_norm_lookup("svhn", &n), -EINVAL);
    /* raw bytes of 2 examples of 3 x 5 */
    uint8_t raw[30];
    float out[30];
    for (int i = 0; i < 30; i++) raw[i] = (uint8_t)(i * 37 % 256);
    dataset_normalize_u8(&n, raw, 2, 5, out);
    for (int i = 0; i < 30; i++) {
        int ch = (i / 5) % 3;
        ck_assert(out[i] == ((float)raw[i] / 255.0f - n.mean[ch]) / n.std[ch]);
    }
}
END_TEST

START_TEST(test_dataset_truncate_keeps_prefix) {
    dataset_t *ds = calloc(1, sizeof *ds);
    ds->n = 10; ds->c = 1; ds->h = 2; ds->w = 3; ds->n_classes = 10;
    ds->x = malloc(60 * sizeof *ds->x);
    ds->y = malloc(10 * sizeof *ds->y);
    for (int i = 0; i < 60; i++) ds->x[i] = (float)i;
    for (int i = 0; i < 10; i++) ds->y[i] = i;
    ck_assert_int_eq(dataset_truncate(ds, 0), -EINVAL);
    ck_assert_int_eq(dataset_truncate(NULL, 3), -EINVAL);
    ck_assert_int_eq(dataset_truncate(ds, 50), 0);
    ck_assert_int_eq(ds->n, 10);
    ck_assert_int_eq(dataset_truncate(ds, 4), 0);
    ck_assert_int_eq(ds->n, 4);
    for (int i = 0; i < 24; i++) ck_assert(ds->x[i] == (float)i);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(ds->y[i], i);
    dataset_free(&ds);
    ck_assert_ptr_null(ds);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_idx_plain_roundtrip);
    tcase_add_test(tc, test_idx_gz_roundtrip);
    tcase_add_test(tc, test_idx_wrong_magic);
    tcase_add_test(tc, test_idx_truncated_images);
    tcase_add_test(tc, test_idx_truncated_gzip_stream);
    tcase_add_test(tc, test_idx_truncated_labels);
    tcase_add_test(tc, test_idx_bad_dimensions);
    tcase_add_test(tc, test_idx_label_out_of_range);
    tcase_add_test(tc, test_idx_count_mismatch);
    tcase_add_test(tc, test_idx_missing_file);
    tcase_add_test(tc, test_cifar10_load_batches);
    tcase_add_test(tc, test_cifar10_errors);
    tcase_add_test(tc, test_dataset_load_named_layout);
    tcase_add_test(tc, test_dataset_norm_constants);
    tcase_add_test(tc, test_dataset_truncate_keeps_prefix);
    suite_add_tcase(s, tc);
    return s;
}
