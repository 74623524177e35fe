/* bench/bench_gpu.c — the gradient worker's step on the CPU and on a GPU
 * through common/backend/backend.h: for the MNIST CNN and a CIFAR-sized ResNet, the
 * time of one step (backend_set_params + backend_forward (train) +
 * backend_backward with the gradient copied to the host, what kfac-worker
 * does per batch) and images/s, and the time of the K-FAC factor statistics
 * of that batch (backend_stats). Prints figures; never passes or fails on
 * time. Without a GPU it prints the CPU figures and "GPU: not available
 * (reason)".
 *
 *   bench_gpu [--batch N] [--seconds S] [--stats-detail] [model ...]
 *   bench_gpu --probe
 *
 * --stats-detail: the statistics' time slot by slot on each backend, and on
 * the GPU the same again for each way of computing the factor products
 * (KFAC_CUDA_GRAM=gemm, the default, and syrk; docs/gpu.md) unless
 * KFAC_CUDA_GRAM chooses one.
 * --probe: only say whether the CUDA backend runs here: "GPU: <device,
 * runtime, driver, cuDNN and cuBLAS versions>" (a backend made on a tiny
 * net) and exit 0, or "no GPU: <why>" and exit 1.
 * With KFAC_REQUIRE_GPU=1 a machine where the CUDA backend cannot be made
 * is a failure (exit 1) instead of CPU figures and "GPU: not available".
 *
 * Defaults: batch 128, at least 2 s of steps per measurement (and at least
 * 3 steps), models/mnist-cnn.model and models/resnet8-cifar.model (run from
 * the repository root). Inputs are N(0,1), labels uniform; the figures do
 * not depend on the values. Times are means over the measured steps after
 * one warm-up step (which, on the GPU, also chooses cuDNN's algorithms).
 * OPENBLAS_NUM_THREADS sets the CPU's BLAS threads (default: all cores); the
 * count is printed. Timings need an otherwise idle machine.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/backend/backend.h"
#include "common/base/blas.h"
#include "common/base/clock.h"
#include "common/kfac/kfac_stats.h"
#include "common/base/log.h"
#include "common/nn/nn.h"
#include "common/base/rng.h"

static int g_stats_detail; /* --stats-detail */

typedef struct bench_data {
    float *x;
    int *y;
    int batch;
} bench_data_t;

/* One worker step; exits on failure (a benchmark has nothing to recover). */
static void s_step(backend_t *b, net_t *net, const bench_data_t *d) {
    float loss;
    int hits;
    if (backend_set_params(b, net->params, net->state) || backend_forward(b, d->x, d->batch, 1) ||
        backend_backward(b, d->y, 1, &loss, &hits)) {
        fprintf(stderr, "bench_gpu: a step failed on %s\n", backend_describe(b));
        exit(1);
    }
}

/* Mean seconds per call of the step (and of the statistics after a step). */
static void s_measure(backend_t *b, net_t *net, kfac_stats_t *s, const bench_data_t *d, double seconds,
                      double *t_step, double *t_stats) {
    s_step(b, net, d); /* warm-up */
    int k = 0;
    double t0 = clock_now_s(), t = 0.0;
    while (k < 3 || t < seconds) {
        s_step(b, net, d);
        k++;
        t = clock_now_s() - t0;
    }
    *t_step = t / k;
    *t_stats = -1.0;
    if (!s) return;
    if (backend_stats(b, s)) { /* warm-up: buffers */
        fprintf(stderr, "bench_gpu: statistics failed on %s\n", backend_describe(b));
        exit(1);
    }
    k = 0;
    t = 0.0;
    t0 = clock_now_s();
    while (k < 3 || t < seconds / 2) {
        if (backend_stats(b, s)) {
            fprintf(stderr, "bench_gpu: statistics failed on %s\n", backend_describe(b));
            exit(1);
        }
        k++;
        t = clock_now_s() - t0;
    }
    *t_stats = t / k;
}

