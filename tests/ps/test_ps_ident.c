/* tests/ps/test_ps_ident.c — what a member has done, kept by its identity
 * (ps/ident.c), driven without sockets: a member that leaves and comes
 * back (detach, attach) finds its round's pushes, stalls, demotion, bad
 * inverses, distrust, statistics version and tokens where it left them;
 * CURVE identities are the key (its members share them), others the role
 * and member id; a full table replaces an idle, unpenalized identity, never
 * an attached one; penalties survive the checkpoint's save and load, and a
 * damaged saved set loads not at all. A random walk checks the push share
 * against a count kept here. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/base/rng.h"
#include "ps/ident.h"
#include "tests/lib/seed.h"

#define K1 "k1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define K2 "k2-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

START_TEST(test_ps_ident_outlives_the_connection) {
    ps_idents_t t = {0};
    ps_ident_t *a = ps_ident_attach(&t, MSG_ROLE_WORKER, "", 3, 10);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(ps_ident_may_push(a, 7, 1), 1);
    ps_ident_pushed(a, 7);
    ck_assert_int_eq(ps_ident_may_push(a, 7, 1), 0); /* its share of round 7 is in */
    ck_assert_int_eq(ps_ident_stalled(a), 1);
    ck_assert_int_eq(ps_ident_demote(a), 1);
    ck_assert_int_eq(ps_ident_demote(a), 0); /* once */
    ck_assert_int_eq(ps_ident_stats_version(a, 5), 0);
    ps_ident_detach(a, 20); /* Bye */
    ck_assert_int_eq(a->attached, 0);
    ps_ident_t *b = ps_ident_attach(&t, MSG_ROLE_WORKER, "", 3, 30); /* Hello again, same id */
    ck_assert_ptr_eq(a, b);
    ck_assert_int_eq(ps_ident_may_push(b, 7, 1), 0);
    ck_assert_int_eq(ps_ident_may_push(b, 8, 1), 1); /* the next round is a new share */
    ck_assert_int_eq(b->n_stalls, 1);
    ck_assert_int_eq(b->demoted, 1);
    ck_assert_int_eq(ps_ident_stats_version(b, 5), -1);
    ck_assert_int_eq(ps_ident_stats_version(b, 6), 0);
    /* another id, another role: other identities */
    ps_ident_t *c = ps_ident_attach(&t, MSG_ROLE_WORKER, "", 4, 30);
    ps_ident_t *d = ps_ident_attach(&t, MSG_ROLE_STATSD, "", 3, 30);
    ck_assert(c != a && d != a && c != d);
    ck_assert_int_eq(ps_ident_may_push(c, 7, 1), 1);
    /* a dropped gradient gives the share back */
    ps_ident_pushed(c, 7);
    ps_ident_unpush(c, 7);
    ck_assert_int_eq(ps_ident_may_push(c, 7, 1), 1);
    ps_ident_unpush(c, 6); /* another round's: nothing */
    ck_assert_int_eq(c->n_pushed, 0);
    ps_idents_release(&t);
}
END_TEST

START_TEST(test_ps_ident_curve_key_is_the_identity) {
    ps_idents_t t = {0};
    /* one key, two member ids: one identity (the key is the principal) */
    ps_ident_t *a = ps_ident_attach(&t, MSG_ROLE_WORKER, K1, 1, 10);
    ps_ident_t *b = ps_ident_attach(&t, MSG_ROLE_WORKER, K1, 2, 10);
    ck_assert_ptr_eq(a, b);
    ck_assert_int_eq(a->attached, 2);
    ps_ident_pushed(a, 4);
    ck_assert_int_eq(ps_ident_may_push(a, 4, 2), 1); /* members_per_key = 2: two shares */
    ps_ident_pushed(a, 4);
    ck_assert_int_eq(ps_ident_may_push(a, 4, 2), 0);
    ck_assert_int_eq(ps_ident_may_push(a, 4, 0), 1); /* 0: any number */
    /* the same id under another key, and the key under another role */
    ck_assert(ps_ident_attach(&t, MSG_ROLE_WORKER, K2, 1, 10) != a);
    ck_assert(ps_ident_attach(&t, MSG_ROLE_INVERTD, K1, 0, 10) != a);
    /* an inverse daemon's strikes and distrust stay with its key */
    ps_ident_t *v = ps_ident_attach(&t, MSG_ROLE_INVERTD, K2, 0, 10);
    for (int i = 1; i <= 3; i++) ck_assert_int_eq(ps_ident_bad_inverse(v), i);
    ck_assert_int_eq(ps_ident_distrust(v), 1);
    ck_assert_int_eq(ps_ident_distrust(v), 0);
    ps_ident_detach(v, 20);
    ps_ident_t *w = ps_ident_attach(&t, MSG_ROLE_INVERTD, K2, 9, 30); /* back, with another --id */
    ck_assert_ptr_eq(v, w);
    ck_assert_int_eq(w->distrusted, 1);
    ck_assert_int_eq(w->n_bad_inverses, 3);
    ps_idents_release(&t);
}
END_TEST

