/* ps/io.c — see io.h. */
#include "ps/io.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/ratelimit.h"

double ps_io_wall_s(const ps_server_t *s) { return (double)(clock_now_ns() - s->t0_ns) * 1e-9; }


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
        else if (ratelimit_ok(&s->rl_send, clock_now_ns(), PS_LOG_EVERY_MS, &skipped))
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
    if (p) p->n_rejected++;
    uint64_t skipped = 0;
    if (!rl) rl = &s->rl_reject_by[type][(unsigned)code < MSG_ERR_COUNT ? code : MSG_ERR_NONE];
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
