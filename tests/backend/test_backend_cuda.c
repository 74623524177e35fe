/* tests/backend/test_backend_cuda.c — the CUDA backend (common/backend/) against
 * the CPU backend, its checked twin (STYLE rule 9). Without a usable GPU, or
 * in a build without CUDA (make CUDA=0), the binary runs no test and exits 77
 * "skipped: <why>" (suite_skip_reason below, tests/lib/check_main.h); with
 * one, every comparison runs and any mismatch fails.
 *
 * Every layer kind is tested in its own tiny model `input -> dropout p=0
 * (identity, named x0) -> OP -> softmax_xent`, so the op reads exactly the
 * same input on both backends and x0's dy is exactly the op's input
 * gradient; then a residual block and the MNIST CNN for two training steps.
 * Compared: every layer's y and dy, probs, loss, hits, every parameter view
 * of the gradient, the running statistics, every factor of the statistics.
 * Fresh random parameters and inputs (seed printed on failure;
 * KFAC_TEST_SEED=<n> replays).
 *
 * Error measure, per tensor: ||gpu - cpu||_2 / max(||cpu||_2, 1e-7
 * sqrt(len)) — normwise relative, with an absolute floor so that a tensor
 * that is zero up to rounding (|values| ~ 1e-7) is not judged by its noise.
 * Tolerances per op (fp32, u = 6e-8), stated where each test sets them;
 * none can hide an indexing or layout bug, which gives errors of order 1.
 *
 * Check forks every test: the GPU probe runs in a child of main() and CUDA
 * is otherwise touched only inside the tests.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "common/base/rng.h"
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#include "tests/lib/check_main.h"
#include "tests/lib/seed.h"
#include "tests/lib/testnet.h"

#define TB_BATCH 8

/* Skip the whole binary unless the CUDA backend has a GPU to run on
 * (backend_gpu_probe's reason: "built without CUDA", "no GPU (...)", or a
 * GPU this build has no kernels for). With KFAC_REQUIRE_GPU=1 (a run on a
 * GPU machine) nothing is skipped: every test then fails with the reason
 * the backend gives, so a GPU that is not used cannot pass as a skip. */
int suite_skip_reason(char *why, size_t why_len) {
    char reason[512];
    const char *req = getenv("KFAC_REQUIRE_GPU");
    if (req && strcmp(req, "1") == 0) return 0;
    if (backend_gpu_probe(reason, sizeof reason)) return 0;
    if (strncmp(reason, "no GPU", 6) == 0 || strncmp(reason, "built without CUDA", 18) == 0)
        snprintf(why, why_len, "%s", reason);
    else
        snprintf(why, why_len, "no usable GPU (%s)", reason);
    return 1;
}

/* ---- CUDA == CPU --------------------------------------------------------------------- */
/* Tolerances (normwise relative, see the file comment) for one comparison. */
typedef struct twin_tol {
    double fwd;    /* every layer's y */
    double bwd;    /* every layer's dy, and the parameter gradients */
    double stats;  /* every factor */
    double loss;   /* the mean loss (relative) */
} twin_tol_t;

typedef struct twin_opts {
    int train;        /* forward mode */
    int uniform_in;   /* inputs U[0,1) (image-like, non-negative) instead of N(0,1) */
    int steps;        /* 1, or 2: an SGD step on both, then everything again */
    int sizes[4];     /* batch size of each step (0-terminated); none given: n for every step */
    int fisher;       /* the true-Fisher path of kfac-worker and kfac-statsd: after one forward pass, a
                         backward pass with other labels left on the device (grads_to_host = 0), the
                         statistics, then the backward pass with the true labels */
} twin_opts_t;

/* ||a - b|| / max(||b||, 1e-7 sqrt(len)) in double. */
static double s_rel(const float *a, const float *b, size_t len) {
    double d2 = 0.0, b2 = 0.0;
    for (size_t i = 0; i < len; i++) {
        double d = (double)a[i] - b[i];
        d2 += d * d;
        b2 += (double)b[i] * b[i];
    }
    double floor = 1e-7 * sqrt((double)len);
    double den = sqrt(b2) > floor ? sqrt(b2) : floor;
    return sqrt(d2) / den;
}

/* The CUDA backend for net; a GPU answered suite_skip_reason, so failing
 * to make one now is a failure. */
static backend_t *s_cuda_new(net_t *net, const char *test) {
    char err[512];
    backend_t *b = backend_new(BACKEND_CUDA, net, err, sizeof err);
    ck_assert_msg(b != NULL, "%s: no CUDA backend (a GPU answered the probe, or KFAC_REQUIRE_GPU=1 asks for one): %s",
                  test, err);
    ck_assert_int_eq(backend_kind(b), BACKEND_CUDA);
    return b;
}

/* Rows whose top two CPU probabilities are within 1e-4 of each other: their
 * argmax may differ between the backends by rounding alone. */
static int s_near_ties(const float *p, int n, int K) {
    int ties = 0;
    for (int i = 0; i < n; i++) {
        float a = -1.0f, b2 = -1.0f;
        for (int k = 0; k < K; k++) {
            float v = p[(size_t)i * K + k];
            if (v > a) { b2 = a; a = v; } else if (v > b2) b2 = v;
        }
        ties += (a - b2) < 1e-4f;
    }
    return ties;
}

/* argmax (the first maximum, as nn.c takes it) of max-pooling window
 * (i, c, oh, ow) of layer l over input x. */
