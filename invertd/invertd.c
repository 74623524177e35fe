/* invertd/invertd.c — see invertd.h.
 *
 * Conventions: Job.packed and JobResult.inverse are packed upper triangles,
 * row-major (proto/msg.h); the dense factor handed to kfac_inverse_compute is
 * n x n row-major with both triangles filled; Q is row-major with column j
 * the j-th eigenvector (common/kfac/kfac_inverse.h), which is what JobResult.eigvecs
 * means too, so it travels as is.
 *
 * A role of the client skeleton (common/net/daemon.h): no setup (a Welcome
 * makes it ready at once), the inverse of one Job (the work) and the
 * JobResult (the result). The skeleton counts the JobRequest / JobResult
 * messages not yet answered by a Job and sends a JobRequest only when the
 * daemon is idle (nothing computing or pending) and nothing is outstanding;
 * this role holds it back while a result waits for delay_ms. Jobs that
 * arrive while one is computing (after a re-Hello) wait in the skeleton's
 * pending list and run in order.
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

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_linalg.h"
#include "common/net/client.h"
#include "common/net/daemon.h"
#include "common/net/wire.h"
#include "proto/msg.h"

#define S_CACHE 8                /* inverse holders kept, by n */
#define S_PROGRESS_EVERY 200     /* jobs between info lines */

typedef struct s_job {
    client_daemon_job_t base;    /* in: the Job */
    uint64_t t_recv_ns;
    int method_used;             /* msg_method_t */
    double damping_used;
} s_job_t;

typedef struct s_invertd {
    const runcfg_t *cfg;         /* borrowed: the local configuration */
    client_daemon_t *d;          /* borrowed: the daemon this is the state of (for the delay timer) */
    s_job_t *held;               /* a result held back by delay_ms */
    uv_timer_t delay;
    int delay_open;
    uint64_t t_welcome_ns;
    int first_logged;
    uint64_t n_jobs, n_failed, n_sent;
    double compute_ms_sum;
    /* compute thread */
    kfac_inverse_t *cache[S_CACHE];
    int n_cache;
    float *dense;                /* (n, n) scratch */
    size_t dense_cap;
    kfac_inverse_stats_t inv_stats;
} s_invertd_t;

/* ---- compute thread -------------------------------------------------------------- */

