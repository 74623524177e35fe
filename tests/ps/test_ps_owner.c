/* tests/ps/test_ps_owner.c — member ids bound to CURVE keys and the limit
 * of members per key (ps/owner.c), driven without sockets: a Hello with an
 * id of another key is refused, a key at its limit is refused while its
 * records are live and may replace a silent one, rejoining its own id
 * never counts against it, no key ("" : no CURVE) is never refused, and
 * bindings are dropped with their key or when the key moves on; saved
 * bindings load back whole or not at all (a resume from a checkpoint). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ps/owner.h"
#include "ps/peers.h"

#define K1 "k1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define K2 "k2-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define SEC 1000000000ULL

static ps_peer_t *s_add(ps_peers_t *t, msg_role_t role, uint32_t asked_id, const char *key, uint64_t last_ns) {
    zloop_peer_t r;
    memset(&r, 0, sizeof r);
    r.len = (size_t)snprintf((char *)r.id, sizeof r.id, "peer-%u-%s", asked_id, key);
    ps_peer_t *p = ps_peers_add(t, &r);
    ck_assert_ptr_nonnull(p);
    p->role = role;
    p->asked_id = asked_id;
    p->present = 1;
    p->last_ns = last_ns;
    snprintf(p->key, sizeof p->key, "%s", key);
    return p;
}

START_TEST(test_ps_owner_id_stays_with_its_key) {
    ps_peers_t t;
    ps_owners_t o = {0};
    ck_assert_int_eq(ps_peers_init(&t, 8), 0);
    uint64_t now = 100 * SEC, live = 3 * SEC;
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 1, K1, 1, now, live, NULL), PS_OWNER_ADMIT);
    ps_peer_t *p = s_add(&t, MSG_ROLE_WORKER, 1, K1, now);
    ck_assert_int_eq(ps_owners_bind(&o, &t, MSG_ROLE_WORKER, 1, K1), 0);
    ck_assert_str_eq(ps_owners_find(&o, MSG_ROLE_WORKER, 1), K1);
    ck_assert_ptr_null(ps_owners_find(&o, MSG_ROLE_STATSD, 1)); /* ids are per role */
    /* another key, id 1: refused whether the holder is live or silent or gone */
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 1, K2, 0, now, live, NULL), PS_OWNER_OTHER_KEY);
    p->last_ns = now - 10 * SEC;
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 1, K2, 1, now, live, NULL), PS_OWNER_OTHER_KEY);
    ps_peers_remove(&t, p);
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 1, K2, 1, now, live, NULL), PS_OWNER_OTHER_KEY);
    /* the same key takes its id back */
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 1, K1, 1, now, live, NULL), PS_OWNER_ADMIT);
    /* without CURVE nothing is bound or refused */
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 1, "", 1, now, live, NULL), PS_OWNER_ADMIT);
    ck_assert_int_eq(ps_owners_bind(&o, &t, MSG_ROLE_WORKER, 7, ""), 0);
    ck_assert_ptr_null(ps_owners_find(&o, MSG_ROLE_WORKER, 7));
    /* invertd ids are no member ids: never bound */
    ck_assert_int_eq(ps_owners_bind(&o, &t, MSG_ROLE_INVERTD, 1, K2), 0);
    ck_assert_ptr_null(ps_owners_find(&o, MSG_ROLE_INVERTD, 1));
    /* a revoked key's ids are free again */
    ck_assert_int_eq(ps_owners_forget_key(&o, K1), 1);
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 1, K2, 1, now, live, NULL), PS_OWNER_ADMIT);
    ps_owners_release(&o);
    ps_owners_release(&o);
    ps_peers_release(&t);
}
END_TEST

START_TEST(test_ps_owner_members_per_key) {
    ps_peers_t t;
    ps_owners_t o = {0};
    ck_assert_int_eq(ps_peers_init(&t, 8), 0);
    uint64_t now = 100 * SEC, live = 3 * SEC;
    ps_peer_t *h = NULL;
    ps_peer_t *p = s_add(&t, MSG_ROLE_WORKER, 1, K1, now - SEC);
    ck_assert_int_eq(ps_owners_bind(&o, &t, MSG_ROLE_WORKER, 1, K1), 0);
    /* a second id from the same key while the first is live: full */
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 2, K1, 1, now, live, &h), PS_OWNER_KEY_FULL);
    ck_assert_ptr_eq(h, p);
    /* ... as any role: the key holds one client */
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_INVERTD, 2, K1, 1, now, live, &h), PS_OWNER_KEY_FULL);
    /* its own id again (a restart, a duplicate): not counted here */
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 1, K1, 1, now, live, &h), PS_OWNER_ADMIT);
    /* another key is not limited by K1's records */
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 2, K2, 1, now, live, &h), PS_OWNER_ADMIT);
    /* members_per_key = 2, or 0 (any number) */
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 2, K1, 2, now, live, &h), PS_OWNER_ADMIT);
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 2, K1, 0, now, live, &h), PS_OWNER_ADMIT);
    /* the first record falls silent (or is no longer present): it may be replaced */
    p->last_ns = now - live;
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 2, K1, 1, now, live, &h), PS_OWNER_KEY_REUSE);
    ck_assert_ptr_eq(h, p);
    p->last_ns = now;
    p->present = 0;
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 2, K1, 1, now, live, &h), PS_OWNER_KEY_REUSE);
    /* two silent records over a limit of one: still full */
    s_add(&t, MSG_ROLE_WORKER, 3, K1, 0)->present = 0;
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 2, K1, 1, now, live, &h), PS_OWNER_KEY_FULL);
    ps_owners_release(&o);
    ps_peers_release(&t);
}
END_TEST

