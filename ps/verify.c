/* ps/verify.c — see verify.h.
 *
 * Layout: a probe's V and W are row-major n x PS_VERIFY_PROBES doubles
 * (row i holds component i of every direction), so that one pass over a
 * row of F or H updates all directions at once; directions dropped as
 * dependent are zero columns past p->k. */
#include "ps/verify.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"

#define K PS_VERIFY_PROBES
#define B (PS_VERIFY_PROBES / 2) /* random directions; the other half are their images under F */

typedef struct ps_probe {
    uint64_t job_id; /* 0: empty */
    float damping;   /* the job's */
    double trace;    /* tr F */
    int k;           /* directions kept (<= K) */
    double *V;       /* (n, K) orthonormal columns 0..k-1 spanning R and F R */
    double *W;       /* (n, K) (F + d I) V */
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
    double *X, *FX; /* (max n, K) scratch of the cut */
    double *T, *Z;  /* (max n, K) scratch of the checks; T also (max n) vectors */
    double *L;      /* (max n, PS_VERIFY_LANCZOS) Lanczos vectors of the checks */
    float *vf, *wf; /* (max n) a Lanczos vector and its image, for sgemv */
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
    const size_t len = (size_t)max_n * K;
    v->X = malloc(len * sizeof *v->X);
    v->FX = malloc(len * sizeof *v->FX);
    v->T = malloc(len * sizeof *v->T);
    v->Z = malloc(len * sizeof *v->Z);
    v->L = malloc((size_t)max_n * PS_VERIFY_LANCZOS * sizeof *v->L);
    v->vf = malloc((size_t)max_n * sizeof *v->vf);
    v->wf = malloc((size_t)max_n * sizeof *v->wf);
    if (!v->X || !v->FX || !v->T || !v->Z || !v->L || !v->vf || !v->wf) goto fail;
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
            free(v->b[b].ring[k].V);
            free(v->b[b].ring[k].W);
        }
    free(v->b);
    free(v->X);
    free(v->FX);
    free(v->T);
    free(v->Z);
    free(v->L);
    free(v->vf);
    free(v->wf);
    free(v);
    *vp = NULL;
}

/* Y[:, y0 .. y0+B) = F X[:, x0 .. x0+B) for F's authoritative upper
 * triangle (row-major n x n float), X and Y (n, K) doubles; *trace (may
 * be NULL) receives tr F. One pass over the triangle, each element used
 * for both of its positions. */
static void s_symm(const float *F, int n, const double *X, int x0, double *Y, int y0, double *trace) {
    for (int i = 0; i < n; i++)
        for (int c = 0; c < B; c++) Y[(size_t)i * K + y0 + c] = 0.0;
    double tr = 0.0;
    for (int i = 0; i < n; i++) {
        const float *row = F + (size_t)i * n;
        const double *xi = X + (size_t)i * K + x0;
        double *yi = Y + (size_t)i * K + y0;
        const double fii = row[i];
        tr += fii;
        double acc[B];
        for (int c = 0; c < B; c++) acc[c] = fii * xi[c];
        for (int j = i + 1; j < n; j++) {
            const double f = row[j];
            const double *xj = X + (size_t)j * K + x0;
            double *yj = Y + (size_t)j * K + y0;
            for (int c = 0; c < B; c++) {
                acc[c] += f * xj[c];
                yj[c] += f * xi[c];
            }
        }
        for (int c = 0; c < B; c++) yi[c] += acc[c];
    }
    if (trace) *trace = tr;
}

/* Orthonormalise the columns 0..K-1 of X (n, K) by modified Gram-Schmidt,
 * twice, applying every column operation to FX as well (so FX = F X holds
 * throughout); a column left with less than 1e-8 of its length is
 * dropped. The kept columns are moved to the front. Returns how many. */
