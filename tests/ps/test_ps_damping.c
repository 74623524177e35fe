/* tests/ps/test_ps_damping.c — ps/damping.h over a small MLP's K-FAC
 * optimizer: under damping_rule = fixed the scheduled damping passes
 * through; under adaptive the rule's decisions multiply it (composing with
 * a milestone's change of the scheduled value), the bounds hold without
 * wind-up (one decision down from the upper bound leaves it), a failed
 * step restarts the window, and a resumed run starts from the
 * checkpoint's damping; inverse_age_damping divides the KL bound (kl_c0,
 * or kl_clip under that rule) by 1 + kappa * the mean inverse age. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/damping.h"
#include "ps/model.h"
#include "tests/lib/ps_cfg.h"

static void s_cfg(runcfg_t *c, char *path, size_t path_len, char *const *extra, int n_extra) {
    test_ps_cfg(c, "test_ps_damping", "kfac", path, path_len, extra, n_extra);
}

/* One step of version t with a rising loss (observed change > 0 while the
 * model predicts a decrease: rho < 0, the damping must go up). */
static int s_step(ps_damping_t *d, ps_model_t *m, const float *g, long t, double loss) {
    ps_damping_before_step(d, m->kfac, g, NULL, t);
    kfac_step_info_t info = {.step = 0.1, .vg = 1.0};
    return ps_damping_after_step(d, t, loss, &info);
}

