/* tests/lib/fake_ps.c — see fake_ps.h. */
#include "tests/lib/fake_ps.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/run/runcfg.h"

int fake_ps_send_welcome(void *sock, zmq_msg_t *id, const char *model_text, int ps_argc, char **ps_argv) {
    runcfg_t ps;
    char err[256];
    ck_assert_msg(runcfg_load(&ps, RUNCFG_ROLE_PS, ps_argc, ps_argv, err, sizeof err) == 0, "%s", err);
    char *text = runcfg_shared_text(&ps);
    ck_assert_ptr_nonnull(text);
    msg_t a;
    msg_init(&a, MSG_WELCOME, MSG_ROLE_PS, 0);
    a.welcome.model_text = (char *)model_text;
    a.welcome.config_text = text;
    a.welcome.assigned_id = 42;
    a.welcome.n_ranks = 1;
    int sent = fake_ps_send(sock, id, &a);
    free(text);
    runcfg_release(&ps);
    return sent;
}

void fake_ps_open(void **ctx, void **sock, char *endpoint, size_t endpoint_len) {
    *ctx = zmq_ctx_new();
    ck_assert_ptr_nonnull(*ctx);
    *sock = zmq_socket(*ctx, ZMQ_ROUTER);
    ck_assert_ptr_nonnull(*sock);
    int linger = 200;
    zmq_setsockopt(*sock, ZMQ_LINGER, &linger, sizeof linger);
    ck_assert_int_eq(zmq_bind(*sock, "tcp://127.0.0.1:*"), 0);
    size_t elen = endpoint_len;
    ck_assert_int_eq(zmq_getsockopt(*sock, ZMQ_LAST_ENDPOINT, endpoint, &elen), 0);
}

int fake_ps_send(void *sock, zmq_msg_t *id, const msg_t *m) {
    uint8_t *buf = NULL;
    size_t len = 0;
    if (msg_encode(m, &buf, &len) < 0) return 0;
    zmq_msg_t cp;
    zmq_msg_init(&cp);
    zmq_msg_copy(&cp, id);
    int ok = zmq_msg_send(&cp, sock, ZMQ_SNDMORE) >= 0 && zmq_send(sock, buf, len, 0) >= 0;
    free(buf);
    return ok;
}

int fake_ps_recv(void *sock, zmq_msg_t *id, msg_t *m, int timeout_ms) {
    uint64_t deadline = uv_hrtime() + (uint64_t)timeout_ms * 1000000ULL;
    for (;;) {
        uint64_t now = uv_hrtime();
        if (now >= deadline) return -1;
        int left_ms = (int)((deadline - now) / 1000000ULL) + 1;
        zmq_setsockopt(sock, ZMQ_RCVTIMEO, &left_ms, sizeof left_ms);
        zmq_msg_t from, body; /* a receive that times out empties its message: keep *id until one comes */
        zmq_msg_init(&from);
        zmq_msg_init(&body);
        if (zmq_msg_recv(&from, sock, 0) < 0 || zmq_msg_recv(&body, sock, 0) < 0) {
            zmq_msg_close(&from);
            zmq_msg_close(&body);
            return -1;
        }
        zmq_msg_move(id, &from);
        zmq_msg_close(&from);
        char err[256];
        memset(m, 0, sizeof *m);
        int rc = msg_decode(zmq_msg_data(&body), zmq_msg_size(&body), m, err, sizeof err);
        zmq_msg_close(&body);
        if (rc < 0) return -1;
        if (m->type != MSG_HEARTBEAT) return 0;
        msg_clear(m);
    }
}
