/* common/nn/data_batcher.c — mini-batches over one worker's shard of a data set:
 * strided sharding, per-epoch Fisher-Yates shuffling and CIFAR-style
 * augmentation (zero-padded random crop, horizontal flip).
 *
 * Layout: examples are float32 (c, h, w) row-major, a batch is (batch, c*h*w).
 * Two rng_t streams, both derived from the seed and the rank: one orders the
 * shard, the other draws augmentation choices, so the order does not depend
 * on whether augmentation is on. A batcher borrows its data set and is used
 * from one thread.
 */
#include "common/nn/data.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"

struct batcher {
    const dataset_t *ds;    /* borrowed */
    batcher_opts_t o;
    size_t dim;             /* c*h*w */
    int shard_n;            /* examples in this shard */
    int *order;             /* (shard_n) data set indices, this epoch's order */
    int pos;                /* next position in order */
    long epoch;             /* completed epochs */
    rng_t shuffle_rng;
    rng_t aug_rng;
};

static void s_err(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void s_err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

void dataset_augment_example(const float *src, float *dst, int c, int h, int w, int pad, int dy, int dx,
                             int flip) {
    /* dst[ch][y][x] = src[ch][y + oy][xs + ox] with xs = x or w-1-x, 0 outside */
    int oy = dy - pad, ox = dx - pad;
    size_t hw = (size_t)h * (size_t)w;
    for (int ch = 0; ch < c; ch++) {
        const float *s = src + (size_t)ch * hw;
        float *d = dst + (size_t)ch * hw;
        for (int y = 0; y < h; y++) {
            float *drow = d + (size_t)y * w;
            int sy = y + oy;
            if (sy < 0 || sy >= h) {
                memset(drow, 0, (size_t)w * sizeof *drow);
                continue;
            }
            const float *srow = s + (size_t)sy * w;
            for (int x = 0; x < w; x++) {
                int sx = (flip ? w - 1 - x : x) + ox;
                drow[x] = (sx >= 0 && sx < w) ? srow[sx] : 0.0f;
            }
        }
    }
}

static void s_shuffle(batcher_t *b) {
    /* Fisher-Yates: a uniform permutation of the current order */
    for (int i = b->shard_n - 1; i > 0; i--) {
        int j = (int)rng_below(&b->shuffle_rng, (uint32_t)i + 1);
        int t = b->order[i];
        b->order[i] = b->order[j];
        b->order[j] = t;
    }
}

batcher_t *batcher_new(const dataset_t *ds, const batcher_opts_t *opts, char *err, size_t err_len) {
    if (err && err_len) err[0] = '\0';
    if (!ds || !opts || !ds->x || !ds->y || ds->n < 1 || ds->c < 1 || ds->h < 1 || ds->w < 1) {
        s_err(err, err_len, "batcher_new: need a non-empty data set and options");
        return NULL;
    }
    const batcher_opts_t *o = opts;
    if (o->batch < 1) {
        s_err(err, err_len, "batcher_new: batch size %d must be >= 1", o->batch);
        return NULL;
    }
    if (o->n_ranks < 1 || o->rank < 0 || o->rank >= o->n_ranks) {
        s_err(err, err_len, "batcher_new: rank %d of %d ranks is not in [0, n_ranks)", o->rank, o->n_ranks);
        return NULL;
    }
    int shard_n = (int)(((long long)ds->n - o->rank + o->n_ranks - 1) / o->n_ranks);
    if (shard_n < 1) {
        s_err(err, err_len, "batcher_new: shard %d of %d is empty: %s has only %d examples",
              o->rank, o->n_ranks, ds->name[0] ? ds->name : "the data set", ds->n);
        return NULL;
    }
    int min_hw = ds->h < ds->w ? ds->h : ds->w;
    if (o->aug_crop_pad < 0 || o->aug_crop_pad > min_hw) {
        s_err(err, err_len, "batcher_new: crop padding %d must be in [0, %d] for %d x %d images",
              o->aug_crop_pad, min_hw, ds->h, ds->w);
        return NULL;
    }
    if (o->drop_last && o->batch > shard_n) {
        s_err(err, err_len, "batcher_new: drop_last with batch %d larger than the shard (%d examples) "
              "would never yield a batch", o->batch, shard_n);
        return NULL;
    }
    batcher_t *b = calloc(1, sizeof *b);
    if (b) b->order = malloc((size_t)shard_n * sizeof *b->order);
    if (!b || !b->order) {
        s_err(err, err_len, "batcher_new: out of memory for a shard of %d examples", shard_n);
        if (b) free(b->order);
        free(b);
        return NULL;
    }
    b->ds = ds;
    b->o = *o;
    b->dim = (size_t)ds->c * (size_t)ds->h * (size_t)ds->w;
    b->shard_n = shard_n;
    for (int i = 0; i < shard_n; i++) b->order[i] = o->rank + i * o->n_ranks;
    uint64_t r = (uint64_t)o->rank * 2 + 1;
    rng_seed(&b->shuffle_rng, o->seed ^ (0x5348554646ULL * r));   /* "SHUFF" */
    rng_seed(&b->aug_rng, o->seed ^ (0x4155474d4eULL * r));       /* "AUGMN" */
    if (o->shuffle) s_shuffle(b);
    return b;
}

int batcher_next(batcher_t *b, float *x, int *y) {
    if (!b || !x) return -EINVAL;
    const dataset_t *ds = b->ds;
    int left = b->shard_n - b->pos;
    int count = left < b->o.batch ? left : b->o.batch;
    int pad = b->o.aug_crop_pad, aug = pad > 0 || b->o.aug_flip;
    for (int k = 0; k < count; k++) {
        int idx = b->order[b->pos + k];
        const float *src = ds->x + (size_t)idx * b->dim;
        float *dst = x + (size_t)k * b->dim;
        if (aug) {
            int dy = pad > 0 ? (int)rng_below(&b->aug_rng, 2u * (uint32_t)pad + 1) : 0;
            int dx = pad > 0 ? (int)rng_below(&b->aug_rng, 2u * (uint32_t)pad + 1) : 0;
            int flip = b->o.aug_flip ? (int)rng_below(&b->aug_rng, 2) : 0;
            dataset_augment_example(src, dst, ds->c, ds->h, ds->w, pad, dy, dx, flip);
        } else {
            memcpy(dst, src, b->dim * sizeof *dst);
        }
        if (y) y[k] = ds->y[idx];
    }
    b->pos += count;
    if (b->pos == b->shard_n || (b->o.drop_last && b->shard_n - b->pos < b->o.batch)) {
        b->epoch++;
        b->pos = 0;
        if (b->o.shuffle) s_shuffle(b);
    }
    return count;
}

long batcher_epoch(const batcher_t *b) { return b ? b->epoch : 0; }

int batcher_shard_size(const batcher_t *b) { return b ? b->shard_n : 0; }

void batcher_free(batcher_t **b_p) {
    if (!b_p || !*b_p) return;
    free((*b_p)->order);
    free(*b_p);
    *b_p = NULL;
}
