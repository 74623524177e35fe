/* ps/server.c — see server.h. Life cycle, the ROUTER socket and the checks
 * every message goes through, the client table (Hello/Welcome/Refuse, Bye,
 * heartbeats, liveness) and the shutdown path. A Hello's admission is
 * ps/hello.c; the training logic is ps/round.c and ps/jobs.c. */
#include "ps/server_int.h"
#include "ps/hello.h"
#include "ps/jobs.h"
#include "ps/persist.h"
#include "ps/round.h"
#include "ps/weights.h"
#include "ps/io.h"
#include "ps/member.h"
#include "ps/report.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "common/base/clock.h"
#include "common/base/affinity.h"
#include "common/base/log.h"
#include "common/base/ratelimit.h"
#include "common/base/version.h"
#include "common/run/runpick.h"
#include "common/net/auth.h"
#include "common/nn/nn_par.h"

/* ---- clients ----------------------------------------------------------------- */

/* The members sharing p's identity (its request bucket grows with them:
 * one key may hold [security] members_per_key). */
static double s_members(const ps_peer_t *p) { return p->ident->attached > 1 ? (double)p->ident->attached : 1.0; }

/* An accepted message from p: it is alive. */
static void s_touch(ps_server_t *s, ps_peer_t *p) {
    if (!ps_peer_heard(p, clock_now_ns())) return;
    char name[160];
    log_info("%s is back%s", ps_peer_name(p, name, sizeof name),
             p->role == MSG_ROLE_WORKER ? "; it joins the next round" : "");
    ps_round_peer_joined(s, p);
}

/* After every call into the round: carry out the end of the run it asked
 * for (ps_round_request_shutdown). */
static void s_settle(ps_server_t *s) {
    int code = 0;
    if (ps_life_take_shutdown(&s->life, &code)) ps_srv_shutdown(s, code);
}

