/* common/net/client.c — see client.h. The client side of the kfac protocol:
 * handshake, heartbeats, reconnection and shutdown on one libuv loop, and
 * the effective configuration from a Welcome. */
#include "common/net/client.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/affinity.h"
#include "common/base/blas.h"
#include "common/base/log.h"
#include "common/net/admit.h"
#include "common/net/auth.h"
#include "common/net/zloop.h"
#include "common/base/ratelimit.h"
#include "common/base/clock.h"
#include "common/base/version.h"

#define S_TICK_MS 50
#define S_NS_PER_MS 1000000ULL

typedef enum { S_IDLE = 0, S_HELLO, S_READY, S_STOPPED } s_state_t;

struct client {
    uv_loop_t *loop;                 /* borrowed */
    msg_role_t role;
    runcfg_role_t cfg_role;
    const runcfg_t *local;           /* borrowed */
    const client_handlers_t *h;      /* borrowed */
    void *user;
    const char *program;             /* "kfac-worker" */
    char endpoint[300];
    uint32_t requested_id;           /* --id */
    uint32_t id;                     /* sender id in use */

    void *zctx;
    zloop_socket_t *sock;
    auth_client_t *auth;             /* CURVE handshake monitor, NULL without keys */
    zloop_signals_t *signals;
    uv_timer_t timer;
    int timer_open;

    s_state_t state;
    int ever_welcomed;
    int stopping;
    int exit_code;
    runcfg_t cfg;                    /* effective configuration (after Welcome) */
    int cfg_valid;

    uint64_t t_start_ns;             /* when the current Hello phase began */
    uint64_t t_last_hello_ns;
    int hello_sent;                  /* the last Hello left (was not refused with EAGAIN) */
    uint64_t busy_backoff_ms;        /* kfac-ps could not take it yet (Error INTERNAL to Hello): next try in this */
    uint64_t t_last_wait_log_ns;
    uint64_t t_last_rx_ns;
    uint64_t t_last_tx_ns;
    uint64_t t_last_ps_hb_ns;        /* the PS's last heartbeat (our clock) */
    uint64_t hb_ms;                  /* our heartbeat interval */
    uint64_t ps_hb_ms;               /* the PS's interval as observed (0: unknown) */
    admit_t admit;                   /* refused CURVE key: the retry window ([cluster] admit_wait_s) */
    uint64_t t_admit_retry_ns;       /* connect again at this time (0: no retry due) */

    ratelimit_t rl_bad, rl_send;
    uint64_t n_bad;
};

/* ---- small helpers ---------------------------------------------------------- */

static const char *s_program(runcfg_role_t role) {
    const config_spec_t *sp = runcfg_spec(role);
    return sp && sp->program ? sp->program : "kfac";
}

int client_local_id(const runcfg_t *cfg, runcfg_role_t role) {
    return (unsigned)role < RUNCFG_ROLE_COUNT ? cfg->daemon[role].id : 0;
}

/* ---- start-up ------------------------------------------------------------------ */

int client_config_load(runcfg_t *cfg, runcfg_role_t role, int argc, char **argv, int *exit_code) {
    blas_restart_if_generic(argv); /* may restart the program (common/base/blas.h) */
    char err[1024] = "";
    const char *prog = s_program(role);
    int rc = runcfg_load(cfg, role, argc, argv, err, sizeof err);
    if (rc == CONFIG_HELP || rc == CONFIG_DUMP) {
        *exit_code = 0;
        return 1;
    }
    if (rc < 0) {
        fprintf(stderr, "%s: %s\n(see %s --help)\n", prog, err, prog);
        *exit_code = 2;
        return 1;
    }
    log_level_t lvl = LOG_LEVEL_INFO;
    if (log_level_parse(cfg->log_level, &lvl) < 0) {
        fprintf(stderr, "%s: [run] log_level: expected error, warn, info or debug, got '%s'\n(see %s --help)\n",
                prog, cfg->log_level, prog);
        *exit_code = 2;
        return 1;
    }
    char tag[64];
    snprintf(tag, sizeof tag, "%s[%d]", prog, client_local_id(cfg, role));
    log_init(lvl, tag);
    const char *cpus_what = NULL, *cpus = runcfg_cpus(cfg, role, &cpus_what);
    if (affinity_apply(cpus, cpus_what, err, sizeof err) < 0) { /* [worker] cpus, ... */
        fprintf(stderr, "%s: %s\n", prog, err);
        *exit_code = 2;
        return 1;
    }
    if (log_level_now >= LOG_LEVEL_DEBUG) {
        char *text = config_to_text(runcfg_spec(role), cfg, NULL, 0);
        if (text) {
            log_debug("configuration:\n%s", text);
            free(text);
        }
    }
    return 0;
}

