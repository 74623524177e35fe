/* ps/curv.c — see curv.h. */
#include "ps/curv.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/kfac/kfac_linalg.h"
#include "common/net/zloop.h"
#include "ps/verify.h"
#include "ps/ingest.h"

#define PS_CURV_SPARES 4 /* inverse holders kept per block for the next checks */

struct ps_curv {
    zloop_pool_t *pool_fold;    /* the folds' thread */
    zloop_pool_t *pool_jobs;    /* the cuts' and checks' thread */
    uv_mutex_t mu;              /* the factors and the guard: held by a fold while it runs, by a cut while it
                                   copies its factor, and by ps_curv_lock */
    uv_cond_t fold_cv;          /* signalled when a fold ends (or the threads close) */
    int mu_ok, cv_ok;
    uint64_t folds_submitted;   /* the loop's count */
    uint64_t folds_done;        /* under mu */
    int closing;                /* under mu: a cut waiting for a fold gives up */
    kfac_opt_t *k;              /* borrowed */
    ps_stats_guard_t *guard;    /* borrowed */
    double max_ratio;
    const char *(*layer_name)(const void *ctx, int layer);
    const void *name_ctx;
    const wire_shape_t *sh;     /* borrowed */
    ps_verify_t *verify;        /* the probes of the jobs in flight */
    float *F;                   /* (max n * n) a factor being cut, an inverse being unpacked */
    float *unpack_buf;          /* (sh->max_layer_floats) one layer's packed statistics */
    float **packed;             /* (n_blocks) each block's packed factor, sent from the loop when its cut comes back */
    kfac_inverse_t **spare;     /* (n_blocks * PS_CURV_SPARES) holders for the next checks (loop's) */
    int *n_spare;               /* (n_blocks) */
    size_t bn_len;
    ps_curv_task_t *free_folds; /* the loop's: FOLD tasks, each with its statistics batch kept */
    ps_curv_task_t *free_tasks; /* the loop's: the others (no batch) */
    _Atomic uint64_t busy_us;   /* time in tasks (read by the loop without waiting) */
    ps_curv_done_fn done;
    void *user;
};

/* ---- the thread ---------------------------------------------------------------------- */

static void s_fold(ps_curv_t *c, ps_curv_task_t *t) {
    const kfac_stats_t *st = t->batch;
    if (t->msg.type == MSG_STATS_PUSH) {
        const msg_stats_push_t *sp = &t->msg.stats_push;
        if (ps_ingest_stats_unpack(c->sh, &sp->stats, (double)sp->n_examples, t->batch, c->unpack_buf, t->err,
                                 sizeof t->err) < 0) {
            t->rc = -EINVAL;
            return;
        }
    }
    if (t->guard && c->guard &&
        ps_stats_guard_check(c->guard, st, c->max_ratio, c->layer_name, c->name_ctx, t->err, sizeof t->err) < 0) {
        t->rc = -EINVAL;
        return;
    }
    int rc = kfac_opt_fold(c->k, st, t->version);
    if (rc < 0) {
        snprintf(t->err, sizeof t->err, "statistics not folded (%s)", rc == -EDOM ? "not finite" : "layout mismatch");
        t->rc = rc;
        return;
    }
    if (t->guard && c->guard) ps_stats_guard_accept(c->guard, st);
    for (int b = 0; b < c->k->n_blocks; b++) t->versions[b] = c->k->blocks[b].factor_version;
    kfac_opt_bn_snapshot(c->k, t->bn, t->bn_has);
    t->rc = 0;
}

static void s_cut(ps_curv_t *c, ps_curv_task_t *t) {
    const int b = t->block, n = c->k->blocks[b].n;
    /* the factor as the folds submitted before this cut left it: a cut
     * never sees less than a serial kfac-ps would have */
    uv_mutex_lock(&c->mu);
    while (c->folds_done < t->after_folds && !c->closing) uv_cond_wait(&c->fold_cv, &c->mu);
    int rc = c->closing ? -ECANCELED : kfac_opt_block_job_at(c->k, b, t->lambda, c->F, &t->damping, &t->version);
    uv_mutex_unlock(&c->mu);
    if (rc < 0) {
        snprintf(t->err, sizeof t->err, "cutting a job for layer %d factor %d failed (%s)", c->k->blocks[b].layer,
                 c->k->blocks[b].factor, strerror(-rc));
        t->rc = rc;
        return;
    }
    /* full n x n (upper authoritative) -> packed upper triangle */
    kfac_linalg_pack_upper(c->F, n, c->packed[b]);
    if ((rc = ps_verify_cut(c->verify, b, t->job_id, c->F, n, t->damping)) < 0) {
        snprintf(t->err, sizeof t->err, "keeping the probe of job %" PRIu64 " failed (%s)", t->job_id, strerror(-rc));
        t->rc = rc;
        return;
    }
    t->packed = c->packed[b];
    t->rc = 0;
}

