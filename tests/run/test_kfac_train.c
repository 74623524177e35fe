/* tests/run/test_kfac_train.c — K-FAC helps: the in-process trainer
 * (common/run/train.h) with K-FAC reaches a clearly lower training loss than SGD
 * with momentum at SGD's best learning rate, for the same number of steps on
 * the same mini-batches.
 *
 * Setup (every run identical except the optimizer):
 *   model   models/mnist-mlp.model (784 -> 256 -> 128 -> 10, ReLU)
 *   data    the first KT_TRAIN_N MNIST training images, batch KT_BATCH,
 *           KT_STEPS steps; one seed for the initial parameters, the batch
 *           order and K-FAC's sampled labels, so every run sees the same
 *           initial point and the same batches in the same order.
 *   SGD     momentum 0.9, constant learning rate from {0.01, 0.03, 0.1, 0.3};
 *           a run whose loss becomes non-finite counts as +inf.
 *   K-FAC   true Fisher, statistics every KT_STATS_EVERY steps (decay
 *           0.95), all inverses every KT_INVERSE_EVERY steps, Cholesky with
 *           factored Tikhonov damping 0.01, KL step-size rule
 *           eta = min(1, sqrt(c0 / v^T g)) with c0 = 1e-4, momentum 0.9.
 *           c0 is the one setting tuned here (once, seed 1): the run
 *           configuration's default c0 = 1e-3 with momentum 0.9 ended at
 *           about SGD's loss (ratio 1.03); c0 = 1e-4 and 3e-4 gave 0.25 and
 *           0.32; damping 0.01 is the configuration default.
 * Figure compared: train_result_t.final_train_loss, the mean mini-batch
 * training loss over the last 50 steps (the same 50 batches for every run).
 * Claim checked: K-FAC's loss <= KT_MARGIN x the best SGD loss. Measured
 * ratios over four fresh seeds were 0.23-0.29 (see bench/RESULTS.md), so
 * the margin 0.8 leaves room for seed-to-seed noise while a preconditioner
 * that does not help (ratio near 1 or above) fails.
 *
 * The seed is fresh (/dev/urandom) each run and printed; KFAC_TEST_SEED=N
 * reproduces a run. OpenBLAS runs with 2 threads, as tools/kfac-train does.
 * Needs the MNIST files under data/ (`make data`); without them the test
 * fails with that instruction.
 */
#include <cblas.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/nn/data.h"
#include "common/nn/nn.h"
#include "common/run/train.h"
#include "tests/lib/check_main.h"
#include "tests/lib/data_skip.h"
#include "tests/lib/seed.h"

#define KT_TRAIN_N 10000
#define KT_TEST_N 1000
#define KT_BATCH 128
#define KT_STEPS 200
#define KT_STATS_EVERY 2
#define KT_INVERSE_EVERY 10
#define KT_MARGIN 0.8

/* One training run from the seed's initial parameters. Returns the final
 * mean training loss, or INFINITY when training stopped on a non-finite loss
 * (too large a learning rate). Any other failure fails the test. */
static double s_run(net_t *net, const dataset_t *train, const dataset_t *test, const train_opts_t *o,
                    uint64_t seed, double *test_acc) {
    char err[512];
    train_result_t r;
    net_init_params(net, seed);
    int rc = train_run(net, train, test, o, &r, err, sizeof err);
    if (rc == -ERANGE) {
        *test_acc = 0.0;
        return INFINITY;
    }
    ck_assert_msg(rc == 0, "seed %llu: train_run failed (%d): %s", (unsigned long long)seed, rc, err);
    ck_assert_msg(r.steps == KT_STEPS, "seed %llu: ran %ld steps, wanted %d", (unsigned long long)seed, r.steps,
                  KT_STEPS);
    *test_acc = r.test_acc;
    return r.final_train_loss;
}