void client_blas_threads(int n) { blas_set_threads(n); }

/* ---- sending ------------------------------------------------------------------ */

void client_msg_init(const client_t *c, msg_t *m, msg_type_t t) { msg_init(m, t, c->role, c->id); }

int client_send_take(client_t *c, uint8_t **buf, size_t len) {
    if (!c->sock || c->state == S_STOPPED) {
        free(*buf);
        *buf = NULL;
        return -EPIPE;
    }
    int rc = zloop_send_take(c->sock, NULL, buf, len);
    if (rc == 0) {
        c->t_last_tx_ns = uv_hrtime();
    } else {
        uint64_t skipped = 0;
        if (c->state == S_HELLO && rc == -EAGAIN)
            log_debug("no kfac-ps connected at %s yet", c->endpoint);
        else if (ratelimit_ok(&c->rl_send, clock_now_ns(), 5000, &skipped))
            log_warn("sending to kfac-ps at %s failed: %s%s (%" PRIu64 " more not logged)", c->endpoint,
                     strerror(-rc), rc == -EAGAIN ? " (not connected yet)" : "", skipped);
    }
    return rc;
}

int client_send(client_t *c, const msg_t *m) {
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = msg_encode(m, &buf, &len);
    if (rc < 0) {
        log_error("encoding a %s message failed: %s", msg_type_name(m->type), strerror(-rc));
        return rc;
    }
    return client_send_take(c, &buf, len);
}

static void s_send_hello(client_t *c) {
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
    msg_t m;
    msg_init(&m, MSG_HELLO, c->role, c->requested_id);
    m.hello.build_id = (char *)KFAC_BUILD_ID;
    m.hello.host = host;
    m.hello.pid = (uint32_t)getpid();
    c->t_last_hello_ns = uv_hrtime();
    c->hello_sent = client_send(c, &m) == 0;
    if (c->hello_sent) log_debug("hello sent to %s", c->endpoint);
}

static void s_send_heartbeat(client_t *c, uint64_t echo_ns) {
    c->t_last_tx_ns = uv_hrtime(); /* also when the send fails: no retry every tick */
    msg_t m;
    client_msg_init(c, &m, MSG_HEARTBEAT);
    m.heartbeat.mono_ns = uv_hrtime();
    m.heartbeat.echo_ns = echo_ns;
    (void)client_send(c, &m);
}

/* Begin (again) the Hello phase. */
static void s_hello_phase(client_t *c) {
    c->state = S_HELLO;
    c->t_start_ns = uv_hrtime();
    c->t_last_wait_log_ns = c->t_start_ns;
    s_send_hello(c);
}

/* ---- stopping ------------------------------------------------------------------ */

static void s_timer_closed(uv_handle_t *h) { (void)h; }

void client_stop(client_t *c, int exit_code, const char *reason, int say_bye) {
    if (!c) return;
    if (exit_code > c->exit_code) c->exit_code = exit_code;
    if (c->stopping) return;
    c->stopping = 1;
    log_info("stopping: %s", reason ? reason : "done");
    if (c->h && c->h->on_stop) c->h->on_stop(c, c->exit_code, reason ? reason : "done", c->user);
    if (say_bye && c->state == S_READY && c->sock) {
        msg_t m;
        client_msg_init(c, &m, MSG_BYE);
        m.bye.text = (char *)(reason ? reason : "done");
        (void)client_send(c, &m);
    }
    c->state = S_STOPPED;
    zloop_socket_free(&c->sock);
    auth_client_free(&c->auth);
    /* The signal watchers stay (they do not keep the loop alive): a second
     * SIGTERM during the shutdown must not kill the process. */
    if (c->timer_open) {
        c->timer_open = 0;
        uv_close((uv_handle_t *)&c->timer, s_timer_closed);
    }
}

