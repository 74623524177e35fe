/* tests/nn/test_nn_grad.c — finite-difference checks of every layer's backward
 * pass (common/nn/nn.c), on fresh random inputs, parameters and small random
 * shapes each run. The seed is printed on failure; KFAC_TEST_SEED=<n>
 * replays a run.
 *
 * Method. Each test generates a tiny model text, builds it with net_parse,
 * draws parameters (net_init_params, then perturbed so biases and bn
 * parameters are not at their trivial init values) and inputs, runs
 * net_forward + net_backward, and compares
 *   - the gradient w.r.t. every parameter (net->grads), and
 *   - the gradient w.r.t. the input: every test model starts with the
 *     identity layer `dropout p=0 name=x0` (p = 0 is the identity in train
 *     and eval mode), so x0's dy is d(mean loss)/dx, i.e. the input gradient
 *     the layer under test (which reads x0) hands back,
 * with finite differences of the mean cross-entropy, recomputed here in
 * double from the float32 logits (net_backward's own loss is compared too).
 *
 * Step and tolerance. Values are O(1); h = 2^-7 (~0.0078) and the five-point
 * stencil (8 (L(h) - L(-h)) - (L(2h) - L(-2h))) / 12h, whose truncation
 * error h^4/30 |L^(5)| (~1e-10) is negligible. The forward runs in float32:
 * the loss carries a rounding error of ~5e-7, which the stencil turns into
 * ~1e-4 at worst (measured over 200 runs of this file: <= 7e-5). The
 * criterion, per tensor (each view of the parameter arena, and the input):
 *     max_j |a_j - fd_j| / max(max_j |a_j|, max_j |fd_j|, 1e-2) <= 2e-2.
 * The floor 1e-2 turns this into an absolute bound of 2e-4 for tensors
 * whose gradient is tiny or exactly zero (a conv bias before batch norm),
 * where the relative error would only measure rounding noise; elsewhere it
 * is a relative bound. Measured worst case over 200 runs: 7e-3, 3x below
 * the tolerance, while a wrong backward (missing term, wrong index, missing
 * 1/n, a lost accumulation) gives errors of order 1.
 *
 * Batch norm in train mode divides by the batch standard deviation; a tiny
 * one makes the loss strongly curved on the scale of h, so draws where any
 * channel's batch std is below 0.3 are rejected and redrawn.
 *
 * Kinks. relu at 0 and maxpool ties make the loss non-differentiable. Inputs
 * feeding them directly are generated away from kinks (|x| > 3h for relu; the
 * window maximum at least 4h above the runner-up for maxpool), and there no
 * coordinate may be skipped. In deeper models (relu after conv, residual
 * blocks) the kink pattern (relu input signs, maxpool argmax) is recorded at
 * the base point; a coordinate whose +-2h evaluations change it falls back
 * to the three-point central difference, one whose +-h evaluations change it
 * is skipped and counted (a conv weight moves every position, so up to 65%
 * may be skipped there; measured: median 5%, max 47%).
 *
 * Every check runs twice: with one thread, and (test case "threads") with
 * each pass split over 3 threads by net_set_threads.
 *
 * Dropout is checked with a fixed mask: net->dropout_seed is saved before the
 * training forward pass and restored before every finite-difference
 * evaluation, so each evaluation draws the same mask; its backward is also
 * checked exactly against the mask.
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/nn/nn.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"

#define GC_H 0x1p-7      /* finite-difference step, 0.0078 (values are O(1)) */
#define GC_TOL 2e-2      /* see the header comment */
#define GC_FLOOR 1e-2    /* gradient scale below which errors are absolute */
#define GC_KINK_PCT 65   /* most coordinates (%) skipped at kinks in deeper models */
#define GC_BN_MIN_STD 0.3 /* train-mode bn: smallest batch std of any channel */
#define GC_DRAWS 4       /* random draws (shapes, params, inputs) per test */

static int s_between(rng_t *r, int lo, int hi) { return lo + (int)rng_below(r, (uint32_t)(hi - lo + 1)); }

/* Append printf output to a model text buffer. */
__attribute__((format(printf, 3, 4)))
static void s_cat(char *buf, size_t cap, const char *fmt, ...) {
    size_t len = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
    ck_assert_msg(w >= 0 && (size_t)w < cap - len, "model text buffer too small");
}

/* Threads of every net built here: 1, or 3 in the "threads" test case
 * (its fixture), where batches of 1-4 examples also leave parts empty. */
static int s_threads = 1;

static void s_use_3_threads(void) { s_threads = 3; }

static net_t *s_build(const char *text, int batch) {
    char err[512];
    net_t *net = net_parse(text, "gradcheck", batch, err, sizeof err);
    ck_assert_msg(net != NULL, "net_parse failed: %s\n%s", err, text);
    ck_assert_int_eq(net_set_threads(net, s_threads), 0);
    return net;
}

static void s_fill_normal(rng_t *r, float *x, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * rng_normal(r));
}