static void s_handle_recv(ps_server_t *s, const zloop_peer_t *route, const uint8_t *data, size_t len) {
    msg_t m;
    char err[600] = "";
    ps_peer_t *p = ps_peers_find(&s->peers, route);
    if (!p && len > PS_PRE_HELLO_MAX_BYTES && s->life.phase != PS_PHASE_CLOSED) {
        /* A connection that has not said Hello may send a Hello, a few
         * hundred bytes: a large frame from it is refused before it is
         * decoded (no copy, no allocation for it). */
        ps_io_reject(s, route, NULL, MSG_NONE, MSG_ERR_NOT_WELCOMED,
                     "a frame of %zu bytes before Hello (at most %d before it): say Hello first", len,
                     PS_PRE_HELLO_MAX_BYTES);
        return;
    }
    int rc = msg_decode(data, len, &m, err, sizeof err);
    if (s->life.phase == PS_PHASE_CLOSED) {
        /* The grace period after Shutdown: anyone still talking is told again. */
        if (rc == 0 && m.type != MSG_BYE && m.type != MSG_HEARTBEAT)
            ps_io_send_text(s, route, MSG_SHUTDOWN, s->reason[0] ? s->reason : "the run is over");
        msg_clear(&m);
        return;
    }
    if (rc < 0) {
        if (rc == -EPROTO && m.protocol_version != KFAC_PROTOCOL_VERSION) {
            /* A body this build does not know, from another protocol version:
             * refused with the reason (docs/protocol.md, section 4). */
            char why[300];
            msg_version_refusal(why, sizeof why, m.protocol_version, m.role);
            ps_counters_reject(&s->ctr, MSG_NONE, MSG_ERR_VERSION);
            char more[64];
            if (ps_io_reject_log_ok(s, MSG_NONE, MSG_ERR_VERSION, more, sizeof more))
                log_warn("refused a %s: %s%s", msg_role_program(m.role), why, more);
            ps_io_send_text(s, route, MSG_REFUSE, why);
        } else {
            ps_io_reject(s, route, p, MSG_NONE, MSG_ERR_BAD_MESSAGE, "%zu bytes: %s", len, err);
        }
        msg_clear(&m);
        return;
    }
    if (auth_server_check_role(s->auth, zloop_socket_property(s->sock, "User-Id"), m.role, m.type, err,
                               sizeof err) < 0) { /* a listed key speaking as another role (common/net/auth.h) */
        ps_io_send_text(s, route, MSG_REFUSE, err);
        msg_clear(&m);
        return;
    }
    if (m.type == MSG_HELLO) {
        ps_hello_handle(s, route, p, &m);
        msg_clear(&m);
        return;
    }
    if (!p) {
        ps_io_reject(s, route, NULL, m.type, MSG_ERR_NOT_WELCOMED, "%s before Hello: say Hello first",
                      msg_type_name(m.type));
        msg_clear(&m);
        return;
    }
    rc = msg_validate(&m, &s->shape.limits, err, sizeof err);
    if (rc == -EPROTO) {
        ps_io_reject(s, route, p, m.type, MSG_ERR_VERSION, "%s", err);
    } else if (rc < 0) {
        ps_io_reject(s, route, p, m.type, rc == -ENOMEM ? MSG_ERR_INTERNAL : MSG_ERR_INVALID, "%s", err);
        if (m.role == p->role) ps_round_after_reject(s, p, &m);
    } else if (m.role != p->role) {
        ps_io_reject(s, route, p, m.type, MSG_ERR_UNEXPECTED, "this connection said Hello as %s, not as %s",
                      msg_role_name(p->role), msg_role_name(m.role));
    } else {
        s_touch(s, p);
        if (m.type == MSG_GET_PARAMS || m.type == MSG_GRAD_PUSH || m.type == MSG_STATS_PUSH ||
            m.type == MSG_JOB_REQUEST || m.type == MSG_JOB_RESULT)
            ps_peer_engaged(p);
        if ((m.type == MSG_GET_PARAMS || m.type == MSG_JOB_REQUEST) &&
            !ps_ident_take_token(p->ident, clock_now_ns(), PS_REQ_PER_S * s_members(p), PS_REQ_BURST * s_members(p))) {
            ps_counters_bump(&s->ctr, PS_CTR_RATE_LIMITED);
            ps_io_reject_rl(s, &s->rl_rate, route, p, m.type, MSG_ERR_INTERNAL,
                            "more than %.0f GetParams and JobRequest a second (at most %.0f at once): this one is "
                            "dropped; send the next after the answer to the last (%" PRIu64 " dropped so far)",
                            PS_REQ_PER_S, PS_REQ_BURST, ps_counter(&s->ctr, PS_CTR_RATE_LIMITED));
            msg_clear(&m);
            return;
        }
        switch (m.type) {
        case MSG_HEARTBEAT:
            ps_peer_echo(p, m.heartbeat.mono_ns);
            break;
        case MSG_ERROR: ps_round_peer_error(s, p, &m); break;
        case MSG_BYE: {
            char name[160], why[200], more[96];
            if (ps_join_log_ok(s, p->role, more, sizeof more))
                log_info("%s left: %s%s", ps_peer_name(p, name, sizeof name),
                         log_escape(m.bye.text && m.bye.text[0] ? m.bye.text : "bye", why, sizeof why), more);
            ps_round_peer_gone(s, p, "left");
            ps_peers_remove(&s->peers, p);
            ps_jobs_dispatch(s);
            ps_round_try_step(s);
            break;
        }
        case MSG_GET_PARAMS: ps_round_get_params(s, p, &m); break;
        case MSG_GRAD_PUSH: ps_round_grad_push(s, p, &m); break;
        case MSG_STATS_PUSH: ps_round_stats_push(s, p, &m); break;
        case MSG_JOB_REQUEST: ps_jobs_request(s, p, &m); break;
        case MSG_JOB_RESULT:
            ps_jobs_result(s, p, &m);
            ps_round_try_step(s); /* an install may let a step waiting on the staleness bound go */
            break;
        default:
            ps_io_reject(s, route, p, m.type, MSG_ERR_UNEXPECTED, "kfac-ps does not take %s",
                          msg_type_name(m.type));
            break;
        }
    }
    msg_clear(&m);
}

static void s_on_recv(zloop_socket_t *sock, const zloop_peer_t *route, const uint8_t *data, size_t len, void *user) {
    (void)sock;
    ps_server_t *s = user;
    ps_trim_received(&s->trim, uv_now(&s->loop) * 1000000ULL, len);
    s_handle_recv(s, route, data, len);
    s_settle(s);
}

/* The evaluation thread's result, on the loop thread. */
/* A task back from the curvature thread (ps/curv.h), on the loop thread. */
static void s_on_curv_done(ps_curv_task_t *t, int status, void *user) {
    ps_server_t *s = user;
    if (status == 0 && !s->curv_closing) {
        switch (t->kind) {
        case PS_CURV_FOLD: ps_round_fold_done(s, t); break;
        case PS_CURV_CUT: ps_jobs_cut_done(s, t); break;
        case PS_CURV_CHECK:
            ps_jobs_check_done(s, t);
            ps_round_try_step(s); /* an install may let a step waiting on the staleness bound go */
            break;
        case PS_CURV_FORGET: break;
        }
    }
    ps_curv_release(s->curv, t);
    if (!s->curv_closing) s_settle(s);
}

static void s_on_eval_done(const ps_eval_result_t *r, int status, void *user) {
    ps_round_eval_done(r, status, user);
    s_settle(user);
}

/* ---- timers ------------------------------------------------------------------ */

