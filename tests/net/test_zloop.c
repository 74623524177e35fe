/* tests/net/test_zloop.c — ZeroMQ in a libuv loop (common/net/zloop.h): ROUTER and
 * DEALER on 127.0.0.1 ephemeral ports in one process, bursts that must be
 * drained completely (a reader taking one message per ZMQ_FD wake-up stalls
 * on them: the edge-triggered pitfall), lockstep ping-pong (sends from
 * inside callbacks), zero-copy fan-out, the message size limit, malformed
 * framing, closing inside a callback, the socket watcher under them with
 * a multi-frame socket of its own (the worker pool, the mailbox and the
 * signal-driven shutdown path: test_zloop_pool.c; the fixture:
 * tests/lib/zloop_fixture.h).
 *
 * Every test creates its own loop and ZeroMQ context (Check forks each test)
 * and is bounded by a uv timer watchdog that fails it instead of hanging.
 * At the end uv_loop_close() must succeed: every handle was closed.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/net/zloop.h"
#include "tests/lib/check_main.h"
#include "tests/lib/zloop_fixture.h"

START_TEST(test_zloop_bind_ephemeral_port) {
    fx_t f;
    fx_init(&f, 3000, fx_close_nothing);
    zloop_socket_t *a = fx_socket(&f, ZMQ_ROUTER, -1, fx_ignore, NULL);
    zloop_socket_t *b = fx_socket(&f, ZMQ_ROUTER, -1, fx_ignore, NULL);
    char ep[256], ep2[256], tiny[8];
    ck_assert_int_eq(zloop_socket_bind(a, "tcp://127.0.0.1:0", ep, sizeof ep), 0);
    ck_assert_msg(strncmp(ep, "tcp://127.0.0.1:", 16) == 0, "%s", ep);
    int port = atoi(ep + 16);
    ck_assert_int_gt(port, 0);
    ck_assert_int_lt(port, 65536);
    ck_assert_int_eq(zloop_socket_bind(b, ep, NULL, 0), -EADDRINUSE);
    ck_assert_int_eq(zloop_socket_bind(b, "tcp://127.0.0.1:*", ep2, sizeof ep2), 0);
    ck_assert_str_ne(ep, ep2);
    ck_assert_int_eq(zloop_socket_bind(b, "tcp://127.0.0.1:0", tiny, sizeof tiny), -ENOSPC);
    ck_assert_int_lt(zloop_socket_bind(b, "nonsense", NULL, 0), 0);
    zloop_socket_free(&a);
    ck_assert_ptr_null(a);
    zloop_socket_free(&a); /* NULL: no-op */
    zloop_socket_free(&b);
    fx_close_watchdog(&f);
    fx_run(&f);
    ck_assert(!f.timed_out);
}
END_TEST

/* ---- bursts and ping-pong ----------------------------------------------- */

typedef struct echo {
    fx_t fx;
    zloop_socket_t *router, *dealer;
    uv_timer_t start;
    int n_total;
    int n_router, n_dealer;
    int out_of_order;
    int send_failed;
    int lockstep;        /* 1: the dealer sends the next message when a reply arrives */
    int close_router_at; /* > 0: the router closes itself inside its n-th callback */
    zloop_stats_t rs, ds; /* the sockets' counters just before they close */
} echo_t;

static void s_echo_close_all(fx_t *f) {
    echo_t *e = (echo_t *)f;
    if (e->router) zloop_socket_stats(e->router, &e->rs);
    if (e->dealer) zloop_socket_stats(e->dealer, &e->ds);
    zloop_socket_free(&e->router);
    zloop_socket_free(&e->dealer);
    if (!uv_is_closing((uv_handle_t *)&e->start)) uv_close((uv_handle_t *)&e->start, NULL);
    fx_close_watchdog(f);
}

static uint32_t s_seq(const uint8_t *d, size_t n) {
    uint32_t v = UINT32_MAX;
    if (n == sizeof v) memcpy(&v, d, sizeof v);
    return v;
}

