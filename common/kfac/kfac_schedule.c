/* common/kfac/kfac_schedule.c — see kfac_schedule.h. */
#include "common/kfac/kfac_schedule.h"

#include <errno.h>
#include <math.h>

#include "common/base/log.h"

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