/* After a burst of large messages, once it is over and nobody trains: the
 * memory the heaps kept for it goes back to the system (ps/trim.h says why
 * not sooner). */
static void s_trim(ps_server_t *s) {
    uint64_t now_ns = uv_now(&s->loop) * 1000000ULL;
    int training = s->life.phase == PS_PHASE_RUNNING && ps_peers_count(&s->peers, MSG_ROLE_WORKER, 1) > 0;
    if (!ps_trim_due(&s->trim, now_ns, PS_TRIM_IDLE_MS * 1000000ULL, training)) return;
    uint64_t n_bytes = s->trim.bytes_since;
    malloc_trim(0);
    ps_trim_done(&s->trim);
    log_debug("large messages over (%.1f MB since the last trim): freed memory given back (malloc_trim)",
              (double)n_bytes * 1e-6);
}

static void s_on_tick(uv_timer_t *t) {
    ps_server_t *s = t->data;
    if (s->life.phase == PS_PHASE_CLOSED) return;
    uint64_t now = clock_now_ns(), timeout_ns = s->cfg->worker_timeout_ms * 1000000ULL;
    for (int i = 0; i < s->peers.n; i++) {
        ps_peer_t *p = s->peers.v[i];
        if (!p->present || now - p->last_ns <= timeout_ns) continue;
        ps_peer_absent(p);
        char name[160], why[120];
        snprintf(why, sizeof why, "silent for %.1fs", (double)(now - p->last_ns) * 1e-9);
        ps_peer_name(p, name, sizeof name);
        ps_round_peer_gone(s, p, why);
    }
    /* Hello and nothing after it: forgotten. */
    ps_peer_t *idle[PS_MAX_PEERS];
    int n_idle = ps_peers_unengaged(&s->peers, now, s->cfg->handshake_timeout_ms * 1000000ULL, idle, PS_MAX_PEERS);
    for (int i = 0; i < n_idle && s->life.phase == PS_PHASE_RUNNING; i++) {
        char name[160];
        uint64_t skipped = 0;
        ps_counters_bump(&s->ctr, PS_CTR_EXPIRED);
        if (ratelimit_ok(&s->rl_expired, now, PS_LOG_EVERY_MS, &skipped))
            log_warn("%s said Hello %.1fs ago and has not asked for work since ([ps] handshake_timeout_ms): "
                     "forgotten (%" PRIu64 " so far)",
                     ps_peer_name(idle[i], name, sizeof name), (double)(now - idle[i]->hello_ns) * 1e-9, ps_counter(&s->ctr, PS_CTR_EXPIRED));
        ps_round_peer_gone(s, idle[i], "forgotten");
        ps_peers_remove(&s->peers, idle[i]);
    }
    ps_round_tick(s);
    s_settle(s);
    s_trim(s);
}

/* The heartbeat doubles as the check that a peer's connection is still
 * open. The ROUTER is ZMQ_ROUTER_MANDATORY: a send to a routing id whose
 * connection has closed (the process died, the host reset the TCP
 * connection) fails at once with EHOSTUNREACH, so a dead peer is noticed
 * within one heartbeat_ms instead of after worker_timeout_ms of silence,
 * and is treated as a peer silent past that timeout. (ZMQ_ROUTER_NOTIFY is
 * a draft API that Debian's libzmq 4.3.4 is built without, and a socket
 * monitor reports a file descriptor, not a routing id, and would replace
 * the CURVE handshake monitor: the ROUTER takes one.) A full pipe
 * (EAGAIN) is not a closed one. */
static void s_on_heartbeat(uv_timer_t *t) {
    ps_server_t *s = t->data;
    if (s->life.phase == PS_PHASE_CLOSED) return;
    msg_t m;
    msg_init(&m, MSG_HEARTBEAT, MSG_ROLE_PS, 0);
    m.heartbeat.mono_ns = clock_now_ns();
    for (int i = 0; i < s->peers.n && s->life.phase != PS_PHASE_CLOSED; i++) {
        ps_peer_t *p = s->peers.v[i];
        if (!p->present) continue;
        m.heartbeat.echo_ns = p->echo_ns;
        if (ps_io_send(s, &p->route, &m) != -EHOSTUNREACH) continue;
        ps_peer_absent(p); /* logged once, by ps_round_peer_gone; the tick skips absent peers */
        ps_round_peer_gone(s, p, "connection closed");
    }
    s_settle(s);
}

/* ---- shutdown ---------------------------------------------------------------- */

