/* common/nn/data.h — data sets (MNIST, Fashion-MNIST, CIFAR-10, the user's
 * own IDX or NumPy .npy files) and the batcher that shards, shuffles and
 * augments them.
 *
 * Conventions
 *   - A data set is held in memory as float32, row-major, NCHW: example i is
 *     x[i * c*h*w ...], channel planes of h*w row-major pixels each. Labels
 *     are ints in [0, n_classes).
 *   - Normalization: each pixel byte v of channel ch becomes
 *         ((float)v / 255.0f - mean[ch]) / std[ch]
 *     evaluated in float32 exactly as written, with the standard constants of
 *     each data set (dataset_norm_lookup). So a normalized 0.0f is the
 *     channel's mean pixel, which is also what crop padding fills in.
 *   - File formats: IDX (big-endian header: magic 0x0000080N with N the number
 *     of dimensions, then N uint32 sizes, then unsigned bytes), plain or gzip
 *     (detected by the magic bytes 1f 8b, read with zlib). CIFAR-10 binary
 *     batches: records of 1 label byte + 3072 pixel bytes (1024 R, 1024 G,
 *     1024 B, each a 32x32 row-major plane); a gzip-compressed batch file is
 *     read as well.
 *   - Errors: every loader writes a one-line message into the caller's buffer
 *     err (err_len bytes, may be NULL/0) naming the file, what is wrong and
 *     the command that fixes it, and returns a negative errno: -ENOENT (and
 *     other open errors) for a missing file, -EINVAL for a corrupt or
 *     implausible file, -EIO for a read error, -ENOMEM. Nothing aborts, and
 *     nothing leaks on any path. Headers claiming more than
 *     DATASET_MAX_BYTES of pixels are rejected before anything is allocated.
 *
 * Ownership: dataset_t owns x and y; dataset_free releases both. A batcher
 * borrows its data set, which must outlive it. Neither is thread-safe: one
 * batcher per thread (several batchers may share one read-only data set).
 */
#ifndef KFAC_DATA_H
#define KFAC_DATA_H

#include <stddef.h>
#include <stdint.h>

/* Largest pixel payload (bytes) a file header may announce. */
#define DATASET_MAX_BYTES 1000000000LL

/* Where dataset_load_named looks for CIFAR-10 under data_dir. */
#define DATASET_CIFAR10_SUBDIR "cifar-10-batches-bin"

typedef struct dataset {
    int n;              /* examples */
    int c, h, w;        /* per-example shape (MNIST 1x28x28, CIFAR 3x32x32) */
    int n_classes;      /* 10 */
    float *x;           /* (n, c*h*w) normalized floats, owned */
    int *y;             /* (n) labels in [0, n_classes), owned */
    float mean[3];      /* per-channel mean subtracted from pixel/255 (first c used) */
    float std[3];       /* per-channel std divided by after that */
    char name[32];      /* "mnist", "fashion-mnist", "cifar10", "idx", "npy" */
} dataset_t;

/* Per-channel normalization constants of one data set. */
typedef struct dataset_norm {
    int c;              /* channels: 1 or 3 */
    float mean[3];      /* of pixel/255 over the training set */
    float std[3];
} dataset_norm_t;

/* Standard constants: "mnist" 0.1307/0.3081, "fashion-mnist" 0.2860/0.3530,
 * "cifar10" (0.4914, 0.4822, 0.4465)/(0.2470, 0.2435, 0.2616). Returns 0, or
 * -EINVAL for an unknown name (out untouched). */
int dataset_norm_lookup(const char *name, dataset_norm_t *out);

/* Normalize raw bytes: raw (n_examples, norm->c, hw) unsigned bytes to out
 * (same shape) floats, ((float)v / 255.0f - mean[ch]) / std[ch]. Caller owns
 * both buffers. */
void dataset_normalize_u8(const dataset_norm_t *norm, const uint8_t *raw,
                          long n_examples, int hw, float *out);

/* Load an IDX image file (magic 0x00000803: n x h x w bytes) and its IDX
 * label file (magic 0x00000801: n bytes, each < 10), plain or gzip. The
 * constants are Fashion-MNIST's when images_path contains "fashion", MNIST's
 * otherwise (use dataset_load_idx_norm to choose). On success *out is a new
 * data set (c = 1, n_classes = 10) the caller frees with dataset_free, and 0
 * is returned; on failure *out is NULL and err says why (see top of file). */
int dataset_load_idx(const char *images_path, const char *labels_path, dataset_t **out,
                     char *err, size_t err_len);

