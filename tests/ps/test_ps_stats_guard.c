/* tests/ps/test_ps_stats_guard.c — what one statistics push may put into
 * the curvature (ps/stats_guard.c): second moments of fresh random batches
 * (Gram matrices, positive semi-definite by construction: the oracle) of
 * several sizes and scales always pass; a symmetric matrix with a 2 x 2
 * principal minor below 0 (the indefinite "factor" a hostile statistics
 * worker sends) is refused with its layer, factor and entry named, for
 * full and 2 x 2-block factors; the trace rule refuses a push more than
 * max_ratio times the median of the last accepted ones (after
 * PS_NORM_MIN_HISTORY), lets one within it or far below it pass, and is off at 0,
 * where the minor check still holds. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "ps/member.h"
#include "ps/stats_guard.h"

/* One layer (index 3) with a full factor of dim n (role A) and a 2 x 2
 * block factor of c channels (role BN): the guard reads only the layout. */
typedef struct {
    kfac_stats_t st;
    kfac_layer_stats_t ls;
    float *a, *bn;
} s_push_t;

static void s_push_init(s_push_t *p, int n, int c) {
    memset(p, 0, sizeof *p);
    p->a = calloc((size_t)n * (size_t)n, sizeof *p->a);
    p->bn = calloc(3 * (size_t)c, sizeof *p->bn);
    ck_assert_ptr_nonnull(p->a);
    ck_assert_ptr_nonnull(p->bn);
    p->ls.layer = 3;
    p->ls.n_factors = 2;
    p->ls.f[0] = (kfac_factor_t){.kind = KFAC_FACTOR_SYM, .role = KFAC_FACTOR_ROLE_A, .dim = n, .data = p->a,
                                 .n_samples = 1, .n_updates = 1};
    p->ls.f[1] = (kfac_factor_t){.kind = KFAC_FACTOR_DIAG2X2, .role = KFAC_FACTOR_ROLE_BN, .dim = c,
                                 .data = p->bn, .n_samples = 1, .n_updates = 1};
    p->st.n_layers = 1;
    p->st.layers = &p->ls;
}

static void s_push_free(s_push_t *p) {
    free(p->a);
    free(p->bn);
}

/* Fill both factors with the second moment of b random vectors times
 * scale (summed in float, as a statistics worker does). */
static void s_gram(s_push_t *p, rng_t *r, int b, double scale) {
    int n = p->ls.f[0].dim, c = p->ls.f[1].dim;
    float *v = malloc((size_t)n * sizeof *v);
    ck_assert_ptr_nonnull(v);
    memset(p->a, 0, (size_t)n * (size_t)n * sizeof *p->a);
    memset(p->bn, 0, 3 * (size_t)c * sizeof *p->bn);
    for (int k = 0; k < b; k++) {
        double common = rng_normal(r); /* correlated coordinates: off-diagonals near their bound */
        for (int i = 0; i < n; i++) v[i] = (float)(0.9 * common + 0.3 * rng_normal(r));
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) p->a[i * n + j] += (float)(scale / b) * v[i] * v[j];
        for (int ch = 0; ch < c; ch++) {
            float x = (float)rng_normal(r), y = (float)(0.99 * x + 0.01 * rng_normal(r));
            p->bn[3 * ch] += (float)(scale / b) * x * x;
            p->bn[3 * ch + 1] += (float)(scale / b) * x * y;
            p->bn[3 * ch + 2] += (float)(scale / b) * y * y;
        }
    }
    free(v);
}

static const char *s_name(const void *ctx, int layer) {
    (void)ctx;
    return layer == 3 ? "fc1" : NULL;
}

START_TEST(test_ps_stats_guard_second_moments_pass) {
    rng_t r;
    rng_seed(&r, 0x5eed0001u + (uint64_t)_i);
    int dims[] = {1, 2, 7, 33, 64};
    int batches[] = {1, 2, 16, 128, 1000};
    double scales[] = {1e-8, 1.0, 1e4};
    for (int d = 0; d < 5; d++)
        for (int bi = 0; bi < 5; bi++) {
            s_push_t p;
            s_push_init(&p, dims[d], 5);
            ps_stats_guard_t *g = ps_stats_guard_new(&p.st);
            ck_assert_ptr_nonnull(g);
            for (int si = 0; si < 3; si++) {
                s_gram(&p, &r, batches[bi], scales[si]);
                char err[300] = "";
                /* no trace rule here: the scales differ on purpose */
                ck_assert_msg(ps_stats_guard_check(g, &p.st, 0.0, s_name, NULL, err, sizeof err) == 0,
                              "n %d b %d scale %g: %s", dims[d], batches[bi], scales[si], err);
            }
            ps_stats_guard_free(g);
            s_push_free(&p);
        }
}
END_TEST

