/* common/kfac/kfac_opt.c — see kfac_opt.h. */
#include "common/kfac/kfac_opt.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/kfac/kfac_linalg.h"

void kfac_opts_default(kfac_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->method = KFAC_INV_CHOLESKY;
    o->damping = 1e-3;
    o->stat_decay = 0.95;
    o->step_rule = KFAC_STEP_RULE_KL;
    o->lr = 0.1;
    o->eta_max = 1.0;
    o->kl_c0 = 1e-2;
    o->kl_zeta = 1.0;
    o->kl_decay_every = 0;
    o->kl_clip = 1e-3;
    o->momentum = 0.9;
    o->weight_decay = 0.0;
    o->wd_mode = KFAC_WD_GRADIENT;
    o->polyak_decay = 0.99;
    o->identity_mode = KFAC_IDENTITY_SGD;
}

static const char *s_rule_names[] = {"kl", "kl_clip", "fixed"};

int kfac_step_rule_parse(const char *s, kfac_step_rule_t *out) {
    for (int i = 0; i < 3; i++)
        if (strcmp(s, s_rule_names[i]) == 0) { *out = (kfac_step_rule_t)i; return 0; }
    return -EINVAL;
}

const char *kfac_step_rule_name(kfac_step_rule_t r) {
    return (unsigned)r < 3 ? s_rule_names[r] : "?";
}

static int s_check_opts(const kfac_opts_t *o, char *err, size_t err_len) {
    const char *bad = NULL;
    if (!(o->damping > 0.0) || !isfinite(o->damping)) bad = "damping must be > 0";
    else if (!(o->stat_decay >= 0.0 && o->stat_decay < 1.0)) bad = "stat_decay must be in [0, 1)";
    else if (!(o->momentum >= 0.0 && o->momentum < 1.0)) bad = "momentum must be in [0, 1)";
    else if (!(o->polyak_decay >= 0.0 && o->polyak_decay < 1.0)) bad = "polyak_decay must be in [0, 1)";
    else if (!(o->weight_decay >= 0.0)) bad = "weight_decay must be >= 0";
    else if (o->step_rule != KFAC_STEP_RULE_KL && !(o->lr > 0.0)) bad = "lr must be > 0";
    else if (o->step_rule == KFAC_STEP_RULE_KL && (!(o->eta_max > 0.0) || !(o->kl_c0 > 0.0) || !(o->kl_zeta > 0.0)))
        bad = "the KL rule needs eta_max > 0, kl_c0 > 0 and kl_zeta > 0";
    else if (o->step_rule == KFAC_STEP_RULE_KL_CLIP && !(o->kl_clip > 0.0)) bad = "kl_clip must be > 0";
    if (bad) { snprintf(err, err_len, "kfac: %s", bad); return -EINVAL; }
    return 0;
}

