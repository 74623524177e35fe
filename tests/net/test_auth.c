/* tests/net/test_auth.c — kfac-ps's authenticator (common/net/auth.h) in one
 * process, with fresh keys from kfac-keygen's writer on every run:
 *   - the policy: a loopback bind without keys passes, 0.0.0.0 without
 *     keys is -EPERM (message naming the fixes) unless insecure = true; an
 *     allowlist without a secret key, a secret key without an allowlist, and
 *     a server public key that is not the secret key's are -EINVAL;
 *   - the ZAP handler on a real ROUTER (127.0.0.1, a port ZeroMQ picks):
 *     a listed worker key gets through and its messages carry the user id
 *     "worker <its key>"; auth_server_check_role() lets it speak as a
 *     worker and refuses it as invertd (-EACCES, the reason names
 *     allow_workers); a key in no list is refused in the handshake (no
 *     message arrives, the client's on_refused callback fires, the count
 *     is 1); a client without keys never gets a message through and is
 *     counted as a failed handshake.
 * The loop is pumped with UV_RUN_NOWAIT in bounded loops (at most 5 s per
 * wait). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#include <zmq.h>

#include "common/base/log.h"
#include "common/net/auth.h"
#include "common/net/zloop.h"
#include "common/run/runcfg.h"
#include "tests/lib/tmpdir.h"

static char s_dir[256];
static char s_path[8][512];

typedef struct {
    char z85_pub[AUTH_KEY_Z85_LEN + 1];
    char pub[512], sec[512];
} s_keys_t;

static void s_keygen(const char *name, s_keys_t *k) {
    char sec[AUTH_KEY_Z85_LEN + 1], text[128], err[600];
    ck_assert_int_eq(zmq_curve_keypair(k->z85_pub, sec), 0);
    snprintf(k->pub, sizeof k->pub, "%s/%s.pub", s_dir, name);
    snprintf(k->sec, sizeof k->sec, "%s/%s.secret", s_dir, name);
    snprintf(text, sizeof text, "%s\n", sec);
    ck_assert_msg(auth_key_write_file(k->sec, text, 0600, 0, err, sizeof err) == 0, "%s", err);
    snprintf(text, sizeof text, "%s\n", k->z85_pub);
    ck_assert_msg(auth_key_write_file(k->pub, text, 0644, 0, err, sizeof err) == 0, "%s", err);
}

static void s_setup(void) {
    test_tmpdir_make(s_dir, sizeof s_dir, "auth");
    log_init(LOG_LEVEL_ERROR, "test_auth");
}

static void s_teardown(void) {
    if (test_tmpdir_remove(s_dir) != 0) fprintf(stderr, "could not remove %s\n", s_dir);
}

/* A runcfg_t whose strings point at static buffers (never released). */
static runcfg_t s_cfg(const char *bind) {
    runcfg_t c;
    memset(&c, 0, sizeof c);
    c.bind = (char *)bind;
    c.server_secret_key = c.server_public_key = c.client_secret_key = c.client_public_key = (char *)"";
    c.allow_workers = c.allow_statsd = c.allow_invertd = (char *)"";
    return c;
}

START_TEST(test_auth_policy) {
    s_setup();
    s_keys_t ps, other;
    s_keygen("ps", &ps);
    s_keygen("other", &other);
    char err[1200];
    runcfg_t c = s_cfg("tcp://127.0.0.1:5555");
    ck_assert_int_eq(auth_server_check(&c, err, sizeof err), 0);
    c.bind = (char *)"tcp://0.0.0.0:5555";
    ck_assert_int_eq(auth_server_check(&c, err, sizeof err), -EPERM);
    ck_assert_msg(strstr(err, "server_secret_key") && strstr(err, "insecure = true") && strstr(err, "127.0.0.1"), "%s",
                  err);
    c.insecure = true;
    ck_assert_int_eq(auth_server_check(&c, err, sizeof err), 0);
    c.insecure = false;
    c.allow_workers = other.pub;
    ck_assert_int_eq(auth_server_check(&c, err, sizeof err), -EINVAL); /* a list without a secret key */
    c.allow_workers = (char *)"";
    c.server_secret_key = ps.sec;
    ck_assert_int_eq(auth_server_check(&c, err, sizeof err), -EINVAL); /* a secret key without a list */
    ck_assert_msg(strstr(err, "allow_workers"), "%s", err);
    c.allow_workers = other.pub;
    ck_assert_msg(auth_server_check(&c, err, sizeof err) == 0, "%s", err);
    c.server_public_key = other.pub; /* not the pair of ps.secret */
    ck_assert_int_eq(auth_server_check(&c, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "not the public key"), "%s", err);
    c.server_public_key = ps.pub;
    ck_assert_msg(auth_server_check(&c, err, sizeof err) == 0, "%s", err);
    s_teardown();
}
END_TEST

typedef struct {
    int n;
    char user[128];
    int refused;
} s_seen_t;

static void s_on_recv(zloop_socket_t *s, const zloop_peer_t *peer, const uint8_t *data, size_t len, void *user) {
    (void)peer;
    (void)data;
    (void)len;
    s_seen_t *seen = user;
    const char *uid = zloop_socket_property(s, "User-Id");
    snprintf(seen->user, sizeof seen->user, "%s", uid ? uid : "(none)");
    seen->n++;
}

