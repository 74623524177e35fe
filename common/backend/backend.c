/* common/backend/backend.c — the backend interface (backend.h): argument checks and
 * call-order bookkeeping shared by both backends, dispatch, and the CPU
 * backend, which is nn.c and kfac_stats.c on the borrowed net, unchanged.
 * The CUDA backend lives in backend_cuda.c and is linked only when the build
 * defines KFAC_CUDA; without it, asking for CUDA fails with "built without
 * CUDA" and AUTO means the CPU.
 */
#include "common/backend/backend.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#ifdef KFAC_CUDA
#include "common/backend/backend_cuda.h"
#endif

struct backend {
    backend_kind_t kind;  /* BACKEND_CPU or BACKEND_CUDA */
    net_t *net;           /* borrowed */
#ifdef KFAC_CUDA
    backend_cuda_t *cuda; /* BACKEND_CUDA */
#endif
    int fwd_n;            /* examples of the last forward pass; 0: none yet */
    int bwd_done;         /* a backward pass ran after it */
    char desc[96];        /* the CPU description (OpenBLAS threads when it was made) */
};

#define S_NO_CUDA_BUILD "built without CUDA (rebuild with CUDA=1 where nvcc, cuDNN and cuBLAS are installed)"

const char *backend_kind_name(backend_kind_t kind) {
    switch (kind) {
    case BACKEND_AUTO: return "auto";
    case BACKEND_CPU: return "cpu";
    case BACKEND_CUDA: return "cuda";
    }
    return NULL;
}

int backend_kind_parse(const char *s, backend_kind_t *out) {
    if (!s || !out) return -EINVAL;
    if (strcmp(s, "auto") == 0) *out = BACKEND_AUTO;
    else if (strcmp(s, "cpu") == 0) *out = BACKEND_CPU;
    else if (strcmp(s, "cuda") == 0 || strcmp(s, "gpu") == 0) *out = BACKEND_CUDA;
    else return -EINVAL;
    return 0;
}

int backend_gpu_required(void) {
    const char *v = getenv("KFAC_REQUIRE_GPU");
    return v && strcmp(v, "1") == 0;
}

int backend_gpu_probe(char *why, size_t why_len) {
#ifdef KFAC_CUDA
    return backend_cuda_probe(why, why_len);
#else
    if (why && why_len) snprintf(why, why_len, "%s", S_NO_CUDA_BUILD);
    return 0;
#endif
}

static backend_t *s_new_cpu(net_t *net, char *err, size_t err_len) {
    backend_t *b = calloc(1, sizeof *b);
    if (!b) {
        if (err && err_len) snprintf(err, err_len, "out of memory");
        return NULL;
    }
    b->kind = BACKEND_CPU;
    b->net = net;
    snprintf(b->desc, sizeof b->desc, "cpu (OpenBLAS, %d threads)", openblas_get_num_threads());
    return b;
}

backend_t *backend_new(backend_kind_t kind, net_t *net, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (!net || net->n_layers < 1 || net->batch_cap < 1) {
        if (err && err_len) snprintf(err, err_len, "backend_new: no network");
        return NULL;
    }
    if (kind == BACKEND_CPU) return s_new_cpu(net, err, err_len);
    if (kind != BACKEND_AUTO && kind != BACKEND_CUDA) {
        if (err && err_len) snprintf(err, err_len, "backend_new: unknown backend kind %d", (int)kind);
        return NULL;
    }
#ifdef KFAC_CUDA
    char why[512];
    backend_cuda_t *cuda = backend_cuda_new(net, why, sizeof why);
    if (cuda) {
        backend_t *b = calloc(1, sizeof *b);
        if (!b) {
            backend_cuda_free(&cuda);
            if (err && err_len) snprintf(err, err_len, "out of memory");
            return NULL;
        }
        b->kind = BACKEND_CUDA;
        b->net = net;
        b->cuda = cuda;
        return b;
    }
    if (kind == BACKEND_CUDA || backend_gpu_required()) {
        if (err && err_len)
            snprintf(err, err_len, "CUDA backend unavailable%s: %s",
                     kind == BACKEND_CUDA ? "" : " and KFAC_REQUIRE_GPU=1 forbids the CPU", why);
        return NULL;
    }
    log_info("backend: %s: using the CPU", why);
#else
    if (kind == BACKEND_CUDA || backend_gpu_required()) {
        if (err && err_len) snprintf(err, err_len, "CUDA backend unavailable: %s", S_NO_CUDA_BUILD);
        return NULL;
    }
    log_info("backend: %s: using the CPU", S_NO_CUDA_BUILD);
#endif
    return s_new_cpu(net, err, err_len);
}

