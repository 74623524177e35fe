/* common/nn/data_user.c — data sets from any source (data.h,
 * dataset_source_*): the built-in sets by name, and the user's own IDX or
 * NumPy .npy files, checked against the model's input shape and classes and
 * normalized with configured or computed per-channel constants.
 *
 * Files are read through data_reader_t (plain or gzip, data_int.h): for a
 * plain .npy the size the header announces is checked against the file
 * before the payload is allocated. Raw examples (bytes or floats, NCHW) are
 * held in a data_raw_t until they are normalized into a dataset_t.
 * Messages are "path: problem" with what fixes it.
 */
#include "common/nn/data.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/nn/data_int.h"
#include "common/nn/npy.h"

static void s_err(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void s_err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

int dataset_source_path(const dataset_source_t *src, const char *path, char *out, size_t len) {
    size_t nd = path[0] == '/' ? 0 : strlen(src->dir), np = strlen(path);
    if (nd + 1 + np + 1 > len) return -ENAMETOOLONG;
    if (nd) {
        memcpy(out, src->dir, nd);
        out[nd++] = '/';
    }
    memcpy(out + nd, path, np + 1);
    return 0;
}

static const char *s_model(const dataset_source_t *src) { return src->model[0] ? src->model : "the model"; }

/* ---- .npy ------------------------------------------------------------------ */

/* Read a whole .npy file: its header and its payload (*data, caller frees). */
static int s_npy_read(const char *path, npy_header_t *h, uint8_t **data, char *err, size_t err_len) {
    data_reader_t r;
    uint8_t pre[NPY_PREAMBLE_V2];
    char *dict = NULL;
    *data = NULL;
    memset(h, 0, sizeof *h);
    char why[400];
    int rc = data_reader_open(&r, path, err, err_len);
    if (rc) return rc;
    long long k = data_reader_read(&r, pre, NPY_PREAMBLE_V1, err, err_len);
    if (k < 0) { rc = (int)k; goto cleanup; }
    if (k == NPY_PREAMBLE_V1 && pre[6] == 2) { /* version 2.0: a 4-byte header length */
        long long k2 = data_reader_read(&r, pre + k, NPY_PREAMBLE_V2 - NPY_PREAMBLE_V1, err, err_len);
        if (k2 < 0) { rc = (int)k2; goto cleanup; }
        k += k2;
    }
    size_t dict_len = 0, pre_len = 0;
    if ((rc = npy_parse_preamble(pre, (size_t)k, h, &dict_len, &pre_len, why, sizeof why)) < 0) {
        s_err(err, err_len, "%s: %s", path, why);
        goto cleanup;
    }
    if (!(dict = malloc(dict_len))) {
        s_err(err, err_len, "%s: out of memory", path);
        rc = -ENOMEM;
        goto cleanup;
    }
    k = data_reader_read(&r, dict, (long long)dict_len, err, err_len);
    if (k < 0) { rc = (int)k; goto cleanup; }
    if ((size_t)k < dict_len) {
        s_err(err, err_len, "%s: header: the file ends inside the header (%lld of %zu bytes)", path, k, dict_len);
        rc = -EINVAL;
        goto cleanup;
    }
    if ((rc = npy_parse_dict(dict, dict_len, h, why, sizeof why)) < 0) {
        s_err(err, err_len, "%s: %s", path, why);
        goto cleanup;
    }
    int64_t count = npy_count(h);
    long long payload = (long long)count * (long long)npy_dtype_size(h->dtype);
    char shape[160];
    npy_shape_text(h, shape, sizeof shape);
    if (payload > DATASET_MAX_BYTES) {
        s_err(err, err_len, "%s: shape: %s of %s is %lld bytes, more than the %lld allowed", path, shape,
              npy_dtype_name(h->dtype), payload, DATASET_MAX_BYTES);
        rc = -EINVAL;
        goto cleanup;
    }
    long long expected = (long long)h->data_offset + payload;
    if (r.file_bytes >= 0 && r.file_bytes != expected) {
        s_err(err, err_len, "%s: size mismatch: shape %s of %s needs %lld bytes, the file has %lld (%s)", path,
              shape, npy_dtype_name(h->dtype), expected, r.file_bytes,
              r.file_bytes < expected ? "truncated" : "extra data after the end");
        rc = -EINVAL;
        goto cleanup;
    }
    long long got = 0;
    if ((rc = data_reader_read_all(&r, payload, data, &got, err, err_len)) < 0) goto cleanup;
    if (got < payload) {
        s_err(err, err_len, "%s: truncated: shape %s of %s needs %lld bytes of data, the file has %lld", path, shape,
              npy_dtype_name(h->dtype), payload, got);
        rc = -EINVAL;
        goto cleanup;
    }
    rc = data_reader_check_end(&r, expected, err, err_len);
cleanup:
    data_reader_close(&r);
    free(dict);
    if (rc) {
        free(*data);
        *data = NULL;
    }
    return rc;
}

/* The model's shape against the examples'. */
static int s_check_shape(const dataset_source_t *src, const char *path, int c, int h, int w, char *err,
                         size_t err_len) {
    if (!src->in_c || (c == src->in_c && h == src->in_h && w == src->in_w)) return 0;
    s_err(err, err_len, "%s: examples are %d x %d x %d (C x H x W) but %s takes %d x %d x %d (its input line): "
          "check [data] and [model] file", path, c, h, w, s_model(src), src->in_c, src->in_h, src->in_w);
    return -EINVAL;
}

/* Images and labels of one split from .npy files into raw. */
static int s_npy_raw(const dataset_source_t *src, const char *ipath, const char *lpath, int want_labels,
                     data_raw_t *raw, char *err, size_t err_len) {
    npy_header_t hi, hl;
    uint8_t *img = NULL, *lab = NULL;
    char shape[160];
    memset(raw, 0, sizeof *raw);
    int rc = s_npy_read(ipath, &hi, &img, err, err_len);
    if (rc) return rc;
    rc = -EINVAL;
    npy_shape_text(&hi, shape, sizeof shape);
    if (hi.dtype != NPY_DTYPE_U8 && hi.dtype != NPY_DTYPE_F32) {
        s_err(err, err_len, "%s: descr: images must be uint8 or float32, not %s (arr.astype(numpy.float32))", ipath,
              npy_dtype_name(hi.dtype));
        goto fail;
    }
    int64_t n = hi.ndim >= 1 ? hi.shape[0] : 0, c = 0, h = 0, w = 0;
    if (hi.ndim == 3) {
        c = 1; h = hi.shape[1]; w = hi.shape[2];
    } else if (hi.ndim == 4) {
        c = hi.shape[1]; h = hi.shape[2]; w = hi.shape[3];
    } else if (hi.ndim == 2) {
        if (!src->in_c) {
            s_err(err, err_len, "%s: shape: flat images %s need the model's input shape to be read", ipath, shape);
            goto fail;
        }
        if (hi.shape[1] != (int64_t)src->in_c * src->in_h * src->in_w) {
            s_err(err, err_len, "%s: shape: images %s have %lld values each but %s takes %d x %d x %d = %d "
                  "(its input line)", ipath, shape, (long long)hi.shape[1], s_model(src), src->in_c, src->in_h,
                  src->in_w, src->in_c * src->in_h * src->in_w);
            goto fail;
        }
        c = src->in_c; h = src->in_h; w = src->in_w;
    } else {
        s_err(err, err_len, "%s: shape: images must be (N, H, W), (N, C, H, W) or (N, C*H*W), not %s", ipath, shape);
        goto fail;
    }
    if (n < 1 || c < 1 || h < 1 || w < 1 || n > 0x7fffffff || h * w > 0x7fffffff) {
        s_err(err, err_len, "%s: shape: %s: every dimension must be at least 1", ipath, shape);
        goto fail;
    }
    if (c > DATASET_MAX_CHANNELS) {
        s_err(err, err_len, "%s: shape: %s has %lld channels, at most %d are supported (is it (N, H, W, C)? "
              "use arr.transpose(0, 3, 1, 2))", ipath, shape, (long long)c, DATASET_MAX_CHANNELS);
        goto fail;
    }
    if ((rc = s_check_shape(src, ipath, (int)c, (int)h, (int)w, err, err_len)) < 0) goto fail;
    rc = -EINVAL;
    raw->n = (int)n; raw->c = (int)c; raw->h = (int)h; raw->w = (int)w;
    if (hi.dtype == NPY_DTYPE_U8) {
        raw->u8 = img;
        img = NULL;
    } else {
        raw->f32 = (float *)(void *)img; /* malloc'd, so aligned; '<f4' is this (little-endian) host's float */
        img = NULL;
        size_t total = (size_t)n * (size_t)(c * h * w);
        for (size_t i = 0; i < total; i++)
            if (!isfinite(raw->f32[i])) {
                s_err(err, err_len, "%s: value %zu (example %zu) is %s: images must be finite", ipath, i,
                      i / (size_t)(c * h * w), isnan(raw->f32[i]) ? "NaN" : "infinite");
                goto fail_raw;
            }
    }
    if (!want_labels) return 0;
    if ((rc = s_npy_read(lpath, &hl, &lab, err, err_len)) < 0) goto fail_raw;
    rc = -EINVAL;
    npy_shape_text(&hl, shape, sizeof shape);
    if (hl.ndim != 1) {
        s_err(err, err_len, "%s: shape: labels must be (N,), not %s (arr.reshape(-1))", lpath, shape);
        goto fail_raw;
    }
    if (hl.shape[0] != n) {
        s_err(err, err_len, "image/label count mismatch: %s has %lld images, %s has %lld labels", ipath, (long long)n,
              lpath, (long long)hl.shape[0]);
        goto fail_raw;
    }
    if (hl.dtype == NPY_DTYPE_F32) {
        s_err(err, err_len, "%s: descr: labels must be integers (int64, int32 or uint8), not float32 "
              "(arr.astype(numpy.int64))", lpath);
        goto fail_raw;
    }
    if (!(raw->y = malloc((size_t)n * sizeof *raw->y))) {
        s_err(err, err_len, "%s: out of memory", lpath);
        rc = -ENOMEM;
        goto fail_raw;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t v;
        switch (hl.dtype) {
        case NPY_DTYPE_U8: v = lab[i]; break;
        case NPY_DTYPE_I8: v = (int8_t)lab[i]; break;
        case NPY_DTYPE_I32: { int32_t t; memcpy(&t, lab + 4 * i, 4); v = t; break; }
        default: memcpy(&v, lab + 8 * i, 8); break;
        }
        if (v < 0 || (src->n_classes > 0 && v >= src->n_classes) || v > 0x7fffffff) {
            if (src->n_classes > 0)
                s_err(err, err_len, "%s: label %lld at index %lld is outside the %d classes of %s (labels must be "
                      "0 to %d)", lpath, (long long)v, (long long)i, src->n_classes, s_model(src), src->n_classes - 1);
            else
                s_err(err, err_len, "%s: label %lld at index %lld is negative", lpath, (long long)v, (long long)i);
            goto fail_raw;
        }
        raw->y[i] = (int)v;
    }
    free(lab);
    return 0;
fail_raw:
    data_raw_release(raw);
fail:
    free(img);
    free(lab);
    return rc;
}

/* ---- raw examples of either format ---------------------------------------- */

static int s_raw(const dataset_source_t *src, int train, int want_labels, data_raw_t *raw, char *err, size_t err_len) {
    char ip[DATASET_PATH_MAX], lp[DATASET_PATH_MAX];
    const char *i0 = train ? src->train_images : src->test_images, *l0 = train ? src->train_labels : src->test_labels;
    const char *key = train ? "train_images" : "test_images";
    if (!i0[0] || (want_labels && !l0[0])) {
        s_err(err, err_len, "[data] set = %s needs [data] %s and %s", src->name, key,
              train ? "train_labels" : "test_labels");
        return -EINVAL;
    }
    if (dataset_source_path(src, i0, ip, sizeof ip) < 0 || dataset_source_path(src, l0, lp, sizeof lp) < 0) {
        s_err(err, err_len, "[data] %s: the path under [data] dir %s is too long", key, src->dir);
        return -ENAMETOOLONG;
    }
    if (src->kind == DATASET_SOURCE_NPY) return s_npy_raw(src, ip, lp, want_labels, raw, err, err_len);
    /* IDX: images and labels are read together (the label file is small) */
    return data_idx_read_raw(ip, lp, src->n_classes > 0 ? src->n_classes : 256, raw, err, err_len);
}

/* Per-channel mean and std of raw, in double, on the normalization's scale. */
static int s_raw_norm(const data_raw_t *raw, const char *path, dataset_norm_t *out, char *err, size_t err_len) {
    size_t hw = (size_t)raw->h * (size_t)raw->w;
    memset(out, 0, sizeof *out);
    out->c = raw->c;
    for (int ch = 0; ch < raw->c; ch++) {
        double mean = 0, var = 0, count = (double)raw->n * (double)hw;
        if (raw->u8) { /* exact: a histogram of the 256 byte values */
            double hist[256] = {0};
            for (int i = 0; i < raw->n; i++) {
                const uint8_t *p = raw->u8 + ((size_t)i * raw->c + ch) * hw;
                for (size_t k = 0; k < hw; k++) hist[p[k]] += 1;
            }
            for (int v = 0; v < 256; v++) mean += hist[v] * (v / 255.0);
            mean /= count;
            for (int v = 0; v < 256; v++) var += hist[v] * (v / 255.0 - mean) * (v / 255.0 - mean);
        } else { /* two passes */
            for (int i = 0; i < raw->n; i++) {
                const float *p = raw->f32 + ((size_t)i * raw->c + ch) * hw;
                for (size_t k = 0; k < hw; k++) mean += p[k];
            }
            mean /= count;
            for (int i = 0; i < raw->n; i++) {
                const float *p = raw->f32 + ((size_t)i * raw->c + ch) * hw;
                for (size_t k = 0; k < hw; k++) var += ((double)p[k] - mean) * ((double)p[k] - mean);
            }
        }
        double sd = sqrt(var / count);
        if (!(sd > 1e-12) || !isfinite(sd)) {
            s_err(err, err_len, "%s: channel %d of the training images has no variance (every value %g): set "
                  "[data] mean and [data] std", path, ch, mean);
            return -EINVAL;
        }
        out->mean[ch] = (float)mean;
        out->std[ch] = (float)sd;
    }
    return 0;
}

int dataset_source_norm(const dataset_source_t *src, dataset_norm_t *out, char *err, size_t err_len) {
    if (src->kind == DATASET_SOURCE_NAMED) {
        s_err(err, err_len, "dataset_source_norm: the built-in set %s has fixed constants", src->name);
        return -EINVAL;
    }
    data_raw_t raw;
    /* IDX reads its labels too; .npy needs only the images */
    int rc = s_raw(src, 1, src->kind == DATASET_SOURCE_IDX, &raw, err, err_len);
    if (rc) return rc;
    char path[DATASET_PATH_MAX];
    dataset_source_path(src, src->train_images, path, sizeof path);
    rc = s_raw_norm(&raw, path, out, err, err_len);
    data_raw_release(&raw);
    return rc;
}

int dataset_source_load(const dataset_source_t *src, int train, dataset_t **out, char *err, size_t err_len) {
    *out = NULL;
    if (err && err_len) err[0] = 0;
    if (src->kind == DATASET_SOURCE_NAMED) {
        dataset_t *ds = NULL;
        int rc = dataset_load_named(src->name, src->dir, train, &ds, err, err_len);
        if (rc) return rc;
        char what[96];
        snprintf(what, sizeof what, "%s (%s split)", src->name, train ? "training" : "test");
        if ((rc = s_check_shape(src, what, ds->c, ds->h, ds->w, err, err_len)) == 0 && src->n_classes > 0 &&
            ds->n_classes != src->n_classes) {
            s_err(err, err_len, "%s has %d classes but %s outputs %d: check [data] set and [model] file", src->name,
                  ds->n_classes, s_model(src), src->n_classes);
            rc = -EINVAL;
        }
        if (rc) dataset_free(&ds);
        *out = ds;
        return rc;
    }
    data_raw_t raw;
    int rc = s_raw(src, train, 1, &raw, err, err_len);
    if (rc) return rc;
    char path[DATASET_PATH_MAX];
    dataset_source_path(src, train ? src->train_images : src->test_images, path, sizeof path);
    dataset_norm_t norm;
    dataset_t *ds = NULL;
    if ((rc = s_check_shape(src, path, raw.c, raw.h, raw.w, err, err_len)) < 0) goto done;
    if (src->has_norm) {
        norm = src->norm;
        if (norm.c == 1)
            for (int ch = 1; ch < raw.c; ch++) norm.mean[ch] = norm.mean[0], norm.std[ch] = norm.std[0];
        else if (norm.c != raw.c) {
            s_err(err, err_len, "[data] mean and std give %d values but %s has %d channels (give 1 or %d)", norm.c,
                  path, raw.c, raw.c);
            rc = -EINVAL;
            goto done;
        }
        norm.c = raw.c;
    } else if (train) {
        if ((rc = s_raw_norm(&raw, path, &norm, err, err_len)) < 0) goto done;
        char m[96] = "", sd[96] = "";
        for (int ch = 0; ch < norm.c; ch++) {
            snprintf(m + strlen(m), sizeof m - strlen(m), "%s%.6g", ch ? ", " : "", norm.mean[ch]);
            snprintf(sd + strlen(sd), sizeof sd - strlen(sd), "%s%.6g", ch ? ", " : "", norm.std[ch]);
        }
        log_info("%s: normalization computed from the %d training images: mean %s, std %s (set [data] mean and "
                 "std to fix them)", path, raw.n, m, sd);
    } else if ((rc = dataset_source_norm(src, &norm, err, err_len)) < 0) {
        goto done;
    }
    int n_classes = src->n_classes;
    if (n_classes <= 0)
        for (int i = 0; i < raw.n; i++) n_classes = raw.y[i] + 1 > n_classes ? raw.y[i] + 1 : n_classes;
    if (!(ds = data_dataset_alloc(raw.n, raw.c, raw.h, raw.w, n_classes, &norm, src->name))) {
        s_err(err, err_len, "%s: out of memory for %d examples of %d x %d x %d floats", path, raw.n, raw.c, raw.h,
              raw.w);
        rc = -ENOMEM;
        goto done;
    }
    size_t hw = (size_t)raw.h * raw.w;
    if (raw.u8) {
        dataset_normalize_u8(&norm, raw.u8, raw.n, (int)hw, ds->x);
    } else {
        for (int i = 0; i < raw.n; i++)
            for (int ch = 0; ch < raw.c; ch++) {
                size_t off = ((size_t)i * raw.c + ch) * hw;
                for (size_t k = 0; k < hw; k++) ds->x[off + k] = (raw.f32[off + k] - norm.mean[ch]) / norm.std[ch];
            }
    }
    memcpy(ds->y, raw.y, (size_t)raw.n * sizeof *ds->y);
    *out = ds;
    rc = 0;
done:
    data_raw_release(&raw);
    return rc;
}
