/* bench/bench_nn.c — throughput of the CPU network core (common/nn/nn.c):
 * forward+backward images/s of a CNN, and each convolution layer's achieved
 * GFLOP/s next to raw sgemm on the same shapes. Prints figures; never passes
 * or fails on time.
 *
 *   build/bench/bench_nn [--whole|--engines] [MODEL]
 *       (default models/mnist-cnn.model; --whole: part 1 only; --engines:
 *       part 3 only)
 *
 * Part 1: net_forward (train mode) + net_backward on random inputs and
 * labels, batch 64 and 128, in three thread settings: OpenBLAS 1 thread and
 * the net 1 (blas 1, net 1); OpenBLAS 2 threads (blas 2, net 1); the net's
 * own 2 threads over the batch with single-threaded OpenBLAS (blas 1,
 * net 2; net_set_threads); each with the conv layers on each engine
 * (net_set_conv_engine: "blas", im2col + OpenBLAS; "onednn", oneDNN, one
 * thread per net thread whatever OpenBLAS has; "auto", per layer shape).
 * The settings alternate iteration by iteration so all see the same machine
 * load. Figures: best and median images/s over the iterations (at least 5,
 * or about 1 s per setting).
 *
 * Part 2: every conv layer of the model, alone: a network
 *     input CxHxW, [relu], conv (same options), avgpool global, softmax_xent
 * (the relu only when the layer's input is not the network input, so that
 * the backward pass computes the input gradient as in the full model), and a
 * "head" network of the last two layers alone. Layer time = layer network
 * minus head network (the head is O*P*n additions, printed so its size is
 * visible). Useful work in flops (rows = n*P, P = output positions,
 * K = in_c*k*k, O = output channels):
 *     forward    2 * O * K * rows      (the im2col sgemm; im2col, the
 *                                       NCHW transpose and the bias are
 *                                       overhead, counted in the time only)
 *     backward   2 * O * K * rows      (weight gradient)
 *              + 2 * rows * K * O      (input gradient, when computed)
 * Raw sgemm runs the same (M, N, K) shapes with the same transposes and
 * leading dimensions as common/nn/nn.c (forward rows x O x K, NoTrans/Trans;
 * weight gradient O x K x rows, Trans/NoTrans; input gradient rows x K x O,
 * NoTrans/NoTrans). Layer, head and sgemm are timed alternately, best of
 * the repetitions; the ratio layer/sgemm is the efficiency figure.
 *
 * Part 3: every conv layer of the model on both engines, the same layer
 * networks as part 2 built twice (OpenBLAS, oneDNN), on 1 and 2 net
 * threads (net_set_threads, OpenBLAS single-threaded), timed alternately:
 * layer forward and backward ms (minus the head) of each, and the ratio
 * OpenBLAS / oneDNN (> 1: oneDNN is faster). These per-shape figures are
 * where nn_conv_engine_pick's rule comes from (bench/RESULTS.md).
 *
 * The machine (model name and logical CPUs from /proc/cpuinfo), the load
 * average before and after, and OpenBLAS's core type and build are printed
 * first: on a CPU the installed OpenBLAS does not recognise it falls back to
 * a slow generic kernel (OPENBLAS_CORETYPE overrides the choice).
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "common/base/clock.h"
#include "common/base/blas.h"
#include "common/nn/nn.h"
#include "common/nn/nn_dnnl.h"
#include "common/base/rng.h"

#define BN_MIN_REPS 5
#define BN_MAX_REPS 400
#define BN_MIN_SECONDS 1.0

static void *s_alloc(size_t n_bytes) {
    void *p = malloc(n_bytes ? n_bytes : 1);
    if (!p) {
        fprintf(stderr, "bench_nn: out of memory (%zu bytes)\n", n_bytes);
        exit(1);
    }
    return p;
}

static int s_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Random inputs (n, in_size) ~ N(0, 1) and labels in [0, n_classes). */
static void s_fill_batch(rng_t *r, const net_t *net, int n, float *x, int *y) {
    for (size_t i = 0; i < (size_t)n * net->in_size; i++) x[i] = (float)rng_normal(r);
    for (int i = 0; i < n; i++) y[i] = (int)rng_below(r, (uint32_t)net->n_classes);
}

static net_t *s_parse(const char *text, int batch) {
    char err[512];
    net_t *net = net_parse(text, "bench_nn", batch, err, sizeof err);
    if (!net) {
        fprintf(stderr, "bench_nn: cannot build a benchmark network: %s\n%s", err, text);
        exit(1);
    }
    net_init_params(net, 1);
    return net;
}

