/* common/backend/backend_cuda.c — the CUDA backend (host side): device buffers for
 * every layer, cuDNN for convolutions (forward, backward data, backward
 * filter), average pooling and relu/tanh, cuBLAS for fully connected layers
 * and the factor statistics (SYRK), and the kernels of
 * backend_cuda_kernels.cu for everything that must follow nn.c's exact
 * semantics. Compiled only when KFAC_CUDA is defined; see backend.h for the
 * contract and backend_cuda.h for the kernels.
 *
 * Conventions
 *   - float32, row-major, NCHW as nn.h. cuBLAS is column-major: a row-major
 *     (r, c) matrix is, unchanged in memory, the column-major (c, r) matrix
 *     with leading dimension c. Every cuBLAS call below states the product it
 *     computes in both views.
 *   - One non-blocking stream per backend; cuBLAS and cuDNN run on it.
 *     Parameters go up once per step (backend_set_params), the input batch
 *     per forward pass, gradients come down once per backward pass; all
 *     through pinned (cudaMallocHost) staging. Each staging buffer is reused
 *     only after the event recorded behind its last copy has completed.
 *   - cuDNN only sees buffers from cudaMalloc (256-byte aligned): a conv
 *     layer's weights are copied out of the flat parameter arena after each
 *     upload, and its weight gradient is copied back into the flat gradient.
 *   - No TF32: convolutions use CUDNN_FMA_MATH and only algorithms that are
 *     not tensor-op; cuBLAS keeps CUBLAS_DEFAULT_MATH (full fp32 for SGEMM /
 *     SSYRK). Deterministic cuDNN algorithms are preferred.
 *   - Every CUDA runtime, cuBLAS and cuDNN call is checked: a failure logs
 *     file:line, the call and the library's message, marks the backend failed
 *     (-EIO from every later call) and is shown by backend_describe().
 *
 * Ownership: the backend owns every device and pinned buffer, handle,
 * descriptor, stream and event; the net is borrowed. One thread at a time.
 */
#ifdef KFAC_CUDA

#include "common/backend/backend_cuda.h"
#include "common/backend/backend_cuda_api.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/base/rng.h"

#include "common/backend/backend_cuda_int.h"

/* ---- probing ---------------------------------------------------------------------- */

int backend_cuda_probe(char *why, size_t why_len) {
    char local[8];
    if (!why || !why_len) { why = local; why_len = sizeof local; }
    why[0] = 0;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "no GPU (cudaGetDeviceCount: %s, %s)", cudaGetErrorString(e), cudaGetErrorName(e));
        (void)cudaGetLastError(); /* clear the runtime's error state */
        return 0;
    }
    if (count < 1) {
        snprintf(why, why_len, "no GPU (cudaGetDeviceCount found no device)");
        return 0;
    }
    if ((e = cudaSetDevice(0)) != cudaSuccess) {
        snprintf(why, why_len, "no GPU (cudaSetDevice(0): %s, %s)", cudaGetErrorString(e), cudaGetErrorName(e));
        (void)cudaGetLastError();
        return 0;
    }
    if ((e = backend_cuda_k_probe()) != cudaSuccess) {
        struct cudaDeviceProp prop;
        memset(&prop, 0, sizeof prop);
        (void)cudaGetDeviceProperties(&prop, 0);
        snprintf(why, why_len,
                 "no usable GPU: %s (sm_%d%d) cannot run this build's kernels (%s); rebuild with NVFLAGS "
                 "naming its architecture, see docs/gpu.md",
                 prop.name, prop.major, prop.minor, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return 0;
    }
    return 1;
}

/* ---- shapes, algorithms, workspace --------------------------------------------------- */

static int s_set4d(backend_cuda_t *cb, cudnnTensorDescriptor_t d, int n, int c, int h, int w) {
    return CK_DNN(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
}

static int s_is_tensor_op(cudnnMathType_t m) {
    return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

/* Pick, in cuDNN's heuristic order, the first algorithm that succeeded, is
 * not tensor-op (no TF32), whose workspace fits ws_cap; deterministic ones
 * first. Same shape for the three directions. */
static int s_choose_fwd(backend_cuda_t *cb, const layer_t *l, cb_layer_t *c, size_t ws_cap, size_t *need) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0;
    CB_TRY(CK_DNN(cudnnGetConvolutionForwardAlgorithm_v7(cb->dnn, c->xd, c->wd, c->cd, c->yd,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf)));
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < got; j++) {
            size_t ws = 0;
            if (perf[j].status != CUDNN_STATUS_SUCCESS || s_is_tensor_op(perf[j].mathType)) continue;
            if (pass == 0 && perf[j].determinism != CUDNN_DETERMINISTIC) continue;
            if (cudnnGetConvolutionForwardWorkspaceSize(cb->dnn, c->xd, c->wd, c->cd, c->yd, perf[j].algo, &ws) !=
                    CUDNN_STATUS_SUCCESS || ws > ws_cap)
                continue;
            c->fwd_algo = perf[j].algo;
            if (ws > *need) *need = ws;
            log_debug("backend cuda: %s forward: cuDNN algorithm %d, %zu bytes of workspace", l->name,
                      (int)perf[j].algo, ws);
            return 0;
        }
    return cb_fail(cb, "layer %s: cuDNN offers no fp32 forward algorithm within %zu bytes of workspace", l->name,
                  ws_cap);
}