static int s_window_argmax(const layer_t *l, const float *x, int i, int c, int oh, int ow) {
    float m = -INFINITY;
    int arg = -1;
    for (int kh = 0; kh < l->k; kh++)
        for (int kw = 0; kw < l->k; kw++) {
            const int h = oh * l->stride - l->pad + kh, w = ow * l->stride - l->pad + kw;
            if (h < 0 || h >= l->in_h || w < 0 || w >= l->in_w) continue;
            const float v = x[(((size_t)i * l->in_c + c) * l->in_h + h) * l->in_w + w];
            if (v > m) { m = v; arg = h * l->in_w + w; }
        }
    return arg;
}

/* Places where the backends' last forward passes (n examples) route the
 * gradient differently: max-pooling windows whose maximum sits at another
 * input, and ReLU inputs of opposite sign (one passes the gradient, the
 * other blocks it). Their inputs differ by rounding (about 1e-7
 * relative), so where two values of a window, or a value and 0, are that
 * close, a few elements get errors of order one, which say nothing about
 * the kernels (seen once: 3.2e-4 in the MNIST CNN's backward at batch 64,
 * against 1e-6 otherwise). s_twin draws other inputs then. */
static int s_routes_differ(backend_t *bc, backend_t *bg, const net_t *net, int n, float *xc, float *xg) {
    int diff = 0;
    for (int li = 0; li < net->n_layers; li++) {
        const layer_t *l = &net->layers[li];
        if ((l->kind != LAYER_MAXPOOL && l->kind != LAYER_RELU) || l->in < 0) continue; /* same network input */
        ck_assert_int_eq(backend_layer_copy(bc, l->in, xc, NULL), 0);
        ck_assert_int_eq(backend_layer_copy(bg, l->in, xg, NULL), 0);
        if (l->kind == LAYER_RELU) {
            const size_t len = (size_t)n * l->size;
            for (size_t j = 0; j < len; j++) diff += (xc[j] > 0.0f) != (xg[j] > 0.0f);
            continue;
        }
        for (int i = 0; i < n; i++)
            for (int c = 0; c < l->c; c++)
                for (int oh = 0; oh < l->h; oh++)
                    for (int ow = 0; ow < l->w; ow++)
                        diff += s_window_argmax(l, xc, i, c, oh, ow) != s_window_argmax(l, xg, i, c, oh, ow);
    }
    return diff;
}

#define TWIN_CHECK(err, tol, ...) ck_assert_msg((err) <= (tol), __VA_ARGS__)

/* What gave the worst backward error so far (printed with it). */
static char s_worst_b_what[128];

/* Every layer's dy and every parameter gradient of the last backward pass. */
static void s_compare_backward(const char *test, uint64_t seed, const char *pass, backend_t *bc, backend_t *bg,
                               net_t *nc, net_t *ng, int n, int grads, float *yc, float *yg, double tol,
                               double *worst) {
    for (int li = 0; li < nc->n_layers; li++) {
        const layer_t *l = &nc->layers[li];
        if (l->kind == LAYER_SOFTMAX_XENT) continue;
        size_t len = (size_t)n * l->size;
        ck_assert_int_eq(backend_layer_copy(bc, li, NULL, yc), 0);
        ck_assert_int_eq(backend_layer_copy(bg, li, NULL, yg), 0);
        double e = s_rel(yg, yc, len);
        if (e > *worst) {
            *worst = e;
            snprintf(s_worst_b_what, sizeof s_worst_b_what, "layer %s dy, %s, batch %d", l->name, pass, n);
        }
        TWIN_CHECK(e, tol, "%s (seed %llu, %s): layer %s (%s) dy error %.3g > %.3g", test, (unsigned long long)seed,
                   pass, l->name, layer_kind_name(l->kind), e, tol);
    }
    if (!grads) return;
    for (int v = 0; v < nc->n_views; v++) {
        const net_view_t *vw = &nc->views[v];
        double e = s_rel(ng->grads + vw->off, nc->grads + vw->off, vw->n);
        if (e > *worst) {
            *worst = e;
            snprintf(s_worst_b_what, sizeof s_worst_b_what, "gradient %s, %s, batch %d", vw->name, pass, n);
        }
        TWIN_CHECK(e, tol, "%s (seed %llu, %s): gradient %s error %.3g > %.3g", test, (unsigned long long)seed, pass,
                   vw->name, e, tol);
    }
}

/* The statistics of the last backward pass, every factor. */
static void s_compare_stats(const char *test, uint64_t seed, backend_t *bc, backend_t *bg, const net_t *nc,
                            kfac_stats_t *sc, kfac_stats_t *sg, double tol, double *worst) {
    ck_assert_int_eq(backend_stats(bc, sc), 0);
    ck_assert_int_eq(backend_stats(bg, sg), 0);
    for (int j = 0; j < sc->n_layers; j++)
        for (int k = 0; k < sc->layers[j].n_factors; k++) {
            const kfac_factor_t *fc = &sc->layers[j].f[k], *fg = &sg->layers[j].f[k];
            size_t len = kfac_factor_len(fc);
            double e = s_rel(fg->data, fc->data, len);
            if (e > *worst) *worst = e;
            TWIN_CHECK(e, tol, "%s (seed %llu): layer %s factor %d (dim %d) error %.3g > %.3g", test,
                       (unsigned long long)seed, nc->layers[sc->layers[j].layer].name, k, fc->dim, e, tol);
            ck_assert(fg->n_samples == fc->n_samples && fg->n_updates == fc->n_updates);
            if (fc->kind == KFAC_FACTOR_SYM) /* exactly symmetric, like the CPU's */
                for (int a = 0; a < fg->dim; a++)
                    for (int c2 = 0; c2 < a; c2++)
                        ck_assert(fg->data[(size_t)a * fg->dim + c2] == fg->data[(size_t)c2 * fg->dim + a]);
        }
}

/* Run the model on both backends with the same parameters, inputs and
 * labels and compare everything (see the file comment). */
