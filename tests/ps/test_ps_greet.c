/* tests/ps/test_ps_greet.c — kfac-ps's answer to a Hello (ps/greet.c),
 * without sockets: another protocol version is refused first, then an
 * invalid Hello, then another release's build, then a Hello after the run
 * ended gets Shutdown; the caps per role; the shard a new worker gets (its
 * own --id when free, else the lowest free, shared round-robin when every
 * shard is taken), and none for an inverse daemon. Then a sequence of
 * Hellos through every admission decision in the order ps/hello.c asks
 * them (ps_greet_hello, ps_owners_check, ps_member_rejoin, the role cap,
 * ps_greet_rank): welcome, a second live holder of an id told to try again
 * later, a restarted member taking over its silent record, an id of
 * another key refused, a key at members_per_key refused and then allowed
 * to replace its silent record. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "common/base/version.h"
#include "ps/greet.h"
#include "ps/member.h"
#include "ps/owner.h"
#include "ps/peers.h"

static msg_limits_t s_limits(void) {
    msg_limits_t l;
    memset(&l, 0, sizeof l);
    l.max_string = 64;
    l.max_text = 1024;
    return l;
}

static void s_hello(msg_t *m, const char *build) {
    msg_init(m, MSG_HELLO, MSG_ROLE_WORKER, 3);
    m->hello.build_id = (char *)build;
    m->hello.host = "node1";
    m->hello.pid = 42;
}

START_TEST(test_ps_greet_hello_order) {
    msg_limits_t lim = s_limits();
    char err[600];
    msg_t m;
    s_hello(&m, KFAC_BUILD_ID);
    ck_assert_int_eq(ps_greet_hello(&m, &lim, 1, err, sizeof err), PS_GREET_GO);
    ck_assert_int_eq(ps_greet_hello(&m, &lim, 0, err, sizeof err), PS_GREET_RUN_OVER);
    /* the same release with another build suffix is welcome */
    char build[128];
    snprintf(build, sizeof build, "%s-other-commit", KFAC_BUILD_ID);
    s_hello(&m, build);
    ck_assert_int_eq(ps_greet_hello(&m, &lim, 1, err, sizeof err), PS_GREET_GO);
    /* another release: refused, before the end of the run is said */
    s_hello(&m, "kfac 999.0");
    ck_assert_int_eq(ps_greet_hello(&m, &lim, 0, err, sizeof err), PS_GREET_REFUSE_BUILD);
    ck_assert_ptr_nonnull(strstr(err, "kfac 999.0"));
    s_hello(&m, NULL);
    ck_assert_int_eq(ps_greet_hello(&m, &lim, 1, err, sizeof err), PS_GREET_REFUSE_BUILD);
    /* an invalid Hello (a build id over the limit) before the build check */
    char lng[100];
    memset(lng, 'x', sizeof lng - 1);
    lng[sizeof lng - 1] = '\0';
    s_hello(&m, lng);
    ck_assert_int_eq(ps_greet_hello(&m, &lim, 1, err, sizeof err), PS_GREET_INVALID);
    ck_assert_ptr_nonnull(strstr(err, "build_id"));
    /* another protocol version before everything */
    m.protocol_version = KFAC_PROTOCOL_VERSION + 1;
    ck_assert_int_eq(ps_greet_hello(&m, &lim, 0, err, sizeof err), PS_GREET_REFUSE_VERSION);
    ck_assert(err[0] != '\0');
}
END_TEST

START_TEST(test_ps_greet_role_caps) {
    ck_assert_int_eq(ps_greet_role_cap(MSG_ROLE_WORKER, 4, 0, 1024), 20);    /* 4 + 16 */
    ck_assert_int_eq(ps_greet_role_cap(MSG_ROLE_WORKER, 100, 0, 1024), 200); /* 2 x 100 */
    ck_assert_int_eq(ps_greet_role_cap(MSG_ROLE_STATSD, 4, 1, 1024), 17);
    ck_assert_int_eq(ps_greet_role_cap(MSG_ROLE_STATSD, 4, 30, 1024), 60);
    ck_assert_int_eq(ps_greet_role_cap(MSG_ROLE_INVERTD, 4, 1, 1024), 512);
    ck_assert_int_eq(ps_greet_role_cap(MSG_ROLE_NONE, 4, 1, 1024), 16);
}
END_TEST

