/* common/net/zloop.h — ZeroMQ sockets, signals and worker threads inside one
 * libuv loop: the transport glue every kfac daemon runs on.
 *
 * Sockets (zloop_socket_*)
 *   ZMQ_FD is edge-triggered: it says "something changed", not "a message is
 *   waiting", and a reader that takes one message per wake-up stalls forever
 *   under load. So the uv_poll on ZMQ_FD only wakes the loop; a uv_check
 *   (which runs after every poll phase) drains the socket while ZMQ_EVENTS
 *   has ZMQ_POLLIN, at most `batch` messages per loop turn, and re-reads
 *   ZMQ_EVENTS at the end. While a backlog remains a uv_idle keeps the loop
 *   turning without blocking, so timers and other sockets still get their
 *   turn between batches. Every send also re-reads ZMQ_EVENTS (a send can
 *   consume the edge of a message that arrived meanwhile).
 *   Framing: a DEALER sends and receives exactly one frame (the payload); the
 *   PS's ROUTER sees [routing id][payload]. Anything else is counted as
 *   malformed and dropped.
 *   Sockets are not thread-safe: use them only on the loop's thread.
 *
 * Timers are plain uv_timer_t: the caller allocates the handle (in its state
 * struct), uv_timer_init() + uv_timer_start(); to stop for good
 * uv_close((uv_handle_t *)&t, cb) and release its memory only in cb. Use
 * uv_hrtime() (ns) as the monotonic clock, e.g. for Heartbeat.mono_ns.
 *
 * Signals (zloop_signals_*): SIGINT, SIGTERM and SIGHUP call one callback
 * on the loop thread; the daemon takes the same clean shutdown path for
 * SIGINT and SIGTERM (SIGHUP: its choice, e.g. reopen logs).
 *
 * Threads (zloop_mailbox_*, zloop_pool_*): heavy math runs on the daemon's
 * own threads (not libuv's 4-thread pool, which also serves file I/O and
 * DNS). Results come back through a mutex-protected FIFO and a uv_async;
 * uv_async callbacks coalesce, so each wake-up drains the whole queue.
 *
 * Closing: every *_free() stops the object at once and NULLs the caller's
 * pointer; the memory is released in libuv close callbacks, so let the loop
 * run (uv_run returns once everything is closed) and then uv_loop_close()
 * and zmq_ctx_term(). ZMQ_LINGER is small by default so zmq_ctx_term() does
 * not hang on unsent messages.
 *
 * Errors are negative errno values; constructors return NULL (and log why).
 */
#ifndef KFAC_ZLOOP_H
#define KFAC_ZLOOP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* ---- sockets ------------------------------------------------------------ */

#define ZLOOP_ID_MAX 255

/* A ROUTER peer's routing id, copied out of the identity frame: keep it to
 * answer later (long polls). */
typedef struct zloop_peer {
    size_t len;
    uint8_t id[ZLOOP_ID_MAX];
} zloop_peer_t;

typedef struct zloop_socket zloop_socket_t;

/* One received message. peer: the sender (ROUTER) or NULL (DEALER); data:
 * the payload, borrowed for the duration of the call. The callback may send,
 * and may close the socket (no further callbacks then). */
typedef void (*zloop_recv_fn)(zloop_socket_t *s, const zloop_peer_t *peer, const uint8_t *data, size_t len,
                              void *user);

typedef struct zloop_socket_opts {
    int64_t max_msg_bytes;   /* ZMQ_MAXMSGSIZE: larger inbound messages drop the connection; -1 = no limit */
    int linger_ms;           /* ZMQ_LINGER: how long unsent messages are kept at close (default 100) */
    int batch;               /* messages handled per loop turn (default 64) */
    int sndhwm, rcvhwm;      /* ZMQ high-water marks in messages; -1 = ZeroMQ's default (1000), 0 = none */
    int router_mandatory;    /* ROUTER: a send to an unknown peer fails with -EHOSTUNREACH (default 1) */
    const char *routing_id;  /* DEALER: fixed routing id (1..255 bytes), NULL = ZeroMQ picks */
} zloop_socket_opts_t;

