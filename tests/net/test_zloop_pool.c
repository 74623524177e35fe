/* tests/net/test_zloop_pool.c — common/net/zloop.h's worker pool, mailbox
 * and signal-driven shutdown in a libuv loop (the sockets: test_zloop.c):
 * every job delivered once, queued jobs cancelled on close, items posted
 * from other threads, queued items delivered on close, SIGTERM and SIGINT
 * ending the loop cleanly. Each test has its own loop and context and a
 * watchdog (tests/lib/zloop_fixture.h); uv_loop_close() must succeed. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/net/zloop.h"
#include "tests/lib/zloop_fixture.h"

/* ---- pool and mailbox --------------------------------------------------- */

#define POOL_JOBS 1000

typedef struct job {
    uint64_t m;
    double sum;   /* work: sum of 0..m-1 by a loop */
    int n_done;
    int status;
} job_t;

typedef struct pool_t_ {
    fx_t fx;
    zloop_pool_t *pool;
    uv_thread_t loop_thread;
    job_t jobs[POOL_JOBS];
    int n_done, wrong_thread, wrong_sum;
} pool_fx_t;

static void s_pool_close_all(fx_t *f) {
    pool_fx_t *p = (pool_fx_t *)f;
    zloop_pool_free(&p->pool);
    fx_close_watchdog(f);
}

static void s_pool_work(void *job, void *user) {
    (void)user;
    job_t *j = job;
    double s = 0;
    for (uint64_t k = 0; k < j->m; k++) s += (double)k;
    j->sum = s;
}

static void s_pool_done(void *job, int status, void *user) {
    pool_fx_t *p = user;
    job_t *j = job;
    uv_thread_t self = uv_thread_self();
    if (!uv_thread_equal(&self, &p->loop_thread)) p->wrong_thread++;
    j->n_done++;
    j->status = status;
    /* oracle: the closed form, exact in double for these sizes (< 2^53) */
    if (status == 0 && j->sum != (double)(j->m * (j->m - 1) / 2)) p->wrong_sum++;
    if (++p->n_done == POOL_JOBS) p->fx.close_all(&p->fx);
}

START_TEST(test_zloop_pool_delivers_all) {
    pool_fx_t *p = calloc(1, sizeof *p);
    fx_init(&p->fx, 5000, s_pool_close_all);
    p->loop_thread = uv_thread_self();
    p->pool = zloop_pool_new(&p->fx.loop, 2, s_pool_work, s_pool_done, p);
    ck_assert_ptr_nonnull(p->pool);
    for (int i = 0; i < POOL_JOBS; i++) {
        p->jobs[i].m = 1 + (uint64_t)i * 37;
        ck_assert_int_eq(zloop_pool_submit(p->pool, &p->jobs[i]), 0);
    }
    ck_assert_uint_eq(zloop_pool_pending(p->pool), POOL_JOBS);
    fx_run(&p->fx);
    ck_assert(!p->fx.timed_out);
    ck_assert_int_eq(p->n_done, POOL_JOBS);
    ck_assert_int_eq(p->wrong_thread, 0);
    ck_assert_int_eq(p->wrong_sum, 0);
    for (int i = 0; i < POOL_JOBS; i++) {
        ck_assert_int_eq(p->jobs[i].n_done, 1);
        ck_assert_int_eq(p->jobs[i].status, 0);
    }
    free(p);
}
END_TEST

#define CANCEL_JOBS 50

typedef struct cancel {
    fx_t fx;
    zloop_pool_t *pool;
    uv_timer_t poll;
    uv_mutex_t gate_lock;
    uv_cond_t gate_cond;
    int started, open;
    job_t jobs[CANCEL_JOBS];
    int n_cancelled, n_ok, submit_after_close;
} cancel_t;

static void s_cancel_close_all(fx_t *f) {
    cancel_t *c = (cancel_t *)f;
    zloop_pool_free(&c->pool);
    if (!uv_is_closing((uv_handle_t *)&c->poll)) uv_close((uv_handle_t *)&c->poll, NULL);
    fx_close_watchdog(f);
}

/* Job 0 holds the only thread until the gate opens; the others are quick. */
static void s_cancel_work(void *job, void *user) {
    cancel_t *c = user;
    if (job != &c->jobs[0]) return;
    uv_mutex_lock(&c->gate_lock);
    c->started = 1;
    while (!c->open) uv_cond_wait(&c->gate_cond, &c->gate_lock);
    uv_mutex_unlock(&c->gate_lock);
}

