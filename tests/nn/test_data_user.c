/* tests/nn/test_data_user.c — the user's own data files through
 * dataset_source_load / dataset_source_norm (common/nn/data.h): .npy round
 * trips (uint8 and float32 images in every accepted shape, every label
 * dtype, plain and gzip), IDX sources (plain and gzip, relative and
 * absolute paths), each error path with its message, and the computed
 * normalization against a double-precision mean and standard deviation.
 *
 * Inputs are random (tests/lib/seed.h prints the seed). Tolerances:
 * normalized values are compared exactly against the float formula the
 * loader documents; the computed mean and std against a two-pass double
 * computation within 1e-6 relative (the loader also works in double, then
 * rounds to float: half an ulp, 6e-8 relative).
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/nn/data.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"
#include "tests/nn/test_data_fixture.h"

/* Write a version 1.0 .npy file: dict text, then body. */
static void s_write_npy(const char *path, const char *descr, const char *shape, const void *body, size_t body_len,
                        int gz) {
    char dict[256];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    size_t len = (size_t)n + 1, pad = (64 - (10 + len) % 64) % 64;
    unsigned char hdr[512];
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    hdr[8] = (unsigned char)((len + pad) & 0xff);
    hdr[9] = (unsigned char)((len + pad) >> 8);
    memcpy(hdr + 10, dict, (size_t)n);
    memset(hdr + 10 + n, ' ', pad);
    hdr[10 + n + pad] = '\n';
    s_write(path, hdr, 10 + len + pad, body, body_len, gz);
}

/* A source over dir t with the four files (names under t) and a model shape. */
static void s_source(dataset_source_t *s, const tmpdir_t *t, dataset_source_kind_t kind, const char *tri,
                     const char *trl, const char *tei, const char *tel) {
    memset(s, 0, sizeof *s);
    s->kind = kind;
    snprintf(s->name, sizeof s->name, "%s", kind == DATASET_SOURCE_NPY ? "npy" : "idx");
    snprintf(s->dir, sizeof s->dir, "%s", t->path);
    snprintf(s->train_images, sizeof s->train_images, "%s", tri);
    snprintf(s->train_labels, sizeof s->train_labels, "%s", trl);
    snprintf(s->test_images, sizeof s->test_images, "%s", tei);
    snprintf(s->test_labels, sizeof s->test_labels, "%s", tel);
    snprintf(s->model, sizeof s->model, "test.model");
}

static void s_in(tmpdir_t *t, const char *name, char *out, size_t len) { s_join(out, len, t->path, name); }

/* uint8 images in (N, C, H, W) or (N, H, W) with int64 labels, configured
 * normalization, plain or gzip: values and labels come back exactly. */
static void s_u8_roundtrip(int gz) {
    uint64_t seed = test_seed();
    printf("s_u8_roundtrip(%d): seed %" PRIu64 "\n", gz, seed);
    rng_t r;
    rng_seed(&r, seed);
    tmpdir_t t;
    s_tmp_new(&t);
    for (int round = 0; round < 4; round++) {
        int n = 2 + (int)rng_below(&r, 20), c = round % 2 ? 3 : 1, h = 1 + (int)rng_below(&r, 9),
            w = 1 + (int)rng_below(&r, 9), classes = 2 + (int)rng_below(&r, 20);
        size_t dim = (size_t)c * h * w;
        uint8_t *img = malloc((size_t)n * dim);
        int64_t *lab = malloc((size_t)n * sizeof *lab);
        s_fill_random(&r, img, (size_t)n * dim, 256);
        for (int i = 0; i < n; i++) lab[i] = (int64_t)rng_below(&r, (uint32_t)classes);
        char shape[64], lshape[32], p[512];
        if (c == 1 && round == 0) snprintf(shape, sizeof shape, "(%d, %d, %d)", n, h, w);
        else snprintf(shape, sizeof shape, "(%d, %d, %d, %d)", n, c, h, w);
        snprintf(lshape, sizeof lshape, "(%d,)", n);
        s_in(&t, "img.npy", p, sizeof p);
        s_write_npy(p, "|u1", shape, img, (size_t)n * dim, gz);
        s_in(&t, "lab.npy", p, sizeof p);
        s_write_npy(p, "<i8", lshape, lab, (size_t)n * sizeof *lab, gz);
        dataset_source_t src;
        s_source(&src, &t, DATASET_SOURCE_NPY, "img.npy", "lab.npy", "img.npy", "lab.npy");
        src.in_c = c; src.in_h = h; src.in_w = w; src.n_classes = classes;
        src.has_norm = 1;
        src.norm.c = c;
        for (int ch = 0; ch < c; ch++) {
            src.norm.mean[ch] = (float)rng_uniform(&r);
            src.norm.std[ch] = 0.1f + (float)rng_uniform(&r);
        }
        for (int train = 0; train < 2; train++) {
            dataset_t *ds = NULL;
            char err[1024];
            ck_assert_msg(dataset_source_load(&src, train, &ds, err, sizeof err) == 0, "%s", err);
            ck_assert(ds->n == n && ds->c == c && ds->h == h && ds->w == w && ds->n_classes == classes);
            for (int i = 0; i < n; i++) ck_assert_int_eq(ds->y[i], (int)lab[i]);
            s_check_values(ds, img, dim, 0, src.norm.mean, src.norm.std, seed);
            dataset_free(&ds);
        }
        free(img);
        free(lab);
    }
    s_rm_rf(t.path);
}