static void s_on_signal(int signum, void *user) {
    client_t *c = user;
    if (c->stopping) {
        log_info("%s: already stopping", signum == SIGINT ? "SIGINT" : signum == SIGTERM ? "SIGTERM" : "SIGHUP");
        return;
    }
    if (signum == SIGHUP) {
        log_info("SIGHUP: nothing to reload (restart the daemon to change its configuration)");
        return;
    }
    client_stop(c, 0, signum == SIGINT ? "SIGINT" : "SIGTERM", 1);
}

/* ---- receiving ------------------------------------------------------------------ */

static void s_on_welcome(client_t *c, msg_t *m) {
    if (c->state == S_READY) {
        log_debug("ignoring a second welcome (answer to a repeated hello)");
        return;
    }
    const msg_welcome_t *w = &m->welcome;
    char err[1024] = "";
    if (!w->model_text || !w->model_text[0] || !w->config_text) {
        log_error("kfac-ps at %s sent a welcome without a model or configuration; is it a kfac-ps of this build?",
                  c->endpoint);
        client_stop(c, 1, "bad welcome", 1);
        return;
    }
    runcfg_t cfg;
    int rc = client_config_from_text(c->local, c->cfg_role, w->config_text, &cfg, err, sizeof err);
    if (rc < 0) {
        runcfg_release(&cfg);
        log_error("%s (kfac-ps and %s must be the same build)", err, c->program);
        client_stop(c, 1, "unusable configuration in welcome", 1);
        return;
    }
    if (c->cfg_valid) runcfg_release(&c->cfg);
    c->cfg = cfg;
    c->cfg_valid = 1;
    c->id = w->assigned_id;
    c->state = S_READY;
    c->busy_backoff_ms = 0;
    admit_reset(&c->admit);
    c->t_admit_retry_ns = 0;
    log_info("welcomed by kfac-ps at %s: id %" PRIu32 ", rank %" PRIu32 "/%" PRIu32 ", params version %" PRIu64
             ", %" PRIu64 " parameters%s",
             c->endpoint, w->assigned_id, w->rank, w->n_ranks, w->params_version, w->n_params,
             c->ever_welcomed ? " (again)" : "");
    c->ever_welcomed = 1;
    if (c->h && c->h->on_welcome) {
        rc = c->h->on_welcome(c, w, &c->cfg, c->user);
        if (rc < 0) client_stop(c, 1, "cannot work with this welcome", 1);
    }
}

