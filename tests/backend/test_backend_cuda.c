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
    ck_assert_msg(b != NULL, "%s: a GPU answers but the CUDA backend failed: %s", test, err);
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

#define TWIN_CHECK(err, tol, ...) ck_assert_msg((err) <= (tol), __VA_ARGS__)

/* Run the model on both backends with the same parameters, inputs and
 * labels and compare everything (see the file comment). */
static void s_twin(const char *test, const char *text, int n, twin_opts_t o, twin_tol_t tol) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *nc = testnet_parse(text, TB_BATCH * 2), *ng = testnet_parse(text, TB_BATCH * 2);
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
    float *x = malloc((size_t)n * nc->in_size * sizeof(float));
    float *pc = malloc((size_t)n * K * sizeof(float)), *pg = malloc((size_t)n * K * sizeof(float));
    int *y = malloc((size_t)n * sizeof(int));
    size_t big = 0;
    for (int li = 0; li < nc->n_layers; li++)
        if ((size_t)n * nc->layers[li].size > big) big = (size_t)n * nc->layers[li].size;
    float *yc = malloc(big * sizeof(float)), *yg = malloc(big * sizeof(float));
    ck_assert(x && pc && pg && y && yc && yg);
    double worst_f = 0, worst_b = 0, worst_s = 0, worst_l = 0;

    for (int step = 0; step < o.steps; step++) {
        if (o.uniform_in) testnet_fill_uniform(&r, x, (size_t)n * nc->in_size);
        else testnet_fill_normal(&r, x, (size_t)n * nc->in_size);
        testnet_fill_labels(&r, y, n, K);
        ck_assert_int_eq(backend_forward(bc, x, n, o.train), 0);
        ck_assert_int_eq(backend_forward(bg, x, n, o.train), 0);
        ck_assert_msg(ng->dropout_seed == nc->dropout_seed, "dropout seeds diverged");
        for (int li = 0; li < nc->n_layers; li++) {
            const layer_t *l = &nc->layers[li];
            if (l->kind == LAYER_SOFTMAX_XENT) continue;
            size_t len = (size_t)n * l->size;
            ck_assert_int_eq(backend_layer_copy(bc, li, yc, NULL), 0);
            ck_assert_int_eq(backend_layer_copy(bg, li, yg, NULL), 0);
            double e = s_rel(yg, yc, len);
            if (e > worst_f) worst_f = e;
            TWIN_CHECK(e, tol.fwd, "%s (seed %llu): layer %s (%s) forward error %.3g > %.3g", test,
                       (unsigned long long)seed, l->name, layer_kind_name(l->kind), e, tol.fwd);
        }
        if (nc->n_state) {
            double e = s_rel(ng->state, nc->state, nc->n_state);
            TWIN_CHECK(e, tol.fwd, "%s (seed %llu): running statistics error %.3g", test, (unsigned long long)seed, e);
        }
        ck_assert_int_eq(backend_probs(bc, pc), 0);
        ck_assert_int_eq(backend_probs(bg, pg), 0);
        double ep = s_rel(pg, pc, (size_t)n * K);
        TWIN_CHECK(ep, tol.fwd > 1e-5 ? tol.fwd : 1e-5, "%s (seed %llu): probabilities error %.3g", test,
                   (unsigned long long)seed, ep);

        float lc = 0, lg = 0;
        int hc = 0, hg = 0;
        ck_assert_int_eq(backend_backward(bc, y, 1, &lc, &hc), 0);
        ck_assert_int_eq(backend_backward(bg, y, 1, &lg, &hg), 0);
        double el = fabs((double)lg - lc) / (fabs((double)lc) > 1e-6 ? fabs((double)lc) : 1e-6);
        if (el > worst_l) worst_l = el;
        TWIN_CHECK(el, tol.loss, "%s (seed %llu): loss %.9g (gpu) vs %.9g (cpu)", test, (unsigned long long)seed,
                   (double)lg, (double)lc);
        int ties = s_near_ties(pc, n, K);
        ck_assert_msg(abs(hg - hc) <= ties, "%s (seed %llu): hits %d (gpu) vs %d (cpu), %d near ties", test,
                      (unsigned long long)seed, hg, hc, ties);
        for (int li = 0; li < nc->n_layers; li++) {
            const layer_t *l = &nc->layers[li];
            if (l->kind == LAYER_SOFTMAX_XENT) continue;
            size_t len = (size_t)n * l->size;
            ck_assert_int_eq(backend_layer_copy(bc, li, NULL, yc), 0);
            ck_assert_int_eq(backend_layer_copy(bg, li, NULL, yg), 0);
            double e = s_rel(yg, yc, len);
            if (e > worst_b) worst_b = e;
            TWIN_CHECK(e, tol.bwd, "%s (seed %llu): layer %s (%s) dy error %.3g > %.3g", test,
                       (unsigned long long)seed, l->name, layer_kind_name(l->kind), e, tol.bwd);
        }
        for (int v = 0; v < nc->n_views; v++) {
            const net_view_t *vw = &nc->views[v];
            double e = s_rel(ng->grads + vw->off, nc->grads + vw->off, vw->n);
            if (e > worst_b) worst_b = e;
            TWIN_CHECK(e, tol.bwd, "%s (seed %llu): gradient %s error %.3g > %.3g", test, (unsigned long long)seed,
                       vw->name, e, tol.bwd);
        }
        ck_assert_int_eq(backend_stats(bc, sc), 0);
        ck_assert_int_eq(backend_stats(bg, sg), 0);
        for (int j = 0; j < sc->n_layers; j++)
            for (int k = 0; k < sc->layers[j].n_factors; k++) {
                const kfac_factor_t *fc = &sc->layers[j].f[k], *fg = &sg->layers[j].f[k];
                size_t len = kfac_factor_len(fc);
                double e = s_rel(fg->data, fc->data, len);
                if (e > worst_s) worst_s = e;
                TWIN_CHECK(e, tol.stats, "%s (seed %llu): layer %s factor %d (dim %d) error %.3g > %.3g", test,
                           (unsigned long long)seed, nc->layers[sc->layers[j].layer].name, k, fc->dim, e, tol.stats);
                ck_assert(fg->n_samples == fc->n_samples && fg->n_updates == fc->n_updates);
                if (fc->kind == KFAC_FACTOR_SYM) /* exactly symmetric, like the CPU's */
                    for (int a = 0; a < fg->dim; a++)
                        for (int c2 = 0; c2 < a; c2++)
                            ck_assert(fg->data[(size_t)a * fg->dim + c2] == fg->data[(size_t)c2 * fg->dim + a]);
            }
        if (step + 1 < o.steps) {
            /* One SGD step, each backend from its own gradient; the next step compares again. */
            for (size_t j = 0; j < nc->n_params; j++) {
                nc->params[j] -= 0.05f * nc->grads[j];
                ng->params[j] -= 0.05f * ng->grads[j];
            }
            ck_assert_int_eq(backend_set_params(bc, NULL, NULL), 0);
            ck_assert_int_eq(backend_set_params(bg, NULL, NULL), 0);
        }
    }
    printf("%s: worst relative errors: forward %.2g, backward %.2g, statistics %.2g, loss %.2g (%s)\n", test, worst_f,
           worst_b, worst_s, worst_l, backend_describe(bg));
    ck_assert_int_eq(backend_failed(bg), 0);
    free(x); free(pc); free(pg); free(y); free(yc); free(yg);
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
 *    add their own rounding (reported errors up to ~1e-4 relative in fp32);
 *    1e-3 still catches any layout or indexing error (order 1).
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
static const twin_tol_t TOL_CONV = {1e-3, 1e-3, 1e-4, 1e-4};
static const twin_tol_t TOL_SMOOTH = {1e-5, 1e-5, 1e-4, 1e-5};
static const twin_tol_t TOL_BN = {1e-6, 1e-4, 1e-5, 1e-5};
static const twin_opts_t TRAIN = {1, 0, 1};