void backend_free(backend_t **b_p) {
    if (!b_p || !*b_p) return;
#ifdef KFAC_CUDA
    backend_cuda_free(&(*b_p)->cuda);
#endif
    free(*b_p);
    *b_p = NULL;
}

backend_kind_t backend_kind(const backend_t *b) { return b ? b->kind : BACKEND_CPU; }

const char *backend_describe(const backend_t *b) {
    if (!b) return "(no backend)";
#ifdef KFAC_CUDA
    if (b->kind == BACKEND_CUDA) return backend_cuda_describe(b->cuda);
#endif
    return b->desc;
}

int backend_failed(const backend_t *b) {
    if (!b) return -EINVAL;
#ifdef KFAC_CUDA
    if (b->kind == BACKEND_CUDA) return backend_cuda_failed(b->cuda);
#endif
    return 0;
}

int backend_set_params(backend_t *b, const float *params, const float *state) {
    if (!b) return -EINVAL;
    int rc = backend_failed(b);
    if (rc) return rc;
    net_t *net = b->net;
    if (params && params != net->params) memcpy(net->params, params, net->n_params * sizeof(float));
    if (state && state != net->state && net->n_state) memcpy(net->state, state, net->n_state * sizeof(float));
#ifdef KFAC_CUDA
    if (b->kind == BACKEND_CUDA) return backend_cuda_set_params(b->cuda, net->params, net->state);
#endif
    return 0;
}

int backend_forward(backend_t *b, const float *x, int n, int train) {
    if (!b) return -EINVAL;
    int rc = backend_failed(b);
    if (rc) return rc;
    net_t *net = b->net;
    if (!x || n < 1 || n > net->batch_cap) {
        log_error("backend_forward: %d examples (x %s), the network holds 1 to %d", n, x ? "given" : "NULL",
                  net->batch_cap);
        return -EINVAL;
    }
    b->fwd_n = 0;
    b->bwd_done = 0;
#ifdef KFAC_CUDA
    if (b->kind == BACKEND_CUDA) rc = backend_cuda_forward(b->cuda, x, n, train ? 1 : 0);
    else
#endif
        rc = net_forward(net, x, n, train ? 1 : 0);
    if (rc == 0) b->fwd_n = n;
    return rc;
}

int backend_probs(backend_t *b, float *probs) {
    if (!b) return -EINVAL;
    int rc = backend_failed(b);
    if (rc) return rc;
    if (!probs || b->fwd_n < 1) {
        log_error("backend_probs: %s", probs ? "no forward pass yet" : "probs is NULL");
        return -EINVAL;
    }
#ifdef KFAC_CUDA
    if (b->kind == BACKEND_CUDA) return backend_cuda_probs(b->cuda, probs);
#endif
    memcpy(probs, net_probs(b->net), (size_t)b->fwd_n * b->net->n_classes * sizeof(float));
    return 0;
}

