/* ps/report.c — see report.h. */
#include "ps/report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "ps/http.h"
#include "ps/io.h"
#include "ps/member.h"
#include "common/base/ratelimit.h"

struct ps_report {
    /* the progress line's period */
    double prog_loss, prog_acc;    /* sums since the last progress line */
    int prog_n;
    uint64_t prog_ns;              /* time of the last progress line */
    uint64_t prog_step;            /* step count at the last progress line */
    /* the last step's figures (the summary line, the live view) */
    double last_inv_age_mean;
    long last_inv_age_max;         /* -1: no inverse yet */
    double last_train_loss, last_train_acc;
    /* the live view ([ps] metrics; NULL: off) */
    ps_http_t *http;
    ps_http_block_t *http_blocks;  /* (n_blocks) snapshot scratch */
    /* the curvature watch ([ps] curvature_warn_s) */
    uint64_t first_step_ns;        /* when the first step was applied (0: none yet) */
    uint64_t curv_installed_seen, curv_folds_seen; /* counters at the last check */
    uint64_t curv_inv_ns, curv_stats_ns;           /* when they last moved (or the first step) */
    int curv_stale_inv, curv_stale_stats;          /* idle longer than curvature_warn_s now */
    int warned_curv_inv, warned_curv_stats;
    int warned_no_stats;           /* the "no statistics after 20 steps" line was logged */
    ratelimit_t rl_wait;           /* "step t has waited ..." lines */
};

ps_report_t *ps_report_new(void) {
    ps_report_t *r = calloc(1, sizeof *r);
    if (r) r->last_inv_age_max = -1;
    return r;
}

void ps_report_free(ps_report_t **r_p) {
    if (!r_p || !*r_p) return;
    ps_report_t *r = *r_p;
    *r_p = NULL;
    ps_http_free(&r->http);
    free(r->http_blocks);
    free(r);
}

