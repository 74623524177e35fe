/* common/net/zloop.c — ZeroMQ sockets, signals and worker threads in a libuv
 * loop (see common/net/zloop.h for the why).
 *
 * Ownership and lifetime: every object is malloc'd by its constructor and
 * freed only from the libuv close callback of its last handle, so callbacks
 * running later in the same loop turn (including the drain loop that called
 * the user's callback that closed the object) can still look at it. A
 * `closing` flag tells them to stop.
 *
 * Thread use: sockets, signals and the loop side of mailboxes/pools belong
 * to the loop thread. Only s_mbox_post*() and the pool threads run
 * elsewhere; they touch the mailbox queue under its mutex and call
 * uv_async_send(), the one libuv call that is thread-safe.
 */
#include "common/net/zloop.h"
#include "common/net/zloop_int.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/base/log.h"

/* ---- sockets ------------------------------------------------------------ */

struct zloop_socket {
    uv_loop_t *loop;
    void *zsock;       /* = w.zsock until closed */
    int type;
    zloop_watch_t w;   /* poll, check and idle: the drain (s_recv_one per message) */
    zloop_recv_fn on_recv;
    void *user;
    zloop_stats_t stats;
    zmq_msg_t *current; /* the payload being delivered (zloop_socket_property) */
};

void zloop_socket_opts_default(zloop_socket_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->max_msg_bytes = -1;
    o->linger_ms = 100;
    o->batch = 64;
    o->sndhwm = -1;
    o->rcvhwm = -1;
    o->router_mandatory = 1;
    o->routing_id = NULL;
}

/* ---- socket watchers ----------------------------------------------------- */

/* ZMQ_EVENTS, retrying on EINTR; 0 on error (logged once). Reading it also
 * lets ZeroMQ process its command queue, which re-arms ZMQ_FD. */
static int s_events(zloop_watch_t *w) {
    int ev = 0;
    size_t sz = sizeof ev;
    for (;;) {
        if (zmq_getsockopt(w->zsock, ZMQ_EVENTS, &ev, &sz) == 0) return ev;
        if (errno == EINTR) continue;
        if (!w->events_failed++) log_warn("zloop: ZMQ_EVENTS failed: %s", zmq_strerror(errno));
        return 0;
    }
}

static void s_on_idle(uv_idle_t *h) {
    (void)h; /* its only job is to keep uv_run from blocking in the poll phase */
}

void zloop_watch_kick(zloop_watch_t *w) {
    if (!w || w->closing || w->n_open < 3) return; /* closing, or never fully started */
    if (s_events(w) & ZMQ_POLLIN) uv_idle_start(&w->idle, s_on_idle);
    else uv_idle_stop(&w->idle);
}

/* Handle up to `batch` messages, then re-read ZMQ_EVENTS: keep turning (idle)
 * while messages remain, otherwise block until ZMQ_FD signals again. */
static void s_watch_drain(zloop_watch_t *w) {
    int n = 0, batch = w->batch > 0 ? w->batch : 64;
    while (!w->closing && n < batch) {
        if (w->one(w->owner) <= 0) break;
        n++;
    }
    if (w->closing) return;
    if (s_events(w) & ZMQ_POLLIN) {
        if (n >= batch) w->n_full_batches++;
        uv_idle_start(&w->idle, s_on_idle);
    } else {
        uv_idle_stop(&w->idle);
    }
}

static void s_on_check(uv_check_t *h) { s_watch_drain(h->data); }

static void s_on_poll(uv_poll_t *h, int status, int events) {
    (void)events;
    (void)h; /* the uv_check that follows this poll phase drains */
    if (status < 0) log_warn("zloop: polling the ZeroMQ descriptor failed: %s", uv_strerror(status));
}

int zloop_watch_start(zloop_watch_t *w, uv_loop_t *loop) {
    int fd = -1;
    size_t fdsz = sizeof fd;
    if (zmq_getsockopt(w->zsock, ZMQ_FD, &fd, &fdsz) != 0) return -errno;
    int rc;
    if ((rc = uv_poll_init(loop, &w->poll, fd)) < 0) return rc;
    w->n_open++;
    w->poll.data = w;
    if ((rc = uv_check_init(loop, &w->check)) < 0) return rc;
    w->n_open++;
    w->check.data = w;
    if ((rc = uv_idle_init(loop, &w->idle)) < 0) return rc;
    w->n_open++;
    w->idle.data = w;
    if ((rc = uv_poll_start(&w->poll, UV_READABLE, s_on_poll)) < 0) return rc;
    if ((rc = uv_check_start(&w->check, s_on_check)) < 0) return rc;
    return 0;
}

