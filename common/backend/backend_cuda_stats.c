/* common/backend/backend_cuda_stats.c — the CUDA backend's factor statistics
 * (backend_cuda_stats): the same factors as kfac_stats on the CPU, computed
 * on the device with cuBLAS (SYRK/GEMM) and the project's kernels (KFC
 * im2col, the doubly-factored rank-1 by power iteration, batch-norm blocks);
 * only the factor matrices cross to the host. */
#ifdef KFAC_CUDA

#include "common/backend/backend_cuda_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"

/* ---- factor statistics ----------------------------------------------------------------- */

/* F (d, d) = alpha X^T X for rows X (m, d) row-major, exactly symmetric, with
 * F[d-1][d-1] = 1 if corner. By default one SGEMM of the whole product
 * (twice SYRK's flops): cuBLAS's SSYRK parallelizes the tall products of
 * the convolutions' statistics (many rows, few columns) poorly, and on an
 * H200 it made the statistics 12x (MNIST CNN) to 34x (ResNet-8) slower
 * (bench_gpu --stats-detail, bench/RESULTS.md). KFAC_CUDA_GRAM=syrk keeps
 * SSYRK. Either way one triangle is kept and mirrored. */
static int s_gram(backend_cuda_t *cb, const float *X, int m, int d, float alpha, float *F, int corner) {
    const float zero = 0.0f;
    /* Column-major: X_cm = X^T (d x m, ld d); C (d x d) = alpha X_cm X_cm^T. SSYRK writes its column-major
     * LOWER triangle = the row-major UPPER one, which k_symmetrize mirrors; SGEMM writes both, and the same
     * triangle is mirrored. */
    if (cb->gram == CB_GRAM_SYRK)
        CB_TRY(CK_BLAS(cublasSsyrk(cb->blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, d, m, &alpha, X, d, &zero, F, d)));
    else
        CB_TRY(CK_BLAS(cublasSgemm(cb->blas, CUBLAS_OP_N, CUBLAS_OP_T, d, d, m, &alpha, X, d, X, d, &zero, F, d)));
    return CK_CUDA(backend_cuda_k_symmetrize(F, d, corner, cb->stream));
}

/* Does slot ls describe layer l of the net (kfac_stats_new's layout)? */
static int s_slot_matches(const kfac_stats_t *s, const kfac_layer_stats_t *ls, const net_t *net) {
    if (ls->layer < 0 || ls->layer >= net->n_layers) return 0;
    const layer_t *l = &net->layers[ls->layer];
    if (l->kind != ls->kind) return 0;
    int dims[KFAC_STATS_MAX_FACTORS], nf = 0;
    if (l->kind == LAYER_FC) {
        const int in = l->in_c * l->in_h * l->in_w, hb = l->has_bias ? 1 : 0;
        if (ls->in != in || ls->out != l->out || ls->has_bias != hb) return 0;
        if (ls->mode == KFAC_MODE_DOUBLY) {
            if (ls->fm_c < 1 || ls->fm_t < 1 || ls->fm_c * ls->fm_t != in) return 0;
            dims[nf++] = ls->fm_t; dims[nf++] = ls->fm_c; dims[nf++] = l->out;
            if (hb) dims[nf++] = l->out;
        } else if (ls->mode == KFAC_MODE_STANDARD) {
            dims[nf++] = in + hb; dims[nf++] = l->out;
        } else {
            return 0;
        }
    } else if (l->kind == LAYER_CONV) {
        const int K = l->in_c * l->k * l->k, hb = l->has_bias ? 1 : 0;
        if (ls->in != K || ls->out != l->out || ls->positions != l->h * l->w || ls->has_bias != hb) return 0;
        if (ls->mode != KFAC_MODE_KFC && ls->mode != KFAC_MODE_AVG) return 0;
        dims[nf++] = K + hb; dims[nf++] = l->out;
    } else if (l->kind == LAYER_BATCHNORM) {
        if (ls->in != l->c || ls->positions != l->h * l->w) return 0;
        dims[nf++] = l->c;
    } else {
        return 0;
    }
    if (ls->n_factors != nf) return 0;
    for (int k = 0; k < nf; k++) {
        const kfac_factor_t *f = &ls->f[k];
        const int want = l->kind == LAYER_BATCHNORM ? KFAC_FACTOR_DIAG2X2 : KFAC_FACTOR_SYM;
        if ((int)f->kind != want || f->dim != dims[k] || !f->data || f->data < s->arena) return 0;
        if ((size_t)(f->data - s->arena) + kfac_factor_len(f) > s->n_floats) return 0;
    }
    return 1;
}