static int s_choose_bwd_data(backend_cuda_t *cb, const layer_t *l, cb_layer_t *c, size_t ws_cap, size_t *need) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int got = 0;
    CB_TRY(CK_DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(cb->dnn, c->wd, c->yd, c->cd, c->xd,
                                                              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf)));
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < got; j++) {
            size_t ws = 0;
            if (perf[j].status != CUDNN_STATUS_SUCCESS || s_is_tensor_op(perf[j].mathType)) continue;
            if (pass == 0 && perf[j].determinism != CUDNN_DETERMINISTIC) continue;
            if (cudnnGetConvolutionBackwardDataWorkspaceSize(cb->dnn, c->wd, c->yd, c->cd, c->xd, perf[j].algo,
                                                             &ws) != CUDNN_STATUS_SUCCESS || ws > ws_cap)
                continue;
            c->bwd_data_algo = perf[j].algo;
            if (ws > *need) *need = ws;
            log_debug("backend cuda: %s backward data: cuDNN algorithm %d, %zu bytes of workspace", l->name,
                      (int)perf[j].algo, ws);
            return 0;
        }
    return cb_fail(cb, "layer %s: cuDNN offers no fp32 backward-data algorithm within %zu bytes of workspace",
                  l->name, ws_cap);
}

static int s_choose_bwd_filter(backend_cuda_t *cb, const layer_t *l, cb_layer_t *c, size_t ws_cap, size_t *need) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int got = 0;
    CB_TRY(CK_DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(cb->dnn, c->xd, c->yd, c->cd, c->wd,
                                                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got,
                                                                perf)));
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < got; j++) {
            size_t ws = 0;
            if (perf[j].status != CUDNN_STATUS_SUCCESS || s_is_tensor_op(perf[j].mathType)) continue;
            if (pass == 0 && perf[j].determinism != CUDNN_DETERMINISTIC) continue;
            if (cudnnGetConvolutionBackwardFilterWorkspaceSize(cb->dnn, c->xd, c->yd, c->cd, c->wd, perf[j].algo,
                                                               &ws) != CUDNN_STATUS_SUCCESS || ws > ws_cap)
                continue;
            c->bwd_filter_algo = perf[j].algo;
            if (ws > *need) *need = ws;
            log_debug("backend cuda: %s backward filter: cuDNN algorithm %d, %zu bytes of workspace", l->name,
                      (int)perf[j].algo, ws);
            return 0;
        }
    return cb_fail(cb, "layer %s: cuDNN offers no fp32 backward-filter algorithm within %zu bytes of workspace",
                  l->name, ws_cap);
}

/* Set every descriptor for batch size n, choose the convolution algorithms
 * for it (once per batch size; the worker's is fixed) and size the shared
 * workspace for the most demanding one. */
static int s_set_shape(backend_cuda_t *cb, int n) {
    net_t *net = cb->net;
    size_t free_b = 0, total_b = 0;
    CB_TRY(CK_CUDA(cudaMemGetInfo(&free_b, &total_b)));
    size_t ws_cap = free_b / CB_WS_FREE_DIV;
    if (cb->mem_limit) { /* within the limit, the old workspace's bytes counted as free */
        const size_t room = cb->mem_limit - (cb->mem_used - cb->ws_bytes);
        if (room / CB_WS_FREE_DIV < ws_cap) ws_cap = room / CB_WS_FREE_DIV;
    }
    if (ws_cap > CB_WS_MAX) ws_cap = CB_WS_MAX;
    size_t need = 0;
    cb->shape_n = 0;
    for (int li = 0; li < net->n_layers; li++) {
        const layer_t *l = &net->layers[li];
        cb_layer_t *c = &cb->layers[li];
        if (l->kind == LAYER_BATCHNORM) c->bn_splits = backend_cuda_bn_splits(n, l->c, l->h * l->w);
        if (!cb_uses_cudnn(l)) continue;
        CB_TRY(s_set4d(cb, c->xd, n, l->in_c, l->in_h, l->in_w));
        CB_TRY(s_set4d(cb, c->yd, n, l->c, l->h, l->w));
        if (l->kind == LAYER_CONV) {
            int on = 0, oc = 0, oh = 0, ow = 0;
            CB_TRY(CK_DNN(cudnnGetConvolution2dForwardOutputDim(c->cd, c->xd, c->wd, &on, &oc, &oh, &ow)));
            if (on != n || oc != l->c || oh != l->h || ow != l->w)
                return cb_fail(cb, "layer %s: cuDNN computes a %dx%dx%dx%d output, the model says %dx%dx%dx%d",
                              l->name, on, oc, oh, ow, n, l->c, l->h, l->w);
            CB_TRY(s_choose_fwd(cb, l, c, ws_cap, &need));
            CB_TRY(s_choose_bwd_filter(cb, l, c, ws_cap, &need));
            if (l->in >= 0) CB_TRY(s_choose_bwd_data(cb, l, c, ws_cap, &need));
        } else if (l->kind == LAYER_AVGPOOL) {
            int on = 0, oc = 0, oh = 0, ow = 0;
            CB_TRY(CK_DNN(cudnnGetPooling2dForwardOutputDim(c->pd, c->xd, &on, &oc, &oh, &ow)));
            if (on != n || oc != l->c || oh != l->h || ow != l->w)
                return cb_fail(cb, "layer %s: cuDNN pools to %dx%dx%dx%d, the model says %dx%dx%dx%d", l->name, on,
                              oc, oh, ow, n, l->c, l->h, l->w);
        }
    }
    if (need > cb->ws_bytes) {
        /* Nothing may still use the old workspace. */
        CB_TRY(CK_CUDA(cudaStreamSynchronize(cb->stream)));
        CB_TRY(cb_dfree(cb, &cb->d_ws, cb->ws_bytes));
        cb->ws_bytes = 0;
        CB_TRY(cb_dalloc(cb, &cb->d_ws, need));
        cb->ws_bytes = need;
    }
    cb->shape_n = n;
    return 0;
}

/* ---- construction ------------------------------------------------------------------- */

