/* tests/ps/test_ps_model.c — ps/model.h on a small MLP written to a
 * temporary file: set up from a configuration (K-FAC with its blocks, or
 * SGD with its Polyak buffer), no Polyak average before the first update;
 * an SGD mean gradient that is not finite is refused with its index and
 * leaves the parameters as they were; a finite one moves them by
 * -lr x gradient on the first step (momentum starts at zero; the oracle in
 * double) and starts the Polyak average at the iterate; going back zeroes
 * the momentum, and with K-FAC forgets the inverses installed since the
 * given time only. Random values from a fresh seed printed on failure. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/rng.h"
#include "ps/model.h"
#include "tests/lib/ps_cfg.h"
#include "tests/lib/seed.h"

/* A configuration for optimizer kind (lr 0.25) over the model written to path. */
static void s_cfg(runcfg_t *c, const char *kind, char *path, size_t path_len) {
    char *extra[] = {"--optimizer.lr", "0.25"};
    test_ps_cfg(c, "test_ps_model", kind, path, path_len, extra, 2);
}

START_TEST(test_ps_model_sgd_update) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    runcfg_t c;
    char path[64], err[512] = "";
    s_cfg(&c, "sgd", path, sizeof path);
    ps_model_t m;
    ck_assert_msg(ps_model_init(&m, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_null(m.kfac);
    ck_assert_ptr_nonnull(m.sgd);
    ck_assert_ptr_null(ps_model_polyak(&m));
    const size_t n = m.net->n_params;
    ck_assert_uint_eq(n, 16u * 6u + 6u + 6u * 3u + 3u);
    float *g = malloc(n * sizeof *g), *p0 = malloc(n * sizeof *p0);
    for (size_t i = 0; i < n; i++) g[i] = (float)rng_normal(&r);
    memcpy(p0, m.net->params, n * sizeof *p0);
    const size_t k = rng_below(&r, n);
    const float keep = g[k];
    g[k] = NAN;
    double step = -1.0;
    size_t bad = n;
    kfac_lowrank_set_t none;
    memset(&none, 0, sizeof none);
    ck_assert_int_eq(ps_model_update(&m, g, 0, &none, 0, &step, &bad), -ERANGE);
    ck_assert_uint_eq(bad, k);
    ck_assert(step == 0.0);
    ck_assert_msg(memcmp(p0, m.net->params, n * sizeof *p0) == 0, "seed %" PRIu64 ": parameters changed", seed);
    ck_assert_ptr_null(ps_model_polyak(&m));
    g[k] = keep;
    ck_assert_int_eq(ps_model_update(&m, g, 0, &none, 0, &step, &bad), 0);
    ck_assert_msg(fabs(step - 0.25) < 1e-12, "step size %g", step);
    for (size_t i = 0; i < n; i++) {
        double want = (double)p0[i] - 0.25 * (double)g[i];
        ck_assert_msg(fabs(m.net->params[i] - want) <= 1e-6 * (1.0 + fabs(want)),
                      "seed %" PRIu64 ": parameter %zu is %g, want %g", seed, i, (double)m.net->params[i], want);
    }
    const float *avg = ps_model_polyak(&m);
    ck_assert_ptr_nonnull(avg);
    ck_assert_msg(memcmp(avg, m.net->params, n * sizeof *avg) == 0, "seed %" PRIu64 ": Polyak != first iterate", seed);
    ck_assert_int_eq(ps_model_forget(&m, 0.0), 0);
    for (size_t i = 0; i < n; i++) ck_assert(m.sgd->v[i] == 0.0f);
    ps_model_release(&m);
    ck_assert_ptr_null(m.net);
    ps_model_release(&m); /* a zeroed model: nothing to free */
    free(g);
    free(p0);
    runcfg_release(&c);
    unlink(path);
}
END_TEST

START_TEST(test_ps_model_kfac_forget) {
    runcfg_t c;
    char path[64], err[512] = "";
    s_cfg(&c, "kfac", path, sizeof path);
    ps_model_t m;
    ck_assert_msg(ps_model_init(&m, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(m.kfac);
    ck_assert_ptr_null(m.sgd);
    ck_assert_ptr_null(ps_model_polyak(&m));
    ck_assert_int_ge(m.kfac->n_blocks, 2);
    /* two inverses installed at 1 s and 3 s: going back to 2 s forgets one */
    m.kfac->blocks[0].inv->valid = 1;
    m.kfac->blocks[0].inv_time_s = 1.0;
    m.kfac->blocks[1].inv->valid = 1;
    m.kfac->blocks[1].inv_time_s = 3.0;
    for (size_t i = 0; i < m.net->n_params; i++) m.kfac->mom[i] = 1.0f;
    ck_assert_int_eq(ps_model_forget(&m, 2.0), 1);
    ck_assert_int_eq(m.kfac->blocks[0].inv->valid, 1);
    ck_assert_int_eq(m.kfac->blocks[1].inv->valid, 0);
    for (size_t i = 0; i < m.net->n_params; i++) ck_assert(m.kfac->mom[i] == 0.0f);
    m.kfac->blocks[0].inv->valid = 0;
    ps_model_release(&m);
    runcfg_release(&c);
    unlink(path);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_model");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_model_sgd_update);
    tcase_add_test(tc, test_ps_model_kfac_forget);
    suite_add_tcase(s, tc);
    return s;
}