/* Device scratch (bytes) slot ls needs for n examples. */
static size_t s_slot_scratch(const kfac_layer_stats_t *ls, const net_t *net, int n) {
    const layer_t *l = &net->layers[ls->layer];
    const size_t N = (size_t)n, F = sizeof(float);
    if (l->kind == LAYER_FC) {
        if (ls->mode == KFAC_MODE_DOUBLY)
            return cb_align(N * (size_t)(ls->fm_t + ls->fm_c) * F) +
                   backend_cuda_rank1_work_len(n, ls->fm_c, ls->fm_t) * sizeof(double);
        return ls->has_bias ? N * (size_t)(ls->in + 1) * F : 0;
    }
    if (l->kind == LAYER_CONV) {
        const size_t P = (size_t)ls->positions, Kd = (size_t)ls->in + (size_t)ls->has_bias, O = (size_t)ls->out;
        if (ls->mode == KFAC_MODE_AVG) return cb_align(N * Kd * F) + N * O * F;
        return cb_align(N * P * Kd * F) + N * P * O * F;
    }
    return 2 * N * (size_t)ls->in * sizeof(double); /* batchnorm */
}

/* Make sure the device factor arena, the pinned copy and the scratch fit s. */
static int s_stats_buffers(backend_cuda_t *cb, const kfac_stats_t *s) {
    const net_t *net = cb->net;
    size_t scratch = 0;
    for (int j = 0; j < s->n_layers; j++) {
        size_t b = s_slot_scratch(&s->layers[j], net, net->batch_cap);
        if (b > scratch) scratch = b;
    }
    const int grow = s->n_floats > cb->factors_len || s->n_floats > cb->h_factors_len || scratch > cb->scratch_bytes;
    if (!grow) return 0;
    CB_TRY(CK_CUDA(cudaStreamSynchronize(cb->stream))); /* nothing may still use the old buffers */
    if (s->n_floats > cb->factors_len) {
        CB_TRY(cb_dfree(cb, (void **)&cb->d_factors, cb->factors_len * sizeof(float)));
        cb->factors_len = 0;
        CB_TRY(cb_dalloc(cb, (void **)&cb->d_factors, s->n_floats * sizeof(float)));
        cb->factors_len = s->n_floats;
    }
    if (s->n_floats > cb->h_factors_len) {
        if (cb->h_factors) CB_TRY(CK_CUDA(cudaFreeHost(cb->h_factors)));
        cb->h_factors = NULL;
        cb->h_factors_len = 0;
        CB_TRY(cb_halloc(cb, (void **)&cb->h_factors, s->n_floats * sizeof(float)));
        cb->h_factors_len = s->n_floats;
    }
    if (scratch > cb->scratch_bytes) {
        CB_TRY(cb_dfree(cb, &cb->d_scratch, cb->scratch_bytes));
        cb->scratch_bytes = 0;
        CB_TRY(cb_dalloc(cb, &cb->d_scratch, scratch));
        cb->scratch_bytes = scratch;
    }
    return 0;
}