static void s_check(ps_curv_t *c, ps_curv_task_t *t) {
    const int b = t->block, n = c->k->blocks[b].n;
    t->residual = NAN;
    int rc = ps_ingest_result_load(&t->msg.job_result, n, t->damping, c->F, t->inv, t->err, sizeof t->err);
    if (rc < 0) {
        ps_verify_forget(c->verify, b, t->job_id); /* not loadable: nothing to check */
        t->rc = rc;
        return;
    }
    rc = ps_verify_check(c->verify, b, t->job_id, t->inv, t->damping, &t->residual, t->err, sizeof t->err);
    if (rc != 0) t->inv->valid = false;
    t->rc = rc < 0 ? rc : rc ? -EDOM : 0;
}

static void s_work(void *job, void *user) {
    ps_curv_t *c = user;
    ps_curv_task_t *t = job;
    double t0 = clock_now_ms();
    t->err[0] = 0;
    switch (t->kind) {
    case PS_CURV_FOLD:
        uv_mutex_lock(&c->mu);
        s_fold(c, t);
        c->folds_done++;
        uv_cond_broadcast(&c->fold_cv);
        uv_mutex_unlock(&c->mu);
        break;
    case PS_CURV_CUT: s_cut(c, t); break;
    case PS_CURV_CHECK: s_check(c, t); break;
    case PS_CURV_FORGET:
        ps_verify_forget(c->verify, t->block, t->job_id);
        t->rc = 0;
        break;
    }
    t->ms = clock_now_ms() - t0;
    atomic_fetch_add(&c->busy_us, (uint64_t)(t->ms * 1e3));
}

static void s_done(void *job, int status, void *user) {
    ps_curv_t *c = user;
    c->done(job, status, c->user);
}

/* ---- the loop's side ------------------------------------------------------------------ */

ps_curv_t *ps_curv_new(uv_loop_t *loop, kfac_opt_t *k, ps_stats_guard_t *g, double max_ratio,
                       const char *(*layer_name)(const void *ctx, int layer), const void *name_ctx,
                       const wire_shape_t *sh, uint64_t seed, ps_curv_done_fn done, void *user) {
    ps_curv_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->k = k;
    c->guard = g;
    c->max_ratio = max_ratio;
    c->layer_name = layer_name;
    c->name_ctx = name_ctx;
    c->sh = sh;
    c->done = done;
    c->user = user;
    if (uv_mutex_init(&c->mu) != 0) goto fail;
    c->mu_ok = 1;
    if (uv_cond_init(&c->fold_cv) != 0) goto fail;
    c->cv_ok = 1;
    const int nb = k->n_blocks;
    int max_n = 1;
    int *bn = calloc((size_t)(nb ? nb : 1), sizeof *bn);
    if (!bn) goto fail;
    for (int b = 0; b < nb; b++) {
        bn[b] = k->blocks[b].n;
        if (bn[b] > max_n) max_n = bn[b];
    }
    c->verify = ps_verify_new(bn, nb, seed);
    free(bn);
    c->F = malloc((size_t)max_n * max_n * sizeof(float));
    c->unpack_buf = calloc(sh->max_layer_floats ? sh->max_layer_floats : 1, sizeof(float));
    c->packed = calloc((size_t)(nb ? nb : 1), sizeof *c->packed);
    c->spare = calloc((size_t)(nb ? nb : 1) * PS_CURV_SPARES, sizeof *c->spare);
    c->n_spare = calloc((size_t)(nb ? nb : 1), sizeof *c->n_spare);
    if (!c->verify || !c->F || !c->unpack_buf || !c->packed || !c->spare || !c->n_spare) goto fail;
    for (int b = 0; b < nb; b++)
        if (!(c->packed[b] = malloc(msg_packed_len((uint64_t)k->blocks[b].n) * sizeof(float)))) goto fail;
    if (kfac_opt_bn_view(k) < 0) goto fail;
    c->bn_len = kfac_opt_bn_len(k);
    if (!(c->pool_fold = zloop_pool_new(loop, 1, s_work, s_done, c)) ||
        !(c->pool_jobs = zloop_pool_new(loop, 1, s_work, s_done, c)))
        goto fail;
    return c;
fail:
    ps_curv_free(&c);
    return NULL;
}

static void s_task_free(ps_curv_task_t *t) {
    msg_clear(&t->msg);
    kfac_stats_free(&t->batch);
    kfac_inverse_free(&t->inv);
    free(t->versions);
    free(t->bn);
    free(t->bn_has);
    free(t);
}

