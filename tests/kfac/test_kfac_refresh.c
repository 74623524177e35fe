/* tests/kfac/test_kfac_refresh.c — SP-NGD's adaptive refresh
 * (common/kfac/kfac_refresh.c): Algorithm 2's interval rule with its cap and
 * Algorithm 1's bookkeeping, per statistic and over a whole network's
 * factors, against a brute-force reimplementation in double on fresh random
 * sequences. The seed is printed on failure; KFAC_TEST_SEED=<n> replays a
 * run.
 *
 * Sequences: each step's value is the previous one times (1 + e), |e| <=
 * 0.03 per element (a small drift, which adds up between refreshes), or a
 * fresh draw (relative distance about 1.4), so that both branches of the
 * similarity test and every branch of the rule occur. The reference sums
 * the same squared differences in double in the same order, so its
 * decisions equal the unit's exactly (no tolerance on decisions); the
 * distance itself is compared with 1e-12 relative.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/kfac/kfac_refresh.h"
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#include "tests/lib/seed.h"
#include "tests/lib/testnet.h"

#define SEEDED()                 \
    uint64_t seed = test_seed(); \
    rng_t rng;                   \
    rng_seed(&rng, seed)

#define SEEDMSG (unsigned long long)seed

/* ---- the reference -------------------------------------------------------------- */

static double s_ref_dist(const float *x, const float *y, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)x[i] - (double)y[i]) * ((double)x[i] - (double)y[i]);
        den += (double)y[i] * (double)y[i];
    }
    return den == 0.0 ? (num == 0.0 ? 0.0 : INFINITY) : sqrt(num / den);
}

/* Algorithm 1 + 2 written out from the paper, with every recorded value
 * kept (hist[k] is the k-th recorded value) and the cap applied to the
 * result. */
typedef struct {
    size_t n;
    double alpha;
    int cap;
    float *hist;   /* (max_rec, n) */
    int n_rec;
    int d1, d2;    /* Delta_{-1}, Delta_{-2} */
    long next;
} s_ref_t;

static int s_ref_record(s_ref_t *r, const float *x, long t) {
    int sim1 = r->n_rec >= 1 && s_ref_dist(x, r->hist + (size_t)(r->n_rec - 1) * r->n, r->n) < r->alpha;
    int sim2 = r->n_rec >= 2 && s_ref_dist(x, r->hist + (size_t)(r->n_rec - 2) * r->n, r->n) < r->alpha;
    int d;
    if (!sim1) d = r->d1 / 2 < 1 ? 1 : r->d1 / 2;
    else if (!sim2) d = r->d1;
    else d = r->d1 + r->d2;
    if (d > r->cap) d = r->cap;
    r->d2 = r->d1;
    r->d1 = d;
    r->next = t + d;
    memcpy(r->hist + (size_t)r->n_rec * r->n, x, r->n * sizeof *x);
    r->n_rec++;
    return d;
}

/* The next value of a sequence: similar to prev (|e| <= 0.03 per element
 * times a common factor) with probability p_sim, else a fresh draw. */
static void s_next_value(rng_t *rng, const float *prev, float *x, size_t n, double p_sim) {
    if (rng_uniform(rng) < p_sim) {
        double common = 1.0 + 0.02 * (2.0 * rng_uniform(rng) - 1.0);
        for (size_t i = 0; i < n; i++) x[i] = (float)(prev[i] * common * (1.0 + 0.01 * (2.0 * rng_uniform(rng) - 1.0)));
    } else {
        for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(rng);
    }
}

/* ---- distance and one interval ------------------------------------------------- */

START_TEST(test_refresh_distance_matches_double) {
    SEEDED();
    enum { N = 57 };
    float x[N], r[N];
    for (int i = 0; i < N; i++) x[i] = (float)rng_normal(&rng), r[i] = (float)rng_normal(&rng);
    double want = s_ref_dist(x, r, N), got = kfac_refresh_distance(x, r, N);
    ck_assert_msg(fabs(got - want) <= 1e-12 * want, "distance %.17g, want %.17g, seed %llu", got, want, SEEDMSG);
    float z[3] = {0, 0, 0}, o[3] = {0, 1, 0};
    ck_assert(kfac_refresh_distance(z, z, 3) == 0.0);
    ck_assert(isinf(kfac_refresh_distance(o, z, 3)));
}
END_TEST

/* Each branch of Algorithm 2 on values whose distances are known:
 * X = B (1 + e) against B is exactly |e| away. */
