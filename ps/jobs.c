/* ps/jobs.c — kfac-ps's inversion jobs: a job for a waiting kfac-invertd
 * (ps/sched.h decides which block goes to which daemon; the factor is cut
 * on the curvature thread, ps/curv.h, and the Job sent when the cut comes
 * back), a daemon asking for work, and a job's result judged here, checked
 * on the curvature thread and installed here by exchanging holders (or
 * refused).
 */
#include "ps/server_int.h"
#include "ps/jobs.h"
#include "ps/io.h"
#include "ps/member.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/ratelimit.h"
#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_linalg.h"

/* ---- inversion jobs --------------------------------------------------------------- */

struct ps_jobs {
    uint64_t next_id;              /* the next job's id */
    uint64_t wait_seq;             /* the last daemon's place in the queue for work */
    ratelimit_t rl_job;            /* lines about refused jobs and results */
};

ps_jobs_t *ps_jobs_new(void) {
    ps_jobs_t *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->next_id = 1;
    return j;
}

void ps_jobs_free(ps_jobs_t **j_p) {
    if (!j_p || !*j_p) return;
    ps_jobs_t *j = *j_p;
    *j_p = NULL;
    free(j);
}

uint64_t ps_jobs_next_id(const ps_server_t *s) {
    return s->jobs->next_id;
}

void ps_jobs_restore_next_id(ps_server_t *s, uint64_t next_id) {
    if (next_id > s->jobs->next_id) s->jobs->next_id = next_id;
}

void ps_jobs_wait(ps_server_t *s, ps_peer_t *p) {
    ps_member_wait_job(p, p->mb.max_n, ++s->jobs->wait_seq);
}

/* A refused job result (or any refused message from an inverse daemon
 * while the run goes on): its jobs go back to the queue, it waits for work
 * again, and the free jobs are dispatched. */
void ps_jobs_after_reject(ps_server_t *s, ps_peer_t *p) {
    if (s->life.phase != PS_PHASE_RUNNING || p->role != MSG_ROLE_INVERTD) return;
    if (s->model.kfac) ps_sched_owner_gone(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched), p->id);
    ps_jobs_wait(s, p);
    ps_jobs_dispatch(s);
}

/* Block b for daemon p: assigned now (no one else gets it, p waits no
 * more), cut on the curvature thread; the Job goes out when the cut comes
 * back (ps_jobs_cut_done). */
static int s_send_job(ps_server_t *s, ps_peer_t *p, int b, double now_ms) {
    const kfac_block_t *kb = &s->model.kfac->blocks[b];
    ps_sched_block_t *sb = &ps_sched_blocks(s->sched)[b];
    ps_curv_task_t *t = ps_curv_task(s->curv, PS_CURV_CUT);
    if (!t) {
        log_error("cutting a job for layer %d factor %d: out of memory", kb->layer, kb->factor);
        ps_sched_failed(sb, sb->factor_version);
        return 0; /* the daemon keeps waiting */
    }
    char name[160];
    ps_peer_name(p, name, sizeof name);
    if (sb->cur.id != 0) {
        uint64_t skipped = 0;
        ps_counters_bump(&s->ctr, PS_CTR_REASSIGNED);
        if (ratelimit_ok(&s->jobs->rl_job, clock_now_ns(), PS_LOG_EVERY_MS, &skipped))
            log_warn("job %" PRIu64 " (layer %d factor %d, n=%d) is overdue after %.1fs on invertd#%u: "
                     "handing it to %s",
                     sb->cur.id, kb->layer, kb->factor, kb->n, (now_ms - sb->cur.start_ms) / 1e3, sb->cur.owner, name);
    }
    t->block = b;
    t->job_id = s->jobs->next_id++;
    t->peer_id = p->id;
    t->lambda = s->model.kfac->opts.damping;
    int rc = ps_curv_submit(s->curv, t);
    if (rc < 0) {
        ps_curv_release(s->curv, t);
        ps_sched_failed(sb, sb->factor_version);
        return 0; /* the daemon keeps waiting */
    }
    ps_sched_assign(sb, t->job_id, sb->factor_version, p->id, now_ms); /* the version the cut finds, when it is back */
    ps_member_answered(p);
    return 0;
}

/* The inverse daemon with id `id` still connected, or NULL. */
static ps_peer_t *s_daemon(ps_server_t *s, uint32_t id) {
    ps_peer_t *p = ps_peers_by_id(&s->peers, id);
    return p && p->role == MSG_ROLE_INVERTD ? p : NULL;
}