int zloop_watch_closing(const zloop_watch_t *w) { return w->closing; }

static void s_watch_closed(uv_handle_t *h) {
    zloop_watch_t *w = h->data;
    if (--w->n_open == 0) w->closed(w->owner);
}

void zloop_watch_close(zloop_watch_t *w) {
    if (w->closing) return;
    w->closing = 1;
    /* uv_close stops the poll handle (removing ZMQ_FD from epoll) before the
     * ZeroMQ socket, which owns that descriptor, goes away. n_open counts the
     * handles initialized, in this order. */
    int n = w->n_open;
    uv_handle_t *hs[3] = {(uv_handle_t *)&w->poll, (uv_handle_t *)&w->check, (uv_handle_t *)&w->idle};
    for (int i = 0; i < n; i++) uv_close(hs[i], s_watch_closed);
    if (w->zsock) zmq_close(w->zsock);
    w->zsock = NULL;
    if (n == 0) w->closed(w->owner);
}

/* ---- sockets ------------------------------------------------------------ */

void zloop_socket_kick(zloop_socket_t *s) {
    if (s) zloop_watch_kick(&s->w);
}

/* Receive one whole message (all its frames) and deliver or drop it.
 * Returns 1 when a message was consumed, 0 when none was waiting, -errno on
 * a receive error. */
static int s_recv_one(zloop_socket_t *s) {
    zmq_msg_t part[2], scratch;
    int n = 0, extra = 0;
    for (;;) {
        zmq_msg_t *m = n < 2 ? &part[n] : &scratch;
        zmq_msg_init(m);
        int rc;
        do rc = zmq_msg_recv(m, s->zsock, ZMQ_DONTWAIT);
        while (rc < 0 && errno == EINTR);
        if (rc < 0) {
            int e = errno;
            zmq_msg_close(m);
            for (int i = 0; i < n; i++) zmq_msg_close(&part[i]);
            if (e == EAGAIN && n == 0 && extra == 0) return 0;
            log_warn("zloop: receive failed: %s", zmq_strerror(e));
            return -e;
        }
        int more = zmq_msg_more(m);
        if (m == &scratch) {
            extra++;
            zmq_msg_close(&scratch);
        } else {
            n++;
        }
        if (!more) break;
    }
    int want = s->type == ZMQ_ROUTER ? 2 : 1;
    zloop_peer_t peer;
    const zloop_peer_t *pp = NULL;
    int ok = n + extra == want;
    if (ok && s->type == ZMQ_ROUTER) {
        size_t idlen = zmq_msg_size(&part[0]);
        ok = idlen > 0 && idlen <= ZLOOP_ID_MAX;
        if (ok) {
            peer.len = idlen;
            memcpy(peer.id, zmq_msg_data(&part[0]), idlen);
            pp = &peer;
        }
    }
    if (ok) {
        zmq_msg_t *payload = &part[want - 1];
        s->stats.n_recv++;
        s->current = payload;
        s->on_recv(s, pp, zmq_msg_data(payload), zmq_msg_size(payload), s->user);
        s->current = NULL;
    } else {
        s->stats.n_malformed++;
        log_debug("zloop: dropped a message of %d frames (expected %d)", n + extra, want);
    }
    for (int i = 0; i < n; i++) zmq_msg_close(&part[i]);
    return 1;
}

/* The watcher's one function: a message of this socket's framing. */
static int s_socket_one(void *owner) { return s_recv_one(owner); }

static void s_socket_closed(void *owner) { free(owner); }

static int s_setopt_int(void *z, int opt, int v) { return zmq_setsockopt(z, opt, &v, sizeof v); }