kfac_opt_t *kfac_opt_new(const net_t *net, const kfac_opts_t *opts, char *err, size_t err_len) {
    if (s_check_opts(opts, err, err_len)) return NULL;
    kfac_opt_t *k = calloc(1, sizeof *k);
    if (!k) { snprintf(err, err_len, "kfac: out of memory"); return NULL; }
    k->opts = *opts;
    k->net = net;
    k->avg = kfac_stats_new(net);
    size_t n = net->n_params ? net->n_params : 1;
    k->mom = calloc(n, sizeof(float));
    k->polyak = calloc(n, sizeof(float));
    k->v = calloc(n, sizeof(float));
    k->g = calloc(n, sizeof(float));
    k->wd_mask = calloc(n, sizeof(float));
    if (!k->avg || !k->mom || !k->polyak || !k->v || !k->g || !k->wd_mask) goto oom;
    for (int i = 0; i < net->n_layers; i++) {
        const layer_t *l = &net->layers[i];
        if (l->kind == LAYER_FC || l->kind == LAYER_CONV)
            for (size_t j = 0; j < l->n_w; j++) k->wd_mask[l->w_off + j] = 1.0f;
    }
    int nb = 0;
    for (int s = 0; s < k->avg->n_layers; s++) {
        const kfac_layer_stats_t *ls = &k->avg->layers[s];
        for (int f = 0; f < ls->n_factors; f++) nb += ls->f[f].kind == KFAC_FACTOR_SYM;
        /* scratch for V and U of this layer */
        size_t cols = (size_t)(ls->mode == KFAC_MODE_DOUBLY ? ls->fm_c * ls->fm_t : ls->in + ls->has_bias);
        size_t vlen = (size_t)ls->out * cols;
        if (vlen > k->vbuf_len) k->vbuf_len = vlen;
        size_t wl = kfac_precond_work_len(ls->out, (int)cols);
        if (wl > k->work_len) k->work_len = wl;
    }
    /* each slot's parameters, for the dot products v^T g (weights, then bias) */
    const int n_slots = k->avg->n_layers;
    k->seg = calloc(n_slots ? (size_t)n_slots : 1, sizeof *k->seg);
    k->seg_vg = calloc(n_slots ? (size_t)n_slots : 1, sizeof *k->seg_vg);
    k->seg_step = calloc(n_slots ? (size_t)n_slots : 1, sizeof *k->seg_step);
    if (!k->seg || !k->seg_vg || !k->seg_step) goto oom;
    for (int s = 0; s < n_slots; s++) {
        const layer_t *l = &net->layers[k->avg->layers[s].layer];
        k->seg[s].off = l->w_off;
        k->seg[s].len = l->n_w + l->n_b;
    }
    k->n_dot_part = kfac_step_dots_parts(k->seg, n_slots);
    k->dot_part = calloc(k->n_dot_part ? k->n_dot_part : 1, sizeof *k->dot_part);
    if (!k->dot_part) goto oom;
    k->blocks = calloc(nb ? (size_t)nb : 1, sizeof *k->blocks);
    k->vbuf = calloc(k->vbuf_len ? k->vbuf_len : 1, sizeof(float));
    k->ubuf = calloc(k->vbuf_len ? k->vbuf_len : 1, sizeof(float));
    k->work = calloc(k->work_len ? k->work_len : 1, sizeof(float));
    if (!k->blocks || !k->vbuf || !k->ubuf || !k->work) goto oom;
    for (int s = 0; s < k->avg->n_layers; s++) {
        const kfac_layer_stats_t *ls = &k->avg->layers[s];
        for (int f = 0; f < ls->n_factors; f++) {
            if (ls->f[f].kind != KFAC_FACTOR_SYM) continue;
            kfac_block_t *b = &k->blocks[k->n_blocks++];
            b->stat = s;
            b->factor = f;
            b->layer = ls->layer;
            b->n = ls->f[f].dim;
            b->cost = (double)b->n * b->n * b->n;
            b->factor_version = -1;
            b->inv_version = -1;
            b->inv = kfac_inverse_new(b->n);
            if (!b->inv) goto oom;
        }
    }
    return k;
oom:
    snprintf(err, err_len, "kfac: out of memory building the optimizer state");
    kfac_opt_free(&k);
    return NULL;
}

void kfac_opt_free(kfac_opt_t **k_p) {
    if (!k_p || !*k_p) return;
    kfac_opt_t *k = *k_p;
    for (int b = 0; b < k->n_blocks; b++) kfac_inverse_free(&k->blocks[b].inv);
    free(k->blocks);
    kfac_stats_free(&k->avg);
    free(k->mom); free(k->polyak); free(k->v); free(k->g); free(k->wd_mask);
    free(k->seg); free(k->seg_vg); free(k->seg_step); free(k->dot_part);
    free(k->work); free(k->vbuf); free(k->ubuf); free(k->lr_buf);
    free(k->bn_view); free(k->bn_off); free(k->bn_has);
    free(k);
    *k_p = NULL;
}

int kfac_opt_fold(kfac_opt_t *k, const kfac_stats_t *batch, long stats_version) {
    if (!batch || batch->n_layers != k->avg->n_layers) return -EINVAL;
    for (int s = 0; s < batch->n_layers; s++) {
        const kfac_layer_stats_t *ls = &batch->layers[s];
        if (ls->n_factors != k->avg->layers[s].n_factors) return -EINVAL;
        for (int f = 0; f < ls->n_factors; f++) {
            if (ls->f[f].dim != k->avg->layers[s].f[f].dim) return -EINVAL;
            if (ls->f[f].n_updates > 0 && !kfac_linalg_all_finite(ls->f[f].data, kfac_factor_len(&ls->f[f])))
                return -EDOM;
        }
    }
    int rc = kfac_stats_update(k->avg, batch, k->opts.stat_decay);
    if (rc) return rc;
    k->n_folds++;
    for (int b = 0; b < k->n_blocks; b++) {
        kfac_block_t *bl = &k->blocks[b];
        if (batch->layers[bl->stat].f[bl->factor].n_updates > 0 && stats_version > bl->factor_version)
            bl->factor_version = stats_version;
    }
    return 0;
}