static void s_on_refused(void *user) { ((s_seen_t *)user)->refused++; }

/* Pump the loop until *flag reaches want or ms pass. */
static void s_pump(uv_loop_t *loop, const int *flag, int want, int ms) {
    for (int i = 0; i < ms / 5 && *flag < want; i++) {
        uv_run(loop, UV_RUN_NOWAIT);
        struct timespec ts = {0, 5000000L};
        nanosleep(&ts, NULL);
    }
    uv_run(loop, UV_RUN_NOWAIT);
}

static void *s_dealer(void *zctx) {
    void *d = zmq_socket(zctx, ZMQ_DEALER);
    ck_assert_ptr_nonnull(d);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    return d;
}

START_TEST(test_auth_zap_roles) {
    s_setup();
    s_keys_t ps, w, inv, stranger;
    s_keygen("ps", &ps);
    s_keygen("w", &w);
    s_keygen("inv", &inv);
    s_keygen("stranger", &stranger);
    snprintf(s_path[0], sizeof s_path[0], "%s", w.pub);
    snprintf(s_path[1], sizeof s_path[1], "%s", inv.pub);
    runcfg_t c = s_cfg("tcp://127.0.0.1:0");
    c.server_secret_key = ps.sec;
    c.allow_workers = s_path[0];
    c.allow_invertd = s_path[1];
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    void *zctx = zmq_ctx_new();
    char err[1200], ep[256];
    auth_server_t *a = auth_server_new(&loop, zctx, &c, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    ck_assert(auth_server_enabled(a));
    s_seen_t seen;
    memset(&seen, 0, sizeof seen);
    zloop_socket_t *router = zloop_socket_new(&loop, zctx, ZMQ_ROUTER, NULL, s_on_recv, &seen);
    ck_assert_ptr_nonnull(router);
    ck_assert_msg(auth_server_secure(a, zloop_socket_zmq(router), err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(zloop_socket_bind(router, "tcp://127.0.0.1:0", ep, sizeof ep), 0);

    /* the listed worker key */
    runcfg_t cc = s_cfg(ep);
    cc.client_secret_key = w.sec;
    cc.server_public_key = ps.pub;
    void *d = s_dealer(zctx);
    auth_client_t *ac = NULL;
    ck_assert_msg(auth_client_secure(&loop, zctx, d, &cc, ep, &ac, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(zmq_connect(d, ep), 0);
    ck_assert_int_eq(zmq_send(d, "x", 1, 0), 1);
    s_pump(&loop, &seen.n, 1, 5000);
    ck_assert_int_eq(seen.n, 1);
    char want[128];
    snprintf(want, sizeof want, "worker %s", w.z85_pub);
    ck_assert_str_eq(seen.user, want);
    char why[600];
    ck_assert_int_eq(auth_server_check_role(a, seen.user, MSG_ROLE_WORKER, MSG_GRAD_PUSH, why, sizeof why), 0);
    ck_assert_int_eq(auth_server_check_role(a, seen.user, MSG_ROLE_INVERTD, MSG_HELLO, why, sizeof why), -EACCES);
    ck_assert_msg(strstr(why, "allow_workers") && strstr(why, "invertd"), "%s", why);
    ck_assert_int_eq(auth_server_check_role(a, NULL, MSG_ROLE_WORKER, MSG_HELLO, why, sizeof why), -EACCES);
    auth_client_free(&ac);
    zmq_close(d);

    /* a key in no list: refused in the handshake */
    s_seen_t cb;
    memset(&cb, 0, sizeof cb);
    cc.client_secret_key = stranger.sec;
    d = s_dealer(zctx);
    ck_assert_msg(auth_client_secure(&loop, zctx, d, &cc, ep, &ac, err, sizeof err) == 0, "%s", err);
    auth_client_on_refused(ac, s_on_refused, &cb);
    ck_assert_int_eq(zmq_connect(d, ep), 0);
    zmq_send(d, "y", 1, ZMQ_DONTWAIT);
    s_pump(&loop, &cb.refused, 1, 5000);
    ck_assert_int_eq(cb.refused, 1);
    ck_assert_uint_eq(auth_client_refusals(ac), 1);
    auth_server_stats_t st;
    auth_server_stats(a, &st);
    ck_assert_uint_eq(st.n_refused_key, 1);
    ck_assert_uint_eq(st.n_accepted, 1);
    auth_client_free(&ac);
    zmq_close(d);

    /* no keys at all: fails before ZAP */
    d = s_dealer(zctx);
    ck_assert_int_eq(zmq_connect(d, ep), 0);
    zmq_send(d, "z", 1, ZMQ_DONTWAIT);
    int failed = 0;
    for (int i = 0; i < 1000 && !failed; i++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        auth_server_stats(a, &st);
        failed = st.n_failed_handshakes > 0;
        struct timespec ts = {0, 5000000L};
        nanosleep(&ts, NULL);
    }
    ck_assert_msg(failed, "the keyless handshake was not seen");
    ck_assert_int_eq(seen.n, 1); /* nothing but the listed worker's message ever arrived */
    zmq_close(d);

    zloop_socket_free(&router);
    auth_server_free(&a);
    ck_assert_ptr_null(a);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    zmq_ctx_term(zctx);
    s_teardown();
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("auth");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_auth_policy);
    tcase_add_test(tc, test_auth_zap_roles);
    suite_add_tcase(s, tc);
    return s;
}
