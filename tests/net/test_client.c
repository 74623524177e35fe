/* tests/net/test_client.c — the connection shared by the client daemons
 * (common/net/client.h); K-FAC objects on the wire are tests/net/test_wire.c:
 *   - the effective configuration of a Welcome: the PS's shared sections
 *     win, except the host-local [data] dir, [run] log_level and the
 *     daemon's own section; unknown keys in the PS's text are rejected;
 *   - the log rate limiter;
 *   - the handshake on real sockets: a ROUTER on 127.0.0.1 (a thread playing
 *     kfac-ps) sees Hello with this protocol, role, id and build id, answers
 *     Welcome, then Shutdown and closes its socket at once (the client must
 *     still get it and exit 0: with ZMQ_IMMEDIATE it lost it 4 times in 10),
 *     or Refuse (the client exits 1).
 * The fake kfac-ps binds a free port on 127.0.0.1 that ZeroMQ picks.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>
#include <zmq.h>

#include "common/net/client.h"
#include "common/base/log.h"
#include "common/run/runcfg.h"
#include "proto/msg.h"
#include "common/base/ratelimit.h"
#include "common/base/clock.h"
#include "common/base/version.h"
#include "tests/lib/check_main.h"
#include "tests/lib/fake_ps.h"

/* The model the fake kfac-ps sends in its Welcome (the connection only
 * passes it on). */
static const char *s_model = "input 1x4x4\nflatten\nfc name=f out=2\nsoftmax_xent\n";

/* ---- the effective configuration ----------------------------------------------- */

START_TEST(test_client_config_local_keys_win) {
    char err[512];
    runcfg_t local, ps, out;
    char *argv_local[] = {"kfac-worker", "--seed", "5", "--data.dir", "/local/data", "--log_level", "debug",
                          "--threads", "3", "--id", "4", "--batch", "17", NULL};
    ck_assert_int_eq(runcfg_load(&local, RUNCFG_ROLE_WORKER, 13, argv_local, err, sizeof err), 0);
    char *argv_ps[] = {"kfac-ps", "--seed", "9", "--data.dir", "/ps/data", "--batch", "32", "--steps", "77", NULL};
    ck_assert_int_eq(runcfg_load(&ps, RUNCFG_ROLE_PS, 9, argv_ps, err, sizeof err), 0);
    char *text = runcfg_shared_text(&ps);
    ck_assert_ptr_nonnull(text);
    int rc = client_config_from_text(&local, RUNCFG_ROLE_WORKER, text, &out, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_uint_eq(out.seed, 9);      /* the PS's */
    ck_assert_int_eq(out.batch, 32);
    ck_assert_uint_eq(out.steps, 77);
    ck_assert_str_eq(out.data_dir, "/local/data"); /* this host's */
    ck_assert_str_eq(out.log_level, "debug");
    ck_assert_int_eq(out.daemon[RUNCFG_ROLE_WORKER].threads, 3); /* the daemon's own section */
    ck_assert_int_eq(out.daemon[RUNCFG_ROLE_WORKER].id, 4);
    runcfg_release(&out);

    /* A key this build does not know: refused, naming the Welcome. */
    const char *bad = "[kfac]\nno_such_key = 1\n";
    rc = client_config_from_text(&local, RUNCFG_ROLE_WORKER, bad, &out, err, sizeof err);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err, "welcome") != NULL, "%s", err);
    runcfg_release(&out);
    free(text);
    runcfg_release(&ps);
    runcfg_release(&local);
}
END_TEST

START_TEST(test_client_ratelimit_counts_suppressed) {
    ratelimit_t r = {0};
    uint64_t skipped = 99;
    ck_assert_int_eq(ratelimit_ok(&r, clock_now_ns(), 60 * 1000, &skipped), 1);
    ck_assert_uint_eq(skipped, 0);
    for (int i = 0; i < 4; i++) ck_assert_int_eq(ratelimit_ok(&r, clock_now_ns(), 60 * 1000, &skipped), 0);
    r.last_ns = uv_hrtime() - 61ULL * 1000000000ULL; /* a minute ago */
    ck_assert_int_eq(ratelimit_ok(&r, clock_now_ns(), 60 * 1000, &skipped), 1);
    ck_assert_uint_eq(skipped, 4);
}
END_TEST

/* ---- the handshake on real sockets ----------------------------------------------- */

typedef struct fake_ps {
    void *ctx;
    void *sock;            /* the ROUTER, bound before the thread starts; the thread closes it */
    char endpoint[128];
    int answer;            /* MSG_SHUTDOWN or MSG_REFUSE after the Welcome / instead of it */
    int ok_hello;          /* the Hello looked right */
    char hello_build[64];
    uint32_t hello_id;
    int got_get_params;    /* the client asked for params after Welcome */
    int n_send_failed;     /* sends of the fake PS that failed */
} fake_ps_t;

typedef struct client_side {
    int welcomed;
    uint64_t seed_seen;
    int stopped, stop_code;
    uv_timer_t guard;
    client_t *c;
} client_side_t;

