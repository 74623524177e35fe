/* common/net/wire.c — see wire.h. */
#include "common/net/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/kfac/kfac_linalg.h"

static uint64_t s_max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

msg_factor_kind_t wire_factor_kind(const kfac_factor_t *f) {
    switch (f->role) {
    case KFAC_FACTOR_ROLE_A: return MSG_FACTOR_A;
    case KFAC_FACTOR_ROLE_G: return MSG_FACTOR_G;
    case KFAC_FACTOR_ROLE_K: return MSG_FACTOR_K;
    case KFAC_FACTOR_ROLE_PSI: return MSG_FACTOR_PSI;
    case KFAC_FACTOR_ROLE_GBIAS: return MSG_FACTOR_G_BIAS;
    case KFAC_FACTOR_ROLE_BN: return MSG_FACTOR_BN;
    }
    return MSG_FACTOR_NONE;
}

/* ---- the model's shapes and the message limits ----------------------------- */

int wire_shape_init(wire_shape_t *sh, const net_t *net, const kfac_stats_t *stats) {
    memset(sh, 0, sizeof *sh);
    uint32_t nl = net->n_layers > 0 ? (uint32_t)net->n_layers : 1;
    sh->layers = calloc(nl, sizeof *sh->layers);
    if (!sh->layers) return -ENOMEM;
    uint32_t max_n = 2;
    uint64_t max_floats = s_max64(net->n_params, net->n_state);
    for (int j = 0; stats && j < stats->n_layers; j++) {
        const kfac_layer_stats_t *ls = &stats->layers[j];
        if (ls->layer < 0 || ls->layer >= net->n_layers || ls->n_factors > MSG_MAX_FACTORS) {
            wire_shape_release(sh);
            return -EINVAL;
        }
        msg_layer_shape_t *out = &sh->layers[ls->layer];
        out->n_factors = (uint32_t)ls->n_factors;
        for (int f = 0; f < ls->n_factors; f++) {
            const kfac_factor_t *fa = &ls->f[f];
            out->kind[f] = wire_factor_kind(fa);
            if (fa->kind == KFAC_FACTOR_DIAG2X2) {
                out->n[f] = 2;
                out->n_blocks[f] = (uint32_t)fa->dim;
            } else {
                out->n[f] = (uint32_t)fa->dim;
                out->n_blocks[f] = 1;
                if ((uint32_t)fa->dim > max_n) max_n = (uint32_t)fa->dim;
                /* an eigen JobResult carries the n x n eigenvector matrix */
                max_floats = s_max64(max_floats, (uint64_t)fa->dim * (uint64_t)fa->dim);
            }
            max_floats = s_max64(max_floats, kfac_factor_packed_len(fa));
        }
        size_t lf = kfac_stats_layer_packed_len(ls);
        if (lf > sh->max_layer_floats) sh->max_layer_floats = lf;
    }
    /* fc layers: the weight's shape, for factored gradients (GradPush.factored) */
    for (int i = 0; i < net->n_layers; i++) {
        const layer_t *l = &net->layers[i];
        if (l->kind != LAYER_FC) continue;
        sh->layers[i].fc_out = (uint32_t)l->out;
        sh->layers[i].fc_in = (uint32_t)(l->in_c * l->in_h * l->in_w);
    }
    sh->model.n_params = net->n_params;
    sh->model.n_state = net->n_state;
    sh->model.n_layers = (uint32_t)net->n_layers;
    sh->model.layers = sh->layers;
    msg_limits_default(&sh->limits);
    sh->limits.max_n = max_n;
    sh->limits.max_floats = max_floats ? max_floats : 1;
    sh->limits.max_layers = nl;
    sh->limits.model = &sh->model;
    if (sh->max_layer_floats == 0) sh->max_layer_floats = 1;
    return 0;
}

void wire_shape_release(wire_shape_t *sh) {
    if (!sh) return;
    free(sh->layers);
    memset(sh, 0, sizeof *sh);
}

/* ---- statistics ------------------------------------------------------------ */

