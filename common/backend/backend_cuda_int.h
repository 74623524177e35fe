/* common/backend/backend_cuda_int.h — internal to the CUDA backend
 * (backend_cuda.c, backend_cuda_stats.c): the backend's state, per-layer
 * device buffers and cuDNN descriptors, and the error-checking helpers every
 * CUDA, cuBLAS and cuDNN call goes through (CK_CUDA, CK_BLAS, CK_DNN: on
 * failure the backend records "file:line: call: message", is marked failed,
 * and the call returns -EIO). Only built with KFAC_CUDA. */
#ifndef KFAC_BACKEND_CUDA_INT_H
#define KFAC_BACKEND_CUDA_INT_H
#ifdef KFAC_CUDA

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

#include "common/backend/backend_cuda.h"

#define CB_RANK1_MAX_ITER 500        /* power iterations per example at most */
#define CB_RANK1_TOL 1e-10           /* ||v_k - v_(k-1)|| that ends the iteration */
#define CB_WS_MAX ((size_t)1 << 30)  /* cuDNN workspace: at most 1 GiB ... */
#define CB_WS_FREE_DIV 4             /* ... and at most a quarter of the free memory */

/* Factor products F = alpha X^T X (KFAC_CUDA_GRAM): */
#define CB_GRAM_GEMM 0               /* "gemm" (default): cublasSgemm of the whole product */
#define CB_GRAM_SYRK 1               /* "syrk": cublasSsyrk, half the flops and 12-34x slower on an H200 */

typedef struct cb_layer {
    float *y, *dy;           /* (cap, size) device; NULL for softmax_xent */
    int32_t *argmax;         /* maxpool: (cap, size) */
    float *mask;             /* dropout: (cap, size) device */
    float *h_mask;           /* dropout: (cap, size) pinned staging */
    int mask_on;             /* dropout: the last forward pass applied a mask */
    float *xhat;             /* bn: (cap, size) normalized input */
    float *bmean, *binvstd;  /* bn: (c) batch (or running) mean and 1/std */
    float *w_al, *dw_al;     /* conv: (out, in_c*k*k) weights and their gradient in buffers of their own:
                                the flat arenas only guarantee 4-byte alignment, cuDNN gets 256 */
    int bn_splits;           /* bn: blocks per channel for the current batch size */
    /* cuDNN (conv, relu, tanh, avgpool): input and output tensors at the current batch size */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;      /* conv: (out, in_c, k, k) */
    cudnnConvolutionDescriptor_t cd; /* conv */
    cudnnPoolingDescriptor_t pd;     /* avgpool */
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
} cb_layer_t;

struct backend_cuda {
    net_t *net;                 /* borrowed */
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    cudnnActivationDescriptor_t act_relu, act_tanh;
    cudaEvent_t ev_params;      /* behind the last parameter/state upload */
    cudaEvent_t ev_input;       /* behind the last input/mask upload */
    cb_layer_t *layers;         /* (net->n_layers) */

    /* device */
    float *d_params, *d_grads;  /* (n_params) */
    float *d_state;             /* (n_state) */
    float *d_x;                 /* (cap, in_size) */
    float *d_probs;             /* (cap, n_classes) */
    int *d_labels, *d_hits;     /* (cap) */
    double *d_lg;               /* (cap) log p[i, y_i] */
    double *d_bn;               /* batch-norm sums, sized for the widest bn layer */
    void *d_ws;                 /* cuDNN workspace */
    size_t ws_bytes;
    void *d_scratch;            /* factor-statistics scratch */
    size_t scratch_bytes;
    float *d_factors;           /* (factors_len) the factor arena, laid out as kfac_stats_t's */
    size_t factors_len;

    /* pinned host staging */
    float *h_params, *h_grads;  /* (n_params) */
    float *h_state;             /* (n_state) */
    float *h_x;                 /* (cap, in_size) */
    float *h_probs;             /* (cap, n_classes) */
    int *h_labels, *h_hits;     /* (cap) */
    double *h_lg;               /* (cap) */
    float *h_factors;           /* (h_factors_len) */
    size_t h_factors_len;

    int shape_n;                /* batch size the descriptors and algorithms are set for; 0: none */
    int fwd_n;                  /* examples of the last forward pass; 0: none */
    int train;                  /* mode of the last forward pass */
    int bwd_done;               /* a backward pass ran after it */
    size_t mem_limit;           /* KFAC_CUDA_MEM_LIMIT: device bytes this backend may take; 0: no limit */
    size_t mem_used;            /* device bytes it holds (cb_dalloc minus cb_dfree) */
    int sync_each;              /* KFAC_CUDA_SYNC=1: synchronize after every layer and statistics slot */
    int gram;                   /* KFAC_CUDA_GRAM: how factor products X^T X are computed (CB_GRAM_*) */
    int failed;                 /* 0 or -EIO */
    char fail_msg[384];
    char desc[448];
};


int cb_fail(backend_cuda_t *cb, const char *fmt, ...);
const char *cb_fname(const char *call, char *buf, size_t len);
int cb_cuda_check(backend_cuda_t *cb, cudaError_t e, const char *call, const char *file, int line);
int cb_blas_check(backend_cuda_t *cb, cublasStatus_t st, const char *call, const char *file, int line);
int cb_dnn_check(backend_cuda_t *cb, cudnnStatus_t st, const char *call, const char *file, int line);
int cb_dalloc(backend_cuda_t *cb, void **p, size_t bytes);
int cb_halloc(backend_cuda_t *cb, void **p, size_t bytes);
int cb_dfree(backend_cuda_t *cb, void **p, size_t bytes);
int cb_sync_after(backend_cuda_t *cb, const char *what, const char *name);
size_t cb_align(size_t bytes);
const float *cb_input(const backend_cuda_t *cb, const layer_t *l);
float *cb_input_grad(const backend_cuda_t *cb, const layer_t *l);
int cb_uses_cudnn(const layer_t *l);

#define CK_CUDA(call) cb_cuda_check(cb, (call), #call, __FILE__, __LINE__)
#define CK_BLAS(call) cb_blas_check(cb, (call), #call, __FILE__, __LINE__)
#define CK_DNN(call) cb_dnn_check(cb, (call), #call, __FILE__, __LINE__)
#define CB_TRY(expr) do { int rc_ = (expr); if (rc_) return rc_; } while (0)

#endif
#endif