static void s_fake_ps_thread(void *arg) {
    fake_ps_t *f = arg;
    void *sock = f->sock;
    zmq_msg_t id;
    zmq_msg_init(&id);
    msg_t m;
    memset(&m, 0, sizeof m);
    if (fake_ps_recv(sock, &id, &m, (int)check_scaled_ms(10000)) == 0 && m.type == MSG_HELLO) {
        f->ok_hello = m.protocol_version == KFAC_PROTOCOL_VERSION && m.role == MSG_ROLE_WORKER;
        snprintf(f->hello_build, sizeof f->hello_build, "%s", m.hello.build_id ? m.hello.build_id : "");
        f->hello_id = m.sender_id;
    }
    msg_clear(&m);
    msg_t a;
    if (f->answer == MSG_REFUSE) {
        msg_init(&a, MSG_REFUSE, MSG_ROLE_PS, 0);
        a.refuse.text = "test refusal";
        f->n_send_failed += !fake_ps_send(sock, &id, &a);
    } else {
        char *argv_ps[] = {"kfac-ps", "--seed", "1234", NULL};
        f->n_send_failed += !fake_ps_send_welcome(sock, &id, s_model, 3, argv_ps);
        /* The client's first request after Welcome. */
        for (int i = 0; i < 5; i++) {
            memset(&m, 0, sizeof m);
            if (fake_ps_recv(sock, &id, &m, (int)check_scaled_ms(10000)) < 0) break;
            int t = m.type;
            if (t == MSG_GET_PARAMS && m.sender_id == 42) f->got_get_params = 1;
            msg_clear(&m);
            if (t == MSG_GET_PARAMS) break;
        }
        msg_init(&a, MSG_SHUTDOWN, MSG_ROLE_PS, 0);
        a.shutdown.text = "test over";
        f->n_send_failed += !fake_ps_send(sock, &id, &a);
    }
    zmq_msg_close(&id);
    zmq_close(sock);
}

static int s_on_welcome(client_t *c, const msg_welcome_t *w, const runcfg_t *cfg, void *user) {
    client_side_t *cs = user;
    (void)w;
    cs->welcomed = 1;
    cs->seed_seen = cfg->seed;
    msg_t m;
    client_msg_init(c, &m, MSG_GET_PARAMS);
    return client_send(c, &m);
}

static void s_on_message(client_t *c, msg_t *m, void *user) {
    (void)c;
    (void)m;
    (void)user;
}

static void s_guard_closed(uv_handle_t *h) { (void)h; }

static void s_on_stop(client_t *c, int exit_code, const char *reason, void *user) {
    (void)c;
    (void)reason;
    client_side_t *cs = user;
    cs->stopped++;
    cs->stop_code = exit_code;
    uv_close((uv_handle_t *)&cs->guard, s_guard_closed);
}

static void s_on_guard(uv_timer_t *t) {
    client_side_t *cs = t->data;
    client_stop(cs->c, 1, "test timed out", 0);
}

static void s_run_handshake(int answer, client_side_t *cs, fake_ps_t *f) {
    log_init(LOG_LEVEL_ERROR, "test_client");
    memset(f, 0, sizeof *f);
    memset(cs, 0, sizeof *cs);
    f->answer = answer;
    fake_ps_open(&f->ctx, &f->sock, f->endpoint, sizeof f->endpoint); /* handed to the thread */
    uv_thread_t th;
    ck_assert_int_eq(uv_thread_create(&th, s_fake_ps_thread, f), 0);

    runcfg_t local;
    char err[256];
    char *argv[] = {"kfac-worker", "--ps", f->endpoint, "--id", "7", NULL};
    ck_assert_int_eq(runcfg_load(&local, RUNCFG_ROLE_WORKER, 5, argv, err, sizeof err), 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    static const client_handlers_t h = {s_on_welcome, s_on_message, s_on_stop};
    cs->c = client_new(&loop, MSG_ROLE_WORKER, RUNCFG_ROLE_WORKER, &local, &h, cs);
    ck_assert_ptr_nonnull(cs->c);
    uv_timer_init(&loop, &cs->guard);
    cs->guard.data = cs;
    uv_timer_start(&cs->guard, s_on_guard, check_scaled_ms(15000), 0);
    ck_assert_int_eq(client_start(cs->c), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    cs->stop_code = client_exit_code(cs->c);
    client_free(&cs->c);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    uv_thread_join(&th);
    zmq_ctx_term(f->ctx);
    runcfg_release(&local);
}

START_TEST(test_client_handshake_welcome_then_shutdown) {
    client_side_t cs;
    fake_ps_t f;
    s_run_handshake(MSG_SHUTDOWN, &cs, &f);
    ck_assert_msg(f.ok_hello, "no proper Hello (protocol, role) reached the PS at %s", f.endpoint);
    ck_assert_str_eq(f.hello_build, KFAC_BUILD_ID);
    ck_assert_uint_eq(f.hello_id, 7);
    ck_assert_int_eq(f.n_send_failed, 0);
    ck_assert_int_eq(cs.welcomed, 1);
    ck_assert_uint_eq(cs.seed_seen, 1234); /* the PS's configuration was parsed */
    ck_assert_int_eq(f.got_get_params, 1); /* sent with the assigned id 42 */
    ck_assert_int_eq(cs.stopped, 1);
    ck_assert_msg(cs.stop_code == 0, "exit code %d: hello %d, welcomed %d, get_params %d (1: the test guard fired)",
                  cs.stop_code, f.ok_hello, cs.welcomed, f.got_get_params);
}
END_TEST

START_TEST(test_client_handshake_refuse_is_fatal) {
    client_side_t cs;
    fake_ps_t f;
    s_run_handshake(MSG_REFUSE, &cs, &f);
    ck_assert(f.ok_hello);
    ck_assert_int_eq(cs.welcomed, 0);
    ck_assert_int_eq(cs.stopped, 1);
    ck_assert_int_eq(cs.stop_code, 1);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("client");
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, test_client_config_local_keys_win);
    tcase_add_test(tc, test_client_ratelimit_counts_suppressed);
    suite_add_tcase(s, tc);
    TCase *net = tcase_create("handshake");
    tcase_set_timeout(net, 40);
    tcase_add_test(net, test_client_handshake_welcome_then_shutdown);
    tcase_add_test(net, test_client_handshake_refuse_is_fatal);
    suite_add_tcase(s, net);
    return s;
}
