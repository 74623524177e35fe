/* common/backend/backend.c — the backend interface (backend.h): argument checks and
 * call-order bookkeeping shared by both backends, dispatch, and the CPU
 * backend, which is nn.c and kfac_stats.c on the borrowed net, unchanged.
 * The CUDA backend lives in backend_cuda.c and its kernels, built only when
 * the build defines KFAC_CUDA, and then as a plugin (libkfac-cuda.so,
 * backend_cuda_api.h) that this file loads the first time a GPU is probed
 * or asked for. Without KFAC_CUDA, asking for CUDA fails with "built
 * without CUDA"; without the plugin or its libraries, with the loader's
 * reason. AUTO then means the CPU.
 */
#include "common/backend/backend.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#ifdef KFAC_CUDA
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <unistd.h>

#include "common/backend/backend_cuda_api.h"
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

#ifdef KFAC_CUDA
/* The plugin, loaded once per process (backend_cuda_api.h). s_cuda stays
 * NULL when it could not be loaded, with the reason in s_cuda_why. */
static const backend_cuda_api_t *s_cuda;
static char s_cuda_why[1024];
static pthread_once_t s_cuda_once = PTHREAD_ONCE_INIT;

/* 1 and the table in s_cuda when PATH is a plugin of this build; 0 with the
 * reason in s_cuda_why otherwise. */
static int s_cuda_open_path(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(s_cuda_why, sizeof s_cuda_why, "the CUDA backend %s could not be loaded: %s", path,
                 e ? e : "(no reason given)");
        return 0;
    }
    const backend_cuda_api_t *(*entry)(void) = NULL;
    *(void **)&entry = dlsym(h, BACKEND_CUDA_API_SYMBOL);
    const backend_cuda_api_t *api = entry ? entry() : NULL;
    if (!api || api->version != BACKEND_CUDA_API_VERSION || api->net_size != sizeof(net_t) ||
        api->layer_size != sizeof(layer_t) || api->stats_size != sizeof(kfac_stats_t)) {
        snprintf(s_cuda_why, sizeof s_cuda_why,
                 "%s is not the CUDA backend of this build (%s; rebuild both with the same sources, or set "
                 "KFAC_CUDA_LIB to the right one)",
                 path, !api ? "no " BACKEND_CUDA_API_SYMBOL : "its version or structure sizes differ");
        dlclose(h);
        return 0;
    }
    s_cuda = api; /* the handle stays open for the life of the process */
    return 1;
}

/* 1 when the NVIDIA driver's library (libcuda.so.1, which the CUDA runtime
 * needs for any device) can be loaded; else 0 with "no GPU (...)" in
 * s_cuda_why, naming the plugin that was therefore not loaded. Without a
 * driver there is no GPU to find, and loading the plugin would map cuDNN
 * and cuBLAS for nothing. */
static int s_cuda_driver(const char *plugin) {
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (drv) return 1; /* kept open: the CUDA runtime loads it again */
    const char *e = dlerror();
    snprintf(s_cuda_why, sizeof s_cuda_why, "no GPU (no NVIDIA driver: %.400s; the CUDA backend %.400s was not loaded)",
             e ? e : "libcuda.so.1 cannot be loaded", plugin);
    return 0;
}

