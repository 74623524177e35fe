/* invertd/invertd.c — see invertd.h.
 *
 * Conventions: Job.packed and JobResult.inverse are packed upper triangles,
 * row-major (proto/msg.h); the dense factor handed to kfac_inverse_compute is
 * n x n row-major with both triangles filled; Q is row-major with column j
 * the j-th eigenvector (common/kfac/kfac_inverse.h), which is what JobResult.eigvecs
 * means too, so it travels as is.
 *
 * Request accounting: n_outstanding counts JobRequest / JobResult messages
 * not yet answered by a Job. A JobRequest is sent only when the daemon is
 * idle (nothing computing, queued or held back by delay_ms) and nothing is
 * outstanding. Jobs that arrive while one is computing (after a re-Hello)
 * queue and run in order.
 *
 * Threads: the compute thread owns the inverse holders and the dense
 * scratch (s->cache, s->dense) and the inverse counters while a job runs; the
 * loop reads the counters only after the pool is closed.
 */
#include "invertd/invertd.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/net/client.h"
#include "common/net/daemon.h"
#include "common/net/wire.h"
#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_linalg.h"
#include "common/base/log.h"
#include "common/net/zloop.h"
#include "proto/msg.h"
#include "common/base/ratelimit.h"
#include "common/base/clock.h"

#define S_CACHE 8                /* inverse holders kept, by n */
#define S_PROGRESS_EVERY 200     /* jobs between info lines */

typedef struct s_job {
    msg_t job;                   /* the Job message (owned) */
    uint32_t sender_id;
    uint64_t t_recv_ns;
    uint8_t *buf;                /* encoded JobResult */
    size_t len;
    double compute_ms;
    int method_used;             /* msg_method_t */
    double damping_used;
    int rc;
    char err[400];
    struct s_job *next;
} s_job_t;

struct invertd_server {
    const runcfg_t *cfg;         /* borrowed */
    client_daemon_t d;            /* loop, job pool, connection */
    s_job_t *qhead, *qtail;      /* jobs waiting for the compute thread */
    int busy;
    s_job_t *held;               /* a result held back by delay_ms */
    uv_timer_t delay;
    int delay_open;
    int n_outstanding;
    uint64_t t_welcome_ns;
    int first_logged;
    uint64_t n_jobs, n_failed, n_invalid, n_sent;
    double compute_ms_sum;
    /* compute thread */
    kfac_inverse_t *cache[S_CACHE];
    int n_cache;
    float *dense;                /* (n, n) scratch */
    size_t dense_cap;
    kfac_inverse_stats_t inv_stats;
};

static void s_next(invertd_server_t *s);

/* ---- compute thread -------------------------------------------------------------- */

static kfac_inverse_t *s_holder(invertd_server_t *s, int n) {
    for (int i = 0; i < s->n_cache; i++)
        if (s->cache[i]->n == n) return s->cache[i];
    kfac_inverse_t *inv = kfac_inverse_new(n);
    if (!inv) return NULL;
    if (s->n_cache == S_CACHE) {
        kfac_inverse_free(&s->cache[0]);
        memmove(s->cache, s->cache + 1, (S_CACHE - 1) * sizeof s->cache[0]);
        s->n_cache--;
    }
    s->cache[s->n_cache++] = inv;
    return inv;
}

