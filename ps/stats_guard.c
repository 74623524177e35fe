/* ps/stats_guard.c — see stats_guard.h. */
#include "ps/stats_guard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ps/member.h"

struct ps_stats_guard {
    int n_layers;
    int *first;            /* (n_layers) index of layer j's first factor in hist */
    ps_norm_hist_t *hist;  /* one per factor */
    int n_factors;
};

ps_stats_guard_t *ps_stats_guard_new(const kfac_stats_t *layout) {
    ps_stats_guard_t *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->n_layers = layout->n_layers;
    g->first = calloc((size_t)layout->n_layers + 1, sizeof *g->first);
    int n = 0;
    for (int j = 0; g->first && j < layout->n_layers; j++) {
        g->first[j] = n;
        n += layout->layers[j].n_factors;
    }
    g->hist = calloc((size_t)n + 1, sizeof *g->hist);
    g->n_factors = n;
    if (!g->first || !g->hist) {
        ps_stats_guard_free(g);
        return NULL;
    }
    return g;
}

ps_norm_hist_t *ps_stats_guard_hists(ps_stats_guard_t *g, int *n) {
    *n = g->n_factors;
    return g->hist;
}

void ps_stats_guard_free(ps_stats_guard_t *g) {
    if (!g) return;
    free(g->first);
    free(g->hist);
    free(g);
}

double ps_stats_guard_trace(const kfac_factor_t *f) {
    double t = 0.0;
    if (f->kind == KFAC_FACTOR_DIAG2X2)
        for (int i = 0; i < f->dim; i++) t += (double)f->data[3 * i] + (double)f->data[3 * i + 2];
    else
        for (int i = 0; i < f->dim; i++) t += (double)f->data[(size_t)i * (size_t)f->dim + (size_t)i];
    return t;
}

/* The first 2 x 2 principal minor of f that is negative beyond rounding:
 * returns 1 with (i, j) and the ratio F_ij^2 / (F_ii F_jj), else 0. A
 * Gram matrix of floats summed in float has F_ij^2 <= F_ii F_jj up to a
 * relative error of a few units in the last place per term of the sum;
 * 1e-3 leaves room for any batch size the wire allows. */
#define S_MINOR_TOL 1e-3
static int s_bad_minor(const kfac_factor_t *f, int *bi, int *bj, double *ratio) {
    if (f->kind == KFAC_FACTOR_DIAG2X2) {
        for (int i = 0; i < f->dim; i++) {
            double a = f->data[3 * i], b = f->data[3 * i + 1], c = f->data[3 * i + 2];
            if (b * b > a * c * (1.0 + S_MINOR_TOL) + 1e-30) {
                *bi = *bj = i;
                *ratio = a * c > 0.0 ? b * b / (a * c) : INFINITY;
                return 1;
            }
        }
        return 0;
    }
    size_t n = (size_t)f->dim;
    for (size_t i = 0; i < n; i++) {
        double fii = f->data[i * n + i];
        const float *row = f->data + i * n; /* the upper triangle is authoritative */
        for (size_t j = i + 1; j < n; j++) {
            double fij = row[j], fjj = f->data[j * n + j];
            if (fij * fij > fii * fjj * (1.0 + S_MINOR_TOL) + 1e-30) {
                *bi = (int)i;
                *bj = (int)j;
                *ratio = fii * fjj > 0.0 ? fij * fij / (fii * fjj) : INFINITY;
                return 1;
            }
        }
    }
    return 0;
}

static const char *const s_role_names[] = {"A", "G", "K", "Psi", "Gbias", "BN"};

int ps_stats_guard_check(const ps_stats_guard_t *g, const kfac_stats_t *st, double max_ratio,
                         const char *(*layer_name)(const void *ctx, int layer), const void *ctx, char *err,
                         size_t err_len) {
    for (int j = 0; j < st->n_layers && j < g->n_layers; j++) {
        const kfac_layer_stats_t *ls = &st->layers[j];
        const char *name = layer_name ? layer_name(ctx, ls->layer) : NULL;
        char lname[96];
        if (name) snprintf(lname, sizeof lname, "layer %s", name);
        else snprintf(lname, sizeof lname, "layer %d", ls->layer);
        for (int k = 0; k < ls->n_factors; k++) {
            const kfac_factor_t *f = &ls->f[k];
            if (f->n_updates <= 0) continue;
            const char *role = (unsigned)f->role < sizeof s_role_names / sizeof *s_role_names ? s_role_names[f->role]
                                                                                             : "?";
            int bi = 0, bj = 0;
            double r = 0.0;
            if (s_bad_minor(f, &bi, &bj, &r)) {
                if (f->kind == KFAC_FACTOR_DIAG2X2)
                    snprintf(err, err_len,
                             "stats: %s factor %s: channel %d's 2x2 block has b^2 = %.3g x ac: no batch's second "
                             "moment looks like that (not positive semi-definite)",
                             lname, role, bi, r);
                else
                    snprintf(err, err_len,
                             "stats: %s factor %s: F[%d][%d]^2 = %.3g x F[%d][%d] F[%d][%d]: no batch's second "
                             "moment looks like that (not positive semi-definite)",
                             lname, role, bi, bj, r, bi, bi, bj, bj);
                return -1;
            }
            if (!(max_ratio > 0.0)) continue;
            double med = ps_norm_hist_median(&g->hist[g->first[j] + k]);
            if (!(med > 0.0)) continue;
            double tr = ps_stats_guard_trace(f);
            if (tr > max_ratio * med) {
                snprintf(err, err_len,
                         "stats: %s factor %s: trace %.3g is more than [ps] stats_trace_max_ratio = %g times the "
                         "median %.3g of its last %d accepted",
                         lname, role, tr, max_ratio, med,
                         g->hist[g->first[j] + k].n);
                return -1;
            }
        }
    }
    return 0;
}

void ps_stats_guard_accept(ps_stats_guard_t *g, const kfac_stats_t *st) {
    for (int j = 0; j < st->n_layers && j < g->n_layers; j++) {
        const kfac_layer_stats_t *ls = &st->layers[j];
        for (int k = 0; k < ls->n_factors; k++)
            if (ls->f[k].n_updates > 0) ps_norm_hist_add(&g->hist[g->first[j] + k], ps_stats_guard_trace(&ls->f[k]));
    }
}