/* Factored damping of block b (see kfac_opt.h) at damping damp. */
static float s_block_damping(const kfac_opt_t *k, const kfac_block_t *bl, double damp) {
    const kfac_layer_stats_t *ls = &k->avg->layers[bl->stat];
    const double lambda = kfac_step_effective_damping(damp, k->opts.weight_decay, k->opts.wd_mode);
    const kfac_factor_t *f = &ls->f[bl->factor];
    if (f->role == KFAC_FACTOR_ROLE_GBIAS) return (float)lambda;
    if (ls->mode == KFAC_MODE_DOUBLY) {
        float pi[3];
        /* factor order K, Psi, G (kfac_stats.h) */
        kfac_pi_trace3(ls->f[0].data, ls->f[0].dim, ls->f[1].data, ls->f[1].dim, ls->f[2].data, ls->f[2].dim, pi);
        int idx = f->role == KFAC_FACTOR_ROLE_K ? 0 : f->role == KFAC_FACTOR_ROLE_PSI ? 1 : 2;
        return (float)(pi[idx] * cbrt(lambda));
    }
    float pi = kfac_pi_trace(ls->f[0].data, ls->f[0].dim, ls->f[1].data, ls->f[1].dim);
    return f->role == KFAC_FACTOR_ROLE_A ? (float)(pi * sqrt(lambda)) : (float)(sqrt(lambda) / pi);
}

int kfac_opt_block_job_at(const kfac_opt_t *k, int b, double lambda, float *F, float *damping, long *factor_version) {
    if (b < 0 || b >= k->n_blocks) return -EINVAL;
    const kfac_block_t *bl = &k->blocks[b];
    const kfac_factor_t *f = &k->avg->layers[bl->stat].f[bl->factor];
    if (f->n_updates == 0 || bl->factor_version < 0) return -ENODATA;
    memcpy(F, f->data, (size_t)bl->n * bl->n * sizeof(float));
    *damping = s_block_damping(k, bl, lambda);
    *factor_version = bl->factor_version;
    return 0;
}

int kfac_opt_block_job(const kfac_opt_t *k, int b, float *F, float *damping, long *factor_version) {
    return kfac_opt_block_job_at(k, b, k->opts.damping, F, damping, factor_version);
}

int kfac_opt_block_swap(kfac_opt_t *k, int b, kfac_inverse_t **inv, long factor_version) {
    if (b < 0 || b >= k->n_blocks || !inv || !*inv || (*inv)->n != k->blocks[b].n || !(*inv)->valid) return -EINVAL;
    kfac_block_t *bl = &k->blocks[b];
    if (bl->inv->valid && factor_version < bl->inv_version) return 1;
    kfac_inverse_t *old = bl->inv;
    (*inv)->n_updates = old->n_updates + 1;
    bl->inv = *inv;
    *inv = old;
    bl->inv_version = factor_version;
    bl->inv_time_s = clock_now_s();
    bl->n_installed++;
    return 0;
}

/* ---- the batch-norm view ---- */

int kfac_opt_bn_view(kfac_opt_t *k) {
    if (k->bn_off) return 0;
    const int nl = k->avg->n_layers;
    size_t len = 0;
    k->bn_off = malloc((size_t)(nl ? nl : 1) * sizeof *k->bn_off);
    k->bn_has = calloc((size_t)(nl ? nl : 1), 1);
    if (!k->bn_off || !k->bn_has) goto oom;
    for (int s = 0; s < nl; s++) {
        const kfac_layer_stats_t *ls = &k->avg->layers[s];
        k->bn_off[s] = SIZE_MAX;
        if (ls->kind != LAYER_BATCHNORM) continue;
        k->bn_off[s] = len;
        len += kfac_factor_len(&ls->f[0]);
    }
    k->bn_len = len;
    if (!(k->bn_view = calloc(len ? len : 1, sizeof(float)))) goto oom;
    kfac_opt_bn_snapshot(k, k->bn_view, k->bn_has);
    return 0;
oom:
    free(k->bn_off); free(k->bn_has);
    k->bn_off = NULL; k->bn_has = NULL;
    return -ENOMEM;
}

