/* ps/round.c — the parameter server's training logic on the loop thread:
 * the synchronous gradient round of version t, statistics folding, the
 * step itself, publishing t + 1, evaluations and progress lines. The
 * inversion jobs are ps/jobs.c.
 *
 * The round of version t (docs/architecture.md, "The round"):
 *   members  = the workers present when the round opened that had been sent
 *              Params before (a worker that joins mid-round gets the current
 *              Params at once and is a member from the next round on; before
 *              the first step every worker that asks is a member);
 *   ready    = at least one gradient of version t is in, every member still
 *              present has pushed (or had its push rejected), before the
 *              first step the start-up gate is open ([cluster] workers have
 *              joined, or worker_timeout_ms passed since the first did), and
 *              the staleness bound holds;
 *   the step = weighted mean of the gradients (weights n_examples), the
 *              K-FAC (or SGD) update, the mean of the pushed batch-norm
 *              states, a steps.csv row, t + 1 published to every client
 *              waiting for it.
 */
#include "ps/server_int.h"
#include "ps/jobs.h"
#include "ps/persist.h"
#include "ps/refresh_send.h"
#include "ps/round.h"
#include "ps/round_int.h"
#include "ps/guard.h"
#include "ps/io.h"
#include "ps/member.h"
#include "ps/report.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/kfac/kfac_linalg.h"
#include "common/base/log.h"
#include "common/nn/nn_par.h"
#include "common/base/ratelimit.h"
#include "common/base/clock.h"

/* ---- Params ------------------------------------------------------------------ */

/* Does a worker sent Params now compute statistics with its next gradient? */
static int s_want_stats(const ps_server_t *s, const ps_peer_t *p) {
    return p->role == MSG_ROLE_WORKER && s->model.kfac && s->cfg->stats_mode == RUNCFG_STATS_SYNC &&
           (ps_sched_refresh(s->sched) ? ps_refresh_wanted(ps_sched_refresh(s->sched), s->round->t, NULL) > 0
                                       : kfac_schedule_due(s->round->t, ps_sched_fac_interval(s->sched)));
}

/* Hold p's request for Params instead of sending now (its previous Params
 * is still queued, or its pipe is full): it waits for any version from the
 * current one on, sent by ps_round_resend_held() once the pipe has room. */
static int s_hold_params(ps_server_t *s, ps_peer_t *p) {
    ps_member_wait_params(p, (uint64_t)s->round->t);
    return 0;
}

int ps_round_send_params(ps_server_t *s, ps_peer_t *p) {
    if (!s->sock) return -EPIPE;
    if (ps_sched_refresh(s->sched) && p->role == MSG_ROLE_STATSD)
        return ps_refresh_send_statsd(s, p); /* ps/refresh_send.c */
    /* One Params per client in ZeroMQ's hands: a client that does not read
     * them (a flood of GetParams) pins one buffer, not one per request. */
    if (zloop_track_pending(p->params_track) > 0) {
        ps_counters_bump(&s->ctr, PS_CTR_PARAMS_HELD);
        return s_hold_params(s, p);
    }
    int ws = s_want_stats(s, p);
    if (s->round->pver[ws] != s->round->t || !s->round->pbuf[ws]) {
        s->round->pver[ws] = -1;
        msg_t m;
        msg_init(&m, MSG_PARAMS, MSG_ROLE_PS, 0);
        m.params.version = (uint64_t)s->round->t;
        m.params.params = s->model.net->params;
        m.params.n_params = s->model.net->n_params;
        m.params.state = s->model.net->n_state ? s->model.net->state : NULL;
        m.params.n_state = s->model.net->n_state;
        m.params.want_stats = ws;
        if (ws && ps_sched_refresh(s->sched)) /* adaptive: only the layers due (ps/refresh.h) */
            m.params.n_stats_layers =
                (size_t)ps_refresh_wanted(ps_sched_refresh(s->sched), s->round->t, &m.params.stats_layers);
        /* Encoded once per version into one buffer that every send shares
         * (no copy per client) and that the next version refills in place
         * (no allocation, no fresh pages). A send still in ZeroMQ's hands (a
         * slow client) keeps the old buffer alive; this version gets a new
         * one. */
        if (zloop_buf_busy(s->round->pbuf[ws])) zloop_buf_free(&s->round->pbuf[ws]);
        size_t need = 0;
        uint8_t probe[1]; /* no buffer yet: only the size is learnt */
        int rc = s->round->pbuf[ws] ? msg_encode_to(&m, zloop_buf_data(s->round->pbuf[ws]),
                                                   zloop_buf_cap(s->round->pbuf[ws]), &need)
                                   : msg_encode_to(&m, probe, 0, &need);
        if (rc == -ENOSPC) {
            zloop_buf_free(&s->round->pbuf[ws]);
            rc = (s->round->pbuf[ws] = zloop_buf_new(need))
                     ? msg_encode_to(&m, zloop_buf_data(s->round->pbuf[ws]), need, &need)
                     : -ENOMEM;
        }
        if (rc < 0) {
            log_error("encoding Params failed: %s", strerror(-rc));
            return rc;
        }
        s->round->plen[ws] = need;
        s->round->pver[ws] = s->round->t;
    }
    if (!p->params_track) p->params_track = zloop_track_new(); /* NULL (no memory): sent untracked */
    int rc = zloop_send_buf_tracked(s->sock, &p->route, s->round->pbuf[ws], s->round->plen[ws], p->params_track);
    ps_member_answered(p);
    if (rc == -EAGAIN) { /* a full pipe is not a closed one: sent when it has room */
        ps_counters_bump(&s->ctr, PS_CTR_SEND_FULL);
        return s_hold_params(s, p);
    }
    if (rc < 0) {
        log_debug("Params %ld not delivered to %s#%u: %s", s->round->t, msg_role_name(p->role), p->id, strerror(-rc));
        return rc;
    }
    ps_member_sent_params(p, (uint64_t)s->round->t, p->role == MSG_ROLE_STATSD || ws);
    if (p->role == MSG_ROLE_WORKER) {
        p->has_params = 1;
        p->params_ns = clock_now_ns();
        if (s->round->steps_run == 0 && s->life.phase == PS_PHASE_RUNNING) {
            ps_member_join_first(p); /* before the first step everyone who asks is in round 0 */
            ps_round_state_worker_in(s->round, clock_now_ns());
        }
    }
    return 0;
}