/* Normal values with |x| > margin (rejection per element). */
static void s_fill_away_from_zero(rng_t *r, float *x, size_t n, double margin) {
    for (size_t i = 0; i < n; i++) {
        double v;
        do v = rng_normal(r); while (fabs(v) <= margin);
        x[i] = (float)v;
    }
}

/* Normal input for a max-pool window op on (n, C, H, W) such that in every
 * window the maximum exceeds every other in-image value by at least gap:
 * a too-close maximum is pushed up by gap, repeated until no window needs it. */
static void s_fill_pool_gaps(rng_t *r, float *x, int n, int C, int H, int W, int k, int s, int pad, double gap) {
    s_fill_normal(r, x, (size_t)n * C * H * W, 1.0);
    const int OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
    for (int sweep = 0; sweep < 1000; sweep++) {
        int changed = 0;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < C; c++) {
                float *xc = x + ((size_t)i * C + c) * H * W;
                for (int oy = 0; oy < OH; oy++)
                    for (int ox = 0; ox < OW; ox++) {
                        int best = -1;
                        double second = -INFINITY;
                        for (int ky = 0; ky < k; ky++)
                            for (int kx = 0; kx < k; kx++) {
                                int iy = oy * s - pad + ky, ix = ox * s - pad + kx;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                int q = iy * W + ix;
                                if (best < 0 || xc[q] > xc[best]) {
                                    if (best >= 0) second = xc[best];
                                    best = q;
                                } else if (xc[q] > second) {
                                    second = xc[q];
                                }
                            }
                        if (best >= 0 && xc[best] - second < gap) { xc[best] = (float)(second + 2 * gap); changed = 1; }
                    }
            }
        if (!changed) return;
    }
    ck_abort_msg("could not generate max-pool input without near-ties");
}

/* Draw parameters: the library's init, then perturbed so that biases, bn
 * gamma/beta are generic (not 0 / 1) and bn running statistics are random. */
static void s_random_params(net_t *net, rng_t *r) {
    net_init_params(net, rng_u64(r));
    for (int i = 0; i < net->n_layers; i++) {
        layer_t *l = &net->layers[i];
        if (l->kind == LAYER_FC || l->kind == LAYER_CONV) {
            for (size_t j = 0; j < l->n_w; j++) l->weight[j] += (float)(0.1 * rng_normal(r));
            for (size_t j = 0; j < l->n_b; j++) l->bias[j] = (float)(0.3 * rng_normal(r));
        } else if (l->kind == LAYER_BATCHNORM) {
            for (int c = 0; c < l->c; c++) {
                l->weight[c] = (float)(1.0 + 0.3 * rng_normal(r));
                l->bias[c] = (float)(0.3 * rng_normal(r));
                l->run_mean[c] = (float)(0.5 * rng_normal(r));
                l->run_var[c] = (float)(0.5 + rng_uniform(r));
            }
        }
    }
}

/* ---- the gradient checker ----------------------------------------------- */

typedef struct gc {
    net_t *net;
    float *x;          /* (n, in_size) input, perturbed in place */
    int n;
    int train;
    int *labels;       /* (n) hard labels, or NULL */
    float *soft;       /* (n, K) soft labels, or NULL */
    uint64_t dseed;    /* dropout seed replayed before every forward */
    unsigned char *sig0, *sig; /* kink signatures: base point, current */
    size_t sig_len;
} gc_t;

/* Kink signature of the last forward pass: relu input signs and maxpool
 * argmax indices. Returns its length; buf may be NULL to measure. */
static size_t s_kink_sig(const net_t *net, unsigned char *buf) {
    size_t k = 0;
    const int n = net->batch_n;
    for (int li = 0; li < net->n_layers; li++) {
        const layer_t *l = &net->layers[li];
        const size_t sz = (size_t)n * l->size;
        if (l->kind == LAYER_RELU) {
            const float *in = net_layer_input(net, l);
            for (size_t j = 0; j < sz; j++, k++) if (buf) buf[k] = in[j] > 0.0f;
        } else if (l->kind == LAYER_MAXPOOL) {
            if (buf) memcpy(buf + k, l->argmax, sz * sizeof(int32_t));
            k += sz * sizeof(int32_t);
        }
    }
    return k;
}

/* Mean cross-entropy of the net on g's batch, forward in float32, loss in
 * double from the logits. */
static double s_loss(gc_t *g) {
    net_t *net = g->net;
    net->dropout_seed = g->dseed;
    ck_assert_int_eq(net_forward(net, g->x, g->n, g->train), 0);
    const float *z = net_logits(net);
    const int K = net->n_classes;
    double L = 0.0;
    for (int i = 0; i < g->n; i++) {
        const float *zi = z + (size_t)i * K;
        double m = zi[0], s = 0.0;
        for (int k = 1; k < K; k++) if (zi[k] > m) m = zi[k];
        for (int k = 0; k < K; k++) s += exp((double)zi[k] - m);
        double lse = m + log(s);
        if (g->labels) L += lse - zi[g->labels[i]];
        else for (int k = 0; k < K; k++) L += (double)g->soft[(size_t)i * K + k] * (lse - zi[k]);
    }
    return L / g->n;
}