static int s_orthonormalise(double *X, double *FX, int n) {
    int k = 0;
    for (int c = 0; c < K; c++) {
        double n0 = 0.0;
        for (int i = 0; i < n; i++) n0 += X[(size_t)i * K + c] * X[(size_t)i * K + c];
        for (int pass = 0; pass < 2; pass++)
            for (int a = 0; a < k; a++) {
                double r = 0.0;
                for (int i = 0; i < n; i++) r += X[(size_t)i * K + a] * X[(size_t)i * K + c];
                for (int i = 0; i < n; i++) {
                    X[(size_t)i * K + c] -= r * X[(size_t)i * K + a];
                    FX[(size_t)i * K + c] -= r * FX[(size_t)i * K + a];
                }
            }
        double n1 = 0.0;
        for (int i = 0; i < n; i++) n1 += X[(size_t)i * K + c] * X[(size_t)i * K + c];
        if (!(n1 > 1e-16 * n0) || !(n1 > 0.0) || !isfinite(n1)) continue; /* dependent on the kept ones */
        const double s = 1.0 / sqrt(n1);
        for (int i = 0; i < n; i++) {
            X[(size_t)i * K + k] = s * X[(size_t)i * K + c];
            FX[(size_t)i * K + k] = s * FX[(size_t)i * K + c];
        }
        k++;
    }
    for (int i = 0; i < n; i++)
        for (int c = k; c < K; c++) X[(size_t)i * K + c] = FX[(size_t)i * K + c] = 0.0;
    return k;
}

