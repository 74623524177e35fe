/* tests/ps/test_ps_trim.c — when kfac-ps gives freed memory back
 * (ps/trim.c): random sequences of messages (sizes around the large-message
 * bound), changes of the training flag and ticks at random gaps, each
 * decision checked against the rule written out directly over the whole
 * history: due when nobody trains, a large message came in after the last
 * trim, and none for idle_ns. Seed printed on failure (KFAC_TEST_SEED
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

START_TEST(test_ps_trim_due_after_quiet_burst) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    ps_trim_t t;
    ps_trim_init(&t);
    const uint64_t ms = 1000000ULL, idle_ns = 1 + rng_below(&r, 1000) * ms;
    uint64_t now = 1 + rng_below(&r, 1000);
    uint64_t last_large = 0, n_large_since = 0, n_trims = 0;
    int training = 0, n_due = 0, n_held = 0;
    for (int e = 0; e < EVENTS; e++) {
        now += rng_below(&r, 4) == 0 ? rng_below(&r, 3000) * ms : rng_below(&r, 300) * ms;
        uint32_t what = rng_below(&r, 8);
        if (what < 4) {
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
        } else if (what == 4) {
            training = !training; /* workers come or go */
        } else {
            /* a tick */
            int quiet = n_large_since > 0 && now - last_large >= idle_ns;
            int want = quiet && !training;
            int got = ps_trim_due(&t, now, idle_ns, training);
            if (got != want)
                ck_abort_msg("seed %" PRIu64 ": event %d: due %d, the rule says %d (training %d, large since trim %" PRIu64
                             ", quiet %" PRIu64 " ns of %" PRIu64 ")",
                             seed, e, got, want, training, n_large_since, now - last_large, idle_ns);
            n_held += quiet && training;
            if (got) {
                n_due++;
                ps_trim_done(&t);
                n_large_since = 0;
                n_trims++;
                ck_assert_int_eq(ps_trim_due(&t, now + 100 * idle_ns, idle_ns, 0), 0); /* nothing new: not due again */
            }
        }
    }
    ck_assert_uint_eq(t.n_trims, n_trims);
    ck_assert_msg(n_due > 0 && n_held > 0, "seed %" PRIu64 ": %d trims due, %d held by training: the sequence tests too little",
                  seed, n_due, n_held);
}
END_TEST

/* The cases by name: a run that trains, however irregular its steps, is
 * never trimmed; once its workers are gone it is, once; a PS that never
 * trained is, after idle of quiet. */
START_TEST(test_ps_trim_training_never_then_once) {
    ps_trim_t t;
    ps_trim_init(&t);
    const uint64_t ms = 1000000ULL, idle = 500 * ms;
    ck_assert_int_eq(ps_trim_due(&t, 10000 * ms, idle, 0), 0); /* nothing received */
    /* training with step times swinging from 0.2 to 3 s: two 13 MB
     * gradients a step, the second up to 2.9 s after the first */
    uint64_t now = 0;
    for (int step = 0; step < 100; step++) {
        uint64_t gap = step % 10 == 9 ? 2900 * ms : 200 * ms;
        ps_trim_received(&t, now, 13u << 20);
        ps_trim_received(&t, now + gap / 2, 64); /* a heartbeat */
        ck_assert_int_eq(ps_trim_due(&t, now + gap, idle, 1), 0);
        ps_trim_received(&t, now + gap, 13u << 20);
        now += gap + 100 * ms;
    }
    /* the workers are gone: one trim after idle of quiet, then none until
     * the next large message */
    uint64_t last = now - 100 * ms;
    ck_assert_int_eq(ps_trim_due(&t, last + idle - 1, idle, 0), 0);
    ck_assert_int_eq(ps_trim_due(&t, last + idle, idle, 1), 0);
    ck_assert_int_eq(ps_trim_due(&t, last + idle, idle, 0), 1);
    ps_trim_done(&t);
    ck_assert_int_eq(ps_trim_due(&t, last + 20 * idle, idle, 0), 0);
    ps_trim_received(&t, last + 21 * idle, 100); /* a heartbeat */
    ck_assert_int_eq(ps_trim_due(&t, last + 40 * idle, idle, 0), 0);
    ck_assert_uint_eq(t.n_trims, 1);

    /* never trained: a burst (20 frames of 20 MB, 0.7 s apart), then idle of quiet */
    ps_trim_init(&t);
    for (int i = 0; i < 20; i++) ps_trim_received(&t, (uint64_t)i * 700 * ms, 20u << 20);
    uint64_t end = 19 * 700 * ms;
    ck_assert_int_eq(ps_trim_due(&t, end + idle - 1, idle, 0), 0);
    ck_assert_int_eq(ps_trim_due(&t, end + idle, idle, 0), 1);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_trim");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_trim_due_after_quiet_burst);
    tcase_add_test(tc, test_ps_trim_training_never_then_once);
    suite_add_tcase(s, tc);
    return s;
}
