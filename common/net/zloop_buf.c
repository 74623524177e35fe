/* common/net/zloop_buf.c — shared, reference-counted send buffers and
 * per-peer send trackers (see common/net/zloop.h). The counts are atomic:
 * ZeroMQ releases a send on one of its I/O threads. */
#include "common/net/zloop.h"
#include "common/net/zloop_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

struct zloop_buf {
    atomic_int refs; /* the owner's and one per send not yet written out */
    size_t cap;
    uint8_t data[];  /* (cap) */
};

zloop_buf_t *zloop_buf_new(size_t cap) {
    if (cap == 0) cap = 1;
    if (cap > SIZE_MAX - sizeof(zloop_buf_t)) return NULL;
    zloop_buf_t *b = malloc(sizeof *b + cap);
    if (!b) return NULL;
    atomic_init(&b->refs, 1);
    b->cap = cap;
    return b;
}

size_t zloop_buf_cap(const zloop_buf_t *b) { return b ? b->cap : 0; }

uint8_t *zloop_buf_data(zloop_buf_t *b) { return b ? b->data : NULL; }

int zloop_buf_busy(const zloop_buf_t *b) { return b && atomic_load(&((zloop_buf_t *)b)->refs) > 1; }

static void s_buf_unref(zloop_buf_t *b) {
    if (atomic_fetch_sub(&b->refs, 1) == 1) free(b);
}

/* ZeroMQ's free function: a send of the buffer is written out (or
 * dropped). May run on a ZeroMQ I/O thread. */
static void s_buf_release(void *data, void *hint) {
    (void)data;
    s_buf_unref(hint);
}

int zloop_send_buf(zloop_socket_t *s, const zloop_peer_t *peer, zloop_buf_t *b, size_t len) {
    if (!s || !b || len > b->cap) return -EINVAL;
    zmq_msg_t m;
    atomic_fetch_add(&b->refs, 1);
    if (zmq_msg_init_data(&m, b->data, len, s_buf_release, b) != 0) {
        s_buf_unref(b);
        return -ENOMEM;
    }
    return zloop_send_zmsg(s, peer, &m);
}

void zloop_buf_free(zloop_buf_t **bp) {
    if (!bp || !*bp) return;
    zloop_buf_t *b = *bp;
    *bp = NULL;
    s_buf_unref(b);
}


/* ---- per-peer send trackers ------------------------------------------------ */

struct zloop_track {
    atomic_int refs;    /* the owner's and one per tracked send not yet written out */
    atomic_int pending; /* tracked sends not yet written out (or dropped) */
};

zloop_track_t *zloop_track_new(void) {
    zloop_track_t *t = malloc(sizeof *t);
    if (!t) return NULL;
    atomic_init(&t->refs, 1);
    atomic_init(&t->pending, 0);
    return t;
}

int zloop_track_pending(const zloop_track_t *t) {
    return t ? atomic_load(&((zloop_track_t *)t)->pending) : 0;
}

static void s_track_unref(zloop_track_t *t) {
    if (atomic_fetch_sub(&t->refs, 1) == 1) free(t);
}

void zloop_track_free(zloop_track_t **tp) {
    if (!tp || !*tp) return;
    zloop_track_t *t = *tp;
    *tp = NULL;
    s_track_unref(t);
}

/* What a tracked send holds: the buffer and the tracker. */
typedef struct s_tracked {
    zloop_buf_t *b;
    zloop_track_t *t;
} s_tracked_t;

static void s_tracked_release(void *data, void *hint) {
    (void)data;
    s_tracked_t *x = hint;
    atomic_fetch_sub(&x->t->pending, 1);
    s_track_unref(x->t);
    s_buf_unref(x->b);
    free(x);
}

int zloop_send_buf_tracked(zloop_socket_t *s, const zloop_peer_t *peer, zloop_buf_t *b, size_t len,
                           zloop_track_t *t) {
    if (!t) return zloop_send_buf(s, peer, b, len);
    if (!s || !b || len > b->cap) return -EINVAL;
    s_tracked_t *x = malloc(sizeof *x);
    if (!x) return -ENOMEM;
    x->b = b;
    x->t = t;
    atomic_fetch_add(&b->refs, 1);
    atomic_fetch_add(&t->refs, 1);
    atomic_fetch_add(&t->pending, 1);
    zmq_msg_t m;
    if (zmq_msg_init_data(&m, b->data, len, s_tracked_release, x) != 0) {
        s_tracked_release(NULL, x);
        return -ENOMEM;
    }
    return zloop_send_zmsg(s, peer, &m);
}