static int s_slot_stats(backend_cuda_t *cb, const kfac_stats_t *s, const kfac_layer_stats_t *ls, int n) {
    const net_t *net = cb->net;
    const layer_t *l = &net->layers[ls->layer];
    const cb_layer_t *c = &cb->layers[ls->layer];
    const float g_scale = (float)n; /* nn's loss is the batch mean: g = n dy */
    const float g_alpha = g_scale * g_scale / (float)n;
    float *f[KFAC_STATS_MAX_FACTORS];
    for (int k = 0; k < ls->n_factors; k++) f[k] = cb->d_factors + (ls->f[k].data - s->arena);
    float *scr = cb->d_scratch;
    const float *in = cb_input(cb, l);
    const int hb = ls->has_bias;
    if (l->kind == LAYER_FC && ls->mode == KFAC_MODE_DOUBLY) {
        const int C = ls->fm_c, T = ls->fm_t;
        float *Km = scr, *Pm = scr + (size_t)n * T;
        double *work = (double *)((char *)cb->d_scratch + cb_align((size_t)n * (T + C) * sizeof(float)));
        CB_TRY(CK_CUDA(backend_cuda_k_rank1(in, n, C, T, Km, Pm, CB_RANK1_MAX_ITER, CB_RANK1_TOL, work, cb->stream)));
        CB_TRY(s_gram(cb, Km, n, T, 1.0f / (float)n, f[0], 0)); /* E[K K^T] */
        CB_TRY(s_gram(cb, Pm, n, C, 1.0f / (float)n, f[1], 0)); /* E[Psi Psi^T] */
        CB_TRY(s_gram(cb, c->dy, n, ls->out, g_alpha, f[2], 0)); /* E[g g^T] */
        if (hb)
            CB_TRY(CK_CUDA(cudaMemcpyAsync(f[3], f[2], (size_t)ls->out * ls->out * sizeof(float),
                                           cudaMemcpyDeviceToDevice, cb->stream)));
        return 0;
    }
    if (l->kind == LAYER_FC) {
        const float *X = in;
        if (hb) {
            CB_TRY(CK_CUDA(backend_cuda_k_augment(in, scr, n, ls->in, cb->stream)));
            X = scr;
        }
        CB_TRY(s_gram(cb, X, n, ls->in + hb, 1.0f / (float)n, f[0], hb)); /* A = E[[a;1][a;1]^T] */
        return s_gram(cb, c->dy, n, ls->out, g_alpha, f[1], 0);           /* G = E[g g^T] */
    }
    if (l->kind == LAYER_CONV) {
        const int P = ls->positions, Kd = ls->in + hb, O = ls->out;
        if (ls->mode == KFAC_MODE_KFC) {
            float *dyt = (float *)((char *)cb->d_scratch + cb_align((size_t)n * P * Kd * sizeof(float)));
            CB_TRY(CK_CUDA(backend_cuda_k_im2col(in, scr, n, l->in_c, l->in_h, l->in_w, l->k, l->stride, l->pad, l->h,
                                                 l->w, Kd, hb, cb->stream)));
            /* A = (1/(nP)) sum over (example, position) rows of [p;1][p;1]^T */
            CB_TRY(s_gram(cb, scr, n * P, Kd, 1.0f / (float)(n * P), f[0], hb));
            CB_TRY(CK_CUDA(backend_cuda_k_transpose_dy(c->dy, dyt, n, O, P, cb->stream)));
            return s_gram(cb, dyt, n * P, O, g_alpha, f[1], 0); /* G = (1/n) sum_i sum_t g g^T */
        }
        float *sums = (float *)((char *)cb->d_scratch + cb_align((size_t)n * Kd * sizeof(float)));
        CB_TRY(CK_CUDA(backend_cuda_k_patch_means(in, scr, n, l->in_c, l->in_h, l->in_w, l->k, l->stride, l->pad,
                                                  l->h, l->w, Kd, hb, 1.0f / (float)P, cb->stream)));
        CB_TRY(s_gram(cb, scr, n, Kd, 1.0f / (float)n, f[0], hb)); /* A = E[m m^T] */
        CB_TRY(CK_CUDA(backend_cuda_k_pos_sums(c->dy, sums, n, O, P, cb->stream)));
        return s_gram(cb, sums, n, O, g_alpha, f[1], 0); /* G = E[s s^T] */
    }
    /* batch normalization: unit-wise 2x2 blocks */
    return CK_CUDA(backend_cuda_k_bn_factor(c->xhat, c->dy, n, l->c, l->h * l->w, g_scale, f[0],
                                            (double *)cb->d_scratch, cb->stream));
}

