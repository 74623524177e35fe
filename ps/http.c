/* ps/http.c — see http.h. */
#include "ps/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/textbuf.h"

/* Requests served at once, and how long an idle connection is kept. */
#define S_MAX_CONNECTIONS 16
#define S_CONNECTION_TIMEOUT_S 10
/* steps/s: the rate over windows at least this long */
#define S_RATE_WINDOW_S 2.0

struct ps_http {
    struct MHD_Daemon *daemon;
    int port;
    pthread_mutex_t mu;      /* guards everything below */
    ps_http_snapshot_t snap; /* snap.blocks points at blocks */
    ps_http_block_t *blocks; /* (max_blocks) */
    int max_blocks;
    int have_snap;
    double rate;             /* steps/s */
    double rate_wall_s;      /* window start */
    uint64_t rate_step;
    int rate_final;          /* a whole window has been measured */
};

/* ---- formatting -------------------------------------------------------------- */

static void s_head(textbuf_t *b, const char *name, const char *type, const char *help) {
    textbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* An unlabelled counter: its HELP and TYPE lines, then its sample. */
static void s_counter(textbuf_t *b, const char *name, const char *help, uint64_t v) {
    s_head(b, name, "counter", help);
    textbuf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

/* A sample value: Prometheus writes NaN and infinities as NaN, +Inf, -Inf. */
static void s_value(textbuf_t *b, double v) {
    if (v != v) textbuf_printf(b, " NaN\n");
    else if (v - v != 0.0) textbuf_printf(b, v > 0 ? " +Inf\n" : " -Inf\n");
    else textbuf_printf(b, " %.10g\n", v);
}

/* A label value, escaped as the format says (backslash, quote, newline). */
static void s_label(textbuf_t *b, const char *v) {
    for (const char *p = v; *p; p++) {
        if (*p == '\\') textbuf_printf(b, "\\\\");
        else if (*p == '"') textbuf_printf(b, "\\\"");
        else if (*p == '\n') textbuf_printf(b, "\\n");
        else textbuf_printf(b, "%c", *p);
    }
}

char *ps_http_format(const ps_http_snapshot_t *x, double steps_per_s) {
    textbuf_t b = {0};
    s_head(&b, "kfac_step", "gauge", "Parameter version: steps applied so far.");
    textbuf_printf(&b, "kfac_step %llu\n", (unsigned long long)x->step);
    s_head(&b, "kfac_steps_target", "gauge", "Steps the run is configured for ([run] steps).");
    textbuf_printf(&b, "kfac_steps_target %llu\n", (unsigned long long)x->steps_target);
    s_head(&b, "kfac_wall_seconds", "gauge", "Seconds since kfac-ps started.");
    textbuf_printf(&b, "kfac_wall_seconds");
    s_value(&b, x->wall_s);
    s_head(&b, "kfac_steps_per_second", "gauge", "Steps per second over the last few seconds.");
    textbuf_printf(&b, "kfac_steps_per_second");
    s_value(&b, steps_per_s);
    s_head(&b, "kfac_train_loss", "gauge", "Training loss of the last step (mean over its examples).");
    textbuf_printf(&b, "kfac_train_loss");
    s_value(&b, x->step ? x->train_loss : (double)NAN);
    s_head(&b, "kfac_train_accuracy", "gauge", "Training accuracy of the last step, in [0, 1].");
    textbuf_printf(&b, "kfac_train_accuracy");
    s_value(&b, x->step ? x->train_acc : (double)NAN);
    s_head(&b, "kfac_test_accuracy", "gauge",
           "Test accuracy of the newest evaluation, in [0, 1]: current parameters and their Polyak average.");
    textbuf_printf(&b, "kfac_test_accuracy{params=\"current\"}");
    s_value(&b, x->have_eval ? x->test_acc : (double)NAN);
    textbuf_printf(&b, "kfac_test_accuracy{params=\"polyak\"}");
    s_value(&b, x->have_eval ? x->polyak_acc : (double)NAN);
    s_head(&b, "kfac_test_loss", "gauge", "Test loss of the newest evaluation.");
    textbuf_printf(&b, "kfac_test_loss{params=\"current\"}");
    s_value(&b, x->have_eval ? x->test_loss : (double)NAN);
    textbuf_printf(&b, "kfac_test_loss{params=\"polyak\"}");
    s_value(&b, x->have_eval ? x->polyak_loss : (double)NAN);
    s_head(&b, "kfac_eval_step", "gauge", "Step of the newest evaluation (-1: none yet).");
    textbuf_printf(&b, "kfac_eval_step");
    s_value(&b, x->have_eval ? (double)x->eval_step : -1.0);
    s_head(&b, "kfac_clients", "gauge", "Clients present, by role.");
    textbuf_printf(&b, "kfac_clients{role=\"worker\"} %d\n", x->workers);
    textbuf_printf(&b, "kfac_clients{role=\"statsd\"} %d\n", x->statsd);
    textbuf_printf(&b, "kfac_clients{role=\"invertd\"} %d\n", x->invertd);
    s_head(&b, "kfac_rejected_messages_total", "counter",
           "Messages rejected (malformed, invalid, unexpected, stale), by message type.");
    for (int t = 0; t < MSG_TYPE_COUNT; t++) {
        textbuf_printf(&b, "kfac_rejected_messages_total{type=\"");
        s_label(&b, t == MSG_NONE ? "undecodable" : msg_type_name((msg_type_t)t));
        textbuf_printf(&b, "\"} %llu\n", (unsigned long long)x->rejected[t]);
    }
    s_counter(&b, "kfac_grad_clipped_total",
              "Layer gradients scaled down to [ps] grad_clip_ratio times their layer's median norm.", x->grad_clipped);
    s_counter(&b, "kfac_robust_steps_total",
              "Steps whose gradients were combined by the robust rule of [ps] aggregate (trimmed mean or "
              "median).", x->robust_steps);
    s_counter(&b, "kfac_recoveries_total",
              "Rounds in which every worker's gradient was refused: the PS went back to its last good "
              "parameters.", x->recoveries);
    s_counter(&b, "kfac_workers_stalled_total",
              "Workers dropped from a round: they heartbeat but did not push within the stall timeout.", x->stalled);
    s_counter(&b, "kfac_workers_demoted_total",
              "Workers that stalled [ps] stall_max_drops times: no member of the rounds again.", x->demoted);
    s_counter(&b, "kfac_checkpoints_total", "Checkpoints written ([checkpoint] every).", x->ckpt_saved);
    s_counter(&b, "kfac_checkpoints_failed_total",
              "Checkpoints that could not be written (the reason is in the log; the run goes on without them).",
              x->ckpt_failed);
    s_counter(&b, "kfac_grads_repushed_total",
              "Gradients refused: their identity (CURVE key, or member id) had already put its share into the round.",
              x->repushed);
    s_counter(&b, "kfac_grads_drift_refused_total",
              "Gradients refused: their worker's gradients keep a direction of their own that the PS's reference "
              "gradient on its held-out examples does not share ([ps] heldout_z).",
              x->drift_refused);
    s_counter(&b, "kfac_grads_drift_spared_total",
              "Gradients beyond [ps] heldout_z against the PS's reference gradient but not refused: no other worker "
              "was within the bound then (the reference disagreed with every worker).",
              x->drift_spared);
    if (x->kfac) {
        s_counter(&b, "kfac_inverses_installed_total",
                  "Inverses installed from inverse daemons.", x->inverses_installed);
        s_counter(&b, "kfac_inverses_refused_total",
                  "Inverses refused: they failed the check against their factor, or answered another daemon's "
                  "job.", x->inverses_refused);
        s_counter(&b, "kfac_invertd_distrusted_total",
                  "Inverse daemons given no more jobs for bad results.", x->invertd_distrusted);
        s_counter(&b, "kfac_stats_folded_total", "Statistics batches folded into the factors.", x->stats_folded);
        s_head(&b, "kfac_damping", "gauge",
               "The damping lambda in force: new inversion jobs are cut with it ([kfac] damping_rule).");
        textbuf_printf(&b, "kfac_damping");
        s_value(&b, x->damping);
        s_head(&b, "kfac_damping_rho", "gauge",
               "[kfac] damping_rule = adaptive: observed over predicted loss change at the last decision (NaN: "
               "none yet, or fixed damping).");
        textbuf_printf(&b, "kfac_damping_rho");
        s_value(&b, x->damping_rho);
        s_head(&b, "kfac_inverse_age_steps", "gauge",
               "Per block: steps between the current version and the factor version its inverse came from (-1: "
               "no inverse yet).");
        for (int i = 0; i < x->n_blocks; i++) {
            textbuf_printf(&b, "kfac_inverse_age_steps{layer=\"");
            s_label(&b, x->blocks[i].layer);
            textbuf_printf(&b, "\",factor=\"%d\"} %ld\n", x->blocks[i].factor, x->blocks[i].age_steps);
        }
        s_head(&b, "kfac_curvature_idle_seconds", "gauge",
               "Seconds since the last inverse was installed / statistics batch folded (counted from the first "
               "step).");
        textbuf_printf(&b, "kfac_curvature_idle_seconds{what=\"inverses\"}");
        s_value(&b, x->idle_inverses_s);
        textbuf_printf(&b, "kfac_curvature_idle_seconds{what=\"statistics\"}");
        s_value(&b, x->idle_stats_s);
        s_head(&b, "kfac_curvature_thread_seconds_total", "counter",
               "Seconds the curvature thread spent folding statistics, cutting jobs and checking inverses (off the "
               "thread the rounds wait on).");
        textbuf_printf(&b, "kfac_curvature_thread_seconds_total");
        s_value(&b, x->curv_busy_s);
        s_head(&b, "kfac_curvature_tasks_pending", "gauge",
               "Folds, cuts and checks handed to the curvature thread and not back yet.");
        textbuf_printf(&b, "kfac_curvature_tasks_pending %llu\n", (unsigned long long)x->curv_pending);
        s_head(&b, "kfac_curvature_stale", "gauge",
               "1 while the idle time is above [ps] curvature_warn_s: K-FAC is running on old curvature.");
        textbuf_printf(&b, "kfac_curvature_stale{what=\"inverses\"} %d\n", x->stale_inverses);
        textbuf_printf(&b, "kfac_curvature_stale{what=\"statistics\"} %d\n", x->stale_stats);
    }
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- the HTTP thread ------------------------------------------------------------ */

static enum MHD_Result s_reply(struct MHD_Connection *c, unsigned code, const char *type, char *body, size_t len,
                               enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ok = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result s_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                    const char *version, const char *upload, size_t *upload_len, void **state) {
    (void)version;
    (void)upload;
    ps_http_t *h = cls;
    static int first_call;
    if (*state == NULL) { /* headers only so far: answer on the next call */
        *state = &first_call;
        return MHD_YES;
    }
    if (*upload_len) { /* a body we do not read */
        *upload_len = 0;
        return MHD_YES;
    }
    static char not_found[] = "kfac-ps serves GET /metrics only\n";
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return s_reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", not_found, strlen(not_found),
                       MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/metrics") != 0)
        return s_reply(c, MHD_HTTP_NOT_FOUND, "text/plain", not_found, strlen(not_found), MHD_RESPMEM_PERSISTENT);
    pthread_mutex_lock(&h->mu);
    char *text = NULL;
    if (h->have_snap) text = ps_http_format(&h->snap, h->rate);
    pthread_mutex_unlock(&h->mu);
    if (!text) {
        static char none[] = "# kfac-ps has no snapshot yet\n";
        return s_reply(c, h->have_snap ? MHD_HTTP_INTERNAL_SERVER_ERROR : MHD_HTTP_OK,
                       "text/plain; version=0.0.4; charset=utf-8", none, strlen(none), MHD_RESPMEM_PERSISTENT);
    }
    return s_reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, strlen(text),
                   MHD_RESPMEM_MUST_FREE);
}

/* "HOST:PORT" (":PORT": 127.0.0.1) into sa. 0 or -EINVAL with the reason
 * in err; "*" is refused (the operator names 0.0.0.0 to mean every
 * interface). */
static int s_parse_addr(const char *addr, struct sockaddr_in *sa, char *err, size_t err_len) {
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    char host[64];
    if (colon == addr) { /* ":PORT": this host only */
        snprintf(host, sizeof host, "127.0.0.1");
    } else if (!colon || (size_t)(colon - addr) >= sizeof host) {
        snprintf(err, err_len, "[ps] metrics = %s: expected HOST:PORT, e.g. 127.0.0.1:9464", addr ? addr : "");
        return -EINVAL;
    } else {
        memcpy(host, addr, (size_t)(colon - addr));
        host[colon - addr] = '\0';
    }
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || port < 0 || port > 65535) {
        snprintf(err, err_len, "[ps] metrics = %s: the port must be a number from 0 to 65535", addr);
        return -EINVAL;
    }
    if (strcmp(host, "localhost") == 0) snprintf(host, sizeof host, "127.0.0.1");
    if (strcmp(host, "*") == 0) {
        /* the endpoint has no authentication: every interface is a choice
         * the operator writes out, not a wildcard's side effect */
        snprintf(err, err_len,
                 "[ps] metrics = %s: name the address: 127.0.0.1:%ld (this host only, the safe choice), or "
                 "0.0.0.0:%ld for every interface (anyone who reaches the port reads the run's figures: there is "
                 "no authentication)",
                 addr, port, port);
        return -EINVAL;
    }
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
        snprintf(err, err_len, "[ps] metrics = %s: '%s' is not an IPv4 address (use 127.0.0.1, or 0.0.0.0 for all)",
                 addr, host);
        return -EINVAL;
    }
    sa->sin_port = htons((uint16_t)port);
    return 0;
}