/* Answer now if the version is there, else hold the request. */
static void s_wait_params(ps_server_t *s, ps_peer_t *p, uint64_t min_version) {
    if (s->life.phase == PS_PHASE_RUNNING && min_version <= (uint64_t)s->round->t) {
        ps_round_send_params(s, p);
        return;
    }
    ps_member_wait_params(p, min_version);
}


/* ---- clients coming and going -------------------------------------------------- */

void ps_round_peer_joined(ps_server_t *s, ps_peer_t *p) {
    (void)s;
    (void)p; /* a worker becomes a member when it is sent Params; an invertd when it asks for work */
}

void ps_round_peer_gone(ps_server_t *s, ps_peer_t *p, const char *why) {
    ps_leave_t leave = ps_member_leave(p);
    if (leave.sum_now && s->cfg->aggregate != RUNCFG_AGGREGATE_MEAN) {
        /* A robust rule sees every gradient at the step; this one may be
         * forgotten before it, and summing it now would let a worker that
         * pushes and leaves bypass the rule: it is dropped. */
        ps_member_drop_held(p);
        ps_ident_unpush(p->ident, s->round->t);
        ps_round_state_grad_out(s->round);
        log_info("step %ld: the gradient of a worker that left before the step is not used ([ps] aggregate = %s)",
                 s->round->t, s->cfg->aggregate == RUNCFG_AGGREGATE_MEDIAN ? "median" : "trimmed_mean");
    } else if (leave.sum_now) {
        /* It may be forgotten before the step: its gradient counts now
         * (before the others', which keeps the sum deterministic for the
         * same sequence of events). */
        ps_round_state_commit_grad(s->round, s->model.net, p);
        if (!s->round->folded) ps_round_state_commit_stats(s->round, p);
    }
    char name[160];
    ps_peer_name(p, name, sizeof name);
    if (p->role == MSG_ROLE_WORKER) {
        if (leave.blocking) {
            if (!p->present) ps_counters_bump(&s->ctr, PS_CTR_DROPPED);
            log_warn("%s %s: dropped from the round of step %ld (it rejoins when it sends again)", name, why, s->round->t);
        } else if (!p->present) {
            log_info("%s %s", name, why);
        }
    } else if (p->role == MSG_ROLE_INVERTD) {
        int b = s->model.kfac ? ps_sched_owner_block(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched), p->id)
                              : -1;
        if (b >= 0) {
            uint64_t id = ps_sched_blocks(s->sched)[b].cur.id;
            ps_sched_owner_gone(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched), p->id);
            log_warn("%s %s: its job %" PRIu64 " (layer %d factor %d, n=%d) goes back to the queue", name, why, id,
                     s->model.kfac->blocks[b].layer, s->model.kfac->blocks[b].factor, s->model.kfac->blocks[b].n);
        } else if (!p->present) {
            log_info("%s %s", name, why);
        }
    } else if (!p->present) {
        log_info("%s %s", name, why);
    }
    ps_jobs_dispatch(s);
    ps_round_try_step(s);
}

/* ---- requests ------------------------------------------------------------------- */

void ps_round_get_params(ps_server_t *s, ps_peer_t *p, const msg_t *m) {
    s_wait_params(s, p, m->get_params.min_version);
}