START_TEST(test_data_user_npy_u8_roundtrip) { s_u8_roundtrip(0); }
END_TEST

START_TEST(test_data_user_npy_u8_gzip_roundtrip) { s_u8_roundtrip(1); }
END_TEST

/* float32 (N, C*H*W) read in the model's shape; one mean/std for every
 * channel; labels of each integer dtype. */
START_TEST(test_data_user_npy_f32_flat_and_label_types) {
    uint64_t seed = test_seed();
    printf("test_data_user_npy_f32_flat_and_label_types: seed %" PRIu64 "\n", seed);
    rng_t r;
    rng_seed(&r, seed);
    tmpdir_t t;
    s_tmp_new(&t);
    int n = 5 + (int)rng_below(&r, 10), c = 3, h = 4, w = 3, dim = c * h * w;
    float *img = malloc((size_t)n * dim * sizeof *img);
    for (int i = 0; i < n * dim; i++) img[i] = (float)(rng_uniform(&r) * 10.0 - 5.0);
    char p[512], shape[64], lshape[32];
    snprintf(shape, sizeof shape, "(%d, %d)", n, dim);
    snprintf(lshape, sizeof lshape, "(%d,)", n);
    s_in(&t, "x.npy", p, sizeof p);
    s_write_npy(p, "<f4", shape, img, (size_t)n * dim * sizeof *img, 0);
    int labels[64];
    for (int i = 0; i < n; i++) labels[i] = (int)rng_below(&r, 10);
    static const char *const descrs[] = {"|u1", "|i1", "<i4", "<i8"};
    for (int k = 0; k < 4; k++) {
        uint8_t buf[64 * 8];
        size_t sz = k < 2 ? 1 : k == 2 ? 4 : 8;
        for (int i = 0; i < n; i++) {
            int64_t v = labels[i];
            if (sz == 1) buf[i] = (uint8_t)v;
            else if (sz == 4) { int32_t v32 = (int32_t)v; memcpy(buf + 4 * i, &v32, 4); }
            else memcpy(buf + 8 * i, &v, 8);
        }
        s_in(&t, "y.npy", p, sizeof p);
        s_write_npy(p, descrs[k], lshape, buf, (size_t)n * sz, k == 3);
        dataset_source_t src;
        s_source(&src, &t, DATASET_SOURCE_NPY, "x.npy", "y.npy", "x.npy", "y.npy");
        src.in_c = c; src.in_h = h; src.in_w = w; src.n_classes = 10;
        src.has_norm = 1;
        src.norm.c = 1;
        src.norm.mean[0] = 0.25f;
        src.norm.std[0] = 2.5f;
        dataset_t *ds = NULL;
        char err[1024];
        ck_assert_msg(dataset_source_load(&src, 1, &ds, err, sizeof err) == 0, "%s: %s", descrs[k], err);
        ck_assert(ds->n == n && ds->c == c && ds->h == h && ds->w == w);
        for (int i = 0; i < n; i++) ck_assert_int_eq(ds->y[i], labels[i]);
        for (int i = 0; i < n * dim; i++) {
            float want = (img[i] - 0.25f) / 2.5f;
            ck_assert_msg(ds->x[i] == want, "x[%d] = %.9g, want %.9g", i, ds->x[i], want);
        }
        for (int ch = 0; ch < 3; ch++) ck_assert(ds->mean[ch] == 0.25f && ds->std[ch] == 2.5f);
        dataset_free(&ds);
    }
    free(img);
    s_rm_rf(t.path);
}
END_TEST