static void s_twin(const char *test, const char *text, int n, twin_opts_t o, twin_tol_t tol) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    int sizes[4] = {0}, n_steps = 0, cap = 0;
    if (o.sizes[0]) {
        for (; n_steps < 4 && o.sizes[n_steps]; n_steps++) sizes[n_steps] = o.sizes[n_steps];
    } else {
        for (; n_steps < o.steps && n_steps < 4; n_steps++) sizes[n_steps] = n;
    }
    for (int k = 0; k < n_steps; k++) cap = sizes[k] > cap ? sizes[k] : cap;
    net_t *nc = testnet_parse(text, cap), *ng = testnet_parse(text, cap);
    backend_t *bg = s_cuda_new(ng, test);
    char err[512];
    backend_t *bc = backend_new(BACKEND_CPU, nc, err, sizeof err);
    ck_assert_msg(bc != NULL, "%s", err);
    testnet_randomize(nc, &r);
    ng->dropout_seed = nc->dropout_seed;
    ck_assert_int_eq(backend_set_params(bg, nc->params, nc->state), 0);
    kfac_stats_t *sc = kfac_stats_new(nc), *sg = kfac_stats_new(ng);
    ck_assert(sc && sg);
    const int K = nc->n_classes;
    float *x = malloc((size_t)cap * nc->in_size * sizeof(float));
    float *pc = malloc((size_t)cap * K * sizeof(float)), *pg = malloc((size_t)cap * K * sizeof(float));
    int *y = malloc((size_t)cap * sizeof(int)), *ys = malloc((size_t)cap * sizeof(int));
    float *state0 = malloc((nc->n_state ? nc->n_state : 1) * sizeof(float));
    size_t big = 0;
    for (int li = 0; li < nc->n_layers; li++)
        if ((size_t)cap * nc->layers[li].size > big) big = (size_t)cap * nc->layers[li].size;
    float *yc = malloc(big * sizeof(float)), *yg = malloc(big * sizeof(float));
    ck_assert(x && pc && pg && y && ys && state0 && yc && yg);
    double worst_f = 0, worst_b = 0, worst_s = 0, worst_l = 0;
    int redraws = 0;
    s_worst_b_what[0] = '\0';

    for (int step = 0; step < n_steps; step++) {
        const int m = sizes[step];
        /* Inputs for which both backends route the gradient alike (s_routes_differ), at most 20 draws. */
        const uint64_t dseed = nc->dropout_seed;
        if (nc->n_state) memcpy(state0, nc->state, nc->n_state * sizeof(float));
        for (int draw = 0;; draw++) {
            if (o.uniform_in) testnet_fill_uniform(&r, x, (size_t)m * nc->in_size);
            else testnet_fill_normal(&r, x, (size_t)m * nc->in_size);
            testnet_fill_labels(&r, y, m, K);
            ck_assert_int_eq(backend_forward(bc, x, m, o.train), 0);
            ck_assert_int_eq(backend_forward(bg, x, m, o.train), 0);
            const int differ = s_routes_differ(bc, bg, nc, m, yc, yg);
            if (!differ) break;
            ck_assert_msg(draw < 20, "%s (seed %llu): in 20 draws of inputs the backends always routed some gradient "
                          "differently (max pooling, ReLU)", test, (unsigned long long)seed);
            redraws++;
            /* The same masks and running statistics for the next draw. */
            nc->dropout_seed = ng->dropout_seed = dseed;
            if (nc->n_state) {
                memcpy(nc->state, state0, nc->n_state * sizeof(float));
                memcpy(ng->state, state0, nc->n_state * sizeof(float));
            }
            ck_assert_int_eq(backend_set_params(bc, NULL, NULL), 0);
            ck_assert_int_eq(backend_set_params(bg, NULL, NULL), 0);
        }
        ck_assert_msg(ng->dropout_seed == nc->dropout_seed, "dropout seeds diverged");
        for (int li = 0; li < nc->n_layers; li++) {
            const layer_t *l = &nc->layers[li];
            if (l->kind == LAYER_SOFTMAX_XENT) continue;
            size_t len = (size_t)m * l->size;
            ck_assert_int_eq(backend_layer_copy(bc, li, yc, NULL), 0);
            ck_assert_int_eq(backend_layer_copy(bg, li, yg, NULL), 0);
            double e = s_rel(yg, yc, len);
            if (e > worst_f) worst_f = e;
            TWIN_CHECK(e, tol.fwd, "%s (seed %llu, batch %d): layer %s (%s) forward error %.3g > %.3g", test,
                       (unsigned long long)seed, m, l->name, layer_kind_name(l->kind), e, tol.fwd);
        }
        if (nc->n_state) {
            double e = s_rel(ng->state, nc->state, nc->n_state);
            TWIN_CHECK(e, tol.fwd, "%s (seed %llu): running statistics error %.3g", test, (unsigned long long)seed, e);
        }
        ck_assert_int_eq(backend_probs(bc, pc), 0);
        ck_assert_int_eq(backend_probs(bg, pg), 0);
        double ep = s_rel(pg, pc, (size_t)m * K);
        TWIN_CHECK(ep, tol.fwd > 1e-5 ? tol.fwd : 1e-5, "%s (seed %llu): probabilities error %.3g", test,
                   (unsigned long long)seed, ep);

        if (o.fisher) {
            /* Sampled labels, gradient left on the device, statistics of that pass. */
            testnet_fill_labels(&r, ys, m, K);
            ck_assert_int_eq(backend_backward(bc, ys, 0, NULL, NULL), 0);
            ck_assert_int_eq(backend_backward(bg, ys, 0, NULL, NULL), 0);
            s_compare_backward(test, seed, "sampled labels", bc, bg, nc, ng, m, 0, yc, yg, tol.bwd, &worst_b);
            s_compare_stats(test, seed, bc, bg, nc, sc, sg, tol.stats, &worst_s);
        }
        float lc = 0, lg = 0;
        int hc = 0, hg = 0;
        ck_assert_int_eq(backend_backward(bc, y, 1, &lc, &hc), 0);
        ck_assert_int_eq(backend_backward(bg, y, 1, &lg, &hg), 0);
        double el = fabs((double)lg - lc) / (fabs((double)lc) > 1e-6 ? fabs((double)lc) : 1e-6);
        if (el > worst_l) worst_l = el;
        TWIN_CHECK(el, tol.loss, "%s (seed %llu): loss %.9g (gpu) vs %.9g (cpu)", test, (unsigned long long)seed,
                   (double)lg, (double)lc);
        int ties = s_near_ties(pc, m, K);
        ck_assert_msg(abs(hg - hc) <= ties, "%s (seed %llu): hits %d (gpu) vs %d (cpu), %d near ties", test,
                      (unsigned long long)seed, hg, hc, ties);
        s_compare_backward(test, seed, "labels", bc, bg, nc, ng, m, 1, yc, yg, tol.bwd, &worst_b);
        if (!o.fisher) s_compare_stats(test, seed, bc, bg, nc, sc, sg, tol.stats, &worst_s);
        if (step + 1 < n_steps) {
            /* One SGD step, each backend from its own gradient; the next step compares again. */
            for (size_t j = 0; j < nc->n_params; j++) {
                nc->params[j] -= 0.05f * nc->grads[j];
                ng->params[j] -= 0.05f * ng->grads[j];
            }
            ck_assert_int_eq(backend_set_params(bc, NULL, NULL), 0);
            ck_assert_int_eq(backend_set_params(bg, NULL, NULL), 0);
        }
    }
    printf("%s: worst relative errors: forward %.2g, backward %.2g, statistics %.2g, loss %.2g (%s)%s; worst "
           "backward: %s\n", test, worst_f, worst_b, worst_s, worst_l, backend_describe(bg),
           redraws ? " [inputs redrawn: routing ties]" : "", s_worst_b_what[0] ? s_worst_b_what : "-");
    ck_assert_int_eq(backend_failed(bg), 0);
    free(x); free(pc); free(pg); free(y); free(ys); free(state0); free(yc); free(yg);
    kfac_stats_free(&sc);
    kfac_stats_free(&sg);
    backend_free(&bc);
    backend_free(&bg);
    net_free(&nc);
    net_free(&ng);
}

