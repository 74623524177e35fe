/* ps/verify.c — see verify.h. */
#include "ps/verify.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"

typedef struct ps_probe {
    uint64_t job_id;  /* 0: empty */
    float damping;    /* the job's */
    double trace;     /* tr F */
    double *x, *y;    /* (n) the probe and (F + d I) x */
} ps_probe_t;

typedef struct ps_verify_block {
    int n;
    ps_probe_t ring[PS_VERIFY_RING];
    int next;
} ps_verify_block_t;

struct ps_verify {
    int n_blocks;
    ps_verify_block_t *b;
    rng_t rng;
    double *u, *w, *t; /* (max n) scratch of the checks */
};

ps_verify_t *ps_verify_new(const int *block_n, int n_blocks, uint64_t seed) {
    ps_verify_t *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    int max_n = 1;
    v->n_blocks = n_blocks;
    v->b = calloc(n_blocks > 0 ? (size_t)n_blocks : 1, sizeof *v->b);
    if (!v->b) goto fail;
    for (int b = 0; b < n_blocks; b++) {
        v->b[b].n = block_n[b];
        if (block_n[b] > max_n) max_n = block_n[b];
    }
    v->u = malloc((size_t)max_n * sizeof *v->u);
    v->w = malloc((size_t)max_n * sizeof *v->w);
    v->t = malloc((size_t)max_n * sizeof *v->t);
    if (!v->u || !v->w || !v->t) goto fail;
    rng_seed(&v->rng, seed ^ 0x5eedf00dULL);
    return v;
fail:
    ps_verify_free(&v);
    return NULL;
}

void ps_verify_free(ps_verify_t **vp) {
    if (!vp || !*vp) return;
    ps_verify_t *v = *vp;
    for (int b = 0; v->b && b < v->n_blocks; b++)
        for (int k = 0; k < PS_VERIFY_RING; k++) {
            free(v->b[b].ring[k].x);
            free(v->b[b].ring[k].y);
        }
    free(v->b);
    free(v->u);
    free(v->w);
    free(v->t);
    free(v);
    *vp = NULL;
}

/* F's (i, j) element from its authoritative upper triangle. */
static inline double s_f(const float *F, int n, int i, int j) {
    return i <= j ? F[(size_t)i * n + j] : F[(size_t)j * n + i];
}

int ps_verify_cut(ps_verify_t *v, int b, uint64_t job_id, const float *F, int n, float damping) {
    if (!v || b < 0 || b >= v->n_blocks || job_id == 0 || !F || n != v->b[b].n) return -EINVAL;
    ps_verify_block_t *vb = &v->b[b];
    ps_probe_t *p = &vb->ring[vb->next];
    vb->next = (vb->next + 1) % PS_VERIFY_RING;
    if (!p->x && (!(p->x = malloc((size_t)n * sizeof *p->x)) || !(p->y = malloc((size_t)n * sizeof *p->y)))) {
        free(p->x);
        p->x = NULL;
        p->job_id = 0;
        return -ENOMEM;
    }
    p->job_id = job_id;
    p->damping = damping;
    p->trace = 0.0;
    for (int i = 0; i < n; i++) p->x[i] = rng_normal(&v->rng);
    for (int i = 0; i < n; i++) {
        double s = (double)damping * p->x[i];
        for (int j = 0; j < n; j++) s += s_f(F, n, i, j) * p->x[j];
        p->y[i] = s;
        p->trace += F[(size_t)i * n + i];
    }
    return 0;
}

double ps_verify_tol(double trace, float damping) {
    double t = PS_VERIFY_TOL;
    if (damping > 0.0f && isfinite(trace)) {
        const double cond = (fabs(trace) + damping) / damping; /* >= the condition number of F + d I */
        if (PS_VERIFY_COND_TOL * cond > t) t = PS_VERIFY_COND_TOL * cond;
    }
    return t < PS_VERIFY_TOL_MAX ? t : PS_VERIFY_TOL_MAX;
}

static ps_probe_t *s_find(const ps_verify_t *v, int b, uint64_t job_id) {
    if (!v || b < 0 || b >= v->n_blocks || job_id == 0) return NULL;
    for (int k = 0; k < PS_VERIFY_RING; k++)
        if (v->b[b].ring[k].job_id == job_id) return (ps_probe_t *)&v->b[b].ring[k];
    return NULL;
}

float ps_verify_damping(const ps_verify_t *v, int b, uint64_t job_id) {
    const ps_probe_t *p = s_find(v, b, job_id);
    return p ? p->damping : -1.0f;
}

void ps_verify_forget(ps_verify_t *v, int b, uint64_t job_id) {
    ps_probe_t *p = s_find(v, b, job_id);
    if (p) p->job_id = 0;
}