size_t kfac_opt_bn_len(const kfac_opt_t *k) {
    size_t len = 0;
    for (int s = 0; s < k->avg->n_layers; s++)
        if (k->avg->layers[s].kind == LAYER_BATCHNORM) len += kfac_factor_len(&k->avg->layers[s].f[0]);
    return len;
}

void kfac_opt_bn_snapshot(const kfac_opt_t *k, float *dst, unsigned char *has) {
    size_t off = 0;
    for (int s = 0; s < k->avg->n_layers; s++) {
        const kfac_layer_stats_t *ls = &k->avg->layers[s];
        if (ls->kind != LAYER_BATCHNORM) continue;
        const size_t n = kfac_factor_len(&ls->f[0]);
        memcpy(dst + off, ls->f[0].data, n * sizeof(float));
        has[s] = ls->f[0].n_updates > 0;
        off += n;
    }
}

void kfac_opt_bn_publish(kfac_opt_t *k, const float *src, const unsigned char *has) {
    if (!k->bn_view) return;
    memcpy(k->bn_view, src, k->bn_len * sizeof(float));
    for (int s = 0; s < k->avg->n_layers; s++)
        if (k->bn_off[s] != SIZE_MAX) k->bn_has[s] = has[s];
}

int kfac_opt_block_install(kfac_opt_t *k, int b, const kfac_inverse_t *inv, long factor_version) {
    if (b < 0 || b >= k->n_blocks || !inv || inv->n != k->blocks[b].n) return -EINVAL;
    kfac_block_t *bl = &k->blocks[b];
    if (bl->inv->valid && factor_version < bl->inv_version) return 1;
    int rc = kfac_inverse_copy(bl->inv, inv);
    if (rc) return rc;
    bl->inv_version = factor_version;
    bl->inv_time_s = clock_now_s();
    bl->n_installed++;
    return 0;
}

int kfac_opt_invert_block(kfac_opt_t *k, int b) {
    if (b < 0 || b >= k->n_blocks) return -EINVAL;
    kfac_block_t *bl = &k->blocks[b];
    float damping;
    long ver;
    const kfac_factor_t *f = &k->avg->layers[bl->stat].f[bl->factor];
    if (f->n_updates == 0 || bl->factor_version < 0) return -ENODATA;
    damping = s_block_damping(k, bl, k->opts.damping);
    ver = bl->factor_version;
    /* The factor is read in place (upper triangle), the result goes straight
     * into the block's holder, which is left as it was on failure. */
    int rc = kfac_inverse_compute(f->data, bl->n, damping, k->opts.method, bl->inv, &k->inv_stats);
    if (rc) return rc;
    bl->inv_version = ver;
    bl->inv_time_s = clock_now_s();
    bl->n_installed++;
    return 0;
}

int kfac_opt_invert_all(kfac_opt_t *k) {
    int fails = 0;
    for (int b = 0; b < k->n_blocks; b++)
        if (kfac_opt_invert_block(k, b) < 0) fails++;
    return fails;
}

void kfac_opt_inverse_age(const kfac_opt_t *k, long t, double *mean, long *max) {
    double s = 0.0;
    long mx = -1;
    int n = 0;
    for (int b = 0; b < k->n_blocks; b++) {
        const kfac_block_t *bl = &k->blocks[b];
        if (!bl->inv->valid) continue;
        long age = t - bl->inv_version;
        s += (double)age;
        if (age > mx) mx = age;
        n++;
    }
    if (mean) *mean = n ? s / n : 0.0;
    if (max) *max = mx;
}

/* Index of block (stat, factor), or -1. Blocks are laid out in stat order. */
static int s_block_of(const kfac_opt_t *k, int stat, int factor) {
    for (int b = 0; b < k->n_blocks; b++)
        if (k->blocks[b].stat == stat && k->blocks[b].factor == factor) return b;
    return -1;
}

/* Precondition one layer's slice of the gradient g (n_params: k->g, or
 * the caller's) into k->v. Returns 1 when the identity was used, 0 when
 * preconditioned. */
