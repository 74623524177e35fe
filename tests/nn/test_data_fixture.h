/* tests/nn/test_data_fixture.h — helpers the data-set tests share
 * (tests/nn/test_data*.c, one binary each): a mkdtemp directory, writers of
 * plain or gzip IDX files, random bytes, and the exact check of normalized
 * values against the float formula and the double one. Included by test
 * files only; every helper is static (unused ones are fine).
 */
#ifndef KFAC_TESTS_NN_TEST_DATA_FIXTURE_H
#define KFAC_TESTS_NN_TEST_DATA_FIXTURE_H

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/nn/data.h"
#include "common/base/rng.h"

typedef struct tmpdir { char path[256]; } tmpdir_t;

static __attribute__((unused)) void s_tmp_new(tmpdir_t *t) {
    const char *base = getenv("TMPDIR");
    snprintf(t->path, sizeof t->path, "%s/kfac-test-data-XXXXXX", base && base[0] ? base : "/tmp");
    ck_assert_msg(mkdtemp(t->path) != NULL, "mkdtemp failed: %s", strerror(errno));
}

static __attribute__((unused)) void s_rm_rf(const char *path) {
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

static __attribute__((unused)) void s_join(char *dst, size_t len, const char *dir, const char *name) {
    snprintf(dst, len, "%s/%s", dir, name);
}

/* Write hdr (hdr_len bytes) then body (body_len bytes), gzip-compressed if gz. */
static __attribute__((unused)) void s_write(const char *path, const void *hdr, size_t hdr_len, const void *body, size_t body_len, int gz) {
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

static __attribute__((unused)) void s_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);  p[3] = (unsigned char)v;
}

/* IDX images file: magic, n, h, w, then body_len bytes of body. */
static __attribute__((unused)) void s_write_idx_images(const char *path, uint32_t magic, uint32_t n, uint32_t h, uint32_t w,
                               const uint8_t *body, size_t body_len, int gz) {
    unsigned char hdr[16];
    s_be32(hdr, magic); s_be32(hdr + 4, n); s_be32(hdr + 8, h); s_be32(hdr + 12, w);
    s_write(path, hdr, 16, body, body_len, gz);
}

static __attribute__((unused)) void s_write_idx_labels(const char *path, uint32_t magic, uint32_t n, const uint8_t *body,
                               size_t body_len, int gz) {
    unsigned char hdr[8];
    s_be32(hdr, magic); s_be32(hdr + 4, n);
    s_write(path, hdr, 8, body, body_len, gz);
}

static __attribute__((unused)) void s_fill_random(rng_t *r, uint8_t *p, size_t n, unsigned below) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rng_below(r, below);
}

/* Compare a loaded set against raw bytes (c, hw) per example and constants. */
static __attribute__((unused)) void s_check_values(const dataset_t *ds, const uint8_t *raw, size_t raw_stride, size_t raw_skip,
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

#endif