/* Tolerances, and why (fp32 unit roundoff u = 6e-8):
 *  EXACT: relu, max pooling, flatten, dropout and add compute the same float
 *    operations on the same inputs (cuDNN's relu is max(x, 0); the masks are
 *    the same draws): forward differences are expected to be 0; 1e-6 allows
 *    for nothing but -0/+0. Their dy carries the softmax's expf (CUDA's is
 *    within 2 ulp, glibc's within 1): 1e-5.
 *  GEMM: fc forward/backward and every SYRK factor are fp32 dot products of
 *    length K <= ~600 here, summed in different orders by cuBLAS and OpenBLAS:
 *    worst case K u ~ 4e-5 of the summed magnitudes, typically sqrt(K) u ~ 2e-6.
 *    1e-4.
 *  CUDNN_CONV: cuDNN may choose FFT or Winograd algorithms, whose transforms
 *    add their own rounding (reported errors up to ~1e-5 relative in fp32;
 *    on an H200 with cuDNN 9.19 the chosen algorithms gave 0 forward and
 *    <= 3e-7 backward): 1e-4 forward and backward, which still catches any
 *    layout or indexing error (order 1). The factors are quadratic in the
 *    conv's input and dy, so they get twice the backward's: 2e-4; the loss
 *    inherits the forward's: 1e-4.
 *  TANH/AVGPOOL: cuDNN's tanh vs glibc tanhf (a few ulp), pooling sums in
 *    another order: 1e-5 forward; backward as EXACT's dy plus the same: 1e-5.
 *  BN: double sums on both sides and nn.c's float operations replayed
 *    without FMA contraction; only the last bit of a double sum can move the
 *    float mean or 1/std: 1e-6 forward (tight enough that a dropped eps of
 *    0.05 or a biased running variance shows). The backward's (dy - mean(dy)
 *    - xhat mean(dy xhat)) cancels, amplifying the rounding of its inputs:
 *    1e-4. Factors in double: 1e-5.
 *  DOUBLY: power iteration (GPU, double, to 1e-10) vs LAPACK's exact
 *    eigenpair (CPU, double); the inputs are non-negative like post-ReLU
 *    activations, so the leading singular value is well separated and both
 *    agree to the float rounding of K and Psi: 1e-4 (their SYRKs).
 *  LOSS: the per-example log terms are summed in the same order on the host;
 *    only the softmax differs: 1e-5. */
static const twin_tol_t TOL_EXACT = {1e-6, 1e-5, 1e-4, 1e-5};
static const twin_tol_t TOL_GEMM = {1e-4, 1e-4, 1e-4, 1e-5};
static const twin_tol_t TOL_CONV = {1e-4, 1e-4, 2e-4, 1e-4};
/* Whole models (the MNIST CNN, a residual stage): errors compound through up
 * to five weighted layers, each within 1e-4: 5e-4 for activations,
 * gradients and the loss, twice that for the factors. Measured on an H200
 * over 7 seeds: at most 2e-7 forward, 1.8e-6 backward and factors. */
static const twin_tol_t TOL_MODEL = {5e-4, 5e-4, 1e-3, 5e-4};
static const twin_tol_t TOL_SMOOTH = {1e-5, 1e-5, 1e-4, 1e-5};
static const twin_tol_t TOL_BN = {1e-6, 1e-4, 1e-5, 1e-5};
static const twin_opts_t TRAIN = {.train = 1, .steps = 1};
static const twin_opts_t EVAL = {.train = 0, .steps = 1};