static void s_on_recv(zloop_socket_t *s, const zloop_peer_t *peer, const uint8_t *data, size_t len, void *user) {
    (void)s;
    (void)peer;
    client_t *c = user;
    if (c->stopping) return;
    msg_t m;
    char err[512] = "";
    uint64_t skipped = 0;
    int rc = msg_decode(data, len, &m, err, sizeof err);
    c->t_last_rx_ns = uv_hrtime();
    if (rc < 0) {
        c->n_bad++;
        if (ratelimit_ok(&c->rl_bad, clock_now_ns(), 5000, &skipped))
            log_warn("dropped an undecodable message from kfac-ps (%zu bytes): %s [%" PRIu64 " bad so far]", len,
                     err, c->n_bad);
        msg_clear(&m);
        return;
    }
    if (m.protocol_version != KFAC_PROTOCOL_VERSION) {
        log_error("kfac-ps at %s speaks protocol version %" PRIu32 ", this %s speaks %d; upgrade the older one",
                  c->endpoint, m.protocol_version, c->program, KFAC_PROTOCOL_VERSION);
        msg_clear(&m);
        client_stop(c, 1, "protocol version mismatch", 0);
        return;
    }
    if (m.role != MSG_ROLE_PS || !msg_role_may_send(MSG_ROLE_PS, m.type)) {
        c->n_bad++;
        if (ratelimit_ok(&c->rl_bad, clock_now_ns(), 5000, &skipped))
            log_warn("dropped a %s message from a %s (only kfac-ps talks to clients)", msg_type_name(m.type),
                     msg_role_name(m.role));
        msg_clear(&m);
        return;
    }
    switch (m.type) {
    case MSG_WELCOME:
        s_on_welcome(c, &m);
        break;
    case MSG_REFUSE:
        log_error("kfac-ps at %s refused this %s: %s", c->endpoint, c->program,
                  m.refuse.text && m.refuse.text[0] ? m.refuse.text : "(no reason given)");
        client_stop(c, 1, "refused", 0);
        break;
    case MSG_SHUTDOWN:
        log_info("kfac-ps says the run is over: %s", m.shutdown.text && m.shutdown.text[0] ? m.shutdown.text : "shutdown");
        client_stop(c, 0, "shutdown by kfac-ps", 0);
        break;
    case MSG_HEARTBEAT: {
        uint64_t now = c->t_last_rx_ns;
        if (c->t_last_ps_hb_ns) {
            uint64_t gap_ms = (now - c->t_last_ps_hb_ns) / S_NS_PER_MS;
            if (gap_ms >= 10 && (c->ps_hb_ms == 0 || gap_ms < c->ps_hb_ms)) c->ps_hb_ms = gap_ms;
            if (c->ps_hb_ms && c->ps_hb_ms < c->hb_ms) c->hb_ms = c->ps_hb_ms;
        }
        c->t_last_ps_hb_ns = now;
        if (c->state == S_READY) s_send_heartbeat(c, m.heartbeat.mono_ns);
        break;
    }
    case MSG_ERROR:
        if (m.error.code == MSG_ERR_NOT_WELCOMED) {
            if (c->state == S_READY) {
                log_warn("kfac-ps at %s does not know this %s (it restarted?): saying hello again", c->endpoint,
                         c->program);
                s_hello_phase(c);
            }
            break;
        }
        if (c->state == S_HELLO && m.error.code == MSG_ERR_INTERNAL) {
            /* Not now (its id still held by a dying predecessor, no room): again later, less and less often. */
            c->busy_backoff_ms = admit_backoff_next_ms(c->busy_backoff_ms);
            log_warn("kfac-ps at %s cannot take this %s now: %s; trying again in %.0fs", c->endpoint, c->program,
                     m.error.text ? m.error.text : "", (double)c->busy_backoff_ms / 1000.0);
            break;
        }
        if (c->state == S_READY && c->h && c->h->on_message) c->h->on_message(c, &m, c->user);
        else log_warn("kfac-ps: error %s: %s", msg_error_code_name(m.error.code), m.error.text ? m.error.text : "");
        break;
    default:
        if (c->state != S_READY) {
            log_debug("ignoring %s before welcome", msg_type_name(m.type));
            break;
        }
        if (c->h && c->h->on_message) c->h->on_message(c, &m, c->user);
        break;
    }
    msg_clear(&m);
}

/* ---- the timer ------------------------------------------------------------------ */

static void s_admit_reconnect(client_t *c);

static void s_on_tick(uv_timer_t *t) {
    client_t *c = t->data;
    if (c->stopping) return;
    uint64_t now = uv_hrtime();
    if (c->t_admit_retry_ns) { /* refused key: quiet until the pause is over */
        if (now >= c->t_admit_retry_ns) s_admit_reconnect(c);
        return;
    }
    if (c->state == S_HELLO) {
        /* Not connected yet: try again soon; sent but unanswered: now and then. */
        uint64_t retry_ms = c->busy_backoff_ms ? c->busy_backoff_ms : c->hello_sent ? CLIENT_HELLO_RETRY_MS : 100;
        if (now - c->t_last_hello_ns >= retry_ms * S_NS_PER_MS) s_send_hello(c);
        if (now - c->t_last_wait_log_ns >= (uint64_t)CLIENT_WAIT_LOG_MS * S_NS_PER_MS) {
            c->t_last_wait_log_ns = now;
            log_info("waiting for kfac-ps at %s (no answer for %.0fs; retrying)", c->endpoint,
                     (double)(now - c->t_start_ns) / 1e9);
        }
        return;
    }
    if (c->state != S_READY) return;
    /* Heartbeats while the PS is heard; once a PS that heartbeats itself has been
     * silent for five of its intervals, more of them would only pile up in the
     * queue of a dead connection. */
    int ps_quiet = c->ps_hb_ms && now - c->t_last_rx_ns > 5 * c->ps_hb_ms * S_NS_PER_MS;
    if (!ps_quiet && now - c->t_last_tx_ns >= c->hb_ms * S_NS_PER_MS) s_send_heartbeat(c, 0);
    uint64_t silence_ms = CLIENT_SILENCE_MS;
    if (c->ps_hb_ms && 10 * c->ps_hb_ms > silence_ms) silence_ms = 10 * c->ps_hb_ms;
    if (now - c->t_last_rx_ns >= silence_ms * S_NS_PER_MS) {
        log_warn("no word from kfac-ps at %s for %.0fs: saying hello again", c->endpoint,
                 (double)(now - c->t_last_rx_ns) / 1e9);
        c->t_last_rx_ns = now;
        s_hello_phase(c);
    }
}