void ps_round_stats_push(ps_server_t *s, ps_peer_t *p, msg_t *m) {
    const msg_stats_push_t *sp = &m->stats_push;
    if (!s->model.kfac) {
        ps_io_reject(s, &p->route, p, MSG_STATS_PUSH, MSG_ERR_UNEXPECTED,
                      "[optimizer] kind is sgd: this run takes no statistics");
        return;
    }
    if (s->life.phase != PS_PHASE_RUNNING) {
        ps_member_wait_params(p, (uint64_t)s->round->t + 1);
        return;
    }
    if (sp->params_version > (uint64_t)s->round->t) {
        ps_io_reject(s, &p->route, p, MSG_STATS_PUSH, MSG_ERR_INVALID,
                      "stats_push.params_version %" PRIu64 " is ahead of the server's %ld", sp->params_version, s->round->t);
        ps_round_send_params(s, p);
        return;
    }
    /* What one statistics worker may put in: one batch's worth of examples,
     * one push per parameter version (a burst would replace the curvature:
     * each fold has weight 1 - stat_decay). */
    if (sp->n_examples > RUNCFG_STATSD_BATCH_MAX) { /* each statistics worker's batch is its own, at most this */
        ps_io_reject(s, &p->route, p, MSG_STATS_PUSH, MSG_ERR_INVALID,
                     "stats_push.n_examples = %" PRIu64 " is more than any statistics batch ([statsd] batch <= %d)",
                     sp->n_examples, RUNCFG_STATSD_BATCH_MAX);
        ps_round_send_params(s, p);
        return;
    }
    /* Statistics of the parameters kfac-ps last sent this connection, no
     * other: a statistics worker that joins at step t cannot push versions
     * 0, 1, ..., t back to back (each would be folded and enter the trace
     * history the guard judges by). */
    if (!p->mb.has_sent || sp->params_version != p->mb.sent_version) {
        if (p->mb.has_sent)
            ps_io_reject(s, &p->route, p, MSG_STATS_PUSH, MSG_ERR_INVALID,
                         "stats_push for parameter version %" PRIu64 ": the Params last sent to this statistics "
                         "worker were of version %" PRIu64 " (statistics are taken for those, one push each)",
                         sp->params_version, p->mb.sent_version);
        else
            ps_io_reject(s, &p->route, p, MSG_STATS_PUSH, MSG_ERR_INVALID,
                         "stats_push for parameter version %" PRIu64 ": no Params were sent to this statistics worker "
                         "yet (statistics are taken for those, one push each)", sp->params_version);
        ps_round_send_params(s, p);
        return;
    }
    /* this version's one push, taken or not; kept by its identity, so
     * leaving and coming back does not reset it */
    if (ps_ident_stats_version(p->ident, sp->params_version) < 0) {
        ps_io_reject(s, &p->route, p, MSG_STATS_PUSH, MSG_ERR_INVALID,
                     "stats_push for parameter version %" PRIu64 ": this statistics worker already pushed version %"
                     PRIu64 " (one push per version)", sp->params_version, p->ident->stats_version);
        s_wait_params(s, p, p->ident->stats_version + 1);
        return;
    }
    /* Checked by the statistics guard and folded on the curvature thread
     * (ps/curv.h); the statistics worker hears back when that is done
     * (ps_round_fold_done). */
    ps_curv_task_t *t = ps_curv_task(s->curv, PS_CURV_FOLD);
    if (!t) {
        ps_io_reject(s, &p->route, p, MSG_STATS_PUSH, MSG_ERR_INVALID, "statistics not folded (out of memory)");
        ps_round_send_params(s, p);
        return;
    }
    t->peer_id = p->id;
    t->version = (long)sp->params_version;
    t->guard = 1;
    msg_take(&t->msg, m);
    if (ps_curv_submit(s->curv, t) < 0) {
        ps_curv_release(s->curv, t);
        ps_member_wait_params(p, (uint64_t)s->round->t + 1);
    }
}

void ps_round_fold_done(ps_server_t *s, ps_curv_task_t *t) {
    const double t0 = clock_now_ms();
    ps_peer_t *p = t->peer_id ? ps_peers_by_id(&s->peers, t->peer_id) : NULL;
    const kfac_stats_t *batch = t->batch;
    const int from_round = t->msg.type != MSG_STATS_PUSH;
    if (t->rc < 0) {
        if (from_round)
            log_warn("step %ld: the workers' statistics were not folded (%s)", s->round->t, t->err);
        else if (p && s->life.phase == PS_PHASE_RUNNING) {
            ps_io_reject(s, &p->route, p, MSG_STATS_PUSH, MSG_ERR_INVALID, "%s", t->err);
            ps_round_send_params(s, p);
        }
    } else {
        ps_counters_bump(&s->ctr, PS_CTR_FOLDS);
        if (p) ps_peer_accepted(p);
        ps_sched_block_t *blocks = ps_sched_blocks(s->sched);
        for (int b = 0; b < ps_sched_n_blocks(s->sched); b++) ps_sched_folded(&blocks[b], t->versions[b]);
        kfac_opt_bn_publish(s->model.kfac, t->bn, t->bn_has);
        if (ps_sched_refresh(s->sched))
            ps_refresh_folded(ps_sched_refresh(s->sched), batch, s->round->t, s->model.kfac, blocks);
        /* Its next statistics are of the next version: one push per version. */
        if (p) s_wait_params(s, p, (uint64_t)t->version + 1);
    }
    ps_round_state_add_curv_ms(s->round, clock_now_ms() - t0);
    ps_jobs_dispatch(s);
    ps_round_try_step(s);
}