static void s_echo_router(zloop_socket_t *s, const zloop_peer_t *peer, const uint8_t *d, size_t n, void *u) {
    echo_t *e = u;
    ck_assert_ptr_nonnull(peer);
    if (s_seq(d, n) != (uint32_t)e->n_router) e->out_of_order++;
    e->n_router++;
    if (e->close_router_at && e->n_router == e->close_router_at) {
        zloop_socket_free(&e->router);
        e->fx.close_all(&e->fx);
        return;
    }
    if (zloop_send(s, peer, d, n) != 0) e->send_failed++;
}

static void s_echo_send(echo_t *e, uint32_t seq) {
    if (zloop_send(e->dealer, NULL, &seq, sizeof seq) != 0) e->send_failed++;
}

static void s_echo_dealer(zloop_socket_t *s, const zloop_peer_t *peer, const uint8_t *d, size_t n, void *u) {
    (void)s;
    echo_t *e = u;
    ck_assert_ptr_null(peer);
    if (s_seq(d, n) != (uint32_t)e->n_dealer) e->out_of_order++;
    e->n_dealer++;
    if (e->n_dealer == e->n_total) {
        e->fx.close_all(&e->fx);
        return;
    }
    if (e->lockstep) s_echo_send(e, (uint32_t)e->n_dealer);
}

static void s_echo_start(uv_timer_t *t) {
    echo_t *e = t->data;
    if (e->lockstep) s_echo_send(e, 0);
    else
        for (int i = 0; i < e->n_total; i++) s_echo_send(e, (uint32_t)i);
}

static void s_echo_run(echo_t *e, int n_total, int lockstep, int close_router_at, int batch) {
    memset(e, 0, sizeof *e);
    e->n_total = n_total;
    e->lockstep = lockstep;
    e->close_router_at = close_router_at;
    fx_init(&e->fx, 3000, s_echo_close_all);
    zloop_socket_opts_t o;
    zloop_socket_opts_default(&o);
    o.sndhwm = o.rcvhwm = 0; /* the whole burst fits in the queues */
    if (batch) o.batch = batch;
    char ep[256];
    e->router = zloop_socket_new(&e->fx.loop, e->fx.zctx, ZMQ_ROUTER, &o, s_echo_router, e);
    ck_assert_ptr_nonnull(e->router);
    ck_assert_int_eq(zloop_socket_bind(e->router, "tcp://127.0.0.1:0", ep, sizeof ep), 0);
    e->dealer = zloop_socket_new(&e->fx.loop, e->fx.zctx, ZMQ_DEALER, &o, s_echo_dealer, e);
    ck_assert_ptr_nonnull(e->dealer);
    ck_assert_int_eq(zloop_socket_connect(e->dealer, ep), 0);
    uv_timer_init(&e->fx.loop, &e->start);
    e->start.data = e;
    uv_timer_start(&e->start, s_echo_start, 5, 0);
    fx_run(&e->fx);
}

/* 5000 messages arrive at once: every one is handled, in order, in bounded
 * batches. A reader that takes one message per ZMQ_FD wake-up receives a
 * few and then waits forever (the watchdog fails the test). */
START_TEST(test_zloop_burst_fully_drained) {
    echo_t e;
    s_echo_run(&e, 5000, 0, 0, 0);
    ck_assert_msg(!e.fx.timed_out, "stalled: router got %d, dealer got %d of %d", e.n_router, e.n_dealer, e.n_total);
    ck_assert_int_eq(e.n_router, 5000);
    ck_assert_int_eq(e.n_dealer, 5000);
    ck_assert_int_eq(e.out_of_order, 0);
    ck_assert_int_eq(e.send_failed, 0);
}
END_TEST

/* The batch limit is hit and the loop keeps turning through the backlog. */
START_TEST(test_zloop_burst_in_bounded_batches) {
    echo_t e;
    s_echo_run(&e, 3000, 0, 0, 16);
    ck_assert(!e.fx.timed_out);
    ck_assert_int_eq(e.n_dealer, 3000);
    ck_assert_uint_eq(e.rs.n_recv, 3000);
    ck_assert_uint_eq(e.rs.n_sent, 3000);
    ck_assert_uint_eq(e.ds.n_sent, 3000);
    ck_assert_uint_eq(e.ds.n_recv, 3000);
    ck_assert_uint_eq(e.rs.n_malformed + e.ds.n_malformed + e.rs.n_send_errors + e.ds.n_send_errors, 0);
    ck_assert_uint_gt(e.rs.n_full_batches + e.ds.n_full_batches, 0);
}
END_TEST