int ps_report_http_start(ps_server_t *s, const char *bind, char *err, size_t err_len) {
    ps_report_t *r = s->report;
    int n_blocks = ps_sched_n_blocks(s->sched);
    if (!(r->http = ps_http_new(bind, n_blocks, err, err_len))) return -EIO;
    if (n_blocks && !(r->http_blocks = calloc((size_t)n_blocks, sizeof *r->http_blocks))) {
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    const char *colon = strrchr(bind, ':');
    log_info("metrics (Prometheus text format) on http://%.*s:%d/metrics", (int)(colon ? colon - bind : 0), bind,
             ps_http_port(r->http));
    ps_report_publish(s);
    return 0;
}

void ps_report_stepped(ps_server_t *s) {
    if (!s->report->first_step_ns) s->report->first_step_ns = ps_round_last_step_ns(s->round);
}

void ps_report_start(ps_server_t *s, uint64_t now_ns) {
    s->report->prog_ns = now_ns;
    s->report->prog_step = ps_round_steps_done(s->round);
}

void ps_report_step(ps_server_t *s, const ps_step_row_t *row) {
    s->report->last_inv_age_mean = row->inv_age_mean;
    s->report->last_inv_age_max = row->inv_age_max;
    s->report->last_train_loss = row->train_loss;
    s->report->last_train_acc = row->train_acc;
    s->report->prog_loss += row->train_loss;
    s->report->prog_acc += row->train_acc;
    s->report->prog_n++;
}

void ps_report_progress(ps_server_t *s) {
    uint64_t now = clock_now_ns();
    double dt = (double)(now - s->report->prog_ns) * 1e-9;
    double rate = dt > 0 ? (double)(ps_round_steps_done(s->round) - s->report->prog_step) / dt : 0.0;
    char test[64] = "test -", age[48] = "", eta[32] = "?";
    const ps_eval_result_t *ev = ps_eval_last(s->eval);
    if (ev) snprintf(test, sizeof test, "test %.1f%% (polyak %.1f%%)", 100.0 * ev->acc, 100.0 * ev->polyak_acc);
    if (s->model.kfac) {
        if (s->report->last_inv_age_max >= 0)
            snprintf(age, sizeof age, "  inv age %.1f/%ld", s->report->last_inv_age_mean, s->report->last_inv_age_max);
        else
            snprintf(age, sizeof age, "  inv age -");
    }
    if (rate > 0) ps_format_duration((double)(s->cfg->steps - ps_round_steps_done(s->round)) / rate, eta, sizeof eta);
    /* Curvature that falls behind says so on every line while it lasts (the
     * warning of ps_report_curvature comes once). */
    char behind[96] = "";
    if (s->model.kfac && (s->report->curv_stale_inv || s->report->curv_stale_stats))
        snprintf(behind, sizeof behind, "  CURVATURE BEHIND: no %s for %.0fs",
                 s->report->curv_stale_inv ? "inverse installed" : "statistics folded",
                 (double)(now - (s->report->curv_stale_inv ? s->report->curv_inv_ns : s->report->curv_stats_ns)) * 1e-9);
    double n = s->report->prog_n ? (double)s->report->prog_n : 1.0;
    log_info("step %" PRIu64 "/%" PRIu64 "  loss %.4f  acc %.1f%%  %s%s  workers %d  invertd %d  %.1f steps/s  ETA %s%s",
             ps_round_steps_done(s->round), s->cfg->steps, s->report->prog_loss / n, 100.0 * s->report->prog_acc / n, test, age,
             ps_peers_count(&s->peers, MSG_ROLE_WORKER, 1), ps_peers_count(&s->peers, MSG_ROLE_INVERTD, 1), rate,
             eta, behind);
    s->report->prog_loss = s->report->prog_acc = 0.0;
    s->report->prog_n = 0;
    s->report->prog_ns = now;
    s->report->prog_step = ps_round_steps_done(s->round);
}

void ps_report_wait(ps_server_t *s) {
    uint64_t now = clock_now_ns();
    if (now - ps_round_last_step_ns(s->round) < (uint64_t)PS_WAIT_LOG_MS * 1000000ULL) return;
    if (!ratelimit_ok(&s->report->rl_wait, now, PS_WAIT_LOG_MS, NULL)) return;
    char what[700] = "";
    size_t off = 0;
    int n_members = 0, waiting = ps_member_waiting(&s->peers, &n_members);
    int n_workers = ps_peers_count(&s->peers, MSG_ROLE_WORKER, 1);
    if (waiting > 0) {
        off += (size_t)snprintf(what + off, sizeof what - off, "gradients from");
        int listed = 0;
        for (int i = 0; i < s->peers.n && listed < 4; i++) {
            const ps_peer_t *p = s->peers.v[i];
            if (p->role != MSG_ROLE_WORKER || !p->mb.member || !p->present || p->mb.pushed || p->mb.skipped) continue;
            off += (size_t)snprintf(what + off, sizeof what - off, "%s worker#%u", listed ? "," : "", p->id);
            listed++;
        }
        if (waiting > listed) off += (size_t)snprintf(what + off, sizeof what - off, " and %d more", waiting - listed);
    } else if (ps_round_n_grads(s->round) == 0) {
        snprintf(what, sizeof what, "a gradient (%d gradient worker%s connected)", n_workers, n_workers == 1 ? "" : "s");
    } else if (ps_round_steps_done(s->round) == 0 && !ps_round_gate_open(s->round)) {
        snprintf(what, sizeof what, "[cluster] workers = %d gradient workers to join (%d so far)", s->cfg->workers,
                 n_members);
    } else if (s->model.kfac && s->cfg->max_inverse_staleness >= 0) {
        int blocking = 0;
        const ps_sched_block_t *blocks = ps_sched_blocks(s->sched);
        int n_blocks = ps_sched_n_blocks(s->sched);
        ps_sched_bound_ok(blocks, n_blocks, ps_round_version(s->round), s->cfg->max_inverse_staleness, &blocking);
        int no_stats = 0;
        for (int b = 0; b < n_blocks; b++) no_stats += blocks[b].factor_version < ps_round_version(s->round) - s->cfg->max_inverse_staleness;
        snprintf(what, sizeof what,
                 "inverses at most %d versions old: %d block%s too old (%d without fresh enough statistics; %d jobs in "
                 "flight; %d invertd connected)",
                 s->cfg->max_inverse_staleness, blocking, blocking == 1 ? "" : "s", no_stats,
                 ps_sched_in_flight(blocks, n_blocks), ps_peers_count(&s->peers, MSG_ROLE_INVERTD, 1));
    } else {
        snprintf(what, sizeof what, "nothing known (please report)");
    }
    log_info("step %ld has waited %.0fs for %s", ps_round_version(s->round), (double)(now - ps_round_last_step_ns(s->round)) * 1e-9, what);
}

void ps_report_curvature(ps_server_t *s) {
    if (!s->model.kfac || !s->report->first_step_ns) return;
    uint64_t now = clock_now_ns();
    if (!s->report->curv_inv_ns) s->report->curv_inv_ns = s->report->curv_stats_ns = s->report->first_step_ns;
    if (ps_counter(&s->ctr, PS_CTR_INSTALLED) != s->report->curv_installed_seen) {
        s->report->curv_installed_seen = ps_counter(&s->ctr, PS_CTR_INSTALLED);
        s->report->curv_inv_ns = now;
    }
    if (ps_counter(&s->ctr, PS_CTR_FOLDS) != s->report->curv_folds_seen) {
        s->report->curv_folds_seen = ps_counter(&s->ctr, PS_CTR_FOLDS);
        s->report->curv_stats_ns = now;
    }
    uint64_t limit = (uint64_t)(s->cfg->curvature_warn_s * 1e9);
    s->report->curv_stale_inv = now - s->report->curv_inv_ns > limit;
    s->report->curv_stale_stats = now - s->report->curv_stats_ns > limit;
    if (s->report->curv_stale_inv && !s->report->warned_curv_inv++)
        log_warn("kind = kfac, but %s for %.0fs (%d kfac-invertd connected, %d jobs in flight): the steps use "
                 "inverses that old%s; start inverse daemons, or raise [ps] curvature_warn_s to silence this",
                 ps_counter(&s->ctr, PS_CTR_INSTALLED) ? "no inverse was installed" : "no inverse has been installed since the first step",
                 (double)(now - s->report->curv_inv_ns) * 1e-9, ps_peers_count(&s->peers, MSG_ROLE_INVERTD, 1),
                 ps_sched_in_flight(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched)),
                 ps_counter(&s->ctr, PS_CTR_INSTALLED) ? "" : " (none: every layer steps as [kfac] identity says)");
    if (s->report->curv_stale_stats && !s->report->warned_curv_stats++)
        log_warn("kind = kfac, but no statistics were folded for %.0fs (%d kfac-statsd connected; [kfac] stats = %s): "
                 "the factors are that old; check kfac-statsd, or raise [ps] curvature_warn_s to silence this",
                 (double)(now - s->report->curv_stats_ns) * 1e-9, ps_peers_count(&s->peers, MSG_ROLE_STATSD, 1),
                 s->cfg->stats_mode == RUNCFG_STATS_SYNC ? "sync" : "async");
}