int ps_verify_cut(ps_verify_t *v, int b, uint64_t job_id, const float *F, int n, float damping) {
    if (!v || b < 0 || b >= v->n_blocks || job_id == 0 || !F || n != v->b[b].n) return -EINVAL;
    ps_verify_block_t *vb = &v->b[b];
    ps_probe_t *p = &vb->ring[vb->next];
    vb->next = (vb->next + 1) % PS_VERIFY_RING;
    const size_t len = (size_t)n * K;
    if (!p->V && (!(p->V = malloc(len * sizeof *p->V)) || !(p->W = malloc(len * sizeof *p->W)))) {
        free(p->V);
        p->V = NULL;
        p->job_id = 0;
        return -ENOMEM;
    }
    p->job_id = job_id;
    p->damping = damping;
    /* X = [R, F R], FX = [F R, F^2 R] for R (n, B) N(0, 1) */
    double *X = v->X, *FX = v->FX;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < B; c++) X[(size_t)i * K + c] = rng_normal(&v->rng);
    s_symm(F, n, X, 0, X, B, &p->trace); /* X[:, B..K) = F R */
    s_symm(F, n, X, B, FX, B, NULL);     /* FX[:, B..K) = F (F R) */
    for (int i = 0; i < n; i++)
        for (int c = 0; c < B; c++) FX[(size_t)i * K + c] = X[(size_t)i * K + B + c];
    p->k = s_orthonormalise(X, FX, n);
    for (size_t e = 0; e < len; e++) {
        p->V[e] = X[e];
        p->W[e] = FX[e] + (double)damping * X[e];
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

/* Z = H T for the inverse inv at damping d, T and Z (n, K) row-major
 * (eigen: H = Q diag(1/(v + d)) Q^T, through S (n, K) scratch). */
static void s_apply(const kfac_inverse_t *inv, float d, const double *T, double *Z, double *S) {
    const int n = inv->n;
    if (inv->method == KFAC_INV_CHOLESKY) {
        for (int i = 0; i < n; i++) {
            const float *row = inv->inv + (size_t)i * n;
            double acc[K] = {0};
            for (int j = 0; j < n; j++) {
                const double h = row[j];
                const double *tj = T + (size_t)j * K;
                for (int c = 0; c < K; c++) acc[c] += h * tj[c];
            }
            memcpy(Z + (size_t)i * K, acc, sizeof acc);
        }
        return;
    }
    memset(S, 0, (size_t)n * K * sizeof *S); /* S = Q^T T, row a = eigenvector a */
    for (int i = 0; i < n; i++) {
        const float *row = inv->Q + (size_t)i * n;
        const double *ti = T + (size_t)i * K;
        for (int a = 0; a < n; a++) {
            const double q = row[a];
            double *sa = S + (size_t)a * K;
            for (int c = 0; c < K; c++) sa[c] += q * ti[c];
        }
    }
    for (int a = 0; a < n; a++)
        for (int c = 0; c < K; c++) S[(size_t)a * K + c] /= (double)inv->v[a] + d;
    for (int i = 0; i < n; i++) { /* Z = Q S */
        const float *row = inv->Q + (size_t)i * n;
        double acc[K] = {0};
        for (int a = 0; a < n; a++) {
            const double q = row[a];
            const double *sa = S + (size_t)a * K;
            for (int c = 0; c < K; c++) acc[c] += q * sa[c];
        }
        memcpy(Z + (size_t)i * K, acc, sizeof acc);
    }
}

/* Diagonalise the symmetric k x k matrix G (row stride ld, destroyed) by
 * cyclic Jacobi rotations; *lo and *hi receive its smallest and largest
 * eigenvalue (NaN propagates). */
static void s_eig_range(double *G, int k, int ld, double *lo, double *hi) {
    for (int sweep = 0; sweep < 60; sweep++) {
        double off = 0.0, diag = 0.0;
        for (int a = 0; a < k; a++) {
            diag += G[a * ld + a] * G[a * ld + a];
            for (int c = a + 1; c < k; c++) off += G[a * ld + c] * G[a * ld + c];
        }
        if (!(off > 1e-30 * diag)) break;
        for (int a = 0; a < k; a++)
            for (int c = a + 1; c < k; c++) {
                if (G[a * ld + c] == 0.0) continue;
                const double th = (G[c * ld + c] - G[a * ld + a]) / (2.0 * G[a * ld + c]);
                const double t = (th >= 0.0 ? 1.0 : -1.0) / (fabs(th) + sqrt(th * th + 1.0));
                const double cs = 1.0 / sqrt(t * t + 1.0), sn = t * cs;
                for (int e = 0; e < k; e++) { /* G <- J^T G J: columns a, c, then rows a, c */
                    const double ga = G[e * ld + a], gc = G[e * ld + c];
                    G[e * ld + a] = cs * ga - sn * gc;
                    G[e * ld + c] = sn * ga + cs * gc;
                }
                for (int e = 0; e < k; e++) {
                    const double ga = G[a * ld + e], gc = G[c * ld + e];
                    G[a * ld + e] = cs * ga - sn * gc;
                    G[c * ld + e] = sn * ga + cs * gc;
                }
            }
    }
    double l = k > 0 ? G[0] : 0.0, h = l;
    for (int a = 1; a < k; a++) {
        const double g = G[a * ld + a];
        if (!(g >= l)) l = g;
        if (!(g <= h)) h = g;
    }
    *lo = l;
    *hi = h;
}

/* PS_VERIFY_LANCZOS steps of Lanczos on the full symmetric H (n x n
 * float), from a random start, with full reorthogonalisation: *lo and *hi
 * receive the smallest and largest Ritz values. Each is u^T H u for a unit
 * u (up to float rounding of H u, ~1e-6 of the largest), so *lo clearly
 * below 0 proves H indefinite. L (n, PS_VERIFY_LANCZOS), w (n), vf and wf
 * (n) are scratch. */
static void s_lanczos(const float *H, int n, rng_t *r, double *L, double *w, float *vf, float *wf, double *lo,
                      double *hi) {
    enum { M = PS_VERIFY_LANCZOS };
    double T[M * M] = {0};
    double nrm = 0.0;
    for (int i = 0; i < n; i++) L[i] = rng_normal(r), nrm += L[i] * L[i];
    nrm = 1.0 / sqrt(nrm);
    for (int i = 0; i < n; i++) L[i] *= nrm;
    int m = 0;
    for (int j = 0; j < M && j < n; j++) {
        const double *v = L + (size_t)j * n;
        for (int i = 0; i < n; i++) vf[i] = (float)v[i];
        /* wf = H vf: row-major n x n, float (the one O(n^2) part; its rounding is far below PS_VERIFY_DEF_TOL) */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, n, 1.0f, H, n, vf, 1, 0.0f, wf, 1);
        for (int i = 0; i < n; i++) w[i] = wf[i];
        double a = 0.0;
        for (int i = 0; i < n; i++) a += v[i] * w[i];
        T[j * M + j] = a;
        m = j + 1;
        for (int pass = 0; pass < 2; pass++) /* w -= sum_i (v_i . w) v_i: the three-term recurrence, kept exact */
            for (int q = 0; q <= j; q++) {
                const double *u = L + (size_t)q * n;
                double c = 0.0;
                for (int i = 0; i < n; i++) c += u[i] * w[i];
                for (int i = 0; i < n; i++) w[i] -= c * u[i];
            }
        double b = 0.0;
        for (int i = 0; i < n; i++) b += w[i] * w[i];
        b = sqrt(b);
        if (j + 1 >= M || j + 1 >= n || !(b > 1e-12 * fabs(a))) break; /* an invariant subspace: the Ritz values are exact */
        T[j * M + j + 1] = T[(j + 1) * M + j] = b;
        double *vn = L + (size_t)(j + 1) * n;
        for (int i = 0; i < n; i++) vn[i] = w[i] / b;
    }
    s_eig_range(T, m, M, lo, hi);
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
    double *T = v->T, *Z = v->Z;
    if (inv->method == KFAC_INV_EIGEN) {
        const double top = p->trace * (1.0 + 1e-3) + 1e-6;
        for (int k = 0; k < n; k++)
            if (!(inv->v[k] >= -1e-6 * (fabs(p->trace) + 1.0) && inv->v[k] <= top)) {
                snprintf(why, why_len, "eigenvalue %d is %.6g, outside [0, tr F = %.6g]", k, (double)inv->v[k],
                         p->trace);
                return -EDOM;
            }
        /* orthonormal columns: || Q^T Q u - u || on a fresh random u (in Z), t = Q u in T */
        double un = 0.0, en = 0.0;
        for (int i = 0; i < n; i++) Z[i] = rng_normal(&v->rng), un += Z[i] * Z[i];
        for (int i = 0; i < n; i++) {
            const float *row = inv->Q + (size_t)i * n;
            double s = 0.0;
            for (int k = 0; k < n; k++) s += (double)row[k] * Z[k];
            T[i] = s;
        }
        for (int k = 0; k < n; k++) { /* (Q^T t)_k - u_k */
            double s = 0.0;
            for (int i = 0; i < n; i++) s += (double)inv->Q[(size_t)i * n + k] * T[i];
            en += (s - Z[k]) * (s - Z[k]);
        }
        const double ortho = sqrt(en / (un > 0.0 ? un : 1.0));
        if (!(ortho <= PS_VERIFY_ORTHO_TOL)) {
            snprintf(why, why_len, "eigenvectors not orthonormal: ||Q^T Q u - u|| / ||u|| = %.3g", ortho);
            return -EDOM;
        }
    }
    /* T = (F + d_H I) V = W + (d_H - d) V; Z = H T; E V = Z - V */
    const double extra = (double)damping_used - p->damping;
    const size_t len = (size_t)n * K;
    for (size_t e = 0; e < len; e++) T[e] = p->W[e] + extra * p->V[e];
    s_apply(inv, damping_used, T, Z, v->X);
    for (size_t e = 0; e < len; e++) Z[e] -= p->V[e];
    /* G = (E V)^T (E V) and N = T^T T, T = (F + d_H I) V: ||E u||^2 = c^T G c and ||(F + d_H I) u||^2 = c^T N c
     * for u = V c, ||u|| = ||c|| */
    double G[K * K] = {0}, N[K * K] = {0}, C[K * K], lo, hi;
    const int k = p->k;
    for (int i = 0; i < n; i++) {
        const double *zi = Z + (size_t)i * K, *ti = T + (size_t)i * K;
        for (int a = 0; a < k; a++)
            for (int c = a; c < k; c++) {
                G[a * K + c] += zi[a] * zi[c];
                N[a * K + c] += ti[a] * ti[c];
            }
    }
    for (int a = 0; a < k; a++)
        for (int c = 0; c < a; c++) G[a * K + c] = G[c * K + a], N[a * K + c] = N[c * K + a];
    /* the largest ||E u|| / ||u|| on the span, at most PS_VERIFY_TOL_MAX */
    memcpy(C, G, sizeof C);
    s_eig_range(C, k, K, &lo, &hi);
    const double rel = sqrt(hi);
    if (residual) *residual = rel;
    if (!(rel <= PS_VERIFY_TOL_MAX)) {
        snprintf(why, why_len, "it does not invert the factor it was cut from: max ||H (F + %.3g I) u - u|| / ||u|| = "
                 "%.3g on a %d-dimensional span of random directions and their images under F (at most %.2g)",
                 (double)damping_used, rel, k, PS_VERIFY_TOL_MAX);
        return -EDOM;
    }
    /* and in every direction at most what an honest float inverse may have there:
     * ||E u||^2 <= TOL^2 ||u||^2 + (COND_TOL / d_H)^2 ||(F + d_H I) u||^2, i.e. the largest eigenvalue of
     * M^{-1/2} G M^{-1/2} at most 1, M = TOL^2 I + (COND_TOL / d_H)^2 N = L L^T */
    const double s2 = damping_used > 0.0f ? PS_VERIFY_COND_TOL / damping_used : 0.0;
    double L[K * K] = {0};
    for (int a = 0; a < k; a++)
        for (int c = 0; c <= a; c++) {
            double m = s2 * s2 * N[a * K + c] + (a == c ? PS_VERIFY_TOL * PS_VERIFY_TOL : 0.0);
            for (int e = 0; e < c; e++) m -= L[a * K + e] * L[c * K + e];
            L[a * K + c] = a == c ? sqrt(m) : m / L[c * K + c]; /* m > 0: M >= TOL^2 I */
        }
    double X[K * K];
    for (int c = 0; c < k; c++) /* X = L^{-1} G, column c by forward substitution */
        for (int a = 0; a < k; a++) {
            double m = G[a * K + c];
            for (int e = 0; e < a; e++) m -= L[a * K + e] * X[e * K + c];
            X[a * K + c] = m / L[a * K + a];
        }
    for (int c = 0; c < k; c++) /* C = L^{-1} X^T = L^{-1} G L^{-T} */
        for (int a = 0; a < k; a++) {
            double m = X[c * K + a];
            for (int e = 0; e < a; e++) m -= L[a * K + e] * C[e * K + c];
            C[a * K + c] = m / L[a * K + a];
        }
    for (int a = 0; a < k; a++)
        for (int c = 0; c < a; c++) C[a * K + c] = C[c * K + a] = 0.5 * (C[a * K + c] + C[c * K + a]);
    s_eig_range(C, k, K, &lo, &hi);
    if (!(hi <= 1.0)) {
        snprintf(why, why_len, "it does not invert the factor it was cut from: for a u in a %d-dimensional span of "
                 "random directions and their images under F, ||H (F + %.3g I) u - u|| is %.3g times what a float "
                 "inverse may have there (%.2g ||u||, and %.2g ||(F + d I) u|| / d); the largest over the span is "
                 "%.3g ||u||", k, (double)damping_used, sqrt(hi), PS_VERIFY_TOL, PS_VERIFY_COND_TOL, rel);
        return -EDOM;
    }
    if (inv->method == KFAC_INV_CHOLESKY) {
        /* (F + d I)^{-1} is positive definite: a clearly negative u^T H u proves it is not that inverse */
        s_lanczos(inv->inv, n, &v->rng, v->L, v->T, v->vf, v->wf, &lo, &hi);
        if (!(lo >= -PS_VERIFY_DEF_TOL * hi)) {
            snprintf(why, why_len, "it is not positive definite: u^T H u = %.3g for a unit u, against %.3g at most "
                     "(%d Lanczos steps on H)", lo, hi, PS_VERIFY_LANCZOS);
            return -EDOM;
        }
    }
    return 0;
}