/* ---- life cycle ------------------------------------------------------------------ */

/* kfac-ps refused our CURVE key (common/net/auth.h). ZeroMQ will not retry
 * that connection: connect again later while the key may yet be listed
 * (common/net/admit.h), else stop with 78. */
static void s_on_key_refused(void *user) {
    client_t *c = user;
    if (c->stopping) return;
    uint64_t now = uv_hrtime(), delay_ms = 0, left_ms = 0;
    const char *key = auth_client_public_key(c->auth);
    if (admit_refused(&c->admit, now, &delay_ms, &left_ms) == ADMIT_DECISION_GIVE_UP) {
        if (c->admit.wait_ms)
            log_error("kfac-ps at %s refused this daemon's CURVE key %s again: still not listed after %.0fs "
                      "([cluster] admit_wait_s); add its public key ([security] client_public_key) to the PS's "
                      "allow_* folder for this role, then start this daemon again",
                      c->endpoint, key, (double)c->admit.wait_ms / 1000.0);
        else
            log_error("kfac-ps at %s refused this daemon's CURVE key %s: add its public key ([security] "
                      "client_public_key) to the PS's allow_* folder for this role ([cluster] admit_wait_s = 0: "
                      "no waiting)",
                      c->endpoint, key);
        client_stop(c, AUTH_EXIT_CONFIG, "kfac-ps refused this daemon's CURVE key", 0);
        return;
    }
    log_warn("kfac-ps at %s refused this daemon's CURVE key %s (not in its allow_* list for this role, yet?): "
             "trying again in %.0fs, %.0fs of [cluster] admit_wait_s left (refusal %" PRIu64 ")",
             c->endpoint, key, (double)delay_ms / 1000.0, (double)left_ms / 1000.0, c->admit.n_refused);
    c->t_admit_retry_ns = now + delay_ms * S_NS_PER_MS;
}

/* The pause after a refused key is over: drop the refused connection and
 * make a new one (a new CURVE handshake), then say Hello again. */
static void s_admit_reconnect(client_t *c) {
    c->t_admit_retry_ns = 0;
    void *z = zloop_socket_zmq(c->sock);
    (void)zmq_disconnect(z, c->endpoint); /* ENOENT when libzmq already dropped it: fine */
    int rc = zloop_socket_connect(c->sock, c->endpoint);
    if (rc < 0) {
        log_error("cannot connect to '%s' again: %s", c->endpoint, zmq_strerror(-rc));
        client_stop(c, 1, "cannot connect again", 0);
        return;
    }
    log_debug("connecting to kfac-ps at %s again (a new CURVE handshake)", c->endpoint);
    s_hello_phase(c);
}

client_t *client_new(uv_loop_t *loop, msg_role_t role, runcfg_role_t cfg_role, const runcfg_t *local,
                     const client_handlers_t *h, void *user) {
    if (!loop || !local || !h || !local->ps) {
        log_error("client: needs a loop, a configuration and handlers");
        return NULL;
    }
    client_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->loop = loop;
    c->role = role;
    c->cfg_role = cfg_role;
    c->local = local;
    c->h = h;
    c->user = user;
    c->program = s_program(cfg_role);
    snprintf(c->endpoint, sizeof c->endpoint, "%s", local->ps);
    c->requested_id = (uint32_t)client_local_id(local, cfg_role);
    c->id = c->requested_id;
    c->hb_ms = CLIENT_HEARTBEAT_MS;
    admit_init(&c->admit, local->admit_wait_s * 1000);
    c->zctx = zmq_ctx_new();
    if (!c->zctx) {
        log_error("zmq_ctx_new: %s", zmq_strerror(errno));
        free(c);
        return NULL;
    }
    zloop_socket_opts_t so;
    zloop_socket_opts_default(&so);
    so.linger_ms = 200; /* long enough for Bye to leave */
    /* No ZMQ_IMMEDIATE: with it, a message that arrives just before the PS
     * closes its end (the Shutdown of a finished run) can be discarded with
     * the connection. Without it, what is sent while no PS is connected
     * waits in the queue (bounded here) and goes out on connection, in order. */
    so.sndhwm = 256;
    c->sock = zloop_socket_new(loop, c->zctx, ZMQ_DEALER, &so, s_on_recv, c);
    if (!c->sock) {
        zmq_ctx_term(c->zctx);
        free(c);
        return NULL;
    }
    char err[1200] = ""; /* CURVE keys, before the connect (common/net/auth.h) */
    if (auth_client_secure(loop, c->zctx, zloop_socket_zmq(c->sock), local, c->endpoint, &c->auth, err, sizeof err) < 0) {
        log_error("%s", err);
        client_free(&c);
        return NULL;
    }
    auth_client_on_refused(c->auth, s_on_key_refused, c);
    return c;
}