zloop_socket_t *zloop_socket_new(uv_loop_t *loop, void *zctx, int type, const zloop_socket_opts_t *opts,
                                 zloop_recv_fn on_recv, void *user) {
    zloop_socket_opts_t def;
    if (!opts) {
        zloop_socket_opts_default(&def);
        opts = &def;
    }
    if (!loop || !zctx || !on_recv || (type != ZMQ_ROUTER && type != ZMQ_DEALER)) {
        log_error("zloop: a socket needs a loop, a zmq context, a callback and type ROUTER or DEALER");
        return NULL;
    }
    if (opts->routing_id && (strlen(opts->routing_id) == 0 || strlen(opts->routing_id) > ZLOOP_ID_MAX)) {
        log_error("zloop: routing id must be 1 to %d bytes", ZLOOP_ID_MAX);
        return NULL;
    }
    zloop_socket_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->loop = loop;
    s->type = type;
    s->on_recv = on_recv;
    s->user = user;
    s->zsock = zmq_socket(zctx, type);
    if (!s->zsock) {
        log_error("zloop: zmq_socket: %s", zmq_strerror(errno));
        free(s);
        return NULL;
    }
    int64_t maxsz = opts->max_msg_bytes;
    int bad = s_setopt_int(s->zsock, ZMQ_LINGER, opts->linger_ms) ||
              zmq_setsockopt(s->zsock, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz) ||
              (opts->sndhwm >= 0 && s_setopt_int(s->zsock, ZMQ_SNDHWM, opts->sndhwm)) ||
              (opts->rcvhwm >= 0 && s_setopt_int(s->zsock, ZMQ_RCVHWM, opts->rcvhwm)) ||
              (type == ZMQ_ROUTER && s_setopt_int(s->zsock, ZMQ_ROUTER_MANDATORY, opts->router_mandatory ? 1 : 0)) ||
              (type == ZMQ_DEALER && opts->routing_id &&
               zmq_setsockopt(s->zsock, ZMQ_ROUTING_ID, opts->routing_id, strlen(opts->routing_id)));
    if (bad) {
        log_error("zloop: setting up the ZeroMQ socket: %s", zmq_strerror(errno));
        zmq_close(s->zsock);
        free(s);
        return NULL;
    }
    s->w.zsock = s->zsock;
    s->w.owner = s;
    s->w.one = s_socket_one;
    s->w.closed = s_socket_closed;
    s->w.batch = opts->batch > 0 ? opts->batch : 64;
    int rc = zloop_watch_start(&s->w, loop);
    if (rc < 0) {
        log_error("zloop: watching the ZeroMQ socket: %s", uv_strerror(rc));
        zloop_socket_free(&s); /* frees s once its handles are closed */
        return NULL;
    }
    return s;
}

int zloop_socket_bind(zloop_socket_t *s, const char *endpoint, char *actual, size_t actual_len) {
    if (!s || !endpoint) return -EINVAL;
    if (zloop_watch_closing(&s->w)) return -EPIPE;
    int rc;
    while ((rc = zmq_bind(s->zsock, endpoint)) != 0 && errno == EINTR) {
    }
    if (rc != 0) return -errno;
    int ret = 0;
    if (actual && actual_len) {
        size_t sz = actual_len;
        if (zmq_getsockopt(s->zsock, ZMQ_LAST_ENDPOINT, actual, &sz) != 0) {
            ret = errno == EINVAL ? -ENOSPC : -errno;
            actual[0] = 0;
        }
    }
    zloop_watch_kick(&s->w);
    return ret;
}

int zloop_socket_connect(zloop_socket_t *s, const char *endpoint) {
    if (!s || !endpoint) return -EINVAL;
    if (zloop_watch_closing(&s->w)) return -EPIPE;
    int rc;
    while ((rc = zmq_connect(s->zsock, endpoint)) != 0 && errno == EINTR) {
    }
    if (rc != 0) return -errno;
    zloop_watch_kick(&s->w);
    return 0;
}

static int s_send_frame(zloop_socket_t *s, zmq_msg_t *m, int flags) {
    for (;;) {
        if (zmq_msg_send(m, s->zsock, flags | ZMQ_DONTWAIT) >= 0) return 0;
        if (errno != EINTR) return -errno;
    }
}