/* Five-point central difference of the loss w.r.t. *v (a float in params
 * or x):
 *     (8 (L(v+h) - L(v-h)) - (L(v+2h) - L(v-2h))) / (12 h),
 * truncation error h^4/30 |L^(5)|. h is a power of two, so v +- h is exact
 * in float32 except where it crosses a binade (error <= ulp(v)/h, ~1e-5
 * relative). When an evaluation at +-2h changes the kink signature but
 * those at +-h do not, the three-point (L(v+h) - L(v-h)) / (2h) is used
 * (truncation h^2/6 |L^(3)|, ~1e-5 |L^(3)|); when one at +-h changes it,
 * *kinked is set and the value is meaningless. */
static double s_fd(gc_t *g, float *v, int *kinked) {
    static const int steps[4] = {1, -1, 2, -2};
    const float v0 = *v;
    double L[4];
    int k[4];
    for (int s = 0; s < 4; s++) {
        *v = (float)(v0 + steps[s] * GC_H);
        L[s] = s_loss(g);
        s_kink_sig(g->net, g->sig);
        k[s] = memcmp(g->sig, g->sig0, g->sig_len) != 0;
    }
    *v = v0;
    *kinked = k[0] || k[1];
    if (k[2] || k[3]) return (L[0] - L[1]) / (2.0 * GC_H);
    return (8.0 * (L[0] - L[1]) - (L[2] - L[3])) / (12.0 * GC_H);
}

/* Compare analytic a (n) with finite differences of the values v (n). */
static void s_compare(gc_t *g, const char *what, const float *a, float *v, size_t n, uint64_t seed, int draw,
                      int *n_checked, int *n_skipped) {
    double num = 0.0, amax = 0.0, fdmax = 0.0, wa = 0.0, wf = 0.0;
    size_t worst = 0;
    for (size_t j = 0; j < n; j++) {
        int kinked;
        double fd = s_fd(g, &v[j], &kinked);
        if (kinked) { (*n_skipped)++; continue; }
        (*n_checked)++;
        double d = fabs(a[j] - fd);
        if (d > num) { num = d; worst = j; wa = a[j]; wf = fd; }
        if (fabs(a[j]) > amax) amax = fabs(a[j]);
        if (fabs(fd) > fdmax) fdmax = fabs(fd);
    }
    double den = fmax(fmax(amax, fdmax), GC_FLOOR);
    double err = num / den;
    if (!(err <= GC_TOL)) fprintf(stderr, "gradient check failed on model:\n%s\n", g->net->source);
    ck_assert_msg(err <= GC_TOL,
                  "%s: relative error %.3g > %.g (worst [%zu]: analytic %.6g, finite difference %.6g, scale %.3g) "
                  "seed=%llu draw=%d",
                  what, err, GC_TOL, worst, wa, wf, den, (unsigned long long)seed, draw);
}

/* Full check of the current model: loss value, every parameter view and the
 * input gradient (x0's dy). max_skip_pct bounds the coordinates skipped at
 * kinks. Returns the number of coordinates checked. */
static int s_gradcheck(net_t *net, float *x, int n, int train, int *labels, float *soft, uint64_t seed, int draw,
                       int max_skip_pct) {
    gc_t g = {net, x, n, train, labels, soft, net->dropout_seed, NULL, NULL, 0};
    double L0 = s_loss(&g);
    float loss = net_backward(net, labels, soft, NULL);
    /* net_loss is float32 with log(p + 1e-30): agrees to float rounding */
    ck_assert_msg(fabs(loss - L0) <= 1e-5 * fmax(1.0, L0), "loss %.8g vs double %.8g seed=%llu", loss, L0,
                  (unsigned long long)seed);
    g.sig_len = s_kink_sig(net, NULL);
    g.sig0 = malloc(g.sig_len + 1);
    g.sig = malloc(g.sig_len + 1);
    ck_assert(g.sig0 && g.sig);
    s_kink_sig(net, g.sig0);
    float *ga = malloc((net->n_params + 1) * sizeof(float));
    const int xi = net_find_layer(net, "x0");
    ck_assert_msg(xi >= 0, "test model needs the identity layer x0");
    const size_t nx = (size_t)n * net->in_size;
    float *dxa = malloc(nx * sizeof(float));
    ck_assert(ga && dxa);
    memcpy(ga, net->grads, net->n_params * sizeof(float));
    memcpy(dxa, net->layers[xi].dy, nx * sizeof(float));
    int checked = 0, skipped = 0;
    char what[96];
    for (int vi = 0; vi < net->n_views; vi++) {
        const net_view_t *vw = &net->views[vi];
        snprintf(what, sizeof what, "d loss / d %s", vw->name);
        s_compare(&g, what, ga + vw->off, net->params + vw->off, vw->n, seed, draw, &checked, &skipped);
    }
    s_compare(&g, "d loss / d input", dxa, x, nx, seed, draw, &checked, &skipped);
    ck_assert_msg(skipped * 100 <= max_skip_pct * (checked + skipped),
                  "%d of %d coordinates sit within h of a kink (allowed %d%%) seed=%llu draw=%d", skipped,
                  checked + skipped, max_skip_pct, (unsigned long long)seed, draw);
    free(ga);
    free(dxa);
    free(g.sig0);
    free(g.sig);
    return checked;
}