int backend_cuda_reserve_stats(backend_cuda_t *cb, const kfac_stats_t *s) {
    if (cb->failed) return cb->failed;
    for (int j = 0; j < s->n_layers; j++)
        if (!s_slot_matches(s, &s->layers[j], cb->net)) {
            log_error("backend_reserve_stats: statistics slot %d (layer %d) does not match this network", j,
                      s->layers[j].layer);
            return -EINVAL;
        }
    if (s->n_layers == 0 || s->n_floats == 0) return 0;
    CB_TRY(CK_CUDA(cudaSetDevice(cb->device)));
    return s_stats_buffers(cb, s);
}

int backend_cuda_stats(backend_cuda_t *cb, kfac_stats_t *s) {
    if (cb->failed) return cb->failed;
    const net_t *net = cb->net;
    const int n = cb->fwd_n;
    if (n < 1 || !cb->bwd_done) return -EINVAL;
    if (n > s->batch_cap || !s->arena) {
        log_error("backend_stats: batch of %d examples, statistics sized for %d", n, s->batch_cap);
        return -EINVAL;
    }
    for (int j = 0; j < s->n_layers; j++)
        if (!s_slot_matches(s, &s->layers[j], net)) {
            log_error("backend_stats: statistics slot %d (layer %d) does not match this network", j,
                      s->layers[j].layer);
            return -EINVAL;
        }
    if (s->n_layers == 0 || s->n_floats == 0) return 0;
    CB_TRY(CK_CUDA(cudaSetDevice(cb->device)));
    CB_TRY(s_stats_buffers(cb, s));
    for (int j = 0; j < s->n_layers; j++)
        if (!s->layers[j].skip) {
            CB_TRY(s_slot_stats(cb, s, &s->layers[j], n));
            CB_TRY(cb_sync_after(cb, "statistics", net->layers[s->layers[j].layer].name));
        }
    /* Only the factor matrices cross to the host: the whole arena in one copy. */
    CB_TRY(CK_CUDA(cudaMemcpyAsync(cb->h_factors, cb->d_factors, s->n_floats * sizeof(float), cudaMemcpyDeviceToHost,
                                   cb->stream)));
    CB_TRY(CK_CUDA(cudaStreamSynchronize(cb->stream)));
    /* Into the caller's arena: the computed slots only. A skipped slot keeps
     * what it held, as on the CPU; its device range was never written. */
    for (int j = 0; j < s->n_layers; j++) {
        if (s->layers[j].skip) continue;
        for (int k = 0; k < s->layers[j].n_factors; k++) {
            const kfac_factor_t *f = &s->layers[j].f[k];
            const size_t off = (size_t)(f->data - s->arena);
            memcpy(f->data, cb->h_factors + off, kfac_factor_len(f) * sizeof(float));
        }
    }
    for (int j = 0; j < s->n_layers; j++)
        for (int k = 0; k < s->layers[j].n_factors; k++) {
            s->layers[j].f[k].n_samples = s->layers[j].skip ? 0 : n; /* skipped: empty, as on the CPU */
            s->layers[j].f[k].n_updates = s->layers[j].skip ? 0 : 1;
        }
    return 0;
}

#else

/* Built without CUDA. */
typedef int backend_cuda_stats_unused_t;

#endif