static void s_work(void *job, void *user) {
    invertd_server_t *s = user;
    s_job_t *j = job;
    const msg_job_t *jb = &j->job.job;
    double t0 = clock_now_ms();
    size_t n = jb->n;
    if (n * n > s->dense_cap) {
        float *d = realloc(s->dense, n * n * sizeof(float));
        if (!d) {
            j->rc = -ENOMEM;
            snprintf(j->err, sizeof j->err, "out of memory for a %zu x %zu factor", n, n);
            return;
        }
        s->dense = d;
        s->dense_cap = n * n;
    }
    float *F = s->dense;
    /* packed upper (row-major) -> full n x n, both triangles */
    if ((j->rc = kfac_linalg_unpack_upper(jb->packed, (int)n, F)) < 0) {
        snprintf(j->err, sizeof j->err, "bad job shape (n=%zu)", n);
        return;
    }
    kfac_inverse_t *inv = s_holder(s, (int)n);
    if (!inv) {
        j->rc = -ENOMEM;
        snprintf(j->err, sizeof j->err, "out of memory");
        return;
    }
    kfac_inv_method_t method = jb->method == MSG_METHOD_EIGEN ? KFAC_INV_EIGEN : KFAC_INV_CHOLESKY;
    j->rc = kfac_inverse_compute(F, (int)n, (float)jb->damping, method, inv, &s->inv_stats);
    if (j->rc < 0) {
        snprintf(j->err, sizeof j->err, "%s",
                 j->rc == -EDOM     ? "the factor has NaN/Inf entries"
                 : j->rc == -ERANGE ? "every factorization failed (even with 1000x damping and the eigen fallback)"
                 : j->rc == -EINVAL ? "bad arguments (n or damping)"
                                    : strerror(-j->rc));
        return;
    }
    msg_t m;
    msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, j->sender_id);
    msg_job_result_t *r = &m.job_result;
    r->job_id = jb->job_id;
    r->layer = jb->layer;
    r->factor = jb->factor;
    r->factor_version = jb->factor_version;
    float *packed = NULL; /* cholesky: the packed inverse; eigen: Q and v are borrowed from inv */
    if ((j->rc = wire_result_from_inverse(inv, r, &packed)) < 0) {
        snprintf(j->err, sizeof j->err, "%s", j->rc == -ENOMEM ? "out of memory" : "no inverse to send");
        return;
    }
    j->method_used = r->method;
    j->damping_used = r->damping;
    j->compute_ms = clock_now_ms() - t0;
    r->compute_ms = j->compute_ms;
    j->rc = msg_encode(&m, &j->buf, &j->len);
    if (j->rc < 0) snprintf(j->err, sizeof j->err, "encoding the result failed (%d)", j->rc);
    free(packed);
}

/* ---- loop thread ------------------------------------------------------------------ */

static void s_job_free(s_job_t *j) {
    if (!j) return;
    msg_clear(&j->job);
    free(j->buf);
    free(j);
}

static void s_job_request(invertd_server_t *s) {
    msg_t m;
    client_msg_init(s->d.client, &m, MSG_JOB_REQUEST);
    m.job_request.max_n = s->cfg->invertd_max_n > 0 ? (uint32_t)s->cfg->invertd_max_n : 0;
    if (client_send(s->d.client, &m) == 0) s->n_outstanding++;
}

static void s_send_result(invertd_server_t *s, s_job_t *j) {
    const msg_job_t *jb = &j->job.job;
    if (client_send_take(s->d.client, &j->buf, j->len) == 0) {
        s->n_outstanding++;
        s->n_sent++;
        log_debug("job %" PRIu64 " (layer %" PRIu32 " factor %" PRIu32 ", %s, n=%" PRIu32 ", version %" PRIu64
                  ") done in %.1f ms",
                  jb->job_id, jb->layer, jb->factor, msg_method_name((msg_method_t)j->method_used), jb->n,
                  jb->factor_version, j->compute_ms);
        if (s->n_sent % S_PROGRESS_EVERY == 0)
            log_info("%" PRIu64 " inverses sent, %.1f ms each on average", s->n_sent,
                     s->compute_ms_sum / (double)(s->n_jobs ? s->n_jobs : 1));
    }
    s_job_free(j);
}

static void s_on_delay(uv_timer_t *t) {
    invertd_server_t *s = t->data;
    s_job_t *j = s->held;
    s->held = NULL;
    if (j && !client_stopping(s->d.client)) s_send_result(s, j);
    else s_job_free(j);
    s_next(s);
}

