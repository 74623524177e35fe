/* tests/backend/test_backend.c — the backend interface (common/backend/backend.h): the CPU
 * backend against direct nn.c / kfac_stats.c calls, the CUDA backend against
 * the CPU backend (its checked twin), and the fallbacks without a GPU.
 *
 * (a) CPU backend == direct calls, bit for bit (memcmp): logits, every
 *     layer's activations, probabilities, loss, hits, gradients, batch-norm
 *     running statistics, dropout seed and every K-FAC factor, in training
 *     and eval mode, on models that use every layer kind. Runs everywhere.
 * (b) CUDA == CPU, when a GPU answers (otherwise each test prints
 *     "skipped: no GPU (reason)" and passes). Every layer kind is tested in
 *     its own tiny model `input -> dropout p=0 (identity, named x0) -> OP ->
 *     softmax_xent`, so the op reads exactly the same input on both backends
 *     and x0's dy is exactly the op's input gradient; then the MNIST CNN for
 *     one full training step. Compared: every layer's y and dy, probs, loss,
 *     hits, every parameter view of the gradient, the running statistics,
 *     every factor of the statistics. Fresh random parameters and inputs
 *     (seed printed on failure; KFAC_TEST_SEED=<n> replays).
 *     Error measure, per tensor: ||gpu - cpu||_2 / max(||cpu||_2, 1e-7
 *     sqrt(len)) — normwise relative, with an absolute floor so that a tensor
 *     that is zero up to rounding (|values| ~ 1e-7) is not judged by its
 *     noise. Tolerances per op (fp32, u = 6e-8), stated where each test sets
 *     them; none can hide an indexing or layout bug, which gives errors of
 *     order 1.
 * (c) backend_new(BACKEND_CUDA) without a GPU (or in a build without CUDA)
 *     fails with "no GPU" / "built without CUDA" in the message; AUTO falls
 *     back to the CPU. Bad calls are rejected with -EINVAL.
 *
 * Check forks every test: CUDA is touched only inside the tests.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/backend/backend.h"
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"

#define TB_BATCH 8

static net_t *s_build(const char *text, int batch) {
    char err[512];
    net_t *net = net_parse(text, "test_backend", batch, err, sizeof err);
    ck_assert_msg(net != NULL, "net_parse failed: %s\n%s", err, text);
    return net;
}

/* Parameters away from their trivial init: random biases, bn gamma/beta and
 * running statistics, so every term of every layer is exercised. */
static void s_random_params(net_t *net, rng_t *r) {
    net_init_params(net, rng_u64(r));
    for (int i = 0; i < net->n_layers; i++) {
        layer_t *l = &net->layers[i];
        if (l->kind == LAYER_BATCHNORM) {
            for (int c = 0; c < l->c; c++) {
                l->weight[c] = (float)(1.0 + 0.3 * rng_normal(r));
                l->bias[c] = (float)(0.3 * rng_normal(r));
                l->run_mean[c] = (float)(0.5 * rng_normal(r));
                l->run_var[c] = (float)(0.5 + rng_uniform(r));
            }
        } else if (l->bias) {
            for (size_t j = 0; j < l->n_b; j++) l->bias[j] = (float)(rng_uniform(r) - 0.5);
        }
    }
}

static void s_fill_normal(rng_t *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(r);
}

static void s_fill_uniform(rng_t *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_uniform(r);
}

static void s_fill_labels(rng_t *r, int *y, int n, int classes) {
    for (int i = 0; i < n; i++) y[i] = (int)rng_below(r, (uint32_t)classes);
}

/* ---- (a) CPU backend == direct calls ------------------------------------------------ */

static const char *s_cpu_models[] = {
    /* conv (kfc, avg), bn, relu, add, tanh, maxpool, dropout, avgpool, flatten, fc */
    "input 2x8x8\n"
    "conv name=c1 out=4 k=3 pad=1\nbatchnorm name=bn1\nrelu name=r1\n"
    "conv name=c2 out=4 k=3 pad=1 kfac=avg\nadd name=a1 from=r1\ntanh\n"
    "maxpool k=2\ndropout p=0.3\navgpool k=2\nflatten\nfc name=f1 out=6\nsoftmax_xent\n",
    /* doubly-factored fc on a feature map, layers without bias */
    "input 3x6x6\nconv name=c1 out=5 k=3 pad=1 bias=0\nrelu\nfc name=f1 out=8 kfac=doubly\nrelu\n"
    "fc name=f2 out=4 bias=0\nsoftmax_xent\n",
    /* strided conv, global average pooling */
    "input 3x5x7\nconv name=c1 out=4 k=3 stride=2 pad=1\navgpool global\nfc name=f1 out=3\nsoftmax_xent\n",
};