static void s_close_handles(ps_server_t *s) {
    ps_eval_stop(s->eval);
    ps_heldout_stop(s->heldout);
    s->curv_closing = 1; /* what comes back now is only released */
    ps_curv_free(&s->curv);
    rundir_free(&s->metrics);
    if (s->tick_ok) {
        uv_timer_stop(&s->tick);
        uv_close((uv_handle_t *)&s->tick, NULL);
        s->tick_ok = 0;
    }
    if (s->hb_ok) {
        uv_timer_stop(&s->hb);
        uv_close((uv_handle_t *)&s->hb, NULL);
        s->hb_ok = 0;
    }
    zloop_signals_free(&s->sigs);
    signal(SIGHUP, SIG_IGN); /* libuv put back the default action, which would kill the daemon while it closes */
    zloop_socket_free(&s->sock);
    auth_server_free(&s->auth);
}

static void s_on_grace_over(uv_timer_t *t) {
    s_close_handles(t->data);
}

void ps_srv_shutdown(ps_server_t *s, int exit_code) {
    if (!ps_life_close(&s->life)) return;
    if (exit_code > s->exit_code) s->exit_code = exit_code;
    /* The evaluation in flight (if any) finishes and is written first. */
    ps_eval_stop(s->eval);
    ps_heldout_stop(s->heldout); /* a reference in flight is waited for; nothing more is judged */
    /* The weights of a run that ended well (all steps, the target, a
     * signal); a failed one (diverged) leaves no manifest that would call
     * its parameters complete. Weights that cannot be written fail the run. */
    if (s->exit_code == 0) {
        if (ps_weights_export(s) < 0) s->exit_code = 1;
    } else {
        log_warn("the run failed (exit %d): no weights written", s->exit_code);
    }
    rundir_free(&s->metrics);
    ps_report_publish(s); /* the final evaluation, for whoever reads the endpoint last */
    auth_server_log_summary(s->auth); /* before the summary: the last two lines stay "done:" and "sent Shutdown" */
    char line[1400];
    ps_report_summary(s, line, sizeof line);
    printf("%s\n", line);
    fflush(stdout);
    ps_refresh_log_summary(ps_sched_refresh(s->sched));
    const char *why = s->reason[0] ? s->reason : "the run is over";
    int n = 0;
    for (int i = 0; i < s->peers.n; i++) {
        ps_io_send_text(s, &s->peers.v[i]->route, MSG_SHUTDOWN, why);
        n++;
    }
    log_info("sent Shutdown (%s) to %d client%s; exiting with code %d", why, n, n == 1 ? "" : "s", s->exit_code);
    /* Keep the connections open a moment: a client that has not read the
     * Shutdown yet would lose it if the connection dropped first. Whatever
     * arrives meanwhile is answered with Shutdown again. */
    if (s->hb_ok) uv_timer_stop(&s->hb);
    if (n > 0 && s->tick_ok && s->sock) {
        uv_timer_stop(&s->tick);
        uv_timer_start(&s->tick, s_on_grace_over, PS_SHUTDOWN_GRACE_MS, 0);
        return;
    }
    s_close_handles(s);
}

/* The allowlists were read again (SIGHUP or a change in a watched folder):
 * every client whose key is no longer listed for its role is told why
 * (Refuse: it stops), leaves the round and is forgotten, and the member
 * ids its key held are free again. Its later messages are refused by
 * auth_server_check_role(). */
static void s_on_auth_reload(void *user) {
    ps_server_t *s = user;
    if (s->life.phase == PS_PHASE_CLOSED) return;
    for (int i = s->peers.n - 1; i >= 0; i--) {
        if (i >= s->peers.n) continue; /* the round may have forgotten others meanwhile */
        ps_peer_t *p = s->peers.v[i];
        if (!p->key[0] || auth_server_key_role(s->auth, p->key) == p->role) continue;
        char name[160], why[300];
        snprintf(why, sizeof why,
                 "this daemon's CURVE key (%.8s...) was removed from the allowlist of the %s role: kfac-ps no longer "
                 "admits it",
                 p->key, msg_role_name(p->role));
        ps_counters_bump(&s->ctr, PS_CTR_REVOKED);
        log_warn("%s let go: its CURVE key (%.8s...) is no longer listed (%" PRIu64 " clients let go so far)",
                 ps_peer_name(p, name, sizeof name), p->key, ps_counter(&s->ctr, PS_CTR_REVOKED));
        ps_io_send_text(s, &p->route, MSG_REFUSE, why);
        ps_hello_forget_key(s, p->key);
        ps_peer_absent(p);
        ps_round_peer_gone(s, p, "let go: its key was removed from the allowlist");
        ps_peers_remove(&s->peers, p);
    }
    ps_hello_keep_listed(s); /* and the ids of keys with no client now (bound before a restart) */
    s_settle(s);
}

