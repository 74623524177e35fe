/* common/nn/data.c — loading data sets: IDX (MNIST, Fashion-MNIST; plain or
 * gzip) and CIFAR-10 binary batches into normalized float32 NCHW arrays.
 *
 * Every file is read through one small reader that detects gzip by its magic
 * bytes (1f 8b) and otherwise uses stdio, so plain files have a known size
 * that is checked against the header before anything is allocated. Payloads
 * of gzip files are read into a buffer that grows as data actually arrives,
 * so a lying header in a short file never causes a large allocation. Errors
 * are written to the caller's buffer as "path: problem; fix: command".
 * The batcher lives in data_batcher.c.
 */
#include "common/nn/data.h"
#include "common/nn/data_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define CIFAR_RECORD 3073
#define CIFAR_PIXELS 3072
#define N_CLASSES 10
#define GZ_FIRST_CHUNK (1LL << 24)

static const char s_fix_idx[] = "; fix: run `make data` (or `sh tools/fetch-data.sh`)";

/* ---- messages ----------------------------------------------------------- */

static void s_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_err(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || err_len == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* Append text to the message already in err (truncating at err_len). */
static void s_err_append(char *err, size_t err_len, const char *text) {
    if (!err || err_len == 0) return;
    size_t used = strnlen(err, err_len);
    if (used + 1 >= err_len) return;
    snprintf(err + used, err_len - used, "%s", text);
}

/* The CIFAR-10 fix hint for a file at `path`: where the batches go. */
static void s_err_append_cifar_fix(char *err, size_t err_len, const char *path) {
    char dir[1024];
    const char *slash = path ? strrchr(path, '/') : NULL;
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else snprintf(dir, sizeof dir, ".");
    char hint[1600];
    snprintf(hint, sizeof hint,
             "; fix: CIFAR-10 is not downloaded automatically: get the binary version "
             "(cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html), "
             "extract it and put data_batch_1.bin..data_batch_5.bin and test_batch.bin in %s "
             "(default data/" DATASET_CIFAR10_SUBDIR ")", dir);
    s_err_append(err, err_len, hint);
}

/* ---- one file, plain or gzip ------------------------------------------- */


int data_reader_open(data_reader_t *r, const char *path, char *err, size_t err_len) {
    memset(r, 0, sizeof *r);
    r->path = path;
    r->file_bytes = -1;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno ? errno : EIO;
        s_err(err, err_len, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        s_err(err, err_len, "%s: not a regular file", path);
        return -EINVAL;
    }
    unsigned char m[2];
    size_t k = fread(m, 1, 2, f);
    if (k == 2 && m[0] == 0x1f && m[1] == 0x8b) {
        fclose(f);
        r->gz = gzopen(path, "rb");
        if (!r->gz) {
            int e = errno ? errno : EIO;
            s_err(err, err_len, "%s: cannot open gzip file: %s", path, strerror(e));
            return -e;
        }
        gzbuffer(r->gz, 1u << 17);
        return 0;
    }
    if (fseek(f, 0, SEEK_SET) != 0) {
        int e = errno ? errno : EIO;
        fclose(f);
        s_err(err, err_len, "%s: cannot seek: %s", path, strerror(e));
        return -e;
    }
    r->f = f;
    r->file_bytes = (long long)st.st_size;
    return 0;
}

void data_reader_close(data_reader_t *r) {
    if (r->f) fclose(r->f);
    if (r->gz) gzclose(r->gz);
    r->f = NULL;
    r->gz = NULL;
}

/* Read up to n bytes; returns the count (< n only at end of file) or a
 * negative errno with a message. */
long long data_reader_read(data_reader_t *r, void *buf, long long n, char *err, size_t err_len) {
    unsigned char *p = buf;
    long long done = 0;
    while (done < n) {
        long long want = n - done;
        if (want > (1LL << 30)) want = 1LL << 30;
        if (r->gz) {
            int k = gzread(r->gz, p + done, (unsigned)want);
            if (k < 0) {
                int zerr = 0;
                const char *msg = gzerror(r->gz, &zerr);
                s_err(err, err_len, "%s: corrupt gzip data: %s", r->path, msg ? msg : "?");
                return zerr == Z_ERRNO ? -EIO : -EINVAL;
            }
            if (k == 0) break;
            done += k;
        } else {
            size_t k = fread(p + done, 1, (size_t)want, r->f);
            if (k == 0) {
                if (ferror(r->f)) {
                    s_err(err, err_len, "%s: read error: %s", r->path, strerror(errno ? errno : EIO));
                    return -EIO;
                }
                break;
            }
            done += (long long)k;
        }
    }
    r->got += done;
    return done;
}

/* Read up to `want` bytes into a new buffer (*buf_out, caller frees) that
 * grows as data arrives; *got_out < want means the file ended early. */
int data_reader_read_all(data_reader_t *r, long long want, uint8_t **buf_out, long long *got_out,
                             char *err, size_t err_len) {
    *buf_out = NULL;
    *got_out = 0;
    long long cap = want;
    if (r->gz && cap > GZ_FIRST_CHUNK) cap = GZ_FIRST_CHUNK;
    uint8_t *buf = malloc(cap > 0 ? (size_t)cap : 1);
    if (!buf) {
        s_err(err, err_len, "%s: out of memory for %lld bytes", r->path, cap);
        return -ENOMEM;
    }
    long long got = 0;
    for (;;) {
        long long k = data_reader_read(r, buf + got, cap - got, err, err_len);
        if (k < 0) {
            free(buf);
            return (int)k;
        }
        got += k;
        if (got < cap || cap == want) break;
        long long ncap = cap * 2 < want ? cap * 2 : want;
        uint8_t *nb = realloc(buf, (size_t)ncap);
        if (!nb) {
            free(buf);
            s_err(err, err_len, "%s: out of memory for %lld bytes", r->path, ncap);
            return -ENOMEM;
        }
        buf = nb;
        cap = ncap;
    }
    *buf_out = buf;
    *got_out = got;
    return 0;
}

/* After the expected payload: is there more? 0 if the file ends here. */
int data_reader_check_end(data_reader_t *r, long long expected, char *err, size_t err_len) {
    if (r->file_bytes >= 0) {
        if (r->file_bytes > expected) {
            s_err(err, err_len, "%s: size mismatch: expected %lld bytes got %lld (extra data after the end)",
                  r->path, expected, r->file_bytes);
            return -EINVAL;
        }
        return 0;
    }
    unsigned char one;
    long long k = data_reader_read(r, &one, 1, err, err_len);
    if (k < 0) return (int)k;
    if (k > 0) {
        s_err(err, err_len, "%s: size mismatch: expected %lld bytes got more (extra data after the end)",
              r->path, expected);
        return -EINVAL;
    }
    return 0;
}

/* ---- normalization ------------------------------------------------------ */

int dataset_norm_lookup(const char *name, dataset_norm_t *out) {
    if (!name || !out) return -EINVAL;
    dataset_norm_t n;
    memset(&n, 0, sizeof n);
    if (strcmp(name, "mnist") == 0) {
        n.c = 1; n.mean[0] = 0.1307f; n.std[0] = 0.3081f;
    } else if (strcmp(name, "fashion-mnist") == 0) {
        n.c = 1; n.mean[0] = 0.2860f; n.std[0] = 0.3530f;
    } else if (strcmp(name, "cifar10") == 0) {
        n.c = 3;
        n.mean[0] = 0.4914f; n.mean[1] = 0.4822f; n.mean[2] = 0.4465f;
        n.std[0] = 0.2470f;  n.std[1] = 0.2435f;  n.std[2] = 0.2616f;
    } else {
        return -EINVAL;
    }
    *out = n;
    return 0;
}

/* tab[ch][v] = ((float)v / 255.0f - mean[ch]) / std[ch]: the one formula. */
static void s_norm_table(const dataset_norm_t *norm, float tab[3][256]) {
    for (int ch = 0; ch < norm->c && ch < 3; ch++)
        for (int v = 0; v < 256; v++) tab[ch][v] = ((float)v / 255.0f - norm->mean[ch]) / norm->std[ch];
}

/* One example: raw (c, hw) bytes -> out (c, hw) floats. */
static void s_norm_apply(float tab[3][256], int c, const uint8_t *raw, int hw, float *out) {
    for (int ch = 0; ch < c; ch++) {
        const float *t = tab[ch];
        const uint8_t *r = raw + (size_t)ch * hw;
        float *o = out + (size_t)ch * hw;
        for (int p = 0; p < hw; p++) o[p] = t[r[p]];
    }
}

void dataset_normalize_u8(const dataset_norm_t *norm, const uint8_t *raw, long n_examples, int hw,
                          float *out) {
    if (!norm || !raw || !out || n_examples <= 0 || hw <= 0 || norm->c < 1 || norm->c > 3) return;
    float tab[3][256];
    s_norm_table(norm, tab);
    size_t per = (size_t)norm->c * (size_t)hw;
    for (long i = 0; i < n_examples; i++) s_norm_apply(tab, norm->c, raw + (size_t)i * per, hw, out + (size_t)i * per);
}

/* ---- data set objects --------------------------------------------------- */

dataset_t *data_dataset_alloc(int n, int c, int h, int w, int n_classes, const dataset_norm_t *norm, const char *name) {
    dataset_t *ds = calloc(1, sizeof *ds);
    if (!ds) return NULL;
    ds->n = n; ds->c = c; ds->h = h; ds->w = w;
    ds->n_classes = n_classes;
    for (int ch = 0; ch < 3; ch++) {
        ds->mean[ch] = ch < norm->c ? norm->mean[ch] : 0.0f;
        ds->std[ch] = ch < norm->c ? norm->std[ch] : 1.0f;
    }
    snprintf(ds->name, sizeof ds->name, "%s", name ? name : "");
    ds->x = malloc((size_t)n * (size_t)c * (size_t)h * (size_t)w * sizeof *ds->x);
    ds->y = malloc((size_t)n * sizeof *ds->y);
    if (!ds->x || !ds->y) {
        free(ds->x);
        free(ds->y);
        free(ds);
        return NULL;
    }
    return ds;
}

void dataset_free(dataset_t **ds_p) {
    if (!ds_p || !*ds_p) return;
    dataset_t *ds = *ds_p;
    free(ds->x);
    free(ds->y);
    free(ds);
    *ds_p = NULL;
}

int dataset_truncate(dataset_t *ds, int n) {
    if (!ds || n < 1) return -EINVAL;
    if (n >= ds->n) return 0;
    size_t dim = (size_t)ds->c * (size_t)ds->h * (size_t)ds->w;
    float *nx = realloc(ds->x, (size_t)n * dim * sizeof *nx);
    if (nx) ds->x = nx;           /* a failed shrink keeps the larger, valid buffer */
    int *ny = realloc(ds->y, (size_t)n * sizeof *ny);
    if (ny) ds->y = ny;
    ds->n = n;
    return 0;
}

/* ---- IDX ---------------------------------------------------------------- */

static uint32_t s_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* Read an IDX header of unsigned bytes with `ndim` dimensions into dims. */
static int s_idx_header(data_reader_t *r, int ndim, uint32_t *dims, char *err, size_t err_len) {
    unsigned char hdr[16];
    long long hdr_bytes = 4 + 4LL * ndim;
    long long k = data_reader_read(r, hdr, 4, err, err_len);
    if (k < 0) return (int)k;
    if (k < 4) {
        s_err(err, err_len, "%s: truncated: expected %lld bytes got %lld (IDX header)", r->path, hdr_bytes, k);
        return -EINVAL;
    }
    uint32_t magic = s_be32(hdr), want = 0x800u | (uint32_t)ndim;
    if (magic != want) {
        s_err(err, err_len, "%s: wrong magic 0x%08x, expected 0x%08x (IDX %s, unsigned bytes, %d dimension%s)",
              r->path, magic, want, ndim == 3 ? "images" : "labels", ndim, ndim == 1 ? "" : "s");
        return -EINVAL;
    }
    k = data_reader_read(r, hdr + 4, 4LL * ndim, err, err_len);
    if (k < 0) return (int)k;
    if (k < 4LL * ndim) {
        s_err(err, err_len, "%s: truncated: expected %lld bytes got %lld (IDX header)", r->path, hdr_bytes, 4 + k);
        return -EINVAL;
    }
    for (int d = 0; d < ndim; d++) dims[d] = s_be32(hdr + 4 + 4 * d);
    return 0;
}

/* A plain file's size against its header, before anything is allocated
 * (gzip sizes are checked while reading). */
static int s_idx_check_size(data_reader_t *r, long long expected, const char *what, char *err, size_t err_len) {
    if (r->file_bytes >= 0 && r->file_bytes < expected) {
        s_err(err, err_len, "%s: truncated: expected %lld bytes got %lld (header says %s)",
              r->path, expected, r->file_bytes, what);
        return -EINVAL;
    }
    return r->file_bytes >= 0 ? data_reader_check_end(r, expected, err, err_len) : 0;
}

/* Read `payload` bytes after a header of hdr_bytes and check the file ends
 * there. *buf_out is the caller's to free on success. */
static int s_idx_payload(data_reader_t *r, long long hdr_bytes, long long payload, const char *what,
                         uint8_t **buf_out, char *err, size_t err_len) {
    long long expected = hdr_bytes + payload;
    *buf_out = NULL;
    int rc = s_idx_check_size(r, expected, what, err, err_len);
    if (rc) return rc;
    uint8_t *buf = NULL;
    long long got = 0;
    rc = data_reader_read_all(r, payload, &buf, &got, err, err_len);
    if (rc) return rc;
    if (got < payload) {
        s_err(err, err_len, "%s: truncated: expected %lld bytes got %lld (header says %s)",
              r->path, expected, hdr_bytes + got, what);
        free(buf);
        return -EINVAL;
    }
    rc = data_reader_check_end(r, expected, err, err_len);
    if (rc) {
        free(buf);
        return rc;
    }
    *buf_out = buf;
    return 0;
}

void data_raw_release(data_raw_t *r) {
    if (!r) return;
    free(r->u8);
    free(r->f32);
    free(r->y);
    memset(r, 0, sizeof *r);
}

int data_idx_read_raw(const char *images_path, const char *labels_path, int n_classes, data_raw_t *raw,
                      char *err, size_t err_len) {
    data_reader_t ri, rl;
    memset(&ri, 0, sizeof ri);
    memset(&rl, 0, sizeof rl);
    memset(raw, 0, sizeof *raw);
    uint8_t *img = NULL, *lab = NULL;
    uint32_t idims[3] = {0, 0, 0}, ldims[1] = {0};
    char what[96];
    int rc = data_reader_open(&ri, images_path, err, err_len);
    if (rc) goto cleanup;
    rc = s_idx_header(&ri, 3, idims, err, err_len);
    if (rc) goto cleanup;
    uint32_t n = idims[0], h = idims[1], w = idims[2];
    uint64_t hw = (uint64_t)h * (uint64_t)w;
    if (n == 0 || h == 0 || w == 0 || hw > (uint64_t)DATASET_MAX_BYTES ||
        (uint64_t)n > (uint64_t)DATASET_MAX_BYTES / hw) {
        s_err(err, err_len, "%s: bad dimensions %u x %u x %u in the header (each must be > 0, "
              "at most %lld bytes of pixels in all)", images_path, n, h, w, DATASET_MAX_BYTES);
        rc = -EINVAL;
        goto cleanup;
    }
    snprintf(what, sizeof what, "%u images of %u x %u", n, h, w);
    rc = s_idx_payload(&ri, 16, (long long)n * (long long)hw, what, &img, err, err_len);
    if (rc) goto cleanup;
    rc = data_reader_open(&rl, labels_path, err, err_len);
    if (rc) goto cleanup;
    rc = s_idx_header(&rl, 1, ldims, err, err_len);
    if (rc) goto cleanup;
    if (ldims[0] == 0 || ldims[0] > DATASET_MAX_BYTES) {
        s_err(err, err_len, "%s: bad dimensions: %u labels in the header", labels_path, ldims[0]);
        rc = -EINVAL;
        goto cleanup;
    }
    snprintf(what, sizeof what, "%u labels", ldims[0]);
    rc = s_idx_payload(&rl, 8, (long long)ldims[0], what, &lab, err, err_len);
    if (rc) goto cleanup;
    if (ldims[0] != n) {
        s_err(err, err_len, "image/label count mismatch: %s has %u images, %s has %u labels",
              images_path, n, labels_path, ldims[0]);
        rc = -EINVAL;
        goto cleanup;
    }
    for (uint32_t i = 0; i < n; i++) {
        if ((int)lab[i] >= n_classes) {
            s_err(err, err_len, "%s: label %u at index %u out of range [0, %d)", labels_path,
                  (unsigned)lab[i], i, n_classes);
            rc = -EINVAL;
            goto cleanup;
        }
    }
    if (!(raw->y = malloc((size_t)n * sizeof *raw->y))) {
        s_err(err, err_len, "%s: out of memory for %u labels", labels_path, n);
        rc = -ENOMEM;
        goto cleanup;
    }
    for (uint32_t i = 0; i < n; i++) raw->y[i] = lab[i];
    raw->n = (int)n; raw->c = 1; raw->h = (int)h; raw->w = (int)w;
    raw->u8 = img;
    img = NULL;
    rc = 0;
cleanup:
    data_reader_close(&ri);
    data_reader_close(&rl);
    free(img);
    free(lab);
    if (rc) data_raw_release(raw);
    return rc;
}

static int s_load_idx(const char *images_path, const char *labels_path, const dataset_norm_t *norm,
                      const char *name, dataset_t **out, char *err, size_t err_len) {
    data_raw_t raw;
    int rc = data_idx_read_raw(images_path, labels_path, N_CLASSES, &raw, err, err_len);
    if (rc) return rc;
    dataset_t *ds = data_dataset_alloc(raw.n, 1, raw.h, raw.w, N_CLASSES, norm, name);
    if (!ds) {
        s_err(err, err_len, "%s: out of memory for %d examples of %d x %d floats", images_path, raw.n, raw.h, raw.w);
        data_raw_release(&raw);
        return -ENOMEM;
    }
    dataset_normalize_u8(norm, raw.u8, (long)raw.n, raw.h * raw.w, ds->x);
    memcpy(ds->y, raw.y, (size_t)raw.n * sizeof *ds->y);
    data_raw_release(&raw);
    *out = ds;
    return 0;
}

int dataset_load_idx_norm(const char *images_path, const char *labels_path, const dataset_norm_t *norm,
                          const char *name, dataset_t **out, char *err, size_t err_len) {
    if (out) *out = NULL;
    if (err && err_len) err[0] = '\0';
    if (!images_path || !labels_path || !norm || !out || norm->c != 1) {
        s_err(err, err_len, "dataset_load_idx: need image and label paths, an output pointer "
              "and one-channel normalization");
        return -EINVAL;
    }
    int rc = s_load_idx(images_path, labels_path, norm, name, out, err, err_len);
    if (rc) s_err_append(err, err_len, s_fix_idx);
    return rc;
}

int dataset_load_idx(const char *images_path, const char *labels_path, dataset_t **out,
                     char *err, size_t err_len) {
    const char *name = images_path && strstr(images_path, "fashion") ? "fashion-mnist" : "mnist";
    dataset_norm_t norm;
    dataset_norm_lookup(name, &norm);
    return dataset_load_idx_norm(images_path, labels_path, &norm, name, out, err, err_len);
}

/* ---- CIFAR-10 ----------------------------------------------------------- */

/* Read one batch file whole, check it, and hand back its records. */
static int s_cifar_file(const char *path, long long budget, uint8_t **buf_out, long long *n_rec_out,
                        char *err, size_t err_len) {
    data_reader_t r;
    uint8_t *buf = NULL;
    long long got = 0;
    *buf_out = NULL;
    *n_rec_out = 0;
    int rc = data_reader_open(&r, path, err, err_len);
    if (rc) return rc;
    long long want = r.file_bytes >= 0 ? r.file_bytes : budget + 1;
    if (r.file_bytes > budget) {
        s_err(err, err_len, "%s: bad dimensions: %lld bytes is more than the %lld allowed in all",
              path, r.file_bytes, DATASET_MAX_BYTES);
        rc = -EINVAL;
        goto cleanup;
    }
    rc = data_reader_read_all(&r, want, &buf, &got, err, err_len);
    if (rc) goto cleanup;
    if (got > budget) {
        s_err(err, err_len, "%s: bad dimensions: more than the %lld bytes allowed in all", path,
              DATASET_MAX_BYTES);
        rc = -EINVAL;
        goto cleanup;
    }
    if (got == 0) {
        s_err(err, err_len, "%s: empty: no records (CIFAR-10 batches hold records of %d bytes: "
              "1 label + %d pixels)", path, CIFAR_RECORD, CIFAR_PIXELS);
        rc = -EINVAL;
        goto cleanup;
    }
    if (got % CIFAR_RECORD != 0) {
        s_err(err, err_len, "%s: truncated: expected %lld bytes got %lld (CIFAR-10 batches hold "
              "records of %d bytes: 1 label + %d pixels)", path,
              (got / CIFAR_RECORD + 1) * CIFAR_RECORD, got, CIFAR_RECORD, CIFAR_PIXELS);
        rc = -EINVAL;
        goto cleanup;
    }
    long long n_rec = got / CIFAR_RECORD;
    for (long long i = 0; i < n_rec; i++) {
        unsigned lab = buf[i * CIFAR_RECORD];
        if (lab >= N_CLASSES) {
            s_err(err, err_len, "%s: label %u in record %lld out of range [0, %d)", path, lab, i, N_CLASSES);
            rc = -EINVAL;
            goto cleanup;
        }
    }
    *buf_out = buf;
    *n_rec_out = n_rec;
    buf = NULL;
cleanup:
    data_reader_close(&r);
    free(buf);
    return rc;
}

int dataset_load_cifar10(const char *const *paths, int n_paths, dataset_t **out, char *err, size_t err_len) {
    if (out) *out = NULL;
    if (err && err_len) err[0] = '\0';
    if (!paths || n_paths < 1 || !out) {
        s_err(err, err_len, "dataset_load_cifar10: no batch files given");
        s_err_append_cifar_fix(err, err_len, "data/" DATASET_CIFAR10_SUBDIR "/");
        return -EINVAL;
    }
    dataset_t *ds = NULL;
    long long *counts = calloc((size_t)n_paths, sizeof *counts);
    uint8_t **bufs = calloc((size_t)n_paths, sizeof *bufs);
    int rc = 0;
    if (!counts || !bufs) {
        s_err(err, err_len, "dataset_load_cifar10: out of memory");
        rc = -ENOMEM;
        goto cleanup;
    }
    long long total = 0;
    for (int f = 0; f < n_paths; f++) {
        if (!paths[f]) {
            s_err(err, err_len, "dataset_load_cifar10: path %d is NULL", f);
            rc = -EINVAL;
            goto cleanup;
        }
        rc = s_cifar_file(paths[f], DATASET_MAX_BYTES - total * CIFAR_RECORD, &bufs[f], &counts[f],
                          err, err_len);
        if (rc) {
            s_err_append_cifar_fix(err, err_len, paths[f]);
            goto cleanup;
        }
        total += counts[f];
    }
    dataset_norm_t norm;
    dataset_norm_lookup("cifar10", &norm);
    ds = data_dataset_alloc((int)total, 3, 32, 32, N_CLASSES, &norm, "cifar10");
    if (!ds) {
        s_err(err, err_len, "%s: out of memory for %lld examples of 3 x 32 x 32 floats", paths[0], total);
        rc = -ENOMEM;
        goto cleanup;
    }
    float tab[3][256];
    s_norm_table(&norm, tab);
    long long i = 0;
    for (int f = 0; f < n_paths; f++) {
        for (long long k = 0; k < counts[f]; k++, i++) {
            const uint8_t *rec = bufs[f] + k * CIFAR_RECORD;
            ds->y[i] = rec[0];
            s_norm_apply(tab, 3, rec + 1, 1024, ds->x + (size_t)i * CIFAR_PIXELS);
        }
        free(bufs[f]);
        bufs[f] = NULL;
    }
    *out = ds;
    ds = NULL;
cleanup:
    if (bufs)
        for (int f = 0; f < n_paths; f++) free(bufs[f]);
    free(bufs);
    free(counts);
    dataset_free(&ds);
    return rc;
}

int dataset_load_cifar10_dir(const char *dir, int train, dataset_t **out, char *err, size_t err_len) {
    if (out) *out = NULL;
    if (!dir) dir = "data/" DATASET_CIFAR10_SUBDIR;
    char paths[5][4096];
    const char *p[5];
    int n = train ? 5 : 1;
    for (int k = 0; k < n; k++) {
        int len = train ? snprintf(paths[k], sizeof paths[k], "%s/data_batch_%d.bin", dir, k + 1)
                        : snprintf(paths[k], sizeof paths[k], "%s/test_batch.bin", dir);
        if (len < 0 || (size_t)len >= sizeof paths[k]) {
            s_err(err, err_len, "%s: directory name too long", dir);
            return -ENAMETOOLONG;
        }
        p[k] = paths[k];
    }
    return dataset_load_cifar10(p, n, out, err, err_len);
}

/* ---- by name ------------------------------------------------------------ */

/* dst = dir/sub/base, or base + ".gz" if only that one exists (or, with
 * prefer_gz, the other way round). */
static int s_pick(char *dst, size_t len, const char *dir, const char *sub, const char *base, int prefer_gz) {
    char plain[4096], gz[4096];
    int a = snprintf(plain, sizeof plain, "%s/%s/%s", dir, sub, base);
    int b = snprintf(gz, sizeof gz, "%s/%s/%s.gz", dir, sub, base);
    if (a < 0 || b < 0 || (size_t)b >= sizeof gz || (size_t)b >= len) return -ENAMETOOLONG;
    const char *first = prefer_gz ? gz : plain, *second = prefer_gz ? plain : gz;
    const char *pick = access(first, F_OK) != 0 && access(second, F_OK) == 0 ? second : first;
    snprintf(dst, len, "%s", pick);
    return 0;
}

int dataset_load_named(const char *name, const char *data_dir, int train, dataset_t **out,
                       char *err, size_t err_len) {
    if (out) *out = NULL;
    if (err && err_len) err[0] = '\0';
    if (!data_dir) data_dir = "data";
    if (!name || !out) {
        s_err(err, err_len, "dataset_load_named: need a data set name and an output pointer");
        return -EINVAL;
    }
    if (strcmp(name, "cifar10") == 0) {
        char dir[4096];
        int len = snprintf(dir, sizeof dir, "%s/%s", data_dir, DATASET_CIFAR10_SUBDIR);
        if (len < 0 || (size_t)len >= sizeof dir) {
            s_err(err, err_len, "%s: directory name too long", data_dir);
            return -ENAMETOOLONG;
        }
        return dataset_load_cifar10_dir(dir, train, out, err, err_len);
    }
    int fashion = strcmp(name, "fashion-mnist") == 0;
    if (!fashion && strcmp(name, "mnist") != 0) {
        s_err(err, err_len, "unknown data set '%s' (known: mnist, fashion-mnist, cifar10)", name);
        return -EINVAL;
    }
    const char *split = train ? "train" : "t10k";
    char base[64], images[4096], labels[4096];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", split);
    int rc = s_pick(images, sizeof images, data_dir, name, base, fashion);
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", split);
    if (!rc) rc = s_pick(labels, sizeof labels, data_dir, name, base, fashion);
    if (rc) {
        s_err(err, err_len, "%s: directory name too long", data_dir);
        return rc;
    }
    dataset_norm_t norm;
    dataset_norm_lookup(name, &norm);
    return dataset_load_idx_norm(images, labels, &norm, name, out, err, err_len);
}
