/* tests/nn/test_nn_par.c — the fork-join pool of the network core
 * (common/nn/nn_par.h) and networks whose passes are split over threads
 * (net_set_threads), against the same network on one thread.
 *
 * The one-thread passes are checked against finite differences in
 * test_nn_grad.c (which also runs its checks on 3 threads); here the
 * threaded passes must give the one-thread results up to the order of
 * float32 sums: logits, loss, every parameter gradient and the input
 * gradient agree within SP_TOL of each tensor's largest magnitude (floor
 * 1e-3), on fresh random models, batches (1 to 9 examples, so some parts
 * are empty) and thread counts (2 to 4). Differences come only from the
 * conv weight gradient, summed per part and then across parts (measured:
 * below 1e-6 relative); a wrong slice, a lost part or a race gives errors
 * of order 1.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/nn/nn.h"
#include "common/nn/nn_par.h"
#include "tests/lib/seed.h"

#define SP_TOL 1e-4
#define SP_RUNS 300

typedef struct {
    atomic_int count[8];
    atomic_int bad_n;
    int expect_n;
} s_count_t;

static void s_count_part(void *arg, int part, int n_parts) {
    s_count_t *c = arg;
    if (n_parts != c->expect_n || part < 0 || part >= 8) atomic_fetch_add(&c->bad_n, 1);
    else atomic_fetch_add(&c->count[part], 1);
}

START_TEST(test_nn_par_runs_each_part_once_per_call) {
    for (int t = 1; t <= 4; t++) {
        nn_par_t *p = nn_par_new(t);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(nn_par_threads(p), t);
        s_count_t c;
        memset(&c, 0, sizeof c);
        c.expect_n = t;
        for (int i = 0; i < SP_RUNS; i++) {
            nn_par_run(p, s_count_part, &c);
            /* every part of this call is done when it returns */
            for (int k = 0; k < t; k++) ck_assert_int_eq(atomic_load(&c.count[k]), i + 1);
        }
        for (int k = t; k < 8; k++) ck_assert_int_eq(atomic_load(&c.count[k]), 0);
        ck_assert_int_eq(atomic_load(&c.bad_n), 0);
        nn_par_free(&p);
        ck_assert_ptr_null(p);
        nn_par_free(&p); /* NULL: no-op */
    }
    ck_assert_ptr_null(nn_par_new(0));
    /* a NULL pool runs the one part on the caller */
    s_count_t c;
    memset(&c, 0, sizeof c);
    c.expect_n = 1;
    nn_par_run(NULL, s_count_part, &c);
    ck_assert_int_eq(atomic_load(&c.count[0]), 1);
    ck_assert_int_eq(nn_par_threads(NULL), 1);
}
END_TEST

START_TEST(test_nn_par_range_partitions_in_order) {
    for (int n = 0; n <= 50; n++)
        for (int parts = 1; parts <= 8; parts++) {
            int prev_hi = 0, mn = n + 1, mx = -1;
            for (int k = 0; k < parts; k++) {
                int lo, hi;
                nn_par_range(n, k, parts, &lo, &hi);
                ck_assert_int_eq(lo, prev_hi);
                ck_assert_int_le(lo, hi);
                if (hi - lo < mn) mn = hi - lo;
                if (hi - lo > mx) mx = hi - lo;
                prev_hi = hi;
            }
            ck_assert_int_eq(prev_hi, n);
            ck_assert_int_le(mx - mn, 1);
        }
}
END_TEST

static int s_between(rng_t *r, int lo, int hi) { return lo + (int)rng_below(r, (uint32_t)(hi - lo + 1)); }

/* max |a - b| over max(max |a|, 1e-3), in double. */
static double s_rel_err(const float *a, const float *b, size_t n) {
    double err = 0.0, scale = 1e-3;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)a[i] - (double)b[i]));
        scale = fmax(scale, fabs((double)a[i]));
    }
    return err / scale;
}