/* ---- part 1: whole network ------------------------------------------------ */

/* Thread settings of part 1: OpenBLAS threads and the net's own threads. */
typedef struct {
    int blas, net;
    nn_conv_engine_t engine;
} s_threads_t;

static const s_threads_t s_settings[] = {
    {1, 1, NN_CONV_ENGINE_BLAS}, {1, 1, NN_CONV_ENGINE_ONEDNN}, {1, 1, NN_CONV_ENGINE_AUTO},
    {2, 1, NN_CONV_ENGINE_BLAS}, {2, 1, NN_CONV_ENGINE_ONEDNN}, {2, 1, NN_CONV_ENGINE_AUTO},
    {1, 2, NN_CONV_ENGINE_BLAS}, {1, 2, NN_CONV_ENGINE_ONEDNN}, {1, 2, NN_CONV_ENGINE_AUTO}};
#define BN_N_SETTINGS ((int)(sizeof s_settings / sizeof s_settings[0]))

/* Conv engine switches cost primitive creation: the two engines are two
 * nets with the same parameters, and the setting picks one. */
static net_t *s_apply(net_t *nets[NN_CONV_ENGINE_COUNT], s_threads_t t) {
    net_t *net = nets[t.engine];
    openblas_set_num_threads(t.blas);
    if (net_set_threads(net, t.net) < 0) {
        fprintf(stderr, "bench_nn: cannot start %d threads\n", t.net);
        exit(1);
    }
    return net;
}

static void s_set_engine(net_t *net, nn_conv_engine_t engine) {
    char err[256];
    if (net_set_conv_engine(net, engine, err, sizeof err) < 0) {
        fprintf(stderr, "bench_nn: %s\n", err);
        exit(1);
    }
}

static void s_part1(const char *model_path) {
    const int batches[2] = {64, 128};
    char err[512];
    printf("\n== forward+backward of %s, images/s (best and median over the iterations)\n", model_path);
    printf("%6s %6s %6s %12s %12s %10s %6s %s\n", "batch", "blas", "net", "best img/s", "median img/s", "best ms", "iters",
           "conv");
    for (int bi = 0; bi < 2; bi++) {
        int n = batches[bi];
        net_t *nets[NN_CONV_ENGINE_COUNT];
        for (int e = 0; e < NN_CONV_ENGINE_COUNT; e++) {
            if (!(nets[e] = net_load(model_path, n, err, sizeof err))) {
                fprintf(stderr, "bench_nn: %s\n", err);
                exit(1);
            }
            net_init_params(nets[e], 1);
            s_set_engine(nets[e], (nn_conv_engine_t)e);
        }
        net_t *net = nets[0];
        rng_t r;
        rng_seed(&r, 42);
        float *x = s_alloc((size_t)n * net->in_size * sizeof(float));
        int *y = s_alloc((size_t)n * sizeof(int));
        s_fill_batch(&r, net, n, x, y);
        double *t[BN_N_SETTINGS];
        for (int k = 0; k < BN_N_SETTINGS; k++) t[k] = s_alloc(BN_MAX_REPS * sizeof(double));
        for (int k = 0; k < BN_N_SETTINGS; k++) { /* warm-up: buffers, threads, primitives */
            net = s_apply(nets, s_settings[k]);
            net_forward(net, x, n, 1);
            net_backward(net, y, NULL, NULL);
        }
        int reps = 0;
        double start = clock_now_s();
        while (reps < BN_MAX_REPS && (reps < BN_MIN_REPS || clock_now_s() - start < 3 * BN_MIN_SECONDS)) {
            for (int k = 0; k < BN_N_SETTINGS; k++) {
                net = s_apply(nets, s_settings[k]);
                double t0 = clock_now_s();
                net_forward(net, x, n, 1);
                net_backward(net, y, NULL, NULL);
                t[k][reps] = clock_now_s() - t0;
            }
            reps++;
        }
        for (int k = 0; k < BN_N_SETTINGS; k++) {
            qsort(t[k], (size_t)reps, sizeof(double), s_cmp_double);
            printf("%6d %6d %6d %12.0f %12.0f %10.2f %6d %s\n", n, s_settings[k].blas, s_settings[k].net, n / t[k][0],
                   n / t[k][reps / 2], 1e3 * t[k][0], reps, nn_conv_engine_name(s_settings[k].engine));
            free(t[k]);
        }
        free(x);
        free(y);
        for (int e = 0; e < NN_CONV_ENGINE_COUNT; e++) net_free(&nets[e]);
    }
    openblas_set_num_threads(1);
}