/* Send payload to peer; payload is consumed (closed) in every case. */
static int s_send_msg(zloop_socket_t *s, const zloop_peer_t *peer, zmq_msg_t *payload) {
    int rc = 0;
    if (zloop_watch_closing(&s->w)) rc = -EPIPE;
    else if (s->type == ZMQ_ROUTER && (!peer || peer->len == 0 || peer->len > ZLOOP_ID_MAX)) rc = -EINVAL;
    else if (s->type == ZMQ_DEALER && peer) rc = -EINVAL;
    if (rc == 0 && s->type == ZMQ_ROUTER) {
        zmq_msg_t id;
        if (zmq_msg_init_size(&id, peer->len) != 0) {
            rc = -ENOMEM;
        } else {
            memcpy(zmq_msg_data(&id), peer->id, peer->len);
            rc = s_send_frame(s, &id, ZMQ_SNDMORE);
            zmq_msg_close(&id);
        }
    }
    if (rc == 0) rc = s_send_frame(s, payload, 0);
    zmq_msg_close(payload);
    if (rc == 0) s->stats.n_sent++;
    else s->stats.n_send_errors++;
    zloop_watch_kick(&s->w); /* a send may have consumed the edge of an arrival */
    return rc;
}

int zloop_send_zmsg(zloop_socket_t *s, const zloop_peer_t *peer, zmq_msg_t *payload) {
    return s_send_msg(s, peer, payload);
}

int zloop_send(zloop_socket_t *s, const zloop_peer_t *peer, const void *data, size_t len) {
    if (!s || (!data && len)) return -EINVAL;
    zmq_msg_t m;
    if (zmq_msg_init_size(&m, len) != 0) return -ENOMEM;
    if (len) memcpy(zmq_msg_data(&m), data, len);
    return s_send_msg(s, peer, &m);
}

static void s_free_buffer(void *data, void *hint) {
    (void)hint;
    free(data); /* may run on a ZeroMQ I/O thread: free() is thread-safe */
}

/* Wrap a malloc'd buffer in a message without copying; takes *buf. */
static int s_wrap(zmq_msg_t *m, uint8_t **buf, size_t len) {
    uint8_t *b = *buf;
    *buf = NULL;
    if (!b) return zmq_msg_init_size(m, 0) == 0 ? 0 : -ENOMEM;
    if (zmq_msg_init_data(m, b, len, s_free_buffer, NULL) != 0) {
        free(b);
        return -ENOMEM;
    }
    return 0;
}

int zloop_send_take(zloop_socket_t *s, const zloop_peer_t *peer, uint8_t **buf, size_t len) {
    if (!buf) return -EINVAL;
    if (!s) {
        free(*buf);
        *buf = NULL;
        return -EINVAL;
    }
    zmq_msg_t m;
    int rc = s_wrap(&m, buf, len);
    if (rc < 0) return rc;
    return s_send_msg(s, peer, &m);
}

int zloop_send_many(zloop_socket_t *s, const zloop_peer_t *peers, size_t n_peers, uint8_t **buf, size_t len,
                    int *status) {
    if (!buf) return -EINVAL;
    zmq_msg_t orig;
    int rc = s_wrap(&orig, buf, len);
    if (rc < 0 || !s || (!peers && n_peers)) {
        if (rc == 0) zmq_msg_close(&orig);
        rc = rc < 0 ? rc : -EINVAL;
        for (size_t i = 0; status && i < n_peers; i++) status[i] = rc;
        return rc;
    }
    int first = 0;
    for (size_t i = 0; i < n_peers; i++) {
        zmq_msg_t c;
        zmq_msg_init(&c);
        int r = zmq_msg_copy(&c, &orig) == 0 ? s_send_msg(s, &peers[i], &c) : (zmq_msg_close(&c), -ENOMEM);
        if (status) status[i] = r;
        if (r < 0 && first == 0) first = r;
    }
    zmq_msg_close(&orig);
    return first;
}

void zloop_socket_stats(const zloop_socket_t *s, zloop_stats_t *out) {
    if (s) {
        *out = s->stats;
        out->n_full_batches = s->w.n_full_batches;
    } else {
        memset(out, 0, sizeof *out);
    }
}

const char *zloop_socket_property(zloop_socket_t *s, const char *name) {
    return s && s->current ? zmq_msg_gets(s->current, name) : NULL;
}