/* One broken input: the load fails with rc and a message holding each of
 * the NULL-terminated fragments. */
static void s_expect(const dataset_source_t *src, int train, int rc, const char *const *frags) {
    dataset_t *ds = (dataset_t *)(uintptr_t)1;
    char err[1024] = "";
    int got = dataset_source_load(src, train, &ds, err, sizeof err);
    ck_assert_msg(got == rc, "expected %d, got %d (%s)", rc, got, err);
    ck_assert_ptr_null(ds);
    for (int i = 0; frags[i]; i++) ck_assert_msg(strstr(err, frags[i]) != NULL, "'%s' lacks '%s'", err, frags[i]);
}

START_TEST(test_data_user_npy_errors) {
    tmpdir_t t;
    s_tmp_new(&t);
    char p[512];
    uint8_t img[4 * 2 * 2];
    memset(img, 7, sizeof img);
    int64_t lab[4] = {0, 1, 2, 3};
    /* a good pair to start from */
    s_in(&t, "good.npy", p, sizeof p);
    s_write_npy(p, "|u1", "(4, 2, 2)", img, sizeof img, 0);
    s_in(&t, "lab.npy", p, sizeof p);
    s_write_npy(p, "<i8", "(4,)", lab, sizeof lab, 0);
    dataset_source_t src;
    s_source(&src, &t, DATASET_SOURCE_NPY, "good.npy", "lab.npy", "good.npy", "lab.npy");
    src.has_norm = 1;
    src.norm.c = 1;
    src.norm.mean[0] = 0.5f;
    src.norm.std[0] = 0.25f;
    src.in_c = 1; src.in_h = 2; src.in_w = 2; src.n_classes = 4;
    dataset_t *ds = NULL;
    char err[1024];
    ck_assert_msg(dataset_source_load(&src, 1, &ds, err, sizeof err) == 0, "%s", err);
    dataset_free(&ds);

    struct { const char *file, *descr, *shape; size_t len; int gz; const char *frags[4]; } img_cases[] = {
        {"short.npy", "|u1", "(4, 2, 2)", sizeof img - 1, 0, {"short.npy", "size mismatch", "truncated", NULL}},
        {"long.npy", "|u1", "(3, 2, 2)", sizeof img, 0, {"long.npy", "extra data", NULL}},
        {"shortgz.npy", "|u1", "(4, 2, 2)", sizeof img - 3, 1, {"shortgz.npy", "truncated", NULL}},
        {"int.npy", "<i4", "(1, 2, 2)", 16, 0, {"int.npy", "uint8 or float32", "int32", NULL}},
        {"dim1.npy", "|u1", "(16,)", 16, 0, {"dim1.npy", "shape", "(N, H, W)", NULL}},
        {"dim5.npy", "|u1", "(1, 1, 1, 4, 4)", 16, 0, {"dim5.npy", "shape", NULL}},
        {"flat.npy", "|u1", "(2, 8)", 16, 0, {"flat.npy", "8 values each", "1 x 2 x 2", NULL}},
        {"chan.npy", "|u1", "(1, 4, 2, 2)", 16, 0, {"chan.npy", "4 channels", "transpose", NULL}},
        {"zero.npy", "|u1", "(0, 2, 2)", 0, 0, {"zero.npy", "at least 1", NULL}},
        {"wide.npy", "|u1", "(2, 1, 4)", 8, 0, {"wide.npy", "1 x 1 x 4", "test.model takes 1 x 2 x 2", NULL}},
    };
    for (size_t i = 0; i < sizeof img_cases / sizeof img_cases[0]; i++) {
        s_in(&t, img_cases[i].file, p, sizeof p);
        s_write_npy(p, img_cases[i].descr, img_cases[i].shape, img, img_cases[i].len, img_cases[i].gz);
        dataset_source_t s = src;
        snprintf(s.train_images, sizeof s.train_images, "%s", img_cases[i].file);
        s_expect(&s, 1, -EINVAL, img_cases[i].frags);
    }
    /* fortran order, written by hand */
    {
        s_in(&t, "fortran.npy", p, sizeof p);
        const char dict[] = "{'descr': '|u1', 'fortran_order': True, 'shape': (4, 2, 2), }";
        unsigned char hdr[128];
        memset(hdr, ' ', sizeof hdr);
        memcpy(hdr, "\x93NUMPY\x01\x00\x76\x00", 10);
        memcpy(hdr + 10, dict, sizeof dict - 1);
        hdr[127] = '\n';
        s_write(p, hdr, sizeof hdr, img, sizeof img, 0);
        dataset_source_t s = src;
        snprintf(s.train_images, sizeof s.train_images, "fortran.npy");
        const char *fr[] = {"fortran.npy", "fortran_order", NULL};
        s_expect(&s, 1, -EINVAL, fr);
    }
    /* flat images without a model shape */
    {
        s_in(&t, "flat4.npy", p, sizeof p);
        s_write_npy(p, "|u1", "(4, 4)", img, 16, 0);
        dataset_source_t s = src;
        snprintf(s.train_images, sizeof s.train_images, "flat4.npy");
        s.in_c = s.in_h = s.in_w = 0;
        const char *fr[] = {"flat4.npy", "input shape", NULL};
        s_expect(&s, 1, -EINVAL, fr);
    }
    /* NaN in float images */
    {
        float f[16];
        for (int i = 0; i < 16; i++) f[i] = (float)i;
        f[9] = NAN;
        s_in(&t, "nan.npy", p, sizeof p);
        s_write_npy(p, "<f4", "(4, 2, 2)", f, sizeof f, 0);
        dataset_source_t s = src;
        snprintf(s.train_images, sizeof s.train_images, "nan.npy");
        const char *fr[] = {"nan.npy", "value 9", "example 2", "NaN", NULL};
        s_expect(&s, 1, -EINVAL, fr);
    }
    /* labels */
    struct { const char *file, *descr, *shape; const void *body; size_t len; const char *frags[4]; } lab_cases[] = {
        {"l2d.npy", "<i8", "(2, 2)", lab, sizeof lab, {"l2d.npy", "(N,)", NULL}},
        {"l3.npy", "<i8", "(3,)", lab, 24, {"count mismatch", "4 images", "3 labels", NULL}},
        {"lf.npy", "<f4", "(4,)", img, 16, {"lf.npy", "integers", NULL}},
    };
    for (size_t i = 0; i < sizeof lab_cases / sizeof lab_cases[0]; i++) {
        s_in(&t, lab_cases[i].file, p, sizeof p);
        s_write_npy(p, lab_cases[i].descr, lab_cases[i].shape, lab_cases[i].body, lab_cases[i].len, 0);
        dataset_source_t s = src;
        snprintf(s.train_labels, sizeof s.train_labels, "%s", lab_cases[i].file);
        s_expect(&s, 1, -EINVAL, lab_cases[i].frags);
    }
    int64_t big[4] = {0, 1, 4, 2}, neg[4] = {0, -1, 2, 3};
    s_in(&t, "big.npy", p, sizeof p);
    s_write_npy(p, "<i8", "(4,)", big, sizeof big, 0);
    s_in(&t, "neg.npy", p, sizeof p);
    s_write_npy(p, "<i8", "(4,)", neg, sizeof neg, 0);
    dataset_source_t s = src;
    snprintf(s.test_labels, sizeof s.test_labels, "big.npy");
    const char *fr_big[] = {"big.npy", "label 4 at index 2", "4 classes of test.model", NULL};
    s_expect(&s, 0, -EINVAL, fr_big);
    snprintf(s.test_labels, sizeof s.test_labels, "neg.npy");
    const char *fr_neg[] = {"neg.npy", "label -1 at index 1", NULL};
    s_expect(&s, 0, -EINVAL, fr_neg);
    /* a missing file is -ENOENT and named with its folder */
    s = src;
    snprintf(s.test_images, sizeof s.test_images, "nothere.npy");
    char full[600];
    s_in(&t, "nothere.npy", full, sizeof full);
    const char *fr_missing[] = {full, "No such file", NULL};
    s_expect(&s, 0, -ENOENT, fr_missing);
    /* not a .npy at all */
    s_in(&t, "text.npy", p, sizeof p);
    s_write(p, "hello world, no numpy here", 26, NULL, 0, 0);
    s = src;
    snprintf(s.train_images, sizeof s.train_images, "text.npy");
    const char *fr_magic[] = {"text.npy", "magic", NULL};
    s_expect(&s, 1, -EINVAL, fr_magic);
    /* mean/std with the wrong number of channels */
    s = src;
    s.norm.c = 3;
    const char *fr_norm[] = {"mean and std give 3 values", "1 channels", NULL};
    s_expect(&s, 1, -EINVAL, fr_norm);
    s_rm_rf(t.path);
}
END_TEST