START_TEST(test_backend_cuda_fc_matches_cpu) {
    s_twin("fc", "input 3x4x4\ndropout p=0 name=x0\nfc name=f out=7\nsoftmax_xent\n", TB_BATCH, TRAIN, TOL_GEMM);
    s_twin("fc bias=0", "input 20x1x1\ndropout p=0 name=x0\nfc name=f out=9 bias=0\nsoftmax_xent\n", TB_BATCH,
           TRAIN, TOL_GEMM);
}
END_TEST

START_TEST(test_backend_cuda_fc_doubly_matches_cpu) {
    twin_opts_t o = {.train = 1, .uniform_in = 1, .steps = 1};
    s_twin("fc doubly", "input 6x5x5\ndropout p=0 name=x0\nfc name=f out=5 kfac=doubly\nsoftmax_xent\n", TB_BATCH, o,
           TOL_GEMM);
    s_twin("fc doubly bias=0",
           "input 9x2x3\ndropout p=0 name=x0\nfc name=f out=4 bias=0 kfac=doubly\nsoftmax_xent\n", TB_BATCH, o,
           TOL_GEMM);
}
END_TEST

START_TEST(test_backend_cuda_conv_matches_cpu) {
    s_twin("conv k3 pad1 (kfc)", "input 3x8x8\ndropout p=0 name=x0\nconv name=c out=4 k=3 pad=1\nsoftmax_xent\n",
           TB_BATCH, TRAIN, TOL_CONV);
    s_twin("conv k3 stride2 bias=0",
           "input 2x9x7\ndropout p=0 name=x0\nconv name=c out=5 k=3 stride=2 pad=1 bias=0\nsoftmax_xent\n", TB_BATCH,
           TRAIN, TOL_CONV);
    s_twin("conv k5 pad2 (avg)",
           "input 2x8x8\ndropout p=0 name=x0\nconv name=c out=3 k=5 pad=2 kfac=avg\nsoftmax_xent\n", TB_BATCH, TRAIN,
           TOL_CONV);
    s_twin("conv k1", "input 4x5x5\ndropout p=0 name=x0\nconv name=c out=6 k=1\nsoftmax_xent\n", TB_BATCH, TRAIN,
           TOL_CONV);
}
END_TEST

START_TEST(test_backend_cuda_activations_match_cpu) {
    s_twin("relu", "input 3x4x5\ndropout p=0 name=x0\nrelu\nsoftmax_xent\n", TB_BATCH, TRAIN, TOL_EXACT);
    s_twin("tanh", "input 3x4x5\ndropout p=0 name=x0\ntanh\nsoftmax_xent\n", TB_BATCH, TRAIN, TOL_SMOOTH);
}
END_TEST

START_TEST(test_backend_cuda_pooling_matches_cpu) {
    s_twin("maxpool k2", "input 3x6x6\ndropout p=0 name=x0\nmaxpool k=2\nsoftmax_xent\n", TB_BATCH, TRAIN, TOL_EXACT);
    s_twin("maxpool k3 s2 pad1 (overlapping)",
           "input 2x7x6\ndropout p=0 name=x0\nmaxpool k=3 stride=2 pad=1\nsoftmax_xent\n", TB_BATCH, TRAIN, TOL_EXACT);
    s_twin("avgpool k2", "input 3x6x6\ndropout p=0 name=x0\navgpool k=2\nsoftmax_xent\n", TB_BATCH, TRAIN, TOL_SMOOTH);
    s_twin("avgpool k3 s2 pad1", "input 2x7x7\ndropout p=0 name=x0\navgpool k=3 stride=2 pad=1\nsoftmax_xent\n",
           TB_BATCH, TRAIN, TOL_SMOOTH);
    s_twin("avgpool global", "input 5x3x4\ndropout p=0 name=x0\navgpool global\nsoftmax_xent\n", TB_BATCH, TRAIN,
           TOL_SMOOTH);
}
END_TEST

START_TEST(test_backend_cuda_flatten_dropout_add_match_cpu) {
    s_twin("flatten", "input 2x3x3\ndropout p=0 name=x0\nflatten\nsoftmax_xent\n", TB_BATCH, TRAIN, TOL_EXACT);
    s_twin("dropout p=0.4", "input 2x3x3\ndropout p=0 name=x0\ndropout p=0.4\nsoftmax_xent\n", TB_BATCH, TRAIN,
           TOL_EXACT);
    twin_opts_t eval = EVAL;
    s_twin("dropout eval", "input 2x3x3\ndropout p=0 name=x0\ndropout p=0.4\nsoftmax_xent\n", TB_BATCH, eval,
           TOL_EXACT);
    s_twin("add", "input 2x3x3\ndropout p=0 name=x0\ntanh name=t\nadd from=x0\nsoftmax_xent\n", TB_BATCH, TRAIN,
           TOL_SMOOTH);
}
END_TEST

START_TEST(test_backend_cuda_batchnorm_matches_cpu) {
    s_twin("batchnorm train", "input 4x3x3\ndropout p=0 name=x0\nbatchnorm name=bn\nsoftmax_xent\n", TB_BATCH, TRAIN,
           TOL_BN);
    twin_opts_t eval = EVAL;
    s_twin("batchnorm eval", "input 4x3x3\ndropout p=0 name=x0\nbatchnorm name=bn momentum=0.2 eps=0.05\nsoftmax_xent\n",
           TB_BATCH, eval, TOL_BN);
    s_twin("batchnorm fc", "input 6x1x1\ndropout p=0 name=x0\nbatchnorm name=bn eps=0.001\nsoftmax_xent\n", TB_BATCH,
           TRAIN, TOL_BN);
}
END_TEST