static ps_peer_t *s_add(ps_peers_t *t, msg_role_t role, uint32_t asked_id, uint32_t id) {
    zloop_peer_t r;
    memset(&r, 0, sizeof r);
    r.len = (size_t)snprintf((char *)r.id, sizeof r.id, "peer-%u", id);
    ps_peer_t *p = ps_peers_add(t, &r);
    ck_assert_ptr_nonnull(p);
    p->role = role;
    p->asked_id = asked_id;
    p->id = id;
    p->present = 1;
    return p;
}

START_TEST(test_ps_greet_ranks) {
    ps_peers_t t;
    ck_assert_int_eq(ps_peers_init(&t, 16), 0);
    /* its own --id when free */
    ps_peer_t *a = s_add(&t, MSG_ROLE_WORKER, 1, 1);
    ps_greet_rank_t r = ps_greet_rank(&t, a, 3, 0);
    ck_assert_int_eq(r.rank, 1);
    ck_assert_int_eq(r.n_ranks, 3);
    ck_assert_int_eq(r.shared, 0);
    a->rank = r.rank;
    a->n_ranks = r.n_ranks;
    /* the same --id again: the lowest free shard */
    ps_peer_t *b = s_add(&t, MSG_ROLE_WORKER, 1, 2);
    r = ps_greet_rank(&t, b, 3, 0);
    ck_assert_int_eq(r.rank, 0);
    b->rank = r.rank;
    /* an id beyond the shards: the lowest free one */
    ps_peer_t *c = s_add(&t, MSG_ROLE_WORKER, 7, 3);
    r = ps_greet_rank(&t, c, 3, 0);
    ck_assert_int_eq(r.rank, 2);
    c->rank = r.rank;
    /* every shard taken: shared, by its id */
    ps_peer_t *d = s_add(&t, MSG_ROLE_WORKER, 0, 5);
    r = ps_greet_rank(&t, d, 3, 0);
    ck_assert_int_eq(r.shared, 1);
    ck_assert_int_eq(r.rank, (5 - 1) % 3);
    /* a stats worker's shards are apart from the workers' (at least 1) */
    ps_peer_t *e = s_add(&t, MSG_ROLE_STATSD, 0, 6);
    r = ps_greet_rank(&t, e, 3, 0);
    ck_assert_int_eq(r.rank, 0);
    ck_assert_int_eq(r.n_ranks, 1);
    ck_assert_int_eq(r.shared, 0);
    /* an inverse daemon has no shard */
    ps_peer_t *f = s_add(&t, MSG_ROLE_INVERTD, 2, 7);
    r = ps_greet_rank(&t, f, 3, 0);
    ck_assert_int_eq(r.n_ranks, 0);
    ck_assert_int_eq(r.rank, 0);
    ps_peers_release(&t);
}
END_TEST

#define K1 "k1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define K2 "k2-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define SEC 1000000000ULL

/* What kfac-ps answers a Hello of a worker with id from key at now, as
 * ps/hello.c decides it for a new connection (no I/O; *out: the record a
 * welcome creates or takes over). */