/* IDX through a source: plain and gzip, relative and absolute paths,
 * labels checked against the model's classes. */
START_TEST(test_data_user_idx_source) {
    uint64_t seed = test_seed();
    printf("test_data_user_idx_source: seed %" PRIu64 "\n", seed);
    rng_t r;
    rng_seed(&r, seed);
    tmpdir_t t;
    s_tmp_new(&t);
    int n = 3 + (int)rng_below(&r, 12), h = 2 + (int)rng_below(&r, 6), w = 2 + (int)rng_below(&r, 6);
    uint8_t *img = malloc((size_t)n * h * w), lab[32];
    s_fill_random(&r, img, (size_t)n * h * w, 256);
    s_fill_random(&r, lab, (size_t)n, 5);
    lab[0] = 4;
    char pi[512], pl[512], pigz[512], plgz[512];
    s_in(&t, "i.idx", pi, sizeof pi);
    s_in(&t, "l.idx", pl, sizeof pl);
    s_in(&t, "i.idx.gz", pigz, sizeof pigz);
    s_in(&t, "l.idx.gz", plgz, sizeof plgz);
    s_write_idx_images(pi, 0x803, (uint32_t)n, (uint32_t)h, (uint32_t)w, img, (size_t)n * h * w, 0);
    s_write_idx_labels(pl, 0x801, (uint32_t)n, lab, (size_t)n, 0);
    s_write_idx_images(pigz, 0x803, (uint32_t)n, (uint32_t)h, (uint32_t)w, img, (size_t)n * h * w, 1);
    s_write_idx_labels(plgz, 0x801, (uint32_t)n, lab, (size_t)n, 1);
    dataset_source_t src;
    s_source(&src, &t, DATASET_SOURCE_IDX, "i.idx", "l.idx", pigz, plgz); /* test split: absolute paths */
    src.in_c = 1; src.in_h = h; src.in_w = w; src.n_classes = 5;
    src.has_norm = 1;
    src.norm.c = 1;
    src.norm.mean[0] = 0.3f;
    src.norm.std[0] = 0.7f;
    for (int train = 0; train < 2; train++) {
        dataset_t *ds = NULL;
        char err[1024];
        ck_assert_msg(dataset_source_load(&src, train, &ds, err, sizeof err) == 0, "%s", err);
        ck_assert(ds->n == n && ds->c == 1 && ds->h == h && ds->w == w && ds->n_classes == 5);
        for (int i = 0; i < n; i++) ck_assert_int_eq(ds->y[i], lab[i]);
        s_check_values(ds, img, (size_t)h * w, 0, src.norm.mean, src.norm.std, seed);
        dataset_free(&ds);
    }
    src.n_classes = 4; /* label 4 at index 0 is now out of range */
    const char *fr[] = {"l.idx", "label 4 at index 0", "[0, 4)", NULL};
    s_expect(&src, 1, -EINVAL, fr);
    src.n_classes = 5;
    src.in_h = h + 1;
    const char *fr_shape[] = {"i.idx", "test.model takes", NULL};
    s_expect(&src, 1, -EINVAL, fr_shape);
    free(img);
    s_rm_rf(t.path);
}
END_TEST