/* Mean seconds of backend_stats over at least 3 calls and `seconds`. */
static double s_time_stats(backend_t *b, kfac_stats_t *s, double seconds) {
    int k = 0;
    double t = 0.0, t0 = clock_now_s();
    while (k < 3 || t < seconds) {
        if (backend_stats(b, s)) {
            fprintf(stderr, "bench_gpu: statistics failed on %s\n", backend_describe(b));
            exit(1);
        }
        k++;
        t = clock_now_s() - t0;
    }
    return t / k;
}

/* --stats-detail: the statistics' time slot by slot (every other slot
 * skipped), and with every slot skipped (what is left: the factor arena's
 * copy to the host), after a step on b. */
static void s_stats_detail(backend_t *b, net_t *net, kfac_stats_t *s, const bench_data_t *d, double seconds) {
    s_step(b, net, d);
    for (int j = 0; j < s->n_layers; j++) s->layers[j].skip = 1;
    printf("    statistics, slot by slot (%s):\n      none (arena copy only) %8.3f ms\n", backend_describe(b),
           1e3 * s_time_stats(b, s, seconds));
    for (int j = 0; j < s->n_layers; j++) {
        const kfac_layer_stats_t *ls = &s->layers[j];
        s->layers[j].skip = 0;
        char dims[64];
        int o = 0;
        for (int k = 0; k < ls->n_factors && o < (int)sizeof dims - 8; k++)
            o += snprintf(dims + o, sizeof dims - (size_t)o, "%s%d", k ? "," : "", ls->f[k].dim);
        printf("      %-12s %-8s dims %-14s %8.3f ms\n", net->layers[ls->layer].name, layer_kind_name(ls->kind), dims,
               1e3 * s_time_stats(b, s, seconds));
        s->layers[j].skip = 1;
    }
    for (int j = 0; j < s->n_layers; j++) s->layers[j].skip = 0;
}

static void s_report(const char *who, int batch, double t_step, double t_stats) {
    printf("  %s\n    step %9.2f ms  %9.0f images/s    statistics %9.2f ms\n", who, 1e3 * t_step, batch / t_step,
           1e3 * t_stats);
}

static int s_bench_model(const char *path, int batch, double seconds, int gpu) {
    char err[512];
    net_t *net = net_load(path, batch, err, sizeof err);
    if (!net) {
        printf("model %s: not loaded: %s\n", path, err);
        return 1;
    }
    net_init_params(net, 42);
    kfac_stats_t *s = kfac_stats_new(net);
    bench_data_t d = {malloc((size_t)batch * net->in_size * sizeof(float)), malloc((size_t)batch * sizeof(int)),
                      batch};
    if (!d.x || !d.y || !s) {
        fprintf(stderr, "bench_gpu: out of memory\n");
        exit(1);
    }
    rng_t r;
    rng_seed(&r, 7);
    for (size_t i = 0; i < (size_t)batch * net->in_size; i++) d.x[i] = (float)rng_normal(&r);
    for (int i = 0; i < batch; i++) d.y[i] = (int)rng_below(&r, (uint32_t)net->n_classes);
    printf("model %s: %zu parameters, %d preconditioned layers, %zu factor floats, batch %d\n", path, net->n_params,
           s->n_layers, s->n_floats, batch);

    double ts, tf;
    backend_t *b = backend_new(BACKEND_CPU, net, err, sizeof err);
    if (!b) {
        fprintf(stderr, "bench_gpu: %s\n", err);
        exit(1);
    }
    s_measure(b, net, s, &d, seconds, &ts, &tf);
    s_report(backend_describe(b), batch, ts, tf);
    if (g_stats_detail) s_stats_detail(b, net, s, &d, seconds / 10);
    backend_free(&b);

    if (gpu) {
        b = backend_new(BACKEND_CUDA, net, err, sizeof err);
        if (!b) {
            printf("  GPU: not available (%s)\n", err);
            const char *req = getenv("KFAC_REQUIRE_GPU");
            if (req && strcmp(req, "1") == 0) return 1;
        } else {
            s_measure(b, net, s, &d, seconds, &ts, &tf);
            s_report(backend_describe(b), batch, ts, tf);
            if (g_stats_detail) s_stats_detail(b, net, s, &d, seconds / 10);
            backend_free(&b);
            /* The factor products the other ways (KFAC_CUDA_GRAM), unless the caller chose one. */
            static const char *const grams[] = {"gemm", "syrk"};
            const char *chosen = getenv("KFAC_CUDA_GRAM");
            for (int g = 0; g < 2 && g_stats_detail && !chosen; g++) {
                if (g == 0) continue; /* gemm: the default, measured above */
                setenv("KFAC_CUDA_GRAM", grams[g], 1);
                b = backend_new(BACKEND_CUDA, net, err, sizeof err);
                unsetenv("KFAC_CUDA_GRAM");
                if (!b) {
                    printf("  KFAC_CUDA_GRAM=%s: %s\n", grams[g], err);
                    continue;
                }
                s_measure(b, net, s, &d, seconds, &ts, &tf);
                s_report(backend_describe(b), batch, ts, tf);
                s_stats_detail(b, net, s, &d, seconds / 10);
                backend_free(&b);
            }
        }
    }
    free(d.x);
    free(d.y);
    kfac_stats_free(&s);
    net_free(&net);
    return 0;
}