static int s_init_layer(backend_cuda_t *cb, int li) {
    net_t *net = cb->net;
    const layer_t *l = &net->layers[li];
    cb_layer_t *c = &cb->layers[li];
    const size_t cap = (size_t)net->batch_cap, sz = cap * (size_t)l->size;
    if (l->kind != LAYER_SOFTMAX_XENT) {
        CB_TRY(cb_dalloc(cb, (void **)&c->y, sz * sizeof(float)));
        CB_TRY(cb_dalloc(cb, (void **)&c->dy, sz * sizeof(float)));
    }
    if (cb_uses_cudnn(l)) {
        CB_TRY(CK_DNN(cudnnCreateTensorDescriptor(&c->xd)));
        CB_TRY(CK_DNN(cudnnCreateTensorDescriptor(&c->yd)));
    }
    switch (l->kind) {
    case LAYER_CONV:
        CB_TRY(cb_dalloc(cb, (void **)&c->w_al, l->n_w * sizeof(float)));
        CB_TRY(cb_dalloc(cb, (void **)&c->dw_al, l->n_w * sizeof(float)));
        CB_TRY(CK_DNN(cudnnCreateFilterDescriptor(&c->wd)));
        /* W (out, in_c, k, k) row-major = nn.c's (out, in_c*k*k) with columns (c, ky, kx). */
        CB_TRY(CK_DNN(cudnnSetFilter4dDescriptor(c->wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, l->out, l->in_c, l->k,
                                                 l->k)));
        CB_TRY(CK_DNN(cudnnCreateConvolutionDescriptor(&c->cd)));
        /* nn.c's im2col is a cross-correlation (no kernel flip). */
        CB_TRY(CK_DNN(cudnnSetConvolution2dDescriptor(c->cd, l->pad, l->pad, l->stride, l->stride, 1, 1,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)));
        CB_TRY(CK_DNN(cudnnSetConvolutionMathType(c->cd, CUDNN_FMA_MATH))); /* fp32 FMA, never TF32 */
        break;
    case LAYER_AVGPOOL:
        CB_TRY(CK_DNN(cudnnCreatePoolingDescriptor(&c->pd)));
        /* nn.c divides by the whole window (padding counts as zeros); global pooling is a
         * window of the whole map. */
        if (l->global)
            CB_TRY(CK_DNN(cudnnSetPooling2dDescriptor(c->pd, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                                      CUDNN_NOT_PROPAGATE_NAN, l->in_h, l->in_w, 0, 0, 1, 1)));
        else
            CB_TRY(CK_DNN(cudnnSetPooling2dDescriptor(c->pd, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                                      CUDNN_NOT_PROPAGATE_NAN, l->k, l->k, l->pad, l->pad,
                                                      l->stride, l->stride)));
        break;
    case LAYER_MAXPOOL:
        CB_TRY(cb_dalloc(cb, (void **)&c->argmax, sz * sizeof(int32_t)));
        break;
    case LAYER_DROPOUT:
        CB_TRY(cb_dalloc(cb, (void **)&c->mask, sz * sizeof(float)));
        CB_TRY(cb_halloc(cb, (void **)&c->h_mask, sz * sizeof(float)));
        break;
    case LAYER_BATCHNORM:
        CB_TRY(cb_dalloc(cb, (void **)&c->xhat, sz * sizeof(float)));
        CB_TRY(cb_dalloc(cb, (void **)&c->bmean, (size_t)l->c * sizeof(float)));
        CB_TRY(cb_dalloc(cb, (void **)&c->binvstd, (size_t)l->c * sizeof(float)));
        break;
    default:
        break;
    }
    return 0;
}

static int s_upload_params(backend_cuda_t *cb) {
    net_t *net = cb->net;
    /* The previous upload must have left the staging buffers. */
    CB_TRY(CK_CUDA(cudaEventSynchronize(cb->ev_params)));
    memcpy(cb->h_params, net->params, net->n_params * sizeof(float));
    CB_TRY(CK_CUDA(cudaMemcpyAsync(cb->d_params, cb->h_params, net->n_params * sizeof(float),
                                   cudaMemcpyHostToDevice, cb->stream)));
    if (net->n_state) {
        memcpy(cb->h_state, net->state, net->n_state * sizeof(float));
        CB_TRY(CK_CUDA(cudaMemcpyAsync(cb->d_state, cb->h_state, net->n_state * sizeof(float),
                                       cudaMemcpyHostToDevice, cb->stream)));
    }
    CB_TRY(CK_CUDA(cudaEventRecord(cb->ev_params, cb->stream)));
    for (int li = 0; li < net->n_layers; li++) { /* the aligned copies cuDNN reads */
        const layer_t *l = &net->layers[li];
        if (l->kind == LAYER_CONV)
            CB_TRY(CK_CUDA(cudaMemcpyAsync(cb->layers[li].w_al, cb->d_params + l->w_off, l->n_w * sizeof(float),
                                           cudaMemcpyDeviceToDevice, cb->stream)));
    }
    return 0;
}

static void s_describe(backend_cuda_t *cb) {
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    int rt = 0, drv = 0, blas_v = 0;
    (void)cudaGetDeviceProperties(&prop, cb->device);
    (void)cudaRuntimeGetVersion(&rt);
    (void)cudaDriverGetVersion(&drv);
    (void)cublasGetVersion(cb->blas, &blas_v);
    size_t dnn_v = cudnnGetVersion();
    snprintf(cb->desc, sizeof cb->desc,
             "cuda: %s (sm_%d%d, %d SMs, %.1f GiB), CUDA runtime %d.%d, driver %d.%d, cuDNN %zu.%zu.%zu, "
             "cuBLAS %d.%d.%d",
             prop.name, prop.major, prop.minor, prop.multiProcessorCount,
             (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), rt / 1000, (rt % 1000) / 10, drv / 1000,
             (drv % 1000) / 10, dnn_v / 10000, (dnn_v % 10000) / 100, dnn_v % 100, blas_v / 10000,
             (blas_v / 100) % 100, blas_v % 100);
    size_t len = strlen(cb->desc);
    if (cb->sync_each && len < sizeof cb->desc)
        len += (size_t)snprintf(cb->desc + len, sizeof cb->desc - len, ", KFAC_CUDA_SYNC=1");
    if (cb->gram == CB_GRAM_SYRK && len < sizeof cb->desc)
        len += (size_t)snprintf(cb->desc + len, sizeof cb->desc - len, ", KFAC_CUDA_GRAM=syrk");
    if (cb->mem_limit && len < sizeof cb->desc)
        snprintf(cb->desc + len, sizeof cb->desc - len, ", KFAC_CUDA_MEM_LIMIT=%zu", cb->mem_limit);
}