static void s_done(void *job, int status, void *user) {
    invertd_server_t *s = user;
    s_job_t *j = job;
    s->busy = 0;
    if (status < 0 || client_stopping(s->d.client)) {
        s_job_free(j);
        return;
    }
    const msg_job_t *jb = &j->job.job;
    s->n_jobs++;
    if (j->rc < 0) {
        s->n_failed++;
        char text[600];
        snprintf(text, sizeof text,
                 "job %" PRIu64 " (layer %" PRIu32 " factor %" PRIu32 ", %s, n=%" PRIu32 ", damping %g, version %" PRIu64
                 ") failed: %s",
                 jb->job_id, jb->layer, jb->factor, msg_method_name(jb->method), jb->n, jb->damping, jb->factor_version,
                 j->err);
        log_error("%s", text);
        msg_t e;
        client_msg_init(s->d.client, &e, MSG_ERROR);
        e.error.code = MSG_ERR_INTERNAL;
        e.error.text = text;
        (void)client_send(s->d.client, &e);
        s_job_free(j);
        s_next(s);
        return;
    }
    s->compute_ms_sum += j->compute_ms;
    uint64_t due = j->t_recv_ns + s->cfg->invertd_delay_ms * 1000000ULL, now = uv_hrtime();
    if (s->cfg->invertd_delay_ms > 0 && due > now && s->delay_open) {
        s->held = j;
        uv_timer_start(&s->delay, s_on_delay, (due - now + 999999) / 1000000, 0);
    } else {
        s_send_result(s, j);
    }
    s_next(s);
}

static void s_next(invertd_server_t *s) {
    if (s->busy || client_stopping(s->d.client) || !client_welcomed(s->d.client)) return;
    if (s->qhead) {
        s_job_t *j = s->qhead;
        s->qhead = j->next;
        if (!s->qhead) s->qtail = NULL;
        j->next = NULL;
        j->sender_id = client_id(s->d.client);
        int rc = zloop_pool_submit(s->d.pool, j);
        if (rc < 0) {
            log_error("cannot queue work: %s", strerror(-rc));
            s_job_free(j);
            client_stop(s->d.client, 1, "internal error", 1);
            return;
        }
        s->busy = 1;
        return;
    }
    if (!s->held && s->n_outstanding == 0) s_job_request(s);
}

static void s_drop_queue(invertd_server_t *s) {
    while (s->qhead) {
        s_job_t *j = s->qhead;
        s->qhead = j->next;
        s_job_free(j);
    }
    s->qtail = NULL;
}

static int s_on_welcome(client_t *c, const msg_welcome_t *w, const runcfg_t *cfg, void *user) {
    (void)c;
    (void)w;
    invertd_server_t *s = user;
    /* A new session: jobs of the previous one are void. */
    s->n_outstanding = 0;
    s_drop_queue(s);
    if (s->held) {
        uv_timer_stop(&s->delay);
        s_job_free(s->held);
        s->held = NULL;
    }
    s->t_welcome_ns = uv_hrtime();
    s->first_logged = 0;
    log_info("ready for jobs: kfac method %s, max_n %d, delay %" PRIu64 " ms", cfg->method == 1 ? "eigen" : "cholesky",
             s->cfg->invertd_max_n, s->cfg->invertd_delay_ms);
    s_next(s);
    return 0;
}