/* The double-precision oracle: per channel, two passes. */
static void s_oracle(const uint8_t *u8, const float *f32, int n, int c, int hw, double *mean, double *sd) {
    for (int ch = 0; ch < c; ch++) {
        double s = 0, s2 = 0, m = (double)n * hw;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < hw; k++) {
                size_t at = ((size_t)i * c + ch) * hw + k;
                s += u8 ? u8[at] / 255.0 : (double)f32[at];
            }
        mean[ch] = s / m;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < hw; k++) {
                size_t at = ((size_t)i * c + ch) * hw + k;
                double v = u8 ? u8[at] / 255.0 : (double)f32[at];
                s2 += (v - mean[ch]) * (v - mean[ch]);
            }
        sd[ch] = sqrt(s2 / m);
    }
}

START_TEST(test_data_user_norm_computed_vs_double) {
    uint64_t seed = test_seed();
    printf("test_data_user_norm_computed_vs_double: seed %" PRIu64 "\n", seed);
    rng_t r;
    rng_seed(&r, seed);
    tmpdir_t t;
    s_tmp_new(&t);
    for (int fl = 0; fl < 2; fl++) {
        int n = 10 + (int)rng_below(&r, 50), c = 1 + (int)rng_below(&r, 3), h = 3 + (int)rng_below(&r, 5), w = 4;
        int hw = h * w;
        size_t total = (size_t)n * c * hw;
        uint8_t *u8 = malloc(total), *u8t = malloc(total);
        float *f32 = malloc(total * sizeof *f32), *f32t = malloc(total * sizeof *f32);
        /* channels with different offsets and spreads; the test split differs */
        for (size_t i = 0; i < total; i++) {
            int ch = (int)(i / hw) % c;
            u8[i] = (uint8_t)(ch * 40 + rng_below(&r, 256 - 80));
            u8t[i] = (uint8_t)rng_below(&r, 256);
            f32[i] = (float)(ch * 3.0 + (1 + ch) * rng_normal(&r));
            f32t[i] = (float)rng_normal(&r);
        }
        int64_t *lab = calloc((size_t)n, sizeof *lab);
        char p[512], shape[64], lshape[32];
        snprintf(shape, sizeof shape, "(%d, %d, %d, %d)", n, c, h, w);
        snprintf(lshape, sizeof lshape, "(%d,)", n);
        s_in(&t, "tr.npy", p, sizeof p);
        if (fl) s_write_npy(p, "<f4", shape, f32, total * sizeof *f32, 0);
        else s_write_npy(p, "|u1", shape, u8, total, 0);
        s_in(&t, "te.npy", p, sizeof p);
        if (fl) s_write_npy(p, "<f4", shape, f32t, total * sizeof *f32, 0);
        else s_write_npy(p, "|u1", shape, u8t, total, 0);
        s_in(&t, "l.npy", p, sizeof p);
        s_write_npy(p, "<i8", lshape, lab, (size_t)n * sizeof *lab, 0);
        dataset_source_t src;
        s_source(&src, &t, DATASET_SOURCE_NPY, "tr.npy", "l.npy", "te.npy", "l.npy");
        double mean[3], sd[3];
        s_oracle(fl ? NULL : u8, fl ? f32 : NULL, n, c, hw, mean, sd);
        dataset_norm_t norm;
        char err[1024];
        ck_assert_msg(dataset_source_norm(&src, &norm, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(norm.c, c);
        for (int ch = 0; ch < c; ch++) {
            ck_assert_msg(fabs(norm.mean[ch] - mean[ch]) <= 1e-6 * fmax(1.0, fabs(mean[ch])),
                          "seed %" PRIu64 " %s channel %d: mean %.9g vs %.9g", seed, fl ? "f32" : "u8", ch,
                          norm.mean[ch], mean[ch]);
            ck_assert_msg(fabs(norm.std[ch] - sd[ch]) <= 1e-6 * sd[ch], "seed %" PRIu64 " channel %d: std %.9g vs %.9g",
                          seed, ch, norm.std[ch], sd[ch]);
        }
        /* loading without constants uses the computed ones, for both splits */
        for (int train = 1; train >= 0; train--) {
            dataset_t *ds = NULL;
            ck_assert_msg(dataset_source_load(&src, train, &ds, err, sizeof err) == 0, "%s", err);
            for (int ch = 0; ch < c; ch++) ck_assert(ds->mean[ch] == norm.mean[ch] && ds->std[ch] == norm.std[ch]);
            if (train && fl) { /* normalized training floats: per-channel mean ~0, std ~1 in double */
                double m2[3], s2[3];
                s_oracle(NULL, ds->x, n, c, hw, m2, s2);
                for (int ch = 0; ch < c; ch++) ck_assert_msg(fabs(m2[ch]) < 1e-5 && fabs(s2[ch] - 1) < 1e-5, "%g %g", m2[ch], s2[ch]);
            }
            if (!train && !fl) s_check_values(ds, u8t, (size_t)c * hw, 0, norm.mean, norm.std, seed);
            if (!train && fl)
                for (size_t i = 0; i < total; i++) {
                    int ch = (int)(i / hw) % c;
                    ck_assert(ds->x[i] == (f32t[i] - norm.mean[ch]) / norm.std[ch]);
                }
            dataset_free(&ds);
        }
        free(u8);
        free(u8t);
        free(f32);
        free(f32t);
        free(lab);
    }
    s_rm_rf(t.path);
}
END_TEST

START_TEST(test_data_user_norm_zero_variance) {
    tmpdir_t t;
    s_tmp_new(&t);
    uint8_t img[2 * 3 * 3];
    memset(img, 9, sizeof img);
    char p[512];
    s_in(&t, "flat.npy", p, sizeof p);
    s_write_npy(p, "|u1", "(2, 3, 3)", img, sizeof img, 0);
    dataset_source_t src;
    s_source(&src, &t, DATASET_SOURCE_NPY, "flat.npy", "", "flat.npy", "");
    dataset_norm_t norm;
    char err[512];
    ck_assert_int_eq(dataset_source_norm(&src, &norm, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "flat.npy") && strstr(err, "no variance") && strstr(err, "[data] std"), "%s", err);
    /* a NAMED source has fixed constants */
    src.kind = DATASET_SOURCE_NAMED;
    ck_assert_int_eq(dataset_source_norm(&src, &norm, err, sizeof err), -EINVAL);
    s_rm_rf(t.path);
}
END_TEST

/* A version 2.0 file (4-byte header length), as numpy writes for huge
 * headers, loads like a 1.0 one. */
START_TEST(test_data_user_npy_version2) {
    tmpdir_t t;
    s_tmp_new(&t);
    uint8_t img[3 * 2 * 2] = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 255};
    uint8_t lab[3] = {2, 0, 1};
    char p[512];
    const char *files[2] = {"x2.npy", "y2.npy"};
    const char *dicts[2] = {"{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2, 2), }",
                            "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }"};
    for (int k = 0; k < 2; k++) {
        size_t n = strlen(dicts[k]) + 1, pad = (64 - (12 + n) % 64) % 64, len = n + pad;
        unsigned char hdr[256];
        memcpy(hdr, "\x93NUMPY\x02\x00", 8);
        hdr[8] = (unsigned char)(len & 0xff); hdr[9] = (unsigned char)(len >> 8); hdr[10] = 0; hdr[11] = 0;
        memcpy(hdr + 12, dicts[k], n - 1);
        memset(hdr + 12 + n - 1, ' ', pad);
        hdr[12 + len - 1] = '\n';
        s_in(&t, files[k], p, sizeof p);
        s_write(p, hdr, 12 + len, k ? (const void *)lab : (const void *)img, k ? sizeof lab : sizeof img, k);
    }
    dataset_source_t src;
    s_source(&src, &t, DATASET_SOURCE_NPY, "x2.npy", "y2.npy", "x2.npy", "y2.npy");
    src.has_norm = 1;
    src.norm.c = 1;
    src.norm.mean[0] = 0.5f;
    src.norm.std[0] = 0.5f;
    dataset_t *ds = NULL;
    char err[1024];
    ck_assert_msg(dataset_source_load(&src, 1, &ds, err, sizeof err) == 0, "%s", err);
    ck_assert(ds->n == 3 && ds->c == 1 && ds->h == 2 && ds->w == 2);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(ds->y[i], lab[i]);
    s_check_values(ds, img, 4, 0, src.norm.mean, src.norm.std, 0);
    dataset_free(&ds);
    s_rm_rf(t.path);
}
END_TEST

/* Every prefix of a valid .npy file (plain and gzip) is refused cleanly:
 * -EINVAL with the file named, nothing allocated that leaks, no crash. */
START_TEST(test_data_user_npy_every_truncation) {
    tmpdir_t t;
    s_tmp_new(&t);
    float img[2 * 3 * 2];
    for (int i = 0; i < 12; i++) img[i] = (float)i * 0.5f;
    char full[512], cut[512];
    s_in(&t, "full.npy", full, sizeof full);
    s_write_npy(full, "<f4", "(2, 3, 2)", img, sizeof img, 0);
    FILE *f = fopen(full, "rb");
    unsigned char bytes[512];
    size_t len = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    ck_assert_uint_eq(len, 128 + sizeof img);
    s_in(&t, "cut.npy", cut, sizeof cut);
    dataset_source_t src;
    s_source(&src, &t, DATASET_SOURCE_NPY, "cut.npy", "", "cut.npy", "");
    src.has_norm = 1;
    src.norm.c = 1;
    src.norm.std[0] = 1;
    for (int gz = 0; gz < 2; gz++)
        for (size_t k = 0; k < len; k++) {
            s_write(cut, bytes, k, NULL, 0, gz);
            dataset_norm_t norm;
            char err[1024] = "";
            int rc = dataset_source_norm(&src, &norm, err, sizeof err);
            ck_assert_msg(rc == -EINVAL, "prefix %zu (gz %d): rc %d (%s)", k, gz, rc, err);
            ck_assert_msg(strstr(err, "cut.npy") != NULL, "prefix %zu: '%s' does not name the file", k, err);
        }
    /* the whole file is fine */
    s_write(cut, bytes, len, NULL, 0, 1);
    dataset_norm_t norm;
    char err[1024];
    ck_assert_msg(dataset_source_norm(&src, &norm, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(norm.c, 1);
    s_rm_rf(t.path);
}
END_TEST

START_TEST(test_data_user_source_path) {
    dataset_source_t s;
    memset(&s, 0, sizeof s);
    char out[64];
    snprintf(s.dir, sizeof s.dir, "/srv/data");
    ck_assert_int_eq(dataset_source_path(&s, "a/b.npy", out, sizeof out), 0);
    ck_assert_str_eq(out, "/srv/data/a/b.npy");
    ck_assert_int_eq(dataset_source_path(&s, "/abs/c.npy", out, sizeof out), 0);
    ck_assert_str_eq(out, "/abs/c.npy");
    s.dir[0] = 0;
    ck_assert_int_eq(dataset_source_path(&s, "rel.npy", out, sizeof out), 0);
    ck_assert_str_eq(out, "rel.npy");
    snprintf(s.dir, sizeof s.dir, "/a/very/long/folder/name/that/does/not/fit");
    ck_assert_int_eq(dataset_source_path(&s, "into/sixty/four/bytes.npy", out, sizeof out), -ENAMETOOLONG);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("data_user");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_data_user_npy_u8_roundtrip);
    tcase_add_test(tc, test_data_user_npy_u8_gzip_roundtrip);
    tcase_add_test(tc, test_data_user_npy_f32_flat_and_label_types);
    tcase_add_test(tc, test_data_user_npy_errors);
    tcase_add_test(tc, test_data_user_idx_source);
    tcase_add_test(tc, test_data_user_norm_computed_vs_double);
    tcase_add_test(tc, test_data_user_norm_zero_variance);
    tcase_add_test(tc, test_data_user_npy_version2);
    tcase_add_test(tc, test_data_user_npy_every_truncation);
    tcase_add_test(tc, test_data_user_source_path);
    suite_add_tcase(s, tc);
    return s;
}
