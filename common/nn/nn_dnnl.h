/* common/nn/nn_dnnl.h — oneDNN (Debian's libdnnl, 2.6) as the CPU engine of
 * one convolution layer: forward, backward-data and backward-weights, the
 * way the CUDA backend uses cuDNN. nn.c's im2col + OpenBLAS sgemm stays the
 * reference path; tests/nn/test_nn_dnnl.c compares the two.
 *
 * Conventions
 *   - float32; the caller's tensors are nn.h's plain layouts: x (m, C, H, W),
 *     weights (O, C, k, k) = nn's (O, C*k*k), bias (O), y (m, O, OH, OW).
 *     oneDNN picks its own (blocked) layouts for each primitive; the
 *     conversions (reorders) to and from the plain tensors are part of each
 *     call and of its measured time.
 *   - Batches are split over the net's threads (nn_par): part p of n_parts
 *     runs on its slice of m examples, with oneDNN on one thread inside the
 *     part. oneDNN's own threads (OpenMP, Debian's build) are never used:
 *     their active wait made 2 threads 2-6x slower than one on the shared
 *     2-CPU machine of bench/RESULTS.md, as it did for OpenBLAS's OpenMP
 *     build. Each part has its own scratch buffers and stream, so parts run
 *     concurrently; the weight gradient is one sum per part, in a fixed
 *     order, so a given thread count repeats bit for bit.
 *   - Primitives depend on the batch size: nn_dnnl_conv_prepare makes them
 *     for every part size of a pass (at most two sizes per pass) before the
 *     parts run, and keeps the last few sizes.
 *
 * Run-time code generation: oneDNN's fast kernels are generated at run time
 * (JIT: mmap, then mprotect to PROT_EXEC). Where that is denied (systemd's
 * MemoryDenyWriteExecute=yes), primitive creation fails; nn_dnnl_probe
 * says so and the net keeps im2col + OpenBLAS (nn.c).
 *
 * Threads: prepare from the net's thread only; forward/backward of distinct
 * parts concurrently, one call per part at a time.
 */
#ifndef KFAC_NN_DNNL_H
#define KFAC_NN_DNNL_H

#include <stddef.h>

#include "common/nn/nn.h"

typedef struct nn_dnnl_conv nn_dnnl_conv_t;

/* Can oneDNN make and run a convolution here (run-time code generation
 * allowed, a CPU it has kernels for), and is its result right? Returns 1;
 * 0 when it cannot run here (the primitives were refused); -EIO when it
 * made them and then failed to run them or gave a wrong result (a broken
 * oneDNN: an error, never a reason to fall back quietly). Says why in why
 * (why_len bytes; may be NULL) unless it returns 1. Costs a few
 * milliseconds (a small convolution is created, run and checked).
 * KFAC_TEST_ONEDNN_WRONG=1 in the environment makes the check expect a
 * wrong value, so that tests can see a wrong result fail. */
int nn_dnnl_probe(char *why, size_t why_len);

/* An engine for conv layer l (borrowed for its shape only; LAYER_CONV).
 * dx_add = 1: the backward pass adds its input gradient into dx (the input
 * feeds other layers too); 0: it overwrites dx. Returns NULL with the
 * reason in err when oneDNN cannot make the primitives. */
nn_dnnl_conv_t *nn_dnnl_conv_new(const layer_t *l, int dx_add, char *err, size_t err_len);

/* Free everything; NULL and *c_p == NULL are no-ops; NULLs *c_p. */
void nn_dnnl_conv_free(nn_dnnl_conv_t **c_p);

/* Get ready for a pass over n examples split into n_parts parts by
 * nn_par_range: primitives for each part's size, each part's scratch.
 * Returns 0, -EINVAL, -ENOMEM or -ENOTSUP (oneDNN refused a primitive). */
int nn_dnnl_conv_prepare(nn_dnnl_conv_t *c, int n, int n_parts);

/* Part `part` of the prepared pass, on its m examples:
 *   forward:  y (m, O, OH, OW) = conv(x (m, C, H, W), w (O, C*k*k)) + b
 *             (b NULL: no bias).
 *   backward: dw (O, C*k*k) = sum over the m examples of the weight
 *             gradient, db (O) likewise (NULL: no bias), both overwritten;
 *             dx (m, C, H, W) += or = (dx_add) the input gradient (dx NULL:
 *             not wanted).
 * All pointers borrowed for the call. Returns 0 or -EIO (oneDNN failed; the
 * outputs are then undefined and the caller should use its reference path). */
int nn_dnnl_conv_forward(nn_dnnl_conv_t *c, int part, int m, const float *x, const float *w, const float *b,
                         float *y);
int nn_dnnl_conv_backward(nn_dnnl_conv_t *c, int part, int m, const float *x, const float *w, const float *dy,
                          float *dx, float *dw, float *db);

/* The oneDNN implementations of the last prepared size, for logs and the
 * benchmark: "fwd jit:avx2, bwd_d jit:avx2, bwd_w jit:avx2". Borrowed. */
const char *nn_dnnl_conv_impl(const nn_dnnl_conv_t *c);

#endif
