/* tests/nn/test_data.c — data sets and the batcher: IDX (plain and gzip) and
 * CIFAR-10 files generated in a mkdtemp directory, every corrupt-file error,
 * sharding, seeded shuffling and augmentation against direct references,
 * and the real MNIST / Fashion-MNIST test splits when they are on disk.
 *
 * Normalized values are compared exactly against the float formula
 * ((float)v / 255.0f - mean) / std (the loader must evaluate exactly that),
 * and within 1e-5 against the same formula in double (inputs in [0, 255],
 * results below 4 in magnitude: float rounding of three operations is under
 * 1e-6). Augmentation only moves values, so it is compared exactly.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/nn/data.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"

/* ---- helpers ------------------------------------------------------------ */

typedef struct tmpdir { char path[256]; } tmpdir_t;

static void s_tmp_new(tmpdir_t *t) {
    const char *base = getenv("TMPDIR");
    snprintf(t->path, sizeof t->path, "%s/kfac-test-data-XXXXXX", base && base[0] ? base : "/tmp");
    ck_assert_msg(mkdtemp(t->path) != NULL, "mkdtemp failed: %s", strerror(errno));
}

static void s_rm_rf(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) s_rm_rf(sub);
            else unlink(sub);
        }
        closedir(d);
        rmdir(path);
    }
}

static void s_join(char *dst, size_t len, const char *dir, const char *name) {
    snprintf(dst, len, "%s/%s", dir, name);
}

/* Write hdr (hdr_len bytes) then body (body_len bytes), gzip-compressed if gz. */
static void s_write(const char *path, const void *hdr, size_t hdr_len, const void *body, size_t body_len, int gz) {
    if (gz) {
        gzFile g = gzopen(path, "wb");
        ck_assert_msg(g != NULL, "gzopen %s", path);
        if (hdr_len) ck_assert_int_eq(gzwrite(g, hdr, (unsigned)hdr_len), (int)hdr_len);
        if (body_len) ck_assert_int_eq(gzwrite(g, body, (unsigned)body_len), (int)body_len);
        ck_assert_int_eq(gzclose(g), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        ck_assert_msg(f != NULL, "fopen %s", path);
        if (hdr_len) ck_assert_uint_eq(fwrite(hdr, 1, hdr_len, f), hdr_len);
        if (body_len) ck_assert_uint_eq(fwrite(body, 1, body_len, f), body_len);
        ck_assert_int_eq(fclose(f), 0);
    }
}

static void s_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);  p[3] = (unsigned char)v;
}

/* IDX images file: magic, n, h, w, then body_len bytes of body. */
static void s_write_idx_images(const char *path, uint32_t magic, uint32_t n, uint32_t h, uint32_t w,
                               const uint8_t *body, size_t body_len, int gz) {
    unsigned char hdr[16];
    s_be32(hdr, magic); s_be32(hdr + 4, n); s_be32(hdr + 8, h); s_be32(hdr + 12, w);
    s_write(path, hdr, 16, body, body_len, gz);
}

static void s_write_idx_labels(const char *path, uint32_t magic, uint32_t n, const uint8_t *body,
                               size_t body_len, int gz) {
    unsigned char hdr[8];
    s_be32(hdr, magic); s_be32(hdr + 4, n);
    s_write(path, hdr, 8, body, body_len, gz);
}

static void s_fill_random(rng_t *r, uint8_t *p, size_t n, unsigned below) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rng_below(r, below);
}

/* Compare a loaded set against raw bytes (c, hw) per example and constants. */
static void s_check_values(const dataset_t *ds, const uint8_t *raw, size_t raw_stride, size_t raw_skip,
                           const float *mean, const float *std, uint64_t seed) {
    size_t hw = (size_t)ds->h * ds->w, dim = (size_t)ds->c * hw;
    for (int i = 0; i < ds->n; i++) {
        const uint8_t *r = raw + (size_t)i * raw_stride + raw_skip;
        for (int ch = 0; ch < ds->c; ch++)
            for (size_t p = 0; p < hw; p++) {
                uint8_t v = r[ch * hw + p];
                float got = ds->x[i * dim + ch * hw + p];
                float want = ((float)v / 255.0f - mean[ch]) / std[ch];
                double ref = ((double)v / 255.0 - (double)mean[ch]) / (double)std[ch];
                ck_assert_msg(got == want, "seed %llu: x[%d][%d][%zu] = %.9g, want %.9g (v=%u)",
                              (unsigned long long)seed, i, ch, p, got, want, v);
                ck_assert_msg(fabs(got - ref) <= 1e-5, "seed %llu: x[%d] off the double formula by %g",
                              (unsigned long long)seed, i, fabs(got - ref));
            }
    }
}

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

