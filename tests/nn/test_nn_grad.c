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
#include "tests/lib/gradcheck.h"
#include "tests/lib/seed.h"

/* The "threads" test case: every net split over 3 threads. */
static void s_use_3_threads(void) { gc_threads = 3; }

/* The "onednn" test cases: conv layers on oneDNN (nn_dnnl.c), one and 3 threads. */
static void s_use_onednn(void) { gc_conv_engine = NN_CONV_ENGINE_ONEDNN; }
static void s_use_onednn_3_threads(void) { gc_conv_engine = NN_CONV_ENGINE_ONEDNN; gc_threads = 3; }

/* ---- per-layer tests ----------------------------------------------------- */

START_TEST(test_fc_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        char t[1024] = "";
        /* fc on a feature map (implicit flatten), then fc on a vector */
        gc_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\n", gc_between(&r, 1, 3), gc_between(&r, 1, 3),
              gc_between(&r, 1, 3));
        gc_cat(t, sizeof t, "fc name=f1 out=%d bias=%d\ntanh\n", gc_between(&r, 1, 6), (int)rng_below(&r, 2));
        gc_cat(t, sizeof t, "fc name=f2 out=%d\nsoftmax_xent\n", gc_between(&r, 2, 5));
        gc_run(t, &r, gc_between(&r, 1, 4), 1, 0, NULL, NULL, seed, d, 0);
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
        int C = gc_between(&r, 1, 3), H = gc_between(&r, 3, 7), W = gc_between(&r, 3, 7);
        char t[1024] = "";
        gc_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\n", C, H, W);
        for (int c = 0; c < 2; c++) {
            int k = gc_between(&r, 1, 3), pad = gc_between(&r, 0, k - 1), s = gc_between(&r, 1, 3);
            if (H + 2 * pad < k || W + 2 * pad < k) pad = k - 1;
            gc_cat(t, sizeof t, "conv name=c%d out=%d k=%d stride=%d pad=%d bias=%d\n", c + 1, gc_between(&r, 1, 3), k,
                  s, pad, (int)rng_below(&r, 3) > 0);
            H = (H + 2 * pad - k) / s + 1;
            W = (W + 2 * pad - k) / s + 1;
        }
        gc_cat(t, sizeof t, "fc out=%d\nsoftmax_xent\n", gc_between(&r, 2, 4));
        gc_run(t, &r, gc_between(&r, 1, 3), 1, 0, NULL, NULL, seed, d, 0);
    }
}
END_TEST

START_TEST(test_tanh_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        char t[1024] = "";
        gc_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\ntanh\nfc out=%d\nsoftmax_xent\n", gc_between(&r, 1, 3),
              gc_between(&r, 1, 4), gc_between(&r, 1, 4), gc_between(&r, 2, 4));
        gc_run(t, &r, gc_between(&r, 1, 4), 1, 0, NULL, NULL, seed, d, 0);
    }
}
END_TEST

static void s_fill_relu_input(rng_t *r, float *x, const net_t *net, int n, void *ctx) {
    (void)ctx;
    gc_fill_away_from_zero(r, x, (size_t)n * net->in_size, 3 * GC_H);
}

START_TEST(test_relu_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        /* relu directly on the input, which is drawn away from 0 by 2h: no
         * coordinate may be skipped */
        char t[1024] = "";
        gc_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\nrelu\nfc out=%d\nsoftmax_xent\n",
              gc_between(&r, 1, 3), gc_between(&r, 1, 4), gc_between(&r, 1, 4), gc_between(&r, 2, 4));
        gc_run(t, &r, gc_between(&r, 1, 4), 1, 0, s_fill_relu_input, NULL, seed, d, 0);
    }
    for (int d = 0; d < GC_DRAWS; d++) {
        /* relu after a conv: kinks depend on the parameters; guarded */
        char t[1024] = "";
        gc_cat(t, sizeof t, "input 2x%dx%d\ndropout p=0 name=x0\nconv out=3 k=3 pad=1\nrelu\nfc out=3\nsoftmax_xent\n",
              gc_between(&r, 2, 5), gc_between(&r, 2, 5));
        gc_run(t, &r, 2, 1, 0, NULL, NULL, seed, d, GC_KINK_PCT);
    }
}
END_TEST

typedef struct pool_ctx { int k, s, pad; } pool_ctx_t;