static int s_init(backend_cuda_t *cb) {
    net_t *net = cb->net;
    const size_t cap = (size_t)net->batch_cap;
    CB_TRY(CK_CUDA(cudaSetDevice(cb->device)));
    CB_TRY(CK_CUDA(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking)));
    CB_TRY(CK_CUDA(cudaEventCreateWithFlags(&cb->ev_params, cudaEventDisableTiming)));
    CB_TRY(CK_CUDA(cudaEventCreateWithFlags(&cb->ev_input, cudaEventDisableTiming)));
    CB_TRY(CK_BLAS(cublasCreate(&cb->blas)));
    CB_TRY(CK_BLAS(cublasSetStream(cb->blas, cb->stream)));
    /* Full fp32 SGEMM/SSYRK: the default math mode never uses TF32 for fp32 data. */
    CB_TRY(CK_BLAS(cublasSetMathMode(cb->blas, CUBLAS_DEFAULT_MATH)));
    size_t dnn_v = cudnnGetVersion();
    if (dnn_v / 10000 != CUDNN_MAJOR)
        return cb_fail(cb, "cuDNN %zu.%zu is loaded but this binary was built against cuDNN %d.%d: install cuDNN %d",
                      dnn_v / 10000, (dnn_v % 10000) / 100, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_MAJOR);
    CB_TRY(CK_DNN(cudnnCreate(&cb->dnn)));
    CB_TRY(CK_DNN(cudnnSetStream(cb->dnn, cb->stream)));
    CB_TRY(CK_DNN(cudnnCreateActivationDescriptor(&cb->act_relu)));
    CB_TRY(CK_DNN(cudnnSetActivationDescriptor(cb->act_relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0)));
    CB_TRY(CK_DNN(cudnnCreateActivationDescriptor(&cb->act_tanh)));
    CB_TRY(CK_DNN(cudnnSetActivationDescriptor(cb->act_tanh, CUDNN_ACTIVATION_TANH, CUDNN_NOT_PROPAGATE_NAN, 0.0)));

    if (!(cb->layers = calloc((size_t)net->n_layers, sizeof *cb->layers)))
        return cb_fail(cb, "out of host memory");
    size_t bn_len = 0;
    for (int li = 0; li < net->n_layers; li++) {
        CB_TRY(s_init_layer(cb, li));
        const layer_t *l = &net->layers[li];
        if (l->kind == LAYER_BATCHNORM) {
            size_t len = backend_cuda_bn_work_len(l->c, 64); /* 64: the most splits backend_cuda_bn_splits gives */
            if (len > bn_len) bn_len = len;
        }
    }
    CB_TRY(cb_dalloc(cb, (void **)&cb->d_params, net->n_params * sizeof(float)));
    CB_TRY(cb_dalloc(cb, (void **)&cb->d_grads, net->n_params * sizeof(float)));
    CB_TRY(cb_dalloc(cb, (void **)&cb->d_state, net->n_state * sizeof(float)));
    CB_TRY(cb_dalloc(cb, (void **)&cb->d_x, cap * (size_t)net->in_size * sizeof(float)));
    CB_TRY(cb_dalloc(cb, (void **)&cb->d_probs, cap * (size_t)net->n_classes * sizeof(float)));
    CB_TRY(cb_dalloc(cb, (void **)&cb->d_labels, cap * sizeof(int)));
    CB_TRY(cb_dalloc(cb, (void **)&cb->d_hits, cap * sizeof(int)));
    CB_TRY(cb_dalloc(cb, (void **)&cb->d_lg, cap * sizeof(double)));
    CB_TRY(cb_dalloc(cb, (void **)&cb->d_bn, bn_len * sizeof(double)));
    CB_TRY(cb_halloc(cb, (void **)&cb->h_params, net->n_params * sizeof(float)));
    CB_TRY(cb_halloc(cb, (void **)&cb->h_grads, net->n_params * sizeof(float)));
    CB_TRY(cb_halloc(cb, (void **)&cb->h_state, net->n_state * sizeof(float)));
    CB_TRY(cb_halloc(cb, (void **)&cb->h_x, cap * (size_t)net->in_size * sizeof(float)));
    CB_TRY(cb_halloc(cb, (void **)&cb->h_probs, cap * (size_t)net->n_classes * sizeof(float)));
    CB_TRY(cb_halloc(cb, (void **)&cb->h_labels, cap * sizeof(int)));
    CB_TRY(cb_halloc(cb, (void **)&cb->h_hits, cap * sizeof(int)));
    CB_TRY(cb_halloc(cb, (void **)&cb->h_lg, cap * sizeof(double)));
    CB_TRY(s_set_shape(cb, net->batch_cap));
    CB_TRY(s_upload_params(cb));
    CB_TRY(CK_CUDA(cudaStreamSynchronize(cb->stream)));
    s_describe(cb);
    return 0;
}