START_TEST(test_refresh_interval_branches) {
    SEEDED();
    enum { N = 40 };
    float b[N], x1[N], x2[N], x[N];
    for (int i = 0; i < N; i++) b[i] = (float)rng_normal(&rng);
    const double alpha = 0.1;
    for (int i = 0; i < N; i++) x2[i] = b[i], x1[i] = b[i] * 1.02f, x[i] = b[i] * 1.04f;
    int d = 5, dp = 3;
    ck_assert_int_eq(kfac_refresh_interval(x, x1, x2, N, alpha, &d, &dp), 0);
    ck_assert(d == 8 && dp == 5); /* similar to both: the sum */
    for (int i = 0; i < N; i++) x2[i] = b[i], x1[i] = b[i] * 1.07f, x[i] = b[i] * 1.14f;
    d = 5, dp = 3;
    ck_assert_int_eq(kfac_refresh_interval(x, x1, x2, N, alpha, &d, &dp), 0);
    ck_assert(d == 5 && dp == 5); /* similar to X_-1 (0.065), not to X_-2 (0.14): kept */
    for (int i = 0; i < N; i++) x1[i] = b[i], x[i] = b[i] * 1.2f;
    d = 9, dp = 4;
    ck_assert_int_eq(kfac_refresh_interval(x, x1, x2, N, alpha, &d, &dp), 0);
    ck_assert(d == 4 && dp == 9); /* not similar (0.2): halved */
    d = 1, dp = 1;
    ck_assert_int_eq(kfac_refresh_interval(x, x1, x2, N, alpha, &d, &dp), 0);
    ck_assert(d == 1 && dp == 1); /* never below 1 */
    d = 6, dp = 2;
    ck_assert_int_eq(kfac_refresh_interval(x, NULL, NULL, N, alpha, &d, &dp), 0);
    ck_assert(d == 3 && dp == 6); /* no history: not similar */
    d = 6, dp = 2;
    ck_assert_int_eq(kfac_refresh_interval(x, x, NULL, N, alpha, &d, &dp), 0);
    ck_assert(d == 6 && dp == 6);
    d = 0;
    ck_assert_int_eq(kfac_refresh_interval(x, x1, x2, N, alpha, &d, &dp), -EINVAL);
    d = 1;
    ck_assert_int_eq(kfac_refresh_interval(x, x1, x2, N, 0.0, &d, &dp), -EINVAL);
}
END_TEST

/* ---- one tracker against the reference ----------------------------------------- */

/* Random sequences of values, one per step, the tracker asked at every
 * step: the refresh steps, the intervals and the next step match the
 * reference for the whole run, with growth (long similar stretches reach
 * the cap) and resets (a fresh draw halves the interval). */
START_TEST(test_refresh_tracker_matches_reference) {
    SEEDED();
    for (int trial = 0; trial < 20; trial++) {
        const size_t n = 1 + rng_below(&rng, 60);
        const int cap = 1 + (int)rng_below(&rng, 40);
        const double p_sim = 0.5 + 0.5 * rng_uniform(&rng);
        const long steps = 400, t0 = (long)rng_below(&rng, 5);
        kfac_refresh_t *r = kfac_refresh_new(n, 0.1, t0);
        ck_assert_ptr_nonnull(r);
        r->max_delta = cap;
        s_ref_t ref = {.n = n, .alpha = 0.1, .cap = cap, .d1 = 1, .d2 = 1, .next = t0};
        ref.hist = malloc((size_t)(steps + 1) * n * sizeof(float));
        float *x = malloc(n * sizeof(float)), *prev = malloc(n * sizeof(float));
        ck_assert(ref.hist && x && prev);
        for (size_t i = 0; i < n; i++) prev[i] = (float)rng_normal(&rng);
        int max_seen = 0, halvings = 0, growths = 0, resets = 0;
        for (long t = 0; t < steps; t++) {
            s_next_value(&rng, prev, x, n, p_sim); /* the statistic drifts every step, refreshed or not */
            memcpy(prev, x, n * sizeof(float));
            int due = kfac_refresh_due(r, t);
            ck_assert_msg(due == (t >= ref.next), "trial %d step %ld: due %d, reference next %ld, seed %llu", trial, t,
                          due, ref.next, SEEDMSG);
            if (!due) continue;
            int d0 = ref.d1;
            double e1 = ref.n_rec ? s_ref_dist(x, ref.hist + (size_t)(ref.n_rec - 1) * n, n) : INFINITY;
            int want = s_ref_record(&ref, x, t);
            int got = kfac_refresh_record(r, x, t);
            ck_assert_msg(got == want, "trial %d step %ld: interval %d, reference %d (cap %d), seed %llu", trial, t, got,
                          want, cap, SEEDMSG);
            ck_assert_int_eq(r->next, ref.next);
            ck_assert_int_le(got, cap);
            ck_assert_msg(r->last_dist == e1 && r->last_similar == (e1 < 0.1), "step %ld: distance %.17g, want %.17g, seed %llu",
                          t, r->last_dist, e1, SEEDMSG);
            if (got > max_seen) max_seen = got;
            if (got < d0) halvings++;
            if (got > d0) growths++;
            if (r->n_records > 1 && !r->last_similar) resets++;
        }
        ck_assert_int_eq(r->n_records, ref.n_rec);
        /* both regimes were exercised whenever the run was mostly similar */
        if (cap >= 2) ck_assert_msg(growths > 0, "trial %d: the interval never grew, seed %llu", trial, SEEDMSG);
        ck_assert_msg(resets > 0 || p_sim > 0.97, "trial %d: never reset (p_sim %.2f), seed %llu", trial, p_sim, SEEDMSG);
        (void)max_seen;
        (void)halvings;
        kfac_refresh_free(&r);
        ck_assert_ptr_null(r);
        free(ref.hist);
        free(x);
        free(prev);
    }
}
END_TEST

