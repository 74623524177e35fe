/* tests/lib/zloop_fixture.h — the fixture of the zloop tests
 * (tests/net/test_zloop*.c): one libuv loop and ZeroMQ context per test,
 * a uv timer watchdog that fails a test instead of letting it hang, and a
 * ROUTER/DEALER pair on a 127.0.0.1 ephemeral port. */
#ifndef KFAC_TESTS_ZLOOP_FIXTURE_H
#define KFAC_TESTS_ZLOOP_FIXTURE_H

#include <stdint.h>
#include <uv.h>

#include "common/net/zloop.h"

typedef struct fx fx_t;
struct fx {
    uv_loop_t loop;
    void *zctx;
    uv_timer_t watchdog;
    int watchdog_open;
    int timed_out;
    void (*close_all)(fx_t *f); /* the test's own teardown, also run on timeout */
};

/* A loop, a context and a watchdog of timeout_ms (x CK_TIMEOUT_MULTIPLIER:
 * check_scaled_ms) that runs close_all. */
void fx_init(fx_t *f, uint64_t timeout_ms, void (*close_all)(fx_t *));
void fx_close_watchdog(fx_t *f);
/* Run the loop until every handle is closed, then tear down. */
void fx_run(fx_t *f);
zloop_socket_t *fx_socket(fx_t *f, int type, int hwm, zloop_recv_fn fn, void *user);
/* A bound ROUTER and a DEALER connected to it. */
void fx_pair(fx_t *f, int hwm, zloop_recv_fn on_router, zloop_recv_fn on_dealer, void *user, zloop_socket_t **router,
             zloop_socket_t **dealer);
/* A receive function that drops what it gets; a close_all with nothing but the watchdog. */
void fx_ignore(zloop_socket_t *s, const zloop_peer_t *p, const uint8_t *d, size_t n, void *u);
void fx_close_nothing(fx_t *f);

#endif