backend_cuda_t *backend_cuda_new(net_t *net, char *err, size_t err_len) {
    char why[384];
    if (!backend_cuda_probe(why, sizeof why)) {
        if (err && err_len) snprintf(err, err_len, "%s", why);
        return NULL;
    }
    backend_cuda_t *cb = calloc(1, sizeof *cb);
    if (!cb) {
        if (err && err_len) snprintf(err, err_len, "out of host memory");
        return NULL;
    }
    cb->net = net;
    cb->device = 0;
    const char *v = getenv("KFAC_CUDA_MEM_LIMIT");
    if (v && *v) {
        char *end = NULL;
        double lim = strtod(v, &end);
        const double mul = (*end == 'K' || *end == 'k') ? 1024.0 : (*end == 'M' || *end == 'm') ? 1048576.0
                         : (*end == 'G' || *end == 'g') ? 1073741824.0 : 1.0;
        if (end == v || !(lim > 0) || (*end && mul == 1.0)) {
            if (err && err_len) snprintf(err, err_len, "KFAC_CUDA_MEM_LIMIT=%s: expected bytes, e.g. 4G or 512M", v);
            free(cb);
            return NULL;
        }
        cb->mem_limit = (size_t)(lim * mul);
    }
    v = getenv("KFAC_CUDA_SYNC");
    cb->sync_each = v && strcmp(v, "1") == 0;
    v = getenv("KFAC_CUDA_GRAM");
    cb->gram = CB_GRAM_GEMM;
    if (v && *v) {
        if (strcmp(v, "syrk") == 0) cb->gram = CB_GRAM_SYRK;
        else if (strcmp(v, "gemm") != 0) {
            if (err && err_len) snprintf(err, err_len, "KFAC_CUDA_GRAM=%s: expected gemm (the default) or syrk", v);
            free(cb);
            return NULL;
        }
    }
    if (s_init(cb) != 0) {
        if (err && err_len) snprintf(err, err_len, "initialization failed: %s", cb->fail_msg);
        backend_cuda_free(&cb);
        return NULL;
    }
    log_info("backend: %s", cb->desc);
    return cb;
}

void backend_cuda_free(backend_cuda_t **cb_p) {
    if (!cb_p || !*cb_p) return;
    backend_cuda_t *cb = *cb_p;
    /* Teardown after a device error: the calls may fail too; nothing to do about it. */
    (void)cudaSetDevice(cb->device);
    if (cb->stream) (void)cudaStreamSynchronize(cb->stream);
    if (cb->layers) {
        for (int li = 0; li < cb->net->n_layers; li++) {
            cb_layer_t *c = &cb->layers[li];
            if (c->xd) (void)cudnnDestroyTensorDescriptor(c->xd);
            if (c->yd) (void)cudnnDestroyTensorDescriptor(c->yd);
            if (c->wd) (void)cudnnDestroyFilterDescriptor(c->wd);
            if (c->cd) (void)cudnnDestroyConvolutionDescriptor(c->cd);
            if (c->pd) (void)cudnnDestroyPoolingDescriptor(c->pd);
            void *dev[] = {c->y, c->dy, c->argmax, c->mask, c->xhat, c->bmean, c->binvstd, c->w_al, c->dw_al};
            for (size_t j = 0; j < sizeof dev / sizeof dev[0]; j++)
                if (dev[j]) (void)cudaFree(dev[j]);
            if (c->h_mask) (void)cudaFreeHost(c->h_mask);
        }
        free(cb->layers);
    }
    void *dev[] = {cb->d_params, cb->d_grads, cb->d_state,   cb->d_x,       cb->d_probs,   cb->d_labels,
                   cb->d_hits,   cb->d_lg,    cb->d_bn,      cb->d_ws,      cb->d_scratch, cb->d_factors};
    for (size_t j = 0; j < sizeof dev / sizeof dev[0]; j++)
        if (dev[j]) (void)cudaFree(dev[j]);
    void *host[] = {cb->h_params, cb->h_grads,  cb->h_state, cb->h_x,
                    cb->h_probs,  cb->h_labels, cb->h_hits,  cb->h_lg, cb->h_factors};
    for (size_t j = 0; j < sizeof host / sizeof host[0]; j++)
        if (host[j]) (void)cudaFreeHost(host[j]);
    if (cb->act_relu) (void)cudnnDestroyActivationDescriptor(cb->act_relu);
    if (cb->act_tanh) (void)cudnnDestroyActivationDescriptor(cb->act_tanh);
    if (cb->dnn) (void)cudnnDestroy(cb->dnn);
    if (cb->blas) (void)cublasDestroy(cb->blas);
    if (cb->ev_params) (void)cudaEventDestroy(cb->ev_params);
    if (cb->ev_input) (void)cudaEventDestroy(cb->ev_input);
    if (cb->stream) (void)cudaStreamDestroy(cb->stream);
    free(cb);
    *cb_p = NULL;
}

const char *backend_cuda_describe(const backend_cuda_t *cb) { return cb->desc; }

int backend_cuda_failed(const backend_cuda_t *cb) { return cb->failed; }

size_t backend_cuda_device_bytes(const backend_cuda_t *cb) { return cb->mem_used; }

int backend_cuda_set_params(backend_cuda_t *cb, const float *params, const float *state) {
    if (cb->failed) return cb->failed;
    net_t *net = cb->net;
    if (params != net->params || (net->n_state && state != net->state)) {
        log_error("backend cuda: set_params expects the net's own arrays");
        return -EINVAL;
    }
    CB_TRY(CK_CUDA(cudaSetDevice(cb->device)));
    return s_upload_params(cb);
}

/* ---- forward ------------------------------------------------------------------------ */