void ps_curv_free(ps_curv_t **c_p) {
    if (!c_p || !*c_p) return;
    ps_curv_t *c = *c_p;
    if (c->mu_ok) { /* a cut waiting for a fold that will not run gives up */
        uv_mutex_lock(&c->mu);
        c->closing = 1;
        if (c->cv_ok) uv_cond_broadcast(&c->fold_cv);
        uv_mutex_unlock(&c->mu);
    }
    /* tasks come back through done (cancelled, or after the one running), and are released there */
    zloop_pool_free(&c->pool_fold);
    zloop_pool_free(&c->pool_jobs);
    for (ps_curv_task_t **list = &c->free_folds; list; list = list == &c->free_folds ? &c->free_tasks : NULL)
        while (*list) {
            ps_curv_task_t *t = *list;
            *list = t->next;
            s_task_free(t);
        }
    for (int b = 0; c->packed && b < c->k->n_blocks; b++) free(c->packed[b]);
    for (int b = 0; c->spare && b < c->k->n_blocks; b++)
        for (int i = 0; i < c->n_spare[b]; i++) kfac_inverse_free(&c->spare[b * PS_CURV_SPARES + i]);
    free(c->packed);
    free(c->spare);
    free(c->n_spare);
    free(c->F);
    free(c->unpack_buf);
    ps_verify_free(&c->verify);
    if (c->cv_ok) uv_cond_destroy(&c->fold_cv);
    if (c->mu_ok) uv_mutex_destroy(&c->mu);
    free(c);
    *c_p = NULL;
}

ps_curv_task_t *ps_curv_task(ps_curv_t *c, ps_curv_kind_t kind) {
    /* a FOLD task comes with its batch from the last fold (no allocation,
     * no fresh pages in steady state); the others carry none */
    ps_curv_task_t **list = kind == PS_CURV_FOLD ? &c->free_folds : &c->free_tasks;
    ps_curv_task_t *t = *list;
    if (t) {
        *list = t->next;
    } else if (!(t = calloc(1, sizeof *t))) {
        return NULL;
    }
    /* what a task keeps across uses: its arrays */
    kfac_stats_t *batch = t->batch;
    long *versions = t->versions;
    float *bn = t->bn;
    unsigned char *bn_has = t->bn_has;
    memset(t, 0, sizeof *t);
    t->batch = batch;
    t->versions = versions;
    t->bn = bn;
    t->bn_has = bn_has;
    t->kind = kind;
    t->version = -1;
    if (kind == PS_CURV_FOLD) {
        const int nl = c->k->avg->n_layers;
        if (!t->versions) t->versions = calloc((size_t)(c->k->n_blocks ? c->k->n_blocks : 1), sizeof *t->versions);
        if (!t->bn) t->bn = calloc(c->bn_len ? c->bn_len : 1, sizeof *t->bn);
        if (!t->bn_has) t->bn_has = calloc((size_t)(nl ? nl : 1), 1);
        if (!t->batch) t->batch = kfac_stats_new(c->k->net);
        if (!t->versions || !t->bn || !t->bn_has || !t->batch) {
            s_task_free(t);
            return NULL;
        }
    }
    return t;
}

kfac_inverse_t *ps_curv_holder(ps_curv_t *c, int b) {
    if (b < 0 || b >= c->k->n_blocks) return NULL;
    if (c->n_spare[b] > 0) return c->spare[b * PS_CURV_SPARES + --c->n_spare[b]];
    return kfac_inverse_new(c->k->blocks[b].n);
}

int ps_curv_submit(ps_curv_t *c, ps_curv_task_t *t) {
    if (t->kind != PS_CURV_FOLD) {
        t->after_folds = c->folds_submitted;
        return zloop_pool_submit(c->pool_jobs, t);
    }
    int rc = zloop_pool_submit(c->pool_fold, t);
    if (rc == 0) c->folds_submitted++;
    return rc;
}

void ps_curv_release(ps_curv_t *c, ps_curv_task_t *t) {
    if (!t) return;
    msg_clear(&t->msg);
    if (t->inv) {
        int b = t->block;
        if (b >= 0 && b < c->k->n_blocks && t->inv->n == c->k->blocks[b].n && c->n_spare[b] < PS_CURV_SPARES) {
            t->inv->valid = false;
            c->spare[b * PS_CURV_SPARES + c->n_spare[b]++] = t->inv;
        } else {
            kfac_inverse_free(&t->inv);
        }
        t->inv = NULL;
    }
    ps_curv_task_t **list = t->kind == PS_CURV_FOLD ? &c->free_folds : &c->free_tasks;
    t->next = *list;
    *list = t;
}

void ps_curv_lock(ps_curv_t *c) {
    if (c) uv_mutex_lock(&c->mu);
}

void ps_curv_lock_all(ps_curv_t *c) {
    if (!c) return;
    uv_mutex_lock(&c->mu);
    /* the fold thread takes the mutex to fold, and signals after each */
    while (c->folds_done < c->folds_submitted && !c->closing) uv_cond_wait(&c->fold_cv, &c->mu);
}

void ps_curv_unlock(ps_curv_t *c) {
    if (c) uv_mutex_unlock(&c->mu);
}

size_t ps_curv_pending(const ps_curv_t *c) {
    if (!c) return 0;
    return (c->pool_fold ? zloop_pool_pending(c->pool_fold) : 0) + (c->pool_jobs ? zloop_pool_pending(c->pool_jobs) : 0);
}

double ps_curv_busy_ms(ps_curv_t *c) { return c ? (double)atomic_load(&c->busy_us) * 1e-3 : 0.0; }
