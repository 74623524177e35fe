/* common/kfac/kfac_step.c — step size, momentum, weight decay, Polyak averaging,
 * schedules and adaptive refresh (see kfac_step.h). float32 parameters,
 * double scalars. */
#include "common/kfac/kfac_step.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"

/* ---- KL step size ------------------------------------------------------------ */

double kfac_step_kl_c(double c0, double zeta, long t, long decay_every) {
    if (decay_every <= 0 || t <= 0) return c0;
    return c0 * pow(zeta, (double)(t / decay_every));
}

int kfac_step_kl_eta(double vg, double c, double eta_max, double *eta) {
    if (!eta) return -EINVAL;
    *eta = 0.0;
    if (!isfinite(vg) || !isfinite(c) || !isfinite(eta_max)) {
        log_warn("kfac_step_kl_eta: non-finite input (v^T g %g, c %g, eta_max %g): step skipped", vg, c, eta_max);
        return -EDOM;
    }
    if (c < 0.0 || !(eta_max > 0.0)) {
        log_error("kfac_step_kl_eta: need c >= 0 and eta_max > 0 (got %g, %g)", c, eta_max);
        return -EINVAL;
    }
    double q = fabs(vg);
    if (q == 0.0) {
        *eta = eta_max;
        return 0;
    }
    double e = sqrt(c / q);
    *eta = e < eta_max ? e : eta_max;
    return 0;
}

int kfac_step_kl_clip(const double *vg, int n_layers, double lr, double kl_clip, double *nu) {
    if (!nu) return -EINVAL;
    *nu = 0.0;
    if (n_layers < 0 || (n_layers > 0 && !vg) || !(lr > 0.0) || !(kl_clip >= 0.0)) {
        log_error("kfac_step_kl_clip: bad arguments (layers %d, lr %g, kl_clip %g)", n_layers, lr, kl_clip);
        return isfinite(lr) && isfinite(kl_clip) ? -EINVAL : -EDOM;
    }
    double sum = 0.0;
    for (int i = 0; i < n_layers; i++) sum += fabs(vg[i]);
    if (!isfinite(sum) || !isfinite(lr) || !isfinite(kl_clip)) {
        log_warn("kfac_step_kl_clip: non-finite v^T g: step skipped");
        return -EDOM;
    }
    double denom = lr * lr * sum;
    if (denom == 0.0) {
        *nu = 1.0;
        return 0;
    }
    double r = sqrt(kl_clip / denom);
    *nu = r < 1.0 ? r : 1.0;
    return 0;
}

double kfac_step_dot(const float *v, const float *g, size_t n) {
    if (!v || !g || n == 0) return 0.0;
    /* sum_i v_i g_i with products and accumulation in double. Not
     * cblas_dsdot: OpenBLAS 0.3.21's Haswell kernel accumulates it with
     * float-level error (relative 1e-8 on 1e3 terms). */
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) acc[k] += (double)v[i + k] * (double)g[i + k];
    for (; i < n; i++) acc[0] += (double)v[i] * (double)g[i];
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* ---- weight decay, momentum, Polyak ------------------------------------------------ */

void kfac_step_add_weight_decay(float *g, const float *w, size_t n, float wd) {
    if (!g || !w || n == 0 || wd == 0.0f) return;
    /* g <- g + wd w. */
    cblas_saxpy((int)n, wd, w, 1, g, 1);
}

double kfac_step_effective_damping(double damping, double wd, kfac_wd_mode_t mode) {
    return mode == KFAC_WD_DAMPING ? damping + wd : damping;
}

int kfac_step_apply(float *w, float *mom, const float *v, size_t n, double step, double momentum,
                    double wd_decoupled) {
    if (!w || !mom || !v || !(momentum >= 0.0 && momentum < 1.0) || !isfinite(step) ||
        !isfinite(wd_decoupled)) {
        log_error("kfac_step_apply: bad arguments (step %g, momentum %g)", step, momentum);
        return -EINVAL;
    }
    const float mu = (float)momentum, st = (float)step, wds = (float)(step * wd_decoupled);
    for (size_t i = 0; i < n; i++) {
        float m = mu * mom[i] + st * v[i] + wds * w[i];
        mom[i] = m;
        w[i] -= m;
    }
    return 0;
}

int kfac_step_polyak(float *avg, const float *w, size_t n, double decay, long *count) {
    if (!avg || !w || !count || !(decay >= 0.0 && decay < 1.0)) {
        log_error("kfac_step_polyak: bad arguments (decay %g)", decay);
        return -EINVAL;
    }
    if (*count == 0) {
        memcpy(avg, w, n * sizeof *avg);
    } else {
        /* avg <- decay avg + (1 - decay) w. */
        cblas_sscal((int)n, (float)decay, avg, 1);
        cblas_saxpy((int)n, (float)(1.0 - decay), w, 1, avg, 1);
    }
    *count += 1;
    return 0;
}

/* ---- schedules ------------------------------------------------------------------------ */