void ps_jobs_cut_done(ps_server_t *s, ps_curv_task_t *t) {
    const int b = t->block;
    const kfac_block_t *kb = &s->model.kfac->blocks[b];
    ps_sched_block_t *sb = &ps_sched_blocks(s->sched)[b];
    ps_peer_t *p = s_daemon(s, t->peer_id);
    const int ours = sb->cur.id == t->job_id; /* not handed to another daemon meanwhile (its owner left, ...) */
    if (t->rc < 0) {
        log_error("%s", t->err);
        ps_sched_unassign(sb, t->job_id);
        ps_sched_failed(sb, sb->factor_version);
        if (p && p->present && !p->ident->distrusted) ps_jobs_wait(s, p); /* back in the queue for another block */
        ps_jobs_dispatch(s);
        return;
    }
    if (!ours || !p || !p->present || p->ident->distrusted) {
        ps_sched_unassign(sb, t->job_id);
        ps_curv_task_t *f = ps_curv_task(s->curv, PS_CURV_FORGET);
        if (f) {
            f->block = b;
            f->job_id = t->job_id;
            if (ps_curv_submit(s->curv, f) < 0) ps_curv_release(s->curv, f);
        }
        if (p && p->present && !p->ident->distrusted && p->mb.wait == PS_WAIT_NONE) ps_jobs_wait(s, p);
        ps_jobs_dispatch(s);
        return;
    }
    ps_sched_recut(sb, t->job_id, t->version, t->damping);
    msg_t m;
    msg_init(&m, MSG_JOB, MSG_ROLE_PS, 0);
    m.job.job_id = t->job_id;
    m.job.layer = (uint32_t)kb->layer;
    m.job.factor = (uint32_t)kb->factor;
    m.job.factor_version = (uint64_t)t->version;
    m.job.method = ps_ingest_method(s->model.kfac->opts.method);
    m.job.damping = t->damping;
    m.job.n = (uint32_t)kb->n;
    m.job.packed = t->packed;
    m.job.n_packed = msg_packed_len((uint64_t)kb->n);
    int rc = ps_io_send(s, &p->route, &m);
    if (rc < 0) {
        ps_sched_unassign(sb, t->job_id);
        ps_jobs_dispatch(s);
        return;
    }
    ps_counters_bump(&s->ctr, PS_CTR_JOBS_SENT);
    char name[160];
    log_debug("job %" PRIu64 " -> %s: layer %d factor %d n=%d version %ld damping %g (cut in %.1f ms)", t->job_id,
              ps_peer_name(p, name, sizeof name), kb->layer, kb->factor, kb->n, t->version, (double)t->damping, t->ms);
}

void ps_jobs_dispatch(ps_server_t *s) {
    if (!s->model.kfac || s->life.phase != PS_PHASE_RUNNING || !s->sock) return;
    const double timeout = (double)s->cfg->job_timeout_ms;
    ps_sched_waiter_t waiters[PS_MAX_PEERS];
    ps_peer_t *who[PS_MAX_PEERS];
    for (;;) {
        double now = clock_now_ms();
        int n = 0;
        for (int i = 0; i < s->peers.n && n < PS_MAX_PEERS; i++) {
            ps_peer_t *p = s->peers.v[i];
            if (p->role != MSG_ROLE_INVERTD || p->mb.wait != PS_WAIT_JOB || !p->present || p->ident->distrusted) continue;
            waiters[n].wait_seq = p->mb.wait_seq;
            waiters[n].max_n = p->mb.max_n;
            waiters[n].owner = p->id;
            who[n++] = p;
        }
        int b = -1;
        int w = ps_sched_pick_waiter(waiters, n, ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched),
                                     ps_sched_policy(s->sched), now, timeout, &b);
        if (w < 0) return;
        s_send_job(s, who[w], b, now); /* the daemon stops waiting either way: no endless loop */
    }
}


/* One more bad result from daemon p (why: what was wrong): counted, named
 * in the log; at PS_BAD_INVERSES_MAX it gets no more jobs and is told so. */