/* The deterministic shapes of growth and reset: an unchanging statistic
 * goes 1, 1, 2, 3, 5, 8, 13, 21 and stops at the cap; changes halve it
 * (32 -> 16 -> 8 -> 4) down to 1; then it grows again. */
START_TEST(test_refresh_tracker_growth_cap_and_reset) {
    SEEDED();
    enum { N = 16 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = (float)rng_normal(&rng);
    kfac_refresh_t *r = kfac_refresh_new(N, 0.1, 1);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->max_delta, KFAC_REFRESH_MAX_INTERVAL);
    const int grow[] = {1, 1, 2, 3, 5, 8, 13, 21, 32, 32, 32};
    for (int k = 0; k < 11; k++) {
        long t = r->next;
        ck_assert(kfac_refresh_due(r, t) && !kfac_refresh_due(r, t - 1));
        int d = kfac_refresh_record(r, x, t);
        ck_assert_msg(d == grow[k], "record %d: interval %d, want %d, seed %llu", k, d, grow[k], SEEDMSG);
        ck_assert_int_eq(r->next, t + d);
    }
    const int shrink[] = {16, 8, 4, 2, 1, 1};
    for (int k = 0; k < 6; k++) {
        for (int i = 0; i < N; i++) x[i] *= 2.0f; /* 100% away each time */
        int d = kfac_refresh_record(r, x, r->next);
        ck_assert_msg(d == shrink[k] && !r->last_similar, "reset %d: interval %d, want %d, seed %llu", k, d,
                      shrink[k], SEEDMSG);
    }
    const int again[] = {1, 2, 3, 5}; /* X_-1 equal, X_-2 not: kept; then the sums */
    for (int k = 0; k < 4; k++) {
        int d = kfac_refresh_record(r, x, r->next);
        ck_assert_int_eq(d, again[k]);
    }
    r->max_delta = 0;
    ck_assert_int_eq(kfac_refresh_record(r, x, r->next), -EINVAL);
    kfac_refresh_free(&r);
    kfac_refresh_free(&r);
    ck_assert_ptr_null(kfac_refresh_new(0, 0.1, 0));
    ck_assert_ptr_null(kfac_refresh_new(4, 0.0, 0));
}
END_TEST

/* ---- a whole network ------------------------------------------------------------- */

static const char *s_model =
    "input 2x5x5\n"
    "conv name=c1 out=3 k=3 pad=1\n"
    "fc name=f0 out=4 kfac=doubly\n"
    "batchnorm name=bn\nrelu\n"
    "fc name=f1 out=5\n"
    "softmax_xent\n";

/* Every factor of a real layout follows its own reference; a slot is
 * wanted exactly when one of its factors is due; factors sent while not
 * due are not recorded; the counts add up. Each factor gets its own
 * similarity probability so that the factors of one layer fall out of step
 * (a layer is then wanted for one factor and the other arrives too). */