/* Request, reply, request... every send happens inside a receive callback. */
START_TEST(test_zloop_pingpong_lockstep) {
    echo_t e;
    s_echo_run(&e, 2000, 1, 0, 0);
    ck_assert_msg(!e.fx.timed_out, "stalled after %d round trips", e.n_dealer);
    ck_assert_int_eq(e.n_dealer, 2000);
    ck_assert_int_eq(e.out_of_order, 0);
    ck_assert_int_eq(e.send_failed, 0);
}
END_TEST

/* The router closes itself inside its 10th callback with more queued: no
 * callback after that, no crash (ASan), and the loop winds down. */
START_TEST(test_zloop_close_inside_callback) {
    echo_t e;
    s_echo_run(&e, 200, 0, 10, 0);
    ck_assert(!e.fx.timed_out);
    ck_assert_int_eq(e.n_router, 10);
}
END_TEST

/* ---- fan-out, limits, framing ------------------------------------------- */

#define FAN_N 3
#define FAN_BYTES (1u << 20)

typedef struct fan {
    fx_t fx;
    zloop_socket_t *router, *dealer[FAN_N];
    zloop_peer_t peers[FAN_N];
    int n_peers;
    int n_got, n_bad;
    int unknown_rc, take_rc, many_rc;
    int status[FAN_N];
} fan_t;

static void s_fan_close_all(fx_t *f) {
    fan_t *a = (fan_t *)f;
    zloop_socket_free(&a->router);
    for (int i = 0; i < FAN_N; i++) zloop_socket_free(&a->dealer[i]);
    fx_close_watchdog(f);
}

static uint8_t s_pattern(size_t i) { return (uint8_t)(i * 7 + (i >> 8)); }

static void s_fan_router(zloop_socket_t *s, const zloop_peer_t *peer, const uint8_t *d, size_t n, void *u) {
    fan_t *a = u;
    (void)d, (void)n;
    a->peers[a->n_peers++] = *peer;
    if (a->n_peers < FAN_N) return;
    zloop_peer_t nobody = {.len = 6};
    memcpy(nobody.id, "nobody", 6);
    a->unknown_rc = zloop_send(s, &nobody, "x", 1);
    uint8_t *small = malloc(5);
    memcpy(small, "small", 5);
    a->take_rc = zloop_send_take(s, &a->peers[0], &small, 5);
    ck_assert_ptr_null(small);
    uint8_t *big = malloc(FAN_BYTES);
    for (size_t i = 0; i < FAN_BYTES; i++) big[i] = s_pattern(i);
    a->many_rc = zloop_send_many(s, a->peers, FAN_N, &big, FAN_BYTES, a->status);
    ck_assert_ptr_null(big);
}

static void s_fan_dealer(zloop_socket_t *s, const zloop_peer_t *peer, const uint8_t *d, size_t n, void *u) {
    (void)s, (void)peer;
    fan_t *a = u;
    if (n == 5) return; /* the zloop_send_take message */
    int ok = n == FAN_BYTES;
    for (size_t i = 0; ok && i < n; i++) ok = d[i] == s_pattern(i);
    if (!ok) a->n_bad++;
    if (++a->n_got == FAN_N) a->fx.close_all(&a->fx);
}