/* --probe: the CUDA backend on a tiny net, or why not. */
static int s_probe(void) {
    char why[512];
    net_t *net = net_parse("input 1x4x4\nconv name=c out=2 k=3 pad=1\nrelu\nflatten\nfc name=f out=3\nsoftmax_xent\n",
                           "probe", 2, why, sizeof why);
    backend_t *b = net ? backend_new(BACKEND_CUDA, net, why, sizeof why) : NULL;
    if (b) printf("GPU: %s\n", backend_describe(b));
    else printf("no GPU: %s\n", why);
    int ok = b != NULL;
    backend_free(&b);
    net_free(&net);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    blas_restart_if_generic(argv); /* the OpenBLAS kernels the daemons use */
    if (argc == 2 && strcmp(argv[1], "--probe") == 0) {
        log_init(LOG_LEVEL_WARN, "bench_gpu");
        return s_probe();
    }
    int batch = 128;
    double seconds = 2.0;
    const char *models[16];
    int n_models = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            batch = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (strcmp(argv[i], "--stats-detail") == 0) {
            g_stats_detail = 1;
        } else if (argv[i][0] != '-' && n_models < 16) {
            models[n_models++] = argv[i];
        } else {
            fprintf(stderr, "usage: bench_gpu [--batch N] [--seconds S] [--stats-detail] [model ...] | bench_gpu --probe\n");
            return 2;
        }
    }
    if (batch < 1 || !(seconds > 0.0)) {
        fprintf(stderr, "bench_gpu: --batch must be >= 1 and --seconds > 0\n");
        return 2;
    }
    if (n_models == 0) {
        models[n_models++] = "models/mnist-cnn.model";
        models[n_models++] = "models/resnet8-cifar.model";
    }
    log_init(LOG_LEVEL_WARN, "bench_gpu");
    if (!getenv("OPENBLAS_NUM_THREADS")) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        blas_set_threads(cores > 0 ? (int)cores : 1);
    }
    printf("== bench_gpu: worker step = set_params + forward (train) + backward (gradient to the host); "
           "statistics = all K-FAC factors of the batch\n");
    printf("CPU: OpenBLAS with %d threads\n", openblas_get_num_threads());
    char why[512];
    int gpu = backend_gpu_probe(why, sizeof why);
    const char *req = getenv("KFAC_REQUIRE_GPU");
    const int required = req && strcmp(req, "1") == 0;
    if (!gpu && required) {
        fprintf(stderr, "bench_gpu: KFAC_REQUIRE_GPU=1 and the GPU is not available: %s\n", why);
        return 1;
    }
    if (!gpu) printf("GPU: not available (%s)\n", why);
    int rc = 0;
    for (int m = 0; m < n_models; m++) rc |= s_bench_model(models[m], batch, seconds, gpu);
    return rc;
}