void ps_report_no_statsd(ps_server_t *s) {
    /* Only when it is so: a kfac-statsd that is connected but slow to deliver
     * its first batch is normal at start-up ([ps] curvature_warn_s watches it). */
    if (s->model.kfac && s->cfg->stats_mode == RUNCFG_STATS_ASYNC && ps_counter(&s->ctr, PS_CTR_FOLDS) == 0 &&
        ps_round_steps_run(s->round) == 20 && ps_peers_count(&s->peers, MSG_ROLE_STATSD, 1) == 0 &&
        !s->report->warned_no_stats++)
        log_warn("no statistics after 20 steps and no kfac-statsd connected ([kfac] stats = async): start one; until "
                 "then every layer steps with the identity ([kfac] identity)");
}

void ps_report_publish(ps_server_t *s) {
    if (!s->report->http) return;
    ps_http_snapshot_t x;
    memset(&x, 0, sizeof x);
    x.step = (uint64_t)ps_round_version(s->round);
    x.steps_target = s->cfg->steps;
    x.wall_s = ps_io_wall_s(s);
    x.train_loss = s->report->last_train_loss;
    x.train_acc = s->report->last_train_acc;
    const ps_eval_result_t *ev = ps_eval_last(s->eval);
    if ((x.have_eval = ev != NULL)) {
        x.eval_step = ev->step;
        x.test_loss = ev->loss;
        x.test_acc = ev->acc;
        x.polyak_loss = ev->polyak_loss;
        x.polyak_acc = ev->polyak_acc;
    }
    x.workers = ps_peers_count(&s->peers, MSG_ROLE_WORKER, 1);
    x.statsd = ps_peers_count(&s->peers, MSG_ROLE_STATSD, 1);
    x.invertd = ps_peers_count(&s->peers, MSG_ROLE_INVERTD, 1);
    memcpy(x.rejected, s->ctr.rejected, sizeof x.rejected);
    x.grad_clipped = ps_counter(&s->ctr, PS_CTR_CLIPPED);
    x.robust_steps = ps_counter(&s->ctr, PS_CTR_ROBUST_STEPS);
    x.recoveries = ps_counter(&s->ctr, PS_CTR_RECOVERIES);
    x.stalled = ps_counter(&s->ctr, PS_CTR_STALLED);
    x.demoted = ps_counter(&s->ctr, PS_CTR_DEMOTED);
    x.repushed = ps_counter(&s->ctr, PS_CTR_REPUSHED);
    x.drift_refused = ps_counter(&s->ctr, PS_CTR_REJ_DRIFT);
    x.drift_spared = ps_counter(&s->ctr, PS_CTR_DRIFT_SPARED);
    x.ckpt_saved = ps_counter(&s->ctr, PS_CTR_CKPT_SAVED);
    x.ckpt_failed = ps_counter(&s->ctr, PS_CTR_CKPT_FAILED);
    if (s->model.kfac) {
        uint64_t now = clock_now_ns();
        x.kfac = 1;
        x.inverses_installed = ps_counter(&s->ctr, PS_CTR_INSTALLED);
        x.inverses_refused = ps_counter(&s->ctr, PS_CTR_INV_BAD);
        x.invertd_distrusted = ps_counter(&s->ctr, PS_CTR_INVERTD_DISTRUSTED);
        x.stats_folded = ps_counter(&s->ctr, PS_CTR_FOLDS);
        x.damping = s->model.kfac->opts.damping;
        x.damping_rho = ps_damping_rho(s->damping);
        x.idle_inverses_s = s->report->curv_inv_ns ? (double)(now - s->report->curv_inv_ns) * 1e-9 : 0.0;
        x.idle_stats_s = s->report->curv_stats_ns ? (double)(now - s->report->curv_stats_ns) * 1e-9 : 0.0;
        x.curv_busy_s = ps_curv_busy_ms(s->curv) * 1e-3;
        x.curv_pending = (uint64_t)ps_curv_pending(s->curv);
        x.stale_inverses = s->report->curv_stale_inv;
        x.stale_stats = s->report->curv_stale_stats;
        for (int b = 0; b < ps_sched_n_blocks(s->sched) && s->report->http_blocks; b++) {
            const kfac_block_t *k = &s->model.kfac->blocks[b];
            ps_http_block_t *o = &s->report->http_blocks[b];
            snprintf(o->layer, sizeof o->layer, "%s", s->model.net->layers[k->layer].name);
            o->factor = k->factor;
            o->age_steps = k->inv->valid && k->inv_version >= 0 ? ps_round_version(s->round) - k->inv_version : -1;
        }
        x.n_blocks = s->report->http_blocks ? ps_sched_n_blocks(s->sched) : 0;
        x.blocks = s->report->http_blocks;
    }
    ps_http_publish(s->report->http, &x);
}