void ps_round_peer_error(ps_server_t *s, ps_peer_t *p, const msg_t *m) {
    char name[160];
    uint64_t skipped = 0;
    ps_peer_name(p, name, sizeof name);
    int b = p->role == MSG_ROLE_INVERTD && s->model.kfac
                ? ps_sched_owner_block(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched), p->id)
                : -1;
    if (b >= 0) {
        /* The daemon gave up on its job: like a JobResult with an error,
         * another daemon tries that version (ps_jobs_failed_by). */
        long version = ps_sched_blocks(s->sched)[b].cur.version;
        ps_sched_owner_gone(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched), p->id);
        ps_jobs_failed_by(s, p, b, version);
    }
    char text[300];
    if (ps_io_peer_log_ok(s, &skipped))
        log_warn("%s reports %s: %s%s", name, msg_error_code_name(m->error.code),
                 log_escape(m->error.text, text, sizeof text), b >= 0 ? " (its job goes to another inverse daemon, or fails)" : "");
}

void ps_round_after_reject(ps_server_t *s, ps_peer_t *p, const msg_t *m) {
    if (s->life.phase != PS_PHASE_RUNNING) return;
    switch (m->type) {
    case MSG_GRAD_PUSH:
        if (p->role != MSG_ROLE_WORKER) return;
        if (m->grad_push.version == (uint64_t)s->round->t && !p->mb.pushed) {
            /* Not waited for in this round; it gets the next version. */
            ps_member_refused(p, (uint64_t)s->round->t + 1);
            ps_round_try_step(s);
        } else if (m->grad_push.version < (uint64_t)s->round->t) {
            ps_round_send_params(s, p);
        }
        break;
    case MSG_STATS_PUSH:
        if (p->role == MSG_ROLE_STATSD) ps_round_send_params(s, p);
        break;
    case MSG_JOB_RESULT:
        /* an invalid result, answered with the next job (a cut): charged */
        if (!ps_ident_take_token(p->ident, clock_now_ns(), PS_REQ_PER_S, PS_REQ_BURST)) {
            ps_counters_bump(&s->ctr, PS_CTR_RATE_LIMITED);
            ps_member_answered(p);
            break;
        }
        ps_jobs_after_reject(s, p);
        break;
    default:
        break;
    }
}

/* ---- the step ----------------------------------------------------------------------- */

void ps_round_schedule(ps_server_t *s) {
    double d;
    int changed = ps_sched_at(s->sched, s->round->t, &d);
    if (changed < 0) return; /* validated at start-up */
    if (changed)
        log_info("step %ld: interval milestone: statistics every %d steps (stats = sync), inverses every %d (refresh = "
                 "every)",
                 s->round->t, ps_sched_fac_interval(s->sched), ps_sched_inv_interval(s->sched));
    if (s->model.kfac) d = ps_damping_at(s->damping, d, s->model.kfac->opts.damping); /* [kfac] damping_rule */
    if (s->model.kfac && d != s->model.kfac->opts.damping) {
        if (s->round->t > 0 && !ps_damping_adaptive(s->damping))
            log_info("step %ld: damping milestone: damping %g -> %g", s->round->t, s->model.kfac->opts.damping, d);
        s->model.kfac->opts.damping = d; /* read when the next job is cut */
    }
}

static void s_open_round(ps_server_t *s) {
    ps_round_schedule(s);
    ps_member_open_round(&s->peers);
    ps_round_state_open(s->round, s->model.net, clock_now_ns());
}

static void s_submit_eval(ps_server_t *s, int final) {
    if (!s->eval) return;
    const float *polyak = ps_model_polyak(&s->model);
    const float *state = s->model.net->n_state ? s->model.net->state : NULL;
    int rc = ps_eval_submit(s->eval, (uint64_t)s->round->t, ps_io_wall_s(s), s->model.net->params, polyak, state, final);
    if (rc < 0 && rc != -EBUSY) { /* -EBUSY: skipped, evaluations fall behind (logged once) */
        log_error("could not queue an evaluation: %s", strerror(-rc));
        return;
    }
}

/* The run is over (steps or target): final evaluation, then shutdown. */
void ps_round_request_shutdown(ps_server_t *s, int exit_code) {
    ps_life_request_shutdown(&s->life, exit_code);
}

static void s_finish(ps_server_t *s, const char *reason) {
    if (!ps_life_finish(&s->life, s->round->t)) return;
    snprintf(s->reason, sizeof s->reason, "%s", reason);
    const ps_eval_result_t *ev = ps_eval_last(s->eval);
    if (ev && (long)ev->step == s->round->t) {
        /* The evaluation of this very step is in (the target was reached
         * before the next step): nothing left to wait for. */
        log_info("%s", reason);
        ps_round_request_shutdown(s, 0);
        return;
    }
    log_info("%s; final evaluation at step %ld", reason, s->round->t);
    if (ps_eval_queued_step(s->eval) == s->round->t) return; /* the evaluation of this step is already queued */
    s_submit_eval(s, 1);
    if (ps_eval_queued_step(s->eval) != s->round->t) ps_round_request_shutdown(s, 0);
}

/* [kfac] damping_rule = adaptive: the update of t (rc < 0: failed) and the
 * round's mean loss into the rule's window (ps/damping.h). */