/* As dataset_load_idx with explicit normalization (norm->c must be 1) and
 * data-set name (copied into ds->name, truncated to 31 characters). */
int dataset_load_idx_norm(const char *images_path, const char *labels_path,
                          const dataset_norm_t *norm, const char *name, dataset_t **out,
                          char *err, size_t err_len);

/* Load and concatenate CIFAR-10 binary batch files paths[0..n_paths-1] in
 * that order (3x32x32, n_classes = 10, CIFAR-10 constants). Each file must
 * hold a whole, non-zero number of 3073-byte records with labels < 10. Same
 * return and ownership rules as dataset_load_idx. */
int dataset_load_cifar10(const char *const *paths, int n_paths, dataset_t **out,
                         char *err, size_t err_len);

/* CIFAR-10 from a directory: train (1) reads dir/data_batch_1.bin ..
 * data_batch_5.bin, test (0) reads dir/test_batch.bin. */
int dataset_load_cifar10_dir(const char *dir, int train, dataset_t **out,
                             char *err, size_t err_len);

/* Load a data set by name: "mnist" | "fashion-mnist" | "cifar10"; train = 1
 * for the training split, 0 for the test split; data_dir such as "data"
 * (NULL means "data"). Files:
 *   data_dir/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte  (or .gz)
 *   data_dir/fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (or plain)
 *   data_dir/cifar-10-batches-bin/{data_batch_1..5,test_batch}.bin
 * An unknown name gives -EINVAL. Otherwise as dataset_load_idx. */
int dataset_load_named(const char *name, const char *data_dir, int train, dataset_t **out,
                       char *err, size_t err_len);

/* ---- data sets from any source: built-in by name, or the user's files ---- */

#define DATASET_MAX_CHANNELS 3      /* dataset_t keeps 3 means and stds */
#define DATASET_PATH_MAX 4096

typedef enum {
    DATASET_SOURCE_NAMED = 0, /* a built-in set (dataset_load_named) */
    DATASET_SOURCE_IDX,       /* the user's IDX files: images (n, h, w) bytes, labels (n) bytes */
    DATASET_SOURCE_NPY,       /* the user's NumPy .npy files (see dataset_source_load) */
} dataset_source_kind_t;

/* Where a data set comes from and what the model expects of it. Plain
 * values (fixed-size strings), so it is copied by assignment and owns
 * nothing. */
typedef struct dataset_source {
    dataset_source_kind_t kind;
    char name[32];                         /* NAMED: mnist | fashion-mnist | cifar10; else "idx" / "npy" */
    char dir[DATASET_PATH_MAX];            /* data folder; relative file paths below are resolved under it */
    char train_images[DATASET_PATH_MAX];   /* IDX / NPY: the four files (plain or gzip) */
    char train_labels[DATASET_PATH_MAX];
    char test_images[DATASET_PATH_MAX];
    char test_labels[DATASET_PATH_MAX];
    int has_norm;                          /* IDX / NPY: 1 use norm; 0 compute it from the training images */
    dataset_norm_t norm;                   /* norm.c is 1 (every channel alike) or the images' channels */
    int in_c, in_h, in_w;                  /* the model's input (0: not checked) */
    int n_classes;                         /* the model's classes (0: not checked, labels >= 0) */
    char model[256];                       /* the model's name for messages ("models/mnist-mlp.model") */
} dataset_source_t;

/* Load the training (train = 1) or test (0) split of src into *out (the
 * caller frees it with dataset_free).
 *
 * NAMED: dataset_load_named(src->name, src->dir, train).
 * IDX:   src->{train,test}_{images,labels}: IDX files as dataset_load_idx
 *        reads them (c = 1), labels < n_classes.
 * NPY:   images uint8 or float32 of shape (N, H, W) (c = 1), (N, C, H, W)
 *        or (N, C*H*W) (read in the model's (C, H, W) order, so in_c/h/w
 *        must be set); labels int64, int32, uint8 (or int8) of shape (N,),
 *        each in [0, n_classes); C-ordered, little-endian (npy.h); a .npy
 *        file may also be gzip-compressed. Float images must be finite.
 *
 * Normalization (IDX, NPY): each value v of channel ch becomes
 *     uint8:   ((float)v / 255.0f - mean[ch]) / std[ch]   (as dataset_normalize_u8)
 *     float32: (v - mean[ch]) / std[ch]                    (values taken as they are)
 * with src->norm when has_norm (one value applies to every channel), else
 * with the per-channel mean and standard deviation of the training images
 * (dataset_source_norm; logged), also for the test split.
 *
 * Checks: with in_c set, the examples must be in_c x in_h x in_w and with
 * n_classes set every label must be below it; a mismatch is -EINVAL with a
 * message naming the file, its shape and the model's (src->model). Other
 * errors as the loaders above (named file, negative errno: -ENOENT ... for
 * a file that cannot be opened, -EINVAL for a malformed one, -ENOMEM). */
