/* common/net/client.c — see client.h. The client side of the kfac protocol:
 * handshake, heartbeats, reconnection and shutdown on one libuv loop, and
 * the model helpers the worker and the stats worker share. */
#include "common/net/client.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/affinity.h"
#include "common/base/blas.h"
#include "common/nn/data.h"
#include "common/base/log.h"
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

    ratelimit_t rl_bad, rl_send;
    uint64_t n_bad;
};

/* ---- small helpers ---------------------------------------------------------- */

static const char *s_program(runcfg_role_t role) {
    const config_spec_t *sp = runcfg_spec(role);
    return sp && sp->program ? sp->program : "kfac";
}

int client_local_id(const runcfg_t *cfg, runcfg_role_t role) {
    switch (role) {
    case RUNCFG_ROLE_WORKER: return cfg->worker_id;
    case RUNCFG_ROLE_STATSD: return cfg->statsd_id;
    case RUNCFG_ROLE_INVERTD: return cfg->invertd_id;
    default: return 0;
    }
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
            c->busy_backoff_ms = c->busy_backoff_ms ? 2 * c->busy_backoff_ms : 1000;
            if (c->busy_backoff_ms > 30000) c->busy_backoff_ms = 30000;
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

static void s_on_tick(uv_timer_t *t) {
    client_t *c = t->data;
    if (c->stopping) return;
    uint64_t now = uv_hrtime();
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

/* ---- configuration and model helpers ---------------------------------------- */

int client_config_from_text(const runcfg_t *local, runcfg_role_t cfg_role, const char *text, runcfg_t *out,
                            char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
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

msg_factor_kind_t client_factor_kind(const kfac_factor_t *f) {
    switch (f->role) {
    case KFAC_FACTOR_ROLE_A: return MSG_FACTOR_A;
    case KFAC_FACTOR_ROLE_G: return MSG_FACTOR_G;
    case KFAC_FACTOR_ROLE_K: return MSG_FACTOR_K;
    case KFAC_FACTOR_ROLE_PSI: return MSG_FACTOR_PSI;
    case KFAC_FACTOR_ROLE_GBIAS: return MSG_FACTOR_G_BIAS;
    case KFAC_FACTOR_ROLE_BN: return MSG_FACTOR_BN;
    }
    return MSG_FACTOR_NONE;
}

int client_shape_init(client_shape_t *sh, const net_t *net, const kfac_stats_t *stats) {
    memset(sh, 0, sizeof *sh);
    msg_limits_default(&sh->limits);
    sh->layers = calloc((size_t)(net->n_layers > 0 ? net->n_layers : 1), sizeof *sh->layers);
    if (!sh->layers) return -ENOMEM;
    for (int i = 0; stats && i < stats->n_layers; i++) {
        const kfac_layer_stats_t *ls = &stats->layers[i];
        if (ls->layer < 0 || ls->layer >= net->n_layers || ls->n_factors > MSG_MAX_FACTORS) {
            client_shape_release(sh);
            return -EINVAL;
        }
        msg_layer_shape_t *o = &sh->layers[ls->layer];
        o->n_factors = (uint32_t)ls->n_factors;
        for (int f = 0; f < ls->n_factors; f++) {
            const kfac_factor_t *fa = &ls->f[f];
            o->kind[f] = client_factor_kind(fa);
            o->n[f] = fa->kind == KFAC_FACTOR_DIAG2X2 ? 2u : (uint32_t)fa->dim;
            o->n_blocks[f] = fa->kind == KFAC_FACTOR_DIAG2X2 ? (uint32_t)fa->dim : 1u;
            if (o->n[f] > sh->limits.max_n) sh->limits.max_n = o->n[f];
        }
    }
    sh->model.n_params = net->n_params;
    sh->model.n_state = net->n_state;
    sh->model.n_layers = (uint32_t)net->n_layers;
    sh->model.layers = sh->layers;
    if ((uint64_t)net->n_layers > sh->limits.max_layers) sh->limits.max_layers = (uint32_t)net->n_layers;
    if (net->n_params > sh->limits.max_floats) sh->limits.max_floats = net->n_params;
    sh->limits.model = &sh->model;
    return 0;
}

void client_shape_release(client_shape_t *sh) {
    if (!sh) return;
    free(sh->layers);
    memset(sh, 0, sizeof *sh);
}

int client_stats_to_msg(const kfac_stats_t *s, msg_stats_t *out, float **packed) {
    memset(out, 0, sizeof *out);
    *packed = NULL;
    size_t total = kfac_stats_packed_len(s);
    float *buf = malloc((total ? total : 1) * sizeof(float));
    msg_layer_stats_t *layers = calloc((size_t)(s->n_layers > 0 ? s->n_layers : 1), sizeof *layers);
    msg_factor_t *factors = calloc((size_t)(s->n_layers > 0 ? s->n_layers : 1) * KFAC_STATS_MAX_FACTORS,
                                   sizeof *factors);
    if (!buf || !layers || !factors) {
        free(buf);
        free(layers);
        free(factors);
        return -ENOMEM;
    }
    size_t off = 0;
    for (int i = 0; i < s->n_layers; i++) {
        const kfac_layer_stats_t *ls = &s->layers[i];
        size_t n = kfac_stats_layer_packed_len(ls);
        int rc = kfac_stats_layer_pack(ls, buf + off, total - off);
        if (rc < 0 || off + n > total) {
            free(buf);
            free(layers);
            free(factors);
            return rc < 0 ? rc : -EINVAL;
        }
        msg_factor_t *fs = factors + (size_t)i * KFAC_STATS_MAX_FACTORS;
        size_t foff = off;
        for (int f = 0; f < ls->n_factors; f++) {
            const kfac_factor_t *fa = &ls->f[f];
            size_t len = kfac_factor_packed_len(fa);
            fs[f].kind = client_factor_kind(fa);
            fs[f].n = fa->kind == KFAC_FACTOR_DIAG2X2 ? 2u : (uint32_t)fa->dim;
            fs[f].n_blocks = fa->kind == KFAC_FACTOR_DIAG2X2 ? (uint32_t)fa->dim : 1u;
            fs[f].data = buf + foff;
            fs[f].n_data = len;
            foff += len;
        }
        layers[i].layer = (uint32_t)ls->layer;
        layers[i].factors = fs;
        layers[i].n_factors = (size_t)ls->n_factors;
        off += n;
    }
    if (s->n_layers == 0) {
        free(layers);
        free(factors);
        layers = NULL;
    }
    out->layers = layers;
    out->n_layers = (size_t)s->n_layers;
    *packed = buf;
    return 0;
}

void client_stats_release(msg_stats_t *st, float **packed) {
    if (st) {
        if (st->layers && st->n_layers) free(st->layers[0].factors);
        free(st->layers);
        memset(st, 0, sizeof *st);
    }
    if (packed) {
        free(*packed);
        *packed = NULL;
    }
}

/* ---- the compute context ------------------------------------------------------- */

static char *s_strdup(const char *s) {
    size_t n = strlen(s ? s : "") + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s ? s : "", n);
    return d;
}

int client_setup_init(client_setup_t *s, const msg_welcome_t *w, const runcfg_t *cfg) {
    memset(s, 0, sizeof *s);
    s->model_text = s_strdup(w->model_text);
    s->dataset = s_strdup(runcfg_dataset_name(cfg));
    s->data_dir = s_strdup(cfg->data_dir);
    if (!s->model_text || !s->dataset || !s->data_dir) {
        client_setup_release(s);
        return -ENOMEM;
    }
    s->n_params = w->n_params;
    s->n_state = w->n_state;
    s->train_n = cfg->train_n;
    s->doubly_min_in = cfg->doubly_min_in;
    s->batch = cfg->batch;
    s->augment = cfg->augment;
    s->with_stats = cfg->optimizer == RUNCFG_OPTIMIZER_KFAC;
    s->fisher = cfg->fisher;
    s->batch_seed = cfg->seed;
    s->label_seed = cfg->seed;
    s->rank = (int)w->rank;
    s->n_ranks = w->n_ranks ? (int)w->n_ranks : 1;
    return 0;
}

void client_setup_release(client_setup_t *s) {
    if (!s) return;
    free(s->model_text);
    free(s->dataset);
    free(s->data_dir);
    memset(s, 0, sizeof *s);
}

void client_compute_release(client_compute_t *cc) {
    if (!cc) return;
    backend_free(&cc->be);
    free(cc->probs);
    batcher_free(&cc->bat);
    dataset_free(&cc->train);
    kfac_stats_free(&cc->stats);
    client_shape_release(&cc->shape);
    net_free(&cc->net);
    free(cc->x);
    free(cc->y);
    free(cc->ys);
    memset(cc, 0, sizeof *cc);
}

int client_compute_init(client_compute_t *cc, const client_setup_t *s, char *err, size_t err_len) {
    memset(cc, 0, sizeof *cc);
    int rc = -EINVAL;
    if (s->batch < 1 || s->n_ranks < 1 || s->rank < 0 || s->rank >= s->n_ranks) {
        snprintf(err, err_len, "bad shard %d of %d or batch %d", s->rank, s->n_ranks, s->batch);
        return -EINVAL;
    }
    if (!(cc->net = net_parse(s->model_text, "welcome model", s->batch, err, err_len))) goto fail;
    cc->net->fc_doubly_min_in = s->doubly_min_in;
    if ((uint64_t)cc->net->n_params != s->n_params || (uint64_t)cc->net->n_state != s->n_state) {
        snprintf(err, err_len,
                 "the welcome's model has %zu parameters and %zu state values here, but kfac-ps says %" PRIu64
                 " and %" PRIu64 " (different builds?)",
                 cc->net->n_params, cc->net->n_state, s->n_params, s->n_state);
        goto fail;
    }
    cc->net->dropout_seed = s->label_seed ^ 0x5eedd0d0ULL ^ ((uint64_t)s->rank << 32);
    if ((rc = dataset_load_named(s->dataset, s->data_dir, 1, &cc->train, err, err_len)) < 0) goto fail;
    rc = -EINVAL;
    if (s->train_n > 0) dataset_truncate(cc->train, s->train_n);
    if (cc->train->c * cc->train->h * cc->train->w != cc->net->in_size) {
        snprintf(err, err_len, "data set %s has %dx%dx%d examples but the model's input is %dx%dx%d",
                 cc->train->name, cc->train->c, cc->train->h, cc->train->w, cc->net->in_c, cc->net->in_h,
                 cc->net->in_w);
        goto fail;
    }
    batcher_opts_t bo = {.batch = s->batch, .seed = s->batch_seed, .rank = s->rank, .n_ranks = s->n_ranks,
                         .shuffle = 1, .aug_crop_pad = s->augment ? 4 : 0, .aug_flip = s->augment,
                         .drop_last = 1};
    if (!(cc->bat = batcher_new(cc->train, &bo, err, err_len))) goto fail;
    rc = -ENOMEM;
    if (!(cc->x = malloc((size_t)s->batch * (size_t)cc->net->in_size * sizeof(float))) ||
        !(cc->y = malloc((size_t)s->batch * sizeof(int)))) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < s->skip_batches; i++) batcher_next(cc->bat, cc->x, cc->y);
    if (s->skip_batches) log_info("data: shard position %" PRIu64 " (one batch per version before it)", s->skip_batches);
    rc = -EINVAL;
    if (s->with_stats && !(cc->stats = kfac_stats_new(cc->net))) {
        snprintf(err, err_len, "cannot build the K-FAC statistics of this model (see the log)");
        goto fail;
    }
    rc = -ENOMEM;
    if (client_shape_init(&cc->shape, cc->net, cc->stats) < 0) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    cc->ys = malloc((size_t)s->batch * sizeof(int));
    cc->probs = malloc((size_t)s->batch * (size_t)cc->net->n_classes * sizeof(float));
    if (!cc->x || !cc->y || !cc->ys || !cc->probs) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    /* The backend is made on the compute thread that will use it (a CUDA
     * context belongs to the thread that creates it). */
    if (!(cc->be = backend_new((backend_kind_t)s->device, cc->net, err, err_len))) goto fail;
    log_info("device: %s", backend_describe(cc->be));
    rng_seed(&cc->label_rng, s->label_seed ^ 0xfeedULL ^ ((uint64_t)s->rank * 0x9E3779B97F4A7C15ULL));
    cc->fisher = s->fisher;
    cc->batch = s->batch;
    return 0;
fail:
    client_compute_release(cc);
    return rc;
}

int client_compute_batch(client_compute_t *cc, const float *params, const float *state, int stats, int grad,
                         double *loss, int *n_correct, int *n_examples, char *err, size_t err_len) {
    net_t *net = cc->net;
    int rc = backend_set_params(cc->be, params, state && net->n_state ? state : NULL);
    if (rc < 0) {
        snprintf(err, err_len, "uploading the parameters failed: %s", backend_describe(cc->be));
        return rc;
    }
    int n = batcher_next(cc->bat, cc->x, cc->y);
    if (n <= 0) {
        snprintf(err, err_len, "the batcher returned no examples");
        return -EIO;
    }
    if ((rc = backend_forward(cc->be, cc->x, n, 1)) < 0) {
        snprintf(err, err_len, "forward pass failed (%d): %s", rc, backend_describe(cc->be));
        return rc;
    }
    *n_examples = n;
    if (stats && cc->stats) {
        const int *lab = cc->y;
        if (cc->fisher == KFAC_FISHER_TRUE) {
            /* True Fisher: one label per example drawn from the model. */
            if ((rc = backend_probs(cc->be, cc->probs)) < 0 ||
                (rc = kfac_sample_labels(cc->probs, n, net->n_classes, &cc->label_rng, cc->ys)) < 0) {
                snprintf(err, err_len, "sampling labels failed: the model's probabilities are not available or not finite");
                return rc;
            }
            lab = cc->ys;
        }
        float l;
        int h;
        if ((rc = backend_backward(cc->be, lab, 0, &l, &h)) < 0 || (rc = backend_stats(cc->be, cc->stats)) < 0) {
            snprintf(err, err_len, "computing the statistics failed (%d): %s", rc, backend_describe(cc->be));
            return rc;
        }
    }
    if (grad) {
        int hits = 0;
        float l = 0.0f;
        if ((rc = backend_backward(cc->be, cc->y, 1, &l, &hits)) < 0) {
            snprintf(err, err_len, "backward pass failed (%d): %s", rc, backend_describe(cc->be));
            return rc;
        }
        *loss = l;
        *n_correct = hits;
    }
    return 0;
}

void client_compute_move(client_compute_t *dst, client_compute_t *src) {
    if (dst == src) return;
    client_compute_release(dst);
    *dst = *src;
    if (dst->shape.limits.model) dst->shape.limits.model = &dst->shape.model;
    memset(src, 0, sizeof *src);
}