/* Random hard labels (n) in [0, K). */
static int *s_labels(rng_t *r, int n, int K) {
    int *y = malloc((size_t)n * sizeof(int));
    ck_assert(y);
    for (int i = 0; i < n; i++) y[i] = (int)rng_below(r, (uint32_t)K);
    return y;
}

/* Random soft labels (n, K): positive rows summing to 1. */
static float *s_soft(rng_t *r, int n, int K) {
    float *t = malloc((size_t)n * K * sizeof(float));
    ck_assert(t);
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int k = 0; k < K; k++) { t[(size_t)i * K + k] = (float)(0.05 + rng_uniform(r)); s += t[(size_t)i * K + k]; }
        for (int k = 0; k < K; k++) t[(size_t)i * K + k] = (float)(t[(size_t)i * K + k] / s);
    }
    return t;
}

/* Build text, random params, inputs from fill (or normal), labels, run the
 * check, free. fill may be NULL (standard normal inputs). */
typedef void (*fill_fn)(rng_t *r, float *x, const net_t *net, int n, void *ctx);

/* Draw parameters and the input x (n, in_size). In train mode batch norm
 * divides by the batch standard deviation; when that is tiny the loss is
 * strongly curved on the scale of h and the finite difference is not
 * accurate, so both are redrawn until every bn channel's batch std is at
 * least GC_BN_MIN_STD. */
static void s_draw(rng_t *r, net_t *net, float *x, int n, int train, fill_fn fill, void *ctx) {
    for (int tries = 0; tries < 1000; tries++) {
        s_random_params(net, r);
        if (fill) fill(r, x, net, n, ctx);
        else s_fill_normal(r, x, (size_t)n * net->in_size, 1.0);
        if (!train) return;
        uint64_t ds = net->dropout_seed;
        ck_assert_int_eq(net_forward(net, x, n, 1), 0);
        net->dropout_seed = ds;
        int ok = 1;
        for (int li = 0; li < net->n_layers; li++) {
            const layer_t *l = &net->layers[li];
            if (l->kind != LAYER_BATCHNORM) continue;
            for (int c = 0; c < l->c; c++) ok &= l->binvstd[c] <= 1.0 / GC_BN_MIN_STD;
        }
        if (ok) return;
    }
    ck_abort_msg("no well-conditioned batch-norm input in 1000 draws");
}

static void s_run(const char *text, rng_t *r, int n, int train, int soft_labels, fill_fn fill, void *ctx,
                  uint64_t seed, int draw, int max_skip_pct) {
    net_t *net = s_build(text, n);
    float *x = malloc((size_t)n * net->in_size * sizeof(float));
    ck_assert(x);
    s_draw(r, net, x, n, train, fill, ctx);
    int *labels = soft_labels ? NULL : s_labels(r, n, net->n_classes);
    float *soft = soft_labels ? s_soft(r, n, net->n_classes) : NULL;
    s_gradcheck(net, x, n, train, labels, soft, seed, draw, max_skip_pct);
    free(labels);
    free(soft);
    free(x);
    net_free(&net);
    ck_assert_ptr_null(net);
}

/* ---- per-layer tests ----------------------------------------------------- */

START_TEST(test_fc_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        char t[1024] = "";
        /* fc on a feature map (implicit flatten), then fc on a vector */
        s_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\n", s_between(&r, 1, 3), s_between(&r, 1, 3),
              s_between(&r, 1, 3));
        s_cat(t, sizeof t, "fc name=f1 out=%d bias=%d\ntanh\n", s_between(&r, 1, 6), (int)rng_below(&r, 2));
        s_cat(t, sizeof t, "fc name=f2 out=%d\nsoftmax_xent\n", s_between(&r, 2, 5));
        s_run(t, &r, s_between(&r, 1, 4), 1, 0, NULL, NULL, seed, d, 0);
    }
}
END_TEST

START_TEST(test_conv_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < 2 * GC_DRAWS; d++) {
        /* two stacked convs with random kernel, stride and padding: the
         * second one's dx (col2im) feeds the first one's dy */
        int C = s_between(&r, 1, 3), H = s_between(&r, 3, 7), W = s_between(&r, 3, 7);
        char t[1024] = "";
        s_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\n", C, H, W);
        for (int c = 0; c < 2; c++) {
            int k = s_between(&r, 1, 3), pad = s_between(&r, 0, k - 1), s = s_between(&r, 1, 3);
            if (H + 2 * pad < k || W + 2 * pad < k) pad = k - 1;
            s_cat(t, sizeof t, "conv name=c%d out=%d k=%d stride=%d pad=%d bias=%d\n", c + 1, s_between(&r, 1, 3), k,
                  s, pad, (int)rng_below(&r, 3) > 0);
            H = (H + 2 * pad - k) / s + 1;
            W = (W + 2 * pad - k) / s + 1;
        }
        s_cat(t, sizeof t, "fc out=%d\nsoftmax_xent\n", s_between(&r, 2, 4));
        s_run(t, &r, s_between(&r, 1, 3), 1, 0, NULL, NULL, seed, d, 0);
    }
}
END_TEST

