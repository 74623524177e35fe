/* common/net/auth.c — see auth.h. The ZAP handler and the handshake
 * monitors are raw ZeroMQ sockets with multi-frame messages (which
 * zloop_socket, one payload frame, does not carry), watched by the drain
 * under every zloop_socket (zloop_watch_t, common/net/zloop.h): a uv_poll
 * on ZMQ_FD only wakes the loop (the fd is edge-triggered), a uv_check
 * drains at most AUTH_ZAP_BATCH messages per turn, and a uv_idle keeps the
 * loop turning while a backlog remains; this file reads the frames. Loop
 * thread only. */
#include "common/net/auth.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/ratelimit.h"
#include "common/net/auth_watch.h"
#include "common/net/zloop.h"

/* ---- a raw ZeroMQ socket on the loop ---------------------------------------------- */

/* The ZAP handler and the monitors are zloop watchers (common/net/zloop.h)
 * whose one function reads their own frames: handle one message (all its
 * frames) if one is waiting; 1 when one was handled, 0 when none was
 * waiting. The owner fills zsock, owner, one and closed. */
typedef zloop_watch_t s_watch_t;

static int s_watch_start(s_watch_t *w, uv_loop_t *loop) {
    w->batch = AUTH_ZAP_BATCH;
    return zloop_watch_start(w, loop);
}

/* Close the socket at once, without lingering (nothing it sends matters
 * once kfac-ps or the client stops), and the handles through the loop;
 * closed(owner) runs when the last one is closed (at once when none was
 * opened). */
static void s_watch_close(s_watch_t *w) {
    if (zloop_watch_closing(w)) return;
    if (w->zsock) {
        int zero = 0;
        zmq_setsockopt(w->zsock, ZMQ_LINGER, &zero, sizeof zero);
    }
    zloop_watch_close(w);
}

/* Receive the frames of one message into f[] (at most max; extra frames
 * are read and dropped). Returns the number of frames (0: none waiting),
 * or -1 when there were more than max. */
static int s_recv_frames(void *zsock, zmq_msg_t *f, int max) {
    int n = 0, over = 0;
    for (;;) {
        zmq_msg_t tmp, *m = n < max ? &f[n] : &tmp;
        zmq_msg_init(m);
        int rc;
        do rc = zmq_msg_recv(m, zsock, ZMQ_DONTWAIT);
        while (rc < 0 && errno == EINTR);
        if (rc < 0) {
            zmq_msg_close(m);
            return n; /* EAGAIN on the first frame: nothing waiting */
        }
        int more = zmq_msg_more(m);
        if (m == &tmp) {
            zmq_msg_close(&tmp);
            over = 1;
        } else {
            n++;
        }
        if (!more) break;
    }
    return over ? -1 : n;
}

static int s_frame_is(zmq_msg_t *m, const char *s) {
    size_t n = strlen(s);
    return zmq_msg_size(m) == n && memcmp(zmq_msg_data(m), s, n) == 0;
}

static void s_frame_str(zmq_msg_t *m, char *out, size_t out_len) {
    size_t n = zmq_msg_size(m);
    if (n >= out_len) n = out_len - 1;
    memcpy(out, zmq_msg_data(m), n);
    out[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 32 || (unsigned char)out[i] > 126) out[i] = '?';
}

/* Read one socket-monitor message (frame 0: the 16-bit event and the
 * 32-bit value, little-endian; frame 1: the endpoint) into *event and
 * *value (event 0 when the message is not of that form). Returns 1 when a
 * message was read, 0 when none was waiting. */
static int s_mon_read(void *zsock, uint16_t *event, uint32_t *value) {
    zmq_msg_t f[2];
    int n = s_recv_frames(zsock, f, 2);
    if (n == 0) return 0;
    *event = 0;
    *value = 0;
    if (n >= 1 && zmq_msg_size(&f[0]) == 6) {
        const uint8_t *d = zmq_msg_data(&f[0]);
        *event = (uint16_t)(d[0] | d[1] << 8);
        *value = (uint32_t)d[2] | (uint32_t)d[3] << 8 | (uint32_t)d[4] << 16 | (uint32_t)d[5] << 24;
    }
    for (int i = 0; i < (n < 0 ? 2 : n); i++) zmq_msg_close(&f[i]);
    return 1;
}