/* ---- part 2: each conv layer alone vs sgemm --------------------------------- */

typedef struct {
    net_t *layer, *head;           /* the layer network and its head alone */
    float *xl, *xh;                /* inputs of each */
    int *yl, *yh;                  /* labels of each */
    int n, rows, O, K, has_dx;
    float *A, *B, *C, *D, *E;      /* sgemm operands: cols (rows, K), W (O, K), tmp (rows, O),
                                      dW (O, K), dcols (rows, K) */
} conv_job_t;

typedef struct {
    double fwd, bwd;               /* best seconds */
} fb_t;

static void s_fb(net_t *net, const float *x, const int *y, int n, fb_t *best) {
    double t0 = clock_now_s();
    net_forward(net, x, n, 1);
    double t1 = clock_now_s();
    net_backward(net, y, NULL, NULL);
    double t2 = clock_now_s();
    if (t1 - t0 < best->fwd) best->fwd = t1 - t0;
    if (t2 - t1 < best->bwd) best->bwd = t2 - t1;
}

/* The three sgemm calls of the layer, timed as forward and backward. */
static void s_gemm(conv_job_t *j, fb_t *best) {
    const int rows = j->rows, O = j->O, K = j->K;
    double t0 = clock_now_s();
    /* Forward: C (rows, O) = A (rows, K) * B^T, B (O, K) row-major. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, O, K, 1.0f, j->A, K, j->B, K, 0.0f, j->C, O);
    double t1 = clock_now_s();
    /* Weight gradient: D (O, K) = C^T (O, rows) * A (rows, K); C (rows, O). */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, K, rows, 1.0f, j->C, O, j->A, K, 0.0f, j->D, K);
    /* Input gradient: E (rows, K) = C (rows, O) * B (O, K). */
    if (j->has_dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, K, O, 1.0f, j->C, O, j->B, K, 0.0f, j->E, K);
    double t2 = clock_now_s();
    if (t1 - t0 < best->fwd) best->fwd = t1 - t0;
    if (t2 - t1 < best->bwd) best->bwd = t2 - t1;
}

static void s_conv_layer(const layer_t *l, int n, int threads) {
    char text[1024];
    rng_t r;
    rng_seed(&r, 7);
    conv_job_t j = {0};
    j.n = n;
    j.O = l->out;
    j.K = l->in_c * l->k * l->k;
    j.rows = n * l->h * l->w;
    j.has_dx = l->in >= 0;
    snprintf(text, sizeof text,
             "input %dx%dx%d\n%sconv name=c out=%d k=%d stride=%d pad=%d\navgpool global\nsoftmax_xent\n", l->in_c,
             l->in_h, l->in_w, j.has_dx ? "relu\n" : "", l->out, l->k, l->stride, l->pad);
    j.layer = s_parse(text, n);
    snprintf(text, sizeof text, "input %dx%dx%d\navgpool global\nsoftmax_xent\n", l->c, l->h, l->w);
    j.head = s_parse(text, n);
    j.xl = s_alloc((size_t)n * j.layer->in_size * sizeof(float));
    j.yl = s_alloc((size_t)n * sizeof(int));
    j.xh = s_alloc((size_t)n * j.head->in_size * sizeof(float));
    j.yh = s_alloc((size_t)n * sizeof(int));
    s_fill_batch(&r, j.layer, n, j.xl, j.yl);
    s_fill_batch(&r, j.head, n, j.xh, j.yh);
    size_t n_cols = (size_t)j.rows * j.K, n_w = (size_t)j.O * j.K, n_tmp = (size_t)j.rows * j.O;
    j.A = s_alloc(n_cols * sizeof(float));
    j.B = s_alloc(n_w * sizeof(float));
    j.C = s_alloc(n_tmp * sizeof(float));
    j.D = s_alloc(n_w * sizeof(float));
    j.E = s_alloc(n_cols * sizeof(float));
    for (size_t i = 0; i < n_cols; i++) j.A[i] = (float)rng_normal(&r);
    for (size_t i = 0; i < n_w; i++) j.B[i] = (float)rng_normal(&r);
    memset(j.C, 0, n_tmp * sizeof(float));

    openblas_set_num_threads(threads);
    fb_t bl = {1e30, 1e30}, bh = {1e30, 1e30}, bg = {1e30, 1e30}, warm = {1e30, 1e30};
    s_fb(j.layer, j.xl, j.yl, n, &warm); /* warm-up */
    s_fb(j.head, j.xh, j.yh, n, &warm);
    s_gemm(&j, &warm);
    double start = clock_now_s();
    for (int rep = 0; rep < BN_MAX_REPS; rep++) {
        s_fb(j.layer, j.xl, j.yl, n, &bl);
        s_fb(j.head, j.xh, j.yh, n, &bh);
        s_gemm(&j, &bg);
        if (rep + 1 >= BN_MIN_REPS && clock_now_s() - start > BN_MIN_SECONDS) break;
    }
    double lf = bl.fwd - bh.fwd, lb = bl.bwd - bh.bwd;
    if (lf <= 0) lf = bl.fwd; /* head below timer noise: keep the whole figure */
    if (lb <= 0) lb = bl.bwd;
    double ffl = 2.0 * j.O * j.K * (double)j.rows;
    double bfl = ffl * (j.has_dx ? 2.0 : 1.0);
    char shape[48];
    snprintf(shape, sizeof shape, "%dx%dx%d", j.rows, j.O, j.K);
    printf("%-8s %5d %3d  %-16s %8.3f %8.3f %7.2f %7.2f %5.0f%%   %8.3f %8.3f %7.2f %7.2f %5.0f%%\n",
           l->name, n, threads, shape, 1e3 * lf, 1e3 * bh.fwd, ffl / lf * 1e-9, ffl / bg.fwd * 1e-9,
           100.0 * bg.fwd / lf, 1e3 * lb, 1e3 * bh.bwd, bfl / lb * 1e-9, bfl / bg.bwd * 1e-9, 100.0 * bg.bwd / lb);
    fflush(stdout);
    net_free(&j.layer);
    net_free(&j.head);
    free(j.xl); free(j.yl); free(j.xh); free(j.yh);
    free(j.A); free(j.B); free(j.C); free(j.D); free(j.E);
}