int backend_backward(backend_t *b, const int *labels, int grads_to_host, float *loss, int *n_correct) {
    if (!b) return -EINVAL;
    int rc = backend_failed(b);
    if (rc) return rc;
    net_t *net = b->net;
    if (!labels || b->fwd_n < 1) {
        log_error("backend_backward: %s", labels ? "no forward pass yet" : "labels is NULL");
        return -EINVAL;
    }
    for (int i = 0; i < b->fwd_n; i++)
        if (labels[i] < 0 || labels[i] >= net->n_classes) {
            log_error("backend_backward: label %d of example %d is outside [0, %d)", labels[i], i, net->n_classes);
            return -EINVAL;
        }
    b->bwd_done = 0;
#ifdef KFAC_CUDA
    if (b->kind == BACKEND_CUDA) {
        rc = backend_cuda_backward(b->cuda, labels, grads_to_host, loss, n_correct);
        if (rc == 0) b->bwd_done = 1;
        return rc;
    }
#endif
    (void)grads_to_host;
    int hits = 0;
    float l = net_backward(net, labels, NULL, &hits);
    if (loss) *loss = l;
    if (n_correct) *n_correct = hits;
    b->bwd_done = 1;
    return 0;
}

int backend_stats(backend_t *b, kfac_stats_t *s) {
    if (!b) return -EINVAL;
    int rc = backend_failed(b);
    if (rc) return rc;
    if (!s || !b->bwd_done) {
        log_error("backend_stats: %s", s ? "needs backend_forward and backend_backward first" : "s is NULL");
        return -EINVAL;
    }
#ifdef KFAC_CUDA
    if (b->kind == BACKEND_CUDA) return backend_cuda_stats(b->cuda, s);
#endif
    return kfac_stats_compute(s, b->net);
}

int backend_layer_copy(backend_t *b, int layer, float *y, float *dy) {
    if (!b) return -EINVAL;
    int rc = backend_failed(b);
    if (rc) return rc;
    const net_t *net = b->net;
    if (layer < 0 || layer >= net->n_layers || net->layers[layer].kind == LAYER_SOFTMAX_XENT || b->fwd_n < 1 ||
        (dy && !b->bwd_done)) {
        log_error("backend_layer_copy: layer %d has no %s", layer,
                  b->fwd_n < 1 ? "forward pass yet" : (dy && !b->bwd_done) ? "backward pass yet" : "activations");
        return -EINVAL;
    }
#ifdef KFAC_CUDA
    if (b->kind == BACKEND_CUDA) return backend_cuda_layer_copy(b->cuda, layer, y, dy);
#endif
    const layer_t *l = &net->layers[layer];
    const size_t bytes = (size_t)b->fwd_n * l->size * sizeof(float);
    if (y) memcpy(y, l->y, bytes);
    if (dy) memcpy(dy, l->dy, bytes);
    return 0;
}

int backend_reserve_stats(backend_t *b, const kfac_stats_t *s) {
    if (!b || !s) return -EINVAL;
#ifdef KFAC_CUDA
    if (b->kind == BACKEND_CUDA) return backend_cuda_reserve_stats(b->cuda, s);
#endif
    return 0;
}

size_t backend_device_bytes(const backend_t *b) {
#ifdef KFAC_CUDA
    if (b && b->kind == BACKEND_CUDA) return backend_cuda_device_bytes(b->cuda);
#else
    (void)b;
#endif
    return 0;
}

backend_t *backend_new_with_stats(backend_kind_t kind, net_t *net, const kfac_stats_t *s, char *err,
                                  size_t err_len) {
    backend_t *b = backend_new(kind, net, err, err_len);
    if (!b || !s || backend_kind(b) != BACKEND_CUDA) return b;
    if (backend_reserve_stats(b, s) == 0) return b;
    char why[512];
    snprintf(why, sizeof why, "%s", backend_describe(b));
    backend_free(&b);
    if (kind == BACKEND_CUDA || backend_gpu_required()) {
        if (err && err_len)
            snprintf(err, err_len, "the GPU has no room for the K-FAC statistics (%s)%s", why,
                     kind == BACKEND_CUDA ? "" : " and KFAC_REQUIRE_GPU=1 forbids the CPU");
        return NULL;
    }
    log_warn("backend: the GPU has no room for the K-FAC statistics (%s): using the CPU", why);
    return backend_new(BACKEND_CPU, net, err, err_len);
}