START_TEST(test_zloop_send_many_zero_copy) {
    fan_t a;
    memset(&a, 0, sizeof a);
    fx_init(&a.fx, 3000, s_fan_close_all);
    char ep[256];
    a.router = fx_socket(&a.fx, ZMQ_ROUTER, -1, s_fan_router, &a);
    ck_assert_int_eq(zloop_socket_bind(a.router, "tcp://127.0.0.1:0", ep, sizeof ep), 0);
    for (int i = 0; i < FAN_N; i++) {
        zloop_socket_opts_t o;
        zloop_socket_opts_default(&o);
        char id[3] = {'w', (char)('0' + i), 0};
        o.routing_id = id;
        a.dealer[i] = zloop_socket_new(&a.fx.loop, a.fx.zctx, ZMQ_DEALER, &o, s_fan_dealer, &a);
        ck_assert_ptr_nonnull(a.dealer[i]);
        ck_assert_int_eq(zloop_socket_connect(a.dealer[i], ep), 0);
        ck_assert_int_eq(zloop_send(a.dealer[i], NULL, "hi", 2), 0);
        ck_assert_int_eq(zloop_send(a.dealer[i], &a.peers[0], "hi", 2), -EINVAL); /* a DEALER has no peers */
    }
    fx_run(&a.fx);
    ck_assert(!a.fx.timed_out);
    ck_assert_int_eq(a.n_got, FAN_N);
    ck_assert_int_eq(a.n_bad, 0);
    ck_assert_int_eq(a.unknown_rc, -EHOSTUNREACH);
    ck_assert_int_eq(a.take_rc, 0);
    ck_assert_int_eq(a.many_rc, 0);
    for (int i = 0; i < FAN_N; i++) ck_assert_int_eq(a.status[i], 0);
    /* routing ids set by the dealers arrive as peer ids */
    int seen = 0;
    for (int i = 0; i < FAN_N; i++)
        if (a.peers[i].len == 2 && a.peers[i].id[0] == 'w') seen |= 1 << (a.peers[i].id[1] - '0');
    ck_assert_int_eq(seen, (1 << FAN_N) - 1);
}
END_TEST

/* ---- a shared send buffer: sent to every peer, refilled, freed in flight -- */

typedef struct shb {
    fx_t fx;
    zloop_socket_t *router, *dealer[FAN_N];
    zloop_peer_t peers[FAN_N];
    int n_peers;
    zloop_buf_t *buf;
    uv_timer_t poll;
    int poll_open;
    int round;              /* 1: the first version sent, 2: the refill sent */
    int n_got[3], n_bad;
    int unknown_rc, too_long_rc, busy_after_unknown;
    int rc[3][FAN_N];
    zloop_track_t *track;   /* peer 0's sends (zloop_send_buf_tracked) */
    int pending_after_unknown, pending_after_written;
} shb_t;

static void s_shb_close_all(fx_t *f) {
    shb_t *a = (shb_t *)f;
    zloop_socket_free(&a->router);
    for (int i = 0; i < FAN_N; i++) zloop_socket_free(&a->dealer[i]);
    if (a->poll_open) {
        a->poll_open = 0;
        uv_timer_stop(&a->poll);
        uv_close((uv_handle_t *)&a->poll, NULL);
    }
    zloop_buf_free(&a->buf);
    zloop_track_free(&a->track);
    fx_close_watchdog(f);
}

static uint8_t s_shb_byte(int version, size_t i) { return (uint8_t)(i * 13 + (i >> 9) + 101 * version); }

static void s_shb_send(shb_t *a, int version) {
    uint8_t *d = zloop_buf_data(a->buf);
    for (size_t i = 0; i < FAN_BYTES; i++) d[i] = s_shb_byte(version, i);
    a->round = version;
    for (int i = 0; i < FAN_N; i++)
        a->rc[version][i] = i == 0 ? zloop_send_buf_tracked(a->router, &a->peers[i], a->buf, FAN_BYTES, a->track)
                                   : zloop_send_buf(a->router, &a->peers[i], a->buf, FAN_BYTES);
}

/* Waits until ZeroMQ has let go of the first version, then refills the
 * same buffer and sends it again, and frees it while those sends are out. */
static void s_shb_poll(uv_timer_t *t) {
    shb_t *a = t->data;
    if (a->n_got[1] < FAN_N || zloop_buf_busy(a->buf)) return;
    uv_timer_stop(t);
    a->pending_after_written = zloop_track_pending(a->track); /* the buffer is free: so is the tracked send */
    s_shb_send(a, 2);
    zloop_buf_free(&a->buf); /* the sends keep the bytes alive until written out */
    zloop_track_free(&a->track); /* ... and the tracker */
}