static void s_fill_maxpool_input(rng_t *r, float *x, const net_t *net, int n, void *ctx) {
    const pool_ctx_t *p = ctx;
    gc_fill_pool_gaps(r, x, n, net->in_c, net->in_h, net->in_w, p->k, p->s, p->pad, 4 * GC_H);
}

START_TEST(test_maxpool_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < 2 * GC_DRAWS; d++) {
        pool_ctx_t p;
        p.k = gc_between(&r, 1, 3);
        p.s = gc_between(&r, 1, 3);
        p.pad = gc_between(&r, 0, p.k - 1);
        int H = gc_between(&r, p.k, 6), W = gc_between(&r, p.k, 6);
        char t[1024] = "";
        gc_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\nmaxpool k=%d stride=%d pad=%d\nfc out=%d\nsoftmax_xent\n",
              gc_between(&r, 1, 3), H, W, p.k, p.s, p.pad, gc_between(&r, 2, 4));
        gc_run(t, &r, gc_between(&r, 1, 3), 1, 0, s_fill_maxpool_input, &p, seed, d, 0);
    }
}
END_TEST

START_TEST(test_avgpool_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < 2 * GC_DRAWS; d++) {
        int k = gc_between(&r, 1, 3), s = gc_between(&r, 1, 3), pad = gc_between(&r, 0, k - 1);
        char t[1024] = "";
        gc_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\n", gc_between(&r, 1, 3), gc_between(&r, k, 6),
              gc_between(&r, k, 6));
        if (d % 3 == 2) gc_cat(t, sizeof t, "avgpool global\n");
        else gc_cat(t, sizeof t, "avgpool k=%d stride=%d pad=%d\n", k, s, pad);
        gc_cat(t, sizeof t, "fc out=%d\nsoftmax_xent\n", gc_between(&r, 2, 4));
        gc_run(t, &r, gc_between(&r, 1, 3), 1, 0, NULL, NULL, seed, d, 0);
    }
}
END_TEST

START_TEST(test_flatten_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        char t[1024] = "";
        gc_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\nconv out=2 k=1\nflatten\nfc out=%d\nsoftmax_xent\n",
              gc_between(&r, 1, 3), gc_between(&r, 1, 4), gc_between(&r, 1, 4), gc_between(&r, 2, 4));
        gc_run(t, &r, gc_between(&r, 1, 3), 1, 0, NULL, NULL, seed, d, 0);
    }
}
END_TEST

START_TEST(test_dropout_grad_matches_fd_with_fixed_mask) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        const int n = gc_between(&r, 2, 4), m = gc_between(&r, 6, 12);
        const double p = 0.2 + 0.4 * rng_uniform(&r);
        char t[1024] = "";
        gc_cat(t, sizeof t, "input 1x2x%d\ndropout p=0 name=x0\nfc name=f1 out=%d\ndropout name=drop p=%.3f\n",
              gc_between(&r, 1, 3), m, p);
        gc_cat(t, sizeof t, "fc name=f2 out=3\nsoftmax_xent\n");
        net_t *net = gc_build(t, n);
        gc_random_params(net, &r);
        float *x = malloc((size_t)n * net->in_size * sizeof(float));
        float *mask = malloc((size_t)n * m * sizeof(float));
        ck_assert(x && mask);
        gc_fill_normal(&r, x, (size_t)n * net->in_size, 1.0);
        int *labels = gc_labels(&r, n, 3);
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
        gc_gradcheck(net, x, n, 1, labels, NULL, seed, d, 0);
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
        gc_cat(t, cap, "input %dx%dx%d\ndropout p=0 name=x0\nfc out=%d\nbatchnorm name=bn\n", gc_between(r, 1, 2),
              gc_between(r, 1, 3), gc_between(r, 1, 3), gc_between(r, 2, 5));
    } else {
        /* bn directly on a feature map: the input gradient is bn's own */
        gc_cat(t, cap, "input %dx%dx%d\ndropout p=0 name=x0\nbatchnorm name=bn\n", gc_between(r, 1, 3),
              gc_between(r, 1, 4), gc_between(r, 1, 4));
    }
    gc_cat(t, cap, "tanh\nfc out=%d\nsoftmax_xent\n", gc_between(r, 2, 4));
}