static int s_check_milestones(const long *m, int k, const char *what) {
    if (k < 0 || k > KFAC_SCHEDULE_MAX) {
        log_error("kfac schedule: %d %s milestones (at most %d)", k, what, KFAC_SCHEDULE_MAX);
        return -EINVAL;
    }
    for (int i = 0; i < k; i++)
        if (m[i] < 0 || (i > 0 && m[i] <= m[i - 1])) {
            log_error("kfac schedule: %s milestones must be non-negative and increasing", what);
            return -EINVAL;
        }
    return 0;
}

int kfac_schedule_check(const kfac_schedule_t *s) {
    if (!s) return -EINVAL;
    if (s->fac_interval < 1 || s->inv_interval < 1 || !(s->damping > 0.0) || !isfinite(s->damping)) {
        log_error("kfac schedule: intervals must be >= 1 and damping > 0 (got %d, %d, %g)",
                  s->fac_interval, s->inv_interval, s->damping);
        return -EINVAL;
    }
    if (s->n_interval_milestones > 0 && !(s->interval_factor > 0.0 && isfinite(s->interval_factor))) {
        log_error("kfac schedule: interval_factor must be > 0");
        return -EINVAL;
    }
    if (s->n_damping_milestones > 0 && !(s->damping_factor > 0.0 && isfinite(s->damping_factor))) {
        log_error("kfac schedule: damping_factor must be > 0");
        return -EINVAL;
    }
    int rc = s_check_milestones(s->interval_milestones, s->n_interval_milestones, "interval");
    return rc ? rc : s_check_milestones(s->damping_milestones, s->n_damping_milestones, "damping");
}

static int s_passed(const long *m, int k, long t) {
    int p = 0;
    while (p < k && t >= m[p]) p++;
    return p;
}

static int s_scaled_interval(int base, double f) {
    double v = round((double)base * f); /* halves away from zero */
    if (!(v >= 1.0)) return 1;
    return v > 1e9 ? 1000000000 : (int)v;
}

int kfac_schedule_at(const kfac_schedule_t *s, long t, int *fac_interval, int *inv_interval,
                     double *damping) {
    if (t < 0 || kfac_schedule_check(s) != 0) return -EINVAL;
    int pi = s_passed(s->interval_milestones, s->n_interval_milestones, t);
    int pd = s_passed(s->damping_milestones, s->n_damping_milestones, t);
    double fi = pi ? pow(s->interval_factor, pi) : 1.0;
    if (fac_interval) *fac_interval = s_scaled_interval(s->fac_interval, fi);
    if (inv_interval) *inv_interval = s_scaled_interval(s->inv_interval, fi);
    if (damping) *damping = s->damping * (pd ? pow(s->damping_factor, pd) : 1.0);
    return 0;
}

/* ---- adaptive refresh ------------------------------------------------------------------- */

double kfac_refresh_distance(const float *x, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)x[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

int kfac_refresh_interval(const float *x, const float *x1, const float *x2, size_t n, double alpha,
                          int *delta, int *delta_prev) {
    if (!x || !delta || !delta_prev || n == 0 || !(alpha > 0.0) || *delta < 1 || *delta_prev < 1) {
        log_error("kfac_refresh_interval: bad arguments");
        return -EINVAL;
    }
    int d1 = *delta, d2 = *delta_prev, next;
    int sim1 = x1 && kfac_refresh_distance(x, x1, n) < alpha;
    int sim2 = x2 && kfac_refresh_distance(x, x2, n) < alpha;
    if (!sim1)
        next = d1 / 2 > 1 ? d1 / 2 : 1;
    else if (!sim2)
        next = d1;
    else
        next = d1 > 1000000000 - d2 ? 1000000000 : d1 + d2;
    *delta = next;
    *delta_prev = d1;
    return 0;
}

kfac_refresh_t *kfac_refresh_new(size_t n, double alpha, long t0) {
    if (n == 0 || !(alpha > 0.0)) {
        log_error("kfac_refresh_new: need n > 0 and alpha > 0");
        return NULL;
    }
    kfac_refresh_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->x1 = malloc(n * sizeof *r->x1);
    r->x2 = malloc(n * sizeof *r->x2);
    if (!r->x1 || !r->x2) {
        kfac_refresh_free(&r);
        return NULL;
    }
    r->n = n;
    r->alpha = alpha;
    r->delta = r->delta_prev = 1;
    r->next = t0;
    return r;
}

void kfac_refresh_free(kfac_refresh_t **r_p) {
    if (!r_p || !*r_p) return;
    free((*r_p)->x1);
    free((*r_p)->x2);
    free(*r_p);
    *r_p = NULL;
}

int kfac_refresh_record(kfac_refresh_t *r, const float *x, long t) {
    if (!r || !x) return -EINVAL;
    int rc = kfac_refresh_interval(x, r->have >= 1 ? r->x1 : NULL, r->have >= 2 ? r->x2 : NULL, r->n,
                                   r->alpha, &r->delta, &r->delta_prev);
    if (rc) return rc;
    r->next = t + r->delta;
    float *tmp = r->x2; /* X_{-2} <- X_{-1}, X_{-1} <- x */
    r->x2 = r->x1;
    r->x1 = tmp;
    memcpy(r->x1, x, r->n * sizeof *x);
    if (r->have < 2) r->have++;
    return r->delta;
}