START_TEST(test_net_threads_match_one_thread) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int d = 0; d < 12; d++) {
        const int C = s_between(&r, 1, 3), HW = s_between(&r, 6, 12), n = s_between(&r, 1, 9);
        const int threads = s_between(&r, 2, 4), train = d & 1;
        char text[1024];
        snprintf(text, sizeof text,
                 "input %dx%dx%d\ndropout p=0 name=x0\nconv name=c1 out=%d k=3 pad=1\nrelu\nmaxpool k=2\n"
                 "conv name=c2 out=%d k=%d pad=1 stride=%d\ntanh\navgpool k=2\nflatten\nfc name=f1 out=%d\nrelu\n"
                 "dropout p=0.25\nfc name=f2 out=%d\nsoftmax_xent\n",
                 C, HW, HW, s_between(&r, 1, 5), s_between(&r, 1, 6), s_between(&r, 2, 3), s_between(&r, 1, 2),
                 s_between(&r, 2, 9), s_between(&r, 2, 5));
        char err[512];
        net_t *a = net_parse(text, "par", n, err, sizeof err), *b = net_parse(text, "par", n, err, sizeof err);
        ck_assert_msg(a && b, "%s\n%s", err, text);
        net_init_params(a, seed + (uint64_t)d);
        memcpy(b->params, a->params, a->n_params * sizeof(float));
        b->dropout_seed = a->dropout_seed;
        ck_assert_int_eq(net_set_threads(b, threads), 0);
        ck_assert_int_eq(net_threads(b), threads);
        float *x = malloc((size_t)n * a->in_size * sizeof(float));
        int *y = malloc((size_t)n * sizeof(int));
        ck_assert(x && y);
        for (size_t i = 0; i < (size_t)n * a->in_size; i++) x[i] = (float)rng_normal(&r);
        for (int i = 0; i < n; i++) y[i] = (int)rng_below(&r, (uint32_t)a->n_classes);
        for (int rep = 0; rep < 2; rep++) { /* twice: the second pass reuses every buffer */
            ck_assert_int_eq(net_forward(a, x, n, train), 0);
            ck_assert_int_eq(net_forward(b, x, n, train), 0);
            double e = s_rel_err(net_logits(a), net_logits(b), (size_t)n * a->n_classes);
            ck_assert_msg(e <= SP_TOL, "logits differ by %g (threads %d, n %d, seed %llu)\n%s", e, threads, n,
                          (unsigned long long)seed, text);
            float la = net_backward(a, y, NULL, NULL), lb = net_backward(b, y, NULL, NULL);
            ck_assert_msg(fabs((double)la - lb) <= SP_TOL * fmax(1.0, fabs((double)la)), "loss %g vs %g", la, lb);
            for (int v = 0; v < a->n_views; v++) {
                const net_view_t *vw = &a->views[v];
                e = s_rel_err(a->grads + vw->off, b->grads + vw->off, vw->n);
                ck_assert_msg(e <= SP_TOL, "gradient %s differs by %g (threads %d, n %d, seed %llu)\n%s", vw->name, e,
                              threads, n, (unsigned long long)seed, text);
            }
            /* x0's dy: the input gradient, through every layer's dx */
            e = s_rel_err(a->layers[0].dy, b->layers[0].dy, (size_t)n * a->in_size);
            ck_assert_msg(e <= SP_TOL, "input gradient differs by %g (threads %d, n %d, seed %llu)", e, threads, n,
                          (unsigned long long)seed);
        }
        /* back to one thread: the same code as a, bit for bit */
        ck_assert_int_eq(net_set_threads(b, 1), 0);
        ck_assert_int_eq(net_threads(b), 1);
        b->dropout_seed = a->dropout_seed;
        net_forward(a, x, n, train);
        net_forward(b, x, n, train);
        net_backward(a, y, NULL, NULL);
        net_backward(b, y, NULL, NULL);
        ck_assert_int_eq(memcmp(a->grads, b->grads, a->n_params * sizeof(float)), 0);
        free(x);
        free(y);
        net_free(&a);
        net_free(&b);
    }
}
END_TEST

START_TEST(test_net_set_threads_rejects_bad_counts) {
    char err[256];
    net_t *net = net_parse("input 1x4x4\nflatten\nfc out=2\nsoftmax_xent\n", "par", 4, err, sizeof err);
    ck_assert_ptr_nonnull(net);
    ck_assert_int_eq(net_set_threads(net, 0), -EINVAL);
    ck_assert_int_eq(net_set_threads(NULL, 2), -EINVAL);
    ck_assert_int_eq(net_threads(net), 1);
    net_free(&net);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("nn_par");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_nn_par_runs_each_part_once_per_call);
    tcase_add_test(tc, test_nn_par_range_partitions_in_order);
    tcase_add_test(tc, test_net_threads_match_one_thread);
    tcase_add_test(tc, test_net_set_threads_rejects_bad_counts);
    suite_add_tcase(s, tc);
    return s;
}
