/* ps/io.c — see io.h. */
#include "ps/io.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/ratelimit.h"

struct ps_io {
    ratelimit_t rl_send;                                     /* "sending ... failed" lines */
    ratelimit_t rl_reject_by[MSG_TYPE_COUNT][MSG_ERR_COUNT]; /* rejection lines, one a second per cause */
    ratelimit_t rl_peer;                                     /* lines about what a client reports or asks */
};

ps_io_t *ps_io_new(void) { return calloc(1, sizeof(ps_io_t)); }

void ps_io_free(ps_io_t **io_p) {
    if (!io_p || !*io_p) return;
    free(*io_p);
    *io_p = NULL;
}

double ps_io_wall_s(const ps_server_t *s) { return (double)(clock_now_ns() - s->t0_ns) * 1e-9; }

int ps_refusal_log_ok(ratelimit_t *rl, char *more, size_t more_len) {
    uint64_t skipped = 0;
    more[0] = '\0';
    if (!ratelimit_ok(rl, clock_now_ns(), PS_LOG_EVERY_MS, &skipped)) return 0;
    if (skipped) snprintf(more, more_len, " [%" PRIu64 " more like it not logged]", skipped);
    return 1;
}

static ratelimit_t *s_reject_rl(ps_server_t *s, msg_type_t type, msg_error_code_t code) {
    if ((unsigned)type >= MSG_TYPE_COUNT) type = MSG_NONE;
    return &s->io->rl_reject_by[type][(unsigned)code < MSG_ERR_COUNT ? code : MSG_ERR_NONE];
}

int ps_io_reject_log_ok(ps_server_t *s, msg_type_t type, msg_error_code_t code, char *more, size_t more_len) {
    return ps_refusal_log_ok(s_reject_rl(s, type, code), more, more_len);
}

int ps_io_peer_log_ok(ps_server_t *s, uint64_t *skipped) {
    return ratelimit_ok(&s->io->rl_peer, clock_now_ns(), PS_LOG_EVERY_MS, skipped);
}


int ps_io_send(ps_server_t *s, const zloop_peer_t *route, const msg_t *m) {
    if (!s->sock) return -EPIPE;
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = msg_encode(m, &buf, &len);
    if (rc < 0) {
        log_error("encoding %s failed: %s", msg_type_name(m->type), strerror(-rc));
        return rc;
    }
    rc = zloop_send_take(s->sock, route, &buf, len);
    if (rc < 0) {
        uint64_t skipped = 0;
        if (rc == -EHOSTUNREACH) log_debug("%s not delivered: the client is gone", msg_type_name(m->type));
        else if (rc == -EAGAIN) { /* its pipe is full ([ps] PS_SNDHWM): it does not read; not a closed one */
            ps_counters_bump(&s->ctr, PS_CTR_SEND_FULL);
            log_debug("%s not delivered: the client's pipe is full", msg_type_name(m->type));
        }
        else if (ratelimit_ok(&s->io->rl_send, clock_now_ns(), PS_LOG_EVERY_MS, &skipped))
            log_warn("sending %s failed: %s [%" PRIu64 " more]", msg_type_name(m->type), strerror(-rc), skipped);
    }
    return rc;
}

void ps_io_send_text(ps_server_t *s, const zloop_peer_t *route, msg_type_t type, const char *text) {
    msg_t m;
    msg_init(&m, type, MSG_ROLE_PS, 0);
    if (type == MSG_REFUSE) m.refuse.text = (char *)text;
    else if (type == MSG_SHUTDOWN) m.shutdown.text = (char *)text;
    ps_io_send(s, route, &m);
}

static void s_vreject(ps_server_t *s, ratelimit_t *rl, const zloop_peer_t *route, ps_peer_t *p, msg_type_t type,
                      msg_error_code_t code, const char *fmt, va_list ap) {
    char text[600];
    vsnprintf(text, sizeof text, fmt, ap);
    if ((unsigned)type >= MSG_TYPE_COUNT) type = MSG_NONE;
    ps_counters_reject(&s->ctr, type, code);
    if (p) ps_peer_rejected(p);
    uint64_t skipped = 0;
    if (!rl) rl = s_reject_rl(s, type, code);
    if (ratelimit_ok(rl, clock_now_ns(), PS_LOG_EVERY_MS, &skipped)) {
        char name[160];
        if (p) ps_peer_name(p, name, sizeof name);
        else snprintf(name, sizeof name, "an unknown client");
        if (skipped)
            log_warn("rejected %s from %s (%s): %s [%" PRIu64 " more like it not logged]",
                     type == MSG_NONE ? "a message" : msg_type_name(type), name, msg_error_code_name(code), text,
                     skipped);
        else
            log_warn("rejected %s from %s (%s): %s", type == MSG_NONE ? "a message" : msg_type_name(type), name,
                     msg_error_code_name(code), text);
    }
    msg_t m;
    msg_init(&m, MSG_ERROR, MSG_ROLE_PS, 0);
    m.error.code = code;
    m.error.text = text;
    ps_io_send(s, route, &m);
}

void ps_io_reject(ps_server_t *s, const zloop_peer_t *route, ps_peer_t *p, msg_type_t type,
                   msg_error_code_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    s_vreject(s, NULL, route, p, type, code, fmt, ap);
    va_end(ap);
}

void ps_io_reject_rl(ps_server_t *s, ratelimit_t *rl, const zloop_peer_t *route, ps_peer_t *p, msg_type_t type,
                     msg_error_code_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    s_vreject(s, rl, route, p, type, code, fmt, ap);
    va_end(ap);
}