/* Every layer's y equal, bit for bit. */
static void s_assert_layers_equal(backend_t *b, const net_t *ref, int n, int with_dy, const char *what) {
    for (int li = 0; li < ref->n_layers; li++) {
        const layer_t *l = &ref->layers[li];
        if (l->kind == LAYER_SOFTMAX_XENT) continue;
        size_t len = (size_t)n * l->size;
        float *y = malloc(len * sizeof(float)), *dy = malloc(len * sizeof(float));
        ck_assert_ptr_nonnull(y);
        ck_assert_ptr_nonnull(dy);
        ck_assert_int_eq(backend_layer_copy(b, li, y, with_dy ? dy : NULL), 0);
        ck_assert_msg(memcmp(y, l->y, len * sizeof(float)) == 0, "%s: layer %s output differs", what, l->name);
        if (with_dy)
            ck_assert_msg(memcmp(dy, l->dy, len * sizeof(float)) == 0, "%s: layer %s dy differs", what, l->name);
        free(y);
        free(dy);
    }
}

START_TEST(test_backend_cpu_matches_direct_calls_bit_for_bit) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const char *text = s_cpu_models[_i];
    net_t *ref = s_build(text, TB_BATCH), *net = s_build(text, TB_BATCH);
    s_random_params(ref, &r);
    net->dropout_seed = ref->dropout_seed;
    char err[512];
    backend_t *b = backend_new(BACKEND_CPU, net, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    ck_assert_int_eq(backend_kind(b), BACKEND_CPU);
    ck_assert_msg(strncmp(backend_describe(b), "cpu", 3) == 0, "%s", backend_describe(b));
    /* The backend takes the reference's arrays: they are copied into net. */
    ck_assert_int_eq(backend_set_params(b, ref->params, ref->state), 0);
    ck_assert(memcmp(net->params, ref->params, ref->n_params * sizeof(float)) == 0);

    kfac_stats_t *s_ref = kfac_stats_new(ref), *s_b = kfac_stats_new(net);
    ck_assert_ptr_nonnull(s_ref);
    ck_assert_ptr_nonnull(s_b);
    const int n = TB_BATCH - 2, K = ref->n_classes;
    float *x = malloc((size_t)n * ref->in_size * sizeof(float));
    float *probs = malloc((size_t)n * K * sizeof(float));
    int *y = malloc((size_t)n * sizeof(int));
    ck_assert(x && probs && y);
    for (int pass = 0; pass < 3; pass++) { /* train, train again (seeds advance), eval */
        const int train = pass < 2;
        s_fill_normal(&r, x, (size_t)n * ref->in_size);
        s_fill_labels(&r, y, n, K);
        ck_assert_int_eq(net_forward(ref, x, n, train), 0);
        ck_assert_int_eq(backend_forward(b, x, n, train), 0);
        s_assert_layers_equal(b, ref, n, 0, "forward");
        ck_assert_int_eq(backend_probs(b, probs), 0);
        ck_assert(memcmp(probs, net_probs(ref), (size_t)n * K * sizeof(float)) == 0);
        int hits_ref = -1, hits = -2;
        float loss_ref = net_backward(ref, y, NULL, &hits_ref), loss = -1.0f;
        ck_assert_int_eq(backend_backward(b, y, 1, &loss, &hits), 0);
        ck_assert(memcmp(&loss, &loss_ref, sizeof loss) == 0);
        ck_assert_int_eq(hits, hits_ref);
        ck_assert(memcmp(net->grads, ref->grads, ref->n_params * sizeof(float)) == 0);
        ck_assert(ref->n_state == 0 || memcmp(net->state, ref->state, ref->n_state * sizeof(float)) == 0);
        ck_assert(net->dropout_seed == ref->dropout_seed);
        s_assert_layers_equal(b, ref, n, 1, "backward");
        ck_assert_int_eq(kfac_stats_compute(s_ref, ref), 0);
        ck_assert_int_eq(backend_stats(b, s_b), 0);
        ck_assert(memcmp(s_b->arena, s_ref->arena, s_ref->n_floats * sizeof(float)) == 0);
        for (int j = 0; j < s_ref->n_layers; j++)
            for (int k = 0; k < s_ref->layers[j].n_factors; k++) {
                ck_assert(s_b->layers[j].f[k].n_samples == s_ref->layers[j].f[k].n_samples);
                ck_assert_int_eq(s_b->layers[j].f[k].n_updates, s_ref->layers[j].f[k].n_updates);
            }
    }
    free(x);
    free(probs);
    free(y);
    kfac_stats_free(&s_ref);
    kfac_stats_free(&s_b);
    backend_free(&b);
    ck_assert_ptr_null(b);
    net_free(&ref);
    net_free(&net);
}
END_TEST