void *zloop_socket_zmq(zloop_socket_t *s) { return s ? s->zsock : NULL; }

void zloop_socket_free(zloop_socket_t **sp) {
    if (!sp || !*sp) return;
    zloop_socket_t *s = *sp;
    *sp = NULL;
    if (zloop_watch_closing(&s->w)) return;
    s->zsock = NULL;
    zloop_watch_close(&s->w); /* the socket now, the memory from the last close callback */
}

/* ---- signals ------------------------------------------------------------ */

#define S_N_SIGNALS 3

struct zloop_signals {
    uv_signal_t sig[S_N_SIGNALS];
    int n_handles;
    int closing;
    zloop_signal_fn fn;
    void *user;
};

static void s_on_signal(uv_signal_t *h, int signum) {
    zloop_signals_t *z = h->data;
    if (!z->closing) z->fn(signum, z->user);
}

static void s_signal_closed(uv_handle_t *h) {
    zloop_signals_t *z = h->data;
    if (--z->n_handles == 0) free(z);
}

zloop_signals_t *zloop_signals_new(uv_loop_t *loop, zloop_signal_fn fn, void *user) {
    static const int signums[S_N_SIGNALS] = {SIGINT, SIGTERM, SIGHUP};
    if (!loop || !fn) return NULL;
    zloop_signals_t *z = calloc(1, sizeof *z);
    if (!z) return NULL;
    z->fn = fn;
    z->user = user;
    for (int i = 0; i < S_N_SIGNALS; i++) {
        int rc = uv_signal_init(loop, &z->sig[i]);
        if (rc < 0) {
            log_error("zloop: uv_signal_init: %s", uv_strerror(rc));
            break;
        }
        z->sig[i].data = z;
        z->n_handles++;
        if ((rc = uv_signal_start(&z->sig[i], s_on_signal, signums[i])) < 0) {
            log_error("zloop: watching signal %d: %s", signums[i], uv_strerror(rc));
            break;
        }
        uv_unref((uv_handle_t *)&z->sig[i]);
    }
    if (z->n_handles == S_N_SIGNALS && uv_is_active((uv_handle_t *)&z->sig[S_N_SIGNALS - 1])) return z;
    if (z->n_handles == 0) {
        free(z);
        return NULL;
    }
    zloop_signals_t *tmp = z;
    zloop_signals_free(&tmp);
    return NULL;
}

void zloop_signals_free(zloop_signals_t **p) {
    if (!p || !*p) return;
    zloop_signals_t *z = *p;
    *p = NULL;
    if (z->closing) return;
    z->closing = 1;
    int n = z->n_handles;
    for (int i = 0; i < n; i++) uv_close((uv_handle_t *)&z->sig[i], s_signal_closed);
}

/* ---- mailbox ------------------------------------------------------------ */

typedef struct s_node {
    struct s_node *next;
    void *item;
} s_node_t;

/* A FIFO + uv_async; embedded in zloop_mailbox_t and zloop_pool_t. */
typedef struct s_mbox {
    uv_async_t async;
    uv_mutex_t lock;
    s_node_t *head, *tail; /* under lock */
    int closing;           /* under lock for posters */
    int in_drain;          /* loop thread */
    void (*deliver)(struct s_mbox *mb, void *item);
    void (*closed)(struct s_mbox *mb); /* releases the container */
} s_mbox_t;

/* Deliver until the queue stays empty: uv_async callbacks coalesce, so one
 * wake-up may stand for many posts. */
static void s_mbox_drain(s_mbox_t *mb) {
    mb->in_drain++;
    for (;;) {
        uv_mutex_lock(&mb->lock);
        s_node_t *list = mb->head;
        mb->head = mb->tail = NULL;
        uv_mutex_unlock(&mb->lock);
        if (!list) break;
        while (list) {
            s_node_t *node = list;
            list = node->next;
            void *item = node->item;
            free(node);
            mb->deliver(mb, item);
        }
    }
    mb->in_drain--;
}

static void s_mbox_on_async(uv_async_t *h) { s_mbox_drain(h->data); }

