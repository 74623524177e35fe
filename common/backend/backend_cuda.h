/* common/backend/backend.cuda.h — INTERNAL to the backend module: the CUDA
 * implementation behind common/backend/backend.h (host side in backend_cuda.c) and
 * the launchers of its own kernels (backend_cuda_kernels.cu). Only
 * backend.c, backend_cuda.c and the kernels include it, and only when the
 * build defines KFAC_CUDA.
 *
 * Conventions: the same as backend.h and nn.h (float32, row-major, NCHW;
 * symmetric factors full, upper triangle authoritative). Every pointer a
 * launcher takes is DEVICE memory unless its name starts with h_. Launchers
 * enqueue on `stream` and return cudaGetLastError() (launch errors); errors
 * of the kernels themselves surface at the next synchronization. Sizes are
 * ints per dimension, products are computed in 64 bits.
 */
#ifndef KFAC_BACKEND_CUDA_H
#define KFAC_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifndef __CUDACC__
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- host side (backend_cuda.c), called by backend.c's dispatch ---------- */
#ifndef __CUDACC__
typedef struct backend_cuda backend_cuda_t;

/* 1 if device 0 is usable (a device answers and this build's kernels run on
 * it), else 0 with "no GPU (...)" or the reason in why. */
int backend_cuda_probe(char *why, size_t why_len);

/* See backend.h for the contract of each; params/state are never NULL here
 * (the dispatcher resolves NULL to the net's arrays). */
backend_cuda_t *backend_cuda_new(net_t *net, char *err, size_t err_len);
void backend_cuda_free(backend_cuda_t **cb_p);
const char *backend_cuda_describe(const backend_cuda_t *cb);
int backend_cuda_failed(const backend_cuda_t *cb);
int backend_cuda_set_params(backend_cuda_t *cb, const float *params, const float *state);
int backend_cuda_forward(backend_cuda_t *cb, const float *x, int n, int train);
int backend_cuda_probs(backend_cuda_t *cb, float *probs);
int backend_cuda_backward(backend_cuda_t *cb, const int *labels, int grads_to_host, float *loss,
                          int *n_correct);
int backend_cuda_stats(backend_cuda_t *cb, kfac_stats_t *s);
int backend_cuda_reserve_stats(backend_cuda_t *cb, const kfac_stats_t *s);
size_t backend_cuda_device_bytes(const backend_cuda_t *cb);
int backend_cuda_layer_copy(backend_cuda_t *cb, int layer, float *y, float *dy);
#endif

/* ---- kernels (backend_cuda_kernels.cu) ------------------------------------ */

/* cudaSuccess when this build's kernels can run on the current device
 * (cudaErrorNoKernelImageForDevice etc. otherwise). */
cudaError_t backend_cuda_k_probe(void);

/* y (n, O, P) += b[o]: the bias of fc (P = 1) and conv outputs. */
cudaError_t backend_cuda_k_bias_add(float *y, const float *b, int n, int O, int P, cudaStream_t stream);

/* db[o] = sum_{i,p} dy[(i*O + o)*P + p] (double accumulation). */
cudaError_t backend_cuda_k_bias_grad(const float *dy, float *db, int n, int O, int P, cudaStream_t stream);

/* y = a + b over count floats (add layer). */
cudaError_t backend_cuda_k_add(float *y, const float *a, const float *b, size_t count, cudaStream_t stream);

/* dst += src over count floats (gradient fan-in: flatten, add, dropout p=0). */
cudaError_t backend_cuda_k_accumulate(float *dst, const float *src, size_t count, cudaStream_t stream);

/* Dropout: y = x * mask (forward), dx += dy * mask (backward). */
cudaError_t backend_cuda_k_mul(float *y, const float *x, const float *mask, size_t count, cudaStream_t stream);
cudaError_t backend_cuda_k_mul_acc(float *dx, const float *dy, const float *mask, size_t count,
                                   cudaStream_t stream);

/* Max pooling with nn.c's exact rule: window k x k, stride s, padding pad
 * (padding never wins), the FIRST maximum in row-major window order is the
 * argmax (index iy*W + ix into the input channel; -1 and y = 0 for a window
 * entirely in padding). x (n, C, H, W) -> y, argmax (n, C, OH, OW). */
cudaError_t backend_cuda_k_maxpool_fwd(const float *x, float *y, int32_t *argmax, int n, int C, int H, int W,
                                       int OH, int OW, int k, int s, int pad, cudaStream_t stream);
/* dx (n, C, H, W) += the dy of every output whose argmax is that input,
 * added in ascending output order as nn.c does (a gather: deterministic). */
cudaError_t backend_cuda_k_maxpool_bwd(const float *dy, const int32_t *argmax, float *dx, int n, int C, int H,
                                       int W, int OH, int OW, int k, int s, int pad, cudaStream_t stream);

/* Batch normalization, nn.c semantics (double sums, biased variance for the
 * normalization, unbiased for the running variance, running <- (1 - m) run +
 * m batch). x, dy, xhat (n, C, HW). Per-channel sums are split over
 * `splits` blocks per channel and combined in a fixed order (deterministic).
 * work: at least backend_cuda_bn_work_len(C, splits) doubles. */
size_t backend_cuda_bn_work_len(int C, int splits);
int backend_cuda_bn_splits(int n, int C, int HW);
/* Train: mean and 1/sqrt(var + eps) of the batch into bmean/binvstd (C), the
 * running statistics updated in place. */
