/* ps/persist.c — the parameter server's checkpoints: which parts of
 * ps_server_t a checkpoint holds (ps/ckpt.h says what, and the format),
 * when one is written (every [checkpoint] every steps, on SIGTERM/SIGINT)
 * and how a resumed server takes the state back. Loop thread only. */
#include "ps/server_int.h"
#include "ps/jobs.h"
#include "ps/persist.h"
#include "ps/ckpt.h"
#include "ps/io.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/run/rundir.h"

struct ps_persist {
    char dir[4096];                /* [checkpoint] dir, or out_dir/checkpoints ("": not chosen yet) */
    long resumed_from;             /* the step resumed from (-1: a fresh start) */
    uint64_t wall_offset_ns;       /* training time before the resume: wall_s goes on from there */
    int run_over;                  /* resumed from a checkpoint at or past [run] steps: nothing to run */
    ps_owners_t *owners;           /* Hello's tables, saved and restored (borrowed: ps_persist_new) */
    ps_idents_t *idents;
};

static void s_state(ps_server_t *s, ps_ckpt_state_t *st) {
    memset(st, 0, sizeof *st);
    st->model_text = s->model.net->source;
    st->t = ps_round_version(s->round);
    st->steps_done = ps_round_steps_done(s->round);
    st->wall_s = ps_io_wall_s(s);
    st->round_folded = ps_round_folded(s->round);
    st->next_job_id = ps_jobs_next_id(s);
    ps_counters_save(&s->ctr, st->counters, PS_CKPT_COUNTERS, PS_CKPT_N_REJECTED_GRADS);
    st->net = s->model.net;
    st->kfac = s->model.kfac;
    st->sgd = s->model.sgd;
    st->sgd_polyak = s->model.sgd ? s->model.sgd_polyak : NULL;
    st->sgd_polyak_count = s->model.sgd ? &s->model.sgd_polyak_count : NULL;
    ps_refresh_t *refresh = ps_sched_refresh(s->sched);
    st->sched = s->model.kfac ? ps_sched_blocks(s->sched) : NULL;
    st->refresh = s->model.kfac && refresh ? refresh->plan->tr : NULL;
    st->n_refresh = st->refresh ? refresh->plan->n_trackers : 0;
    st->n_blocks = s->model.kfac ? ps_sched_n_blocks(s->sched) : 0;
    st->norms = ps_guard_norms(s->guard);
    st->owners = s->persist->owners;
    st->idents = s->persist->idents;
    st->clip_hists = ps_guard_layer_norms(s->guard, &st->n_clip_hists);
    st->trace_hists = s->stats_guard ? ps_stats_guard_hists(s->stats_guard, &st->n_trace_hists) : NULL;
    st->drift = s->drift;
}


ps_persist_t *ps_persist_new(ps_owners_t *owners, ps_idents_t *idents) {
    ps_persist_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->resumed_from = -1;
    p->owners = owners;
    p->idents = idents;
    return p;
}

void ps_persist_free(ps_persist_t **p_p) {
    if (!p_p || !*p_p) return;
    free(*p_p);
    *p_p = NULL;
}

int ps_persist_open_dir(ps_server_t *s, char *err, size_t err_len) {
    const runcfg_t *cfg = s->cfg;
    ps_persist_t *p = s->persist;
    if (cfg->ckpt_dir && cfg->ckpt_dir[0]) snprintf(p->dir, sizeof p->dir, "%s", cfg->ckpt_dir);
    else snprintf(p->dir, sizeof p->dir, "%s/checkpoints", cfg->out_dir);
    int rc = 0;
    if (cfg->ckpt_every > 0 && (rc = ps_ckpt_mkdirs(p->dir)) < 0) {
        snprintf(err, err_len, "cannot create the checkpoint folder %s ([checkpoint] dir): %s", p->dir, strerror(-rc));
        return rc;
    }
    return 0;
}

const char *ps_persist_dir(const ps_server_t *s) { return s->persist->dir; }