START_TEST(test_ps_stats_guard_indefinite_refused) {
    rng_t r;
    rng_seed(&r, 0x5eed0002u);
    s_push_t p;
    s_push_init(&p, 8, 4);
    ps_stats_guard_t *g = ps_stats_guard_new(&p.st);
    ck_assert_ptr_nonnull(g);
    char err[300];
    /* I + 2 (e0 e1^T + e1 e0^T): symmetric, positive diagonal, indefinite */
    s_gram(&p, &r, 16, 1.0);
    memset(p.a, 0, 64 * sizeof *p.a);
    for (int i = 0; i < 8; i++) p.a[i * 8 + i] = 1.0f;
    p.a[0 * 8 + 1] = p.a[1 * 8 + 0] = 2.0f;
    ck_assert_int_eq(ps_stats_guard_check(g, &p.st, 20.0, s_name, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "layer fc1 factor A") && strstr(err, "F[0][1]") &&
                      strstr(err, "not positive semi-definite"), "%s", err);
    /* a fresh Gram matrix with one off-diagonal pushed just past its bound */
    s_gram(&p, &r, 16, 1.0);
    int i = 2, j = 5;
    float bound = sqrtf(p.a[i * 8 + i] * p.a[j * 8 + j]);
    p.a[i * 8 + j] = p.a[j * 8 + i] = -1.01f * bound;
    ck_assert_int_eq(ps_stats_guard_check(g, &p.st, 0.0, NULL, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "layer 3 factor A") && strstr(err, "F[2][5]"), "%s", err);
    /* within it: passes */
    p.a[i * 8 + j] = p.a[j * 8 + i] = -0.99f * bound;
    ck_assert_int_eq(ps_stats_guard_check(g, &p.st, 0.0, NULL, NULL, err, sizeof err), 0);
    /* a 2 x 2 block with b^2 > ac */
    s_gram(&p, &r, 16, 1.0);
    p.bn[3 * 2 + 1] = 1.1f * sqrtf(p.bn[3 * 2] * p.bn[3 * 2 + 2]);
    ck_assert_int_eq(ps_stats_guard_check(g, &p.st, 0.0, s_name, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "layer fc1 factor BN") && strstr(err, "channel 2"), "%s", err);
    /* an empty factor (no value in this push) is not judged */
    p.ls.f[1].n_updates = 0;
    ck_assert_int_eq(ps_stats_guard_check(g, &p.st, 0.0, s_name, NULL, err, sizeof err), 0);
    ps_stats_guard_free(g);
    s_push_free(&p);
}
END_TEST

START_TEST(test_ps_stats_guard_trace_rule) {
    rng_t r;
    rng_seed(&r, 0x5eed0003u);
    s_push_t p;
    s_push_init(&p, 6, 3);
    ps_stats_guard_t *g = ps_stats_guard_new(&p.st);
    ck_assert_ptr_nonnull(g);
    char err[300];
    /* before PS_NORM_MIN_HISTORY accepted pushes: no trace rule */
    for (int k = 0; k < PS_NORM_MIN_HISTORY; k++) {
        s_gram(&p, &r, 64, k == 0 ? 1e6 : 1.0);
        ck_assert_int_eq(ps_stats_guard_check(g, &p.st, 20.0, s_name, NULL, err, sizeof err), 0);
        if (k == 0) continue; /* the huge one is judged, not recorded: only folded pushes are */
        ps_stats_guard_accept(g, &p.st);
    }
    s_gram(&p, &r, 64, 1.0);
    ck_assert_int_eq(ps_stats_guard_check(g, &p.st, 20.0, s_name, NULL, err, sizeof err), 0);
    ps_stats_guard_accept(g, &p.st); /* now 8 recorded */
    double t = ps_stats_guard_trace(&p.ls.f[0]);
    s_gram(&p, &r, 64, 40.0);
    ck_assert_int_eq(ps_stats_guard_check(g, &p.st, 20.0, s_name, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "layer fc1 factor A") && strstr(err, "more than [ps] stats_trace_max_ratio = 20"),
                  "%s", err);
    s_gram(&p, &r, 64, 1.0 / 1000.0); /* no lower bound */
    ck_assert_msg(ps_stats_guard_check(g, &p.st, 20.0, s_name, NULL, err, sizeof err) == 0, "%s", err);
    s_gram(&p, &r, 64, 5.0);
    ck_assert_msg(ps_stats_guard_check(g, &p.st, 20.0, s_name, NULL, err, sizeof err) == 0, "%s (trace %g)", err, t);
    /* off at 0: the scale passes, a bad minor still does not */
    s_gram(&p, &r, 64, 1e6);
    ck_assert_int_eq(ps_stats_guard_check(g, &p.st, 0.0, s_name, NULL, err, sizeof err), 0);
    p.a[0 * 6 + 3] = p.a[3 * 6 + 0] = 2.0f * sqrtf(p.a[0] * p.a[3 * 6 + 3]);
    ck_assert_int_eq(ps_stats_guard_check(g, &p.st, 0.0, s_name, NULL, err, sizeof err), -1);
    ps_stats_guard_free(g);
    s_push_free(&p);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_stats_guard");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_ps_stats_guard_second_moments_pass, 0, 3);
    tcase_add_test(tc, test_ps_stats_guard_indefinite_refused);
    tcase_add_test(tc, test_ps_stats_guard_trace_rule);
    suite_add_tcase(s, tc);
    return s;
}