static void s_mbox_on_closed(uv_handle_t *h) {
    s_mbox_t *mb = h->data;
    /* posts after close break the contract; free the nodes, lose the items */
    for (s_node_t *n = mb->head, *next; n; n = next) {
        next = n->next;
        log_warn("zloop: an item was posted to a closed mailbox");
        free(n);
    }
    uv_mutex_destroy(&mb->lock);
    mb->closed(mb);
}

static int s_mbox_init(uv_loop_t *loop, s_mbox_t *mb, void (*deliver)(s_mbox_t *, void *),
                       void (*closed)(s_mbox_t *)) {
    memset(mb, 0, sizeof *mb);
    mb->deliver = deliver;
    mb->closed = closed;
    int rc = uv_mutex_init(&mb->lock);
    if (rc < 0) return rc;
    if ((rc = uv_async_init(loop, &mb->async, s_mbox_on_async)) < 0) {
        uv_mutex_destroy(&mb->lock);
        return rc;
    }
    mb->async.data = mb;
    return 0;
}

/* Append a node (allocated by the caller) and wake the loop. Any thread. */
static int s_mbox_post_node(s_mbox_t *mb, s_node_t *node) {
    node->next = NULL;
    uv_mutex_lock(&mb->lock);
    if (mb->closing) {
        uv_mutex_unlock(&mb->lock);
        return -EPIPE;
    }
    if (mb->tail) mb->tail->next = node;
    else mb->head = node;
    mb->tail = node;
    uv_mutex_unlock(&mb->lock);
    uv_async_send(&mb->async);
    return 0;
}

static void s_mbox_close(s_mbox_t *mb) {
    uv_mutex_lock(&mb->lock);
    int was = mb->closing;
    mb->closing = 1;
    uv_mutex_unlock(&mb->lock);
    if (was) return;
    /* Deliver what is queued. Posts that raced with the flag above landed
     * before it and are delivered too. Inside a drain, the running drain
     * delivers them. */
    if (!mb->in_drain) s_mbox_drain(mb);
    uv_close((uv_handle_t *)&mb->async, s_mbox_on_closed);
}

struct zloop_mailbox {
    s_mbox_t mb; /* first member: the container is the mailbox */
    zloop_mail_fn fn;
    void *user;
};

static void s_mailbox_deliver(s_mbox_t *mb, void *item) {
    zloop_mailbox_t *m = (zloop_mailbox_t *)mb;
    m->fn(item, m->user);
}

static void s_mailbox_closed(s_mbox_t *mb) { free(mb); }

zloop_mailbox_t *zloop_mailbox_new(uv_loop_t *loop, zloop_mail_fn fn, void *user) {
    if (!loop || !fn) return NULL;
    zloop_mailbox_t *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    int rc = s_mbox_init(loop, &m->mb, s_mailbox_deliver, s_mailbox_closed);
    if (rc < 0) {
        log_error("zloop: mailbox: %s", uv_strerror(rc));
        free(m);
        return NULL;
    }
    m->fn = fn;
    m->user = user;
    return m;
}

int zloop_mailbox_post(zloop_mailbox_t *mb, void *item) {
    if (!mb) return -EINVAL;
    s_node_t *node = malloc(sizeof *node);
    if (!node) return -ENOMEM;
    node->item = item;
    int rc = s_mbox_post_node(&mb->mb, node);
    if (rc < 0) free(node);
    return rc;
}

void zloop_mailbox_free(zloop_mailbox_t **p) {
    if (!p || !*p) return;
    zloop_mailbox_t *m = *p;
    *p = NULL;
    s_mbox_close(&m->mb);
}

/* ---- pool --------------------------------------------------------------- */

struct zloop_pool {
    s_mbox_t mb;             /* first member: finished jobs come back here */
    uv_mutex_t qlock;
    uv_cond_t qcond;
    s_node_t *qhead, *qtail; /* jobs not started, under qlock */
    int stop;                /* under qlock */
    int n_threads;
    uv_thread_t *threads;
    zloop_work_fn work;
    zloop_done_fn done;
    void *user;
    size_t pending;          /* loop thread */
    int closing;             /* loop thread */
};

