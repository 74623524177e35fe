/* tests/lib/zloop_fixture.c — see zloop_fixture.h. */
#include "tests/lib/zloop_fixture.h"

#include <check.h>
#include <zmq.h>

#include "tests/lib/check_main.h"


static void s_on_watchdog(uv_timer_t *t) {
    fx_t *f = t->data;
    f->timed_out = 1;
    f->close_all(f);
}

void fx_init(fx_t *f, uint64_t timeout_ms, void (*close_all)(fx_t *)) {
    ck_assert_int_eq(uv_loop_init(&f->loop), 0);
    f->zctx = zmq_ctx_new();
    ck_assert_ptr_nonnull(f->zctx);
    f->close_all = close_all;
    f->timed_out = 0;
    ck_assert_int_eq(uv_timer_init(&f->loop, &f->watchdog), 0);
    f->watchdog.data = f;
    f->watchdog_open = 1;
    ck_assert_int_eq(uv_timer_start(&f->watchdog, s_on_watchdog, check_scaled_ms(timeout_ms), 0), 0);
}

void fx_close_watchdog(fx_t *f) {
    if (!f->watchdog_open) return;
    f->watchdog_open = 0;
    uv_close((uv_handle_t *)&f->watchdog, NULL);
}

/* Run the loop until every handle is closed, then tear down. */
void fx_run(fx_t *f) {
    ck_assert_int_eq(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&f->loop), 0);
    ck_assert_int_eq(zmq_ctx_term(f->zctx), 0);
}

zloop_socket_t *fx_socket(fx_t *f, int type, int hwm, zloop_recv_fn fn, void *user) {
    zloop_socket_opts_t o;
    zloop_socket_opts_default(&o);
    o.sndhwm = o.rcvhwm = hwm;
    zloop_socket_t *s = zloop_socket_new(&f->loop, f->zctx, type, &o, fn, user);
    ck_assert_ptr_nonnull(s);
    return s;
}

/* A bound ROUTER and a DEALER connected to it. */
void fx_pair(fx_t *f, int hwm, zloop_recv_fn on_router, zloop_recv_fn on_dealer, void *user,
                   zloop_socket_t **router, zloop_socket_t **dealer) {
    char ep[256];
    *router = fx_socket(f, ZMQ_ROUTER, hwm, on_router, user);
    ck_assert_int_eq(zloop_socket_bind(*router, "tcp://127.0.0.1:0", ep, sizeof ep), 0);
    *dealer = fx_socket(f, ZMQ_DEALER, hwm, on_dealer, user);
    ck_assert_int_eq(zloop_socket_connect(*dealer, ep), 0);
}

void fx_ignore(zloop_socket_t *s, const zloop_peer_t *p, const uint8_t *d, size_t n, void *u) {
    (void)s, (void)p, (void)d, (void)n, (void)u;
}

void fx_close_nothing(fx_t *f) { fx_close_watchdog(f); }