/* out = H in for the inverse inv at damping d (eigen: Q diag(1/(v + d)) Q^T). */
static void s_apply(const kfac_inverse_t *inv, float d, const double *in, double *out, double *tmp) {
    const int n = inv->n;
    if (inv->method == KFAC_INV_CHOLESKY) {
        for (int i = 0; i < n; i++) {
            double s = 0.0;
            const float *row = inv->inv + (size_t)i * n;
            for (int j = 0; j < n; j++) s += (double)row[j] * in[j];
            out[i] = s;
        }
        return;
    }
    for (int k = 0; k < n; k++) tmp[k] = 0.0; /* tmp = Q^T in */
    for (int i = 0; i < n; i++) {
        const float *row = inv->Q + (size_t)i * n;
        for (int k = 0; k < n; k++) tmp[k] += (double)row[k] * in[i];
    }
    for (int k = 0; k < n; k++) tmp[k] /= (double)inv->v[k] + d;
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        const float *row = inv->Q + (size_t)i * n;
        for (int k = 0; k < n; k++) s += (double)row[k] * tmp[k];
        out[i] = s;
    }
}

int ps_verify_check(ps_verify_t *v, int b, uint64_t job_id, const kfac_inverse_t *inv, float damping_used,
                    double *residual, char *why, size_t why_len) {
    if (residual) *residual = NAN;
    ps_probe_t *p = s_find(v, b, job_id);
    if (!p) {
        snprintf(why, why_len, "no probe is kept for job %llu", (unsigned long long)job_id);
        return -ENOENT;
    }
    p->job_id = 0; /* one check per job */
    const int n = v->b[b].n;
    if (!inv || inv->n != n || !inv->valid || !isfinite(damping_used) || damping_used < 0.0f) {
        snprintf(why, why_len, "no usable inverse of n=%d", n);
        return -EDOM;
    }
    double *t = v->u, *z = v->w;
    if (inv->method == KFAC_INV_EIGEN) {
        const double top = p->trace * (1.0 + 1e-3) + 1e-6;
        for (int k = 0; k < n; k++)
            if (!(inv->v[k] >= -1e-6 * (fabs(p->trace) + 1.0) && inv->v[k] <= top)) {
                snprintf(why, why_len, "eigenvalue %d is %.6g, outside [0, tr F = %.6g]", k, (double)inv->v[k],
                         p->trace);
                return -EDOM;
            }
        /* orthonormal columns: || Q^T Q u - u || on a fresh random u, in t and z */
        double un = 0.0, en = 0.0;
        for (int i = 0; i < n; i++) z[i] = rng_normal(&v->rng), un += z[i] * z[i];
        for (int k = 0; k < n; k++) t[k] = 0.0; /* t = Q u */
        for (int i = 0; i < n; i++) {
            const float *row = inv->Q + (size_t)i * n;
            double s = 0.0;
            for (int k = 0; k < n; k++) s += (double)row[k] * z[k];
            t[i] = s;
        }
        for (int k = 0; k < n; k++) { /* (Q^T t)_k - u_k */
            double s = 0.0;
            for (int i = 0; i < n; i++) s += (double)inv->Q[(size_t)i * n + k] * t[i];
            en += (s - z[k]) * (s - z[k]);
        }
        const double ortho = sqrt(en / (un > 0.0 ? un : 1.0));
        if (!(ortho <= PS_VERIFY_ORTHO_TOL)) {
            snprintf(why, why_len, "eigenvectors not orthonormal: ||Q^T Q u - u|| / ||u|| = %.3g", ortho);
            return -EDOM;
        }
    }
    /* z = H (y + (d_H - d) x), against x */
    const double extra = (double)damping_used - p->damping;
    for (int i = 0; i < n; i++) t[i] = p->y[i] + extra * p->x[i];
    s_apply(inv, damping_used, t, z, v->t);
    double en = 0.0, xn = 0.0;
    for (int i = 0; i < n; i++) {
        en += (z[i] - p->x[i]) * (z[i] - p->x[i]);
        xn += p->x[i] * p->x[i];
    }
    const double rel = sqrt(en / (xn > 0.0 ? xn : 1.0));
    if (residual) *residual = rel;
    const double tol = ps_verify_tol(p->trace, damping_used);
    if (!(rel <= tol)) {
        snprintf(why, why_len, "it does not invert the factor it was cut from: ||H (F + %.3g I) x - x|| / ||x|| = %.3g "
                 "on a random x (at most %.2g)", (double)damping_used, rel, tol);
        return -EDOM;
    }
    return 0;
}