static void s_step_damping(ps_server_t *s, int rc) {
    if (rc < 0) {
        ps_damping_step_failed(s->damping);
        return;
    }
    if (ps_damping_after_step(s->damping, s->round->t, s->round->acc_loss / s->round->acc_n, &s->model.last)) {
        const kfac_lm_t *lm = ps_damping_lm(s->damping);
        log_debug("step %ld: adaptive damping: rho %.3g (loss change %.4g, predicted %.4g)", s->round->t, lm->rho,
                  lm->observed, lm->predicted);
    }
}

/* Update: the K-FAC (or SGD) step from the mean gradient, and the mean of
 * the workers' batch-norm state. Fills the row's step size and inverse
 * ages. Returns 0, or -1 when the run must stop (too many non-finite
 * updates in a row; s->reason says why). */
static int s_step_update(ps_server_t *s, ps_step_row_t *row, int grad_finite) {
    double step_size = 0.0, t_math = clock_now_ms();
    size_t bad = 0;
    if (s->model.kfac) /* the quadratic model's g^T m and the inverse-age bound (ps/damping.h) */
        ps_damping_before_step(s->damping, s->model.kfac, s->round->grad_acc, &s->round->lowrank, s->round->t);
    const int rc = ps_model_update(&s->model, s->round->grad_acc, grad_finite, &s->round->lowrank, s->round->t,
                                   &step_size, &bad);
    if (s->model.kfac) s_step_damping(s, rc);
    if (rc < 0) {
        ps_counters_bump(&s->ctr, PS_CTR_STEP_FAILURES);
        int in_a_row = ps_round_state_step_failed(s->round);
        if (s->model.kfac)
            log_error("step %ld: the update is not finite (%s); parameters left unchanged", s->round->t, strerror(-rc));
        else
            log_error("step %ld: the mean gradient is not finite (parameter %zu is %g); parameters left unchanged",
                      s->round->t, bad, (double)s->round->grad_acc[bad]);
        if (in_a_row >= PS_MAX_STEP_FAILURES) {
            if (s->model.kfac)
                snprintf(s->reason, sizeof s->reason,
                         "the update was not finite for %d steps in a row (diverged: lower eta_max/kl_c0 or lr, raise "
                         "damping)",
                         PS_MAX_STEP_FAILURES);
            else
                snprintf(s->reason, sizeof s->reason,
                         "the mean gradient was not finite for %d steps in a row (diverged: lower lr)",
                         PS_MAX_STEP_FAILURES);
            log_error("%s", s->reason);
            return -1;
        }
        if (!s->model.kfac) {
            row->step_size = 0.0;
            return 0;
        }
    } else {
        ps_round_state_step_ok(s->round);
    }
    if (s->model.kfac) {
        row->damping = s->model.kfac->opts.damping;
        ps_sched_ages(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched), s->round->t, &row->inv_age_mean,
                      &row->inv_age_max, &row->stats_age_mean);
        double now_s = clock_now_ms() * 1e-3, ms = 0.0;
        int n_inv = 0;
        for (int b = 0; b < ps_sched_n_blocks(s->sched); b++)
            if (s->model.kfac->blocks[b].inv->valid) {
                ms += (now_s - s->model.kfac->blocks[b].inv_time_s) * 1e3;
                n_inv++;
            }
        row->inv_age_ms_mean = n_inv ? ms / n_inv : 0.0;
    }
    if (s->round->state_n > 0) {
        /* state = state_acc / sum(n_examples): the mean of the workers'
         * running statistics (or their robust combination, state_n = 1);
         * published only when every value is finite and no variance is
         * negative, else the previous state stays */
        size_t bad = s->model.net->n_state;
        for (size_t i = 0; i < s->model.net->n_state && bad == s->model.net->n_state; i++)
            if (!isfinite(s->round->state_acc[i] / s->round->state_n)) bad = i;
        if (bad == s->model.net->n_state) {
            for (size_t i = 0; i < s->model.net->n_state; i++)
                s->model.net->state[i] = (float)(s->round->state_acc[i] / s->round->state_n);
        } else {
            ps_counters_bump(&s->ctr, PS_CTR_STATE_KEPT);
            log_warn("step %ld: the combined batch-norm running statistics are not finite (value %zu): the "
                     "previous ones are kept (%" PRIu64 " times so far)",
                     s->round->t, bad, ps_counter(&s->ctr, PS_CTR_STATE_KEPT));
        }
    }
    /* The update runs on the loop thread: watch how long it holds it. */
    double math_ms = clock_now_ms() - t_math;
    if (ps_round_state_step_time(s->round, math_ms, PS_SLOW_STEP_MS))
        log_warn("step %ld: the update took %.0f ms on the loop thread and %d preconditioning thread(s) (messages "
                 "wait meanwhile; [ps] update_threads sets the threads)",
                 s->round->t, math_ms, nn_par_threads(s->model.update_par));
    row->step_size = step_size;
    return 0;
}

/* Record: the step's row of steps.csv (written after the publish, whose
 * time it holds) and the progress sums. */