START_TEST(test_ps_ident_tokens_stay) {
    ps_idents_t t = {0};
    ps_ident_t *a = ps_ident_attach(&t, MSG_ROLE_WORKER, "", 1, 1);
    const uint64_t now = 1000000000ULL;
    int taken = 0;
    for (int i = 0; i < 100; i++) taken += ps_ident_take_token(a, now, 20.0, 40.0);
    ck_assert_int_eq(taken, 40); /* the burst, then nothing */
    ps_ident_detach(a, now);
    a = ps_ident_attach(&t, MSG_ROLE_WORKER, "", 1, now);
    ck_assert_int_eq(ps_ident_take_token(a, now, 20.0, 40.0), 0); /* coming back refills nothing */
    ck_assert_int_eq(ps_ident_take_token(a, now + 100000000ULL, 20.0, 40.0), 1); /* 0.1 s: 2 tokens */
    ps_idents_release(&t);
}
END_TEST

START_TEST(test_ps_ident_table_stays_bounded) {
    ps_idents_t t = {0};
    ps_ident_t *pen = ps_ident_attach(&t, MSG_ROLE_WORKER, "", 0, 0);
    ps_ident_stalled(pen);
    ps_ident_detach(pen, 0); /* the oldest, but penalized */
    ps_ident_t *live = ps_ident_attach(&t, MSG_ROLE_WORKER, "", 1, 0); /* attached: never replaced */
    for (uint32_t i = 2; i < PS_IDENT_MAX; i++) {
        ps_ident_t *x = ps_ident_attach(&t, MSG_ROLE_WORKER, "", i, i);
        ck_assert_ptr_nonnull(x);
        ps_ident_detach(x, i);
    }
    ck_assert_int_eq(t.n, PS_IDENT_MAX);
    /* full: a newcomer replaces the idle, unpenalized one heard from longest ago (id 2) */
    ps_ident_t *n = ps_ident_attach(&t, MSG_ROLE_WORKER, "", 1000000, PS_IDENT_MAX + 1);
    ck_assert_ptr_nonnull(n);
    ck_assert_int_eq(t.n, PS_IDENT_MAX);
    int have_pen = 0, have_live = 0, have_2 = 0;
    for (int i = 0; i < t.n; i++) {
        have_pen += t.v[i] == pen;
        have_live += t.v[i] == live;
        have_2 += t.v[i]->id == 2;
    }
    ck_assert_int_eq(have_pen, 1);
    ck_assert_int_eq(have_live, 1);
    ck_assert_int_eq(have_2, 0);
    ps_idents_release(&t);
    /* a table whose every identity is attached refuses a newcomer */
    for (uint32_t i = 0; i < PS_IDENT_MAX; i++) ck_assert_ptr_nonnull(ps_ident_attach(&t, MSG_ROLE_WORKER, "", i, i));
    ck_assert_ptr_null(ps_ident_attach(&t, MSG_ROLE_WORKER, "", PS_IDENT_MAX, 0));
    ps_idents_release(&t);
}
END_TEST