START_TEST(test_tanh_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        char t[1024] = "";
        s_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\ntanh\nfc out=%d\nsoftmax_xent\n", s_between(&r, 1, 3),
              s_between(&r, 1, 4), s_between(&r, 1, 4), s_between(&r, 2, 4));
        s_run(t, &r, s_between(&r, 1, 4), 1, 0, NULL, NULL, seed, d, 0);
    }
}
END_TEST

static void s_fill_relu_input(rng_t *r, float *x, const net_t *net, int n, void *ctx) {
    (void)ctx;
    s_fill_away_from_zero(r, x, (size_t)n * net->in_size, 3 * GC_H);
}

START_TEST(test_relu_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        /* relu directly on the input, which is drawn away from 0 by 2h: no
         * coordinate may be skipped */
        char t[1024] = "";
        s_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\nrelu\nfc out=%d\nsoftmax_xent\n",
              s_between(&r, 1, 3), s_between(&r, 1, 4), s_between(&r, 1, 4), s_between(&r, 2, 4));
        s_run(t, &r, s_between(&r, 1, 4), 1, 0, s_fill_relu_input, NULL, seed, d, 0);
    }
    for (int d = 0; d < GC_DRAWS; d++) {
        /* relu after a conv: kinks depend on the parameters; guarded */
        char t[1024] = "";
        s_cat(t, sizeof t, "input 2x%dx%d\ndropout p=0 name=x0\nconv out=3 k=3 pad=1\nrelu\nfc out=3\nsoftmax_xent\n",
              s_between(&r, 2, 5), s_between(&r, 2, 5));
        s_run(t, &r, 2, 1, 0, NULL, NULL, seed, d, GC_KINK_PCT);
    }
}
END_TEST

typedef struct pool_ctx { int k, s, pad; } pool_ctx_t;

static void s_fill_maxpool_input(rng_t *r, float *x, const net_t *net, int n, void *ctx) {
    const pool_ctx_t *p = ctx;
    s_fill_pool_gaps(r, x, n, net->in_c, net->in_h, net->in_w, p->k, p->s, p->pad, 4 * GC_H);
}

START_TEST(test_maxpool_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < 2 * GC_DRAWS; d++) {
        pool_ctx_t p;
        p.k = s_between(&r, 1, 3);
        p.s = s_between(&r, 1, 3);
        p.pad = s_between(&r, 0, p.k - 1);
        int H = s_between(&r, p.k, 6), W = s_between(&r, p.k, 6);
        char t[1024] = "";
        s_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\nmaxpool k=%d stride=%d pad=%d\nfc out=%d\nsoftmax_xent\n",
              s_between(&r, 1, 3), H, W, p.k, p.s, p.pad, s_between(&r, 2, 4));
        s_run(t, &r, s_between(&r, 1, 3), 1, 0, s_fill_maxpool_input, &p, seed, d, 0);
    }
}
END_TEST

START_TEST(test_avgpool_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < 2 * GC_DRAWS; d++) {
        int k = s_between(&r, 1, 3), s = s_between(&r, 1, 3), pad = s_between(&r, 0, k - 1);
        char t[1024] = "";
        s_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\n", s_between(&r, 1, 3), s_between(&r, k, 6),
              s_between(&r, k, 6));
        if (d % 3 == 2) s_cat(t, sizeof t, "avgpool global\n");
        else s_cat(t, sizeof t, "avgpool k=%d stride=%d pad=%d\n", k, s, pad);
        s_cat(t, sizeof t, "fc out=%d\nsoftmax_xent\n", s_between(&r, 2, 4));
        s_run(t, &r, s_between(&r, 1, 3), 1, 0, NULL, NULL, seed, d, 0);
    }
}
END_TEST

START_TEST(test_flatten_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        char t[1024] = "";
        s_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\nconv out=2 k=1\nflatten\nfc out=%d\nsoftmax_xent\n",
              s_between(&r, 1, 3), s_between(&r, 1, 4), s_between(&r, 1, 4), s_between(&r, 2, 4));
        s_run(t, &r, s_between(&r, 1, 3), 1, 0, NULL, NULL, seed, d, 0);
    }
}
END_TEST