/* ---- (c) without a GPU, bad calls ------------------------------------------------------ */

START_TEST(test_backend_cuda_without_gpu_fails_clearly_and_auto_falls_back) {
    net_t *net = s_build("input 1x4x4\nflatten\nfc out=3\nsoftmax_xent\n", 4);
    char why[512], err[512];
    int gpu = backend_gpu_probe(why, sizeof why);
    backend_t *b = backend_new(BACKEND_CUDA, net, err, sizeof err);
    if (gpu) {
        ck_assert_msg(b != NULL, "a GPU answers but the CUDA backend failed: %s", err);
        ck_assert_int_eq(backend_kind(b), BACKEND_CUDA);
        ck_assert_msg(strncmp(backend_describe(b), "cuda: ", 6) == 0, "%s", backend_describe(b));
        backend_free(&b);
    } else {
        ck_assert_ptr_null(b);
        ck_assert_msg(strstr(why, "no GPU") || strstr(why, "built without CUDA") || strstr(why, "no usable GPU"),
                      "probe reason: %s", why);
        ck_assert_msg(strstr(err, "no GPU") || strstr(err, "built without CUDA") || strstr(err, "no usable GPU"),
                      "message: %s", err);
    }
    b = backend_new(BACKEND_AUTO, net, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    ck_assert_int_eq(backend_kind(b), gpu ? BACKEND_CUDA : BACKEND_CPU);
    backend_free(&b);
    backend_free(&b); /* idempotent */
    backend_free(NULL);
    net_free(&net);
}
END_TEST

START_TEST(test_backend_rejects_bad_calls) {
    net_t *net = s_build("input 1x4x4\nflatten\nfc out=3\nsoftmax_xent\n", 4);
    char err[512];
    backend_t *b = backend_new(BACKEND_AUTO, net, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    float x[4 * 16], probs[4 * 3];
    memset(x, 0, sizeof x);
    int y[4] = {0, 1, 2, 0}, bad[4] = {0, 3, 0, 0};
    kfac_stats_t *s = kfac_stats_new(net);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(backend_probs(b, probs), -EINVAL);       /* no forward pass yet */
    ck_assert_int_eq(backend_backward(b, y, 1, NULL, NULL), -EINVAL);
    ck_assert_int_eq(backend_layer_copy(b, 0, x, NULL), -EINVAL);
    ck_assert_int_eq(backend_forward(b, x, 0, 1), -EINVAL);   /* n out of range */
    ck_assert_int_eq(backend_forward(b, x, 5, 1), -EINVAL);
    ck_assert_int_eq(backend_forward(b, NULL, 2, 1), -EINVAL);
    ck_assert_int_eq(backend_forward(b, x, 4, 1), 0);
    ck_assert_int_eq(backend_stats(b, s), -EINVAL);           /* no backward pass yet */
    ck_assert_int_eq(backend_layer_copy(b, 1, NULL, x), -EINVAL);
    ck_assert_int_eq(backend_backward(b, bad, 1, NULL, NULL), -EINVAL); /* label 3 of 3 classes */
    ck_assert_int_eq(backend_backward(b, NULL, 1, NULL, NULL), -EINVAL);
    ck_assert_int_eq(backend_backward(b, y, 1, NULL, NULL), 0);
    ck_assert_int_eq(backend_stats(b, s), 0);
    ck_assert_int_eq(backend_stats(b, NULL), -EINVAL);
    ck_assert_int_eq(backend_layer_copy(b, 2, x, NULL), -EINVAL);  /* softmax_xent has no y */
    ck_assert_int_eq(backend_layer_copy(b, 3, x, NULL), -EINVAL);  /* no such layer */
    ck_assert_int_eq(backend_layer_copy(b, -1, x, NULL), -EINVAL);
    ck_assert_int_eq(backend_failed(b), 0);                        /* bad calls leave it usable */
    ck_assert_int_eq(backend_forward(NULL, x, 1, 1), -EINVAL);
    ck_assert_ptr_null(backend_new(BACKEND_CPU, NULL, err, sizeof err));
    ck_assert_ptr_null(backend_new((backend_kind_t)42, net, err, sizeof err));
    kfac_stats_free(&s);
    backend_free(&b);
    net_free(&net);
}
END_TEST

START_TEST(test_backend_kind_parse_and_names) {
    backend_kind_t k = BACKEND_CPU;
    ck_assert_int_eq(backend_kind_parse("auto", &k), 0);
    ck_assert_int_eq(k, BACKEND_AUTO);
    ck_assert_int_eq(backend_kind_parse("cpu", &k), 0);
    ck_assert_int_eq(k, BACKEND_CPU);
    ck_assert_int_eq(backend_kind_parse("cuda", &k), 0);
    ck_assert_int_eq(k, BACKEND_CUDA);
    ck_assert_int_eq(backend_kind_parse("gpu", &k), 0);
    ck_assert_int_eq(k, BACKEND_CUDA);
    ck_assert_int_eq(backend_kind_parse("tpu", &k), -EINVAL);
    ck_assert_int_eq(backend_kind_parse(NULL, &k), -EINVAL);
    ck_assert_str_eq(backend_kind_name(BACKEND_AUTO), "auto");
    ck_assert_str_eq(backend_kind_name(BACKEND_CPU), "cpu");
    ck_assert_str_eq(backend_kind_name(BACKEND_CUDA), "cuda");
    ck_assert_ptr_null(backend_kind_name((backend_kind_t)7));
}
END_TEST

/* ---- (b) CUDA == CPU ------------------------------------------------------------------- */

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

/* Make the CUDA backend or explain why not: 1 = go on, 0 = skip (printed). */
static int s_cuda_or_skip(net_t *net, backend_t **out, const char *test) {
    char why[512], err[512];
    if (!backend_gpu_probe(why, sizeof why)) {
        if (strncmp(why, "no GPU", 6) == 0) printf("%s: skipped: %s\n", test, why);
        else printf("%s: skipped: no GPU (%s)\n", test, why);
        return 0;
    }
    *out = backend_new(BACKEND_CUDA, net, err, sizeof err);
    ck_assert_msg(*out != NULL, "%s: a GPU answers but the CUDA backend failed: %s", test, err);
    ck_assert_int_eq(backend_kind(*out), BACKEND_CUDA);
    return 1;
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
    net_t *nc = s_build(text, TB_BATCH * 2), *ng = s_build(text, TB_BATCH * 2);
    backend_t *bg = NULL;
    if (!s_cuda_or_skip(ng, &bg, test)) {
        net_free(&nc);
        net_free(&ng);
        return;
    }
    char err[512];
    backend_t *bc = backend_new(BACKEND_CPU, nc, err, sizeof err);
    ck_assert_msg(bc != NULL, "%s", err);
    s_random_params(nc, &r);
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
        if (o.uniform_in) s_fill_uniform(&r, x, (size_t)n * nc->in_size);
        else s_fill_normal(&r, x, (size_t)n * nc->in_size);
        s_fill_labels(&r, y, n, K);
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
    Suite *s = suite_create("backend");
    TCase *tc = tcase_create("cpu");
    tcase_add_loop_test(tc, test_backend_cpu_matches_direct_calls_bit_for_bit, 0,
                        (int)(sizeof s_cpu_models / sizeof s_cpu_models[0]));
    tcase_add_test(tc, test_backend_cuda_without_gpu_fails_clearly_and_auto_falls_back);
    tcase_add_test(tc, test_backend_rejects_bad_calls);
    tcase_add_test(tc, test_backend_kind_parse_and_names);
    tcase_set_timeout(tc, 30); /* a GPU, if there, initializes cuDNN and cuBLAS per test */
    suite_add_tcase(s, tc);
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
    tcase_set_timeout(tg, 60);
    suite_add_tcase(s, tg);
    return s;
}
