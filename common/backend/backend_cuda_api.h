/* common/backend/backend_cuda_api.h — INTERNAL to the backend module: the
 * table through which backend.c reaches the CUDA backend.
 *
 * The CUDA backend (backend_cuda*.c and its kernels) is built as a plugin,
 * $(BUILD)/libkfac-cuda.so, linked with cuDNN, cuBLAS and the CUDA runtime;
 * the programs themselves are not. backend.c loads it with dlopen the first
 * time a GPU is probed or asked for, so a program that never touches a GPU
 * (every --help, the parameter server, a CPU-only host) never maps those
 * libraries. Loading them cost 0.14-0.33 s and 26,000 page faults per
 * process start on the 2-core machine of bench/RESULTS.md, with 228 MB
 * resident for `kfac-worker --help` (12 MB without them).
 *
 * The plugin resolves three symbols of the program that loads it
 * (log_write, log_level_now, kfac_factor_len: the Makefile exports them
 * with --export-dynamic-symbol), so a program logs and counts factors the
 * same way whether the backend is the CPU or the GPU.
 *
 * Where no NVIDIA driver can be loaded (libcuda.so.1, which the CUDA
 * runtime needs for any device), there is no GPU to find: backend.c says
 * "no GPU (no NVIDIA driver: ...)" without loading the plugin, unless
 * KFAC_CUDA_LIB names it.
 *
 * Where backend.c looks for it: $KFAC_CUDA_LIB (a path) when set, else
 * libkfac-cuda.so and lib/kfac/libkfac-cuda.so in the program's folder and
 * in the two folders above it (the build tree: build/, and build/ seen from
 * build/tests/backend/; an install: $(PREFIX)/lib/kfac/ seen from
 * $(PREFIX)/bin/; the GPU kit: lib/kfac/ seen from bin/ and tests/).
 */
#ifndef KFAC_BACKEND_CUDA_API_H
#define KFAC_BACKEND_CUDA_API_H

#include <stddef.h>

#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"

/* Bumped whenever the table or a structure the plugin reads changes. */
#define BACKEND_CUDA_API_VERSION 1
/* The plugin's one exported entry point. */
#define BACKEND_CUDA_API_SYMBOL "kfac_backend_cuda_api"
#define BACKEND_CUDA_LIB_NAME "libkfac-cuda.so"

typedef struct backend_cuda backend_cuda_t;

/* One function per backend_cuda_* of backend_cuda.h, same contracts. The
 * sizes are those the plugin was compiled with: a plugin from another build
 * whose structures differ is refused, not called. */
typedef struct {
    int version;       /* BACKEND_CUDA_API_VERSION */
    size_t net_size;   /* sizeof(net_t) */
    size_t layer_size; /* sizeof(layer_t) */
    size_t stats_size; /* sizeof(kfac_stats_t) */
    int (*probe)(char *why, size_t why_len);
    backend_cuda_t *(*create)(net_t *net, char *err, size_t err_len);
    void (*destroy)(backend_cuda_t **cb_p);
    const char *(*describe)(const backend_cuda_t *cb);
    int (*failed)(const backend_cuda_t *cb);
    int (*set_params)(backend_cuda_t *cb, const float *params, const float *state);
    int (*forward)(backend_cuda_t *cb, const float *x, int n, int train);
    int (*probs)(backend_cuda_t *cb, float *probs);
    int (*backward)(backend_cuda_t *cb, const int *labels, int grads_to_host, float *loss, int *n_correct);
    int (*stats)(backend_cuda_t *cb, kfac_stats_t *s);
    int (*reserve_stats)(backend_cuda_t *cb, const kfac_stats_t *s);
    size_t (*device_bytes)(const backend_cuda_t *cb);
    int (*layer_copy)(backend_cuda_t *cb, int layer, float *y, float *dy);
} backend_cuda_api_t;

/* Defined by the plugin (backend_cuda.c). */
const backend_cuda_api_t *kfac_backend_cuda_api(void);

#endif