int wire_stats_want(kfac_stats_t *s, const uint32_t *layers, size_t n_layers) {
    int n = 0;
    for (int i = 0; i < s->n_layers; i++) {
        int want = n_layers == 0;
        for (size_t k = 0; k < n_layers && !want; k++) want = layers[k] == (uint32_t)s->layers[i].layer;
        s->layers[i].skip = !want;
        n += want;
    }
    return n;
}

int wire_stats_to_msg(const kfac_stats_t *s, msg_stats_t *out, float **packed) {
    memset(out, 0, sizeof *out);
    *packed = NULL;
    size_t total = kfac_stats_packed_len(s);
    float *buf = malloc((total ? total : 1) * sizeof(float));
    msg_layer_stats_t *layers = calloc((size_t)(s->n_layers > 0 ? s->n_layers : 1), sizeof *layers);
    msg_factor_t *factors = calloc((size_t)(s->n_layers > 0 ? s->n_layers : 1) * KFAC_STATS_MAX_FACTORS,
                                   sizeof *factors);
    if (!buf || !layers || !factors) {
        free(buf);
        free(layers);
        free(factors);
        return -ENOMEM;
    }
    size_t off = 0;
    int k = 0; /* entries written: layers marked skip are left out */
    for (int i = 0; i < s->n_layers; i++) {
        const kfac_layer_stats_t *ls = &s->layers[i];
        if (ls->skip) continue;
        size_t n = kfac_stats_layer_packed_len(ls);
        int rc = kfac_stats_layer_pack(ls, buf + off, total - off);
        if (rc < 0 || off + n > total) {
            free(buf);
            free(layers);
            free(factors);
            return rc < 0 ? rc : -EINVAL;
        }
        msg_factor_t *fs = factors + (size_t)k * KFAC_STATS_MAX_FACTORS;
        size_t foff = off;
        for (int f = 0; f < ls->n_factors; f++) {
            const kfac_factor_t *fa = &ls->f[f];
            size_t len = kfac_factor_packed_len(fa);
            fs[f].kind = wire_factor_kind(fa);
            fs[f].n = fa->kind == KFAC_FACTOR_DIAG2X2 ? 2u : (uint32_t)fa->dim;
            fs[f].n_blocks = fa->kind == KFAC_FACTOR_DIAG2X2 ? (uint32_t)fa->dim : 1u;
            fs[f].data = buf + foff;
            fs[f].n_data = len;
            foff += len;
        }
        layers[k].layer = (uint32_t)ls->layer;
        layers[k].factors = fs;
        layers[k].n_factors = (size_t)ls->n_factors;
        k++;
        off += n;
    }
    if (k == 0) {
        free(layers);
        free(factors);
        layers = NULL;
    }
    out->layers = layers;
    out->n_layers = (size_t)k;
    *packed = buf;
    return 0;
}

void wire_stats_release(msg_stats_t *st, float **packed) {
    if (st) {
        if (st->layers && st->n_layers) free(st->layers[0].factors);
        free(st->layers);
        memset(st, 0, sizeof *st);
    }
    if (packed) {
        free(*packed);
        *packed = NULL;
    }
}

/* ---- inverses ------------------------------------------------------------- */

int wire_result_from_inverse(const kfac_inverse_t *inv, msg_job_result_t *r, float **packed) {
    *packed = NULL;
    if (!inv || !inv->valid || inv->n < 1) return -EINVAL;
    size_t n = (size_t)inv->n;
    r->n = (uint32_t)inv->n;
    r->damping = inv->damping_used;
    if (inv->method == KFAC_INV_CHOLESKY) {
        r->method = MSG_METHOD_CHOLESKY;
        float *p = malloc(kfac_linalg_packed_len(inv->n) * sizeof(float));
        if (!p) return -ENOMEM;
        /* upper triangle of the full (n, n) row-major inverse, row by row */
        int rc = kfac_linalg_pack_upper(inv->inv, inv->n, p);
        if (rc < 0) {
            free(p);
            return rc;
        }
        r->inverse = p;
        r->n_inverse = kfac_linalg_packed_len(inv->n);
        *packed = p;
    } else {
        r->method = MSG_METHOD_EIGEN;
        r->eigvecs = inv->Q;
        r->n_eigvecs = n * n;
        r->eigvals = inv->v;
        r->n_eigvals = n;
    }
    return 0;
}