cudaError_t backend_cuda_k_bn_batch_stats(const float *x, int n, int C, int HW, int splits, float eps,
                                          float momentum, float *run_mean, float *run_var, float *bmean,
                                          float *binvstd, double *work, cudaStream_t stream);
/* Eval: bmean = run_mean, binvstd = 1 / sqrtf(run_var + eps). */
cudaError_t backend_cuda_k_bn_running_stats(const float *run_mean, const float *run_var, int C, float eps,
                                            float *bmean, float *binvstd, cudaStream_t stream);
/* xhat = (x - bmean) * binvstd, y = gamma * xhat + beta. */
cudaError_t backend_cuda_k_bn_normalize(const float *x, const float *gamma, const float *beta,
                                        const float *bmean, const float *binvstd, int n, int C, int HW,
                                        float *xhat, float *y, cudaStream_t stream);
/* dgamma = sum dy xhat, dbeta = sum dy per channel; dx (may be NULL) +=
 * gamma invstd (dy - mean(dy) - xhat mean(dy xhat)) in train mode,
 * gamma invstd dy in eval mode. */
cudaError_t backend_cuda_k_bn_backward(const float *dy, const float *xhat, const float *gamma,
                                       const float *binvstd, int n, int C, int HW, int splits, int train,
                                       float *dgamma, float *dbeta, float *dx, double *work,
                                       cudaStream_t stream);

/* Softmax of the logits z (n, K) into probs, row-wise and max-shifted with a
 * double sum, as nn.c. */
cudaError_t backend_cuda_k_softmax(const float *z, float *probs, int n, int K, cudaStream_t stream);
/* From probs and labels (n, each in [0, K)): loss[i] = -log(p[i, y_i] +
 * 1e-30) (double), hit[i] = (first argmax of row i == y_i), and, if dz is
 * not NULL, dz (n, K) = (p - onehot(y)) * inv_n. */
cudaError_t backend_cuda_k_xent(const float *probs, const int *labels, int n, int K, float inv_n, float *dz,
                                double *loss, int *hit, cudaStream_t stream);

/* ---- factor statistics ---- */

/* KFC patches: cols (n*OH*OW, ld), row (i, oy, ox), column (c, ky, kx) =
 * x[i][c][oy*s - pad + ky][ox*s - pad + kx] (0 outside the image) — nn.c's
 * im2col — for columns < C*k*k; if ones, column C*k*k is 1 (ld = C*k*k + 1,
 * the homogeneous coordinate). */
cudaError_t backend_cuda_k_im2col(const float *x, float *cols, int n, int C, int H, int W, int k, int s,
                                  int pad, int OH, int OW, int ld, int ones, cudaStream_t stream);
/* Spatially averaged patches: means (n, ld), column j < C*k*k the mean over
 * the OH*OW positions of that patch column (float sum times inv_p), column
 * C*k*k = 1 if ones. */
cudaError_t backend_cuda_k_patch_means(const float *x, float *means, int n, int C, int H, int W, int k, int s,
                                       int pad, int OH, int OW, int ld, int ones, float inv_p,
                                       cudaStream_t stream);
/* out (n, d+1) = [a 1] for a (n, d). */
cudaError_t backend_cuda_k_augment(const float *a, float *out, int n, int d, cudaStream_t stream);
/* dyt (n*P, O), row (i, t) = dy (n, O, P) transposed per example. */
cudaError_t backend_cuda_k_transpose_dy(const float *dy, float *dyt, int n, int O, int P, cudaStream_t stream);
/* sums (n*O) = sum over the P positions of dy (n*O, P), float accumulation. */
cudaError_t backend_cuda_k_pos_sums(const float *dy, float *sums, int n, int O, int P, cudaStream_t stream);
/* Rank-1 split of each example's feature map (kfac_stats_rank1's contract):
 * a (n, C*T) channel-major, A_i[t][c] = a[i][c*T + t]; K (n, T) and psi
 * (n, C) with A_i ~ K_i psi_i^T, K = sqrt(sigma) u, psi = sqrt(sigma) v, sign
 * so that sum(psi) >= 0 (else the largest |psi_c| positive); zero for a zero
 * map. By power iteration on A^T A in double, one block per example, from the
 * largest-norm row of A, until ||v_k - v_(k-1)|| <= tol or max_iter.
 * work: backend_cuda_rank1_work_len(n, C, T) doubles. */
size_t backend_cuda_rank1_work_len(int n, int C, int T);
cudaError_t backend_cuda_k_rank1(const float *a, int n, int C, int T, float *K, float *psi, int max_iter,
                                 double tol, double *work, cudaStream_t stream);
/* Unit-wise batch-norm factor (kfac_stats_bn): F (C, 3) = E_i[(dg^2, dg db,
 * db^2)] with dg = g_scale sum_t dy xhat, db = g_scale sum_t dy per example
 * and channel. work: 2*n*C doubles. */
cudaError_t backend_cuda_k_bn_factor(const float *xhat, const float *dy, int n, int C, int P, float g_scale,
                                     float *F, double *work, cudaStream_t stream);
/* Mirror the row-major upper triangle of A (d, d) onto the lower one; if
 * corner, A[d-1][d-1] = 1 exactly (the homogeneous coordinate's E[1*1]). */
cudaError_t backend_cuda_k_symmetrize(float *A, int d, int corner, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