static void s_shb_router(zloop_socket_t *s, const zloop_peer_t *peer, const uint8_t *d, size_t n, void *u) {
    shb_t *a = u;
    (void)s, (void)d, (void)n;
    a->peers[a->n_peers++] = *peer;
    if (a->n_peers < FAN_N) return;
    ck_assert_int_eq(zloop_buf_busy(a->buf), 0);
    ck_assert_uint_eq(zloop_buf_cap(a->buf), FAN_BYTES);
    a->too_long_rc = zloop_send_buf(a->router, &a->peers[0], a->buf, FAN_BYTES + 1);
    zloop_peer_t nobody = {.len = 6};
    memcpy(nobody.id, "nobody", 6);
    a->unknown_rc = zloop_send_buf(a->router, &nobody, a->buf, 16);
    a->busy_after_unknown = zloop_buf_busy(a->buf); /* a failed send holds nothing */
    ck_assert_int_eq(zloop_send_buf_tracked(a->router, &nobody, a->buf, 16, a->track), -EHOSTUNREACH);
    a->pending_after_unknown = zloop_track_pending(a->track); /* and counts nothing */
    s_shb_send(a, 1);
    uv_timer_start(&a->poll, s_shb_poll, 1, 1);
}

static void s_shb_dealer(zloop_socket_t *s, const zloop_peer_t *peer, const uint8_t *d, size_t n, void *u) {
    (void)s, (void)peer;
    shb_t *a = u;
    int version = n == FAN_BYTES && d[0] == s_shb_byte(1, 0) ? 1 : n == FAN_BYTES && d[0] == s_shb_byte(2, 0) ? 2 : 0;
    int ok = version > 0;
    for (size_t i = 0; ok && i < n; i++) ok = d[i] == s_shb_byte(version, i);
    if (!ok) a->n_bad++;
    a->n_got[version]++;
    if (a->n_got[2] == FAN_N) a->fx.close_all(&a->fx);
}

START_TEST(test_zloop_send_buf_shared_refilled) {
    shb_t a;
    memset(&a, 0, sizeof a);
    fx_init(&a.fx, 5000, s_shb_close_all);
    ck_assert_int_eq(uv_timer_init(&a.fx.loop, &a.poll), 0);
    a.poll.data = &a;
    a.poll_open = 1;
    a.buf = zloop_buf_new(FAN_BYTES);
    ck_assert_ptr_nonnull(a.buf);
    a.track = zloop_track_new();
    ck_assert_ptr_nonnull(a.track);
    char ep[256];
    a.router = fx_socket(&a.fx, ZMQ_ROUTER, -1, s_shb_router, &a);
    ck_assert_int_eq(zloop_socket_bind(a.router, "tcp://127.0.0.1:0", ep, sizeof ep), 0);
    for (int i = 0; i < FAN_N; i++) {
        a.dealer[i] = fx_socket(&a.fx, ZMQ_DEALER, -1, s_shb_dealer, &a);
        ck_assert_int_eq(zloop_socket_connect(a.dealer[i], ep), 0);
        ck_assert_int_eq(zloop_send(a.dealer[i], NULL, "hi", 2), 0);
    }
    fx_run(&a.fx);
    ck_assert(!a.fx.timed_out);
    ck_assert_int_eq(a.too_long_rc, -EINVAL);
    ck_assert_int_eq(a.unknown_rc, -EHOSTUNREACH);
    ck_assert_int_eq(a.busy_after_unknown, 0);
    for (int v = 1; v <= 2; v++)
        for (int i = 0; i < FAN_N; i++) ck_assert_int_eq(a.rc[v][i], 0);
    ck_assert_int_eq(a.n_got[1], FAN_N); /* every peer got the first version, */
    ck_assert_int_eq(a.n_got[2], FAN_N); /* then the refill, whole */
    ck_assert_int_eq(a.n_got[0], 0);
    ck_assert_int_eq(a.n_bad, 0);
    ck_assert_ptr_null(a.buf);
    zloop_buf_free(NULL);
    ck_assert_int_eq(a.pending_after_unknown, 0);
    ck_assert_int_eq(a.pending_after_written, 0);
    ck_assert_ptr_null(a.track);
    ck_assert_int_eq(zloop_track_pending(NULL), 0);
    zloop_track_free(NULL);
}
END_TEST

typedef struct lim {
    fx_t fx;
    zloop_socket_t *router, *dealer;
    uv_timer_t resend;
    int n_big, n_small;
} lim_t;