long ps_persist_resumed_from(const ps_server_t *s) { return s->persist->resumed_from; }

int ps_persist_run_over(const ps_server_t *s) { return s->persist->run_over; }

uint64_t ps_persist_wall_offset_ns(const ps_server_t *s) { return s->persist->wall_offset_ns; }

int ps_persist_save(ps_server_t *s, const char *why) {
    if (s->cfg->ckpt_every == 0) return 0;
    ps_ckpt_state_t st;
    s_state(s, &st);
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[1200] = "", path[4200] = "";
    double t0 = clock_now_ms();
    /* the factors, their versions and the guard's histories are the
     * curvature threads': encoded once every fold submitted has run (the
     * round may already count its statistics as folded) and while none
     * runs */
    ps_curv_lock_all(s->curv);
    int rc = ps_ckpt_encode(&st, &buf, &len, err, sizeof err);
    ps_curv_unlock(s->curv);
    if (rc == 0) rc = ps_ckpt_write_file(s->persist->dir, (uint64_t)ps_round_version(s->round), buf, len, path, sizeof path, err, sizeof err);
    free(buf);
    if (rc < 0) {
        ps_counters_bump(&s->ctr, PS_CTR_CKPT_FAILED);
        log_error("checkpoint at step %ld (%s) not written: %s", ps_round_version(s->round), why, err);
        return rc;
    }
    ps_counters_bump(&s->ctr, PS_CTR_CKPT_SAVED);
    int pruned = ps_ckpt_prune(s->persist->dir, s->cfg->ckpt_keep);
    log_info("checkpoint at step %ld (%s): %s, %.1f MB in %.0f ms%s", ps_round_version(s->round), why, path, (double)len / 1e6,
             clock_now_ms() - t0, pruned > 0 ? "; older ones pruned" : "");
    return 0;
}

void ps_persist_after_step(ps_server_t *s) {
    uint64_t every = s->cfg->ckpt_every;
    if (every == 0 || ps_round_version(s->round) <= 0 || (uint64_t)ps_round_version(s->round) % every != 0) return;
    char why[64];
    snprintf(why, sizeof why, "every %" PRIu64 " steps", every);
    ps_persist_save(s, why);
}

int ps_persist_resume(ps_server_t *s, char *err, size_t err_len) {
    ps_ckpt_state_t st;
    s_state(s, &st);
    char path[4200] = "";
    int rc = ps_ckpt_restore_newest(s->persist->dir, &st, clock_now_ms() * 1e-3, path, sizeof path, err, err_len);
    if (rc <= 0) {
        if (rc == 0) log_info("[checkpoint] resume: no checkpoint in %s; starting at step 0", s->persist->dir);
        return rc;
    }
    ps_round_state_restore(s->round, st.t, st.steps_done, st.round_folded);
    ps_jobs_restore_next_id(s, st.next_job_id);
    ps_counters_restore(&s->ctr, st.counters, PS_CKPT_COUNTERS, PS_CKPT_N_REJECTED_GRADS);
    s->persist->resumed_from = ps_round_version(s->round);
    s->persist->run_over = ps_round_steps_done(s->round) >= s->cfg->steps;
    /* the wall clock of steps.csv goes on from where it was */
    s->persist->wall_offset_ns = (uint64_t)(st.wall_s * 1e9);
    int n_owners = ps_owners_count(s->persist->owners); /* those of keys no longer listed go once the allowlists are read */
    const int n_drift = s->drift ? ps_drift_save(s->drift, NULL, 0) : 0;
    char drift[96] = "";
    if (s->drift)
        snprintf(drift, sizeof drift, ", %d worker%s' histories against the reference gradient", n_drift,
                 n_drift == 1 ? "" : "s");
    log_info("resumed from %s: step %ld, %.1fs of training so far, %d member id%s bound to CURVE keys%s; metrics are "
             "appended to",
             path, ps_round_version(s->round), st.wall_s, n_owners, n_owners == 1 ? "" : "s", drift);
    return 1;
}