START_TEST(test_kfac_train_beats_sgd) {
    char err[512];
    uint64_t seed = test_seed();
    printf("test_kfac_train_beats_sgd: seed %llu (KFAC_TEST_SEED=%llu reproduces)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    openblas_set_num_threads(2);
    dataset_t *train = NULL, *test = NULL;
    int rc = dataset_load_named("mnist", "data", 1, &train, err, sizeof err);
    ck_assert_msg(rc == 0, "MNIST training set: %s", err);
    rc = dataset_load_named("mnist", "data", 0, &test, err, sizeof err);
    ck_assert_msg(rc == 0, "MNIST test set: %s", err);
    ck_assert_int_eq(dataset_truncate(train, KT_TRAIN_N), 0);
    ck_assert_int_eq(dataset_truncate(test, KT_TEST_N), 0);
    net_t *net = net_load("models/mnist-mlp.model", KT_BATCH, err, sizeof err);
    ck_assert_msg(net != NULL, "%s", err);

    train_opts_t base;
    train_opts_default(&base);
    base.batch = KT_BATCH;
    base.steps = KT_STEPS;
    base.seed = seed;
    base.eval_every = 0; /* one evaluation, at the end */
    base.progress = NULL;

    const double lrs[] = {0.01, 0.03, 0.1, 0.3};
    double best = INFINITY, best_lr = 0.0, acc;
    for (size_t i = 0; i < sizeof lrs / sizeof lrs[0]; i++) {
        train_opts_t o = base;
        o.optimizer = TRAIN_OPT_SGD;
        o.lr.kind = SGD_LR_CONSTANT;
        o.lr.base = lrs[i];
        o.momentum = 0.9;
        o.weight_decay = 0.0;
        double loss = s_run(net, train, test, &o, seed, &acc);
        printf("  sgd   lr %-5g          final train loss %.4f  test acc %6.2f%%%s\n", lrs[i], loss, 100.0 * acc,
               isfinite(loss) ? "" : "  (diverged)");
        if (loss < best) { best = loss; best_lr = lrs[i]; }
    }
    ck_assert_msg(isfinite(best), "seed %llu: every SGD learning rate diverged", (unsigned long long)seed);

    train_opts_t o = base;
    o.optimizer = TRAIN_OPT_KFAC;
    kfac_opts_default(&o.kfac);
    o.kfac.method = KFAC_INV_CHOLESKY;
    o.kfac.damping = 0.01;
    o.kfac.stat_decay = 0.95;
    o.kfac.step_rule = KFAC_STEP_RULE_KL;
    o.kfac.eta_max = 1.0;
    o.kfac.kl_c0 = 1e-4;
    o.kfac.kl_zeta = 1.0;
    o.kfac.kl_decay_every = 0;
    o.kfac.momentum = 0.9;
    o.kfac.weight_decay = 0.0;
    o.fisher = KFAC_FISHER_TRUE;
    o.stats_every = KT_STATS_EVERY;
    o.inverse_every = KT_INVERSE_EVERY;
    double kloss = s_run(net, train, test, &o, seed, &acc);
    double ratio = kloss / best;
    printf("  kfac  damping 0.01 c0 1e-4  final train loss %.4f  test acc %6.2f%%\n", kloss, 100.0 * acc);
    printf("  ratio kfac / best sgd (lr %g): %.3f (must be <= %.2f)\n", best_lr, ratio, KT_MARGIN);
    fflush(stdout);
    ck_assert_msg(isfinite(kloss), "seed %llu: K-FAC diverged", (unsigned long long)seed);
    ck_assert_msg(ratio <= KT_MARGIN,
                  "seed %llu: K-FAC final train loss %.4f is %.3f x SGD's best %.4f (lr %g); wanted <= %.2f",
                  (unsigned long long)seed, kloss, ratio, best, best_lr, KT_MARGIN);
    net_free(&net);
    dataset_free(&train);
    dataset_free(&test);
}
END_TEST

/* Without data/mnist (make data) nothing here can run: a skip, not a failure. */
int suite_skip_reason(char *why, size_t why_len) { return test_skip_without_mnist(why, why_len); }

Suite *make_suite(void) {
    Suite *s = suite_create("kfac_train");
    TCase *tc = tcase_create("core");
    /* Five 200-step runs of the MLP: about 15 s of CPU time in all, about a
     * minute of wall time when the 2-core machine is heavily shared. */
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_kfac_train_beats_sgd);
    suite_add_tcase(s, tc);
    return s;
}