/* ---- batcher ------------------------------------------------------------ */

/* n examples of (c, h, w) random floats; y[i] = i identifies example i. */
static dataset_t *s_synth(rng_t *r, int n, int c, int h, int w) {
    dataset_t *ds = calloc(1, sizeof *ds);
    ds->n = n; ds->c = c; ds->h = h; ds->w = w; ds->n_classes = 10;
    size_t dim = (size_t)c * h * w;
    ds->x = malloc((size_t)n * dim * sizeof *ds->x);
    ds->y = malloc((size_t)n * sizeof *ds->y);
    for (size_t i = 0; i < (size_t)n * dim; i++) ds->x[i] = (float)rng_normal(r) + 3.0f; /* never 0 */
    for (int i = 0; i < n; i++) ds->y[i] = i;
    snprintf(ds->name, sizeof ds->name, "synthetic");
    return ds;
}

/* Indices of one whole epoch (as y), into ids (shard size); returns batches. */
static int s_epoch(batcher_t *b, const dataset_t *ds, int batch, int *ids) {
    float *x = malloc((size_t)batch * ds->c * ds->h * ds->w * sizeof *x);
    int *y = malloc((size_t)batch * sizeof *y);
    long e0 = batcher_epoch(b);
    int got = 0, calls = 0;
    while (batcher_epoch(b) == e0) {
        int k = batcher_next(b, x, y);
        ck_assert_int_gt(k, 0);
        ck_assert_int_le(k, batch);
        ck_assert_int_le(got + k, batcher_shard_size(b));
        for (int i = 0; i < k; i++) {
            ids[got + i] = y[i];
            ck_assert(memcmp(x + (size_t)i * ds->c * ds->h * ds->w,
                             ds->x + (size_t)y[i] * ds->c * ds->h * ds->w,
                             (size_t)ds->c * ds->h * ds->w * sizeof *x) == 0);
        }
        got += k;
        calls++;
    }
    ck_assert_int_eq(got, batcher_shard_size(b));
    free(x);
    free(y);
    return calls;
}

START_TEST(test_batcher_shards_cover_once) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const int cfg[][2] = {{1, 1}, {10, 1}, {10, 3}, {7, 7}, {101, 4}, {50, 6}, {13, 5}, {64, 8}};
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        int n = cfg[k][0], n_ranks = cfg[k][1];
        dataset_t *ds = s_synth(&r, n, 1, 2, 2);
        for (int shuffle = 0; shuffle <= 1; shuffle++) {
            int *count = calloc((size_t)n, sizeof *count), *ids = malloc((size_t)n * sizeof *ids);
            int total = 0, min_size = n, max_size = 0;
            for (int rank = 0; rank < n_ranks; rank++) {
                batcher_opts_t o = {.batch = 1 + (int)rng_below(&r, 7), .seed = seed, .rank = rank,
                                    .n_ranks = n_ranks, .shuffle = shuffle};
                char err[256] = "";
                batcher_t *b = batcher_new(ds, &o, err, sizeof err);
                ck_assert_msg(b != NULL, "%s", err);
                int sz = batcher_shard_size(b);
                s_epoch(b, ds, o.batch, ids);
                for (int i = 0; i < sz; i++) {
                    ck_assert_int_ge(ids[i], 0);
                    ck_assert_int_lt(ids[i], n);
                    count[ids[i]]++;
                }
                total += sz;
                min_size = sz < min_size ? sz : min_size;
                max_size = sz > max_size ? sz : max_size;
                batcher_free(&b);
                ck_assert_ptr_null(b);
            }
            ck_assert_int_eq(total, n);
            ck_assert_int_le(max_size - min_size, 1);
            for (int i = 0; i < n; i++)
                ck_assert_msg(count[i] == 1, "seed %llu: n=%d ranks=%d: example %d in %d shards",
                              (unsigned long long)seed, n, n_ranks, i, count[i]);
            free(count);
            free(ids);
        }
        dataset_free(&ds);
    }
}
END_TEST

