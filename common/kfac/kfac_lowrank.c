/* common/kfac/kfac_lowrank.c — see kfac_lowrank.h. float32, row-major. */
#include "common/kfac/kfac_lowrank.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int kfac_lowrank_set_init(kfac_lowrank_set_t *set, const net_t *net) {
    memset(set, 0, sizeof *set);
    int n = 0;
    for (int i = 0; i < net->n_layers; i++) n += net->layers[i].kind == LAYER_FC;
    set->v = calloc(n ? (size_t)n : 1, sizeof *set->v);
    if (!set->v) return -ENOMEM;
    for (int i = 0; i < net->n_layers; i++) {
        const layer_t *l = &net->layers[i];
        if (l->kind != LAYER_FC) continue;
        kfac_lowrank_t *e = &set->v[set->n++];
        e->layer = i;
        e->n_out = l->out;
        e->n_in = l->in_c * l->in_h * l->in_w;
        e->w_off = l->w_off;
    }
    return 0;
}

void kfac_lowrank_set_release(kfac_lowrank_set_t *set) {
    if (!set) return;
    for (int i = 0; i < set->n; i++) {
        free(set->v[i].D);
        free(set->v[i].X);
    }
    free(set->v);
    memset(set, 0, sizeof *set);
}

void kfac_lowrank_set_clear(kfac_lowrank_set_t *set) {
    for (int i = 0; i < set->n; i++) set->v[i].n_rows = 0;
}

kfac_lowrank_t *kfac_lowrank_set_find(const kfac_lowrank_set_t *set, int layer) {
    for (int i = 0; i < set->n; i++)
        if (set->v[i].layer == layer) return &set->v[i];
    return NULL;
}

int kfac_lowrank_set_count(const kfac_lowrank_set_t *set) {
    int c = 0;
    for (int i = 0; i < set->n; i++) c += set->v[i].n_rows > 0;
    return c;
}

int kfac_lowrank_append(kfac_lowrank_t *e, const float *D, const float *X, int n_rows, float scale) {
    if (n_rows < 0 || (n_rows > 0 && (!D || !X))) return -EINVAL;
    if (n_rows == 0) return 0;
    int need = e->n_rows + n_rows;
    if (need > e->cap_rows) {
        int cap = e->cap_rows ? e->cap_rows : 16;
        while (cap < need) cap *= 2;
        float *nd = realloc(e->D, sizeof(float) * (size_t)cap * (size_t)e->n_out);
        if (!nd) return -ENOMEM;
        e->D = nd;
        float *nx = realloc(e->X, sizeof(float) * (size_t)cap * (size_t)e->n_in);
        if (!nx) return -ENOMEM;
        e->X = nx;
        e->cap_rows = cap;
    }
    float *d = e->D + (size_t)e->n_rows * e->n_out;
    const size_t nd = (size_t)n_rows * e->n_out;
    for (size_t i = 0; i < nd; i++) d[i] = scale * D[i];
    memcpy(e->X + (size_t)e->n_rows * e->n_in, X, sizeof(float) * (size_t)n_rows * e->n_in);
    e->n_rows = need;
    return 0;
}

void kfac_lowrank_scale(kfac_lowrank_t *e, float s) {
    if (e->n_rows > 0) cblas_sscal(e->n_rows * e->n_out, s, e->D, 1);
}

double kfac_lowrank_inner(const float *A, int lda, const float *B, int ldb, int na, const float *C, int ldc,
                          const float *E, int lde, int nc, int n_out, int n_in) {
    if (na < 0 || nc < 0 || n_out <= 0 || n_in <= 0) return NAN;
    if (na == 0 || nc == 0) return 0.0;
    float *g1 = malloc(sizeof(float) * (size_t)na * nc * 2);
    if (!g1) return NAN;
    float *g2 = g1 + (size_t)na * nc;
    /* g1 (na, nc) = A (na, n_out) C^T; row-major. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, na, nc, n_out, 1.0f, A, lda, C, ldc, 0.0f, g1, nc);
    /* g2 (na, nc) = B (na, n_in) E^T; row-major. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, na, nc, n_in, 1.0f, B, ldb, E, lde, 0.0f, g2, nc);
    double s = 0.0;
    for (size_t i = 0; i < (size_t)na * nc; i++) s += (double)g1[i] * g2[i];
    free(g1);
    return s;
}

double kfac_lowrank_norm2(const kfac_lowrank_t *e) {
    if (e->n_rows <= 0) return 0.0;
    return kfac_lowrank_inner(e->D, e->n_out, e->X, e->n_in, e->n_rows, e->D, e->n_out, e->X, e->n_in, e->n_rows,
                              e->n_out, e->n_in);
}

void kfac_lowrank_densify(const kfac_lowrank_t *e, float *W, float beta) {
    if (e->n_rows <= 0) {
        if (beta != 1.0f) cblas_sscal(e->n_out * e->n_in, beta, W, 1);
        return;
    }
    /* W (n_out, n_in) = D^T (n_out, rows) X (rows, n_in) + beta W; row-major. */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, e->n_out, e->n_in, e->n_rows, 1.0f, e->D, e->n_out, e->X,
                e->n_in, beta, W, e->n_in);
}

int kfac_lowrank_wire_pays(int b, int n_out, int n_in) {
    if (b <= 0 || n_out <= 0 || n_in <= 0) return 0;
    return 4.0 * b * ((double)n_in + n_out) <= (double)n_in * n_out;
}

int kfac_lowrank_update_pays(int B, int n_out, int n_cols, int n_c, int n_t) {
    if (B <= 0 || n_out <= 0 || n_cols <= 0) return 0;
    const double o = n_out, c = n_cols, b = B;
    double dense, fact;
    if (n_c > 0 && n_t > 0) {
        /* doubly: G along rows, Psi and K along each row of n_c n_t = n_cols */
        dense = b * o * c + o * o * c + o * c * (n_c + n_t);
        fact = b * o * o + b * c * (n_c + n_t) + b * o * c;
    } else {
        /* one more row for a bias column (n_cols > n_in): counted as B + 1 */
        dense = b * o * c + o * o * c + o * c * c;
        fact = (b + 1) * (o * o + c * c + o * c);
    }
    return fact < dense;
}