/* ---- kfac-ps ---------------------------------------------------------------------- */

#define S_ZAP_FRAMES 8

struct auth_server {
    int enabled;
    auth_key_t secret, public_key;
    auth_allow_t *allow;
    s_watch_t zap;                 /* the ZAP handler (REP) */
    s_watch_t mon;                 /* handshake events of the ROUTER (PAIR) */
    int n_watches;                 /* watches not yet released; the memory goes at 0 */
    uv_loop_t *loop;               /* borrowed */
    void *zctx;                    /* borrowed */
    const runcfg_t *cfg;           /* borrowed: the allowlist paths the watch reloads */
    auth_watch_t *watch;           /* the allowlist folders (NULL without CURVE) */
    auth_server_stats_t st;
    ratelimit_t rl_key, rl_role, rl_handshake, rl_revoked;
    auth_reload_fn on_reload;      /* after every successful reload (NULL: none) */
    void *reload_user;
};

static void s_server_watch(auth_server_t *a);

/* The allowlist settings in role order. */
static const char *s_allow_path(const runcfg_t *c, int i, msg_role_t *role, const char **what) {
    static const msg_role_t roles[3] = {MSG_ROLE_WORKER, MSG_ROLE_STATSD, MSG_ROLE_INVERTD};
    static const char *const whats[3] = {"[security] allow_workers", "[security] allow_statsd",
                                         "[security] allow_invertd"};
    const char *paths[3] = {c->allow_workers, c->allow_statsd, c->allow_invertd};
    *role = roles[i];
    *what = whats[i];
    return paths[i] && paths[i][0] ? paths[i] : NULL;
}

static int s_set(const char *s) { return s && s[0]; }