static int s_layer_forward(backend_cuda_t *cb, int li, int n, int train) {
    net_t *net = cb->net;
    const layer_t *l = &net->layers[li];
    cb_layer_t *c = &cb->layers[li];
    const float *in = cb_input(cb, l);
    const size_t count = (size_t)n * l->size;
    const float one = 1.0f, zero = 0.0f;
    switch (l->kind) {
    case LAYER_FC: {
        const int K = l->in_c * l->in_h * l->in_w, O = l->out;
        const float *W = cb->d_params + l->w_off;
        /* y (n, O) = x (n, K) W^T, W (O, K) row-major.
         * Column-major: Y (O x n, ld O) = W_cm^T (O x K) X_cm (K x n), with W_cm = W^T (K x O, ld K),
         * X_cm = x^T (K x n, ld K). */
        CB_TRY(CK_BLAS(cublasSgemm(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, O, n, K, &one, W, K, in, K, &zero, c->y, O)));
        if (l->has_bias)
            CB_TRY(CK_CUDA(backend_cuda_k_bias_add(c->y, cb->d_params + l->b_off, n, O, 1, cb->stream)));
        return 0;
    }
    case LAYER_CONV:
        CB_TRY(CK_DNN(cudnnConvolutionForward(cb->dnn, &one, c->xd, in, c->wd, c->w_al, c->cd,
                                              c->fwd_algo, cb->d_ws, cb->ws_bytes, &zero, c->yd, c->y)));
        if (l->has_bias)
            CB_TRY(CK_CUDA(backend_cuda_k_bias_add(c->y, cb->d_params + l->b_off, n, l->out, l->h * l->w,
                                                   cb->stream)));
        return 0;
    case LAYER_RELU:
        return CK_DNN(cudnnActivationForward(cb->dnn, cb->act_relu, &one, c->xd, in, &zero, c->yd, c->y));
    case LAYER_TANH:
        return CK_DNN(cudnnActivationForward(cb->dnn, cb->act_tanh, &one, c->xd, in, &zero, c->yd, c->y));
    case LAYER_MAXPOOL:
        return CK_CUDA(backend_cuda_k_maxpool_fwd(in, c->y, c->argmax, n, l->c, l->in_h, l->in_w, l->h, l->w, l->k,
                                                  l->stride, l->pad, cb->stream));
    case LAYER_AVGPOOL:
        return CK_DNN(cudnnPoolingForward(cb->dnn, c->pd, &one, c->xd, in, &zero, c->yd, c->y));
    case LAYER_FLATTEN:
        return CK_CUDA(cudaMemcpyAsync(c->y, in, count * sizeof(float), cudaMemcpyDeviceToDevice, cb->stream));
    case LAYER_DROPOUT:
        if (c->mask_on) return CK_CUDA(backend_cuda_k_mul(c->y, in, c->mask, count, cb->stream));
        return CK_CUDA(cudaMemcpyAsync(c->y, in, count * sizeof(float), cudaMemcpyDeviceToDevice, cb->stream));
    case LAYER_BATCHNORM: {
        const int C = l->c, HW = l->h * l->w;
        float *run_mean = cb->d_state + (l->run_mean - net->state);
        float *run_var = cb->d_state + (l->run_var - net->state);
        if (train)
            CB_TRY(CK_CUDA(backend_cuda_k_bn_batch_stats(in, n, C, HW, c->bn_splits, l->eps, l->momentum, run_mean,
                                                         run_var, c->bmean, c->binvstd, cb->d_bn, cb->stream)));
        else
            CB_TRY(CK_CUDA(backend_cuda_k_bn_running_stats(run_mean, run_var, C, l->eps, c->bmean, c->binvstd,
                                                           cb->stream)));
        return CK_CUDA(backend_cuda_k_bn_normalize(in, cb->d_params + l->w_off, cb->d_params + l->b_off, c->bmean,
                                                   c->binvstd, n, C, HW, c->xhat, c->y, cb->stream));
    }
    case LAYER_ADD: {
        const float *in2 = l->in2 < 0 ? cb->d_x : cb->layers[l->in2].y;
        return CK_CUDA(backend_cuda_k_add(c->y, in, in2, count, cb->stream));
    }
    case LAYER_SOFTMAX_XENT:
        return 0; /* the logits are its input */
    default:
        log_error("backend cuda: layer %s has unknown kind %d", l->name, (int)l->kind);
        return -EINVAL;
    }
}

/* Draw every dropout mask of this training pass on the host, in layer order
 * from the seed net_forward would use (so both backends apply the same
 * masks), and queue their uploads. */
static int s_dropout_masks(backend_cuda_t *cb, int n, int train) {
    net_t *net = cb->net;
    rng_t r = {{0, 0, 0, 0}};
    if (train) {
        rng_seed(&r, net->dropout_seed);
        net->dropout_seed = rng_u64(&r);
    }
    for (int li = 0; li < net->n_layers; li++) {
        const layer_t *l = &net->layers[li];
        cb_layer_t *c = &cb->layers[li];
        if (l->kind != LAYER_DROPOUT) continue;
        c->mask_on = train && l->p > 0.0f;
        if (!c->mask_on) continue;
        const size_t count = (size_t)n * l->size;
        const float keep = 1.0f - l->p, scale = 1.0f / keep;
        for (size_t j = 0; j < count; j++) c->h_mask[j] = rng_uniform(&r) < keep ? scale : 0.0f;
        CB_TRY(CK_CUDA(cudaMemcpyAsync(c->mask, c->h_mask, count * sizeof(float), cudaMemcpyHostToDevice,
                                       cb->stream)));
    }
    return 0;
}

int backend_cuda_forward(backend_cuda_t *cb, const float *x, int n, int train) {
    if (cb->failed) return cb->failed;
    net_t *net = cb->net;
    CB_TRY(CK_CUDA(cudaSetDevice(cb->device)));
    if (n != cb->shape_n) CB_TRY(s_set_shape(cb, n));
    cb->fwd_n = 0;
    cb->bwd_done = 0;
    /* The previous input and masks must have left the staging buffers. */
    CB_TRY(CK_CUDA(cudaEventSynchronize(cb->ev_input)));
    const size_t xb = (size_t)n * net->in_size * sizeof(float);
    memcpy(cb->h_x, x, xb);
    CB_TRY(CK_CUDA(cudaMemcpyAsync(cb->d_x, cb->h_x, xb, cudaMemcpyHostToDevice, cb->stream)));
    CB_TRY(s_dropout_masks(cb, n, train));
    CB_TRY(CK_CUDA(cudaEventRecord(cb->ev_input, cb->stream)));
    for (int li = 0; li < net->n_layers; li++) {
        CB_TRY(s_layer_forward(cb, li, n, train));
        CB_TRY(cb_sync_after(cb, "forward", net->layers[li].name));
    }
    if (train && net->n_state) {
        /* The updated running statistics come back now, as net_forward leaves them in net->state. */
        CB_TRY(CK_CUDA(cudaMemcpyAsync(cb->h_state, cb->d_state, net->n_state * sizeof(float),
                                       cudaMemcpyDeviceToHost, cb->stream)));
        CB_TRY(CK_CUDA(cudaStreamSynchronize(cb->stream)));
        memcpy(net->state, cb->h_state, net->n_state * sizeof(float));
    }
    cb->fwd_n = n;
    cb->train = train;
    return 0;
}