static int s_precond_layer(kfac_opt_t *k, const float *g, int s, float lambda) {
    const kfac_layer_stats_t *ls = &k->avg->layers[s];
    const layer_t *l = &k->net->layers[ls->layer];
    const float *gw = g + l->w_off, *gb = l->n_b ? g + l->b_off : NULL;
    float *vw = k->v + l->w_off, *vb = l->n_b ? k->v + l->b_off : NULL;
    if (ls->kind == LAYER_BATCHNORM) {
        const kfac_factor_t *f = &ls->f[0];
        /* the view when there is one: avg may be folded into meanwhile */
        const float *bn = k->bn_view ? k->bn_view + k->bn_off[s] : f->data;
        if (k->bn_view ? !k->bn_has[s] : f->n_updates == 0) return 1;
        int rc = kfac_precond_bn(bn, ls->out, lambda, gw, gb, vw, vb);
        if (rc < 0) { k->n_precond_errors++; memcpy(vw, gw, l->n_w * sizeof(float)); memcpy(vb, gb, l->n_b * sizeof(float)); return 1; }
        return 0;
    }
    const int out = ls->out;
    if (ls->mode == KFAC_MODE_DOUBLY) {
        int bK = s_block_of(k, s, 0), bP = s_block_of(k, s, 1), bG = s_block_of(k, s, 2);
        if (bK < 0 || bP < 0 || bG < 0) return 1;
        int rc = kfac_precond_kron3(k->blocks[bK].inv, k->blocks[bP].inv, k->blocks[bG].inv, lambda, gw, out,
                                    ls->fm_c, ls->fm_t, vw, k->work, k->par);
        int ident = 0;
        if (rc) {
            if (rc != -ENODATA) k->n_precond_errors++;
            ident = 1;
            kfac_precond_identity(gw, l->n_w, lambda, k->opts.identity_mode, vw);
        }
        if (gb) {
            int bB = s_block_of(k, s, 3);
            if (bB < 0 || kfac_precond_block(k->blocks[bB].inv, lambda, gb, vb, k->work) != 0) /* work >= out floats */
                kfac_precond_identity(gb, l->n_b, lambda, k->opts.identity_mode, vb);
        }
        return ident;
    }
    /* fc / conv: V = [dW | db] (out, in + has_bias) */
    const int in = ls->in, cols = in + ls->has_bias;
    int bA = s_block_of(k, s, 0), bG = s_block_of(k, s, 1);
    float *V = k->vbuf, *U = k->ubuf;
    for (int o = 0; o < out; o++) {
        memcpy(V + (size_t)o * cols, gw + (size_t)o * in, (size_t)in * sizeof(float));
        if (ls->has_bias) V[(size_t)o * cols + in] = gb[o];
    }
    int rc = (bA < 0 || bG < 0) ? -ENODATA
             : kfac_precond_kron(k->blocks[bA].inv, k->blocks[bG].inv, lambda, V, out, cols, U, k->work, k->par);
    int ident = 0;
    if (rc) {
        if (rc != -ENODATA) k->n_precond_errors++;
        kfac_precond_identity(V, (size_t)out * cols, lambda, k->opts.identity_mode, U);
        ident = 1;
    }
    for (int o = 0; o < out; o++) {
        memcpy(vw + (size_t)o * in, U + (size_t)o * cols, (size_t)in * sizeof(float));
        if (ls->has_bias) vb[o] = U[(size_t)o * cols + in];
    }
    return ident;
}

void kfac_opt_set_par(kfac_opt_t *k, struct nn_par *par) {
    if (k) k->par = par;
}

/* The stats slot of net layer `layer`, or -1. */
static int s_stat_of(const kfac_opt_t *k, int layer) {
    for (int s = 0; s < k->avg->n_layers; s++)
        if (k->avg->layers[s].layer == layer) return s;
    return -1;
}

/* Scratch of the low-rank path: at least len floats in k->lr_buf. */
static float *s_lowrank_scratch(kfac_opt_t *k, size_t len) {
    if (len > k->lr_len) {
        float *b = realloc(k->lr_buf, sizeof(float) * len);
        if (!b) return NULL;
        k->lr_buf = b;
        k->lr_len = len;
    }
    return k->lr_buf;
}

/* Can stats slot s precondition the low-rank gradient e in factored form
 * at this step? (kfac_lowrank.h: the PS's rule, and what the form needs:
 * every inverse there, not every factor EIGEN, no gradient-mode weight
 * decay, which makes the gradient dense.) */
