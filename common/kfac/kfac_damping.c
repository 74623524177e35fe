/* common/kfac/kfac_damping.c — see kfac_damping.h. */
#include "common/kfac/kfac_damping.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the quadratic model ----------------------------------------------------------- */

double kfac_quad_step(kfac_quad_t *qs, double eta, double vg, double gm, double mu) {
    if (!qs) return NAN;
    if (!isfinite(eta) || !isfinite(vg) || !isfinite(gm) || !isfinite(mu) || !isfinite(qs->q)) {
        qs->q = 0.0;
        return NAN;
    }
    /* delta = -(mu m_{t-1} + eta v); F~ v = g, so v^T F~ m_{t-1} = gm */
    const double lin = -(mu * gm + eta * vg);
    qs->q = mu * mu * qs->q + 2.0 * mu * eta * gm + eta * eta * vg;
    return lin + 0.5 * qs->q;
}

double kfac_quad_grad_dot(const float *g, const float *m, size_t n, const kfac_lowrank_set_t *lr) {
    if (!g || !m) return NAN;
    /* g^T m over the dense part, in double */
    double s = cblas_dsdot((int)n, g, 1, m, 1);
    int max_out = 0;
    for (int i = 0; lr && i < lr->n; i++)
        if (lr->v[i].n_rows > 0 && lr->v[i].n_out > max_out) max_out = lr->v[i].n_out;
    if (max_out == 0) return s;
    float *y = malloc(sizeof(float) * (size_t)max_out);
    if (!y) return NAN;
    for (int i = 0; i < lr->n; i++) {
        const kfac_lowrank_t *e = &lr->v[i];
        const float *M = m + e->w_off;
        for (int r = 0; r < e->n_rows; r++) {
            /* y = M x_r: M (n_out, n_in) row-major, x_r row r of X (n_in) */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, e->n_out, e->n_in, 1.0f, M, e->n_in,
                        e->X + (size_t)r * e->n_in, 1, 0.0f, y, 1);
            /* d_r^T y, d_r row r of D (n_out) */
            s += cblas_dsdot(e->n_out, e->D + (size_t)r * e->n_out, 1, y, 1);
        }
    }
    free(y);
    return s;
}

/* ---- the Levenberg-Marquardt rule ----------------------------------------------------- */

int kfac_lm_check(const kfac_lm_opts_t *o, char *err, size_t err_len) {
    const char *bad = NULL;
    if (!o) bad = "no options";
    else if (o->interval < 1 || o->interval > KFAC_LM_MAX_INTERVAL) bad = "the interval must be in 1 .. 1000";
    else if (!(o->decay > 0.0 && o->decay < 1.0)) bad = "the decay must be in (0, 1)";
    else if (!(o->lo > 0.0) || !isfinite(o->lo) || !isfinite(o->hi) || o->hi < o->lo)
        bad = "the bounds must be finite with 0 < min <= max";
    if (!bad) return 0;
    if (err && err_len) snprintf(err, err_len, "%s", bad);
    return -EINVAL;
}

int kfac_lm_init(kfac_lm_t *lm, const kfac_lm_opts_t *o) {
    if (!lm || kfac_lm_check(o, NULL, 0) < 0) return -EINVAL;
    memset(lm, 0, sizeof *lm);
    lm->o = *o;
    lm->omega = pow(o->decay, (double)o->interval);
    lm->loss = calloc(2 * (size_t)o->interval, sizeof(double));
    lm->pred = calloc(2 * (size_t)o->interval, sizeof(double));
    if (!lm->loss || !lm->pred) {
        kfac_lm_release(lm);
        return -ENOMEM;
    }
    lm->rho = lm->observed = lm->predicted = NAN;
    kfac_lm_reset(lm);
    return 0;
}

void kfac_lm_release(kfac_lm_t *lm) {
    if (!lm) return;
    free(lm->loss);
    free(lm->pred);
    memset(lm, 0, sizeof *lm);
}

void kfac_lm_reset(kfac_lm_t *lm) {
    if (!lm) return;
    lm->next = -1;
    lm->n = 0;
    lm->since = 0;
}

double kfac_lm_rule(double lambda, double rho, double omega, double lo, double hi) {
    if (isfinite(rho)) {
        if (rho > 0.75) lambda *= omega;
        else if (rho < 0.25) lambda /= omega;
    }
    return lambda < lo ? lo : lambda > hi ? hi : lambda;
}

int kfac_lm_observe(kfac_lm_t *lm, long t, double loss, double pred, double *lambda) {
    if (!lm || !lambda || !lm->loss) return -EINVAL;
    const int T = lm->o.interval, W = 2 * T;
    if (lm->next >= 0 && t != lm->next) kfac_lm_reset(lm);
    lm->next = t + 1;
    if (lm->n == W) { /* drop the oldest record */
        memmove(lm->loss, lm->loss + 1, (size_t)(W - 1) * sizeof(double));
        memmove(lm->pred, lm->pred + 1, (size_t)(W - 1) * sizeof(double));
        lm->n--;
    }
    lm->loss[lm->n] = loss;
    lm->pred[lm->n] = pred;
    lm->n++;
    lm->since++;
    if (lm->n < W || lm->since < T) return 0;
    lm->since = 0;
    /* observed: mean of the newer half of the losses minus the older half;
     * predicted: P_j weighted by how many of the T differences span step j */
    double older = 0.0, newer = 0.0, pr = 0.0;
    for (int i = 0; i < T; i++) {
        older += lm->loss[i];
        newer += lm->loss[T + i];
    }
    for (int j = 0; j < W - 1; j++) {
        const int first = j - T + 1 > 0 ? j - T + 1 : 0, last = j < T - 1 ? j : T - 1;
        pr += (double)(last - first + 1) * lm->pred[j];
    }
    const double obs = (newer - older) / T;
    pr /= T;
    /* a predicted change below the losses' rounding (1e-12 of their size,
     * e.g. at the optimum) says nothing: rho would be rounding noise */
    const double scale = 1e-12 * (fabs(older) + fabs(newer)) / (2.0 * T);
    if (!isfinite(obs) || !isfinite(pr) || !(pr < 0.0) || -pr <= scale) {
        lm->n_skipped++;
        return 0;
    }
    lm->observed = obs;
    lm->predicted = pr;
    lm->rho = obs / pr;
    const double before = *lambda;
    *lambda = kfac_lm_rule(before, lm->rho, lm->omega, lm->o.lo, lm->o.hi);
    if (*lambda > before) lm->n_up++;
    else if (*lambda < before) lm->n_down++;
    else lm->n_kept++;
    return 1;
}

/* ---- staleness ---------------------------------------------------------------------------- */

double kfac_age_weight(kfac_age_weight_t rule, long age) {
    if (rule != KFAC_AGE_WEIGHT_INVERSE || age <= 0) return 1.0;
    return 1.0 / (1.0 + (double)age);
}

double kfac_age_bound_divisor(double kappa, double age) {
    if (!(kappa > 0.0) || !(age > 0.0) || !isfinite(kappa) || !isfinite(age)) return 1.0;
    return 1.0 + kappa * age;
}