START_TEST(test_ps_owner_bindings_stay_bounded) {
    ps_peers_t t;
    ps_owners_t o = {0};
    ck_assert_int_eq(ps_peers_init(&t, 8), 0);
    /* a key that takes id after id, each record forgotten before the next:
     * it keeps one binding, and the other key's id stays bound */
    s_add(&t, MSG_ROLE_WORKER, 100, K2, 0);
    ck_assert_int_eq(ps_owners_bind(&o, &t, MSG_ROLE_WORKER, 100, K2), 0);
    for (uint32_t id = 1; id <= 1000; id++) {
        ps_peer_t *p = s_add(&t, MSG_ROLE_WORKER, id, K1, 0);
        ck_assert_int_eq(ps_owners_bind(&o, &t, MSG_ROLE_WORKER, id, K1), 0);
        ck_assert_int_le(o.n, 3);
        ps_peers_remove(&t, p);
    }
    ck_assert_str_eq(ps_owners_find(&o, MSG_ROLE_WORKER, 100), K2);
    ck_assert_str_eq(ps_owners_find(&o, MSG_ROLE_WORKER, 1000), K1);
    ck_assert_ptr_null(ps_owners_find(&o, MSG_ROLE_WORKER, 999));
    /* binding the same id twice adds nothing */
    int n = o.n;
    ck_assert_int_eq(ps_owners_bind(&o, &t, MSG_ROLE_WORKER, 100, K2), 0);
    ck_assert_int_eq(o.n, n);
    ps_owners_release(&o);
    ps_peers_release(&t);
}
END_TEST

/* Saved bindings (a checkpoint's) replace the table whole, with no record
 * in the peers table: the ids stay with their keys after a restart; a bad
 * set (a role without member ids, a key not of Z85, an id twice) changes
 * nothing. */
START_TEST(test_ps_owner_load_saved_bindings) {
    ps_peers_t t;
    ps_owners_t o = {0};
    ck_assert_int_eq(ps_peers_init(&t, 8), 0);
    ck_assert_int_eq(ps_owners_bind(&o, &t, MSG_ROLE_WORKER, 9, K1), 0);
    ps_owner_t v[3] = {{MSG_ROLE_WORKER, 1, K1}, {MSG_ROLE_WORKER, 2, K2}, {MSG_ROLE_STATSD, 1, K2}};
    char why[256] = "";
    ck_assert_int_eq(ps_owners_load(&o, v, 3, why, sizeof why), 0);
    ck_assert_int_eq(ps_owners_count(&o), 3);
    ck_assert_ptr_null(ps_owners_find(&o, MSG_ROLE_WORKER, 9)); /* replaced */
    for (int i = 0; i < 3; i++) {
        const ps_owner_t *b = ps_owners_at(&o, i);
        ck_assert_str_eq(ps_owners_find(&o, b->role, b->id), b->key);
    }
    ck_assert_ptr_null(ps_owners_at(&o, 3));
    uint64_t now = 100 * SEC, live = 3 * SEC;
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 2, K1, 1, now, live, NULL), PS_OWNER_OTHER_KEY);
    ck_assert_int_eq(ps_owners_check(&o, &t, MSG_ROLE_WORKER, 2, K2, 1, now, live, NULL), PS_OWNER_ADMIT);
    /* bad sets leave the table as it was */
    ps_owner_t bad[2] = {{MSG_ROLE_WORKER, 5, K1}, {MSG_ROLE_INVERTD, 1, K2}};
    ck_assert_int_eq(ps_owners_load(&o, bad, 2, why, sizeof why), -EINVAL);
    ck_assert_msg(strstr(why, "binding 1") != NULL, "%s", why);
    bad[1] = (ps_owner_t){MSG_ROLE_WORKER, 5, K2};
    ck_assert_int_eq(ps_owners_load(&o, bad, 2, why, sizeof why), -EINVAL);
    ck_assert_msg(strstr(why, "worker id 5") != NULL, "%s", why);
    bad[1] = (ps_owner_t){MSG_ROLE_WORKER, 6, "short"};
    ck_assert_int_eq(ps_owners_load(&o, bad, 2, why, sizeof why), -EINVAL);
    ck_assert_msg(strstr(why, "Z85") != NULL, "%s", why);
    bad[1] = (ps_owner_t){MSG_ROLE_WORKER, 6, "k2-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"b"};
    ck_assert_int_eq(ps_owners_load(&o, bad, 2, why, sizeof why), -EINVAL);
    ck_assert_int_eq(ps_owners_count(&o), 3);
    ck_assert_str_eq(ps_owners_find(&o, MSG_ROLE_WORKER, 2), K2);
    /* one id dropped alone */
    ck_assert_int_eq(ps_owners_forget_id(&o, MSG_ROLE_WORKER, 2), 1);
    ck_assert_int_eq(ps_owners_forget_id(&o, MSG_ROLE_WORKER, 2), 0);
    ck_assert_str_eq(ps_owners_find(&o, MSG_ROLE_STATSD, 1), K2);
    ck_assert_int_eq(ps_owners_count(&o), 2);
    /* an empty set empties it */
    ck_assert_int_eq(ps_owners_load(&o, NULL, 0, why, sizeof why), 0);
    ck_assert_int_eq(ps_owners_count(&o), 0);
    ps_owners_release(&o);
    ps_peers_release(&t);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_owner");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_owner_id_stays_with_its_key);
    tcase_add_test(tc, test_ps_owner_members_per_key);
    tcase_add_test(tc, test_ps_owner_bindings_stay_bounded);
    tcase_add_test(tc, test_ps_owner_load_saved_bindings);
    suite_add_tcase(s, tc);
    return s;
}