/* Counters, for logs and tests. */
typedef struct zloop_stats {
    uint64_t n_recv;          /* messages delivered to the callback */
    uint64_t n_sent;          /* messages accepted by ZeroMQ */
    uint64_t n_send_errors;   /* sends that failed (EAGAIN, EHOSTUNREACH, ...) */
    uint64_t n_malformed;     /* received with the wrong number of frames */
    uint64_t n_full_batches;  /* loop turns that stopped at `batch` with messages left */
} zloop_stats_t;

/* max_msg_bytes -1, linger_ms 100, batch 64, sndhwm/rcvhwm -1,
 * router_mandatory 1, routing_id NULL. */
void zloop_socket_opts_default(zloop_socket_opts_t *o);

/* Create a ZMQ_ROUTER or ZMQ_DEALER socket on zctx (a zmq context the
 * caller owns and terminates after the loop ends) and start watching it on
 * loop. on_recv is called on the loop thread for each message with user.
 * opts may be NULL (defaults). Returns NULL on failure (bad type, zmq or uv
 * error), logged. */
zloop_socket_t *zloop_socket_new(uv_loop_t *loop, void *zctx, int type, const zloop_socket_opts_t *opts,
                                 zloop_recv_fn on_recv, void *user);

/* Bind to endpoint ("tcp://127.0.0.1:5555"; port 0 or '*' picks a free
 * one) and write the endpoint actually bound (ZMQ_LAST_ENDPOINT,
 * "tcp://127.0.0.1:41234") into actual (actual_len bytes; may be NULL).
 * Returns 0, -ENOSPC (actual too small; still bound) or -errno from zmq_bind
 * (-EADDRINUSE, -EINVAL for a malformed endpoint, ...). */
int zloop_socket_bind(zloop_socket_t *s, const char *endpoint, char *actual, size_t actual_len);

/* Connect to endpoint (ZeroMQ reconnects by itself). Returns 0 or -errno. */
int zloop_socket_connect(zloop_socket_t *s, const char *endpoint);

/* Send len bytes (copied). ROUTER: peer is required; DEALER: peer must be
 * NULL. Never blocks. Returns 0, -EAGAIN (high-water mark reached: retry
 * later), -EHOSTUNREACH (ROUTER: peer unknown or gone), -EINVAL, -EPIPE
 * (socket closing) or another -errno. */
int zloop_send(zloop_socket_t *s, const zloop_peer_t *peer, const void *data, size_t len);

/* As zloop_send, but takes over *buf (malloc'd, e.g. from msg_encode())
 * without copying it; *buf is set to NULL and freed by ZeroMQ once sent, or
 * at once on failure. */
int zloop_send_take(zloop_socket_t *s, const zloop_peer_t *peer, uint8_t **buf, size_t len);

/* ROUTER: send the same malloc'd buffer to n_peers peers without copying it
 * (reference counted); takes over *buf as zloop_send_take. status (may be
 * NULL) receives each peer's result. Returns 0 when every send succeeded,
 * else the first error. */
int zloop_send_many(zloop_socket_t *s, const zloop_peer_t *peers, size_t n_peers, uint8_t **buf, size_t len,
                    int *status);

/* ---- shared send buffers ---------------------------------------------------
 * One encoded message sent to many peers without a copy per peer, and
 * refilled for the next one without a new allocation (Params: tens of MB,
 * every step, to every worker). The owner holds one reference; every send
 * of it holds another until ZeroMQ has written it out. The count is atomic:
 * ZeroMQ releases a send on its I/O thread. The bytes may be rewritten only
 * while no send holds them (zloop_buf_busy() == 0). */
typedef struct zloop_buf zloop_buf_t;

/* A buffer of cap bytes (at least 1), owned by the caller (zloop_buf_free).
 * NULL when out of memory. */
zloop_buf_t *zloop_buf_new(size_t cap);

/* Its size in bytes (0 for NULL) and its bytes (borrowed; write them only
 * while it is not busy). */
size_t zloop_buf_cap(const zloop_buf_t *b);
uint8_t *zloop_buf_data(zloop_buf_t *b);

/* 1 while a send still holds b (its bytes must not change), else 0. */
int zloop_buf_busy(const zloop_buf_t *b);