int ps_http_addr_check(const char *addr, char *err, size_t err_len) {
    struct sockaddr_in sa;
    return s_parse_addr(addr, &sa, err, err_len);
}

ps_http_t *ps_http_new(const char *addr, int max_blocks, char *err, size_t err_len) {
    struct sockaddr_in sa;
    if (s_parse_addr(addr, &sa, err, err_len) < 0) return NULL;
    ps_http_t *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    h->max_blocks = max_blocks > 0 ? max_blocks : 0;
    h->blocks = calloc(h->max_blocks ? (size_t)h->max_blocks : 1, sizeof *h->blocks);
    if (!h->blocks || pthread_mutex_init(&h->mu, NULL) != 0) {
        free(h->blocks);
        free(h);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    h->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, ntohs(sa.sin_port), NULL, NULL,
                                 s_on_request, h, MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&sa,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)S_MAX_CONNECTIONS,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)S_CONNECTION_TIMEOUT_S, MHD_OPTION_END);
    if (!h->daemon) {
        snprintf(err, err_len,
                 "[ps] metrics = %s: cannot serve HTTP there (port in use, or not an address of this host); pick "
                 "another port, or port 0 for any",
                 addr);
        pthread_mutex_destroy(&h->mu);
        free(h->blocks);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? (int)info->port : (int)ntohs(sa.sin_port);
    return h;
}