/* The MNIST CNN of models/mnist-cnn.model, one full training step and the
 * forward/backward/statistics after it (TOL_MODEL). */
static const char *const MNIST_CNN =
    "input 1x28x28\n"
    "conv name=conv1 out=16 k=5 pad=2\nrelu\nmaxpool k=2\n"
    "conv name=conv2 out=32 k=5 pad=2\nrelu\nmaxpool k=2\n"
    "flatten\nfc name=fc1 out=128\nrelu\nfc name=fc2 out=10\nsoftmax_xent\n";

START_TEST(test_backend_cuda_mnist_cnn_training_step_matches_cpu) {
    twin_opts_t o = {.train = 1, .uniform_in = 1, .steps = 2};
    s_twin("mnist-cnn", MNIST_CNN, 16, o, TOL_MODEL);
}
END_TEST

/* The true-Fisher path of kfac-worker and kfac-statsd: after one forward
 * pass, a backward pass with sampled labels whose gradient stays on the
 * device, the statistics of that pass, then the backward pass with the true
 * labels, whose gradient comes to the host. Two steps. */
START_TEST(test_backend_cuda_true_fisher_two_backward_passes_match_cpu) {
    twin_opts_t o = {.train = 1, .uniform_in = 1, .steps = 2, .fisher = 1};
    s_twin("mnist-cnn, true Fisher", MNIST_CNN, 16, o, TOL_MODEL);
}
END_TEST

/* The batch size changes between passes (a worker's last, short batch; an
 * evaluation batch): cuDNN's descriptors, algorithms and workspace and the
 * batch-norm splits are set again each time. */
START_TEST(test_backend_cuda_batch_size_changes_match_cpu) {
    twin_opts_t o = {.train = 1, .uniform_in = 1, .sizes = {16, 5, 16, 9}};
    s_twin("mnist-cnn, batch 16 5 16 9", MNIST_CNN, 0, o, TOL_MODEL);
}
END_TEST

/* Evaluation mode (no dropout masks, running statistics) for the weighted
 * and pooling layers. */
START_TEST(test_backend_cuda_eval_mode_matches_cpu) {
    s_twin("conv eval", "input 3x8x8\ndropout p=0 name=x0\nconv name=c out=4 k=3 pad=1\nsoftmax_xent\n", TB_BATCH,
           EVAL, TOL_CONV);
    s_twin("fc eval", "input 3x4x4\ndropout p=0 name=x0\nfc name=f out=7\nsoftmax_xent\n", TB_BATCH, EVAL, TOL_GEMM);
    s_twin("maxpool eval", "input 3x6x6\ndropout p=0 name=x0\nmaxpool k=2\nsoftmax_xent\n", TB_BATCH, EVAL,
           TOL_EXACT);
    s_twin("avgpool eval", "input 3x6x6\ndropout p=0 name=x0\navgpool k=2\nsoftmax_xent\n", TB_BATCH, EVAL,
           TOL_SMOOTH);
    s_twin("mnist-cnn eval", MNIST_CNN, 16, (twin_opts_t){.train = 0, .uniform_in = 1, .steps = 2}, TOL_MODEL);
}
END_TEST

/* Batch norm with several blocks per channel: 32 examples of 16x16 give
 * 8192 values per channel, which backend_cuda_bn_splits cuts into 4 blocks
 * (at least 2048 values each). Two training steps. */
START_TEST(test_backend_cuda_batchnorm_splits_match_cpu) {
    s_twin("batchnorm, 4 splits", "input 4x16x16\ndropout p=0 name=x0\nbatchnorm name=bn\nsoftmax_xent\n", 32,
           (twin_opts_t){.train = 1, .steps = 2}, TOL_BN);
}
END_TEST

/* Factor products by SSYRK (KFAC_CUDA_GRAM=syrk) instead of the default
 * SGEMM, with the MNIST CNN at batch 64 (conv2's KFC product: 12544 rows). */
START_TEST(test_backend_cuda_gram_syrk_matches_cpu) {
    setenv("KFAC_CUDA_GRAM", "syrk", 1);
    s_twin("mnist-cnn, KFAC_CUDA_GRAM=syrk", MNIST_CNN, 64, (twin_opts_t){.train = 1, .uniform_in = 1, .steps = 2},
           TOL_MODEL);
    s_twin("fc doubly, KFAC_CUDA_GRAM=syrk",
           "input 6x5x5\ndropout p=0 name=x0\nfc name=f out=5 kfac=doubly\nsoftmax_xent\n", TB_BATCH,
           (twin_opts_t){.train = 1, .uniform_in = 1, .steps = 1}, TOL_GEMM);
    unsetenv("KFAC_CUDA_GRAM");
}
END_TEST

/* The default (SGEMM) on the same batch of 64. */
START_TEST(test_backend_cuda_mnist_cnn_batch64_matches_cpu) {
    s_twin("mnist-cnn, batch 64", MNIST_CNN, 64, (twin_opts_t){.train = 1, .uniform_in = 1, .steps = 2}, TOL_MODEL);
}
END_TEST

/* A statistics slot that is skipped (adaptive refresh) keeps what it held,
 * on both backends, while the others are computed. */