static bool s_lowrank_usable(const kfac_opt_t *k, int s, const kfac_lowrank_t *e) {
    const kfac_opts_t *o = &k->opts;
    if (s < 0 || e->n_rows <= 0) return false;
    if (o->weight_decay > 0.0 && o->wd_mode == KFAC_WD_GRADIENT) return false;
    const kfac_layer_stats_t *ls = &k->avg->layers[s];
    if (ls->kind != LAYER_FC || ls->out != e->n_out) return false;
    bool doubly = ls->mode == KFAC_MODE_DOUBLY;
    if (doubly ? ls->fm_c * ls->fm_t != e->n_in : ls->in != e->n_in) return false;
    int nf = doubly ? 3 : 2, n_eigen = 0;
    for (int f = 0; f < nf; f++) {
        int b = s_block_of(k, s, f);
        if (b < 0 || !k->blocks[b].inv->valid) return false;
        n_eigen += k->blocks[b].inv->method == KFAC_INV_EIGEN;
    }
    if (n_eigen == nf) return false;
    int cols = doubly ? e->n_in : e->n_in + ls->has_bias;
    return kfac_lowrank_update_pays(e->n_rows, e->n_out, cols, doubly ? ls->fm_c : 0, doubly ? ls->fm_t : 0) != 0;
}

/* Precondition stats slot s from its low-rank weight gradient e (the
 * dense gradient g supplies the bias; its weight slice is not read) into
 * k->v.
 * *vg_w receives <v_W, D^T X> by Gram products. Returns 0, or a negative
 * errno with k->v's slice unspecified (the caller then goes dense). */
static int s_precond_layer_lowrank(kfac_opt_t *k, const float *g, int s, float lambda, const kfac_lowrank_t *e,
                                   double *vg_w) {
    const kfac_layer_stats_t *ls = &k->avg->layers[s];
    const layer_t *l = &k->net->layers[ls->layer];
    const int out = ls->out, in = e->n_in, B = e->n_rows;
    const float *gb = l->n_b ? g + l->b_off : NULL;
    float *vw = k->v + l->w_off, *vb = l->n_b ? k->v + l->b_off : NULL;
    int rc;
    if (ls->mode == KFAC_MODE_DOUBLY) {
        int bK = s_block_of(k, s, 0), bP = s_block_of(k, s, 1), bG = s_block_of(k, s, 2);
        size_t wmax = (size_t)B * (size_t)(out > in ? out : in);
        float *buf = s_lowrank_scratch(k, (size_t)B * out + (size_t)B * in + wmax);
        if (!buf) return -ENOMEM;
        float *Pt = buf, *Q = Pt + (size_t)B * out, *work = Q + (size_t)B * in;
        rc = kfac_precond_kron3_lowrank(k->blocks[bK].inv, k->blocks[bP].inv, k->blocks[bG].inv, e->D, e->X, B, out,
                                        ls->fm_c, ls->fm_t, Pt, Q, work, k->par);
        if (rc) return rc;
        rc = kfac_precond_lowrank_form(Pt, Q, B, out, in, vw, in, k->par);
        if (rc) return rc;
        *vg_w = kfac_lowrank_inner(Pt, out, Q, in, B, e->D, out, e->X, in, B, out, in);
        if (gb) {
            int bB = s_block_of(k, s, 3);
            if (bB < 0 || kfac_precond_block(k->blocks[bB].inv, lambda, gb, vb, k->work) != 0)
                kfac_precond_identity(gb, l->n_b, lambda, k->opts.identity_mode, vb);
        }
        return isfinite(*vg_w) ? 0 : -ERANGE;
    }
    /* Standard: the homogeneous bias column as one more row, [D; db^T] and
     * [X 0; 0 1], so that [dW | db] = Dh^T Xh (kfac_precond.h). */
    const int hb = ls->has_bias && gb, cols = in + hb, R = B + hb;
    size_t wmax = (size_t)R * (size_t)(out > cols ? out : cols);
    float *buf = s_lowrank_scratch(k, 2 * ((size_t)R * out + (size_t)R * cols) + wmax);
    if (!buf) return -ENOMEM;
    float *Dh = buf, *Xh = Dh + (size_t)R * out, *Pt = Xh + (size_t)R * cols, *Q = Pt + (size_t)R * out,
          *work = Q + (size_t)R * cols;
    memcpy(Dh, e->D, sizeof(float) * (size_t)B * out);
    if (hb) {
        memcpy(Dh + (size_t)B * out, gb, sizeof(float) * (size_t)out);
        for (int r = 0; r < B; r++) {
            memcpy(Xh + (size_t)r * cols, e->X + (size_t)r * in, sizeof(float) * (size_t)in);
            Xh[(size_t)r * cols + in] = 0.0f;
        }
        memset(Xh + (size_t)B * cols, 0, sizeof(float) * (size_t)in);
        Xh[(size_t)B * cols + in] = 1.0f;
    } else {
        memcpy(Xh, e->X, sizeof(float) * (size_t)B * in);
    }
    int bA = s_block_of(k, s, 0), bG = s_block_of(k, s, 1);
    rc = kfac_precond_kron_lowrank(k->blocks[bA].inv, k->blocks[bG].inv, Dh, Xh, R, out, cols, Pt, Q, work, k->par);
    if (rc) return rc;
    if (!hb) {
        rc = kfac_precond_lowrank_form(Pt, Q, R, out, in, vw, in, k->par);
        if (rc) return rc;
    } else {
        float *U = k->ubuf; /* (out, in + 1) */
        rc = kfac_precond_lowrank_form(Pt, Q, R, out, cols, U, cols, k->par);
        if (rc) return rc;
        for (int o = 0; o < out; o++) {
            memcpy(vw + (size_t)o * in, U + (size_t)o * cols, (size_t)in * sizeof(float));
            vb[o] = U[(size_t)o * cols + in];
        }
    }
    /* <v_W, D^T X>: the weight columns of Q (row stride cols) against the rows of D and X. */
    *vg_w = kfac_lowrank_inner(Pt, out, Q, cols, R, e->D, out, e->X, in, B, out, in);
    return isfinite(*vg_w) ? 0 : -ERANGE;
}