static void s_on_signal(int signum, void *user) {
    ps_server_t *s = user;
    if (signum == SIGHUP) {
        if (auth_server_enabled(s->auth)) (void)auth_server_reload(s->auth, s->cfg); /* key rotation */
        else log_info("SIGHUP: nothing to reload (the configuration is read once)");
        return;
    }
    if (s->life.phase == PS_PHASE_CLOSED) {
        s_close_handles(s); /* a second signal cuts the grace period short */
        return;
    }
    s->signum = signum;
    if (s->life.phase == PS_PHASE_RUNNING) ps_persist_save(s, signum == SIGINT ? "SIGINT" : "SIGTERM");
    snprintf(s->reason, sizeof s->reason, "kfac-ps stopped by %s", signum == SIGINT ? "SIGINT" : "SIGTERM");
    log_info("%s: stopping", signum == SIGINT ? "SIGINT" : "SIGTERM");
    ps_srv_shutdown(s, 0);
}

/* ---- construction -------------------------------------------------------------- */

int ps_config_check(const runcfg_t *c, char *err, size_t err_len) {
    if (c->ps_metrics && c->ps_metrics[0] && ps_http_addr_check(c->ps_metrics, err, err_len) < 0) return -EINVAL;
    int k = c->max_inverse_staleness;
    kfac_schedule_t sched;
    int rc = runcfg_kfac_schedule(c, &sched, err, err_len);
    if (rc < 0) return rc;
    /* the largest statistics interval of the run: after the last milestone */
    int every = c->stats_every;
    if (sched.n_interval_milestones > 0)
        kfac_schedule_at(&sched, sched.interval_milestones[sched.n_interval_milestones - 1], &every, NULL, NULL);
    if (every < c->stats_every) every = c->stats_every;
    if (c->optimizer == RUNCFG_OPTIMIZER_KFAC && c->stats_mode == RUNCFG_STATS_SYNC && k >= 0 && k < every - 1) {
        snprintf(err, err_len,
                 "[kfac] max_inverse_staleness = %d cannot hold with stats = sync and statistics every %d steps "
                 "(stats_every, scaled by the interval milestones; statistics exist only every %d versions): use "
                 "max_inverse_staleness >= %d, fewer statistics steps, or stats = async",
                 k, every, every, every - 1);
        return -EINVAL;
    }
    return 0;
}

