/* tests/net/test_compute.c — the compute context of kfac-worker and
 * kfac-statsd (common/net/compute.h), the parts that need no data set:
 *   - compute_setup_init() copies what the compute thread needs from a
 *     Welcome and the effective configuration (seeds, shard, batch,
 *     statistics only with optimizer kfac; n_ranks 0 means one shard);
 *   - compute_ctx_init() refuses a shard outside [0, n_ranks), a model whose
 *     size differs from what kfac-ps announced, and a data set it cannot
 *     load, each with a sentence in err and an empty context.
 * One mini-batch through the context against the network run directly is
 * tests/net/test_compute_batch.c (it needs MNIST). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/net/compute.h"
#include "common/run/runcfg.h"
#include "proto/msg.h"

static const char *s_model =
    "input 1x28x28\n"
    "flatten\n"
    "fc name=fc1 out=8\n"
    "relu\n"
    "fc name=fc2 out=10\n"
    "softmax_xent\n";
#define S_MODEL_PARAMS (8u * 785u + 10u * 9u)

static void s_cfg(runcfg_t *cfg, const char *optimizer) {
    char err[256];
    char *argv[] = {"kfac-worker", "--seed", "77", "--batch", "12", "--data.dir", "/nonexistent/kfac-data",
                    "--optimizer.kind", (char *)optimizer, NULL};
    ck_assert_msg(runcfg_load(cfg, RUNCFG_ROLE_WORKER, 9, argv, err, sizeof err) == 0, "%s", err);
}

START_TEST(test_compute_setup_from_welcome) {
    runcfg_t cfg;
    s_cfg(&cfg, "kfac");
    msg_welcome_t w;
    memset(&w, 0, sizeof w);
    w.model_text = (char *)s_model;
    w.n_params = S_MODEL_PARAMS;
    w.n_state = 0;
    w.rank = 2;
    w.n_ranks = 3;
    compute_setup_t su;
    ck_assert_int_eq(compute_setup_init(&su, &w, &cfg), 0);
    ck_assert_str_eq(su.model_text, s_model);
    ck_assert_ptr_ne(su.model_text, s_model); /* a copy */
    ck_assert_str_eq(su.data.dir, "/nonexistent/kfac-data");
    ck_assert_str_eq(su.data.name, runcfg_dataset_name(&cfg));
    ck_assert_uint_eq(su.n_params, S_MODEL_PARAMS);
    ck_assert_int_eq(su.batch, 12);
    ck_assert_uint_eq(su.batch_seed, 77);
    ck_assert_uint_eq(su.label_seed, 77);
    ck_assert_int_eq(su.rank, 2);
    ck_assert_int_eq(su.n_ranks, 3);
    ck_assert_int_eq(su.with_stats, 1);
    compute_setup_release(&su);
    ck_assert_ptr_null(su.model_text);
    compute_setup_release(&su); /* twice: a no-op */
    runcfg_release(&cfg);

    s_cfg(&cfg, "sgd");
    w.rank = 0;
    w.n_ranks = 0; /* an old PS: one shard */
    ck_assert_int_eq(compute_setup_init(&su, &w, &cfg), 0);
    ck_assert_int_eq(su.with_stats, 0);
    ck_assert_int_eq(su.n_ranks, 1);
    compute_setup_release(&su);
    runcfg_release(&cfg);
}
END_TEST

START_TEST(test_compute_ctx_init_refuses) {
    runcfg_t cfg;
    s_cfg(&cfg, "kfac");
    msg_welcome_t w;
    memset(&w, 0, sizeof w);
    w.model_text = (char *)s_model;
    w.n_params = S_MODEL_PARAMS;
    w.n_ranks = 2;
    compute_setup_t su;
    ck_assert_int_eq(compute_setup_init(&su, &w, &cfg), 0);
    su.device = BACKEND_CPU;
    compute_ctx_t cc;
    char err[512];

    su.rank = 2; /* of 2 */
    err[0] = 0;
    ck_assert_int_eq(compute_ctx_init(&cc, &su, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "shard") != NULL, "%s", err);
    ck_assert_ptr_null(cc.net);
    su.rank = 0;

    su.n_params = S_MODEL_PARAMS + 1; /* kfac-ps's model is another one */
    err[0] = 0;
    ck_assert_int_lt(compute_ctx_init(&cc, &su, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "different builds") != NULL, "%s", err);
    ck_assert_ptr_null(cc.net);
    su.n_params = S_MODEL_PARAMS;

    err[0] = 0; /* the data directory does not exist */
    ck_assert_int_lt(compute_ctx_init(&cc, &su, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "/nonexistent/kfac-data") != NULL, "%s", err);
    ck_assert_ptr_null(cc.net);
    ck_assert_ptr_null(cc.train);
    compute_ctx_release(&cc); /* an empty context: a no-op */

    compute_setup_release(&su);
    runcfg_release(&cfg);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("compute");
    TCase *tc = tcase_create("setup");
    tcase_add_test(tc, test_compute_setup_from_welcome);
    tcase_add_test(tc, test_compute_ctx_init_refuses);
    suite_add_tcase(s, tc);
    return s;
}