static void s_step_record(ps_server_t *s, ps_step_row_t *row) {
    row->step = (uint64_t)s->round->t + 1;
    row->wall_s = ps_io_wall_s(s);
    row->train_loss = s->round->acc_loss / s->round->acc_n;
    row->train_acc = (double)s->round->acc_correct / s->round->acc_n;
    row->inverses_installed = ps_counter(&s->ctr, PS_CTR_INSTALLED);
    row->stats_folded = ps_counter(&s->ctr, PS_CTR_FOLDS);
    row->workers = s->round->n_grads;
    row->grad_age_mean = s->round->n_grads ? s->round->grad_age_sum / s->round->n_grads : 0.0;
    row->grad_age_max = s->round->grad_age_max;
    row->grad_weight_mean = ps_round_grad_weight_mean(s->round);
    ps_report_step(s, row);
}

/* Publish: version t + 1, the new round, Params to every client waiting
 * for it, evaluation and progress when due, the end of the run. */
static void s_step_publish(ps_server_t *s) {
    ps_round_state_advance(s->round, clock_now_ns());
    ps_report_stepped(s);
    s_open_round(s);
    /* Publish t: every client waiting for this version. */
    for (int i = 0; i < s->peers.n; i++) {
        ps_peer_t *p = s->peers.v[i];
        if (p->mb.wait == PS_WAIT_PARAMS && p->mb.min_version <= (uint64_t)s->round->t) ps_round_send_params(s, p);
    }
    /* Members of the new round: the workers present that hold parameters. */
    ps_member_enlist(&s->peers);
    ps_persist_after_step(s);
    if (s->round->steps_done % s->cfg->eval_every == 0) s_submit_eval(s, 0);
    if (s->round->steps_done % s->cfg->progress_every == 0 || s->round->steps_done == s->cfg->steps) ps_report_progress(s);
    ps_report_no_statsd(s);
    ps_report_publish(s);
    if (s->round->steps_done >= s->cfg->steps) {
        char why[96];
        snprintf(why, sizeof why, "all %" PRIu64 " steps done", s->cfg->steps);
        s_finish(s, why);
    } else {
        ps_jobs_dispatch(s);
    }
}

/* The round's gradients into the step's gradient: the weighted mean, or
 * the robust rule of [ps] aggregate. Returns 1 when its pass found every
 * float of it finite (the update then makes no pass to check), else 0. */
static int s_aggregate(ps_server_t *s) {
    if (s->cfg->aggregate == RUNCFG_AGGREGATE_MEAN)
        return ps_round_state_average(s->round, s->model.net, &s->peers, s->model.update_par) ==
               s->model.net->n_params;
    int median = s->cfg->aggregate == RUNCFG_AGGREGATE_MEDIAN;
    int k = ps_round_state_robust(s->round, s->model.net, &s->peers, median ? -1 : s->cfg->aggregate_trim,
                                  s->model.update_par);
    if (k > 0) {
        ps_counters_bump(&s->ctr, PS_CTR_ROBUST_STEPS);
        return 0;
    }
    ps_counters_bump(&s->ctr, PS_CTR_ROBUST_FALLBACKS);
    uint64_t skipped = 0;
    if (ratelimit_ok(ps_guard_rl(s->guard, PS_GUARD_LINE_ROBUST), clock_now_ns(), PS_LOG_EVERY_MS, &skipped))
        log_warn("step %ld: %d gradient(s), too few for [ps] aggregate = %s (it needs %d): their mean was used (%" PRIu64
                 " such steps so far)",
                 s->round->t, s->round->n_grads, median ? "median" : "trimmed_mean",
                 median ? 3 : 2 * s->cfg->aggregate_trim + 1, ps_counter(&s->ctr, PS_CTR_ROBUST_FALLBACKS));
    return 0;
}

/* The step of a complete round: average, update, record, publish. */
static void s_apply_step(ps_server_t *s) {
    ps_step_row_t row;
    memset(&row, 0, sizeof row);
    row.inv_age_max = -1;
    /* The step's period, split for steps.csv (common/run/rundir.h). */
    double t_update = clock_now_ms();
    row.wait_ms = s->round->open_ms > 0.0 ? t_update - s->round->open_ms : 1e3 * ps_io_wall_s(s); /* first: since the start */
    row.curv_ms = s->round->curv_ms;
    row.eval_busy = s->round->eval_busy || ps_eval_pending(s->eval) > 0;
    /* The parameters this round's gradients were taken at, and none was an
     * outlier: good ones to come back to (ps/guard.h). */
    ps_guard_step(s->guard, s->round->norm_rejects, s->round->steps_done, s->model.net->params, s->model.net->state,
                  s->round->t, clock_now_ms() * 1e-3);
    const int grad_finite = s_aggregate(s);
    if (s_step_update(s, &row, grad_finite) < 0) {
        ps_round_request_shutdown(s, 1);
        return;
    }
    double t_publish = clock_now_ms();
    row.update_ms = t_publish - t_update;
    s_step_record(s, &row);
    s_step_publish(s);
    ps_round_state_open_timing(s->round, clock_now_ms(), ps_eval_pending(s->eval) > 0);
    row.publish_ms = s->round->open_ms - t_publish;
    /* The row after the publish (it holds publish_ms); the ages are those
     * of the version the step was computed at. */
    rundir_step(s->metrics, &row);
    if (s->model.kfac) rundir_ages(s->metrics, s->model.kfac, row.step, s->round->t - 1);
}