int kfac_opt_step(kfac_opt_t *k, float *params, const float *grads, long t, kfac_step_info_t *info) {
    return kfac_opt_step_lowrank(k, params, grads, NULL, t, info);
}

static int s_step(kfac_opt_t *k, float *params, const float *grads, const kfac_lowrank_set_t *lr, long t,
                  kfac_step_info_t *info, int grads_finite);

int kfac_opt_step_lowrank(kfac_opt_t *k, float *params, const float *grads, const kfac_lowrank_set_t *lr, long t,
                          kfac_step_info_t *info) {
    return s_step(k, params, grads, lr, t, info, 0);
}

int kfac_opt_step_finite(kfac_opt_t *k, float *params, const float *grads, const kfac_lowrank_set_t *lr, long t,
                         kfac_step_info_t *info) {
    return s_step(k, params, grads, lr, t, info, 1);
}

static int s_step(kfac_opt_t *k, float *params, const float *grads, const kfac_lowrank_set_t *lr, long t,
                  kfac_step_info_t *info, int grads_finite) {
    const size_t n = k->net->n_params;
    const kfac_opts_t *o = &k->opts;
    /* Low-rank weight gradients: kept factored where usable (the weight
     * slice of the gradient is then D^T X, never read densely: v^T g there
     * comes from Gram products), else densified into a copy of the
     * gradient in k->g. */
    const kfac_lowrank_t *lr_of[1024];
    const int n_slots = k->avg->n_layers < 1024 ? k->avg->n_layers : 1024;
    for (int s = 0; s < n_slots; s++) lr_of[s] = NULL;
    int n_lowrank = 0, n_dense = 0;
    for (int i = 0; lr && i < lr->n; i++) {
        const kfac_lowrank_t *e = &lr->v[i];
        if (e->n_rows <= 0) continue;
        if (!kfac_linalg_all_finite(e->D, (size_t)e->n_rows * e->n_out) ||
            !kfac_linalg_all_finite(e->X, (size_t)e->n_rows * e->n_in))
            return -EDOM;
        int s = s_stat_of(k, e->layer);
        if (s >= 0 && s < n_slots && s_lowrank_usable(k, s, e)) {
            lr_of[s] = e;
            n_lowrank++;
        } else {
            n_dense++;
        }
    }
    /* The gradient: the caller's, or a copy that the densified entries
     * change. Either way one pass checks it, on the pool (none when the
     * caller checked it and no copy is needed). */
    if ((n_dense || !grads_finite) && kfac_step_copy_finite(n_dense ? k->g : NULL, grads, n, k->par) < n) return -EDOM;
    const float *g = n_dense ? k->g : grads;
    for (int i = 0; n_dense && i < lr->n; i++) {
        const kfac_lowrank_t *e = &lr->v[i];
        int s = s_stat_of(k, e->layer);
        if (e->n_rows > 0 && !(s >= 0 && s < n_slots && lr_of[s] == e)) kfac_lowrank_densify(e, k->g + e->w_off, 1.0f);
    }
    const float lambda = (float)kfac_step_effective_damping(o->damping, o->weight_decay, o->wd_mode);
    int n_ident = 0;
    /* Layer by layer, the direction v; vg_w_of holds the factored layers'
     * <v_W, D^T X>, to which the dot products add the dense part (the
     * bias alone for a factored layer: seg_step). */
    double vg_w_of[1024];
    for (int s = 0; s < k->avg->n_layers; s++) {
        const layer_t *l = &k->net->layers[k->avg->layers[s].layer];
        double vg_w = 0.0;
        const kfac_lowrank_t *e = s < n_slots ? lr_of[s] : NULL;
        k->seg_step[s] = k->seg[s];
        if (e && s_precond_layer_lowrank(k, g, s, lambda, e, &vg_w) != 0) {
            /* failed in factored form: the dense path decides (identity,
             * errors), from a copy of the gradient with D^T X in the slice */
            k->n_precond_errors++;
            if (g != k->g) {
                kfac_step_copy_finite(k->g, grads, n, k->par);
                g = k->g;
            }
            kfac_lowrank_densify(e, k->g + e->w_off, 0.0f);
            memcpy(k->v + l->w_off, k->g + l->w_off, (l->n_w + l->n_b) * sizeof(float));
            e = NULL;
            lr_of[s] = NULL;
            vg_w = 0.0;
            n_lowrank--;
        }
        if (!e) n_ident += s_precond_layer(k, g, s, lambda);
        else k->seg_step[s] = (kfac_step_seg_t){l->b_off, l->n_b};
        if (s < n_slots) vg_w_of[s] = vg_w;
    }
    k->n_identity_layers += (uint64_t)n_ident;
    k->n_lowrank_layers += (uint64_t)n_lowrank;
    /* v^T g of every layer in one pass, on the pool (chunks at fixed
     * offsets, added in order: the same sums on any number of threads),
     * plus the factored layers' Gram parts. g is finite, so a layer's sum
     * is finite exactly when its direction is. */
    const int n_seg = k->avg->n_layers;
    if (kfac_step_dots(k->v, g, k->seg_step, n_seg, k->seg_vg, k->dot_part, k->n_dot_part, k->par) < 0)
        return -EINVAL;
    double vg = 0.0, step = o->lr;
    for (int s = 0; s < n_seg; s++) {
        if (s < n_slots) k->seg_vg[s] += vg_w_of[s];
        vg += k->seg_vg[s];
    }
    if (!isfinite(vg)) return -ERANGE;
    int rc = 0;
    if (o->step_rule == KFAC_STEP_RULE_KL) {
        double c = kfac_step_kl_c(o->kl_c0, o->kl_zeta, t, o->kl_decay_every);
        rc = kfac_step_kl_eta(vg, c, o->eta_max, &step);
    } else if (o->step_rule == KFAC_STEP_RULE_KL_CLIP) {
        double nu;
        rc = kfac_step_kl_clip(k->seg_vg, n_seg, o->lr, o->kl_clip, &nu);
        step = o->lr * nu;
    }
    if (rc) return rc;
    /* The tail, one pass on the pool: decoupled weight decay, momentum,
     * the parameters, the Polyak average. */
    const kfac_step_tail_t tail = {
        .form = KFAC_STEP_FORM_KFAC,
        .n = n,
        .w = params,
        .mom = k->mom,
        .v = k->v,
        .wd_mask = k->wd_mask,
        .step = step,
        .momentum = o->momentum,
        .wd = o->wd_mode == KFAC_WD_DECOUPLED ? o->weight_decay : 0.0,
        .avg = k->polyak,
        .polyak_decay = o->polyak_decay,
        .polyak_count = &k->polyak_count,
    };
    rc = kfac_step_tail(&tail, k->par);
    if (rc) return rc;
    if (info) {
        info->step = step;
        info->vg = vg;
        info->n_layers_identity = n_ident;
        kfac_opt_inverse_age(k, t, &info->inv_age_mean, &info->inv_age_max);
        int miss = 0;
        for (int b = 0; b < k->n_blocks; b++) miss += !k->blocks[b].inv->valid;
        info->n_blocks_missing = miss;
    }
    return 0;
}