START_TEST(test_batchnorm_train_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        char t[1024] = "";
        s_bn_text(&r, t, sizeof t, d & 1);
        /* n >= 3: batch statistics couple the examples */
        int n = gc_between(&r, 3, 5);
        net_t *net = gc_build(t, n);
        float *x = malloc((size_t)n * net->in_size * sizeof(float));
        ck_assert(x);
        gc_draw(&r, net, x, n, 1, NULL, NULL);
        int *labels = gc_labels(&r, n, net->n_classes);
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
        gc_gradcheck(net, x, n, 1, labels, NULL, seed, d, 0);
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
        /* running statistics are random (gc_random_params); train = 0 */
        gc_run(t, &r, gc_between(&r, 1, 4), 0, 0, NULL, NULL, seed, d, 0);
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
        const int C = gc_between(&r, 1, 3), HW = gc_between(&r, 3, 5);
        const int project = d & 1, C2 = project ? gc_between(&r, 1, 3) : C, s = project ? gc_between(&r, 1, 2) : 1;
        const int train = (d >> 1) & 1;
        char t[2048] = "";
        gc_cat(t, sizeof t, "input %dx%dx%d\ndropout p=0 name=x0\n", C, HW, HW);
        gc_cat(t, sizeof t, "conv name=a1 out=%d k=3 stride=%d pad=1\nbatchnorm name=bn1\nrelu name=r1\n", C2, s);
        gc_cat(t, sizeof t, "conv name=a2 out=%d k=3 pad=1\nbatchnorm name=bn2\n", C2);
        if (project) {
            gc_cat(t, sizeof t, "conv name=proj out=%d k=1 stride=%d in=x0\nbatchnorm name=bnp\n", C2, s);
            gc_cat(t, sizeof t, "add name=sum1 from=bn2\n");
        } else {
            gc_cat(t, sizeof t, "add name=sum1 from=x0\n");
        }
        gc_cat(t, sizeof t, "tanh name=out1\n");
        gc_cat(t, sizeof t, "conv name=b1 out=%d k=3 pad=1\ntanh\nadd name=sum2 in=out1 from=b1\n", C2);
        gc_cat(t, sizeof t, "avgpool global\nfc out=3\nsoftmax_xent\n");
        gc_run(t, &r, gc_between(&r, 2, 3), train, 0, NULL, NULL, seed, d, GC_KINK_PCT);
    }
}
END_TEST

START_TEST(test_softmax_xent_grad_matches_fd) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < GC_DRAWS; d++) {
        const int K = gc_between(&r, 2, 6), soft = d & 1;
        char t[1024] = "";
        /* logits straight from the input: x0's dy is (p - t) / n itself */
        gc_cat(t, sizeof t, "input %dx1x1\ndropout p=0 name=x0\nsoftmax_xent\n", K);
        gc_run(t, &r, gc_between(&r, 1, 4), 1, soft, NULL, NULL, seed, d, 0);
        t[0] = 0;
        gc_cat(t, sizeof t, "input 1x%dx2\ndropout p=0 name=x0\nfc out=%d\nsoftmax_xent\n", gc_between(&r, 1, 3), K);
        gc_run(t, &r, gc_between(&r, 1, 4), 1, soft, NULL, NULL, seed, d, 0);
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
        const int n = gc_between(&r, 2, 5);
        net_t *net = gc_build(text, n);
        gc_random_params(net, &r);
        const size_t in_size = (size_t)net->in_size;
        float *x = malloc((size_t)n * in_size * sizeof(float));
        ck_assert(x);
        gc_fill_normal(&r, x, (size_t)n * in_size, 1.0);
        int *labels = gc_labels(&r, n, net->n_classes);

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
        gc_gradcheck(net, x, n, 0, labels, NULL, seed, d, GC_KINK_PCT);
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
    /* The checks that contain conv layers with them on oneDNN: its backward
     * passes are gradients of its own forward pass, to the same tolerance. */
    for (int t = 0; t < 2; t++) {
        TCase *to = tcase_create(t ? "onednn threads" : "onednn");
        tcase_set_timeout(to, 60);
        tcase_add_checked_fixture(to, t ? s_use_onednn_3_threads : s_use_onednn, NULL);
        tcase_add_test(to, test_conv_grad_matches_fd);
        tcase_add_test(to, test_residual_add_grad_matches_fd);
        tcase_add_test(to, test_backward_dy_is_grad_of_mean_loss);
        suite_add_tcase(s, to);
    }
    return s;
}