static void s_cancel_done(void *job, int status, void *user) {
    cancel_t *c = user;
    job_t *j = job;
    j->n_done++;
    j->status = status;
    if (status == -ECANCELED && c->n_cancelled++ == 0) {
        /* close() is running: let job 0 finish so the join returns */
        uv_mutex_lock(&c->gate_lock);
        c->open = 1;
        uv_cond_broadcast(&c->gate_cond);
        uv_mutex_unlock(&c->gate_lock);
    }
    if (status == 0) c->n_ok++;
}

static void s_cancel_poll(uv_timer_t *t) {
    cancel_t *c = t->data;
    uv_mutex_lock(&c->gate_lock);
    int started = c->started;
    uv_mutex_unlock(&c->gate_lock);
    if (!started) return;
    zloop_pool_t *pool = c->pool;
    c->fx.close_all(&c->fx); /* closes the pool while job 0 runs and 1.. wait */
    c->submit_after_close = zloop_pool_submit(pool, &c->jobs[0]) == -EPIPE; /* memory lives until the close cb */
}

START_TEST(test_zloop_pool_close_cancels_queued) {
    cancel_t *c = calloc(1, sizeof *c);
    fx_init(&c->fx, 3000, s_cancel_close_all);
    uv_mutex_init(&c->gate_lock);
    uv_cond_init(&c->gate_cond);
    c->pool = zloop_pool_new(&c->fx.loop, 1, s_cancel_work, s_cancel_done, c);
    ck_assert_ptr_nonnull(c->pool);
    for (int i = 0; i < CANCEL_JOBS; i++) ck_assert_int_eq(zloop_pool_submit(c->pool, &c->jobs[i]), 0);
    uv_timer_init(&c->fx.loop, &c->poll);
    c->poll.data = c;
    uv_timer_start(&c->poll, s_cancel_poll, 1, 1);
    fx_run(&c->fx);
    ck_assert(!c->fx.timed_out);
    ck_assert_int_eq(c->jobs[0].n_done, 1);
    ck_assert_int_eq(c->jobs[0].status, 0);
    for (int i = 1; i < CANCEL_JOBS; i++) {
        ck_assert_int_eq(c->jobs[i].n_done, 1);
        ck_assert_int_eq(c->jobs[i].status, -ECANCELED);
    }
    ck_assert_int_eq(c->n_ok, 1);
    ck_assert_int_eq(c->n_cancelled, CANCEL_JOBS - 1);
    ck_assert(c->submit_after_close);
    uv_cond_destroy(&c->gate_cond);
    uv_mutex_destroy(&c->gate_lock);
    free(c);
}
END_TEST

#define MB_THREADS 4
#define MB_ITEMS 2500

typedef struct mbx {
    fx_t fx;
    zloop_mailbox_t *mb;
    uv_thread_t threads[MB_THREADS];
    int next[MB_THREADS];
    int n, out_of_order, post_failed;
} mbx_t;

typedef struct producer {
    mbx_t *m;
    int id;
} producer_t;

static void s_mbx_close_all(fx_t *f) {
    mbx_t *m = (mbx_t *)f;
    zloop_mailbox_free(&m->mb);
    fx_close_watchdog(f);
}

static void s_mbx_producer(void *arg) {
    producer_t *p = arg;
    for (int i = 0; i < MB_ITEMS; i++) {
        uintptr_t item = ((uintptr_t)p->id << 20) | (uintptr_t)(i + 1);
        if (zloop_mailbox_post(p->m->mb, (void *)item) != 0) p->m->post_failed++;
    }
}

static void s_mbx_fn(void *item, void *user) {
    mbx_t *m = user;
    uintptr_t v = (uintptr_t)item;
    int id = (int)(v >> 20), seq = (int)(v & 0xfffff) - 1;
    if (id < 0 || id >= MB_THREADS || seq != m->next[id]) m->out_of_order++;
    else m->next[id]++;
    if (++m->n == MB_THREADS * MB_ITEMS) {
        for (int i = 0; i < MB_THREADS; i++) uv_thread_join(&m->threads[i]);
        m->fx.close_all(&m->fx);
    }
}

/* Four threads post 2500 items each: all arrive, each thread's in order,
 * however the uv_async wake-ups coalesced. */