START_TEST(test_refresh_plan_matches_reference) {
    SEEDED();
    net_t *net = testnet_parse(s_model, 4);
    kfac_stats_t *batch = kfac_stats_new(net);
    ck_assert(net && batch);
    const int cap = 2 + (int)rng_below(&rng, 20);
    kfac_refresh_plan_t *p = kfac_refresh_plan_new(batch, 0.1, cap, 0);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(p->n_slots, batch->n_layers);
    int nt = p->n_trackers;
    ck_assert_int_eq(nt, 2 + 4 + 1 + 2);
    s_ref_t *ref = calloc((size_t)nt, sizeof *ref);
    double *p_sim = calloc((size_t)nt, sizeof *p_sim);
    unsigned char *want = calloc((size_t)p->n_slots, 1), *rec = calloc((size_t)nt, 1);
    const long steps = 200;
    ck_assert(ref && p_sim && want && rec);
    for (int j = 0; j < batch->n_layers; j++)
        for (int f = 0; f < batch->layers[j].n_factors; f++) {
            int i = kfac_refresh_plan_index(p, j, f);
            ck_assert_int_ge(i, 0);
            size_t n = kfac_factor_len(&batch->layers[j].f[f]);
            ref[i] = (s_ref_t){.n = n, .alpha = 0.1, .cap = cap, .d1 = 1, .d2 = 1, .next = 0};
            ref[i].hist = malloc((size_t)(steps + 1) * n * sizeof(float));
            ck_assert_ptr_nonnull(ref[i].hist);
            p_sim[i] = 0.6 + 0.4 * rng_uniform(&rng);
            float *d = batch->layers[j].f[f].data;
            for (size_t e = 0; e < n; e++) d[e] = (float)rng_normal(&rng);
        }
    ck_assert_int_eq(kfac_refresh_plan_index(p, 0, 2), -1);
    ck_assert_int_eq(kfac_refresh_plan_index(p, p->n_slots, 0), -1);
    long total = 0, sent_not_due = 0;
    float *tmp = malloc(batch->n_floats * sizeof(float));
    ck_assert_ptr_nonnull(tmp);
    for (long t = 0; t < steps; t++) {
        int nw = kfac_refresh_plan_wanted(p, t, want);
        int count = 0;
        for (int j = 0; j < p->n_slots; j++) {
            int any = 0;
            for (int f = 0; f < batch->layers[j].n_factors; f++) any |= t >= ref[kfac_refresh_plan_index(p, j, f)].next;
            ck_assert_msg(want[j] == any, "step %ld slot %d: wanted %d, reference %d, seed %llu", t, j, want[j], any,
                          SEEDMSG);
            count += any;
        }
        ck_assert_int_eq(nw, count);
        /* the statistics of the wanted layers (all factors of each) drift and are sent */
        for (int j = 0; j < batch->n_layers; j++)
            for (int f = 0; f < batch->layers[j].n_factors; f++) {
                kfac_factor_t *fa = &batch->layers[j].f[f];
                int i = kfac_refresh_plan_index(p, j, f);
                s_next_value(&rng, fa->data, tmp, ref[i].n, p_sim[i]);
                memcpy(fa->data, tmp, ref[i].n * sizeof(float));
                fa->n_updates = want[j] ? 1 : 0;
            }
        int n_want = 0;
        for (int j = 0; j < batch->n_layers; j++)
            for (int f = 0; f < batch->layers[j].n_factors; f++) {
                int i = kfac_refresh_plan_index(p, j, f);
                if (want[j] && t >= ref[i].next) {
                    s_ref_record(&ref[i], batch->layers[j].f[f].data, t);
                    n_want++;
                } else if (want[j]) {
                    sent_not_due++;
                }
            }
        int got = kfac_refresh_plan_record(p, batch, t, rec);
        ck_assert_int_eq(got, n_want);
        total += got;
        for (int i = 0; i < nt; i++) {
            ck_assert_int_eq(p->tr[i]->next, ref[i].next);
            ck_assert_int_eq(p->tr[i]->delta, ref[i].d1);
        }
    }
    ck_assert_int_eq(p->n_records, total);
    ck_assert_int_le(p->n_similar, total);
    ck_assert_msg(total < steps * nt, "nothing was skipped in %ld steps, seed %llu", steps, SEEDMSG);
    (void)sent_not_due;
    /* a different layout is refused and records nothing */
    net_t *other = testnet_parse("input 1x4x4\nflatten\nfc out=3\nsoftmax_xent\n", 4);
    kfac_stats_t *ob = kfac_stats_new(other);
    ck_assert_int_eq(kfac_refresh_plan_record(p, ob, steps, rec), -EINVAL);
    ck_assert_int_eq(p->n_records, total);
    ck_assert_ptr_null(kfac_refresh_plan_new(batch, 0.0, 0, 0));
    ck_assert_ptr_null(kfac_refresh_plan_new(batch, 0.1, -1, 0));
    kfac_refresh_plan_t *q = kfac_refresh_plan_new(ob, 0.1, 0, 0);
    ck_assert_int_eq(q->tr[0]->max_delta, KFAC_REFRESH_MAX_INTERVAL);
    kfac_refresh_plan_free(&q);
    kfac_refresh_plan_free(&p);
    ck_assert_ptr_null(p);
    kfac_refresh_plan_free(&p);
    for (int i = 0; i < nt; i++) free(ref[i].hist);
    free(ref);
    free(p_sim);
    free(want);
    free(rec);
    free(tmp);
    kfac_stats_free(&ob);
    kfac_stats_free(&batch);
    net_free(&other);
    net_free(&net);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("kfac_refresh");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_refresh_distance_matches_double);
    tcase_add_test(tc, test_refresh_interval_branches);
    tcase_add_test(tc, test_refresh_tracker_matches_reference);
    tcase_add_test(tc, test_refresh_tracker_growth_cap_and_reset);
    tcase_add_test(tc, test_refresh_plan_matches_reference);
    suite_add_tcase(s, tc);
    return s;
}