int client_start(client_t *c) {
    int rc;
    if (!(c->signals = zloop_signals_new(c->loop, s_on_signal, c))) return -ENOMEM;
    if ((rc = uv_timer_init(c->loop, &c->timer)) < 0) return rc;
    c->timer.data = c;
    c->timer_open = 1;
    if ((rc = uv_timer_start(&c->timer, s_on_tick, S_TICK_MS, S_TICK_MS)) < 0) return rc;
    if ((rc = zloop_socket_connect(c->sock, c->endpoint)) < 0) {
        log_error("cannot connect to '%s': %s (set [cluster] ps, e.g. --ps tcp://host:5555)", c->endpoint,
                  zmq_strerror(-rc));
        return rc;
    }
    log_info("%s %s connecting to kfac-ps at %s", c->program, KFAC_BUILD_ID, c->endpoint);
    c->t_last_rx_ns = uv_hrtime();
    s_hello_phase(c);
    return 0;
}

int client_welcomed(const client_t *c) { return c->state == S_READY; }
int client_stopping(const client_t *c) { return c->stopping; }
int client_exit_code(const client_t *c) { return c->exit_code; }
uint32_t client_id(const client_t *c) { return c->id; }
const char *client_endpoint(const client_t *c) { return c->endpoint; }

void client_free(client_t **cp) {
    if (!cp || !*cp) return;
    client_t *c = *cp;
    *cp = NULL;
    zloop_socket_free(&c->sock);
    auth_client_free(&c->auth);
    if (c->signals) {
        zloop_signals_free(&c->signals);
        uv_run(c->loop, UV_RUN_DEFAULT); /* their close callbacks */
        /* On the way out: a late SIGTERM (a launcher and a terminal both
         * signalling) must not turn a clean exit into "killed". */
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
    }
    if (c->zctx) zmq_ctx_term(c->zctx);
    if (c->cfg_valid) runcfg_release(&c->cfg);
    free(c);
}

/* ---- the effective configuration ------------------------------------------- */

int client_config_from_text(const runcfg_t *local, runcfg_role_t cfg_role, const char *text, runcfg_t *out,
                            char *err, size_t err_len) {
    runcfg_init(out);
    const config_spec_t *spec = runcfg_spec(cfg_role);
    int rc = config_defaults(spec, out, err, err_len);
    if (rc < 0) return rc;
    if ((rc = config_parse_text(spec, out, text, "welcome", err, err_len)) < 0) return rc;
    /* The daemon's own section and the host-local keys come from here. */
    static const char *const own[RUNCFG_ROLE_COUNT][2] = {
        {"ps", NULL}, {"worker", NULL}, {"statsd", NULL}, {"invertd", NULL}, {NULL, NULL}};
    if ((unsigned)cfg_role < RUNCFG_ROLE_COUNT && own[cfg_role][0]) {
        char *mine = config_to_text(spec, local, own[cfg_role], 0);
        if (!mine) {
            snprintf(err, err_len, "welcome: out of memory");
            return -ENOMEM;
        }
        rc = config_parse_text(spec, out, mine, "local configuration", err, err_len);
        free(mine);
        if (rc < 0) return rc;
    }
    if ((rc = config_set(spec, out, "data.dir", local->data_dir, "local configuration", err, err_len)) < 0 ||
        (rc = config_set(spec, out, "run.log_level", local->log_level, "local configuration", err, err_len)) < 0)
        return rc;
    return runcfg_validate(out, err, err_len);
}