START_TEST(test_dropout_grad_matches_fd_with_fixed_mask) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        const int n = s_between(&r, 2, 4), m = s_between(&r, 6, 12);
        const double p = 0.2 + 0.4 * rng_uniform(&r);
        char t[1024] = "";
        s_cat(t, sizeof t, "input 1x2x%d\ndropout p=0 name=x0\nfc name=f1 out=%d\ndropout name=drop p=%.3f\n",
              s_between(&r, 1, 3), m, p);
        s_cat(t, sizeof t, "fc name=f2 out=3\nsoftmax_xent\n");
        net_t *net = s_build(t, n);
        s_random_params(net, &r);
        float *x = malloc((size_t)n * net->in_size * sizeof(float));
        float *mask = malloc((size_t)n * m * sizeof(float));
        ck_assert(x && mask);
        s_fill_normal(&r, x, (size_t)n * net->in_size, 1.0);
        int *labels = s_labels(&r, n, 3);
        const layer_t *dl = &net->layers[net_find_layer(net, "drop")];
        const layer_t *f1 = &net->layers[net_find_layer(net, "f1")];

        /* the mask: 0 or 1/(1-p), and the same mask again when the seed is
         * replayed; a different one on the next pass */
        uint64_t ds = net->dropout_seed;
        ck_assert_int_eq(net_forward(net, x, n, 1), 0);
        memcpy(mask, dl->mask, (size_t)n * m * sizeof(float));
        const float scale = 1.0f / (1.0f - dl->p);
        int zeros = 0;
        for (int j = 0; j < n * m; j++) {
            ck_assert_msg(mask[j] == 0.0f || mask[j] == scale, "mask value %g seed=%llu", mask[j], (unsigned long long)seed);
            zeros += mask[j] == 0.0f;
        }
        net->dropout_seed = ds;
        ck_assert_int_eq(net_forward(net, x, n, 1), 0);
        ck_assert(memcmp(mask, dl->mask, (size_t)n * m * sizeof(float)) == 0);

        /* backward analytically from the mask: f1's dy (only fed by the
         * dropout) is exactly dy * mask */
        net_backward(net, labels, NULL, NULL);
        for (int j = 0; j < n * m; j++) ck_assert(f1->dy[j] == dl->dy[j] * mask[j]);

        /* eval mode is the identity */
        ck_assert_int_eq(net_forward(net, x, n, 0), 0);
        ck_assert(memcmp(dl->y, f1->y, (size_t)n * m * sizeof(float)) == 0);

        /* finite differences with the mask fixed; the mask must drop
         * something and keep something or the check is vacuous */
        int tries = 0;
        net->dropout_seed = ds;
        while (zeros == 0 || zeros == n * m) {
            ck_assert_msg(++tries < 100, "no mixed dropout mask in 100 tries");
            ds = rng_u64(&r);
            net->dropout_seed = ds;
            ck_assert_int_eq(net_forward(net, x, n, 1), 0);
            zeros = 0;
            for (int j = 0; j < n * m; j++) zeros += dl->mask[j] == 0.0f;
            net->dropout_seed = ds;
        }
        s_gradcheck(net, x, n, 1, labels, NULL, seed, d, 0);
        free(labels);
        free(mask);
        free(x);
        net_free(&net);
    }
}
END_TEST

static void s_bn_text(rng_t *r, char *t, size_t cap, int after_fc) {
    if (after_fc) {
        /* bn on a vector: statistics over the batch only */
        s_cat(t, cap, "input %dx%dx%d\ndropout p=0 name=x0\nfc out=%d\nbatchnorm name=bn\n", s_between(r, 1, 2),
              s_between(r, 1, 3), s_between(r, 1, 3), s_between(r, 2, 5));
    } else {
        /* bn directly on a feature map: the input gradient is bn's own */
        s_cat(t, cap, "input %dx%dx%d\ndropout p=0 name=x0\nbatchnorm name=bn\n", s_between(r, 1, 3),
              s_between(r, 1, 4), s_between(r, 1, 4));
    }
    s_cat(t, cap, "tanh\nfc out=%d\nsoftmax_xent\n", s_between(r, 2, 4));
}

START_TEST(test_batchnorm_train_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        char t[1024] = "";
        s_bn_text(&r, t, sizeof t, d & 1);
        /* n >= 3: batch statistics couple the examples */
        int n = s_between(&r, 3, 5);
        net_t *net = s_build(t, n);
        float *x = malloc((size_t)n * net->in_size * sizeof(float));
        ck_assert(x);
        s_draw(&r, net, x, n, 1, NULL, NULL);
        int *labels = s_labels(&r, n, net->n_classes);
        layer_t *bn = &net->layers[net_find_layer(net, "bn")];

        /* running statistics: r <- (1 - momentum) r + momentum * batch stat,
         * unbiased variance; checked in double from bn's input */
        float *rm0 = malloc((size_t)bn->c * sizeof(float)), *rv0 = malloc((size_t)bn->c * sizeof(float));
        ck_assert(rm0 && rv0);
        memcpy(rm0, bn->run_mean, (size_t)bn->c * sizeof(float));
        memcpy(rv0, bn->run_var, (size_t)bn->c * sizeof(float));
        ck_assert_int_eq(net_forward(net, x, n, 1), 0);
        const float *in = net_layer_input(net, bn);
        const int HW = bn->h * bn->w;
        for (int c = 0; c < bn->c; c++) {
            double s1 = 0, s2 = 0, M = (double)n * HW;
            for (int i = 0; i < n; i++)
                for (int q = 0; q < HW; q++) s1 += in[((size_t)i * bn->c + c) * HW + q];
            for (int i = 0; i < n; i++)
                for (int q = 0; q < HW; q++) {
                    double e = in[((size_t)i * bn->c + c) * HW + q] - s1 / M;
                    s2 += e * e;
                }
            double em = (1 - 0.1) * rm0[c] + 0.1 * (s1 / M), ev = (1 - 0.1) * rv0[c] + 0.1 * (s2 / (M - 1));
            ck_assert_msg(fabs(bn->run_mean[c] - em) <= 1e-5 * (1 + fabs(em)), "run_mean %g vs %g", bn->run_mean[c], em);
            ck_assert_msg(fabs(bn->run_var[c] - ev) <= 1e-5 * (1 + fabs(ev)), "run_var %g vs %g", bn->run_var[c], ev);
        }
        s_gradcheck(net, x, n, 1, labels, NULL, seed, d, 0);
        free(rm0);
        free(rv0);
        free(labels);
        free(x);
        net_free(&net);
    }
}
END_TEST