static void s_bad_result(ps_server_t *s, ps_peer_t *p, const msg_job_result_t *r, const char *why) {
    char name[160];
    uint64_t skipped = 0;
    ps_peer_name(p, name, sizeof name);
    ps_counters_bump(&s->ctr, PS_CTR_INV_BAD);
    const int n_bad = ps_ident_bad_inverse(p->ident);
    ps_peer_rejected(p);
    ps_counters_reject(&s->ctr, MSG_JOB_RESULT, MSG_ERR_INVALID);
    if (ratelimit_ok(&s->jobs->rl_job, clock_now_ns(), PS_LOG_EVERY_MS, &skipped))
        log_warn("%s: result for job %" PRIu64 " (layer %u factor %u) refused (%d of %d): %s", name, r->job_id,
                 r->layer, r->factor, n_bad, PS_BAD_INVERSES_MAX, why);
    if (n_bad < PS_BAD_INVERSES_MAX || !ps_ident_distrust(p->ident)) return;
    ps_member_answered(p);
    ps_counters_bump(&s->ctr, PS_CTR_INVERTD_DISTRUSTED);
    ps_sched_owner_gone(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched), p->id);
    log_warn("%s: %d of its results were refused (an inverse that failed verification, another daemon's job, or a "
             "factor it said could not be inverted and another daemon inverted): it gets no more jobs, and the ones "
             "it holds go to other "
             "inverse daemons", name, p->ident->n_bad_inverses);
    char text[200];
    snprintf(text, sizeof text, "%d of your inverses failed kfac-ps's verification: no more jobs for this daemon",
             p->ident->n_bad_inverses);
    ps_io_send_text(s, &p->route, MSG_SHUTDOWN, text);
}

static int s_n_daemons(const ps_server_t *s) {
    int n = 0;
    for (int i = 0; i < s->peers.n; i++) {
        const ps_peer_t *q = s->peers.v[i];
        n += q->role == MSG_ROLE_INVERTD && q->present && !q->ident->distrusted;
    }
    return n;
}

void ps_jobs_failed_by(ps_server_t *s, ps_peer_t *p, int b, long version) {
    ps_counters_bump(&s->ctr, PS_CTR_INV_FAILED);
    ps_sched_block_t *sb = &ps_sched_blocks(s->sched)[b];
    if (ps_sched_failed_by(sb, version, p->id, s_n_daemons(s))) return; /* the block waits for newer statistics */
    uint64_t skipped = 0;
    if (ratelimit_ok(&s->jobs->rl_job, clock_now_ns(), PS_LOG_EVERY_MS, &skipped))
        log_info("layer %d factor %d, version %ld: another inverse daemon tries it", s->model.kfac->blocks[b].layer,
                 s->model.kfac->blocks[b].factor, version);
}

/* The inverse of `version` of block b came from daemon `by` and was
 * installed: a daemon that reported that version could not be inverted
 * said something false, which counts as a bad result of its identity. */
static void s_disproved(ps_server_t *s, uint32_t by, int b, long version) {
    uint32_t owners[PS_SCHED_FAIL_QUORUM];
    int n = ps_sched_disproved(&ps_sched_blocks(s->sched)[b], version, owners, PS_SCHED_FAIL_QUORUM);
    for (int k = 0; k < n; k++) {
        ps_peer_t *q = NULL;
        for (int i = 0; i < s->peers.n && !q; i++)
            if (s->peers.v[i]->role == MSG_ROLE_INVERTD && s->peers.v[i]->id == owners[k]) q = s->peers.v[i];
        if (!q || q->id == by) continue; /* gone: its identity keeps its other results */
        msg_job_result_t r;
        memset(&r, 0, sizeof r);
        r.layer = (uint32_t)s->model.kfac->blocks[b].layer;
        r.factor = (uint32_t)s->model.kfac->blocks[b].factor;
        char why[200];
        snprintf(why, sizeof why, "it reported this factor could not be inverted; invertd#%u inverted it (version %ld)",
                 by, version);
        s_bad_result(s, q, &r, why);
    }
}

void ps_jobs_request(ps_server_t *s, ps_peer_t *p, const msg_t *m) {
    if (p->ident->distrusted) {
        ps_io_reject(s, &p->route, p, MSG_JOB_REQUEST, MSG_ERR_INVALID,
                     "this inverse daemon is distrusted: %d of its results were refused", p->ident->n_bad_inverses);
        return;
    }
    if (s->model.kfac && ps_sched_owner_block(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched), p->id) >= 0) {
        char name[160];
        uint64_t skipped = 0;
        if (ps_io_peer_log_ok(s, &skipped))
            log_info("%s asks for work while holding a job: that job goes back to the queue",
                     ps_peer_name(p, name, sizeof name));
        ps_sched_owner_gone(ps_sched_blocks(s->sched), ps_sched_n_blocks(s->sched), p->id);
    }
    ps_member_wait_job(p, m->job_request.max_n, ++s->jobs->wait_seq);
    ps_jobs_dispatch(s);
}