static void s_pool_thread(void *arg) {
    zloop_pool_t *p = arg;
    for (;;) {
        uv_mutex_lock(&p->qlock);
        while (!p->stop && !p->qhead) uv_cond_wait(&p->qcond, &p->qlock);
        if (p->stop) {
            uv_mutex_unlock(&p->qlock);
            return;
        }
        s_node_t *node = p->qhead;
        p->qhead = node->next;
        if (!p->qhead) p->qtail = NULL;
        uv_mutex_unlock(&p->qlock);
        p->work(node->item, p->user);
        /* The job's node carries it back: no allocation on this thread. The
         * mailbox closes only after the threads are joined, so this cannot
         * fail. */
        (void)s_mbox_post_node(&p->mb, node);
    }
}

static void s_pool_deliver(s_mbox_t *mb, void *item) {
    zloop_pool_t *p = (zloop_pool_t *)mb;
    p->pending--;
    p->done(item, 0, p->user);
}

static void s_pool_closed(s_mbox_t *mb) {
    zloop_pool_t *p = (zloop_pool_t *)mb;
    uv_cond_destroy(&p->qcond);
    uv_mutex_destroy(&p->qlock);
    free(p->threads);
    free(p);
}

/* Stop the threads, join them and hand back queued jobs as cancelled. */
static void s_pool_stop(zloop_pool_t *p, int n_started) {
    uv_mutex_lock(&p->qlock);
    p->stop = 1;
    s_node_t *list = p->qhead;
    p->qhead = p->qtail = NULL;
    uv_cond_broadcast(&p->qcond);
    uv_mutex_unlock(&p->qlock);
    while (list) {
        s_node_t *node = list;
        list = node->next;
        void *job = node->item;
        free(node);
        p->pending--;
        p->done(job, -ECANCELED, p->user);
    }
    for (int i = 0; i < n_started; i++) uv_thread_join(&p->threads[i]);
}

zloop_pool_t *zloop_pool_new(uv_loop_t *loop, int n_threads, zloop_work_fn work, zloop_done_fn done, void *user) {
    if (!loop || !work || !done || n_threads < 1 || n_threads > 256) {
        log_error("zloop: a pool needs a loop, work and done functions and 1 to 256 threads");
        return NULL;
    }
    zloop_pool_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads || uv_mutex_init(&p->qlock) < 0) {
        free(p->threads);
        free(p);
        return NULL;
    }
    if (uv_cond_init(&p->qcond) < 0) {
        uv_mutex_destroy(&p->qlock);
        free(p->threads);
        free(p);
        return NULL;
    }
    int rc = s_mbox_init(loop, &p->mb, s_pool_deliver, s_pool_closed);
    if (rc < 0) {
        log_error("zloop: pool: %s", uv_strerror(rc));
        uv_cond_destroy(&p->qcond);
        uv_mutex_destroy(&p->qlock);
        free(p->threads);
        free(p);
        return NULL;
    }
    p->work = work;
    p->done = done;
    p->user = user;
    p->n_threads = n_threads;
    for (int i = 0; i < n_threads; i++) {
        if ((rc = uv_thread_create(&p->threads[i], s_pool_thread, p)) < 0) {
            log_error("zloop: starting pool thread %d: %s", i, uv_strerror(rc));
            p->closing = 1;
            s_pool_stop(p, i);
            s_mbox_close(&p->mb);
            return NULL;
        }
    }
    return p;
}

int zloop_pool_submit(zloop_pool_t *p, void *job) {
    if (!p) return -EINVAL;
    if (p->closing) return -EPIPE;
    s_node_t *node = malloc(sizeof *node);
    if (!node) return -ENOMEM;
    node->item = job;
    node->next = NULL;
    uv_mutex_lock(&p->qlock);
    if (p->qtail) p->qtail->next = node;
    else p->qhead = node;
    p->qtail = node;
    uv_cond_signal(&p->qcond);
    uv_mutex_unlock(&p->qlock);
    p->pending++;
    return 0;
}

size_t zloop_pool_pending(const zloop_pool_t *p) { return p ? p->pending : 0; }

void zloop_pool_free(zloop_pool_t **pp) {
    if (!pp || !*pp) return;
    zloop_pool_t *p = *pp;
    *pp = NULL;
    if (p->closing) return;
    p->closing = 1;
    s_pool_stop(p, p->n_threads);
    s_mbox_close(&p->mb); /* delivers the jobs that finished */
}