/* Every member's gradient of this round was refused: no gradient to step
 * with, and every member waits for the next version. Back to the last good
 * parameters when outliers were among the refusals (the parameters may be
 * wrecked), momentum zeroed, the inverses installed since forgotten, the
 * norm histories reset; then a new version without a step. */
static void s_recover(ps_server_t *s) {
    ps_counters_bump(&s->ctr, PS_CTR_RECOVERIES);
    long back = -1;
    double snap_s = 0.0;
    if (ps_guard_recover(s->guard, s->round->norm_rejects, s->model.net->params, s->model.net->state, &back, &snap_s) ==
        PS_GUARD_RECOVER_GIVE_UP) {
        snprintf(s->reason, sizeof s->reason,
                 "every worker's gradient was refused in %d rounds in a row, even after going back to the last good "
                 "parameters: check [ps] grad_norm_max_ratio and the workers' logs",
                 PS_RECOVER_MAX_IN_A_ROW);
        log_error("%s", s->reason);
        ps_round_request_shutdown(s, 1);
        return;
    }
    char what[256] = "the same parameters again";
    if (back >= 0) {
        const int forgot = ps_model_forget(&s->model, snap_s);
        snprintf(what, sizeof what,
                 "the parameters of step %ld (momentum zeroed, %d inverse%s installed since forgotten)", back, forgot,
                 forgot == 1 ? "" : "s");
    }
    log_warn("step %ld: every worker's gradient was refused (%d as norm outliers): publishing %s as version %ld, "
             "without a step, with the norm histories reset (recovery %" PRIu64 ")",
             s->round->t, s->round->norm_rejects, what, s->round->t + 1, ps_counter(&s->ctr, PS_CTR_RECOVERIES));
    s_step_publish(s);
}

/* The facts ps_round_state_decide needs besides the round's own state. */
static void s_round_view(const ps_server_t *s, ps_round_view_t *v) {
    memset(v, 0, sizeof *v);
    v->running = s->life.phase == PS_PHASE_RUNNING;
    v->first_step = s->round->steps_run == 0;
    v->n_waiting = ps_member_waiting(&s->peers, &v->n_members);
    v->all_refused = ps_member_all_refused(&s->peers);
    v->workers = s->cfg->workers;
    v->now_ns = clock_now_ns();
    v->timeout_ns = s->cfg->worker_timeout_ms * 1000000ULL;
    v->quorum = s->cfg->quorum;
    v->curvature = s->model.kfac != NULL;
    v->bounded = s->model.kfac && s->cfg->max_inverse_staleness >= 0;
    v->bound_ok = !v->bounded || ps_sched_bound_ok(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched), s->round->t,
                                                   s->cfg->max_inverse_staleness, NULL);
}

/* The round's statistics folded into the running factors (once per
 * round), on the curvature thread: the merged statistics go with the task
 * (the round merges the next ones into the task's spare buffer). */
static void s_fold_round(ps_server_t *s) {
    if (!ps_round_state_merge_stats(s->round, &s->peers)) return;
    ps_curv_task_t *t = ps_curv_task(s->curv, PS_CURV_FOLD);
    if (!t) {
        log_warn("step %ld: the workers' statistics were not folded (out of memory)", s->round->t);
        return;
    }
    t->batch = ps_round_state_swap_stats(s->round, t->batch);
    t->version = s->round->t;
    if (ps_curv_submit(s->curv, t) < 0) ps_curv_release(s->curv, t);
}

/* Jobs for the blocks the step needs ([kfac] max_inverse_staleness marks
 * the ones that would hold it up), handed out. Returns 0, or -1 when the
 * run stopped meanwhile. */
static int s_dispatch_for_step(ps_server_t *s) {
    int k = s->cfg->max_inverse_staleness;
    if (k >= 0)
        ps_sched_mark_bound(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched), s->round->t, k, clock_now_ms(),
                            (double)s->cfg->job_timeout_ms);
    ps_jobs_dispatch(s);
    return s->life.phase == PS_PHASE_RUNNING ? 0 : -1;
}

void ps_round_try_step(ps_server_t *s) {
    for (;;) {
        ps_round_view_t view;
        s_round_view(s, &view);
        ps_round_verdict_t v = ps_round_state_decide(s->round, &view);
        if (v.gate_opens) {
            ps_round_state_open_gate(s->round);
            if (v.gate == PS_GATE_OPEN_TIMEOUT)
                log_warn("starting with %d of [cluster] workers = %d gradient workers (waited %.1fs for the others)",
                         view.n_members, s->cfg->workers,
                         s->round->first_worker_ns ? (double)(view.now_ns - s->round->first_worker_ns) * 1e-9 : 0.0);
        }
        switch (v.action) {
        case PS_ROUND_WAIT:
            return;
        case PS_ROUND_RECOVER:
            s_recover(s);
            return;
        case PS_ROUND_FOLD:
            ps_round_state_set_folded(s->round);
            s_fold_round(s);
            continue;
        case PS_ROUND_MARK:
            ps_round_state_set_marked(s->round);
            if (ps_sched_policy(s->sched) == PS_SCHED_EVERY)
                ps_sched_mark_every(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched), s->round->t,
                                    ps_sched_inv_interval(s->sched));
            /* adaptive: blocks are marked when their statistics are recorded (ps_refresh_folded) */
            continue;
        case PS_ROUND_WAIT_INVERSES:
            s_dispatch_for_step(s);
            return;
        case PS_ROUND_STEP:
            if (s->model.kfac && s_dispatch_for_step(s) < 0) return;
            s_apply_step(s);
            return;
        }
        return;
    }
}