static void s_part2(const char *model_path) {
    char err[512];
    net_t *net = net_load(model_path, 1, err, sizeof err);
    if (!net) {
        fprintf(stderr, "bench_nn: %s\n", err);
        exit(1);
    }
    printf("\n== conv layers alone vs raw sgemm on the same shapes (best times; GF/s = GFLOP/s of the sgemm work)\n");
    printf("forward: rows x O x K sgemm; backward: weight gradient, plus input gradient when the input needs one\n");
    printf("%-8s %5s %3s  %-16s %8s %8s %7s %7s %6s   %8s %8s %7s %7s %6s\n", "layer", "batch", "thr", "rows x O x K",
           "fwd ms", "head ms", "GF/s", "sgemm", "eff", "bwd ms", "head ms", "GF/s", "sgemm", "eff");
    const int batches[2] = {64, 128}, threads[2] = {1, 2};
    for (int li = 0; li < net->n_layers; li++) {
        const layer_t *l = &net->layers[li];
        if (l->kind != LAYER_CONV) continue;
        for (int bi = 0; bi < 2; bi++)
            for (int ti = 0; ti < 2; ti++) s_conv_layer(l, batches[bi], threads[ti]);
    }
    net_free(&net);
}

/* ---- part 3: each conv layer on both engines ------------------------------- */

