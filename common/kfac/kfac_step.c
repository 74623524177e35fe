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