static void s_on_job(invertd_server_t *s, msg_t *m) {
    char err[512];
    if (s->n_outstanding > 0) s->n_outstanding--;
    msg_limits_t lim;
    msg_limits_default(&lim);
    if (s->cfg->invertd_max_n > 0 && (uint32_t)s->cfg->invertd_max_n < lim.max_n)
        lim.max_n = (uint32_t)s->cfg->invertd_max_n;
    int rc = msg_validate(m, &lim, err, sizeof err);
    if (rc == 0 && (!isfinite(m->job.damping) || m->job.damping < 0 ||
                    (m->job.method != MSG_METHOD_CHOLESKY && m->job.method != MSG_METHOD_EIGEN))) {
        snprintf(err, sizeof err, "job %" PRIu64 ": method %s with damping %g cannot be computed", m->job.job_id,
                 msg_method_name(m->job.method), m->job.damping);
        rc = -EINVAL;
    }
    if (rc < 0) {
        client_daemon_reject(&s->d, "a job", err, ++s->n_invalid);
        s_next(s);
        return;
    }
    s_job_t *j = calloc(1, sizeof *j);
    if (!j) {
        client_stop(s->d.client, 1, "out of memory", 1);
        return;
    }
    j->job = *m;
    memset(m, 0, sizeof *m);
    j->t_recv_ns = uv_hrtime();
    if (!s->first_logged) {
        s->first_logged = 1;
        log_info("first job %.0f ms after welcome: job %" PRIu64 " (layer %" PRIu32 " factor %" PRIu32 ", %s, n=%" PRIu32
                 ")",
                 (double)(j->t_recv_ns - s->t_welcome_ns) / 1e6, j->job.job.job_id, j->job.job.layer,
                 j->job.job.factor, msg_method_name(j->job.job.method), j->job.job.n);
    }
    if (s->qtail) s->qtail->next = j;
    else s->qhead = j;
    s->qtail = j;
    s_next(s);
}

static void s_on_message(client_t *c, msg_t *m, void *user) {
    (void)c;
    invertd_server_t *s = user;
    switch (m->type) {
    case MSG_JOB:
        s_on_job(s, m);
        break;
    default:
        if (client_daemon_other_message(&s->d, m) == CLIENT_DAEMON_ERROR) {
            if (s->n_outstanding > 0) s->n_outstanding--;
            s_next(s);
        }
        break;
    }
}

static void s_timer_closed(uv_handle_t *h) { (void)h; }

static void s_on_stop(client_t *c, int exit_code, const char *reason, void *user) {
    (void)c;
    (void)exit_code;
    (void)reason;
    invertd_server_t *s = user;
    zloop_pool_free(&s->d.pool); /* waits for a running job */
    s_drop_queue(s);
    if (s->held) {
        s_job_free(s->held);
        s->held = NULL;
    }
    if (s->delay_open) {
        s->delay_open = 0;
        uv_close((uv_handle_t *)&s->delay, s_timer_closed);
    }
    const kfac_inverse_stats_t *st = &s->inv_stats;
    log_info("%" PRIu64 " jobs (%" PRIu64 " failed, %" PRIu64 " invalid), %" PRIu64 " results sent; inversions: %" PRIu64
             " ok (%" PRIu64 " first try), %" PRIu64 " damping escalations, %" PRIu64 " method fallbacks",
             s->n_jobs, s->n_failed, s->n_invalid, s->n_sent, st->n_ok, st->n_ok_first_try, st->n_damping_escalations,
             st->n_method_fallbacks);
}

static const client_handlers_t s_handlers = {
    .on_welcome = s_on_welcome,
    .on_message = s_on_message,
    .on_stop = s_on_stop,
};

invertd_server_t *invertd_server_new(const runcfg_t *cfg) {
    client_blas_threads(cfg->invertd_threads);
    invertd_server_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cfg = cfg;
    if (client_daemon_init(&s->d, MSG_ROLE_INVERTD, RUNCFG_ROLE_INVERTD, cfg, s_work, s_done, &s_handlers, s) < 0) {
        free(s);
        return NULL;
    }
    uv_timer_init(&s->d.loop, &s->delay);
    s->delay.data = s;
    s->delay_open = 1;
    return s;
}

int invertd_server_run(invertd_server_t *s) { return client_daemon_run(&s->d); }

void invertd_server_free(invertd_server_t **sp) {
    if (!sp || !*sp) return;
    invertd_server_t *s = *sp;
    *sp = NULL;
    if (s->delay_open) { /* never started (the client stopped before its on_stop ran) */
        s->delay_open = 0;
        uv_close((uv_handle_t *)&s->delay, s_timer_closed);
    }
    client_daemon_release(&s->d);
    s_drop_queue(s);
    s_job_free(s->held);
    for (int i = 0; i < s->n_cache; i++) kfac_inverse_free(&s->cache[i]);
    free(s->dense);
    free(s);
}
