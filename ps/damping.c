/* ps/damping.c — see damping.h. */
#include "ps/damping.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct ps_damping {
    int adaptive;             /* [kfac] damping_rule = adaptive */
    kfac_lm_t lm;             /* adaptive: the rule and its window */
    kfac_quad_t quad;         /* adaptive: the quadratic model's state */
    double lo, hi;            /* adaptive: bounds */
    double psi;               /* adaptive: what the decisions multiplied in (<= 0: not started) */
    double scheduled;         /* adaptive: the scheduled damping of the last ps_damping_at */
    double mu;                /* momentum */
    double gm;                /* g^T m_{t-1} of the step under way (NaN: none) */
    double kappa;             /* [kfac] inverse_age_damping (0: off) */
    kfac_step_rule_t rule;    /* which bound kappa divides */
    double kl_c0, kl_clip;    /* the configured bounds */
    double divisor;           /* the last step's bound divisor */
    double divisor_sum, divisor_max; /* over the steps so far (kappa > 0) */
    uint64_t n_divided;       /* steps whose bound was divided (kappa > 0) */
};

ps_damping_t *ps_damping_new(const runcfg_t *c, char *err, size_t err_len) {
    ps_damping_t *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    d->adaptive = c->damping_rule == RUNCFG_DAMPING_ADAPTIVE;
    d->lo = c->damping_min;
    d->hi = c->damping_max;
    d->mu = c->momentum;
    d->gm = NAN;
    d->kappa = c->inverse_age_damping;
    d->rule = c->step_rule;
    d->kl_c0 = c->kl_c0;
    d->kl_clip = c->kl_clip;
    d->divisor = 1.0;
    if (d->adaptive) {
        kfac_lm_opts_t o = {.interval = c->damping_interval, .decay = c->damping_decay, .lo = d->lo, .hi = d->hi};
        char why[128];
        if (kfac_lm_check(&o, why, sizeof why) < 0) {
            snprintf(err, err_len, "[kfac] damping_rule = adaptive: %s", why);
            free(d);
            return NULL;
        }
        if (kfac_lm_init(&d->lm, &o) < 0) {
            snprintf(err, err_len, "out of memory");
            free(d);
            return NULL;
        }
    }
    return d;
}

void ps_damping_free(ps_damping_t **d_p) {
    if (!d_p || !*d_p) return;
    ps_damping_t *d = *d_p;
    *d_p = NULL;
    if (d->adaptive) kfac_lm_release(&d->lm);
    free(d);
}

static double s_clamp(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

double ps_damping_at(ps_damping_t *d, double scheduled, double current) {
    if (!d || !d->adaptive || !(scheduled > 0.0)) return scheduled;
    if (!(d->psi > 0.0)) d->psi = current > 0.0 && isfinite(current) ? current / scheduled : 1.0;
    const double lambda = s_clamp(d->psi * scheduled, d->lo, d->hi);
    d->psi = lambda / scheduled; /* a bound reached holds psi there: no wind-up beyond it */
    d->scheduled = scheduled;
    return lambda;
}

void ps_damping_before_step(ps_damping_t *d, kfac_opt_t *k, const float *grad, const kfac_lowrank_set_t *lr, long t) {
    if (!d || !k) return;
    d->gm = d->adaptive ? kfac_quad_grad_dot(grad, k->mom, k->net->n_params, lr) : NAN;
    if (d->kappa > 0.0) {
        double age = 0.0;
        long max;
        kfac_opt_inverse_age(k, t, &age, &max);
        d->divisor = kfac_age_bound_divisor(d->kappa, max >= 0 ? age : 0.0);
        d->divisor_sum += d->divisor;
        if (d->divisor > d->divisor_max) d->divisor_max = d->divisor;
        d->n_divided++;
        if (d->rule == KFAC_STEP_RULE_KL) k->opts.kl_c0 = d->kl_c0 / d->divisor;
        else if (d->rule == KFAC_STEP_RULE_KL_CLIP) k->opts.kl_clip = d->kl_clip / d->divisor;
    }
}

int ps_damping_after_step(ps_damping_t *d, long t, double loss, const kfac_step_info_t *info) {
    if (!d || !d->adaptive || !info) return 0;
    const double pred = kfac_quad_step(&d->quad, info->step, info->vg, d->gm, d->mu);
    d->gm = NAN;
    if (!(d->psi > 0.0)) return 0; /* no damping in force yet (ps_damping_at not called) */
    double lambda = d->psi * d->scheduled; /* the damping in force (clamped by ps_damping_at) */
    int decided = kfac_lm_observe(&d->lm, t, loss, pred, &lambda);
    if (decided == 1) d->psi = lambda / d->scheduled;
    return decided == 1;
}

void ps_damping_step_failed(ps_damping_t *d) {
    if (!d || !d->adaptive) return;
    kfac_lm_reset(&d->lm);
    d->quad.q = 0.0;
    d->gm = NAN;
}

void ps_damping_restart(ps_damping_t *d) {
    if (!d || !d->adaptive) return;
    d->psi = 0.0;
    ps_damping_step_failed(d);
}

double ps_damping_rho(const ps_damping_t *d) { return d && d->adaptive ? d->lm.rho : NAN; }
double ps_damping_bound_divisor(const ps_damping_t *d) { return d ? d->divisor : 1.0; }
const kfac_lm_t *ps_damping_lm(const ps_damping_t *d) { return d && d->adaptive ? &d->lm : NULL; }
int ps_damping_adaptive(const ps_damping_t *d) { return d && d->adaptive; }

void ps_damping_summary(const ps_damping_t *d, double damping, char *buf, size_t len) {
    if (!buf || !len) return;
    buf[0] = '\0';
    if (!d) return;
    size_t off = 0;
    if (d->adaptive) {
        const kfac_lm_t *lm = &d->lm;
        off += (size_t)snprintf(buf, len,
                                ", adaptive damping %g (%llu decisions: %llu up, %llu down, %llu kept; %llu windows "
                                "skipped; last rho %.3g)",
                                damping, (unsigned long long)(lm->n_up + lm->n_down + lm->n_kept),
                                (unsigned long long)lm->n_up, (unsigned long long)lm->n_down,
                                (unsigned long long)lm->n_kept, (unsigned long long)lm->n_skipped, lm->rho);
    }
    if (d->kappa > 0.0 && off < len)
        snprintf(buf + off, len - off, ", KL bound divided by inverse age: mean %.3g, max %.3g over %llu steps",
                 d->n_divided ? d->divisor_sum / (double)d->n_divided : 1.0, d->n_divided ? d->divisor_max : 1.0,
                 (unsigned long long)d->n_divided);
}