int backend_cuda_probs(backend_cuda_t *cb, float *probs) {
    if (cb->failed) return cb->failed;
    net_t *net = cb->net;
    const int n = cb->fwd_n, K = net->n_classes;
    if (n < 1) return -EINVAL;
    CB_TRY(CK_CUDA(cudaSetDevice(cb->device)));
    const float *z = cb_input(cb, &net->layers[net->n_layers - 1]);
    CB_TRY(CK_CUDA(backend_cuda_k_softmax(z, cb->d_probs, n, K, cb->stream)));
    const size_t pb = (size_t)n * K * sizeof(float);
    CB_TRY(CK_CUDA(cudaMemcpyAsync(cb->h_probs, cb->d_probs, pb, cudaMemcpyDeviceToHost, cb->stream)));
    CB_TRY(CK_CUDA(cudaStreamSynchronize(cb->stream)));
    memcpy(probs, cb->h_probs, pb);
    return 0;
}

/* ---- backward ----------------------------------------------------------------------- */

static int s_layer_backward(backend_cuda_t *cb, int li, int n) {
    net_t *net = cb->net;
    const layer_t *l = &net->layers[li];
    cb_layer_t *c = &cb->layers[li];
    const float *in = cb_input(cb, l);
    float *dx = cb_input_grad(cb, l);
    const size_t count = (size_t)n * l->size;
    const float one = 1.0f, zero = 0.0f;
    switch (l->kind) {
    case LAYER_FC: {
        const int K = l->in_c * l->in_h * l->in_w, O = l->out;
        const float *W = cb->d_params + l->w_off;
        /* dW (O, K) = dy^T x, dy (n, O), x (n, K) row-major.
         * Column-major: dW_cm (K x O, ld K) = X_cm (K x n, ld K) DY_cm^T (n x O), DY_cm = dy^T (O x n, ld O). */
        CB_TRY(CK_BLAS(cublasSgemm(cb->blas, CUBLAS_OP_N, CUBLAS_OP_T, K, O, n, &one, in, K, c->dy, O, &zero,
                                   cb->d_grads + l->w_off, K)));
        if (l->has_bias) CB_TRY(CK_CUDA(backend_cuda_k_bias_grad(c->dy, cb->d_grads + l->b_off, n, O, 1, cb->stream)));
        /* dx (n, K) += dy (n, O) W (O, K).
         * Column-major: DX_cm (K x n, ld K) += W_cm (K x O, ld K) DY_cm (O x n, ld O). */
        if (dx) CB_TRY(CK_BLAS(cublasSgemm(cb->blas, CUBLAS_OP_N, CUBLAS_OP_N, K, n, O, &one, W, K, c->dy, O, &one, dx, K)));
        return 0;
    }
    case LAYER_CONV:
        /* dW = sum over examples and positions of dy (x) patches; beta 0 overwrites. */
        CB_TRY(CK_DNN(cudnnConvolutionBackwardFilter(cb->dnn, &one, c->xd, in, c->yd, c->dy, c->cd,
                                                     c->bwd_filter_algo, cb->d_ws, cb->ws_bytes, &zero, c->wd,
                                                     c->dw_al)));
        CB_TRY(CK_CUDA(cudaMemcpyAsync(cb->d_grads + l->w_off, c->dw_al, l->n_w * sizeof(float),
                                       cudaMemcpyDeviceToDevice, cb->stream)));
        if (l->has_bias)
            CB_TRY(CK_CUDA(backend_cuda_k_bias_grad(c->dy, cb->d_grads + l->b_off, n, l->out, l->h * l->w,
                                                    cb->stream)));
        /* dx += col2im(dy W): beta 1 accumulates (fan-out). */
        if (dx)
            CB_TRY(CK_DNN(cudnnConvolutionBackwardData(cb->dnn, &one, c->wd, c->w_al, c->yd, c->dy,
                                                       c->cd, c->bwd_data_algo, cb->d_ws, cb->ws_bytes, &one, c->xd,
                                                       dx)));
        return 0;
    case LAYER_RELU:
    case LAYER_TANH:
        if (!dx) return 0;
        /* dx += f'(x) dy (beta 1). */
        return CK_DNN(cudnnActivationBackward(cb->dnn, l->kind == LAYER_RELU ? cb->act_relu : cb->act_tanh, &one,
                                              c->yd, c->y, c->yd, c->dy, c->xd, in, &one, c->xd, dx));
    case LAYER_MAXPOOL:
        if (!dx) return 0;
        return CK_CUDA(backend_cuda_k_maxpool_bwd(c->dy, c->argmax, dx, n, l->c, l->in_h, l->in_w, l->h, l->w, l->k,
                                                  l->stride, l->pad, cb->stream));
    case LAYER_AVGPOOL:
        if (!dx) return 0;
        return CK_DNN(cudnnPoolingBackward(cb->dnn, c->pd, &one, c->yd, c->y, c->yd, c->dy, c->xd, in, &one, c->xd,
                                           dx));
    case LAYER_FLATTEN:
        return dx ? CK_CUDA(backend_cuda_k_accumulate(dx, c->dy, count, cb->stream)) : 0;
    case LAYER_DROPOUT:
        if (!dx) return 0;
        if (c->mask_on) return CK_CUDA(backend_cuda_k_mul_acc(dx, c->dy, c->mask, count, cb->stream));
        return CK_CUDA(backend_cuda_k_accumulate(dx, c->dy, count, cb->stream));
    case LAYER_BATCHNORM:
        return CK_CUDA(backend_cuda_k_bn_backward(c->dy, c->xhat, cb->d_params + l->w_off, c->binvstd, n, l->c,
                                                  l->h * l->w, c->bn_splits, cb->train, cb->d_grads + l->w_off,
                                                  cb->d_grads + l->b_off, dx, cb->d_bn, cb->stream));
    case LAYER_ADD: {
        float *dx2 = l->in2 < 0 ? NULL : cb->layers[l->in2].dy;
        if (dx) CB_TRY(CK_CUDA(backend_cuda_k_accumulate(dx, c->dy, count, cb->stream)));
        if (dx2) CB_TRY(CK_CUDA(backend_cuda_k_accumulate(dx2, c->dy, count, cb->stream)));
        return 0;
    }
    default:
        return 0;
    }
}