START_TEST(test_backend_cuda_skipped_slot_untouched) {
    char err[512];
    net_t *nc = testnet_parse(MNIST_CNN, 8), *ng = testnet_parse(MNIST_CNN, 8);
    rng_t r;
    rng_seed(&r, test_seed());
    testnet_randomize(nc, &r);
    memcpy(ng->params, nc->params, nc->n_params * sizeof(float));
    backend_t *bc = backend_new(BACKEND_CPU, nc, err, sizeof err), *bg = s_cuda_new(ng, "skip");
    ck_assert(bc != NULL);
    ck_assert_int_eq(backend_set_params(bg, ng->params, ng->state), 0);
    kfac_stats_t *sc = kfac_stats_new(nc), *sg = kfac_stats_new(ng);
    ck_assert(sc && sg && sc->n_layers >= 2);
    float x[8 * 784];
    int y[8];
    testnet_fill_uniform(&r, x, sizeof x / sizeof x[0]);
    testnet_fill_labels(&r, y, 8, 10);
    const float sentinel = -12345.0f;
    for (size_t i = 0; i < sc->n_floats; i++) sc->arena[i] = sg->arena[i] = sentinel;
    sc->layers[1].skip = sg->layers[1].skip = 1;
    ck_assert_int_eq(backend_forward(bc, x, 8, 1), 0);
    ck_assert_int_eq(backend_forward(bg, x, 8, 1), 0);
    ck_assert_int_eq(backend_backward(bc, y, 1, NULL, NULL), 0);
    ck_assert_int_eq(backend_backward(bg, y, 1, NULL, NULL), 0);
    ck_assert_int_eq(backend_stats(bc, sc), 0);
    ck_assert_int_eq(backend_stats(bg, sg), 0);
    for (int j = 0; j < sc->n_layers; j++)
        for (int k = 0; k < sc->layers[j].n_factors; k++) {
            const kfac_factor_t *fc = &sc->layers[j].f[k], *fg = &sg->layers[j].f[k];
            const size_t len = kfac_factor_len(fc);
            size_t kept_c = 0, kept_g = 0;
            for (size_t i = 0; i < len; i++) {
                kept_c += fc->data[i] == sentinel;
                kept_g += fg->data[i] == sentinel;
            }
            if (j == 1) {
                ck_assert_msg(kept_c == len && kept_g == len,
                              "skipped slot 1 factor %d: %zu (cpu) and %zu (gpu) of %zu floats kept", k, kept_c,
                              kept_g, len);
                ck_assert(fg->n_samples == 0 && fc->n_samples == 0);
            } else {
                ck_assert_msg(kept_c == 0 && kept_g == 0, "slot %d factor %d was not computed", j, k);
                ck_assert(s_rel(fg->data, fc->data, len) <= TOL_MODEL.stats);
            }
        }
    kfac_stats_free(&sc);
    kfac_stats_free(&sg);
    backend_free(&bc);
    backend_free(&bg);
    net_free(&nc);
    net_free(&ng);
}
END_TEST

/* A GPU without room for the statistics is found when the backend is made
 * (KFAC_CUDA_MEM_LIMIT stands in for a full GPU): AUTO gives way to the CPU,
 * CUDA fails with the reason, and without statistics the GPU is still used. */