int dataset_source_load(const dataset_source_t *src, int train, dataset_t **out, char *err, size_t err_len);

/* The per-channel mean and (population) standard deviation of the training
 * images of an IDX or NPY source, on the scale normalization uses (uint8:
 * v / 255; float32: v), accumulated in double: out->c is the images'
 * channel count. Returns 0; -EINVAL for a NAMED source, for images whose
 * channel has zero variance (set [data] std) or as the loaders. */
int dataset_source_norm(const dataset_source_t *src, dataset_norm_t *out, char *err, size_t err_len);

/* path itself when absolute or when src->dir is empty, else src->dir/path,
 * into out. Returns 0 or -ENAMETOOLONG. */
int dataset_source_path(const dataset_source_t *src, const char *path, char *out, size_t len);

/* Keep the first n examples. n >= ds->n leaves the set unchanged; n < 1 or
 * a NULL ds gives -EINVAL. The buffers may shrink. Returns 0. */
int dataset_truncate(dataset_t *ds, int n);

/* Free a data set and NULL the caller's pointer; accepts NULL and *NULL. */
void dataset_free(dataset_t **ds_p);

/* One example's augmentation, the primitive the batcher uses. src and dst are
 * (c, h, w) and must not overlap. With 0 <= dy, dx <= 2*pad: zero-pad src by
 * pad pixels on every side, take the h x w window whose top-left corner is
 * (dy, dx) in the padded image, then mirror left-right if flip:
 *     dst[ch][y][x] = src[ch][y + dy - pad][xs + dx - pad],
 *     xs = flip ? w - 1 - x : x,   0 where the source index is outside.
 * pad = 0, dy = dx = 0, flip = 0 is a copy. */
void dataset_augment_example(const float *src, float *dst, int c, int h, int w,
                             int pad, int dy, int dx, int flip);

/* Batcher options. */
typedef struct batcher_opts {
    int batch;          /* examples per batch, >= 1 */
    uint64_t seed;      /* shuffling and augmentation stream (mixed with rank) */
    int rank, n_ranks;  /* this worker's shard: 0 <= rank < n_ranks */
    int shuffle;        /* 1: new random order of the shard every epoch */
    int aug_crop_pad;   /* > 0: random crop with this much zero padding, <= min(h, w) */
    int aug_flip;       /* 1: horizontal flip with probability 0.5 */
    int drop_last;      /* 1: skip an epoch's final partial batch */
} batcher_opts_t;

typedef struct batcher batcher_t;   /* opaque */

/* A batcher over shard `rank` of `n_ranks`: the examples i with
 * i % n_ranks == rank (strided, so shards differ in size by at most one and
 * every example is in exactly one shard). With shuffle it permutes its shard
 * at the start of every epoch (Fisher-Yates with an rng_t seeded from seed
 * and rank: equal seeds give equal orders); otherwise it walks the shard in
 * index order. Augmentation draws from a second stream, so turning it on
 * does not change the order. ds is borrowed and must outlive the batcher.
 * Returns NULL with a message in err for a bad data set or options (empty
 * shard, pad too large, drop_last with batch > shard size, ...). */
batcher_t *batcher_new(const dataset_t *ds, const batcher_opts_t *opts, char *err, size_t err_len);

/* Fill x (batch, c*h*w) and, when y is not NULL, y (batch) with the next
 * examples of the current epoch, augmented as configured. Returns the count
 * filled (> 0; smaller than batch only for an epoch's final batch without
 * drop_last), or -EINVAL for NULL b or x. After the batch that ends an epoch,
 * the next call starts the following epoch. */
int batcher_next(batcher_t *b, float *x, int *y);

/* Completed epochs: incremented when the batch that ends an epoch is
 * returned. */
long batcher_epoch(const batcher_t *b);

/* Examples in this batcher's shard. */
int batcher_shard_size(const batcher_t *b);

/* Free a batcher and NULL the caller's pointer; accepts NULL and *NULL. */
void batcher_free(batcher_t **b_p);

#endif