/* ---- timer -------------------------------------------------------------------------- */

/* Members that heartbeat but do not push leave the round after [ps]
 * stall_timeout_ms. */
static void s_drop_stalled(ps_server_t *s) {
    ps_peer_t *out[PS_MAX_PEERS];
    uint64_t now = clock_now_ns();
    const uint64_t stall_ns = ps_member_stall_ns(s->cfg->stall_timeout_ms * 1000000ULL,
                                                 ps_guard_push_median_ns(s->guard), s->cfg->stall_factor,
                                                 s->cfg->stall_min_ms * 1000000ULL);
    int n = ps_member_stalled(&s->peers, now, s->round->open_ns, stall_ns, out, PS_MAX_PEERS);
    for (int i = 0; i < n; i++) {
        ps_peer_t *p = out[i];
        ps_member_drop_stalled(p);
        const int n_stalls = ps_ident_stalled(p->ident);
        ps_counters_bump(&s->ctr, PS_CTR_STALLED);
        ps_counters_bump(&s->ctr, PS_CTR_DROPPED);
        char name[160];
        ps_peer_name(p, name, sizeof name);
        if (s->cfg->stall_max_drops && (uint64_t)n_stalls >= s->cfg->stall_max_drops && ps_ident_demote(p->ident)) {
            ps_counters_bump(&s->ctr, PS_CTR_DEMOTED);
            log_warn("%s stalled %d times ([ps] stall_max_drops): no member of the rounds again, its gradients are "
                     "refused", name, n_stalls);
        }
        uint64_t held = 0;
        if (ratelimit_ok(ps_guard_rl(s->guard, PS_GUARD_LINE_STALL), now, PS_LOG_EVERY_MS, &held)) {
            log_warn("%s heartbeats but has not pushed its gradient of step %ld for %.1fs (the stall timeout is %.1fs: "
                     "[ps] stall_factor x the median push time, or stall_timeout_ms): dropped from the rounds until it "
                     "pushes (%" PRIu64 " so far%s)",
                     name, s->round->t,
                     (double)(now - (p->params_ns > s->round->open_ns ? p->params_ns : s->round->open_ns)) * 1e-9,
                     (double)stall_ns * 1e-9, ps_counter(&s->ctr, PS_CTR_STALLED), held ? ", some not logged" : "");
        }
    }
    if (n > 0) ps_round_try_step(s);
}

void ps_round_resend_held(ps_server_t *s) {
    for (int i = 0; i < s->peers.n && s->life.phase == PS_PHASE_RUNNING; i++) {
        ps_peer_t *p = s->peers.v[i];
        if (p->mb.wait == PS_WAIT_PARAMS && p->mb.min_version <= (uint64_t)s->round->t &&
            zloop_track_pending(p->params_track) == 0)
            ps_round_send_params(s, p);
    }
}

void ps_round_tick(ps_server_t *s) {
    if (s->life.phase != PS_PHASE_RUNNING) return;
    ps_round_resend_held(s);
    s_drop_stalled(s);
    if (s->life.phase != PS_PHASE_RUNNING) return;
    ps_jobs_dispatch(s); /* overdue jobs become available */
    ps_round_try_step(s);      /* the start-up gate may have opened */
    if (s->life.phase != PS_PHASE_RUNNING) return;
    ps_report_wait(s);
    ps_report_curvature(s);
    ps_report_publish(s);
}

/* ---- evaluation and summary --------------------------------------------------------- */

void ps_round_eval_done(const ps_eval_result_t *r, int status, void *user) {
    ps_server_t *s = user;
    if (status != 0) return;
    rundir_eval(s->metrics, r->step, r->wall_s, r->loss, r->acc, r->polyak_loss, r->polyak_acc);
    log_info("eval at step %" PRIu64 ": test loss %.4f acc %.2f%% (polyak loss %.4f acc %.2f%%) on %d examples in %.0f ms",
             r->step, r->loss, 100.0 * r->acc, r->polyak_loss, 100.0 * r->polyak_acc, r->n, r->eval_ms);
    if (s->life.phase == PS_PHASE_RUNNING) {
        double target = s->cfg->target_acc;
        if (target > 0 && (r->acc >= target || r->polyak_acc >= target)) {
            char why[160];
            snprintf(why, sizeof why, "target accuracy %.2f%% reached at step %" PRIu64 " (test %.2f%%, polyak %.2f%%)",
                     100.0 * target, r->step, 100.0 * r->acc, 100.0 * r->polyak_acc);
            s_finish(s, why);
        }
    } else if (s->life.phase == PS_PHASE_FINISHING && (long)r->step == s->life.final_step) {
        ps_round_request_shutdown(s, 0);
    }
}