typedef enum { S_WELCOME, S_TAKEOVER, S_BUSY, S_REFUSE, S_EVICT_THEN_WELCOME } s_answer_t;
static s_answer_t s_hello_answer(ps_peers_t *t, ps_owners_t *o, uint32_t id, const char *key, int per_key,
                                 uint64_t now, ps_peer_t **out) {
    msg_limits_t lim = s_limits();
    char err[600];
    msg_t m;
    s_hello(&m, KFAC_BUILD_ID);
    m.sender_id = id;
    *out = NULL;
    ck_assert_int_eq(ps_greet_hello(&m, &lim, 1, err, sizeof err), PS_GREET_GO);
    const uint64_t live = 3 * SEC;
    ps_peer_t *h = NULL;
    s_answer_t a = S_WELCOME;
    switch (ps_owners_check(o, t, MSG_ROLE_WORKER, id, key, per_key, now, live, &h)) {
    case PS_OWNER_ADMIT: break;
    case PS_OWNER_KEY_REUSE:
        ps_peers_remove(t, h);
        a = S_EVICT_THEN_WELCOME;
        break;
    default: return S_REFUSE;
    }
    ps_peer_t *old = NULL;
    switch (ps_member_rejoin(t, MSG_ROLE_WORKER, id, now, live, &old)) {
    case PS_REJOIN_DUPLICATE: return S_BUSY;
    case PS_REJOIN_TAKEOVER:
        ps_member_takeover(old);
        old->last_ns = now;
        old->present = 1;
        *out = old;
        return S_TAKEOVER;
    case PS_REJOIN_NEW: break;
    }
    ck_assert_int_lt(ps_peers_count(t, MSG_ROLE_WORKER, 0), ps_greet_role_cap(MSG_ROLE_WORKER, 2, 0, 1024));
    static uint32_t next_id = 0;
    ps_peer_t *p = s_add(t, MSG_ROLE_WORKER, id, ++next_id);
    p->last_ns = now;
    snprintf(p->key, sizeof p->key, "%s", key);
    ps_greet_rank_t r = ps_greet_rank(t, p, 2, 0);
    p->rank = r.rank;
    p->n_ranks = r.n_ranks;
    ck_assert_int_eq(ps_owners_bind(o, t, MSG_ROLE_WORKER, id, key), 0);
    *out = p;
    return a;
}

START_TEST(test_ps_greet_hello_sequence) {
    ps_peers_t t;
    ps_owners_t o = {0};
    ck_assert_int_eq(ps_peers_init(&t, 16), 0);
    uint64_t now = 100 * SEC;
    ps_peer_t *a = NULL, *b = NULL;
    /* worker 1 from K1: welcome, its own shard */
    ck_assert_int_eq(s_hello_answer(&t, &o, 1, K1, 1, now, &a), S_WELCOME);
    ck_assert_int_eq(a->rank, 1);
    /* a second process with id 1 while the first is heard: try again later */
    ck_assert_int_eq(s_hello_answer(&t, &o, 1, K1, 2, now + SEC, &b), S_BUSY);
    ck_assert_ptr_null(b);
    /* the first fell silent: the restarted one takes over its record and shard */
    ck_assert_int_eq(s_hello_answer(&t, &o, 1, K1, 2, now + 10 * SEC, &b), S_TAKEOVER);
    ck_assert_ptr_eq(b, a);
    ck_assert_int_eq(b->rank, 1);
    now += 10 * SEC;
    /* id 1 from another key: refused, live or silent */
    ck_assert_int_eq(s_hello_answer(&t, &o, 1, K2, 2, now, &b), S_REFUSE);
    ck_assert_int_eq(s_hello_answer(&t, &o, 1, K2, 2, now + 60 * SEC, &b), S_REFUSE);
    /* K1 at members_per_key = 1 with a live record: a second id refused ... */
    ck_assert_int_eq(s_hello_answer(&t, &o, 0, K1, 1, now + SEC, &b), S_REFUSE);
    /* ... and once that record is silent, it makes room for the new one */
    ck_assert_int_eq(s_hello_answer(&t, &o, 0, K1, 1, now + 10 * SEC, &b), S_EVICT_THEN_WELCOME);
    ck_assert_int_eq(ps_peers_count(&t, MSG_ROLE_WORKER, 0), 1);
    ck_assert_int_eq(b->rank, 0);
    /* K2 with its own id: welcome */
    ck_assert_int_eq(s_hello_answer(&t, &o, 2, K2, 1, now + 10 * SEC, &b), S_WELCOME);
    ck_assert_int_eq(ps_peers_count(&t, MSG_ROLE_WORKER, 0), 2);
    ps_owners_release(&o);
    ps_peers_release(&t);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("ps_greet");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ps_greet_hello_order);
    tcase_add_test(tc, test_ps_greet_role_caps);
    tcase_add_test(tc, test_ps_greet_ranks);
    tcase_add_test(tc, test_ps_greet_hello_sequence);
    suite_add_tcase(s, tc);
    return s;
}