START_TEST(test_batcher_rejects_bad_options) {
    rng_t r;
    rng_seed(&r, 1);
    dataset_t *ds = s_synth(&r, 5, 1, 4, 4);
    char err[256];
    struct { batcher_opts_t o; const char *what; } bad[] = {
        {{.batch = 1, .rank = 6, .n_ranks = 8}, "is empty"},
        {{.batch = 1, .rank = 2, .n_ranks = 2}, "not in [0, n_ranks)"},
        {{.batch = 1, .rank = -1, .n_ranks = 2}, "not in [0, n_ranks)"},
        {{.batch = 0, .rank = 0, .n_ranks = 1}, "batch size 0"},
        {{.batch = 1, .rank = 0, .n_ranks = 1, .aug_crop_pad = 5}, "crop padding 5"},
        {{.batch = 1, .rank = 0, .n_ranks = 1, .aug_crop_pad = -1}, "crop padding -1"},
        {{.batch = 4, .rank = 0, .n_ranks = 2, .drop_last = 1}, "drop_last with batch 4"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        err[0] = '\0';
        ck_assert_ptr_null(batcher_new(ds, &bad[k].o, err, sizeof err));
        ck_assert_msg(strstr(err, bad[k].what), "case %zu: '%s' lacks '%s'", k, err, bad[k].what);
    }
    ck_assert_ptr_null(batcher_new(NULL, &bad[0].o, NULL, 0));
    ck_assert_int_eq(batcher_next(NULL, ds->x, NULL), -EINVAL);
    batcher_free(NULL);
    dataset_free(&ds);
}
END_TEST

START_TEST(test_batcher_shuffle_seeded) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    enum { N = 50, EPOCHS = 3 };
    dataset_t *ds = s_synth(&r, N, 1, 1, 3);
    batcher_opts_t o = {.batch = 7, .seed = seed, .rank = 0, .n_ranks = 1, .shuffle = 1};
    batcher_t *a = batcher_new(ds, &o, NULL, 0), *b = batcher_new(ds, &o, NULL, 0);
    o.seed = seed + 1;
    batcher_t *c = batcher_new(ds, &o, NULL, 0);
    o.shuffle = 0;
    batcher_t *plain = batcher_new(ds, &o, NULL, 0);
    ck_assert(a && b && c && plain);
    int ia[EPOCHS][N], ib[N], ic[N], ip[N];
    for (int e = 0; e < EPOCHS; e++) {
        ck_assert_int_eq(s_epoch(a, ds, 7, ia[e]), 8);  /* 7 full batches and one of 1 */
        s_epoch(b, ds, 7, ib);
        s_epoch(c, ds, 7, ic);
        s_epoch(plain, ds, 7, ip);
        ck_assert_int_eq(batcher_epoch(a), e + 1);
        ck_assert_msg(memcmp(ia[e], ib, sizeof ib) == 0, "seed %llu: equal seeds, different orders",
                      (unsigned long long)seed);
        /* different seed: equal orders with probability 1/50! */
        ck_assert_msg(memcmp(ia[e], ic, sizeof ic) != 0, "seed %llu: different seeds, same order",
                      (unsigned long long)seed);
        int seen[N] = {0}, identity = 1;
        for (int i = 0; i < N; i++) {
            seen[ia[e][i]]++;
            identity &= ia[e][i] == i;
            ck_assert_int_eq(ip[i], i);  /* no shuffle: index order */
        }
        for (int i = 0; i < N; i++) ck_assert_int_eq(seen[i], 1);
        ck_assert_msg(!identity, "seed %llu: shuffled epoch in index order", (unsigned long long)seed);
    }
    ck_assert_msg(memcmp(ia[0], ia[1], sizeof ia[0]) != 0 && memcmp(ia[1], ia[2], sizeof ia[0]) != 0,
                  "seed %llu: epochs repeat the same order", (unsigned long long)seed);
    batcher_free(&a);
    batcher_free(&b);
    batcher_free(&c);
    batcher_free(&plain);
    dataset_free(&ds);
}
END_TEST

START_TEST(test_batcher_epochs_and_drop_last) {
    rng_t r;
    rng_seed(&r, test_seed());
    dataset_t *ds = s_synth(&r, 23, 1, 2, 2);
    float x[5 * 4];
    int y[5];
    batcher_opts_t o = {.batch = 5, .seed = 9, .rank = 0, .n_ranks = 1, .shuffle = 1};
    batcher_t *b = batcher_new(ds, &o, NULL, 0);
    const int want[] = {5, 5, 5, 5, 3, 5};
    for (int k = 0; k < 6; k++) {
        ck_assert_int_eq(batcher_next(b, x, y), want[k]);
        ck_assert_int_eq(batcher_epoch(b), k < 4 ? 0 : 1);
    }
    batcher_free(&b);
    o.drop_last = 1;
    b = batcher_new(ds, &o, NULL, 0);
    for (int k = 0; k < 12; k++) {
        ck_assert_int_eq(batcher_next(b, x, NULL), 5);
        ck_assert_int_eq(batcher_epoch(b), (k + 1) / 4);
    }
    batcher_free(&b);
    dataset_free(&ds);
}
END_TEST

