/* tests/ps/test_ps_trim.c — when kfac-ps gives freed memory back
 * (ps/trim.c): random sequences of messages (sizes around the large-message
 * bound), training steps and ticks at random gaps, each decision checked
 * against the rule written out directly over the whole history (due when a
 * large message came in after the last trim and none for max(idle, 2 x the
 * step period), the period being the longest of the step gaps each decayed
 * by a tenth per later step). Seed printed on failure (KFAC_TEST_SEED
 * repeats it). */
#include <check.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/base/rng.h"
#include "ps/trim.h"
#include "tests/lib/seed.h"

#define EVENTS 3000
#define MAX_STEPS EVENTS

/* The step period by its definition: over the gaps g_1..g_k between
 * consecutive steps, p_0 = 0, p_i = max(g_i, p_{i-1} - p_{i-1} / 10). */
static uint64_t s_period(const uint64_t *steps, int n) {
    uint64_t p = 0;
    for (int i = 1; i < n; i++) {
        uint64_t g = steps[i] - steps[i - 1], d = p - p / 10;
        p = g > d ? g : d;
    }
    return p;
}

START_TEST(test_ps_trim_due_after_quiet_burst) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    ps_trim_t t;
    ps_trim_init(&t);
    const uint64_t ms = 1000000ULL, idle_ns = 1 + rng_below(&r, 1000) * ms;
    static uint64_t steps[MAX_STEPS];
    int n_steps = 0;
    uint64_t now = 1 + rng_below(&r, 1000);
    uint64_t last_large = 0, n_large_since = 0, n_trims = 0, n_due = 0;
    for (int e = 0; e < EVENTS; e++) {
        now += rng_below(&r, 4) == 0 ? rng_below(&r, 3000) * ms : rng_below(&r, 300) * ms;
        uint32_t what = rng_below(&r, 3);
        if (what == 0) {
            /* a message: small, exactly at the bound, or large */
            uint32_t k = rng_below(&r, 3);
            size_t n = k == 0   ? rng_below(&r, PS_TRIM_LARGE_BYTES)
                       : k == 1 ? PS_TRIM_LARGE_BYTES
                                : PS_TRIM_LARGE_BYTES + rng_below(&r, 1u << 26);
            ps_trim_received(&t, now, n);
            if (n >= PS_TRIM_LARGE_BYTES) {
                last_large = now;
                n_large_since++;
            }
        } else if (what == 1 && rng_below(&r, 2)) {
            ps_trim_stepped(&t, now);
            steps[n_steps++] = now;
        } else {
            /* a tick */
            uint64_t two_p = 2 * s_period(steps, n_steps), quiet = two_p > idle_ns ? two_p : idle_ns;
            ck_assert_uint_eq(ps_trim_quiet_ns(&t, idle_ns), quiet);
            int want = n_large_since > 0 && now - last_large >= quiet;
            int got = ps_trim_due(&t, now, idle_ns);
            if (got != want)
                ck_abort_msg("seed %" PRIu64 ": event %d: due %d, the rule says %d (large since trim %" PRIu64
                             ", quiet %" PRIu64 " ns of %" PRIu64 " needed)",
                             seed, e, got, want, n_large_since, now - last_large, quiet);
            if (got) {
                n_due++;
                ps_trim_done(&t);
                n_large_since = 0;
                n_trims++;
                ck_assert_int_eq(ps_trim_due(&t, now + 100 * quiet, idle_ns), 0); /* nothing new: not due again */
            }
        }
    }
    ck_assert_uint_eq(t.n_trims, n_trims);
    ck_assert_msg(n_due > 0, "seed %" PRIu64 ": no trim was ever due: the sequence tests nothing", seed);
}
END_TEST

/* The cases by name: a run that trains slowly is never trimmed; a run that
 * stops is, once; a PS that never stepped is, after idle of quiet. */
START_TEST(test_ps_trim_training_never_stopped_once) {
    ps_trim_t t;
    ps_trim_init(&t);
    const uint64_t ms = 1000000ULL, idle = 500 * ms;
    ck_assert_int_eq(ps_trim_due(&t, 10000 * ms, idle), 0); /* nothing received */
    /* training at 1.25 s a step (slower than idle): two 13 MB gradients a
     * step, heartbeats between, the step when the second is in */
    uint64_t now = 0;
    for (int step = 0; step < 100; step++) {
        ps_trim_received(&t, now + 100 * ms, 13u << 20);
        ps_trim_received(&t, now + 900 * ms, 13u << 20);
        ps_trim_received(&t, now + 1000 * ms, 64);
        ps_trim_stepped(&t, now + 950 * ms);
        ck_assert_int_eq(ps_trim_due(&t, now + 1200 * ms, idle), 0);
        now += 1250 * ms;
    }
    /* the run stops: quiet for 2 periods (2.5 s) after the last gradient */
    uint64_t last = now - 1250 * ms + 900 * ms;
    ck_assert_uint_eq(ps_trim_quiet_ns(&t, idle), 2500 * ms);
    ck_assert_int_eq(ps_trim_due(&t, last + 2500 * ms - 1, idle), 0);
    ck_assert_int_eq(ps_trim_due(&t, last + 2500 * ms, idle), 1);
    ps_trim_done(&t);
    ck_assert_int_eq(ps_trim_due(&t, last + 10000 * ms, idle), 0);
    ps_trim_received(&t, last + 11000 * ms, 100); /* a heartbeat */
    ck_assert_int_eq(ps_trim_due(&t, last + 20000 * ms, idle), 0);
    ck_assert_uint_eq(t.n_trims, 1);

    /* never stepped: a burst, then idle of quiet */
    ps_trim_init(&t);
    for (int i = 0; i < 20; i++) ps_trim_received(&t, (uint64_t)i * 700 * ms, 20u << 20);
    uint64_t end = 19 * 700 * ms;
    ck_assert_int_eq(ps_trim_due(&t, end + idle - 1, idle), 0);
    ck_assert_int_eq(ps_trim_due(&t, end + idle, idle), 1);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_trim");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_trim_due_after_quiet_burst);
    tcase_add_test(tc, test_ps_trim_training_never_stopped_once);
    suite_add_tcase(s, tc);
    return s;
}