START_TEST(test_backend_cuda_fc_matches_cpu) {
    s_twin("fc", "input 3x4x4\ndropout p=0 name=x0\nfc name=f out=7\nsoftmax_xent\n", TB_BATCH, TRAIN, TOL_GEMM);
    s_twin("fc bias=0", "input 20x1x1\ndropout p=0 name=x0\nfc name=f out=9 bias=0\nsoftmax_xent\n", TB_BATCH,
           TRAIN, TOL_GEMM);
}
END_TEST

START_TEST(test_backend_cuda_fc_doubly_matches_cpu) {
    twin_opts_t o = {1, 1, 1};
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
    twin_opts_t eval = {0, 0, 1};
    s_twin("dropout eval", "input 2x3x3\ndropout p=0 name=x0\ndropout p=0.4\nsoftmax_xent\n", TB_BATCH, eval,
           TOL_EXACT);
    s_twin("add", "input 2x3x3\ndropout p=0 name=x0\ntanh name=t\nadd from=x0\nsoftmax_xent\n", TB_BATCH, TRAIN,
           TOL_SMOOTH);
}
END_TEST

START_TEST(test_backend_cuda_batchnorm_matches_cpu) {
    s_twin("batchnorm train", "input 4x3x3\ndropout p=0 name=x0\nbatchnorm name=bn\nsoftmax_xent\n", TB_BATCH, TRAIN,
           TOL_BN);
    twin_opts_t eval = {0, 0, 1};
    s_twin("batchnorm eval", "input 4x3x3\ndropout p=0 name=x0\nbatchnorm name=bn momentum=0.2 eps=0.05\nsoftmax_xent\n",
           TB_BATCH, eval, TOL_BN);
    s_twin("batchnorm fc", "input 6x1x1\ndropout p=0 name=x0\nbatchnorm name=bn eps=0.001\nsoftmax_xent\n", TB_BATCH,
           TRAIN, TOL_BN);
}
END_TEST

