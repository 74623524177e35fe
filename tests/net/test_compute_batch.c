/* tests/net/test_compute_batch.c — one mini-batch through the compute
 * context (common/net/compute.h) against the network run directly: a
 * context built from a setup (MNIST, 300 training images, a small MLP, the
 * CPU backend, empirical Fisher) runs compute_ctx_batch() with fresh random
 * parameters; the same parameters in a second network, run by hand on the
 * batch the context drew (cc.x, cc.y: net_forward, net_backward,
 * kfac_stats_compute), must give the same loss, hits, gradient and factors
 * (relative tolerance 1e-5 of the largest entry: the two run the same
 * float32 code, the tolerance only allows for a different summation
 * order). Needs data/mnist (sh tools/fetch-data.sh); skipped without it. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/log.h"
#include "common/kfac/kfac_stats.h"
#include "common/net/compute.h"
#include "common/nn/nn.h"
#include "tests/lib/check_main.h"
#include "tests/lib/seed.h"

static const char *s_model =
    "input 1x28x28\n"
    "flatten\n"
    "fc name=fc1 out=16\n"
    "relu\n"
    "fc name=fc2 out=10\n"
    "softmax_xent\n";

int suite_skip_reason(char *why, size_t why_len) {
    if (access("data/mnist/train-images-idx3-ubyte", R_OK) == 0 ||
        access("data/mnist/train-images-idx3-ubyte.gz", R_OK) == 0)
        return 0;
    snprintf(why, why_len, "no MNIST under data/mnist (run: sh tools/fetch-data.sh)");
    return 1;
}

/* max |a - b| <= 1e-5 * max |b| (plus a floor for all-zero arrays). */
static void s_close(const char *what, const float *a, const float *b, size_t n, uint64_t seed) {
    double scale = 0, diff = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(b[i]) > scale) scale = fabs(b[i]);
        if (fabs(a[i] - b[i]) > diff) diff = fabs(a[i] - b[i]), at = i;
    }
    ck_assert_msg(diff <= 1e-5 * scale + 1e-12, "seed %llu: %s[%zu] differs by %g (largest entry %g)",
                  (unsigned long long)seed, what, at, diff, scale);
}

START_TEST(test_compute_batch_matches_direct_run) {
    uint64_t seed = test_seed();
    log_init(LOG_LEVEL_ERROR, "test_compute_batch");
    compute_setup_t su;
    memset(&su, 0, sizeof su);
    su.model_text = strdup(s_model);
    su.data.kind = DATASET_SOURCE_NAMED;
    snprintf(su.data.name, sizeof su.data.name, "mnist");
    snprintf(su.data.dir, sizeof su.data.dir, "data");
    ck_assert(su.model_text != NULL);
    char err[512];
    net_t *ref = net_parse(s_model, "test", 8, err, sizeof err);
    ck_assert_msg(ref != NULL, "%s", err);
    net_init_params(ref, seed);
    su.n_params = ref->n_params;
    su.n_state = ref->n_state;
    su.doubly_min_in = ref->fc_doubly_min_in; /* the parser's default, as ref has it */
    su.train_n = 300;
    su.batch = 8;
    su.with_stats = 1;
    su.fisher = KFAC_FISHER_EMPIRICAL;
    su.batch_seed = seed;
    su.label_seed = seed;
    su.rank = 0;
    su.n_ranks = 1;
    su.device = BACKEND_CPU;
    compute_ctx_t cc;
    int rc = compute_ctx_init(&cc, &su, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_ptr_nonnull(cc.stats);
    ck_assert_uint_eq(cc.shape.model.n_params, ref->n_params);

    double loss = -1;
    int hits = -1, n = 0;
    rc = compute_ctx_batch(&cc, ref->params, NULL, 1, 1, &loss, &hits, &n, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(n, 8);

    /* The same batch by hand. */
    ck_assert_int_eq(net_forward(ref, cc.x, n, 1), 0);
    int ref_hits = 0;
    float ref_loss = net_backward(ref, cc.y, NULL, &ref_hits);
    kfac_stats_t *st = kfac_stats_new(ref);
    ck_assert_ptr_nonnull(st);
    ck_assert_int_eq(kfac_stats_compute(st, ref), 0);

    ck_assert_msg(fabs(loss - ref_loss) <= 1e-5 * fabs(ref_loss), "seed %llu: loss %g, direct %g",
                  (unsigned long long)seed, loss, (double)ref_loss);
    ck_assert_int_eq(hits, ref_hits);
    s_close("gradient", cc.net->grads, ref->grads, ref->n_params, seed);
    ck_assert_int_eq(cc.stats->n_layers, st->n_layers);
    for (int j = 0; j < st->n_layers; j++)
        for (int f = 0; f < st->layers[j].n_factors; f++) {
            const kfac_factor_t *a = &cc.stats->layers[j].f[f], *b = &st->layers[j].f[f];
            ck_assert_int_eq(a->dim, b->dim);
            char what[64];
            snprintf(what, sizeof what, "layer %d factor %d", st->layers[j].layer, f);
            s_close(what, a->data, b->data, (size_t)b->dim * (size_t)b->dim, seed);
            ck_assert(a->n_samples == b->n_samples);
        }

    /* Moved, the context keeps its limits pointing into itself. */
    compute_ctx_t moved;
    memset(&moved, 0, sizeof moved);
    compute_ctx_move(&moved, &cc);
    ck_assert_ptr_null(cc.net);
    ck_assert_ptr_eq(moved.shape.limits.model, &moved.shape.model);

    compute_ctx_release(&moved);
    compute_setup_release(&su);
    kfac_stats_free(&st);
    net_free(&ref);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("compute_batch");
    TCase *tc = tcase_create("batch");
    tcase_set_timeout(tc, 120); /* loading MNIST takes seconds on a busy machine */
    tcase_add_test(tc, test_compute_batch_matches_direct_run);
    suite_add_tcase(s, tc);
    return s;
}