/* Send the first len bytes (len <= cap) of b to peer without copying them:
 * the send holds a reference until ZeroMQ has written it out. Returns as
 * zloop_send (-EINVAL also for len > cap). b stays the caller's. */
int zloop_send_buf(zloop_socket_t *s, const zloop_peer_t *peer, zloop_buf_t *b, size_t len);

/* Drop the owner's reference: the memory goes now, or when the last send
 * holding it is written out. NULLs *bp; NULL is a no-op. */
void zloop_buf_free(zloop_buf_t **bp);

/* A per-peer send tracker (common/net/zloop_buf.c): counts the sends made
 * with it that ZeroMQ has not yet written out (or dropped), so a server
 * can keep at most one large reply per peer queued. Owned by the caller
 * (zloop_track_free); each pending send holds a reference of its own, so
 * the tracker may be freed while sends are queued. NULL when out of memory. */
typedef struct zloop_track zloop_track_t;
zloop_track_t *zloop_track_new(void);

/* Tracked sends not yet written out (0 for NULL). */
int zloop_track_pending(const zloop_track_t *t);

/* As zloop_send_buf, the send counted by t until written out (t NULL: as
 * zloop_send_buf). A send that fails is not counted. */
int zloop_send_buf_tracked(zloop_socket_t *s, const zloop_peer_t *peer, zloop_buf_t *b, size_t len,
                           zloop_track_t *t);

/* Drop the owner's reference. NULLs *tp; NULL is a no-op. */
void zloop_track_free(zloop_track_t **tp);

/* Counters so far. */
void zloop_socket_stats(const zloop_socket_t *s, zloop_stats_t *out);

/* Inside the socket's on_recv only: a property ZeroMQ attached to the
 * message being delivered ("User-Id": the ZAP user id of the sender's
 * connection, "Peer-Address"), or NULL (none, or outside on_recv). The
 * string is borrowed for the duration of the callback. */
const char *zloop_socket_property(zloop_socket_t *s, const char *name);

/* The raw ZeroMQ socket, for getting or setting options. Never receive on
 * it (that would steal messages from the loop); after sending on it directly
 * call zloop_socket_kick(). */
void *zloop_socket_zmq(zloop_socket_t *s);

/* Re-read ZMQ_EVENTS and schedule a drain if messages are waiting. Needed
 * only after using the raw socket directly. */
void zloop_socket_kick(zloop_socket_t *s);

/* Stop watching, close the ZeroMQ socket (unsent messages linger up to
 * linger_ms) and release the memory from the loop's close callbacks. NULLs
 * *sp; NULL is a no-op. Safe inside the socket's own callback. */
void zloop_socket_free(zloop_socket_t **sp);

/* ---- socket watchers --------------------------------------------------------
 *
 * The drain under every zloop_socket, for a ZeroMQ socket of any type and
 * framing: the uv_poll on ZMQ_FD wakes the loop, the uv_check drains at
 * most `batch` messages per loop turn through the owner's `one` function,
 * and a uv_idle keeps the loop turning while a backlog remains (the header
 * comment above says why). zloop_socket (one payload frame, ROUTER or
 * DEALER) is one user; the authenticator's ZAP handler (REP, 6 or 7
 * frames) and handshake monitors (PAIR, 2 frames) are the others
 * (common/net/auth.c), each reading its own frames in `one`.
 *
 * The watcher is embedded in its owner (the caller allocates it, zeroed;
 * libuv's habit), which fills zsock, owner, one, closed and batch before
 * zloop_watch_start. Loop thread only. */

/* Read and handle one whole message (all its frames) of the owner's
 * socket. Returns 1 when one was handled, 0 when none was waiting, a
 * negative errno on a receive error (the drain stops for this turn). It may
 * close the watcher (zloop_watch_close): no further calls then. */
typedef int (*zloop_watch_one_fn)(void *owner);

typedef struct zloop_watch {
    void *zsock;                /* owned once started: zloop_watch_close closes it */
    void *owner;                /* handed to one and closed */
    zloop_watch_one_fn one;
    void (*closed)(void *owner); /* runs once every handle is closed (at once when none was opened): free the owner here */
    int batch;                  /* messages per loop turn (<= 0: 64) */
    uint64_t n_full_batches;    /* loop turns that stopped at batch with messages left */
    /* private */
    uv_poll_t poll;
    uv_check_t check;
    uv_idle_t idle;
    int n_open;                 /* handles initialized and not yet closed */
    int closing;
    int events_failed;          /* ZMQ_EVENTS errors already logged */
} zloop_watch_t;