void ps_report_summary(const ps_server_t *s, char *buf, size_t len) {
    double wall = ps_io_wall_s(s);
    size_t off = 0;
#define S_ADD(...)                                                          \
    do {                                                                    \
        if (off < len) off += (size_t)snprintf(buf + off, len - off, __VA_ARGS__); \
    } while (0)
    S_ADD("%s: %" PRIu64 " steps in %.1fs", s->exit_code ? "failed" : "done", ps_round_steps_done(s->round), wall);
    if (s->signum) S_ADD(" (stopped by %s)", s->signum == SIGINT ? "SIGINT" : "SIGTERM");
    const ps_eval_result_t *ev = ps_eval_last(s->eval);
    if (ev) {
        S_ADD(", test acc %.2f%% (polyak %.2f%%), test loss %.4f", 100.0 * ev->acc, 100.0 * ev->polyak_acc, ev->loss);
        if ((long)ev->step != ps_round_version(s->round)) S_ADD(" at step %" PRIu64, ev->step);
    } else {
        S_ADD(", test acc n/a");
    }
    S_ADD(", %.1f steps/s", wall > 0 ? (double)ps_round_steps_done(s->round) / wall : 0.0);
    if (s->model.kfac)
        S_ADD(", inverses installed %" PRIu64 " (age mean %.1f max %ld), stats folded %" PRIu64, ps_counter(&s->ctr, PS_CTR_INSTALLED),
              s->report->last_inv_age_mean, s->report->last_inv_age_max, ps_counter(&s->ctr, PS_CTR_FOLDS));
    if (s->model.kfac && (ps_counter(&s->ctr, PS_CTR_INV_BAD) || ps_counter(&s->ctr, PS_CTR_INVERTD_DISTRUSTED)))
        S_ADD(", inverses refused %" PRIu64 " (inverse daemons distrusted %" PRIu64 ")", ps_counter(&s->ctr, PS_CTR_INV_BAD),
              ps_counter(&s->ctr, PS_CTR_INVERTD_DISTRUSTED));
    if (s->model.kfac) {
        char dmp[256];
        ps_damping_summary(s->damping, s->model.kfac->opts.damping, dmp, sizeof dmp);
        S_ADD("%s", dmp);
    }
    if (s->model.kfac && s->model.kfac->n_lowrank_layers)
        S_ADD(", layer updates in factored form %" PRIu64, s->model.kfac->n_lowrank_layers);
    if (ps_round_steps_done(s->round)) {
        double ms_sum = 0.0, ms_max = 0.0;
        ps_round_step_ms(s->round, &ms_sum, &ms_max);
        S_ADD(", update %.1f ms mean %.1f max", ms_sum / (double)ps_round_steps_done(s->round), ms_max);
    }
    if (s->curv) S_ADD(", curvature thread %.2f s busy", ps_curv_busy_ms(s->curv) * 1e-3);
    S_ADD(", stale gradients %" PRIu64 ", workers dropped %" PRIu64, ps_counter(&s->ctr, PS_CTR_STALE_GRADS), ps_counter(&s->ctr, PS_CTR_DROPPED));
    if (ps_counter(&s->ctr, PS_CTR_CLIPPED)) S_ADD(", layer gradients clipped %" PRIu64, ps_counter(&s->ctr, PS_CTR_CLIPPED));
    if (s->heldout)
        S_ADD(", reference gradients %" PRIu64 " (the last in %.0f ms), gradients refused against them %" PRIu64,
              ps_heldout_count(s->heldout), ps_heldout_last_ms(s->heldout), ps_counter(&s->ctr, PS_CTR_REJ_DRIFT));
    if (s->heldout && ps_counter(&s->ctr, PS_CTR_DRIFT_SPARED))
        S_ADD(" (spared %" PRIu64 ": no other worker within the bound)", ps_counter(&s->ctr, PS_CTR_DRIFT_SPARED));
    if (ps_counter(&s->ctr, PS_CTR_RECOVERIES)) S_ADD(", recoveries %" PRIu64 " (every gradient of a round refused)", ps_counter(&s->ctr, PS_CTR_RECOVERIES));
    if (s->cfg->aggregate != RUNCFG_AGGREGATE_MEAN)
        S_ADD(", robust steps %" PRIu64 " (by the mean: %" PRIu64 ")", ps_counter(&s->ctr, PS_CTR_ROBUST_STEPS), ps_counter(&s->ctr, PS_CTR_ROBUST_FALLBACKS));
    uint64_t total = 0;
    for (int t = 0; t < MSG_TYPE_COUNT; t++) total += ps_counters_rejected(&s->ctr, t);
    S_ADD(", rejected %" PRIu64, total);
    if (total) {
        const char *sep = " (";
        for (int t = 0; t < MSG_TYPE_COUNT; t++) {
            if (!ps_counters_rejected(&s->ctr, t)) continue;
            S_ADD("%s%s %" PRIu64, sep, t == MSG_NONE ? "undecodable" : msg_type_name((msg_type_t)t), ps_counters_rejected(&s->ctr, t));
            sep = ", ";
        }
        S_ADD(")");
    }
    if (ps_counter(&s->ctr, PS_CTR_REFUSED_KEY)) S_ADD(", hellos refused for their CURVE key %" PRIu64, ps_counter(&s->ctr, PS_CTR_REFUSED_KEY));
    if (ps_counter(&s->ctr, PS_CTR_REVOKED)) S_ADD(", clients let go for a removed key %" PRIu64, ps_counter(&s->ctr, PS_CTR_REVOKED));
    if (ps_counter(&s->ctr, PS_CTR_RATE_LIMITED) || ps_counter(&s->ctr, PS_CTR_PARAMS_HELD) || ps_counter(&s->ctr, PS_CTR_SEND_FULL))
        S_ADD(", requests over the rate limit %" PRIu64 ", Params held back %" PRIu64 ", sends to a full pipe %" PRIu64,
              ps_counter(&s->ctr, PS_CTR_RATE_LIMITED), ps_counter(&s->ctr, PS_CTR_PARAMS_HELD), ps_counter(&s->ctr, PS_CTR_SEND_FULL));
#undef S_ADD
}