static void s_lim_close_all(fx_t *f) {
    lim_t *l = (lim_t *)f;
    zloop_socket_free(&l->router);
    zloop_socket_free(&l->dealer);
    if (!uv_is_closing((uv_handle_t *)&l->resend)) uv_close((uv_handle_t *)&l->resend, NULL);
    fx_close_watchdog(f);
}

static void s_lim_router(zloop_socket_t *s, const zloop_peer_t *peer, const uint8_t *d, size_t n, void *u) {
    (void)s, (void)peer, (void)d;
    lim_t *l = u;
    if (n > 1000) l->n_big++;
    else if (++l->n_small == 1) l->fx.close_all(&l->fx);
}

static void s_lim_resend(uv_timer_t *t) {
    lim_t *l = t->data;
    zloop_send(l->dealer, NULL, "small", 5); /* until one gets through after the reconnect */
}

/* An inbound message over ZMQ_MAXMSGSIZE never reaches the callback (ZeroMQ
 * drops the connection); the peer reconnects and small messages flow. */
START_TEST(test_zloop_max_msg_size_enforced) {
    lim_t l;
    memset(&l, 0, sizeof l);
    fx_init(&l.fx, 3000, s_lim_close_all);
    zloop_socket_opts_t o;
    zloop_socket_opts_default(&o);
    o.max_msg_bytes = 1000;
    char ep[256];
    l.router = zloop_socket_new(&l.fx.loop, l.fx.zctx, ZMQ_ROUTER, &o, s_lim_router, &l);
    ck_assert_int_eq(zloop_socket_bind(l.router, "tcp://127.0.0.1:0", ep, sizeof ep), 0);
    l.dealer = fx_socket(&l.fx, ZMQ_DEALER, -1, fx_ignore, NULL);
    ck_assert_int_eq(zloop_socket_connect(l.dealer, ep), 0);
    uint8_t *big = calloc(1, 5000);
    ck_assert_int_eq(zloop_send_take(l.dealer, NULL, &big, 5000), 0);
    uv_timer_init(&l.fx.loop, &l.resend);
    l.resend.data = &l;
    uv_timer_start(&l.resend, s_lim_resend, 50, 50);
    fx_run(&l.fx);
    ck_assert(!l.fx.timed_out);
    ck_assert_int_eq(l.n_big, 0);
    ck_assert_int_eq(l.n_small, 1);
}
END_TEST

typedef struct frm {
    fx_t fx;
    zloop_socket_t *router, *dealer;
    int n;
    char got[16];
} frm_t;

static void s_frm_close_all(fx_t *f) {
    frm_t *m = (frm_t *)f;
    zloop_socket_free(&m->router);
    zloop_socket_free(&m->dealer);
    fx_close_watchdog(f);
}

static void s_frm_router(zloop_socket_t *s, const zloop_peer_t *peer, const uint8_t *d, size_t n, void *u) {
    (void)s, (void)peer;
    frm_t *m = u;
    m->n++;
    snprintf(m->got, sizeof m->got, "%.*s", (int)n, (const char *)d);
    zloop_stats_t st;
    zloop_socket_stats(s, &st);
    ck_assert_uint_eq(st.n_malformed, 1); /* the two-frame message came first and was dropped */
    m->fx.close_all(&m->fx);
}

START_TEST(test_zloop_malformed_frames_dropped) {
    frm_t m;
    memset(&m, 0, sizeof m);
    fx_init(&m.fx, 3000, s_frm_close_all);
    fx_pair(&m.fx, -1, s_frm_router, fx_ignore, &m, &m.router, &m.dealer);
    void *raw = zloop_socket_zmq(m.dealer);
    ck_assert_int_eq(zmq_send(raw, "a", 1, ZMQ_SNDMORE), 1);
    ck_assert_int_eq(zmq_send(raw, "b", 1, 0), 1);
    zloop_socket_kick(m.dealer);
    ck_assert_int_eq(zloop_send(m.dealer, NULL, "good", 4), 0);
    fx_run(&m.fx);
    ck_assert(!m.fx.timed_out);
    ck_assert_int_eq(m.n, 1);
    ck_assert_str_eq(m.got, "good");
}
END_TEST