/* Reference augmentation, step by step: build the zero-padded image, cut the
 * window at (dy, dx), then mirror it. */
static void s_augment_ref(const float *src, float *dst, int c, int h, int w, int pad, int dy, int dx, int flip) {
    int ph = h + 2 * pad, pw = w + 2 * pad;
    float *padded = calloc((size_t)c * ph * pw, sizeof *padded);
    float *crop = malloc((size_t)c * h * w * sizeof *crop);
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                padded[((size_t)ch * ph + y + pad) * pw + x + pad] = src[((size_t)ch * h + y) * w + x];
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                crop[((size_t)ch * h + y) * w + x] = padded[((size_t)ch * ph + y + dy) * pw + x + dx];
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                dst[((size_t)ch * h + y) * w + x] = crop[((size_t)ch * h + y) * w + (flip ? w - 1 - x : x)];
    free(padded);
    free(crop);
}

START_TEST(test_augment_matches_reference) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int trial = 0; trial < 20; trial++) {
        int c = 1 + (int)rng_below(&r, 3), h = 1 + (int)rng_below(&r, 9), w = 1 + (int)rng_below(&r, 9);
        int m = h < w ? h : w, pad = (int)rng_below(&r, (uint32_t)m + 1);
        size_t dim = (size_t)c * h * w;
        float *src = malloc(dim * sizeof *src), *got = malloc(dim * sizeof *got), *want = malloc(dim * sizeof *want);
        for (size_t i = 0; i < dim; i++) src[i] = (float)rng_normal(&r) + 3.0f;
        for (int dy = 0; dy <= 2 * pad; dy++)
            for (int dx = 0; dx <= 2 * pad; dx++)
                for (int flip = 0; flip <= 1; flip++) {
                    dataset_augment_example(src, got, c, h, w, pad, dy, dx, flip);
                    s_augment_ref(src, want, c, h, w, pad, dy, dx, flip);
                    ck_assert_msg(memcmp(got, want, dim * sizeof *got) == 0,
                                  "seed %llu: %dx%dx%d pad %d dy %d dx %d flip %d", (unsigned long long)seed,
                                  c, h, w, pad, dy, dx, flip);
                }
        /* flip alone is an exact mirror, pad 0 without flip a copy */
        dataset_augment_example(src, got, c, h, w, 0, 0, 0, 1);
        for (int ch = 0; ch < c; ch++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                    ck_assert(got[((size_t)ch * h + y) * w + x] == src[((size_t)ch * h + y) * w + w - 1 - x]);
        dataset_augment_example(src, got, c, h, w, 0, 0, 0, 0);
        ck_assert(memcmp(got, src, dim * sizeof *got) == 0);
        /* offset (0, 0) moves content down-right by pad: pad zero rows and columns */
        if (pad > 0) {
            dataset_augment_example(src, got, c, h, w, pad, 0, 0, 0);
            for (int ch = 0; ch < c; ch++)
                for (int y = 0; y < h; y++)
                    for (int x = 0; x < w; x++) {
                        float v = got[((size_t)ch * h + y) * w + x];
                        if (y < pad || x < pad) ck_assert(v == 0.0f);
                        else ck_assert(v == src[((size_t)ch * h + y - pad) * w + x - pad]);
                    }
        }
        free(src);
        free(got);
        free(want);
    }
}
END_TEST

/* Run a batcher with augmentation over n examples (no shuffle) and check each
 * output is one of the reference candidates; returns how many distinct
 * (dy, dx, flip) choices appeared, counting them in hits. */
