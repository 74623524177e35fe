/* common/nn/data_int.h — internal to the data-set loaders (data.c, the
 * built-in sets; data_user.c, the user's IDX and .npy files); nothing
 * outside common/nn/data*.c includes it.
 *
 * data_reader_t reads one file, plain or gzip (detected by the magic bytes
 * 1f 8b): plain files have a known size (file_bytes) that is checked
 * against a header before anything is allocated; gzip payloads are read
 * into buffers that grow as data actually arrives. Every function writes
 * "path: problem" into err and returns a negative errno (see data.h).
 */
#ifndef KFAC_DATA_INT_H
#define KFAC_DATA_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <zlib.h>

#include "common/nn/data.h"

typedef struct data_reader {
    const char *path;     /* borrowed, for messages */
    FILE *f;              /* plain file, or NULL */
    gzFile gz;            /* gzip file, or NULL */
    long long file_bytes; /* plain: size on disk; gzip: -1 (unknown) */
    long long got;        /* bytes delivered so far (decompressed for gzip) */
} data_reader_t;

/* Open path (a regular file). 0, or -errno (-ENOENT ...) / -EINVAL. */
int data_reader_open(data_reader_t *r, const char *path, char *err, size_t err_len);
void data_reader_close(data_reader_t *r);
/* Read up to n bytes; the count (< n only at the end of the file) or -errno. */
long long data_reader_read(data_reader_t *r, void *buf, long long n, char *err, size_t err_len);
/* Up to want bytes into a new buffer (*buf_out, caller frees); *got_out < want: the file ended. */
int data_reader_read_all(data_reader_t *r, long long want, uint8_t **buf_out, long long *got_out, char *err,
                         size_t err_len);
/* 0 if the file ends at `expected` bytes; -EINVAL naming the extra data otherwise. */
int data_reader_check_end(data_reader_t *r, long long expected, char *err, size_t err_len);

/* Examples as they are in the files, before normalization. */
typedef struct data_raw {
    int n, c, h, w;
    uint8_t *u8;  /* (n, c, h, w) pixel bytes, or NULL (owned) */
    float *f32;   /* (n, c, h, w) float32 values, or NULL (owned) */
    int *y;       /* (n) labels (owned) */
} data_raw_t;

/* Free the buffers and zero the struct; accepts a zeroed struct. */
void data_raw_release(data_raw_t *r);

/* An IDX image file (n x h x w bytes) and its IDX label file (n bytes, each
 * < n_classes) into raw (c = 1, u8). 0, or -errno with the message; raw is
 * zeroed on failure. */
int data_idx_read_raw(const char *images_path, const char *labels_path, int n_classes, data_raw_t *raw,
                      char *err, size_t err_len);

/* A data set of n examples (c, h, w) with the constants of norm and the
 * name, x and y allocated and not filled; NULL when out of memory. */
dataset_t *data_dataset_alloc(int n, int c, int h, int w, int n_classes, const dataset_norm_t *norm,
                              const char *name);

#endif