/* A verdict on p's result for block b: refused (why), counted against its
 * identity; it waits for work again unless that made it distrusted. */
static void s_refused(ps_server_t *s, ps_peer_t *p, const msg_job_result_t *r, const char *why) {
    s_bad_result(s, p, r, why);
    if (!p->ident->distrusted) {
        ps_io_reject(s, &p->route, p, MSG_JOB_RESULT, MSG_ERR_INVALID, "the inverse was refused: %s", why);
        ps_jobs_wait(s, p);
    }
}

void ps_jobs_result(ps_server_t *s, ps_peer_t *p, msg_t *m) {
    const msg_job_result_t *r = &m->job_result;
    char name[160];
    ps_peer_name(p, name, sizeof name);
    int b = ps_ingest_block_of(s->model.kfac, r->layer, r->factor);
    if (b < 0) {
        ps_io_reject(s, &p->route, p, MSG_JOB_RESULT, MSG_ERR_INVALID,
                      "job_result: layer %u factor %u is not a block of this model's optimizer", r->layer, r->factor);
        ps_jobs_after_reject(s, p);
        return;
    }
    if (p->ident->distrusted) {
        ps_io_reject(s, &p->route, p, MSG_JOB_RESULT, MSG_ERR_INVALID,
                     "this inverse daemon is distrusted: %d of its results were refused", p->ident->n_bad_inverses);
        return;
    }
    ps_sched_block_t *sb = &ps_sched_blocks(s->sched)[b];
    long version = -1;
    float job_d = -1.0f;
    int cur = ps_sched_result(sb, r->job_id, p->id, &version, &job_d);
    if (cur < 0) job_d = -1.0f;
    float d_used = job_d;
    char why[700] = "";
    ps_sched_result_t verdict =
        ps_sched_judge(cur, version, r->job_id, r->factor_version, r->error && r->error[0],
                       r->method == MSG_METHOD_CHOLESKY, r->damping, job_d, KFAC_INVERSE_MAX_ESCALATIONS, &d_used,
                       why, sizeof why);
    if (verdict == PS_RESULT_FOREIGN) {
        s_bad_result(s, p, r, why);
        if (!p->ident->distrusted) ps_jobs_after_reject(s, p);
        return;
    }
    if (verdict == PS_RESULT_UNKNOWN) {
        /* Answered with the next Job all the same (docs/protocol.md), counted. */
        uint64_t skipped = 0;
        ps_counters_reject(&s->ctr, MSG_JOB_RESULT, MSG_ERR_STALE);
        ps_peer_rejected(p);
        if (ratelimit_ok(&s->jobs->rl_job, clock_now_ns(), PS_LOG_EVERY_MS, &skipped))
            log_warn("%s: result for job %" PRIu64 " (layer %u factor %u) dropped: not handed out by this server, or "
                     "answered already",
                     name, r->job_id, r->layer, r->factor);
        /* The next job costs a cut (O(n^2)): a stream of results for jobs
         * nobody was given pays for it from the request budget, as a
         * JobRequest does. */
        if (!ps_ident_take_token(p->ident, clock_now_ns(), PS_REQ_PER_S, PS_REQ_BURST)) {
            ps_counters_bump(&s->ctr, PS_CTR_RATE_LIMITED);
            ps_member_answered(p);
            return;
        }
        ps_jobs_after_reject(s, p);
        return;
    }
    if (verdict == PS_RESULT_WRONG_VERSION || verdict == PS_RESULT_FAILED || why[0]) {
        /* no inverse to check: the probe is forgotten (on the curvature thread, which keeps it) */
        ps_curv_task_t *f = ps_curv_task(s->curv, PS_CURV_FORGET);
        if (f) {
            f->block = b;
            f->job_id = r->job_id;
            if (ps_curv_submit(s->curv, f) < 0) ps_curv_release(s->curv, f);
        }
    }
    if (verdict == PS_RESULT_WRONG_VERSION) {
        s_bad_result(s, p, r, why);
        if (!p->ident->distrusted) {
            ps_io_reject(s, &p->route, p, MSG_JOB_RESULT, MSG_ERR_INVALID, "%s", why);
            ps_jobs_after_reject(s, p);
        }
        return;
    }
    if (verdict == PS_RESULT_FAILED) {
        uint64_t skipped = 0;
        if (ratelimit_ok(&s->jobs->rl_job, clock_now_ns(), PS_LOG_EVERY_MS, &skipped))
            log_warn("%s could not invert layer %u factor %u (n=%u, version %ld): %s", name, r->layer, r->factor,
                     r->n, version, r->error);
        ps_jobs_failed_by(s, p, b, version);
        ps_peer_accepted(p);
        ps_jobs_wait(s, p);
        ps_jobs_dispatch(s);
        return;
    }
    if (why[0]) {
        /* NO_PROBE / BAD_DAMPING: refused without a check */
        s_refused(s, p, r, why);
        ps_jobs_dispatch(s);
        return;
    }
    /* PS_RESULT_CHECK: loaded and checked on the curvature thread; the
     * daemon hears back when the verdict is in (ps_jobs_check_done). */
    ps_curv_task_t *t = ps_curv_task(s->curv, PS_CURV_CHECK);
    kfac_inverse_t *holder = t ? ps_curv_holder(s->curv, b) : NULL;
    if (!t || !holder) {
        if (t) ps_curv_release(s->curv, t);
        log_error("%s: result for job %" PRIu64 " not checked: out of memory", name, r->job_id);
        ps_jobs_wait(s, p);
        ps_jobs_dispatch(s);
        return;
    }
    t->block = b;
    t->job_id = r->job_id;
    t->peer_id = p->id;
    t->version = version;
    t->damping = d_used;
    t->inv = holder;
    t->current = cur;
    msg_take(&t->msg, m);
    if (ps_curv_submit(s->curv, t) < 0) {
        ps_curv_release(s->curv, t);
        ps_jobs_wait(s, p);
        return;
    }
    ps_sched_checking(sb, version);
    ps_member_answered(p);
}

