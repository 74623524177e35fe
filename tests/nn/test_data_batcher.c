/* tests/nn/test_data_batcher.c — the batcher (common/nn/data_batcher.c):
 * sharding covers every example once, seeded shuffling, epochs and
 * drop_last, bad options, and augmentation against a step-by-step
 * reference (augmentation only moves values, so it is compared exactly).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/nn/data.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"

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

Suite *make_suite(void) {
    Suite *s = suite_create("data_batcher");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_batcher_shards_cover_once);
    tcase_add_test(tc, test_batcher_rejects_bad_options);
    tcase_add_test(tc, test_batcher_shuffle_seeded);
    tcase_add_test(tc, test_batcher_epochs_and_drop_last);
    tcase_add_test(tc, test_augment_matches_reference);
    tcase_add_test(tc, test_batcher_augmentation_draws);
    suite_add_tcase(s, tc);
    return s;
}