START_TEST(test_ps_ident_save_load) {
    ps_idents_t t = {0};
    ps_ident_t *a = ps_ident_attach(&t, MSG_ROLE_WORKER, "", 3, 1);
    ps_ident_stalled(a);
    ps_ident_stalled(a);
    ps_ident_demote(a);
    ps_ident_t *v = ps_ident_attach(&t, MSG_ROLE_INVERTD, K1, 0, 1);
    ps_ident_bad_inverse(v);
    ps_ident_t *st = ps_ident_attach(&t, MSG_ROLE_STATSD, "", 1, 1);
    ps_ident_stats_version(st, 41);
    ps_ident_attach(&t, MSG_ROLE_WORKER, "", 4, 1); /* nothing to keep */
    ps_ident_saved_t out[8];
    int n = ps_idents_save(&t, out, 8);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ps_idents_save(&t, NULL, 0), 3);
    char why[200];
    ps_idents_t u = {0};
    ck_assert_int_eq(ps_idents_load(&u, out, n, why, sizeof why), 0);
    ps_ident_t *a2 = ps_ident_attach(&u, MSG_ROLE_WORKER, "", 3, 2);
    ck_assert_int_eq(a2->n_stalls, 2);
    ck_assert_int_eq(a2->demoted, 1);
    ck_assert_int_eq(ps_ident_attach(&u, MSG_ROLE_INVERTD, K1, 5, 2)->n_bad_inverses, 1);
    ck_assert_int_eq(ps_ident_stats_version(ps_ident_attach(&u, MSG_ROLE_STATSD, "", 1, 2), 41), -1);
    /* damaged sets load not at all, the table unchanged */
    int before = u.n;
    ps_ident_saved_t bad[8];
    memcpy(bad, out, sizeof out);
    bad[1].role = (msg_role_t)99;
    ck_assert_int_eq(ps_idents_load(&u, bad, n, why, sizeof why), -EINVAL);
    ck_assert_msg(strstr(why, "role code 99") != NULL, "%s", why);
    memcpy(bad, out, sizeof out);
    snprintf(bad[0].key, sizeof bad[0].key, "short");
    ck_assert_int_eq(ps_idents_load(&u, bad, n, why, sizeof why), -EINVAL);
    memcpy(bad, out, sizeof out);
    bad[2] = bad[0]; /* the same identity twice */
    ck_assert_int_eq(ps_idents_load(&u, bad, n, why, sizeof why), -EINVAL);
    memcpy(bad, out, sizeof out);
    bad[0].demoted = 7;
    ck_assert_int_eq(ps_idents_load(&u, bad, n, why, sizeof why), -EINVAL);
    ck_assert_int_eq(u.n, before);
    ps_idents_release(&u);
    ps_idents_release(&t);
}
END_TEST

/* A random walk of members of a few identities pushing into rounds,
 * leaving, coming back and having gradients dropped: each identity's
 * pushes into the current round never pass its share, counted here. */
START_TEST(test_ps_ident_share_random_walk) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int run = 0; run < 50; run++) {
        ps_idents_t t = {0};
        const int limit = (int)rng_below(&r, 3); /* 0: any number */
        int count[6] = {0};
        long round = 0;
        ps_ident_t *held[6] = {0};
        for (int step = 0; step < 400; step++) {
            int k = (int)rng_below(&r, 6);
            if (!held[k]) held[k] = ps_ident_attach(&t, MSG_ROLE_WORKER, "", (uint32_t)k, (uint64_t)step);
            ps_ident_t *x = held[k];
            switch (rng_below(&r, 6)) {
            case 0:
                round++;
                memset(count, 0, sizeof count);
                break;
            case 1:
                ps_ident_detach(x, (uint64_t)step);
                held[k] = NULL;
                break;
            case 2:
                if (count[k] > 0) {
                    ps_ident_unpush(x, round);
                    count[k]--;
                }
                break;
            default: {
                int want = limit == 0 || count[k] < limit;
                ck_assert_msg(ps_ident_may_push(x, round, limit) == want, "seed %" PRIu64 ": identity %d", seed, k);
                if (want) {
                    ps_ident_pushed(x, round);
                    count[k]++;
                }
                break;
            }
            }
        }
        ps_idents_release(&t);
    }
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_ident");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_ident_outlives_the_connection);
    tcase_add_test(tc, test_ps_ident_curve_key_is_the_identity);
    tcase_add_test(tc, test_ps_ident_tokens_stay);
    tcase_add_test(tc, test_ps_ident_table_stays_bounded);
    tcase_add_test(tc, test_ps_ident_save_load);
    tcase_add_test(tc, test_ps_ident_share_random_walk);
    suite_add_tcase(s, tc);
    return s;
}