START_TEST(test_zloop_mailbox_from_threads) {
    mbx_t *m = calloc(1, sizeof *m);
    producer_t prod[MB_THREADS];
    fx_init(&m->fx, 5000, s_mbx_close_all);
    m->mb = zloop_mailbox_new(&m->fx.loop, s_mbx_fn, m);
    ck_assert_ptr_nonnull(m->mb);
    for (int i = 0; i < MB_THREADS; i++) {
        prod[i].m = m;
        prod[i].id = i;
        ck_assert_int_eq(uv_thread_create(&m->threads[i], s_mbx_producer, &prod[i]), 0);
    }
    fx_run(&m->fx);
    ck_assert(!m->fx.timed_out);
    ck_assert_int_eq(m->n, MB_THREADS * MB_ITEMS);
    ck_assert_int_eq(m->out_of_order, 0);
    ck_assert_int_eq(m->post_failed, 0);
    free(m);
}
END_TEST

static void s_count(void *item, void *user) {
    (void)item;
    (*(int *)user)++;
}

/* Items still queued at close are delivered by close itself. */
START_TEST(test_zloop_mailbox_close_delivers_queued) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    int n = 0;
    zloop_mailbox_t *mb = zloop_mailbox_new(&loop, s_count, &n);
    for (int i = 0; i < 10; i++) ck_assert_int_eq(zloop_mailbox_post(mb, NULL), 0);
    ck_assert_int_eq(n, 0);
    zloop_mailbox_free(&mb);
    ck_assert_ptr_null(mb);
    ck_assert_int_eq(n, 10);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* ---- signals ------------------------------------------------------------ */

typedef struct sig {
    fx_t fx;
    zloop_socket_t *router, *dealer;
    zloop_signals_t *signals;
    uv_timer_t raise_timer;
    int stop_signal;
    int got_hup, got_stop, n_router;
} sig_t_;

static void s_sig_close_all(fx_t *f) {
    sig_t_ *s = (sig_t_ *)f;
    zloop_socket_free(&s->router);
    zloop_socket_free(&s->dealer);
    zloop_signals_free(&s->signals);
    if (!uv_is_closing((uv_handle_t *)&s->raise_timer)) uv_close((uv_handle_t *)&s->raise_timer, NULL);
    fx_close_watchdog(f);
}

static void s_sig_fn(int signum, void *user) {
    sig_t_ *s = user;
    if (signum == SIGHUP) s->got_hup++;
    if (signum == s->stop_signal) {
        s->got_stop++;
        s->fx.close_all(&s->fx); /* the daemon's clean shutdown path */
    }
}

static void s_sig_router(zloop_socket_t *z, const zloop_peer_t *peer, const uint8_t *d, size_t n, void *u) {
    (void)z, (void)peer, (void)d, (void)n;
    sig_t_ *s = u;
    s->n_router++;
    raise(SIGHUP);            /* reported, does not stop the loop */
    raise(s->stop_signal);    /* the shutdown request */
}

static void s_sig_start(uv_timer_t *t) {
    sig_t_ *s = t->data;
    zloop_send(s->dealer, NULL, "go", 2);
}

/* SIGTERM and SIGINT (loop index) raised inside the process end the loop
 * through the callback; every handle closes and the context terminates. */
START_TEST(test_zloop_signal_shutdown) {
    sig_t_ s;
    memset(&s, 0, sizeof s);
    s.stop_signal = _i == 0 ? SIGTERM : SIGINT;
    fx_init(&s.fx, 3000, s_sig_close_all);
    fx_pair(&s.fx, -1, s_sig_router, fx_ignore, &s, &s.router, &s.dealer);
    s.signals = zloop_signals_new(&s.fx.loop, s_sig_fn, &s);
    ck_assert_ptr_nonnull(s.signals);
    uv_timer_init(&s.fx.loop, &s.raise_timer);
    s.raise_timer.data = &s;
    uv_timer_start(&s.raise_timer, s_sig_start, 5, 0);
    fx_run(&s.fx);
    ck_assert(!s.fx.timed_out);
    ck_assert_int_eq(s.n_router, 1);
    ck_assert_int_eq(s.got_hup, 1);
    ck_assert_int_eq(s.got_stop, 1);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("zloop_pool");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_zloop_pool_delivers_all);
    tcase_add_test(tc, test_zloop_pool_close_cancels_queued);
    tcase_add_test(tc, test_zloop_mailbox_from_threads);
    tcase_add_test(tc, test_zloop_mailbox_close_delivers_queued);
    tcase_add_loop_test(tc, test_zloop_signal_shutdown, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}