/* Watch w->zsock on loop. Returns 0 or a negative errno (libuv's or
 * ZeroMQ's); after a failure call zloop_watch_close all the same. */
int zloop_watch_start(zloop_watch_t *w, uv_loop_t *loop);

/* Re-read ZMQ_EVENTS and schedule a drain if messages are waiting (after a
 * send, which can consume the edge of an arrival). */
void zloop_watch_kick(zloop_watch_t *w);

/* Whether zloop_watch_close was called. */
int zloop_watch_closing(const zloop_watch_t *w);

/* Close the handles through the loop (the poll first, which removes ZMQ_FD
 * from epoll before the socket that owns it goes), then the ZeroMQ socket
 * at once (its ZMQ_LINGER applies); closed(owner) runs when the last handle
 * is closed. Idempotent; safe inside one. */
void zloop_watch_close(zloop_watch_t *w);

/* ---- signals ------------------------------------------------------------ */

typedef struct zloop_signals zloop_signals_t;
typedef void (*zloop_signal_fn)(int signum, void *user);

/* Watch SIGINT, SIGTERM and SIGHUP; fn runs on the loop thread. The
 * watchers do not keep the loop alive by themselves (uv_unref), but must
 * still be closed before uv_loop_close(). Returns NULL on failure. */
zloop_signals_t *zloop_signals_new(uv_loop_t *loop, zloop_signal_fn fn, void *user);

/* Stop watching (default signal actions return); NULLs *p; NULL is a no-op.
 * Safe inside the callback. */
void zloop_signals_free(zloop_signals_t **p);

/* ---- mailbox: results from other threads -------------------------------- */

typedef struct zloop_mailbox zloop_mailbox_t;

/* Called on the loop thread once per posted item, in posting order. */
typedef void (*zloop_mail_fn)(void *item, void *user);

/* A FIFO any thread can post to; fn receives the items on the loop thread.
 * Returns NULL on failure. */
zloop_mailbox_t *zloop_mailbox_new(uv_loop_t *loop, zloop_mail_fn fn, void *user);

/* Post an item (ownership passes to fn). Any thread. Returns 0, -ENOMEM or
 * -EPIPE (closing). */
int zloop_mailbox_post(zloop_mailbox_t *mb, void *item);

/* Deliver what is still queued, then close. Loop thread only; every thread
 * that posts must have stopped posting. NULLs *p; NULL is a no-op. Safe
 * inside fn (the remaining items are still delivered). */
void zloop_mailbox_free(zloop_mailbox_t **p);

/* ---- pool: heavy math on the daemon's own threads ------------------------ */

typedef struct zloop_pool zloop_pool_t;

/* Runs on a pool thread. */
typedef void (*zloop_work_fn)(void *job, void *user);
/* Runs on the loop thread for every submitted job exactly once: status 0
 * after work ran, -ECANCELED when the pool closed before it started. */
typedef void (*zloop_done_fn)(void *job, int status, void *user);

/* Start n_threads (1..256) threads that run work(job) for submitted jobs in
 * submission order and hand each job to done() on the loop thread. Returns
 * NULL on failure. */
zloop_pool_t *zloop_pool_new(uv_loop_t *loop, int n_threads, zloop_work_fn work, zloop_done_fn done,
                             void *user);

/* Queue a job (owned by the caller; it comes back through done). Loop
 * thread. Returns 0, -ENOMEM or -EPIPE (closing). */
int zloop_pool_submit(zloop_pool_t *p, void *job);

/* Jobs submitted whose done() has not run yet. */
size_t zloop_pool_pending(const zloop_pool_t *p);

/* Close: jobs not started are handed to done(-ECANCELED) right away, jobs
 * running are waited for (this blocks the loop thread for as long as they
 * take) and handed to done(0), then the threads are joined and the memory
 * released from a close callback. Loop thread; safe inside done. NULLs *p;
 * NULL is a no-op. */
void zloop_pool_free(zloop_pool_t **p);

#endif