/* Load keys and allowlists into a (enabled set when CURVE is configured). */
static int s_server_load(auth_server_t *a, const runcfg_t *c, char *err, size_t err_len) {
    char why[1024];
    int any_allow = 0;
    for (int i = 0; i < 3; i++) {
        msg_role_t r;
        const char *w;
        any_allow |= s_allow_path(c, i, &r, &w) != NULL;
    }
    if (!s_set(c->server_secret_key)) {
        if (s_set(c->server_public_key) || any_allow) {
            snprintf(err, err_len,
                     "[security] %s is set but server_secret_key is not: kfac-ps needs its secret key to use CURVE "
                     "(make one with: kfac-keygen --out keys/ps)",
                     s_set(c->server_public_key) ? "server_public_key" : "an allow_* list");
            return -EINVAL;
        }
        if (!auth_endpoint_is_loopback(c->bind) && !c->insecure) {
            snprintf(err, err_len,
                     "[ps] bind = %s is reachable from other hosts and kfac-ps has no CURVE keys: anyone who reaches "
                     "the port could steer training. Fix: set [security] server_secret_key and allow_workers, "
                     "allow_statsd, allow_invertd (docs/security.md; keys from kfac-keygen), or bind a loopback "
                     "address (tcp://127.0.0.1:PORT, ipc://PATH), or set [security] insecure = true on a trusted "
                     "network",
                     c->bind);
            return -EPERM;
        }
        return 0;
    }
    int rc = auth_key_read(c->server_secret_key, 1, &a->secret, why, sizeof why);
    if (rc < 0) {
        snprintf(err, err_len, "[security] server_secret_key: %s", why);
        return rc;
    }
    if (auth_key_public_of(&a->secret, &a->public_key) < 0) {
        snprintf(err, err_len, "[security] server_secret_key: %s: not a usable Curve25519 key", c->server_secret_key);
        return -EINVAL;
    }
    if (s_set(c->server_public_key)) {
        auth_key_t pub;
        if ((rc = auth_key_read(c->server_public_key, 0, &pub, why, sizeof why)) < 0) {
            snprintf(err, err_len, "[security] server_public_key: %s", why);
            return rc;
        }
        if (memcmp(pub.raw, a->public_key.raw, AUTH_KEY_BYTES) != 0) {
            snprintf(err, err_len,
                     "[security] server_public_key %s is not the public key of server_secret_key %s (its public key "
                     "is %s); use the pair kfac-keygen wrote together",
                     c->server_public_key, c->server_secret_key, a->public_key.z85);
            return -EINVAL;
        }
    }
    if (!any_allow) {
        snprintf(err, err_len,
                 "[security] server_secret_key is set but no allowlist is: every client would be refused. Set "
                 "allow_workers (and allow_statsd, allow_invertd) to files or folders of client public keys");
        return -EINVAL;
    }
    if (!(a->allow = auth_allow_new())) {
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    for (int i = 0; i < 3; i++) {
        msg_role_t r;
        const char *w;
        const char *path = s_allow_path(c, i, &r, &w);
        if (!path) continue;
        if ((rc = auth_allow_add_path(a->allow, path, r, w, err, err_len)) < 0) return rc;
    }
    a->enabled = 1;
    return 0;
}

int auth_server_check(const runcfg_t *cfg, char *err, size_t err_len) {
    auth_server_t a;
    memset(&a, 0, sizeof a);
    int rc = s_server_load(&a, cfg, err, err_len);
    auth_allow_free(&a.allow);
    return rc;
}

/* Send one ZAP reply (RFC 27): version, request id, status, text, user id,
 * metadata (empty). */
static void s_zap_reply(void *zsock, zmq_msg_t *request_id, const char *status, const char *text,
                        const char *user_id) {
    zmq_send(zsock, "1.0", 3, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_msg_t id;
    zmq_msg_init(&id);
    zmq_msg_copy(&id, request_id);
    if (zmq_msg_send(&id, zsock, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) zmq_msg_close(&id);
    zmq_send(zsock, status, strlen(status), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(zsock, text, strlen(text), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(zsock, user_id, strlen(user_id), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(zsock, "", 0, ZMQ_DONTWAIT);
}

static int s_zap_one(void *owner) {
    auth_server_t *a = owner;
    zmq_msg_t f[S_ZAP_FRAMES];
    int n = s_recv_frames(a->zap.zsock, f, S_ZAP_FRAMES);
    if (n == 0) return 0;
    uint64_t skipped = 0;
    /* version, request id, domain, address, routing id, mechanism, key */
    if (n < 0 || n < 6 || !s_frame_is(&f[0], "1.0")) {
        a->st.n_bad_requests++;
        if (n >= 2) s_zap_reply(a->zap.zsock, &f[1], "500", "malformed ZAP request", "");
        else {
            /* A REP socket must answer before it reads again. */
            zmq_msg_t empty;
            zmq_msg_init(&empty);
            s_zap_reply(a->zap.zsock, &empty, "500", "malformed ZAP request", "");
            zmq_msg_close(&empty);
        }
        log_warn("malformed ZAP request (%d frames) answered with 500 (%" PRIu64 " so far)", n, a->st.n_bad_requests);
        goto done;
    }
    char address[64];
    s_frame_str(&f[3], address, sizeof address);
    if (!s_frame_is(&f[5], "CURVE") || n != 7 || zmq_msg_size(&f[6]) != AUTH_KEY_BYTES) {
        a->st.n_refused_key++;
        s_zap_reply(a->zap.zsock, &f[1], "400", "kfac-ps accepts CURVE clients only", "");
        if (ratelimit_ok(&a->rl_key, clock_now_ns(), AUTH_LOG_EVERY_MS, &skipped))
            log_warn("refused a connection from %s: not a CURVE handshake (%" PRIu64 " refused so far, %" PRIu64
                     " lines not logged)",
                     address, a->st.n_refused_key, skipped);
        goto done;
    }
    const uint8_t *key = zmq_msg_data(&f[6]);
    char z85[AUTH_KEY_Z85_LEN + 1];
    zmq_z85_encode(z85, key, AUTH_KEY_BYTES);
    msg_role_t role = auth_allow_find(a->allow, key);
    if (role == MSG_ROLE_NONE) {
        a->st.n_refused_key++;
        s_zap_reply(a->zap.zsock, &f[1], "400", "key not listed", "");
        if (ratelimit_ok(&a->rl_key, clock_now_ns(), AUTH_LOG_EVERY_MS, &skipped))
            log_warn("refused a connection from %s: its CURVE key %s is in no allowlist ([security] allow_workers, "
                     "allow_statsd, allow_invertd) (%" PRIu64 " refused so far, %" PRIu64 " lines not logged)",
                     address, z85, a->st.n_refused_key, skipped);
        goto done;
    }
    a->st.n_accepted++;
    char user[AUTH_KEY_Z85_LEN + 32];
    snprintf(user, sizeof user, "%s %s", msg_role_name(role), z85);
    s_zap_reply(a->zap.zsock, &f[1], "200", "OK", user);
    log_debug("accepted a %s key from %s: %s", msg_role_name(role), address, z85);
done:
    for (int i = 0; i < (n < 0 ? S_ZAP_FRAMES : n); i++) zmq_msg_close(&f[i]);
    return 1;
}

static void s_server_release(void *owner) {
    auth_server_t *a = owner;
    if (--a->n_watches > 0) return;
    auth_allow_free(&a->allow);
    free(a);
}

/* A handshake that failed before the ZAP handler saw it (a client without
 * keys, or one that trusts another kfac-ps key): the ROUTER's monitor. */
static int s_ps_mon_one(void *owner) {
    auth_server_t *a = owner;
    uint16_t event = 0;
    uint32_t value = 0;
    if (!s_mon_read(a->mon.zsock, &event, &value)) return 0;
    uint64_t skipped = 0;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
        a->st.n_failed_handshakes++;
        if (ratelimit_ok(&a->rl_handshake, clock_now_ns(), AUTH_LOG_EVERY_MS, &skipped))
            log_warn("refused a connection that failed the CURVE handshake (event 0x%x, value 0x%" PRIx32
                     "): a client without keys, or one trusting another kfac-ps key (%" PRIu64
                     " so far, %" PRIu64 " lines not logged)",
                     event, value, a->st.n_failed_handshakes, skipped);
    }
    return 1;
}

auth_server_t *auth_server_new(uv_loop_t *loop, void *zctx, const runcfg_t *cfg, char *err, size_t err_len) {
    auth_server_t *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    a->zap.owner = a;
    a->zap.one = s_zap_one;
    a->zap.closed = s_server_release;
    a->mon.owner = a;
    a->mon.one = s_ps_mon_one;
    a->mon.closed = s_server_release;
    a->n_watches = 2;
    if (s_server_load(a, cfg, err, err_len) < 0) goto fail;
    if (!a->enabled) {
        if (!auth_endpoint_is_loopback(cfg->bind))
            log_warn("[security] insecure = true: %s is open to anyone who reaches it, without authentication or "
                     "encryption: any client may join in any role and claim any member id (a member's penalties "
                     "stay with its id, but nothing stops a new id; docs/security.md, \"Without CURVE\")",
                     cfg->bind);
        return a;
    }
    a->loop = loop;
    a->zctx = zctx;
    a->cfg = cfg;
    if (!(a->zap.zsock = zmq_socket(zctx, ZMQ_REP))) {
        snprintf(err, err_len, "cannot create the ZAP socket: %s", zmq_strerror(errno));
        goto fail;
    }
    if (zmq_bind(a->zap.zsock, AUTH_ZAP_ENDPOINT) != 0) {
        snprintf(err, err_len, "cannot bind the ZAP handler at %s: %s", AUTH_ZAP_ENDPOINT, zmq_strerror(errno));
        goto fail;
    }
    int rc = s_watch_start(&a->zap, loop);
    if (rc < 0) {
        snprintf(err, err_len, "cannot watch the ZAP socket: %s", rc < 0 && rc > -4096 ? strerror(-rc) : "error");
        goto fail;
    }
    log_info("CURVE on: kfac-ps public key %s; %zu worker, %zu statsd and %zu invertd keys listed",
             a->public_key.z85, auth_allow_count(a->allow, MSG_ROLE_WORKER),
             auth_allow_count(a->allow, MSG_ROLE_STATSD), auth_allow_count(a->allow, MSG_ROLE_INVERTD));
    if (auth_allow_count(a->allow, MSG_ROLE_WORKER) == 0)
        log_warn("[security] allow_workers lists no key yet: no gradient worker can join until one is added");
    s_server_watch(a);
    return a;
fail:
    auth_server_free(&a);
    return NULL;
}

int auth_server_secure(auth_server_t *a, void *zsock, char *err, size_t err_len) {
    if (!a || !a->enabled) return 0;
    int one = 1;
    if (!a->mon.zsock && !zloop_watch_closing(&a->mon)) {
        char ep[80];
        snprintf(ep, sizeof ep, "inproc://kfac-auth-ps-monitor-%p", (void *)a);
        if (zmq_socket_monitor(zsock, ep, ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) !=
                0 ||
            !(a->mon.zsock = zmq_socket(a->zctx, ZMQ_PAIR)) || zmq_connect(a->mon.zsock, ep) != 0 ||
            s_watch_start(&a->mon, a->loop) < 0)
            /* Not fatal: only the log lines of such handshakes are lost. */
            log_warn("cannot watch the ROUTER's handshakes (failed CURVE handshakes will not be logged): %s",
                     zmq_strerror(errno));
    }
    if (zmq_setsockopt(zsock, ZMQ_ZAP_DOMAIN, "kfac", 4) != 0 ||
        zmq_setsockopt(zsock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(zsock, ZMQ_CURVE_SECRETKEY, a->secret.raw, AUTH_KEY_BYTES) != 0) {
        int e = errno;
        snprintf(err, err_len, "cannot make the ROUTER a CURVE server: %s (is libzmq built with CURVE? zmq_has(\"curve\") = %d)",
                 zmq_strerror(e), zmq_has("curve"));
        return -e;
    }
    return 0;
}

int auth_server_enabled(const auth_server_t *a) { return a && a->enabled; }

int auth_server_check_role(auth_server_t *a, const char *user_id, msg_role_t role, msg_type_t type, char *why,
                           size_t why_len) {
    if (!a || !a->enabled) return 0;
    const char *listed = "none";
    char z85[AUTH_KEY_Z85_LEN + 1] = "?";
    char rname[16] = "";
    if (user_id) {
        const char *sp = strchr(user_id, ' ');
        size_t n = sp ? (size_t)(sp - user_id) : strlen(user_id);
        if (n < sizeof rname) {
            memcpy(rname, user_id, n);
            rname[n] = '\0';
            listed = rname;
        }
        if (sp) snprintf(z85, sizeof z85, "%s", sp + 1);
    }
    if (user_id && strcmp(listed, msg_role_name(role)) == 0) {
        if (auth_server_key_role(a, z85) == role) return 0;
        /* accepted at its handshake, removed from the allowlist since */
        a->st.n_refused_revoked++;
        snprintf(why, why_len,
                 "this CURVE key is no longer listed for the %s role: it was removed from the allowlist after this "
                 "connection was made, and kfac-ps no longer admits it",
                 listed);
        uint64_t skipped = 0;
        if (ratelimit_ok(&a->rl_revoked, clock_now_ns(), AUTH_LOG_EVERY_MS, &skipped))
            log_warn("refused a %s from key %s: it was removed from the allowlist (%" PRIu64
                     " refused so far, %" PRIu64 " lines not logged)",
                     msg_type_name(type), z85, a->st.n_refused_revoked, skipped);
        return -EACCES;
    }
    a->st.n_refused_role++;
    const char *setting = strcmp(listed, "worker") == 0    ? "allow_workers"
                          : strcmp(listed, "statsd") == 0  ? "allow_statsd"
                          : strcmp(listed, "invertd") == 0 ? "allow_invertd"
                                                           : "no allowlist";
    snprintf(why, why_len,
             "this CURVE key is listed for the %s role ([security] %s), so it may not speak as %s; give each daemon "
             "its own key, listed for its role",
             listed, setting, msg_role_name(role));
    uint64_t skipped = 0;
    if (ratelimit_ok(&a->rl_role, clock_now_ns(), AUTH_LOG_EVERY_MS, &skipped))
        log_warn("refused a %s claiming the %s role from key %s, which is listed for %s (%" PRIu64
                 " role refusals so far, %" PRIu64 " lines not logged)",
                 msg_type_name(type), msg_role_name(role), z85, listed, a->st.n_refused_role, skipped);
    return -EACCES;
}

/* Read the allowlists of cfg again; why says what asked ("SIGHUP", "a
 * change in FOLDER"). One log line: the counts and, per list that changed,
 * the keys added and removed. When nothing changed and quiet_if_same, the
 * line is at debug level (an unrelated file in a watched folder). */
static int s_server_reload(auth_server_t *a, const runcfg_t *cfg, const char *why, int quiet_if_same) {
    char err[1200] = "";
    auth_allow_t *fresh = auth_allow_new();
    int rc = fresh ? 0 : -ENOMEM;
    for (int i = 0; rc == 0 && i < 3; i++) {
        msg_role_t r;
        const char *w;
        const char *path = s_allow_path(cfg, i, &r, &w);
        if (path && (rc = auth_allow_add_path(fresh, path, r, w, err, sizeof err)) > 0) rc = 0;
    }
    if (rc < 0) {
        auth_allow_free(&fresh);
        log_error("allowlists not reloaded after %s (the old ones stay in force): %s", why,
                  err[0] ? err : strerror(-rc));
        return rc;
    }
    char changes[1600] = "";
    size_t len = 0;
    for (int i = 0; i < 3; i++) {
        msg_role_t r;
        const char *w;
        const char *path = s_allow_path(cfg, i, &r, &w);
        size_t added = 0, removed = 0;
        auth_allow_diff(a->allow, fresh, r, &added, &removed);
        if ((added || removed) && len < sizeof changes)
            len += (size_t)snprintf(changes + len, sizeof changes - len, "; %s = %s: %zu added, %zu removed", w,
                                    path ? path : "(none)", added, removed);
    }
    auth_allow_free(&a->allow);
    a->allow = fresh;
    if (!changes[0] && quiet_if_same) {
        log_debug("allowlists read again after %s: no key added or removed", why);
        return 0;
    }
    log_info("allowlists reloaded (%s): %zu worker, %zu statsd and %zu invertd keys%s; new connections are checked "
             "against them, and clients of removed keys are let go",
             why, auth_allow_count(a->allow, MSG_ROLE_WORKER), auth_allow_count(a->allow, MSG_ROLE_STATSD),
             auth_allow_count(a->allow, MSG_ROLE_INVERTD), changes[0] ? changes : "; no key added or removed");
    if (a->on_reload) a->on_reload(a->reload_user);
    return 0;
}

msg_role_t auth_server_key_role(const auth_server_t *a, const char *z85) {
    if (!a || !a->enabled || !z85) return MSG_ROLE_NONE;
    auth_key_t k;
    char why[160];
    if (auth_key_from_text(z85, &k, why, sizeof why) < 0) return MSG_ROLE_NONE;
    return auth_allow_find(a->allow, k.raw);
}

void auth_server_on_reload(auth_server_t *a, auth_reload_fn fn, void *user) {
    if (!a) return;
    a->on_reload = fn;
    a->reload_user = user;
}

int auth_server_reload(auth_server_t *a, const runcfg_t *cfg) {
    if (!a || !a->enabled) return 0;
    auth_watch_rearm(a->watch); /* a folder that was missing may be back */
    return s_server_reload(a, cfg, "SIGHUP", 0);
}

static void s_on_allow_changed(const char *what, void *user) {
    auth_server_t *a = user;
    char why[4200];
    snprintf(why, sizeof why, "a change in %s", what);
    (void)s_server_reload(a, a->cfg, why, 1);
}

/* Watch the allowlist folders: keys added or removed there take effect
 * without SIGHUP (common/net/auth_watch.h). */
static void s_server_watch(auth_server_t *a) {
    const char *paths[3];
    for (int i = 0; i < 3; i++) {
        msg_role_t r;
        const char *w;
        paths[i] = s_allow_path(a->cfg, i, &r, &w);
    }
    a->watch = auth_watch_new(a->loop, paths, 3, AUTH_WATCH_DEBOUNCE_MS, s_on_allow_changed, a);
    if (a->watch && auth_watch_count(a->watch) > 0)
        log_info("watching %d allowlist folder%s: keys added or removed there take effect %d ms after the last "
                 "change, no SIGHUP needed",
                 auth_watch_count(a->watch), auth_watch_count(a->watch) == 1 ? "" : "s", AUTH_WATCH_DEBOUNCE_MS);
}

void auth_server_stats(const auth_server_t *a, auth_server_stats_t *out) {
    if (a) *out = a->st;
    else memset(out, 0, sizeof *out);
}

void auth_server_log_summary(const auth_server_t *a) {
    if (!a || !a->enabled) return;
    log_info("CURVE: %" PRIu64 " handshakes accepted, %" PRIu64 " refused (unlisted key), %" PRIu64
             " messages refused (key used for another role), %" PRIu64 " failed handshakes (no keys, another PS key), %"
             PRIu64 " messages refused (key removed from the allowlist)",
             a->st.n_accepted, a->st.n_refused_key, a->st.n_refused_role, a->st.n_failed_handshakes,
             a->st.n_refused_revoked);
}

void auth_server_free(auth_server_t **ap) {
    if (!ap || !*ap) return;
    auth_server_t *a = *ap;
    *ap = NULL;
    auth_watch_free(&a->watch);
    s_watch_close(&a->mon);
    s_watch_close(&a->zap);
}

/* ---- clients ---------------------------------------------------------------------- */

struct auth_client {
    s_watch_t mon;
    auth_refused_fn on_refused;
    void *on_refused_user;
    char endpoint[300];
    char public_z85[AUTH_KEY_Z85_LEN + 1];
    uint64_t n_refused;
    ratelimit_t rl;
};

static int s_mon_one(void *owner) {
    auth_client_t *c = owner;
    uint16_t event = 0;
    uint32_t value = 0;
    if (!s_mon_read(c->mon.zsock, &event, &value)) return 0;
    uint64_t skipped = 0;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
        c->n_refused++;
        /* With a callback, the client says what it does about it (common/net/client.c). */
        if (!c->on_refused && ratelimit_ok(&c->rl, clock_now_ns(), 10000, &skipped))
            log_error("kfac-ps at %s refused this daemon's CURVE key (ZAP status %" PRIu32
                      "): add its public key ([security] client_public_key) to the PS's allow_* list for this "
                      "role (%" PRIu64 " refusals so far)",
                      c->endpoint, value, c->n_refused);
        if (c->on_refused) c->on_refused(c->on_refused_user); /* may free c's socket: nothing after */
    } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL || event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
        if (ratelimit_ok(&c->rl, clock_now_ns(), 10000, &skipped))
            log_error("the CURVE handshake with kfac-ps at %s failed (event 0x%x, value 0x%" PRIx32
                      "): is [security] server_public_key the PS's public key, and does the PS use CURVE?",
                      c->endpoint, event, value);
    } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        log_debug("CURVE handshake with kfac-ps at %s done", c->endpoint);
    }
    return 1;
}

static void s_client_release(void *owner) { free(owner); }

int auth_client_secure(uv_loop_t *loop, void *zctx, void *zsock, const runcfg_t *cfg, const char *endpoint,
                       auth_client_t **out, char *err, size_t err_len) {
    *out = NULL;
    int have_secret = s_set(cfg->client_secret_key), have_server = s_set(cfg->server_public_key);
    if (!have_secret && !have_server && !s_set(cfg->client_public_key)) {
        if (!auth_endpoint_is_loopback(endpoint))
            log_warn("connecting to %s without CURVE keys: the traffic is neither authenticated nor encrypted "
                     "(docs/security.md)",
                     endpoint);
        return 0;
    }
    if (!have_secret || !have_server) {
        snprintf(err, err_len,
                 "[security] %s is set but %s is not: a CURVE client needs its secret key (client_secret_key) and "
                 "the kfac-ps public key (server_public_key)",
                 have_secret ? "client_secret_key" : have_server ? "server_public_key" : "client_public_key",
                 have_secret ? "server_public_key" : "client_secret_key");
        return -EINVAL;
    }
    auth_key_t secret, pub, server;
    char why[1024];
    int rc = auth_key_read(cfg->client_secret_key, 1, &secret, why, sizeof why);
    if (rc < 0) {
        snprintf(err, err_len, "[security] client_secret_key: %s", why);
        return rc;
    }
    if (auth_key_public_of(&secret, &pub) < 0) {
        snprintf(err, err_len, "[security] client_secret_key: %s: not a usable Curve25519 key", cfg->client_secret_key);
        return -EINVAL;
    }
    if (s_set(cfg->client_public_key)) {
        auth_key_t given;
        if ((rc = auth_key_read(cfg->client_public_key, 0, &given, why, sizeof why)) < 0) {
            snprintf(err, err_len, "[security] client_public_key: %s", why);
            return rc;
        }
        if (memcmp(given.raw, pub.raw, AUTH_KEY_BYTES) != 0) {
            snprintf(err, err_len,
                     "[security] client_public_key %s is not the public key of client_secret_key %s (that is %s); "
                     "use the pair kfac-keygen wrote together",
                     cfg->client_public_key, cfg->client_secret_key, pub.z85);
            return -EINVAL;
        }
    }
    if ((rc = auth_key_read(cfg->server_public_key, 0, &server, why, sizeof why)) < 0) {
        snprintf(err, err_len, "[security] server_public_key: %s", why);
        return rc;
    }
    if (zmq_setsockopt(zsock, ZMQ_CURVE_SERVERKEY, server.raw, AUTH_KEY_BYTES) != 0 ||
        zmq_setsockopt(zsock, ZMQ_CURVE_PUBLICKEY, pub.raw, AUTH_KEY_BYTES) != 0 ||
        zmq_setsockopt(zsock, ZMQ_CURVE_SECRETKEY, secret.raw, AUTH_KEY_BYTES) != 0) {
        int e = errno;
        snprintf(err, err_len, "cannot make the socket a CURVE client: %s (zmq_has(\"curve\") = %d)", zmq_strerror(e),
                 zmq_has("curve"));
        return -e;
    }
    memset(&secret, 0, sizeof secret);
    auth_client_t *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    c->mon.owner = c;
    c->mon.one = s_mon_one;
    c->mon.closed = s_client_release;
    snprintf(c->endpoint, sizeof c->endpoint, "%s", endpoint);
    snprintf(c->public_z85, sizeof c->public_z85, "%s", pub.z85);
    char mon_ep[64];
    snprintf(mon_ep, sizeof mon_ep, "inproc://kfac-auth-monitor-%p", (void *)c);
    int events = ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
    if (zmq_socket_monitor(zsock, mon_ep, events) != 0 || !(c->mon.zsock = zmq_socket(zctx, ZMQ_PAIR)) ||
        zmq_connect(c->mon.zsock, mon_ep) != 0 || (rc = s_watch_start(&c->mon, loop)) < 0) {
        /* Not fatal: the handshake works without the monitor, only its log lines are lost. */
        log_warn("cannot watch the CURVE handshake (refusals by kfac-ps will not be logged): %s",
                 zmq_strerror(errno));
        s_watch_close(&c->mon);
        c = NULL;
    }
    *out = c;
    log_info("CURVE on: public key %s, trusting kfac-ps key %s", pub.z85, server.z85);
    return 0;
}

void auth_client_on_refused(auth_client_t *c, auth_refused_fn fn, void *user) {
    if (!c) return;
    c->on_refused = fn;
    c->on_refused_user = user;
}

uint64_t auth_client_refusals(const auth_client_t *c) { return c ? c->n_refused : 0; }

const char *auth_client_public_key(const auth_client_t *c) { return c ? c->public_z85 : ""; }

void auth_client_free(auth_client_t **cp) {
    if (!cp || !*cp) return;
    auth_client_t *c = *cp;
    *cp = NULL;
    s_watch_close(&c->mon);
}