/* The MNIST CNN of models/mnist-cnn.model, one full training step and the
 * forward/backward/statistics after it. Errors compound through four weighted
 * layers, two of them cuDNN convolutions (1e-3 each at worst): 5e-3 for
 * activations, gradients and factors, 1e-3 for the loss. */
START_TEST(test_backend_cuda_mnist_cnn_training_step_matches_cpu) {
    const char *mnist =
        "input 1x28x28\n"
        "conv name=conv1 out=16 k=5 pad=2\nrelu\nmaxpool k=2\n"
        "conv name=conv2 out=32 k=5 pad=2\nrelu\nmaxpool k=2\n"
        "flatten\nfc name=fc1 out=128\nrelu\nfc name=fc2 out=10\nsoftmax_xent\n";
    twin_opts_t o = {1, 1, 2};
    twin_tol_t tol = {5e-3, 5e-3, 5e-3, 1e-3};
    s_twin("mnist-cnn", mnist, 16, o, tol);
}
END_TEST

/* A residual stage as in models/resnet8-cifar.model: conv-bn-relu-conv-bn,
 * a stride-2 1x1 projection + bn on the shortcut (in=), add, relu, global
 * average pooling, fc; fan-out everywhere (x0 and the stage input feed two
 * branches). Errors compound through three convolutions and two batch
 * norms, which divide by the batch std: 5e-3 as for the MNIST CNN. */
START_TEST(test_backend_cuda_residual_block_matches_cpu) {
    const char *res =
        "input 3x8x8\ndropout p=0 name=x0\n"
        "conv name=c1 out=4 k=3 stride=2 pad=1 bias=0\nbatchnorm name=b1\nrelu name=r1\n"
        "conv name=c2 out=4 k=3 pad=1 bias=0\nbatchnorm name=b2\n"
        "conv name=proj out=4 k=1 stride=2 bias=0 in=x0\nbatchnorm name=bp\n"
        "add name=sum from=b2\nrelu name=out\navgpool global\nfc name=fc out=5\nsoftmax_xent\n";
    twin_opts_t o = {1, 0, 2};
    twin_tol_t tol = {5e-3, 5e-3, 5e-3, 1e-3};
    s_twin("residual block", res, TB_BATCH, o, tol);
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
    /* Each test initializes cuDNN and cuBLAS: the first one loads about 0.9 GB
     * of libraries, from a cold cache on a fresh machine. */
    tcase_set_timeout(tg, 300);
    suite_add_tcase(s, tg);
    return s;
}
