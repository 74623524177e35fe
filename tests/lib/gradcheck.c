/* tests/lib/gradcheck.c — the finite-difference oracle of tests/nn/test_nn_grad.c
 * (method, step and tolerance in that file's header comment): random
 * parameters and inputs, a five-point stencil of the mean cross-entropy in
 * double, kink handling, and the comparison of every gradient tensor. */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/nn/nn.h"
#include "tests/lib/gradcheck.h"

int gc_between(rng_t *r, int lo, int hi) { return lo + (int)rng_below(r, (uint32_t)(hi - lo + 1)); }

/* Append printf output to a model text buffer. */
__attribute__((format(printf, 3, 4)))
void gc_cat(char *buf, size_t cap, const char *fmt, ...) {
    size_t len = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
    ck_assert_msg(w >= 0 && (size_t)w < cap - len, "model text buffer too small");
}

/* Threads of every net built here: 1, or 3 in the "threads" test case
 * (its fixture), where batches of 1-4 examples also leave parts empty. */
int gc_threads = 1;

/* Conv engine of every net built here: OpenBLAS, or oneDNN in the "onednn"
 * test cases (their fixture). */
nn_conv_engine_t gc_conv_engine = NN_CONV_ENGINE_BLAS;


net_t *gc_build(const char *text, int batch) {
    char err[512];
    net_t *net = net_parse(text, "gradcheck", batch, err, sizeof err);
    ck_assert_msg(net != NULL, "net_parse failed: %s\n%s", err, text);
    ck_assert_int_eq(net_set_threads(net, gc_threads), 0);
    ck_assert_msg(net_set_conv_engine(net, gc_conv_engine, err, sizeof err) == 0, "conv engine %s: %s",
                  nn_conv_engine_name(gc_conv_engine), err);
    return net;
}

void gc_fill_normal(rng_t *r, float *x, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * rng_normal(r));
}

/* Normal values with |x| > margin (rejection per element). */
void gc_fill_away_from_zero(rng_t *r, float *x, size_t n, double margin) {
    for (size_t i = 0; i < n; i++) {
        double v;
        do v = rng_normal(r); while (fabs(v) <= margin);
        x[i] = (float)v;
    }
}

/* Normal input for a max-pool window op on (n, C, H, W) such that in every
 * window the maximum exceeds every other in-image value by at least gap:
 * a too-close maximum is pushed up by gap, repeated until no window needs it. */
void gc_fill_pool_gaps(rng_t *r, float *x, int n, int C, int H, int W, int k, int s, int pad, double gap) {
    gc_fill_normal(r, x, (size_t)n * C * H * W, 1.0);
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
void gc_random_params(net_t *net, rng_t *r) {
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
int gc_gradcheck(net_t *net, float *x, int n, int train, int *labels, float *soft, uint64_t seed, int draw,
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
int *gc_labels(rng_t *r, int n, int K) {
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


/* Draw parameters and the input x (n, in_size). In train mode batch norm
 * divides by the batch standard deviation; when that is tiny the loss is
 * strongly curved on the scale of h and the finite difference is not
 * accurate, so both are redrawn until every bn channel's batch std is at
 * least GC_BN_MIN_STD. */
void gc_draw(rng_t *r, net_t *net, float *x, int n, int train, fill_fn fill, void *ctx) {
    for (int tries = 0; tries < 1000; tries++) {
        gc_random_params(net, r);
        if (fill) fill(r, x, net, n, ctx);
        else gc_fill_normal(r, x, (size_t)n * net->in_size, 1.0);
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

void gc_run(const char *text, rng_t *r, int n, int train, int soft_labels, fill_fn fill, void *ctx,
                  uint64_t seed, int draw, int max_skip_pct) {
    net_t *net = gc_build(text, n);
    float *x = malloc((size_t)n * net->in_size * sizeof(float));
    ck_assert(x);
    gc_draw(r, net, x, n, train, fill, ctx);
    int *labels = soft_labels ? NULL : gc_labels(r, n, net->n_classes);
    float *soft = soft_labels ? s_soft(r, n, net->n_classes) : NULL;
    gc_gradcheck(net, x, n, train, labels, soft, seed, draw, max_skip_pct);
    free(labels);
    free(soft);
    free(x);
    net_free(&net);
    ck_assert_ptr_null(net);
}