static void s_conv_engines(const layer_t *l, int n, int threads) {
    char text[1024];
    rng_t r;
    rng_seed(&r, 7);
    const int has_dx = l->in >= 0;
    snprintf(text, sizeof text,
             "input %dx%dx%d\n%sconv name=c out=%d k=%d stride=%d pad=%d\navgpool global\nsoftmax_xent\n", l->in_c,
             l->in_h, l->in_w, has_dx ? "relu\n" : "", l->out, l->k, l->stride, l->pad);
    net_t *nets[2] = {s_parse(text, n), s_parse(text, n)};
    snprintf(text, sizeof text, "input %dx%dx%d\navgpool global\nsoftmax_xent\n", l->c, l->h, l->w);
    net_t *head = s_parse(text, n);
    s_set_engine(nets[1], NN_CONV_ENGINE_ONEDNN);
    float *xl = s_alloc((size_t)n * nets[0]->in_size * sizeof(float)), *xh = s_alloc((size_t)n * head->in_size * sizeof(float));
    int *yl = s_alloc((size_t)n * sizeof(int)), *yh = s_alloc((size_t)n * sizeof(int));
    s_fill_batch(&r, nets[0], n, xl, yl);
    s_fill_batch(&r, head, n, xh, yh);
    openblas_set_num_threads(1);
    for (int e = 0; e < 2; e++)
        if (net_set_threads(nets[e], threads) < 0) {
            fprintf(stderr, "bench_nn: cannot start %d threads\n", threads);
            exit(1);
        }
    if (net_set_threads(head, threads) < 0) exit(1);
    fb_t b[2] = {{1e30, 1e30}, {1e30, 1e30}}, bh = {1e30, 1e30}, warm = {1e30, 1e30};
    for (int e = 0; e < 2; e++) s_fb(nets[e], xl, yl, n, &warm);
    s_fb(head, xh, yh, n, &warm);
    double start = clock_now_s();
    for (int rep = 0; rep < BN_MAX_REPS; rep++) {
        for (int e = 0; e < 2; e++) s_fb(nets[e], xl, yl, n, &b[e]);
        s_fb(head, xh, yh, n, &bh);
        if (rep + 1 >= BN_MIN_REPS && clock_now_s() - start > BN_MIN_SECONDS) break;
    }
    double f[2], g[2];
    for (int e = 0; e < 2; e++) {
        f[e] = b[e].fwd - bh.fwd > 0 ? b[e].fwd - bh.fwd : b[e].fwd;
        g[e] = b[e].bwd - bh.bwd > 0 ? b[e].bwd - bh.bwd : b[e].bwd;
    }
    char shape[64];
    snprintf(shape, sizeof shape, "%dx%dx%d>%d k%d s%d p%d", l->in_c, l->in_h, l->in_w, l->out, l->k, l->stride, l->pad);
    printf("%-8s %-24s %5d %3d  %8.3f %8.3f %6.2f   %8.3f %8.3f %6.2f   %6.2f  %s\n", l->name, shape, n, threads,
           1e3 * f[0], 1e3 * f[1], f[0] / f[1], 1e3 * g[0], 1e3 * g[1], g[0] / g[1], (f[0] + g[0]) / (f[1] + g[1]),
           nn_dnnl_conv_impl(nets[1]->layers[has_dx ? 1 : 0].dnnl));
    net_free(&nets[0]);
    net_free(&nets[1]);
    net_free(&head);
    free(xl); free(yl); free(xh); free(yh);
}

static void s_part3(const char *model_path) {
    char err[512];
    net_t *net = net_load(model_path, 1, err, sizeof err);
    if (!net) {
        fprintf(stderr, "bench_nn: %s\n", err);
        exit(1);
    }
    printf("\n== conv layers alone on both engines (best ms, head subtracted; x = OpenBLAS / oneDNN, > 1: oneDNN faster)\n");
    printf("%-8s %-24s %5s %3s  %8s %8s %6s   %8s %8s %6s   %6s  %s\n", "layer", "shape", "batch", "thr", "fwd blas",
           "fwd dnnl", "x", "bwd blas", "bwd dnnl", "x", "f+b x", "oneDNN kernels");
    const int batches[2] = {64, 128}, threads[2] = {1, 2};
    for (int li = 0; li < net->n_layers; li++) {
        const layer_t *l = &net->layers[li];
        if (l->kind != LAYER_CONV) continue;
        for (int bi = 0; bi < 2; bi++)
            for (int ti = 0; ti < 2; ti++) s_conv_engines(l, batches[bi], threads[ti]);
    }
    net_free(&net);
}

int main(int argc, char **argv) {
    blas_restart_if_generic(argv); /* OpenBLAS's fast kernels, as every kfac program uses */
    int whole_only = argc > 1 && strcmp(argv[1], "--whole") == 0;
    int engines_only = argc > 1 && strcmp(argv[1], "--engines") == 0;
    if (whole_only || engines_only) {
        argv++;
        argc--;
    }
    const char *model = argc > 1 ? argv[1] : "models/mnist-cnn.model";
    setvbuf(stdout, NULL, _IOLBF, 0); /* figures appear as they are measured, even through a pipe */
    if (argc > 2 || (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))) {
        printf("usage: bench_nn [--whole|--engines] [MODEL]   (default models/mnist-cnn.model; run from the repository\n"
               "       root; --whole: part 1 only, the whole network; --engines: part 3 only, each conv layer on both\n"
               "       engines)\n");
        return argc > 2 ? 2 : 0;
    }
    bench_print_machine();
    bench_print_load("", "before");
    if (engines_only) s_part3(model);
    else s_part1(model);
    if (!whole_only && !engines_only) {
        s_part3(model);
        s_part2(model);
    }
    bench_print_load("", "after");
    return 0;
}