void ps_jobs_check_done(ps_server_t *s, ps_curv_task_t *t) {
    const int b = t->block;
    const msg_job_result_t *r = &t->msg.job_result;
    ps_sched_block_t *sb = &ps_sched_blocks(s->sched)[b];
    ps_peer_t *p = s_daemon(s, t->peer_id);
    char name[160] = "a departed inverse daemon";
    if (p) ps_peer_name(p, name, sizeof name);
    ps_sched_checked(sb);
    if (t->rc != 0) {
        /* A wrong inverse from this daemon: the block is not failed (its
         * factor is fine); another daemon gets it. */
        if (p) s_refused(s, p, r, t->err[0] ? t->err : "the inverse could not be loaded");
        ps_jobs_dispatch(s);
        return;
    }
    double t_inst = clock_now_ms();
    log_debug("%s: job %" PRIu64 " verified: residual %.3g (%.1f ms on the curvature thread)", name, t->job_id,
              t->residual, t->ms);
    int rc = kfac_opt_block_swap(s->model.kfac, b, &t->inv, t->version); /* t->inv: the holder it replaced */
    ps_round_state_add_curv_ms(s->round, clock_now_ms() - t_inst);
    if (rc < 0) {
        ps_sched_failed(sb, t->version);
        if (p) {
            ps_io_reject(s, &p->route, p, MSG_JOB_RESULT, MSG_ERR_INVALID, "the inverse was not installed");
            ps_jobs_wait(s, p);
        }
        ps_jobs_dispatch(s);
        return;
    }
    if (rc == 0) {
        ps_sched_installed(sb, t->version);
        ps_counters_bump(&s->ctr, PS_CTR_INSTALLED);
        s_disproved(s, t->peer_id, b, t->version);
    } else {
        ps_counters_bump(&s->ctr, PS_CTR_IGNORED_OLD);
    }
    log_debug("%s: job %" PRIu64 " (layer %u factor %u, version %ld, %.1f ms)%s%s", name, t->job_id, r->layer,
              r->factor, t->version, r->compute_ms, t->current ? "" : " (late)",
              rc == 0 ? " installed" : " older than the inverse held: ignored");
    if (p) {
        ps_peer_accepted(p);
        ps_jobs_wait(s, p);
    }
    ps_jobs_dispatch(s);
}