START_TEST(test_batchnorm_eval_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        char t[1024] = "";
        s_bn_text(&r, t, sizeof t, d & 1);
        /* running statistics are random (s_random_params); train = 0 */
        s_run(t, &r, s_between(&r, 1, 4), 0, 0, NULL, NULL, seed, d, 0);
    }
}
END_TEST

START_TEST(test_residual_add_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        /* A basic block: x0 fans out to the main branch and the shortcut
         * (identity, or a strided 1x1 conv projection), joined by add; the
         * block output fans out again into a second identity block. */
        const int C = s_between(&r, 1, 3), HW = s_between(&r, 3, 5);
        const int project = d & 1, C2 = project ? s_between(&r, 1, 3) : C, s = project ? s_between(&r, 1, 2) : 1;
        const int train = (d >> 1) & 1;
        char t[2048] = "";
        s_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\n", C, HW, HW);
        s_cat(t, sizeof t, "conv name=a1 out=%d k=3 stride=%d pad=1\nbatchnorm name=bn1\nrelu name=r1\n", C2, s);
        s_cat(t, sizeof t, "conv name=a2 out=%d k=3 pad=1\nbatchnorm name=bn2\n", C2);
        if (project) {
            s_cat(t, sizeof t, "conv name=proj out=%d k=1 stride=%d in=x0\nbatchnorm name=bnp\n", C2, s);
            s_cat(t, sizeof t, "add name=sum1 from=bn2\n");
        } else {
            s_cat(t, sizeof t, "add name=sum1 from=x0\n");
        }
        s_cat(t, sizeof t, "tanh name=out1\n");
        s_cat(t, sizeof t, "conv name=b1 out=%d k=3 pad=1\ntanh\nadd name=sum2 in=out1 from=b1\n", C2);
        s_cat(t, sizeof t, "avgpool global\nfc out=3\nsoftmax_xent\n");
        s_run(t, &r, s_between(&r, 2, 3), train, 0, NULL, NULL, seed, d, GC_KINK_PCT);
    }
}
END_TEST

START_TEST(test_softmax_xent_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        const int K = s_between(&r, 2, 6), soft = d & 1;
        char t[1024] = "";
        /* logits straight from the input: x0's dy is (p - t) / n itself */
        s_cat(t, sizeof t, "input %dx1x1\ndropout p=0 name=x0\nsoftmax_xent\n", K);
        s_run(t, &r, s_between(&r, 1, 4), 1, soft, NULL, NULL, seed, d, 0);
        t[0] = 0;
        s_cat(t, sizeof t, "input 1x%dx2\ndropout p=0 name=x0\nfc out=%d\nsoftmax_xent\n", s_between(&r, 1, 3), K);
        s_run(t, &r, s_between(&r, 1, 4), 1, soft, NULL, NULL, seed, d, 0);
    }
}
END_TEST

/* The convention of nn.h: dy is d(mean loss)/d(output), so the per-example
 * gradient w.r.t. a layer's output is n * dy[i], and grads are the mean of
 * the per-example gradients. Checked layer by layer against the same model
 * run on each example alone (eval mode, so examples do not interact), and
 * d loss/dx against finite differences of the mean loss. */