/* The socket watcher alone (zloop_watch_t, as auth.c uses it for ZAP and
 * monitor sockets): a PAIR socket with 50 messages of 3 frames queued
 * before the loop starts; the owner's one function reads whole messages, 4
 * per loop turn; every message arrives, the drain stopped at the batch with
 * messages left (n_full_batches), and closing from inside one closes the
 * socket and then every handle (closed runs once, the loop can close). */
typedef struct {
    zloop_watch_t w;
    int n_msgs, n_frames, n_closed, timed_out;
    uv_timer_t dog;
} s_watch_fx_t;

static int s_watch_fx_one(void *owner) {
    s_watch_fx_t *x = owner;
    int got = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, x->w.zsock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            ck_assert_int_eq(got, 0); /* frames of one message come together */
            return 0;
        }
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        got++;
    }
    x->n_frames += got;
    if (++x->n_msgs == 50) {
        zloop_watch_close(&x->w);
        uv_close((uv_handle_t *)&x->dog, NULL);
    }
    return 1;
}

static void s_watch_fx_closed(void *owner) { ((s_watch_fx_t *)owner)->n_closed++; }

static void s_watch_fx_dog(uv_timer_t *h) {
    s_watch_fx_t *x = h->data;
    x->timed_out = 1;
    zloop_watch_close(&x->w);
    uv_close((uv_handle_t *)&x->dog, NULL);
}

START_TEST(test_zloop_watch_multiframe_batches_and_close) {
    uv_loop_t loop;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    void *zctx = zmq_ctx_new();
    void *rx = zmq_socket(zctx, ZMQ_PAIR), *tx = zmq_socket(zctx, ZMQ_PAIR);
    ck_assert_int_eq(zmq_bind(rx, "inproc://watch-test"), 0);
    ck_assert_int_eq(zmq_connect(tx, "inproc://watch-test"), 0);
    for (int i = 0; i < 50; i++) {
        ck_assert_int_eq(zmq_send(tx, "a", 1, ZMQ_SNDMORE), 1);
        ck_assert_int_eq(zmq_send(tx, "bb", 2, ZMQ_SNDMORE), 2);
        ck_assert_int_eq(zmq_send(tx, "ccc", 3, 0), 3);
    }
    s_watch_fx_t *x = calloc(1, sizeof *x);
    x->w.zsock = rx;
    x->w.owner = x;
    x->w.one = s_watch_fx_one;
    x->w.closed = s_watch_fx_closed;
    x->w.batch = 4;
    uv_timer_init(&loop, &x->dog);
    x->dog.data = x;
    uv_timer_start(&x->dog, s_watch_fx_dog, check_scaled_ms(3000), 0);
    ck_assert_int_eq(zloop_watch_start(&x->w, &loop), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(x->timed_out, 0);
    ck_assert_int_eq(x->n_msgs, 50);
    ck_assert_int_eq(x->n_frames, 150);
    ck_assert_uint_ge(x->w.n_full_batches, 1);
    ck_assert_int_eq(x->n_closed, 1);
    ck_assert_ptr_null(x->w.zsock);
    zloop_watch_close(&x->w); /* idempotent */
    ck_assert_int_eq(x->n_closed, 1);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    int zero = 0;
    zmq_setsockopt(tx, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(tx);
    zmq_ctx_term(zctx);
    free(x);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("zloop");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_zloop_bind_ephemeral_port);
    tcase_add_test(tc, test_zloop_burst_fully_drained);
    tcase_add_test(tc, test_zloop_burst_in_bounded_batches);
    tcase_add_test(tc, test_zloop_pingpong_lockstep);
    tcase_add_test(tc, test_zloop_close_inside_callback);
    tcase_add_test(tc, test_zloop_send_many_zero_copy);
    tcase_add_test(tc, test_zloop_send_buf_shared_refilled);
    tcase_add_test(tc, test_zloop_max_msg_size_enforced);
    tcase_add_test(tc, test_zloop_malformed_frames_dropped);
    tcase_add_test(tc, test_zloop_watch_multiframe_batches_and_close);
    suite_add_tcase(s, tc);
    return s;
}