static int s_setup_model(ps_server_t *s, char *err, size_t err_len) {
    const runcfg_t *c = s->cfg;
    int rc = ps_model_init(&s->model, c, err, err_len);
    if (rc < 0) return rc;
    if (s->model.kfac &&
        (!(s->scratch = kfac_stats_new(s->model.net)) || !(s->stats_guard = ps_stats_guard_new(s->scratch)))) {
        snprintf(err, err_len, "out of memory (statistics)");
        return -ENOMEM;
    }
    if (wire_shape_init(&s->shape, s->model.net, s->model.kfac ? s->model.kfac->avg : NULL) < 0) {
        snprintf(err, err_len, "out of memory (model shape)");
        return -ENOMEM;
    }
    /* factored fc gradients (GradPush.factored): at most a batch of rows each */
    s->shape.limits.max_rows = c->batch > 0 ? (uint32_t)c->batch : 0;
    s->shape.limits.grad_finite_later = 1; /* ps_round_grad_push checks them with the gradient's norm */
    s->unpack_buf = calloc(s->shape.max_layer_floats, sizeof(float));
    s->guard = ps_guard_new(s->model.net->n_layers, s->model.net->n_params, s->model.net->n_state);
    if (!(s->round = ps_round_new(s->model.net, s->model.kfac != NULL)) || !s->unpack_buf || !s->guard) {
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    if (!(s->sched = ps_sched_new(c, s->model.kfac, &rc, err, err_len))) return rc;
    if (!(s->damping = ps_damping_new(c, err, err_len))) return -EINVAL;
    ps_round_state_set_age_weight(s->round, c->gradient_age_weight);
    ps_round_schedule(s);
    if (!(s->jobs = ps_jobs_new())) goto oom;
    if (!(s->config_text = runcfg_shared_text(c))) goto oom;
    return 0;
oom:
    snprintf(err, err_len, "out of memory");
    return -ENOMEM;
}

/* Messages without page churn. glibc serves a block from its heaps below
 * its mmap threshold, and from a mapping of its own (fresh pages, faulted
 * in, unmapped at free) above it; it trims a heap whose free top exceeds
 * its trim threshold. Both thresholds follow the largest mapped block freed
 * so far (the trim threshold at twice the other; the mmap threshold at most
 * 32 MiB), starting from 128 KiB. Left to learn from the traffic, they lag
 * behind it: each new size of message is mapped once, and the heap of
 * libzmq's I/O thread, which receives every message, was trimmed and
 * faulted in again most steps, as soon as the round's gradients freed
 * together reached twice the largest message seen (two 13 MB gradients of
 * the wide model: 26 MB freed, 26 MB trimmed, 3,200 faults a step). One
 * block mapped and freed at start-up starts them where the traffic is: the
 * size of the largest message accepted, or of one gradient from each of
 * [cluster] workers if that is more (so that the trim threshold is twice
 * what a round frees at once), at most 32 MiB. From the first step every
 * message is served from the heaps, which keep its pages for the next one.
 * glibc's rule stays dynamic (no mallopt, which would fix the thresholds);
 * what a burst leaves in the heaps goes back by malloc_trim once it is over
 * and nobody trains (ps/trim.h). Rounds that free more than 64 MiB at once
 * (many workers of a large model) outgrow what the thresholds can follow. */
static void s_malloc_prime(int64_t max_msg_bytes, int64_t round_bytes) {
    const int64_t cap = 32 * 1024 * 1024 - 4096; /* glibc follows freed blocks up to 32 MiB */
    int64_t want = max_msg_bytes > round_bytes ? max_msg_bytes : round_bytes;
    if (want <= 0) return;
    size_t n = (size_t)(want < cap ? want : cap);
    volatile char *b = malloc(n);
    if (!b) return;
    b[0] = 1; /* used: the pair is not optimised away */
    free((void *)b);
}

static int s_setup_net(ps_server_t *s, char *err, size_t err_len) {
    if (!(s->zctx = zmq_ctx_new())) {
        snprintf(err, err_len, "zmq_ctx_new failed: %s", zmq_strerror(errno));
        return -ENOMEM;
    }
    zloop_socket_opts_t o;
    zloop_socket_opts_default(&o);
    int64_t max_bytes = msg_limits_max_bytes(&s->shape.limits);
    o.max_msg_bytes = max_bytes > 0 ? max_bytes : -1;
    log_info("largest message accepted: %" PRId64 " bytes (ZMQ_MAXMSGSIZE, from the model's shapes)", max_bytes);
    int64_t grad_bytes = (int64_t)(s->model.net->n_params + s->model.net->n_state) * (int64_t)sizeof(float);
    s_malloc_prime(max_bytes, (int64_t)s->cfg->workers * grad_bytes);
    o.linger_ms = PS_LINGER_MS;
    o.sndhwm = PS_SNDHWM;
    o.rcvhwm = PS_RCVHWM;
    if (!(s->sock = zloop_socket_new(&s->loop, s->zctx, ZMQ_ROUTER, &o, s_on_recv, s))) {
        snprintf(err, err_len, "cannot create the ROUTER socket");
        return -ENOMEM;
    }
    /* CURVE and the ZAP handler before the bind: no client connects unchecked. */
    if (!(s->auth = auth_server_new(&s->loop, s->zctx, s->cfg, err, err_len)) ||
        auth_server_secure(s->auth, zloop_socket_zmq(s->sock), err, err_len) < 0)
        return -EINVAL;
    auth_server_on_reload(s->auth, s_on_auth_reload, s);
    int rc = zloop_socket_bind(s->sock, s->cfg->bind, s->endpoint, sizeof s->endpoint);
    if (rc < 0 && rc != -ENOSPC) {
        snprintf(err, err_len, "cannot bind [ps] bind = %s: %s%s", s->cfg->bind, strerror(-rc),
                 rc == -EADDRINUSE ? " (another kfac-ps running? pick another port, or port 0 for any)" : "");
        return rc;
    }
    if (!(s->sigs = zloop_signals_new(&s->loop, s_on_signal, s))) {
        snprintf(err, err_len, "cannot watch signals");
        return -ENOMEM;
    }
    uint64_t tick = s->cfg->heartbeat_ms;
    if (s->cfg->worker_timeout_ms / 4 < tick) tick = s->cfg->worker_timeout_ms / 4;
    if (s->cfg->job_timeout_ms / 4 < tick) tick = s->cfg->job_timeout_ms / 4;
    if (tick > 1000) tick = 1000;
    if (tick < 5) tick = 5;
    s->tick_ms = tick;
    uv_timer_init(&s->loop, &s->tick);
    s->tick.data = s;
    s->tick_ok = 1;
    uv_timer_start(&s->tick, s_on_tick, tick, tick);
    uv_timer_init(&s->loop, &s->hb);
    s->hb.data = s;
    s->hb_ok = 1;
    uv_timer_start(&s->hb, s_on_heartbeat, s->cfg->heartbeat_ms, s->cfg->heartbeat_ms);
    return 0;
}

/* The run's folder when [run] out_dir names none (common/run/runpick.h),
 * then the checkpoint folder in it ([checkpoint] dir, or out_dir/checkpoints;
 * created when checkpoints are on). */
static int s_setup_folders(ps_server_t *s, runcfg_t *cfg, char *err, size_t err_len) {
    int rc = runpick_choose(cfg, RUNPICK_BASE, err, err_len);
    if (rc < 0) return rc;
    return ps_persist_open_dir(s, err, err_len);
}

ps_server_t *ps_server_new(runcfg_t *cfg, int *rc_out, char *err, size_t err_len) {
    int rc = -ENOMEM;
    if (rc_out) *rc_out = rc;
    ps_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    s->cfg = cfg;
    ps_life_init(&s->life);
    if (!(s->report = ps_report_new())) {
        snprintf(err, err_len, "out of memory");
        free(s);
        return NULL;
    }
    ps_trim_init(&s->trim);
    s->t0_ns = clock_now_ns();
    if (uv_loop_init(&s->loop) < 0) {
        snprintf(err, err_len, "uv_loop_init failed");
        ps_report_free(&s->report);
        free(s);
        return NULL;
    }
    s->loop_ok = 1;
    char why[1024] = "";
    if (ps_peers_init(&s->peers, PS_MAX_PEERS) < 0 || !(s->hello = ps_hello_new()) || !(s->io = ps_io_new())) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    if ((rc = s_setup_model(s, err, err_len)) < 0) goto fail;
    if (!(s->persist = ps_persist_new(ps_hello_owners(s), ps_hello_idents(s)))) {
        rc = -ENOMEM;
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    /* before a resume, which restores the histories into it */
    if (cfg->heldout_n > 0 && !(s->drift = ps_drift_new(s->model.net->n_params))) {
        rc = -ENOMEM;
        snprintf(err, err_len, "out of memory (the workers' histories against the reference gradient)");
        goto fail;
    }
    if (cfg->ckpt_resume) {
        /* the checkpoints first: with no out_dir, those of runs/latest */
        if ((rc = s_setup_folders(s, cfg, err, err_len)) < 0) goto fail;
        rc = -EIO; /* checkpoints there but none usable: a runtime failure, exit 1 */
        if (ps_persist_resume(s, err, err_len) < 0) goto fail;
        ps_damping_restart(s->damping); /* adaptive: from the checkpoint's damping */
        ps_round_schedule(s); /* the intervals of the restored step */
        if (ps_persist_run_over(s)) {
            /* A finished run started again (a restart after its end): done,
             * exit 0, so that systemd does not restart it in a loop. */
            log_info("the checkpoint in %s is at step %" PRIu64 " and [run] steps = %" PRIu64
                     ": the run is over, nothing left to do (raise --steps to go on)",
                     ps_persist_dir(s), ps_round_steps_done(s->round), cfg->steps);
            if (rc_out) *rc_out = 0;
            return s;
        }
    }
    rc = -EIO;
    if (!(s->eval = ps_eval_new(&s->loop, s->model.net->source, cfg, s_on_eval_done, s, &rc, why, sizeof why))) {
        snprintf(err, err_len, "%s", why);
        goto fail;
    }
    if (cfg->heldout_n > 0 &&
        !(s->heldout = ps_heldout_new(&s->loop, s->model.net->source, cfg, cfg->heldout_n, &rc, why, sizeof why))) {
        snprintf(err, err_len, "%s", why);
        goto fail;
    }
    if (s->model.kfac) {
        /* the scheduler's factor versions follow the factors restored (a
         * checkpoint may hold a fold whose return it did not see) */
        ps_sched_block_t *blocks = ps_sched_blocks(s->sched);
        for (int b = 0; b < ps_sched_n_blocks(s->sched); b++)
            ps_sched_folded(&blocks[b], s->model.kfac->blocks[b].factor_version);
        if (!(s->curv = ps_curv_new(&s->loop, s->model.kfac, s->stats_guard, cfg->stats_trace_max_ratio,
                                    ps_model_layer_name, s->model.net, &s->shape,
                                    (uint64_t)cfg->seed ^ clock_now_ns(), s_on_curv_done, s))) {
            rc = -ENOMEM;
            snprintf(err, err_len, "out of memory (the curvature thread)");
            goto fail;
        }
    }
    if ((rc = s_setup_net(s, err, err_len)) < 0) goto fail;
    ps_hello_keep_listed(s); /* bindings restored from a checkpoint, of keys listed no more */
    if (cfg->ps_metrics && cfg->ps_metrics[0]) { /* the live view: its own thread (ps/http.h) */
        /* a busy port is not the configuration's fault: exit 1 */
        if ((rc = ps_report_http_start(s, cfg->ps_metrics, err, err_len)) < 0) goto fail;
    }
    /* The run folder last: a start that fails (model or data, port busy,
     * bad [ps] metrics) leaves no files that would make the next start
     * refuse the folder, and takes no new folder when none was named. */
    if (!cfg->ckpt_resume && (rc = s_setup_folders(s, cfg, err, err_len)) < 0) goto fail;
    /* A run resumed from its checkpoint goes on in its own folder: rows are
     * appended (docs/operations.md); a new run may not take a used folder. */
    rundir_mode_t mode = ps_persist_resumed_from(s) >= 0 ? RUNDIR_APPEND : rundir_mode_of(cfg);
    if ((rc = rundir_open_run(cfg, RUNCFG_ROLE_PS, s->model.net->source, mode, &s->metrics, why, sizeof why)) < 0 ||
        (s->model.kfac && (rc = rundir_ages_begin(s->metrics, s->model.kfac, why, sizeof why)) < 0)) {
        snprintf(err, err_len, "%s", why);
        goto fail;
    }
    char line[300];
    snprintf(line, sizeof line, "%s\n", s->endpoint);
    if (rundir_write_text(s->metrics, "endpoint", line) < 0)
        log_warn("could not write %s/endpoint", cfg->out_dir);
    uint64_t now_ns = clock_now_ns();
    s->t0_ns = now_ns > ps_persist_wall_offset_ns(s) ? now_ns - ps_persist_wall_offset_ns(s) : 0;
    ps_round_state_start(s->round, now_ns);
    ps_report_start(s, now_ns);
    log_info("listening on %s (build '%s', protocol %d)", s->endpoint, KFAC_BUILD_ID, KFAC_PROTOCOL_VERSION);
    if (s->model.kfac) {
        char bound[32];
        if (cfg->max_inverse_staleness < 0) snprintf(bound, sizeof bound, "none");
        else snprintf(bound, sizeof bound, "%d versions", cfg->max_inverse_staleness);
        log_info("model %s: %zu parameters, %d blocks to invert (largest n=%u); kfac with %s inverses, refresh %s, "
                 "staleness bound %s, stats %s",
                 cfg->model, s->model.net->n_params, ps_sched_n_blocks(s->sched), s->shape.limits.max_n,
                 cfg->method == KFAC_INV_EIGEN ? "eigen" : "cholesky", ps_sched_policy_name(ps_sched_policy(s->sched)),
                 bound, cfg->stats_mode == RUNCFG_STATS_SYNC ? "sync (from the workers)" : "async (kfac-statsd)");
    } else {
        log_info("model %s: %zu parameters; sgd", cfg->model, s->model.net->n_params);
    }
    log_info("run: %" PRIu64 " steps, %d gradient workers per round, evaluation every %" PRIu64
             " steps on %d test examples, metrics in %s",
             cfg->steps, cfg->workers, cfg->eval_every, ps_eval_n(s->eval), cfg->out_dir);
    if (cfg->ckpt_every > 0)
        log_info("checkpoints every %" PRIu64 " steps and on SIGTERM/SIGINT in %s (the newest %d kept)%s",
                 cfg->ckpt_every, ps_persist_dir(s), cfg->ckpt_keep, cfg->ckpt_resume ? "" : "; start with --resume to go on from one");
    if (rc_out) *rc_out = 0;
    return s;
fail:
    if (rc_out) *rc_out = rc;
    ps_server_free(&s);
    return NULL;
}

int ps_server_run(ps_server_t *s) {
    if (!s) return 1;
    if (ps_persist_run_over(s)) return 0;
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return s->exit_code;
}

void ps_server_free(ps_server_t **s_p) {
    if (!s_p || !*s_p) return;
    ps_server_t *s = *s_p;
    *s_p = NULL;
    if (s->loop_ok) {
        s_close_handles(s);
        uv_run(&s->loop, UV_RUN_DEFAULT); /* close callbacks */
        if (uv_loop_close(&s->loop) != 0) log_warn("the event loop still had handles at exit");
    }
    ps_eval_free(&s->eval);
    ps_heldout_free(&s->heldout);
    ps_drift_free(&s->drift);
    s->curv_closing = 1;
    ps_curv_free(&s->curv); /* closed with the handles when the loop ran */
    ps_report_free(&s->report);
    ps_guard_free(&s->guard);
    if (s->zctx) zmq_ctx_term(s->zctx);
    ps_round_free(&s->round);
    ps_peers_release(&s->peers);
    ps_hello_free(&s->hello);
    ps_io_free(&s->io);
    ps_sched_free(&s->sched);
    ps_damping_free(&s->damping);
    ps_jobs_free(&s->jobs);
    ps_persist_free(&s->persist);
    free(s->unpack_buf);
    free(s->config_text);
    wire_shape_release(&s->shape);
    ps_stats_guard_free(s->stats_guard);
    s->stats_guard = NULL;
    kfac_stats_free(&s->scratch);
    ps_model_release(&s->model);
    free(s);
}