static kfac_inverse_t *s_holder(s_invertd_t *s, int n) {
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

static void s_work(void *state, compute_ctx_t *cc, client_daemon_job_t *job) {
    (void)cc;
    s_invertd_t *s = state;
    s_job_t *j = (s_job_t *)job;
    const msg_job_t *jb = &job->in.job;
    double t0 = clock_now_ms();
    size_t n = jb->n;
    if (n * n > s->dense_cap) {
        float *d = realloc(s->dense, n * n * sizeof(float));
        if (!d) {
            job->rc = -ENOMEM;
            snprintf(job->err, sizeof job->err, "out of memory for a %zu x %zu factor", n, n);
            return;
        }
        s->dense = d;
        s->dense_cap = n * n;
    }
    float *F = s->dense;
    /* packed upper (row-major) -> full n x n, both triangles */
    if ((job->rc = kfac_linalg_unpack_upper(jb->packed, (int)n, F)) < 0) {
        snprintf(job->err, sizeof job->err, "bad job shape (n=%zu)", n);
        return;
    }
    kfac_inverse_t *inv = s_holder(s, (int)n);
    if (!inv) {
        job->rc = -ENOMEM;
        snprintf(job->err, sizeof job->err, "out of memory");
        return;
    }
    kfac_inv_method_t method = jb->method == MSG_METHOD_EIGEN ? KFAC_INV_EIGEN : KFAC_INV_CHOLESKY;
    job->rc = kfac_inverse_compute(F, (int)n, (float)jb->damping, method, inv, &s->inv_stats);
    if (job->rc < 0) {
        snprintf(job->err, sizeof job->err, "%s",
                 job->rc == -EDOM     ? "the factor has NaN/Inf entries"
                 : job->rc == -ERANGE ? "every factorization failed (even with 1000x damping and the eigen fallback)"
                 : job->rc == -EINVAL ? "bad arguments (n or damping)"
                                      : strerror(-job->rc));
        return;
    }
    msg_t m;
    msg_init(&m, MSG_JOB_RESULT, MSG_ROLE_INVERTD, job->sender_id);
    msg_job_result_t *r = &m.job_result;
    r->job_id = jb->job_id;
    r->layer = jb->layer;
    r->factor = jb->factor;
    r->factor_version = jb->factor_version;
    float *packed = NULL; /* cholesky: the packed inverse; eigen: Q and v are borrowed from inv */
    if ((job->rc = wire_result_from_inverse(inv, r, &packed)) < 0) {
        snprintf(job->err, sizeof job->err, "%s", job->rc == -ENOMEM ? "out of memory" : "no inverse to send");
        return;
    }
    j->method_used = r->method;
    j->damping_used = r->damping;
    client_daemon_job_answer(job, &m, &r->compute_ms, t0, NULL, NULL, "the result");
    free(packed);
}

/* ---- loop thread ------------------------------------------------------------------ */

static void s_send_result(s_invertd_t *s, s_job_t *j) {
    const msg_job_t *jb = &j->base.in.job;
    if (client_daemon_send_result(s->d, &j->base) == 0) {
        s->n_sent++;
        log_debug("job %" PRIu64 " (layer %" PRIu32 " factor %" PRIu32 ", %s, n=%" PRIu32 ", version %" PRIu64
                  ") done in %.1f ms",
                  jb->job_id, jb->layer, jb->factor, msg_method_name((msg_method_t)j->method_used), jb->n,
                  jb->factor_version, j->base.compute_ms);
        if (s->n_sent % S_PROGRESS_EVERY == 0)
            log_info("%" PRIu64 " inverses sent, %.1f ms each on average", s->n_sent,
                     s->compute_ms_sum / (double)(s->n_jobs ? s->n_jobs : 1));
    }
    client_daemon_job_free(&j->base);
}

static void s_drop_held(s_invertd_t *s) {
    if (!s->held) return;
    if (s->delay_open) uv_timer_stop(&s->delay);
    client_daemon_job_free(&s->held->base);
    s->held = NULL;
}

static void s_on_delay(uv_timer_t *t) {
    s_invertd_t *s = t->data;
    s_job_t *j = s->held;
    s->held = NULL;
    if (j && !client_stopping(client_daemon_client(s->d))) s_send_result(s, j);
    else client_daemon_job_free(j ? &j->base : NULL);
    client_daemon_next(s->d);
}

/* A job that failed numerically: Error(INTERNAL) naming it, so kfac-ps
 * hands it out again; then the next. */
static void s_failed(client_daemon_t *d, client_daemon_job_t *job) {
    s_invertd_t *s = client_daemon_state(d);
    const msg_job_t *jb = &job->in.job;
    char text[800];
    s->n_jobs++;
    s->n_failed++;
    snprintf(text, sizeof text,
             "job %" PRIu64 " (layer %" PRIu32 " factor %" PRIu32 ", %s, n=%" PRIu32 ", damping %g, version %" PRIu64
             ") failed: %s",
             jb->job_id, jb->layer, jb->factor, msg_method_name(jb->method), jb->n, jb->damping, jb->factor_version,
             job->err);
    log_error("%s", text);
    msg_t e;
    client_msg_init(client_daemon_client(d), &e, MSG_ERROR);
    e.error.code = MSG_ERR_INTERNAL;
    e.error.text = text;
    (void)client_send(client_daemon_client(d), &e);
}

static int s_done(client_daemon_t *d, client_daemon_job_t *job) {
    s_invertd_t *s = client_daemon_state(d);
    s_job_t *j = (s_job_t *)job;
    s->n_jobs++;
    s->compute_ms_sum += job->compute_ms;
    uint64_t due = j->t_recv_ns + s->cfg->invertd_delay_ms * 1000000ULL, now = uv_hrtime();
    if (s->cfg->invertd_delay_ms > 0 && due > now && s->delay_open) {
        s->held = j;
        uv_timer_start(&s->delay, s_on_delay, (due - now + 999999) / 1000000, 0);
        return 1;
    }
    s_send_result(s, j);
    return 1; /* s_send_result freed it */
}

/* JobRequest(max_n), unless a result is held back by delay_ms. */
static int s_request(client_daemon_t *d, msg_t *m) {
    const s_invertd_t *s = client_daemon_state(d);
    if (s->held) return 1;
    m->job_request.max_n = s->cfg->invertd_max_n > 0 ? (uint32_t)s->cfg->invertd_max_n : 0;
    return 0;
}

static int s_welcome(client_daemon_t *d, const msg_welcome_t *w, const runcfg_t *cfg, compute_setup_t *st) {
    (void)w;
    (void)st;
    s_invertd_t *s = client_daemon_state(d);
    /* A new session: a result of the previous one is void. */
    s_drop_held(s);
    s->t_welcome_ns = uv_hrtime();
    s->first_logged = 0;
    log_info("ready for jobs: kfac method %s, max_n %d, delay %" PRIu64 " ms", cfg->method == KFAC_INV_EIGEN ? "eigen" : "cholesky",
             s->cfg->invertd_max_n, s->cfg->invertd_delay_ms);
    return CLIENT_DAEMON_WELCOME_READY;
}

static int s_accept(client_daemon_t *d, client_daemon_job_t *job, const client_daemon_job_t *newest, char *err,
                    size_t n) {
    (void)newest;
    s_invertd_t *s = client_daemon_state(d);
    s_job_t *j = (s_job_t *)job;
    const msg_job_t *jb = &job->in.job;
    msg_limits_t lim;
    msg_limits_default(&lim);
    if (s->cfg->invertd_max_n > 0 && (uint32_t)s->cfg->invertd_max_n < lim.max_n)
        lim.max_n = (uint32_t)s->cfg->invertd_max_n;
    if (msg_validate(&job->in, &lim, err, n) < 0) return -EINVAL;
    if (!isfinite(jb->damping) || jb->damping < 0 ||
        (jb->method != MSG_METHOD_CHOLESKY && jb->method != MSG_METHOD_EIGEN)) {
        snprintf(err, n, "job %" PRIu64 ": method %s with damping %g cannot be computed", jb->job_id,
                 msg_method_name(jb->method), jb->damping);
        return -EINVAL;
    }
    j->t_recv_ns = uv_hrtime();
    if (!s->first_logged) {
        s->first_logged = 1;
        log_info("first job %.0f ms after welcome: job %" PRIu64 " (layer %" PRIu32 " factor %" PRIu32 ", %s, n=%" PRIu32
                 ")",
                 (double)(j->t_recv_ns - s->t_welcome_ns) / 1e6, jb->job_id, jb->layer, jb->factor,
                 msg_method_name(jb->method), jb->n);
    }
    return CLIENT_DAEMON_INPUT_QUEUE;
}

static void s_timer_closed(uv_handle_t *h) { (void)h; }

static void s_close_delay(s_invertd_t *s) {
    if (!s->delay_open) return;
    s->delay_open = 0;
    uv_close((uv_handle_t *)&s->delay, s_timer_closed);
}

static void s_stop(client_daemon_t *d) {
    s_invertd_t *s = client_daemon_state(d);
    s_drop_held(s);
    s_close_delay(s);
    const kfac_inverse_stats_t *st = &s->inv_stats;
    log_info("%" PRIu64 " jobs (%" PRIu64 " failed, %" PRIu64 " invalid), %" PRIu64 " results sent; inversions: %" PRIu64
             " ok (%" PRIu64 " first try), %" PRIu64 " damping escalations, %" PRIu64 " method fallbacks",
             s->n_jobs, s->n_failed, client_daemon_n_invalid(s->d), s->n_sent, st->n_ok, st->n_ok_first_try,
             st->n_damping_escalations, st->n_method_fallbacks);
    for (int i = 0; i < s->n_cache; i++) kfac_inverse_free(&s->cache[i]);
    s->n_cache = 0;
    free(s->dense);
    s->dense = NULL;
}

static int s_init(client_daemon_t *d) {
    s_invertd_t *s = client_daemon_state(d);
    s->d = d;
    s->cfg = client_daemon_config(d);
    uv_timer_init(client_daemon_loop(d), &s->delay);
    s->delay.data = s;
    s->delay_open = 1;
    return 0;
}

/* The invertd role (common/net/daemon.h). */
static const client_daemon_role_t s_role = {
    .role = RUNCFG_ROLE_INVERTD, .job_size = sizeof(s_job_t), .state_size = sizeof(s_invertd_t),
    /* loop thread */
    .init = s_init, .welcome = s_welcome, .accept = s_accept, .done = s_done, .failed = s_failed,
    .request = s_request, .stop = s_stop,
    /* compute thread */
    .work = s_work,
};

const client_daemon_role_t *invertd_role(void) { return &s_role; }