START_TEST(test_backend_cuda_no_room_for_statistics_falls_back) {
    char err[512];
    /* The fallback to the CPU is what is tested: KFAC_REQUIRE_GPU (a run on a
     * GPU machine) would forbid it. Restored at the end (CK_FORK=no runs
     * every test in one process). */
    const char *req = getenv("KFAC_REQUIRE_GPU");
    char req_saved[8] = "";
    if (req) snprintf(req_saved, sizeof req_saved, "%s", req);
    unsetenv("KFAC_REQUIRE_GPU");
    net_t *net = testnet_parse(MNIST_CNN, 16);
    kfac_stats_t *s = kfac_stats_new(net);
    ck_assert(s != NULL);
    backend_t *b = s_cuda_new(net, "memory");
    const size_t base = backend_device_bytes(b);
    ck_assert_uint_gt(base, 0);
    ck_assert_int_eq(backend_reserve_stats(b, s), 0);
    const size_t with_stats = backend_device_bytes(b);
    ck_assert_uint_ge(with_stats, base + s->n_floats * sizeof(float)); /* the factor arena, at least */
    backend_free(&b);

    char lim[64];
    snprintf(lim, sizeof lim, "%zu", base + (with_stats - base) / 2);
    setenv("KFAC_CUDA_MEM_LIMIT", lim, 1);
    b = backend_new_with_stats(BACKEND_AUTO, net, s, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    ck_assert_int_eq(backend_kind(b), BACKEND_CPU);
    backend_free(&b);
    b = backend_new_with_stats(BACKEND_CUDA, net, s, err, sizeof err);
    ck_assert(b == NULL);
    ck_assert_msg(strstr(err, "no room for the K-FAC statistics") && strstr(err, "KFAC_CUDA_MEM_LIMIT"), "%s", err);
    b = backend_new_with_stats(BACKEND_AUTO, net, NULL, err, sizeof err); /* a worker without statistics */
    ck_assert_msg(b != NULL && backend_kind(b) == BACKEND_CUDA, "%s", err);
    backend_free(&b);
    setenv("KFAC_CUDA_MEM_LIMIT", "12 apples", 1);
    b = backend_new(BACKEND_CUDA, net, err, sizeof err);
    ck_assert(b == NULL);
    ck_assert_msg(strstr(err, "KFAC_CUDA_MEM_LIMIT=12 apples"), "%s", err);
    unsetenv("KFAC_CUDA_MEM_LIMIT");
    setenv("KFAC_REQUIRE_GPU", "1", 1);
    b = backend_new_with_stats(BACKEND_AUTO, net, s, err, sizeof err); /* no limit: the GPU */
    ck_assert_msg(b != NULL && backend_kind(b) == BACKEND_CUDA, "%s", err);
    backend_free(&b);
    if (req) setenv("KFAC_REQUIRE_GPU", req_saved, 1);
    else unsetenv("KFAC_REQUIRE_GPU");
    kfac_stats_free(&s);
    net_free(&net);
}
END_TEST

/* KFAC_CUDA_SYNC=1 (a device fault named at its layer) computes the same
 * results as the default asynchronous mode, and says that it is on. */
START_TEST(test_backend_cuda_sync_mode_same_results) {
    char err[512];
    net_t *na = testnet_parse(MNIST_CNN, 8), *nb = testnet_parse(MNIST_CNN, 8);
    rng_t r;
    rng_seed(&r, test_seed());
    testnet_randomize(na, &r);
    memcpy(nb->params, na->params, na->n_params * sizeof(float));
    backend_t *ba = s_cuda_new(na, "async");
    setenv("KFAC_CUDA_SYNC", "1", 1);
    backend_t *bb = backend_new(BACKEND_CUDA, nb, err, sizeof err);
    unsetenv("KFAC_CUDA_SYNC");
    ck_assert_msg(bb != NULL, "%s", err);
    ck_assert_msg(strstr(backend_describe(bb), "KFAC_CUDA_SYNC=1") != NULL, "%s", backend_describe(bb));
    ck_assert(strstr(backend_describe(ba), "KFAC_CUDA_SYNC") == NULL);
    ck_assert_int_eq(backend_set_params(ba, na->params, na->state), 0);
    ck_assert_int_eq(backend_set_params(bb, nb->params, nb->state), 0);
    float x[8 * 784];
    int y[8];
    testnet_fill_uniform(&r, x, sizeof x / sizeof x[0]);
    testnet_fill_labels(&r, y, 8, 10);
    ck_assert_int_eq(backend_forward(ba, x, 8, 1), 0);
    ck_assert_int_eq(backend_forward(bb, x, 8, 1), 0);
    ck_assert_int_eq(backend_backward(ba, y, 1, NULL, NULL), 0);
    ck_assert_int_eq(backend_backward(bb, y, 1, NULL, NULL), 0);
    const double e = s_rel(nb->grads, na->grads, na->n_params);
    ck_assert_msg(e <= 1e-6, "gradient with KFAC_CUDA_SYNC=1 differs: %.3g", e);
    backend_free(&ba);
    backend_free(&bb);
    net_free(&na);
    net_free(&nb);
}
END_TEST

/* A residual stage as in models/resnet8-cifar.model: conv-bn-relu-conv-bn,
 * a stride-2 1x1 projection + bn on the shortcut (in=), add, relu, global
 * average pooling, fc; fan-out everywhere (x0 and the stage input feed two
 * branches). Errors compound through three convolutions and two batch
 * norms, which divide by the batch std: TOL_MODEL as for the MNIST CNN;
 * also on the true-Fisher path, with changing batch sizes and in
 * evaluation mode. */
START_TEST(test_backend_cuda_residual_block_matches_cpu) {
    const char *res =
        "input 3x8x8\ndropout p=0 name=x0\n"
        "conv name=c1 out=4 k=3 stride=2 pad=1 bias=0\nbatchnorm name=b1\nrelu name=r1\n"
        "conv name=c2 out=4 k=3 pad=1 bias=0\nbatchnorm name=b2\n"
        "conv name=proj out=4 k=1 stride=2 bias=0 in=x0\nbatchnorm name=bp\n"
        "add name=sum from=b2\nrelu name=out\navgpool global\nfc name=fc out=5\nsoftmax_xent\n";
    s_twin("residual block", res, TB_BATCH, (twin_opts_t){.train = 1, .steps = 2}, TOL_MODEL);
    s_twin("residual block, true Fisher", res, TB_BATCH, (twin_opts_t){.train = 1, .steps = 2, .fisher = 1},
           TOL_MODEL);
    s_twin("residual block, batch 8 3 8", res, 0, (twin_opts_t){.train = 1, .sizes = {8, 3, 8}}, TOL_MODEL);
    s_twin("residual block eval", res, TB_BATCH, EVAL, TOL_MODEL);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("backend_cuda");
    TCase *tg = tcase_create("cuda");
    tcase_add_test(tg, test_backend_cuda_fc_matches_cpu);
    tcase_add_test(tg, test_backend_cuda_fc_doubly_matches_cpu);
    tcase_add_test(tg, test_backend_cuda_conv_matches_cpu);
    tcase_add_test(tg, test_backend_cuda_activations_match_cpu);
    tcase_add_test(tg, test_backend_cuda_pooling_matches_cpu);
    tcase_add_test(tg, test_backend_cuda_flatten_dropout_add_match_cpu);
    tcase_add_test(tg, test_backend_cuda_batchnorm_matches_cpu);
    tcase_add_test(tg, test_backend_cuda_residual_block_matches_cpu);
    tcase_add_test(tg, test_backend_cuda_mnist_cnn_training_step_matches_cpu);
    tcase_add_test(tg, test_backend_cuda_true_fisher_two_backward_passes_match_cpu);
    tcase_add_test(tg, test_backend_cuda_batch_size_changes_match_cpu);
    tcase_add_test(tg, test_backend_cuda_eval_mode_matches_cpu);
    tcase_add_test(tg, test_backend_cuda_batchnorm_splits_match_cpu);
    tcase_add_test(tg, test_backend_cuda_gram_syrk_matches_cpu);
    tcase_add_test(tg, test_backend_cuda_mnist_cnn_batch64_matches_cpu);
    tcase_add_test(tg, test_backend_cuda_skipped_slot_untouched);
    tcase_add_test(tg, test_backend_cuda_no_room_for_statistics_falls_back);
    tcase_add_test(tg, test_backend_cuda_sync_mode_same_results);
    /* Each test initializes cuDNN and cuBLAS: the first one loads about 0.9 GB
     * of libraries, from a cold cache on a fresh machine. */
    tcase_set_timeout(tg, 300);
    suite_add_tcase(s, tg);
    return s;
}
