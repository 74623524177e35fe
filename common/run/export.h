/* common/run/export.h — a finished run's weights, for use outside kfac:
 *
 *   params.npy         the current parameters, float32, 1-D (n_params)
 *   params_polyak.npy  their Polyak average, same layout
 *   state.npy          batch-norm running statistics (n_state), only when
 *                      the model has any
 *   manifest.json      the model file text, every layer's name, kind and
 *                      parameter shapes with their offsets into the flat
 *                      arrays, the step, and the final test accuracies
 *
 * The .npy files are NumPy format version 1.0 (numpy.lib.format): the magic
 * "\x93NUMPY", major 1, minor 0, a little-endian uint16 header length, an
 * ASCII header dict padded with spaces and ended by '\n' so that the data
 * starts at a multiple of 64 bytes, then the data, little-endian float32.
 * The flat layout is the one of common/nn/nn.h (net->params): layer by
 * layer, weight then bias; fc weight (out, in), conv weight
 * (out, in_c, k, k), row-major.
 *
 * Threads: any; the functions only read what they are given.
 */
#ifndef KFAC_RUN_EXPORT_H
#define KFAC_RUN_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "common/nn/data.h"
#include "common/nn/nn.h"
#include "common/run/rundir.h"

/* Bytes before the data of a .npy file. */
#define EXPORT_NPY_ALIGN 64

/* The .npy version 1.0 header of a 1-D little-endian float32 array of n
 * values into buf (not NUL-terminated). Returns its length in bytes (a
 * multiple of EXPORT_NPY_ALIGN), or -ENOSPC when buf is shorter. */
int export_npy_header(uint64_t n, uint8_t *buf, size_t len);

/* The whole .npy file of x (n floats) as a malloc'd buffer (caller frees);
 * its length in *n_bytes. NULL when out of memory. */
uint8_t *export_npy_f32(const float *x, uint64_t n, size_t *n_bytes);

/* What the manifest says about the end of the run. */
typedef struct export_info {
    uint64_t step;              /* parameter version exported */
    double test_loss, test_acc; /* the current parameters, acc in [0, 1] */
    double polyak_loss, polyak_acc;
    int eval_n;                 /* test examples behind the figures */
    uint64_t eval_step;         /* the step they were measured at */
    const char *program;        /* "kfac-ps", "kfac-train" */
    const char *dataset;        /* "mnist", ...: the manifest gives its input normalization
                                 * x = (byte / 255 - mean[c]) / std[c] (dataset_norm_lookup) */
    const dataset_norm_t *norm; /* the normalization the run used ([data] set = idx | npy, given or
                                 * computed; borrowed), NULL: the built-in set's, looked up by name */
} export_info_t;

/* The manifest of net (its layers and net->source) and info as a malloc'd
 * NUL-terminated JSON text (caller frees); NULL when out of memory. */
char *export_manifest_json(const net_t *net, const export_info_t *info);

/* Write params.npy (params), params_polyak.npy (polyak; NULL: params
 * again, there is no average yet), state.npy (state, when net->n_state > 0)
 * and manifest.json into the run folder d, the manifest last (its presence
 * says the weights are complete). All arrays borrowed, with net's layout.
 * Returns 0, or a negative errno with the file named in err. */
int export_write(const rundir_t *d, const net_t *net, const float *params, const float *polyak, const float *state,
                 const export_info_t *info, char *err, size_t err_len);

#endif
