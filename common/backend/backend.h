/* common/backend/backend.h — where a network's forward pass, backward pass and K-FAC
 * factor statistics run: the CPU (nn.c + kfac_stats.c, OpenBLAS) or a CUDA
 * GPU (cuDNN + cuBLAS + the kernels of common/backend/backend.cuda_kernels.cu). The
 * gradient worker and the stats worker drive a network only through this
 * interface, so one `--device` switch moves them between the two.
 *
 * Conventions
 *   - The backend borrows a net_t (common/nn/nn.h) for its layout (layers,
 *     shapes, the flat parameter arena) and its host buffers. Results the
 *     caller needs come back into that net: gradients into net->grads,
 *     batch-norm running statistics into net->state, dropout's seed advances
 *     in net->dropout_seed — exactly as nn.c does, whichever backend runs.
 *   - float32, row-major, NCHW, the same layouts as nn.h. The loss is the
 *     batch mean of the softmax cross-entropy (nn.h).
 *   - One call sequence per step:
 *         backend_set_params -> backend_forward -> [backend_probs ->
 *         kfac_sample_labels] -> backend_backward -> [backend_stats]
 *     backend_backward may be called several times after one forward pass
 *     (e.g. once with sampled labels for the statistics, once with the data
 *     labels for the gradient), each time from the same activations.
 *   - The CPU backend is today's code path, bit for bit: net_forward,
 *     net_backward and kfac_stats_compute on the borrowed net.
 *   - The CUDA backend keeps parameters, activations, their gradients and
 *     factor statistics on the device; per step it uploads the parameters
 *     once and the input batch, and downloads the gradients once, the loss,
 *     and (backend_stats) the full factor matrices. fp32 throughout (no TF32:
 *     cuDNN convolutions run with CUDNN_FMA_MATH). It uses the GPU the CUDA
 *     runtime lists first (select one with CUDA_VISIBLE_DEVICES). Dropout
 *     masks are drawn on the host from net->dropout_seed with nn.c's exact
 *     sequence and uploaded, so both backends apply the same masks.
 *
 * Errors: functions return 0 or a negative errno. Bad arguments give
 * -EINVAL (logged) and leave the backend usable. A failed CUDA, cuBLAS or
 * cuDNN call (each is checked, its file:line and the library's message are
 * logged) marks the backend failed: every later call returns -EIO and
 * backend_describe() says why; the caller should exit non-zero.
 *
 * Threads: one thread per backend at a time (it may differ from the thread
 * that created it). Ownership: a backend_t is owned by its creator and freed
 * with backend_free; the net must outlive it.
 */
#ifndef KFAC_BACKEND_H
#define KFAC_BACKEND_H

#include <stddef.h>

#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"

typedef enum {
    BACKEND_AUTO = 0, /* CUDA when built with it and a usable GPU answers, else CPU */
    BACKEND_CPU,
    BACKEND_CUDA,
} backend_kind_t;

typedef struct backend backend_t;

/* "auto", "cpu" or "cuda" (the --device values); NULL for an unknown kind. */
const char *backend_kind_name(backend_kind_t kind);

/* Parse "auto", "cpu" or "cuda" (also "gpu" for cuda) into *out. Returns 0 or
 * -EINVAL. */
int backend_kind_parse(const char *s, backend_kind_t *out);

/* Is a usable GPU there for the CUDA backend? Returns 1, or 0 with the reason
 * in why (why_len bytes; may be NULL): "built without CUDA", "no GPU
 * (cudaGetDeviceCount: ...)", or a GPU this build has no kernels for. Creates
 * the CUDA context when a GPU answers: do not fork afterwards. */
int backend_gpu_probe(char *why, size_t why_len);

/* Is the environment variable KFAC_REQUIRE_GPU set to 1? Then BACKEND_AUTO
 * fails like BACKEND_CUDA where no GPU answers, instead of using the CPU: a
 * run meant for a GPU never goes on silently without one. */
int backend_gpu_required(void);

/* Make a backend for net (borrowed; must outlive the backend).
 *   BACKEND_CPU:  always succeeds (unless out of memory).
 *   BACKEND_CUDA: needs a CUDA build and a usable GPU; otherwise NULL with a
 *                 message in err containing "built without CUDA" or "no GPU".
 *   BACKEND_AUTO: CUDA if that succeeds, else CPU with one log line saying why.
 * The CUDA backend allocates device buffers for net->batch_cap examples and
 * uploads net->params and net->state. Returns NULL on failure with a message
 * in err (err_len bytes). */
backend_t *backend_new(backend_kind_t kind, net_t *net, char *err, size_t err_len);

