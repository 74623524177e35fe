/* common/backend/backend_cuda_util.c — the CUDA backend's error checks and
 * small helpers (backend_cuda_int.h): every CUDA, cuBLAS and cuDNN call goes
 * through cb_cuda_check / cb_blas_check / cb_dnn_check, which record the
 * first failure and mark the backend failed; device and pinned allocations
 * within KFAC_CUDA_MEM_LIMIT; the per-layer synchronization of
 * KFAC_CUDA_SYNC; a layer's input buffers. Only built with KFAC_CUDA. */
#ifdef KFAC_CUDA

#include "common/backend/backend_cuda_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/base/log.h"

/* ---- error handling --------------------------------------------------------------- */

__attribute__((format(printf, 2, 3)))
int cb_fail(backend_cuda_t *cb, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_error("backend cuda: %s", msg);
    if (!cb->failed) { /* the first failure is the cause; later ones are consequences */
        snprintf(cb->fail_msg, sizeof cb->fail_msg, "%s", msg);
        snprintf(cb->desc, sizeof cb->desc, "cuda: FAILED: %s", msg);
        cb->failed = -EIO;
    }
    return -EIO;
}

/* The function name of a stringified call: text up to '('. */
const char *cb_fname(const char *call, char *buf, size_t len) {
    size_t i = 0;
    while (call[i] && call[i] != '(' && i + 1 < len) { buf[i] = call[i]; i++; }
    buf[i] = 0;
    return buf;
}

int cb_cuda_check(backend_cuda_t *cb, cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return 0;
    char fn[80];
    /* A fault of a kernel queued earlier is reported by the next call that waits. */
    const int late = !cb->sync_each && strstr(call, "Synchronize") != NULL;
    return cb_fail(cb, "%s:%d: %s: %s (%s)%s", file, line, cb_fname(call, fn, sizeof fn), cudaGetErrorString(e),
                   cudaGetErrorName(e),
                   late ? "; work queued earlier may have caused it: KFAC_CUDA_SYNC=1 names the layer" : "");
}

int cb_blas_check(backend_cuda_t *cb, cublasStatus_t st, const char *call, const char *file, int line) {
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    char fn[80];
    return cb_fail(cb, "%s:%d: %s: %s (%s)", file, line, cb_fname(call, fn, sizeof fn), cublasGetStatusString(st),
                  cublasGetStatusName(st));
}

int cb_dnn_check(backend_cuda_t *cb, cudnnStatus_t st, const char *call, const char *file, int line) {
    if (st == CUDNN_STATUS_SUCCESS) return 0;
    char fn[80], detail[256];
    detail[0] = 0;
    cudnnGetLastErrorString(detail, sizeof detail);
    return cb_fail(cb, "%s:%d: %s: %s%s%s", file, line, cb_fname(call, fn, sizeof fn), cudnnGetErrorString(st),
                  detail[0] ? ": " : "", detail);
}

/* Each evaluates the call once and gives 0 or -EIO (backend marked failed). */
/* Return from the enclosing function when expr gives a non-zero code. */

/* ---- small helpers -------------------------------------------------------------- */

int cb_dalloc(backend_cuda_t *cb, void **p, size_t bytes) {
    if (!bytes) bytes = 16;
    if (cb->mem_limit && cb->mem_used + bytes > cb->mem_limit)
        return cb_fail(cb, "out of device memory: %zu more bytes would exceed KFAC_CUDA_MEM_LIMIT=%zu (%zu in use)",
                       bytes, cb->mem_limit, cb->mem_used);
    CB_TRY(CK_CUDA(cudaMalloc(p, bytes)));
    cb->mem_used += bytes;
    return 0;
}

int cb_dfree(backend_cuda_t *cb, void **p, size_t bytes) {
    if (!*p) return 0;
    int rc = CK_CUDA(cudaFree(*p));
    *p = NULL;
    cb->mem_used -= bytes < cb->mem_used ? bytes : cb->mem_used;
    return rc;
}

/* KFAC_CUDA_SYNC=1: wait for the work just queued, so that a device fault is
 * reported at the layer that caused it instead of at a later synchronization.
 * Without it an asynchronous fault surfaces at the next synchronizing call,
 * whose message then says so. */
int cb_sync_after(backend_cuda_t *cb, const char *what, const char *name) {
    if (!cb->sync_each) return 0;
    cudaError_t e = cudaStreamSynchronize(cb->stream);
    if (e == cudaSuccess) return 0;
    return cb_fail(cb, "%s of layer %s: %s (%s)", what, name, cudaGetErrorString(e), cudaGetErrorName(e));
}

int cb_halloc(backend_cuda_t *cb, void **p, size_t bytes) {
    return CK_CUDA(cudaMallocHost(p, bytes ? bytes : 16));
}

size_t cb_align(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

/* The device activations layer l reads (its input). */
const float *cb_input(const backend_cuda_t *cb, const layer_t *l) {
    return l->in < 0 ? cb->d_x : cb->layers[l->in].y;
}

/* Where layer l's input gradient goes (NULL for the network input). */
float *cb_input_grad(const backend_cuda_t *cb, const layer_t *l) {
    return l->in < 0 ? NULL : cb->layers[l->in].dy;
}

int cb_uses_cudnn(const layer_t *l) {
    return l->kind == LAYER_CONV || l->kind == LAYER_RELU || l->kind == LAYER_TANH || l->kind == LAYER_AVGPOOL;
}

#else

/* Built without CUDA. */
typedef int backend_cuda_util_unused_t;

#endif
