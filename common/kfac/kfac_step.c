/* common/kfac/kfac_step.c — step size, momentum, weight decay, Polyak averaging,
 * schedules and adaptive refresh (see kfac_step.h). float32 parameters,
 * double scalars. */
#include "common/kfac/kfac_step.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/kfac/kfac_linalg.h"
#include "common/nn/nn_par.h"

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

double kfac_step_norm2(const float *x, size_t n) {
    if (!x || n == 0) return 0.0;
    double acc[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)x[i + k] * (double)x[i + k];
    for (; i < n; i++) acc[0] += (double)x[i] * (double)x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
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

/* ---- the update's tail ------------------------------------------------------------ */

/* Below this many parameters a pass stays on the calling thread: such a
 * pass takes a fraction of a millisecond, and a pool's hand-off on a busy
 * host can cost more (measured with bench/fast_members.sh on 2 shared
 * cores: the demo model's 215k-parameter SGD update took 1.2-2.1 ms on a
 * pool of 2 against 0.6-1.1 ms on the loop thread). */
#define STEP_PAR_MIN (1 << 18)

/* Part `part` of n_parts of n elements: [*lo, *hi), contiguous, in order,
 * cut at multiples of 16 floats (a 64-byte cache line) so that two parts
 * never write the same line. */
static void s_range(size_t n, int part, int n_parts, size_t *lo, size_t *hi) {
    size_t lines = (n + 15) / 16;
    size_t a = lines * (size_t)part / (size_t)n_parts, b = lines * (size_t)(part + 1) / (size_t)n_parts;
    *lo = a * 16 < n ? a * 16 : n;
    *hi = b * 16 < n ? b * 16 : n;
}

/* Run fn over par's threads when n is large enough to pay, else here. */
static void s_run(nn_par_t *par, size_t n, nn_par_fn fn, void *arg) {
    if (n >= STEP_PAR_MIN && nn_par_threads(par) > 1) nn_par_run(par, fn, arg);
    else fn(arg, 0, 1);
}

typedef struct {
    const kfac_step_tail_t *t;
    int first; /* the Polyak average's first call: avg = w */
} tail_job_t;

static void s_tail_part(void *arg, int part, int n_parts) {
    const tail_job_t *j = arg;
    const kfac_step_tail_t *t = j->t;
    size_t lo, hi;
    s_range(t->n, part, n_parts, &lo, &hi);
    float *w = t->w, *mom = t->mom, *avg = t->avg;
    const float *v = t->v, *mask = t->wd_mask;
    const float mu = (float)t->momentum, st = (float)t->step, wd = (float)t->wd;
    const float dec = (float)t->polyak_decay, dec1 = (float)(1.0 - t->polyak_decay);
    const int sgd = t->form == KFAC_STEP_FORM_SGD, with_wd = t->wd > 0.0;
    /* Blocks of 1024: each loop below stays in the L1 cache, one form per
     * loop so that each vectorizes. */
    for (size_t b = lo; b < hi; b += 1024) {
        const size_t e = b + 1024 < hi ? b + 1024 : hi;
        if (sgd) {
            /* d = v + wd mask w;  m = mu m + d;  w -= step m */
            for (size_t i = b; i < e; i++) {
                float d = with_wd ? v[i] + wd * mask[i] * w[i] : v[i];
                float m = mu * mom[i] + d;
                mom[i] = m;
                w[i] -= st * m;
            }
        } else {
            /* d = v + wd mask w;  m = mu m + step d;  w -= m */
            for (size_t i = b; i < e; i++) {
                float d = with_wd ? v[i] + wd * mask[i] * w[i] : v[i];
                float m = mu * mom[i] + st * d;
                mom[i] = m;
                w[i] -= m;
            }
        }
        if (!avg) continue;
        if (j->first) {
            memcpy(avg + b, w + b, (e - b) * sizeof *avg);
        } else {
            /* avg <- decay avg + (1 - decay) w */
            for (size_t i = b; i < e; i++) avg[i] = dec * avg[i] + dec1 * w[i];
        }
    }
}

int kfac_step_tail(const kfac_step_tail_t *t, nn_par_t *par) {
    if (!t || !t->w || !t->mom || !t->v || (t->wd > 0.0 && !t->wd_mask) || !(t->wd >= 0.0) ||
        !(t->momentum >= 0.0 && t->momentum < 1.0) || !isfinite(t->step) || !isfinite(t->wd) ||
        (t->avg && (!t->polyak_count || !(t->polyak_decay >= 0.0 && t->polyak_decay < 1.0)))) {
        log_error("kfac_step_tail: bad arguments (step %g, momentum %g, wd %g)", t ? t->step : 0.0,
                  t ? t->momentum : 0.0, t ? t->wd : 0.0);
        return -EINVAL;
    }
    tail_job_t j = {t, t->avg && *t->polyak_count == 0};
    s_run(par, t->n, s_tail_part, &j);
    if (t->avg) *t->polyak_count += 1;
    return 0;
}

size_t kfac_step_dots_parts(const kfac_step_seg_t *seg, int n_seg) {
    size_t c = 0;
    for (int i = 0; i < n_seg; i++) c += (seg[i].len + KFAC_STEP_DOT_CHUNK - 1) / KFAC_STEP_DOT_CHUNK;
    return c;
}

typedef struct {
    const float *v, *g;
    const kfac_step_seg_t *seg;
    int n_seg;
    size_t n_chunks;
    double *part;
} dots_job_t;

static void s_dots_part(void *arg, int part, int n_parts) {
    const dots_job_t *j = arg;
    size_t lo = j->n_chunks * (size_t)part / (size_t)n_parts, hi = j->n_chunks * (size_t)(part + 1) / (size_t)n_parts;
    size_t c = 0; /* the first chunk of segment i */
    for (int i = 0; i < j->n_seg && c < hi; i++) {
        const size_t len = j->seg[i].len, n_c = (len + KFAC_STEP_DOT_CHUNK - 1) / KFAC_STEP_DOT_CHUNK;
        for (size_t k = 0; k < n_c; k++) {
            if (c + k < lo || c + k >= hi) continue;
            const size_t a = j->seg[i].off + k * KFAC_STEP_DOT_CHUNK, rest = len - k * KFAC_STEP_DOT_CHUNK;
            j->part[c + k] = kfac_step_dot(j->v + a, j->g + a, rest < KFAC_STEP_DOT_CHUNK ? rest : KFAC_STEP_DOT_CHUNK);
        }
        c += n_c;
    }
}

int kfac_step_dots(const float *v, const float *g, const kfac_step_seg_t *seg, int n_seg, double *dot, double *part,
                   size_t n_part, nn_par_t *par) {
    if (n_seg < 0 || (n_seg > 0 && (!v || !g || !seg || !dot))) return -EINVAL;
    const size_t n_chunks = kfac_step_dots_parts(seg, n_seg);
    if (n_chunks > n_part || (n_chunks && !part)) return -EINVAL;
    size_t n = 0;
    for (int i = 0; i < n_seg; i++) n += seg[i].len;
    dots_job_t j = {v, g, seg, n_seg, n_chunks, part};
    if (n >= STEP_PAR_MIN && nn_par_threads(par) > 1 && n_chunks > 1) nn_par_run(par, s_dots_part, &j);
    else s_dots_part(&j, 0, 1);
    /* each segment's chunks in order: the same sum on any number of threads */
    size_t c = 0;
    for (int i = 0; i < n_seg; i++) {
        const size_t n_c = (seg[i].len + KFAC_STEP_DOT_CHUNK - 1) / KFAC_STEP_DOT_CHUNK;
        double s = 0.0;
        for (size_t k = 0; k < n_c; k++) s += part[c + k];
        dot[i] = s;
        c += n_c;
    }
    return 0;
}

typedef struct {
    float *dst;
    const float *src;
    size_t n;
    atomic_size_t first; /* the smallest index found not finite, n if none */
} copy_job_t;

static void s_copy_part(void *arg, int part, int n_parts) {
    copy_job_t *j = arg;
    size_t lo, hi;
    s_range(j->n, part, n_parts, &lo, &hi);
    for (size_t b = lo; b < hi; b += 4096) {
        const size_t e = b + 4096 < hi ? b + 4096 : hi;
        if (j->dst) memcpy(j->dst + b, j->src + b, (e - b) * sizeof(float));
        if (kfac_linalg_all_finite(j->src + b, e - b)) continue;
        size_t i = b;
        while (isfinite(j->src[i])) i++;
        size_t cur = atomic_load(&j->first);
        while (i < cur && !atomic_compare_exchange_weak(&j->first, &cur, i)) {
        }
        if (!j->dst) return; /* the rest of this part cannot hold a smaller index */
    }
}

size_t kfac_step_copy_finite(float *dst, const float *src, size_t n, nn_par_t *par) {
    if (n == 0) return 0;
    copy_job_t j = {dst, src, n, n};
    s_run(par, n, s_copy_part, &j);
    return atomic_load(&j.first);
}