/* Free everything (device memory, streams, handles); NULL and *b_p == NULL
 * are no-ops; *b_p is set to NULL. */
void backend_free(backend_t **b_p);

/* The kind actually running (CPU or CUDA, never AUTO). */
backend_kind_t backend_kind(const backend_t *b);

/* One line for logs: "cpu (OpenBLAS, 2 threads)" or "cuda: NVIDIA H100 ...
 * (sm_90, 79.1 GiB), CUDA runtime 13.0, cuDNN 9.19.0, cuBLAS 13.0.0"; after a
 * device error "cuda: FAILED: <what failed>". Borrowed, valid until the next
 * call on b. */
const char *backend_describe(const backend_t *b);

/* 0 while the backend is usable, else the negative errno every call now
 * returns (-EIO after a device error). */
int backend_failed(const backend_t *b);

/* Use these parameters (n_params floats) and batch-norm running statistics
 * (n_state floats) from now on. NULL means the net's own arrays. Either way
 * net->params and net->state hold the values afterwards (copied in when
 * other pointers are given); the CUDA backend uploads them once, here, through
 * pinned staging. Returns 0, -EINVAL or -EIO. */
int backend_set_params(backend_t *b, const float *params, const float *state);

/* Forward pass on n (1..net->batch_cap) examples x (n, in_size), read during
 * the call only. train = 1: dropout active (net->dropout_seed advances as in
 * nn.c), batch norm uses batch statistics and updates the running ones, which
 * are in net->state when this returns. Returns 0, -EINVAL or -EIO. */
int backend_forward(backend_t *b, const float *x, int n, int train);

/* Softmax probabilities of the last forward pass into probs (n, n_classes),
 * caller-owned (for kfac_sample_labels). Returns 0, -EINVAL (no forward pass
 * yet) or -EIO. */
int backend_probs(backend_t *b, float *probs);

/* Loss and backward pass after backend_forward, with hard labels (n), each
 * in [0, n_classes). Writes the mean cross-entropy into *loss and the number
 * of argmax hits into *n_correct (both may be NULL). grads_to_host = 1: the
 * gradient (n_params) lands in net->grads. grads_to_host = 0: the CUDA
 * backend leaves it on the device (a stats worker needs only backend_stats);
 * the CPU backend computes net->grads regardless. Returns 0, -EINVAL (no
 * forward pass, a label out of range) or -EIO. */
int backend_backward(backend_t *b, const int *labels, int grads_to_host, float *loss, int *n_correct);

/* Overwrite every factor of s with the statistics of the current batch, as
 * kfac_stats_compute does (same math, normalizations, factor order, exact
 * symmetry, n_samples = n, n_updates = 1), after backend_forward +
 * backend_backward. s must be built for this net (kfac_stats_new(net)). The
 * CUDA backend computes the factors on the device (cublasSsyrk) and copies
 * the full matrices into s's host arena. Returns 0, -EINVAL or -EIO. */
int backend_stats(backend_t *b, kfac_stats_t *s);

/* Allocate now every device buffer backend_stats needs for s (built for
 * this net) at the net's batch capacity, so that a GPU without room for the
 * statistics is found when the backend is made, not at the first
 * backend_stats in the middle of a run. CPU backend: nothing to do.
 * Returns 0, -EINVAL (s does not fit the net) or -EIO (the allocation
 * failed; the backend is then failed). */
int backend_reserve_stats(backend_t *b, const kfac_stats_t *s);

/* backend_new, then (s non-NULL: a backend that will compute statistics)
 * backend_reserve_stats. With BACKEND_AUTO a GPU that has no room for the
 * statistics gives way to the CPU, with one warning that says why (unless
 * KFAC_REQUIRE_GPU=1: then it fails); with BACKEND_CUDA it fails, the
 * reason in err. */
backend_t *backend_new_with_stats(backend_kind_t kind, net_t *net, const kfac_stats_t *s, char *err,
                                  size_t err_len);

/* Device memory the backend holds, in bytes (0 for the CPU backend). The
 * CUDA backend's share of a GPU can be capped with the environment variable
 * KFAC_CUDA_MEM_LIMIT (bytes, or with a K, M or G suffix): an allocation
 * beyond it fails as a full GPU would. */
size_t backend_device_bytes(const backend_t *b);

/* Copy layer `layer`'s output y and its gradient dy (each n * size floats of
 * the last forward / backward pass; either may be NULL) to the host — for
 * tests and debugging the twin backends. softmax_xent has neither. Returns 0,
 * -EINVAL or -EIO. */
int backend_layer_copy(backend_t *b, int layer, float *y, float *dy);

#endif