int ps_http_port(const ps_http_t *h) {
    return h ? h->port : 0;
}

void ps_http_publish(ps_http_t *h, const ps_http_snapshot_t *snap) {
    if (!h || !snap) return;
    pthread_mutex_lock(&h->mu);
    if (!h->have_snap || snap->step < h->rate_step) {
        h->rate_wall_s = snap->wall_s;
        h->rate_step = snap->step;
        h->rate = 0.0;
    } else {
        double dt = snap->wall_s - h->rate_wall_s;
        if (dt >= S_RATE_WINDOW_S) { /* a window is complete: its rate until the next one */
            h->rate = (double)(snap->step - h->rate_step) / dt;
            h->rate_wall_s = snap->wall_s;
            h->rate_step = snap->step;
            h->rate_final = 1;
        } else if (!h->rate_final && dt > 0.0) { /* the first window: its rate so far */
            h->rate = (double)(snap->step - h->rate_step) / dt;
        }
    }
    h->snap = *snap;
    int n = snap->n_blocks < h->max_blocks ? snap->n_blocks : h->max_blocks;
    if (n > 0 && snap->blocks) memcpy(h->blocks, snap->blocks, (size_t)n * sizeof *h->blocks);
    h->snap.n_blocks = n > 0 ? n : 0;
    h->snap.blocks = h->blocks;
    h->have_snap = 1;
    pthread_mutex_unlock(&h->mu);
}

void ps_http_free(ps_http_t **h_p) {
    if (!h_p || !*h_p) return;
    ps_http_t *h = *h_p;
    *h_p = NULL;
    if (h->daemon) MHD_stop_daemon(h->daemon); /* joins the HTTP thread */
    pthread_mutex_destroy(&h->mu);
    free(h->blocks);
    free(h);
}