int backend_cuda_backward(backend_cuda_t *cb, const int *labels, int grads_to_host, float *loss, int *n_correct) {
    if (cb->failed) return cb->failed;
    net_t *net = cb->net;
    const int n = cb->fwd_n, K = net->n_classes, L = net->n_layers;
    if (n < 1) return -EINVAL;
    CB_TRY(CK_CUDA(cudaSetDevice(cb->device)));
    cb->bwd_done = 0;
    /* Every earlier use of h_labels ended with a stream synchronization. */
    memcpy(cb->h_labels, labels, (size_t)n * sizeof(int));
    CB_TRY(CK_CUDA(cudaMemcpyAsync(cb->d_labels, cb->h_labels, (size_t)n * sizeof(int), cudaMemcpyHostToDevice,
                                   cb->stream)));
    /* As net_backward: zero the gradient and every dy, then fill them. */
    CB_TRY(CK_CUDA(cudaMemsetAsync(cb->d_grads, 0, net->n_params * sizeof(float), cb->stream)));
    for (int li = 0; li < L - 1; li++)
        CB_TRY(CK_CUDA(cudaMemsetAsync(cb->layers[li].dy, 0, (size_t)n * net->layers[li].size * sizeof(float),
                                       cb->stream)));
    const layer_t *last = &net->layers[L - 1];
    CB_TRY(CK_CUDA(backend_cuda_k_softmax(cb_input(cb, last), cb->d_probs, n, K, cb->stream)));
    CB_TRY(CK_CUDA(backend_cuda_k_xent(cb->d_probs, cb->d_labels, n, K, 1.0f / (float)n, cb_input_grad(cb, last),
                                       cb->d_lg, cb->d_hits, cb->stream)));
    CB_TRY(cb_sync_after(cb, "loss", last->name));
    for (int li = L - 2; li >= 0; li--) {
        CB_TRY(s_layer_backward(cb, li, n));
        CB_TRY(cb_sync_after(cb, "backward", net->layers[li].name));
    }
    CB_TRY(CK_CUDA(cudaMemcpyAsync(cb->h_lg, cb->d_lg, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost,
                                   cb->stream)));
    CB_TRY(CK_CUDA(cudaMemcpyAsync(cb->h_hits, cb->d_hits, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost,
                                   cb->stream)));
    if (grads_to_host)
        CB_TRY(CK_CUDA(cudaMemcpyAsync(cb->h_grads, cb->d_grads, net->n_params * sizeof(float),
                                       cudaMemcpyDeviceToHost, cb->stream)));
    CB_TRY(CK_CUDA(cudaStreamSynchronize(cb->stream)));
    double sum = 0.0; /* net_loss's order: subtract each example's log-probability in turn */
    int hits = 0;
    for (int i = 0; i < n; i++) {
        sum -= cb->h_lg[i];
        hits += cb->h_hits[i];
    }
    if (loss) *loss = (float)(sum / n);
    if (n_correct) *n_correct = hits;
    if (grads_to_host) memcpy(net->grads, cb->h_grads, net->n_params * sizeof(float));
    cb->bwd_done = 1;
    return 0;
}

int backend_cuda_layer_copy(backend_cuda_t *cb, int layer, float *y, float *dy) {
    if (cb->failed) return cb->failed;
    const net_t *net = cb->net;
    const layer_t *l = &net->layers[layer];
    const cb_layer_t *c = &cb->layers[layer];
    const size_t bytes = (size_t)cb->fwd_n * l->size * sizeof(float);
    if (cb->fwd_n < 1 || (dy && !cb->bwd_done) || !c->y) return -EINVAL;
    CB_TRY(CK_CUDA(cudaSetDevice(cb->device)));
    if (y) CB_TRY(CK_CUDA(cudaMemcpyAsync(y, c->y, bytes, cudaMemcpyDeviceToHost, cb->stream)));
    if (dy) CB_TRY(CK_CUDA(cudaMemcpyAsync(dy, c->dy, bytes, cudaMemcpyDeviceToHost, cb->stream)));
    return CK_CUDA(cudaStreamSynchronize(cb->stream));
}

/* The plugin's entry point (backend_cuda_api.h): backend.c finds it with
 * dlsym after loading libkfac-cuda.so. */
static const backend_cuda_api_t s_api = {
    .version = BACKEND_CUDA_API_VERSION,
    .net_size = sizeof(net_t),
    .layer_size = sizeof(layer_t),
    .stats_size = sizeof(kfac_stats_t),
    .probe = backend_cuda_probe,
    .create = backend_cuda_new,
    .destroy = backend_cuda_free,
    .describe = backend_cuda_describe,
    .failed = backend_cuda_failed,
    .set_params = backend_cuda_set_params,
    .forward = backend_cuda_forward,
    .probs = backend_cuda_probs,
    .backward = backend_cuda_backward,
    .stats = backend_cuda_stats,
    .reserve_stats = backend_cuda_reserve_stats,
    .device_bytes = backend_cuda_device_bytes,
    .layer_copy = backend_cuda_layer_copy,
};

const backend_cuda_api_t *kfac_backend_cuda_api(void) { return &s_api; }

#else

/* Built without CUDA: common/backend/backend.c reports "built without CUDA". */
typedef int backend_cuda_unused_t;

#endif