static void s_cuda_open(void) {
    const char *env = getenv("KFAC_CUDA_LIB");
    if (env && *env) { /* named: loaded even without a driver (its probe then says why) */
        if (access(env, R_OK) != 0)
            snprintf(s_cuda_why, sizeof s_cuda_why, "KFAC_CUDA_LIB=%s: %s", env, strerror(errno));
        else
            s_cuda_open_path(env);
        return;
    }
    char dir[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0) {
        snprintf(s_cuda_why, sizeof s_cuda_why,
                 "the CUDA backend " BACKEND_CUDA_LIB_NAME " was not looked for: /proc/self/exe: %s (set "
                 "KFAC_CUDA_LIB to its path)",
                 n < 0 ? strerror(errno) : "empty");
        return;
    }
    dir[n] = 0;
    char looked[512] = "";
    size_t used = 0;
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(dir, '/');
        if (!slash) break;
        *slash = 0; /* the program's folder, then the ones above it */
        static const char *const rel[] = {"/" BACKEND_CUDA_LIB_NAME, "/lib/kfac/" BACKEND_CUDA_LIB_NAME};
        for (int r = 0; r < 2; r++) {
            char path[PATH_MAX + 64];
            snprintf(path, sizeof path, "%s%s", dir[0] ? dir : "", rel[r]);
            if (access(path, F_OK) == 0) {
                if (s_cuda_driver(path)) s_cuda_open_path(path);
                return;
            }
            if (used < sizeof looked)
                used += (size_t)snprintf(looked + used, sizeof looked - used, "%s%s", used ? ", " : "", path);
        }
    }
    snprintf(s_cuda_why, sizeof s_cuda_why,
             "the CUDA backend " BACKEND_CUDA_LIB_NAME " is in none of %s (make builds it beside the programs and "
             "make install puts it in $PREFIX/lib/kfac; or set KFAC_CUDA_LIB to its path)",
             looked);
}

/* The plugin's table, or NULL with the reason in why. */
static const backend_cuda_api_t *s_cuda_api(char *why, size_t why_len) {
    pthread_once(&s_cuda_once, s_cuda_open);
    if (!s_cuda && why && why_len) snprintf(why, why_len, "%s", s_cuda_why);
    return s_cuda;
}
#endif

int backend_gpu_probe(char *why, size_t why_len) {
#ifdef KFAC_CUDA
    const backend_cuda_api_t *api = s_cuda_api(why, why_len);
    return api ? api->probe(why, why_len) : 0;
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
    char why[1024];
    const backend_cuda_api_t *api = s_cuda_api(why, sizeof why);
    backend_cuda_t *cuda = api ? api->create(net, why, sizeof why) : NULL;
    if (cuda) {
        backend_t *b = calloc(1, sizeof *b);
        if (!b) {
            api->destroy(&cuda);
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
    if ((*b_p)->cuda) s_cuda->destroy(&(*b_p)->cuda);
#endif
    free(*b_p);
    *b_p = NULL;
}

backend_kind_t backend_kind(const backend_t *b) { return b ? b->kind : BACKEND_CPU; }

const char *backend_describe(const backend_t *b) {
    if (!b) return "(no backend)";
#ifdef KFAC_CUDA
    if (b->kind == BACKEND_CUDA) return s_cuda->describe(b->cuda);
#endif
    return b->desc;
}

int backend_failed(const backend_t *b) {
    if (!b) return -EINVAL;
#ifdef KFAC_CUDA
    if (b->kind == BACKEND_CUDA) return s_cuda->failed(b->cuda);
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
    if (b->kind == BACKEND_CUDA) return s_cuda->set_params(b->cuda, net->params, net->state);
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
    if (b->kind == BACKEND_CUDA) rc = s_cuda->forward(b->cuda, x, n, train ? 1 : 0);
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
    if (b->kind == BACKEND_CUDA) return s_cuda->probs(b->cuda, probs);
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
        rc = s_cuda->backward(b->cuda, labels, grads_to_host, loss, n_correct);
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
    if (b->kind == BACKEND_CUDA) return s_cuda->stats(b->cuda, s);
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
    if (b->kind == BACKEND_CUDA) return s_cuda->layer_copy(b->cuda, layer, y, dy);
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
    if (b->kind == BACKEND_CUDA) return s_cuda->reserve_stats(b->cuda, s);
#endif
    return 0;
}

size_t backend_device_bytes(const backend_t *b) {
#ifdef KFAC_CUDA
    if (b && b->kind == BACKEND_CUDA) return s_cuda->device_bytes(b->cuda);
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