static int s_batcher_aug_choices(rng_t *r, uint64_t seed, int pad, int flip, int *hits) {
    enum { N = 64, C = 2, H = 6, W = 5 };
    dataset_t *ds = s_synth(r, N, C, H, W);
    batcher_opts_t o = {.batch = N, .seed = seed, .rank = 0, .n_ranks = 1, .aug_crop_pad = pad, .aug_flip = flip};
    batcher_t *b = batcher_new(ds, &o, NULL, 0);
    ck_assert_ptr_nonnull(b);
    float *x = malloc((size_t)N * C * H * W * sizeof *x), want[C * H * W];
    int y[N];
    ck_assert_int_eq(batcher_next(b, x, y), N);
    int n_choices = (2 * pad + 1) * (2 * pad + 1) * 2;
    memset(hits, 0, (size_t)n_choices * sizeof *hits);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(y[i], i);
        int matched = 0;
        for (int k = 0; k < n_choices && !matched; k++) {
            int dy = k / 2 / (2 * pad + 1), dx = k / 2 % (2 * pad + 1), fl = k % 2;
            s_augment_ref(ds->x + (size_t)i * C * H * W, want, C, H, W, pad, dy, dx, fl);
            if (memcmp(want, x + (size_t)i * C * H * W, sizeof want) == 0) {
                hits[k]++;
                matched = 1;
            }
        }
        ck_assert_msg(matched, "seed %llu: example %d is no crop/flip of its source", (unsigned long long)seed, i);
    }
    int distinct = 0;
    for (int k = 0; k < n_choices; k++) distinct += hits[k] > 0;
    free(x);
    batcher_free(&b);
    dataset_free(&ds);
    return distinct;
}

START_TEST(test_batcher_augmentation_draws) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    int hits[2 * 5 * 5];
    /* flip only: both outcomes among 64 draws (fails with probability 2^-63) */
    ck_assert_int_eq(s_batcher_aug_choices(&r, seed, 0, 1, hits), 2);
    ck_assert(hits[0] > 0 && hits[1] > 0);
    /* crop only: never flipped, many offsets (25 equally likely, 64 draws) */
    int d = s_batcher_aug_choices(&r, seed, 2, 0, hits);
    for (int k = 1; k < 50; k += 2) ck_assert_int_eq(hits[k], 0);
    ck_assert_msg(d >= 8, "seed %llu: only %d crop offsets in 64 draws", (unsigned long long)seed, d);
    /* both */
    d = s_batcher_aug_choices(&r, seed, 2, 1, hits);
    ck_assert_msg(d >= 8, "seed %llu: only %d crop/flip choices in 64 draws", (unsigned long long)seed, d);
    /* augmentation does not change the order of a shuffled shard */
    dataset_t *ds = s_synth(&r, 30, 1, 4, 4);
    batcher_opts_t o = {.batch = 30, .seed = seed, .rank = 1, .n_ranks = 2, .shuffle = 1};
    batcher_t *plain = batcher_new(ds, &o, NULL, 0);
    o.aug_crop_pad = 1;
    o.aug_flip = 1;
    batcher_t *aug = batcher_new(ds, &o, NULL, 0);
    float x[30 * 16];
    int y1[30], y2[30];
    for (int e = 0; e < 3; e++) {
        ck_assert_int_eq(batcher_next(plain, x, y1), 15);
        ck_assert_int_eq(batcher_next(aug, x, y2), 15);
        ck_assert(memcmp(y1, y2, sizeof y1[0] * 15) == 0);
    }
    batcher_free(&plain);
    batcher_free(&aug);
    dataset_free(&ds);
}
END_TEST

/* ---- the real files ------------------------------------------------------ */

static void s_check_real(const char *name, const char *probe, int lo, int hi) {
    if (access(probe, R_OK) != 0) {
        printf("skipped: data/%s missing\n", name);
        return;
    }
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
    s_check_real("mnist", "data/mnist/t10k-images-idx3-ubyte", 850, 1200);
}
END_TEST

START_TEST(test_fashion_mnist_real_test_split) {
    /* Fashion-MNIST's test split is balanced: 1000 per class */
    s_check_real("fashion-mnist", "data/fashion-mnist/t10k-images-idx3-ubyte.gz", 1000, 1000);
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
    tcase_add_test(tc, test_batcher_shards_cover_once);
    tcase_add_test(tc, test_batcher_rejects_bad_options);
    tcase_add_test(tc, test_batcher_shuffle_seeded);
    tcase_add_test(tc, test_batcher_epochs_and_drop_last);
    tcase_add_test(tc, test_augment_matches_reference);
    tcase_add_test(tc, test_batcher_augmentation_draws);
    tcase_add_test(tc, test_mnist_real_test_split);
    tcase_add_test(tc, test_fashion_mnist_real_test_split);
    suite_add_tcase(s, tc);
    return s;
}