START_TEST(test_backward_dy_is_grad_of_mean_loss) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    const char *text =
        "input 2x6x6\n"
        "dropout p=0 name=x0\n"
        "conv name=c1 out=3 k=3 pad=1\n"
        "batchnorm name=bn1\n"
        "relu\n"
        "conv name=c2 out=3 k=3 pad=1\n"
        "add from=bn1\n"
        "maxpool k=2\n"
        "tanh\n"
        "dropout p=0.5\n"
        "avgpool k=2 stride=1\n"
        "flatten\n"
        "fc name=f1 out=4\n"
        "softmax_xent\n";
    for (int d = 0; d < GC_DRAWS; d++) {
        const int n = s_between(&r, 2, 5);
        net_t *net = s_build(text, n);
        s_random_params(net, &r);
        const size_t in_size = (size_t)net->in_size;
        float *x = malloc((size_t)n * in_size * sizeof(float));
        ck_assert(x);
        s_fill_normal(&r, x, (size_t)n * in_size, 1.0);
        int *labels = s_labels(&r, n, net->n_classes);

        ck_assert_int_eq(net_forward(net, x, n, 0), 0);
        net_backward(net, labels, NULL, NULL);
        size_t tot = 0;
        for (int li = 0; li < net->n_layers - 1; li++) tot += (size_t)n * net->layers[li].size;
        float *dy = malloc(tot * sizeof(float)), *g = malloc(net->n_params * sizeof(float));
        double *gsum = calloc(net->n_params, sizeof(double));
        ck_assert(dy && g && gsum);
        for (int li = 0, o = 0; li < net->n_layers - 1; o += n * net->layers[li].size, li++)
            memcpy(dy + o, net->layers[li].dy, (size_t)n * net->layers[li].size * sizeof(float));
        memcpy(g, net->grads, net->n_params * sizeof(float));

        /* one example at a time: its dy is n times the batch's row i (float
         * rounding only: relative 1e-4 of the layer's largest entry) */
        for (int i = 0; i < n; i++) {
            ck_assert_int_eq(net_forward(net, x + i * in_size, 1, 0), 0);
            net_backward(net, labels + i, NULL, NULL);
            for (size_t j = 0; j < net->n_params; j++) gsum[j] += net->grads[j];
            for (int li = 0, o = 0; li < net->n_layers - 1; o += n * net->layers[li].size, li++) {
                const layer_t *l = &net->layers[li];
                double amax = 1e-6, emax = 0;
                for (int j = 0; j < l->size; j++) {
                    double b = (double)n * dy[o + (size_t)i * l->size + j];
                    amax = fmax(amax, fabs(b));
                    emax = fmax(emax, fabs(b - l->dy[j]));
                }
                ck_assert_msg(emax <= 1e-4 * amax, "layer %s: n * dy[%d] differs from the single-example dy by %g "
                              "(scale %g) seed=%llu", l->name, i, emax, amax, (unsigned long long)seed);
            }
        }
        /* grads are the mean over examples of the per-example grads */
        double gmax = 1e-6, gerr = 0;
        for (size_t j = 0; j < net->n_params; j++) {
            gmax = fmax(gmax, fabs(g[j]));
            gerr = fmax(gerr, fabs(g[j] - gsum[j] / n));
        }
        ck_assert_msg(gerr <= 1e-4 * gmax, "grads are not the mean of per-example grads: %g (scale %g) seed=%llu",
                      gerr, gmax, (unsigned long long)seed);
        free(dy);
        free(g);
        free(gsum);

        /* and dy at the input is d(mean loss)/dx by finite differences */
        s_gradcheck(net, x, n, 0, labels, NULL, seed, d, GC_KINK_PCT);
        free(labels);
        free(x);
        net_free(&net);
    }
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("nn_grad");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fc_grad_matches_fd);
    tcase_add_test(tc, test_conv_grad_matches_fd);
    tcase_add_test(tc, test_tanh_grad_matches_fd);
    tcase_add_test(tc, test_relu_grad_matches_fd);
    tcase_add_test(tc, test_maxpool_grad_matches_fd);
    tcase_add_test(tc, test_avgpool_grad_matches_fd);
    tcase_add_test(tc, test_flatten_grad_matches_fd);
    tcase_add_test(tc, test_dropout_grad_matches_fd_with_fixed_mask);
    tcase_add_test(tc, test_batchnorm_train_grad_matches_fd);
    tcase_add_test(tc, test_batchnorm_eval_grad_matches_fd);
    tcase_add_test(tc, test_residual_add_grad_matches_fd);
    tcase_add_test(tc, test_softmax_xent_grad_matches_fd);
    tcase_add_test(tc, test_backward_dy_is_grad_of_mean_loss);
    suite_add_tcase(s, tc);
    /* The same checks with each pass split over 3 threads (net_set_threads). */
    TCase *tt = tcase_create("threads");
    tcase_set_timeout(tt, 60);
    tcase_add_checked_fixture(tt, s_use_3_threads, NULL);
    tcase_add_test(tt, test_fc_grad_matches_fd);
    tcase_add_test(tt, test_conv_grad_matches_fd);
    tcase_add_test(tt, test_relu_grad_matches_fd);
    tcase_add_test(tt, test_maxpool_grad_matches_fd);
    tcase_add_test(tt, test_avgpool_grad_matches_fd);
    tcase_add_test(tt, test_dropout_grad_matches_fd_with_fixed_mask);
    tcase_add_test(tt, test_batchnorm_train_grad_matches_fd);
    tcase_add_test(tt, test_residual_add_grad_matches_fd);
    tcase_add_test(tt, test_backward_dy_is_grad_of_mean_loss);
    suite_add_tcase(s, tt);
    return s;
}