START_TEST(test_ps_damping_fixed_passes_schedule) {
    runcfg_t c;
    char path[64], err[256] = "";
    s_cfg(&c, path, sizeof path, NULL, 0);
    ps_model_t m;
    ck_assert_msg(ps_model_init(&m, &c, err, sizeof err) == 0, "%s", err);
    ps_damping_t *d = ps_damping_new(&c, err, sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    ck_assert(!ps_damping_adaptive(d));
    ck_assert_double_eq(ps_damping_at(d, 0.02, 0.01), 0.02);
    float *g = calloc(m.net->n_params, sizeof(float));
    for (long t = 0; t < 50; t++) ck_assert_int_eq(s_step(d, &m, g, t, 1.0 + t), 0);
    ck_assert_double_eq(ps_damping_at(d, 0.02, 0.01), 0.02);
    ck_assert_double_eq(ps_damping_bound_divisor(d), 1.0);
    ck_assert_double_eq(m.kfac->opts.kl_c0, c.kl_c0);
    free(g);
    ps_damping_free(&d);
    ck_assert_ptr_null(d);
    ps_damping_free(&d);
    ps_model_release(&m);
    runcfg_release(&c);
    unlink(path);
}
END_TEST

START_TEST(test_ps_damping_adaptive_decisions_bounds_restart) {
    runcfg_t c;
    char path[64], err[256] = "";
    char *extra[] = {"--kfac.damping_rule", "adaptive", "--kfac.damping", "0.01", "--kfac.damping_min", "0.001",
                     "--kfac.damping_max", "0.1", "--kfac.damping_interval", "2", "--kfac.damping_decay", "0.5"};
    s_cfg(&c, path, sizeof path, extra, 12);
    ps_model_t m;
    ck_assert_msg(ps_model_init(&m, &c, err, sizeof err) == 0, "%s", err);
    ps_damping_t *d = ps_damping_new(&c, err, sizeof err);
    ck_assert_msg(d != NULL, "%s", err);
    ck_assert(ps_damping_adaptive(d));
    const double omega = 0.25; /* 0.5^2 */
    float *g = calloc(m.net->n_params, sizeof(float));
    ck_assert_double_eq_tol(ps_damping_at(d, 0.01, 0.01), 0.01, 1e-15);
    /* a decision once 2T = 4 versions are in, then every T = 2 */
    ck_assert_int_eq(s_step(d, &m, g, 0, 1.0), 0);
    ck_assert_int_eq(s_step(d, &m, g, 1, 1.1), 0);
    ck_assert_int_eq(s_step(d, &m, g, 2, 1.2), 0);
    ck_assert_int_eq(s_step(d, &m, g, 3, 1.3), 1);
    ck_assert_msg(ps_damping_rho(d) < 0.25, "rho %g with a rising loss", ps_damping_rho(d));
    ck_assert_double_eq_tol(ps_damping_at(d, 0.01, 0.01), 0.01 / omega, 1e-12);
    /* a milestone doubles the scheduled damping: the rule's factor stays */
    ck_assert_double_eq_tol(ps_damping_at(d, 0.02, 0.04), 0.02 / omega, 1e-12);
    /* the upper bound: 0.08 / omega = 0.32 is held at 0.1 */
    ck_assert_int_eq(s_step(d, &m, g, 4, 1.4), 0);
    ck_assert_int_eq(s_step(d, &m, g, 5, 1.5), 1);
    ck_assert_double_eq_tol(ps_damping_at(d, 0.02, 0.08), 0.1, 1e-15);
    for (long t = 6; t < 12; t++) s_step(d, &m, g, t, 1.0 + 0.1 * t);
    ck_assert_double_eq_tol(ps_damping_at(d, 0.02, 0.1), 0.1, 1e-15);
    /* a falling loss the model predicts well (rho > 3/4): one decision down
     * leaves the bound at once (no wind-up above it) */
    ps_damping_step_failed(d); /* the window restarts: 4 versions before the next decision */
    int decided = 0;
    for (long t = 20; t < 24; t++) {
        ps_damping_before_step(d, m.kfac, g, NULL, t);
        kfac_step_info_t info = {.step = 0.1, .vg = 1.0};
        /* the model's change per step, with q from the earlier steps decaying: compute the loss after it */
        decided += ps_damping_after_step(d, t, 5.0 - 0.2 * (t - 20), &info);
    }
    ck_assert_int_eq(decided, 1);
    ck_assert_msg(ps_damping_rho(d) > 0.75, "rho %g with a loss falling faster than predicted", ps_damping_rho(d));
    ck_assert_double_eq_tol(ps_damping_at(d, 0.02, 0.1), 0.1 * omega, 1e-12);
    /* a resumed run starts from the checkpoint's damping */
    ps_damping_restart(d);
    ck_assert_double_eq_tol(ps_damping_at(d, 0.01, 0.05), 0.05, 1e-15);
    ck_assert_double_eq_tol(ps_damping_at(d, 0.02, 0.05), 0.1, 1e-15); /* psi 5, held at the bound */
    char sum[256];
    ps_damping_summary(d, 0.1, sum, sizeof sum);
    ck_assert_msg(strstr(sum, "adaptive damping 0.1 (") != NULL, "summary: %s", sum);
    free(g);
    ps_damping_free(&d);
    ps_model_release(&m);
    runcfg_release(&c);
    unlink(path);
}
END_TEST

/* Every block holds an identity inverse computed from factor version v. */
static void s_install_all(kfac_opt_t *k, long v) {
    for (int b = 0; b < k->n_blocks; b++) {
        const int n = k->blocks[b].n;
        float *I = calloc((size_t)n * n, sizeof(float));
        for (int i = 0; i < n; i++) I[i * n + i] = 1.0f;
        kfac_inverse_t *inv = kfac_inverse_new(n);
        ck_assert_int_eq(kfac_inverse_load_cholesky(inv, I, 0.01f), 0);
        ck_assert_int_ge(kfac_opt_block_install(k, b, inv, v), 0);
        kfac_inverse_free(&inv);
        free(I);
    }
}

START_TEST(test_ps_damping_inverse_age_divides_bound) {
    for (int rule = 0; rule < 2; rule++) {
        runcfg_t c;
        char path[64], err[256] = "";
        char *extra[] = {"--kfac.inverse_age_damping", "0.1", "--kfac.step_rule", rule ? "kl_clip" : "kl"};
        s_cfg(&c, path, sizeof path, extra, 4);
        ps_model_t m;
        ck_assert_msg(ps_model_init(&m, &c, err, sizeof err) == 0, "%s", err);
        ps_damping_t *d = ps_damping_new(&c, err, sizeof err);
        ck_assert_msg(d != NULL, "%s", err);
        float *g = calloc(m.net->n_params, sizeof(float));
        /* no inverse yet: nothing divided */
        ps_damping_before_step(d, m.kfac, g, NULL, 7);
        ck_assert_double_eq(ps_damping_bound_divisor(d), 1.0);
        s_install_all(m.kfac, 3);
        ps_damping_before_step(d, m.kfac, g, NULL, 13); /* age 10: 1 + 0.1 * 10 */
        ck_assert_double_eq_tol(ps_damping_bound_divisor(d), 2.0, 1e-12);
        if (rule) {
            ck_assert_double_eq_tol(m.kfac->opts.kl_clip, c.kl_clip / 2.0, 1e-15);
        } else {
            ck_assert_double_eq_tol(m.kfac->opts.kl_c0, c.kl_c0 / 2.0, 1e-15);
        }
        ps_damping_before_step(d, m.kfac, g, NULL, 3); /* fresh again: the configured bound */
        ck_assert_double_eq(rule ? m.kfac->opts.kl_clip : m.kfac->opts.kl_c0, rule ? c.kl_clip : c.kl_c0);
        free(g);
        ps_damping_free(&d);
        ps_model_release(&m);
        runcfg_release(&c);
        unlink(path);
    }
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_damping");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_ps_damping_fixed_passes_schedule);
    tcase_add_test(tc, test_ps_damping_adaptive_decisions_bounds_restart);
    tcase_add_test(tc, test_ps_damping_inverse_age_divides_bound);
    suite_add_tcase(s, tc);
    return s;
}
