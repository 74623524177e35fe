/* common/nn/nn.c — forward and backward passes of every layer kind (see nn.h
 * for the layouts). float32, row-major, NCHW. Dense work goes through
 * OpenBLAS sgemm; each call states its math and layout.
 *
 * Threads (net_set_threads): each layer's pass is split over the batch by
 * nn_par_run, part p taking the examples of nn_par_range(n, p, ...). Parts
 * write disjoint example slices of y, dy and the input gradient; fc weight
 * gradients are split by output rows; conv weight gradients are summed per
 * part and then added in part order, so a given thread count repeats bit
 * for bit. Dropout in training (one random stream) and batch norm (per
 * channel sums) run on the calling thread. With one thread the same code
 * runs as one part.
 *
 * Conv engines (net_set_conv_engine): a conv layer with l->dnnl runs its
 * parts through oneDNN (nn_dnnl.c) instead of im2col + sgemm, one oneDNN
 * call per part, the weight gradient summed per part as above. Its patches
 * (l->cols) are then formed only when asked for (net_conv_patches). A part
 * whose oneDNN call fails runs the reference code instead, and the layer
 * goes back to it for good, with one warning.
 */
#include "common/nn/nn.h"

#include <assert.h>
#include <cblas.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/base/rng.h"
#include "common/nn/nn_dnnl.h"
#include "common/nn/nn_par.h"

const float *net_layer_input(const net_t *net, const layer_t *l) {
    return l->in < 0 ? net->x : net->layers[l->in].y;
}

static float *s_input_grad(net_t *net, const layer_t *l) {
    return l->in < 0 ? NULL : net->layers[l->in].dy;
}

/* ---- convolution -------------------------------------------------------- */

/* Examples per block of the convolution loops: about NN_BLOCK_FLOATS
 * patch values (1 MiB), so that a block's patches are still in the L2
 * cache when sgemm reads them right after im2col wrote them. */
#define NN_BLOCK_FLOATS (256 * 1024)

static int s_conv_block(const layer_t *l) {
    size_t per = (size_t)l->in_c * l->k * l->k * l->h * l->w;
    size_t b = per ? NN_BLOCK_FLOATS / per : 1;
    return b < 1 ? 1 : (int)b;
}

/* cols (C*k*k, n*oh*ow): row (c, ky, kx), column (i, oy, ox) holds
 * x[i][c][oy*s - pad + ky][ox*s - pad + kx], zero outside the image; here
 * for the examples i0 <= i < i1 of a batch of n. Rows are built a whole
 * output row at a time: with stride 1 each output row is one contiguous
 * copy of an input row segment between two zero fills. */
static void s_im2col(const layer_t *l, const float *x, int n, int i0, int i1) {
    const int C = l->in_c, H = l->in_h, W = l->in_w, k = l->k, s = l->stride, pad = l->pad;
    const int OH = l->h, OW = l->w, P = OH * OW;
    const size_t R = (size_t)n * P;
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
                float *row = l->cols + ((size_t)(c * k + ky) * k + kx) * R;
                /* valid ox: 0 <= ox*s - pad + kx < W */
                int lo = 0, hi = OW;
                while (lo < OW && lo * s - pad + kx < 0) lo++;
                while (hi > lo && (hi - 1) * s - pad + kx >= W) hi--;
                for (int i = i0; i < i1; i++) {
                    const float *xc = x + ((size_t)i * C + c) * H * W;
                    float *d = row + (size_t)i * P;
                    for (int oy = 0; oy < OH; oy++, d += OW) {
                        int iy = oy * s - pad + ky;
                        if (iy < 0 || iy >= H) { memset(d, 0, (size_t)OW * sizeof(float)); continue; }
                        /* input column of output column ox: ox*s + off (in range for lo <= ox < hi) */
                        const float *src = xc + (size_t)iy * W;
                        const int off = kx - pad;
                        if (lo > 0) memset(d, 0, (size_t)lo * sizeof(float));
                        if (s == 1) { if (hi > lo) memcpy(d + lo, src + lo + off, (size_t)(hi - lo) * sizeof(float)); }
                        else for (int ox = lo; ox < hi; ox++) d[ox] = src[ox * s + off];
                        if (hi < OW) memset(d + hi, 0, (size_t)(OW - hi) * sizeof(float));
                    }
                }
            }
}

/* dx += col2im(dcols) for the examples i0 <= i < i1: the adjoint of
 * s_im2col. */
static void s_col2im_add(const layer_t *l, float *dx, int n, int i0, int i1) {
    const int C = l->in_c, H = l->in_h, W = l->in_w, k = l->k, s = l->stride, pad = l->pad;
    const int OH = l->h, OW = l->w, P = OH * OW;
    const size_t R = (size_t)n * P;
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
                const float *row = l->dcols + ((size_t)(c * k + ky) * k + kx) * R;
                int lo = 0, hi = OW;
                while (lo < OW && lo * s - pad + kx < 0) lo++;
                while (hi > lo && (hi - 1) * s - pad + kx >= W) hi--;
                for (int i = i0; i < i1; i++) {
                    float *dxc = dx + ((size_t)i * C + c) * H * W;
                    const float *d = row + (size_t)i * P;
                    for (int oy = 0; oy < OH; oy++, d += OW) {
                        int iy = oy * s - pad + ky;
                        if (iy < 0 || iy >= H) continue;
                        float *dst = dxc + (size_t)iy * W;
                        const int off = kx - pad;
                        if (s == 1) for (int ox = lo; ox < hi; ox++) dst[ox + off] += d[ox];
                        else for (int ox = lo; ox < hi; ox++) dst[ox * s + off] += d[ox];
                    }
                }
            }
}

/* Examples i0 <= i < i1 of n, block by block: patches, then
 * tmp (O, R) columns of the block = W (O, K) * cols (K, R) columns, then
 * y (n, O, P) = tmp + bias for those examples. */
static void s_conv_forward(layer_t *l, const float *x, int n, int i0, int i1) {
    const int P = l->h * l->w, K = l->in_c * l->k * l->k, O = l->out;
    const int R = n * P, B = s_conv_block(l);
    for (int b0 = i0; b0 < i1; b0 += B) {
        const int b1 = b0 + B < i1 ? b0 + B : i1;
        const size_t c0 = (size_t)b0 * P;
        s_im2col(l, x, n, b0, b1);
        /* tmp[:, c0:c0+m] (O, m) = W (O, K) * cols[:, c0:c0+m] (K, m); m = (b1-b0)*P, row stride R. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, O, (b1 - b0) * P, K, 1.0f, l->weight, K,
                    l->cols + c0, R, 0.0f, l->tmp + c0, R);
        for (int i = b0; i < b1; i++)
            for (int o = 0; o < O; o++) {
                const float bo = l->bias ? l->bias[o] : 0.0f;
                float *yo = l->y + ((size_t)i * O + o) * P;
                const float *t = l->tmp + (size_t)o * R + (size_t)i * P;
                for (int p = 0; p < P; p++) yo[p] = t[p] + bo;
            }
    }
}

/* Examples i0 <= i < i1 of n, block by block: tmp (O, R) columns <- dy;
 * dW_part (O, K) += tmp columns * cols columns^T; db_part (O) += row sums of
 * tmp; dcols columns = W^T (K, O) * tmp columns; dx += col2im. dW_part and
 * db_part (may be NULL without a bias) are this part's own sums, overwritten
 * (zero when the range is empty); the caller adds the parts. need_cols: the
 * forward pass did not form the patches (oneDNN): im2col each block of the
 * input x first. */
static void s_conv_backward(net_t *net, layer_t *l, int n, int i0, int i1, float *dw_part, float *db_part,
                            const float *x, int need_cols) {
    const int P = l->h * l->w, K = l->in_c * l->k * l->k, O = l->out;
    const int R = n * P, B = s_conv_block(l);
    float *dx = s_input_grad(net, l);
    int first = 1;
    for (int b0 = i0; b0 < i1; b0 += B) {
        const int b1 = b0 + B < i1 ? b0 + B : i1, m = (b1 - b0) * P;
        const size_t c0 = (size_t)b0 * P;
        if (need_cols) s_im2col(l, x, n, b0, b1);
        /* tmp (O, R) <- dy (n, O, P): block copies. */
        for (int i = b0; i < b1; i++)
            for (int o = 0; o < O; o++)
                memcpy(l->tmp + (size_t)o * R + (size_t)i * P, l->dy + ((size_t)i * O + o) * P, (size_t)P * sizeof(float));
        /* dW_part (O, K) (+)= tmp[:, c0:c0+m] (O, m) * cols[:, c0:c0+m]^T (m, K); row stride R. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, O, K, m, 1.0f, l->tmp + c0, R, l->cols + c0, R,
                    first ? 0.0f : 1.0f, dw_part, K);
        if (db_part)
            for (int o = 0; o < O; o++) {
                const float *t = l->tmp + (size_t)o * R + c0;
                float acc = 0.0f;
                for (int r = 0; r < m; r++) acc += t[r];
                db_part[o] = first ? acc : db_part[o] + acc;
            }
        first = 0;
        if (!dx) continue;
        /* dcols[:, c0:c0+m] (K, m) = W^T (K, O) * tmp[:, c0:c0+m] (O, m). */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, m, O, 1.0f, l->weight, K, l->tmp + c0, R, 0.0f,
                    l->dcols + c0, R);
        s_col2im_add(l, dx, n, b0, b1);
    }
    if (first) {
        memset(dw_part, 0, (size_t)O * K * sizeof(float));
        if (db_part) memset(db_part, 0, (size_t)O * sizeof(float));
    }
}

/* ---- fully connected ---------------------------------------------------- */

/* Rows i0 <= i < i1: y (m, O) = x (m, in) * W^T + b; W is (O, in). */
static void s_fc_forward(layer_t *l, const float *x, int i0, int i1) {
    const int in = l->in_c * l->in_h * l->in_w, O = l->out;
    if (i1 <= i0) return;
    /* y[i0:i1] (m, O) = x[i0:i1] (m, in) * W^T (in, O). */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, O, in, 1.0f, x + (size_t)i0 * in, in, l->weight,
                in, 0.0f, l->y + (size_t)i0 * O, O);
    if (l->bias)
        for (int i = i0; i < i1; i++)
            for (int o = 0; o < O; o++) l->y[(size_t)i * O + o] += l->bias[o];
}

/* Part `part` of n_parts: the weight-gradient rows o0 <= o < o1 over the
 * whole batch (no sums across parts) and the input-gradient rows
 * i0 <= i < i1. */
static void s_fc_backward(net_t *net, layer_t *l, const float *x, int n, int part, int n_parts) {
    const int in = l->in_c * l->in_h * l->in_w, O = l->out;
    int o0, o1, i0, i1;
    nn_par_range(O, part, n_parts, &o0, &o1);
    nn_par_range(n, part, n_parts, &i0, &i1);
    if (o1 > o0) {
        /* dW[o0:o1] (m, in) = dy[:, o0:o1]^T (m, n) * x (n, in); dy row stride O. */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, in, n, 1.0f, l->dy + o0, O, x, in, 0.0f,
                    l->dweight + (size_t)o0 * in, in);
        if (l->dbias) {
            memset(l->dbias + o0, 0, (size_t)(o1 - o0) * sizeof(float));
            for (int i = 0; i < n; i++)
                for (int o = o0; o < o1; o++) l->dbias[o] += l->dy[(size_t)i * O + o];
        }
    }
    float *dx = s_input_grad(net, l);
    /* dx[i0:i1] (m, in) += dy[i0:i1] (m, O) * W (O, in). */
    if (dx && i1 > i0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, in, O, 1.0f, l->dy + (size_t)i0 * O, O,
                    l->weight, in, 1.0f, dx + (size_t)i0 * in, in);
}

/* ---- pooling ------------------------------------------------------------ */

static void s_maxpool_forward(layer_t *l, const float *x, int i0, int i1) {
    const int C = l->c, H = l->in_h, W = l->in_w, OH = l->h, OW = l->w;
    const int k = l->k, s = l->stride, pad = l->pad;
    for (int i = i0; i < i1; i++)
        for (int c = 0; c < C; c++) {
            const float *xc = x + ((size_t)i * C + c) * H * W;
            size_t ob = ((size_t)i * C + c) * OH * OW;
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    float best = -FLT_MAX;
                    int arg = -1;
                    for (int ky = 0; ky < k; ky++) {
                        int iy = oy * s - pad + ky;
                        if (iy < 0 || iy >= H) continue;
                        for (int kx = 0; kx < k; kx++) {
                            int ix = ox * s - pad + kx;
                            if (ix < 0 || ix >= W) continue;
                            float v = xc[iy * W + ix];
                            if (arg < 0 || v > best) { best = v; arg = iy * W + ix; }
                        }
                    }
                    l->y[ob + (size_t)oy * OW + ox] = arg < 0 ? 0.0f : best;
                    l->argmax[ob + (size_t)oy * OW + ox] = arg;
                }
        }
}

static void s_maxpool_backward(layer_t *l, float *dx, int i0, int i1) {
    const int C = l->c, HW = l->in_h * l->in_w, OHW = l->h * l->w;
    for (int i = i0; i < i1; i++)
        for (int c = 0; c < C; c++) {
            float *dxc = dx + ((size_t)i * C + c) * HW;
            size_t ob = ((size_t)i * C + c) * OHW;
            for (int q = 0; q < OHW; q++)
                if (l->argmax[ob + q] >= 0) dxc[l->argmax[ob + q]] += l->dy[ob + q];
        }
}

/* Examples i0 <= i < i1. Average pooling divides by the full window k*k (padding counts as zeros);
 * global pooling divides by H*W. */
static void s_avgpool(layer_t *l, const float *x, float *dx, int i0, int i1, int backward) {
    const int C = l->c, H = l->in_h, W = l->in_w, OH = l->h, OW = l->w;
    const int kh = l->global ? H : l->k, kw = l->global ? W : l->k;
    const int s = l->global ? 1 : l->stride, pad = l->global ? 0 : l->pad;
    const float inv = 1.0f / (float)(kh * kw);
    for (int i = i0; i < i1; i++)
        for (int c = 0; c < C; c++) {
            size_t ib = ((size_t)i * C + c) * H * W, ob = ((size_t)i * C + c) * OH * OW;
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    float acc = 0.0f, g = backward ? l->dy[ob + (size_t)oy * OW + ox] * inv : 0.0f;
                    for (int ky = 0; ky < kh; ky++) {
                        int iy = oy * s - pad + ky;
                        if (iy < 0 || iy >= H) continue;
                        for (int kx = 0; kx < kw; kx++) {
                            int ix = ox * s - pad + kx;
                            if (ix < 0 || ix >= W) continue;
                            if (backward) dx[ib + (size_t)iy * W + ix] += g;
                            else acc += x[ib + (size_t)iy * W + ix];
                        }
                    }
                    if (!backward) l->y[ob + (size_t)oy * OW + ox] = acc * inv;
                }
        }
}

/* ---- batch normalization ------------------------------------------------ */

static void s_bn_forward(net_t *net, layer_t *l, const float *x, int n) {
    const int C = l->c, HW = l->h * l->w;
    const double M = (double)n * HW;
    for (int c = 0; c < C; c++) {
        float mean, invstd;
        if (net->train) {
            double s1 = 0.0, s2 = 0.0;
            for (int i = 0; i < n; i++) {
                const float *xc = x + ((size_t)i * C + c) * HW;
                for (int q = 0; q < HW; q++) s1 += xc[q];
            }
            double mu = s1 / M;
            for (int i = 0; i < n; i++) {
                const float *xc = x + ((size_t)i * C + c) * HW;
                for (int q = 0; q < HW; q++) { double d = xc[q] - mu; s2 += d * d; }
            }
            double var = s2 / M; /* biased: the variance the forward pass normalizes by */
            mean = (float)mu;
            invstd = (float)(1.0 / sqrt(var + l->eps));
            double unbiased = M > 1 ? s2 / (M - 1) : var;
            l->run_mean[c] = (1.0f - l->momentum) * l->run_mean[c] + l->momentum * mean;
            l->run_var[c] = (1.0f - l->momentum) * l->run_var[c] + l->momentum * (float)unbiased;
        } else {
            mean = l->run_mean[c];
            invstd = 1.0f / sqrtf(l->run_var[c] + l->eps);
        }
        l->bmean[c] = mean;
        l->binvstd[c] = invstd;
        const float g = l->weight[c], b = l->bias[c];
        for (int i = 0; i < n; i++) {
            size_t off = ((size_t)i * C + c) * HW;
            for (int q = 0; q < HW; q++) {
                float xh = (x[off + q] - mean) * invstd;
                l->xhat[off + q] = xh;
                l->y[off + q] = g * xh + b;
            }
        }
    }
}

static void s_bn_backward(net_t *net, layer_t *l, int n) {
    const int C = l->c, HW = l->h * l->w;
    const double M = (double)n * HW;
    float *dx = s_input_grad(net, l);
    for (int c = 0; c < C; c++) {
        double sdy = 0.0, sdyx = 0.0;
        for (int i = 0; i < n; i++) {
            size_t off = ((size_t)i * C + c) * HW;
            for (int q = 0; q < HW; q++) { sdy += l->dy[off + q]; sdyx += (double)l->dy[off + q] * l->xhat[off + q]; }
        }
        l->dweight[c] = (float)sdyx; /* d gamma */
        l->dbias[c] = (float)sdy;  /* d beta */
        if (!dx) continue;
        const float g = l->weight[c], is = l->binvstd[c];
        for (int i = 0; i < n; i++) {
            size_t off = ((size_t)i * C + c) * HW;
            for (int q = 0; q < HW; q++) {
                if (net->train) /* dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)) */
                    dx[off + q] += g * is * (float)(l->dy[off + q] - sdy / M - l->xhat[off + q] * sdyx / M);
                else
                    dx[off + q] += g * is * l->dy[off + q];
            }
        }
    }
}

/* ---- loss --------------------------------------------------------------- */

/* Softmax of the logits into l->probs, row by row (max-shifted). */
static void s_softmax(layer_t *l, const float *z, int n) {
    const int K = l->c;
    for (int i = 0; i < n; i++) {
        const float *zi = z + (size_t)i * K;
        float *pi = l->probs + (size_t)i * K;
        float m = zi[0];
        for (int k = 1; k < K; k++) if (zi[k] > m) m = zi[k];
        double s = 0.0;
        for (int k = 0; k < K; k++) { pi[k] = expf(zi[k] - m); s += pi[k]; }
        float inv = (float)(1.0 / s);
        for (int k = 0; k < K; k++) pi[k] *= inv;
    }
}

/* ---- network ------------------------------------------------------------ */

/* One layer's pass, run by nn_par_run: part `part` of n_parts takes the
 * examples of nn_par_range(n, ...). */
typedef struct s_pass {
    net_t *net;
    layer_t *l;
    int n;
    atomic_int dnnl_failed; /* a part's oneDNN call failed (it then ran the reference code) */
} s_pass_t;

/* Conv forward of one part on oneDNN, or the reference code when the layer
 * has no oneDNN engine or its call fails. */
static void s_conv_forward_part(s_pass_t *job, layer_t *l, const float *in, int part, int i0, int i1) {
    if (l->dnnl && i1 > i0) {
        const size_t in_size = (size_t)l->in_c * l->in_h * l->in_w;
        if (nn_dnnl_conv_forward(l->dnnl, part, i1 - i0, in + (size_t)i0 * in_size, l->weight, l->bias,
                                 l->y + (size_t)i0 * l->size) == 0)
            return;
        atomic_store(&job->dnnl_failed, 1);
    }
    s_conv_forward(l, in, job->n, i0, i1);
}

/* Forward for the examples of one part (every kind but dropout in training
 * and batch norm, which net_forward runs whole). */
static void s_forward_part(void *arg, int part, int n_parts) {
    s_pass_t *job = arg;
    net_t *net = job->net;
    layer_t *l = job->l;
    int i0, i1;
    nn_par_range(job->n, part, n_parts, &i0, &i1);
    const float *in = net_layer_input(net, l);
    const size_t j0 = (size_t)i0 * l->size, j1 = (size_t)i1 * l->size;
    switch (l->kind) {
    case LAYER_FC: s_fc_forward(l, in, i0, i1); break;
    case LAYER_CONV: s_conv_forward_part(job, l, in, part, i0, i1); break;
    case LAYER_RELU:
        for (size_t j = j0; j < j1; j++) l->y[j] = in[j] > 0.0f ? in[j] : 0.0f;
        break;
    case LAYER_TANH:
        for (size_t j = j0; j < j1; j++) l->y[j] = tanhf(in[j]);
        break;
    case LAYER_MAXPOOL: s_maxpool_forward(l, in, i0, i1); break;
    case LAYER_AVGPOOL: s_avgpool(l, in, NULL, i0, i1, 0); break;
    case LAYER_FLATTEN: memcpy(l->y + j0, in + j0, (j1 - j0) * sizeof(float)); break;
    case LAYER_DROPOUT: /* not training: the identity */
        for (size_t j = j0; j < j1; j++) l->mask[j] = 1.0f;
        memcpy(l->y + j0, in + j0, (j1 - j0) * sizeof(float));
        break;
    case LAYER_ADD: {
        const float *in2 = l->in2 < 0 ? net->x : net->layers[l->in2].y;
        for (size_t j = j0; j < j1; j++) l->y[j] = in[j] + in2[j];
        break;
    }
    default: break;
    }
}

/* oneDNN primitives and scratch for a pass of n examples over the net's
 * threads; a layer whose engine refuses goes back to the reference code. */
static void s_conv_prepare(net_t *net, layer_t *l, int n) {
    if (!l->dnnl) return;
    int rc = nn_dnnl_conv_prepare(l->dnnl, n, nn_par_threads(net->par));
    if (rc == 0) return;
    log_warn("conv %s: oneDNN cannot run a batch of %d (%d): back to im2col + OpenBLAS", l->name, n, rc);
    nn_dnnl_conv_free(&l->dnnl);
}

/* After a conv pass: a layer whose oneDNN call failed goes back to the reference code. */
static void s_conv_check(layer_t *l, s_pass_t *job) {
    if (!atomic_load(&job->dnnl_failed)) return;
    log_warn("conv %s: a oneDNN call failed: back to im2col + OpenBLAS", l->name);
    nn_dnnl_conv_free(&l->dnnl);
}

int net_forward(net_t *net, const float *x, int n, int train) {
    if (n < 1 || n > net->batch_cap || !x) return -EINVAL;
    net->x = x;
    net->batch_n = n;
    net->train = train;
    rng_t r;
    if (train) { rng_seed(&r, net->dropout_seed); net->dropout_seed = rng_u64(&r); }
    for (int li = 0; li < net->n_layers; li++) {
        layer_t *l = &net->layers[li];
        const float *in = net_layer_input(net, l);
        const size_t sz = (size_t)n * l->size;
        s_pass_t job = {net, l, n, 0};
        switch (l->kind) {
        case LAYER_CONV:
            s_conv_prepare(net, l, n);
            l->cols_n = l->dnnl ? 0 : n; /* the reference path forms every patch */
            nn_par_run(net->par, s_forward_part, &job);
            if (atomic_load(&job.dnnl_failed)) l->cols_n = 0;
            s_conv_check(l, &job);
            break;
        case LAYER_FC: case LAYER_RELU: case LAYER_TANH: case LAYER_MAXPOOL:
        case LAYER_AVGPOOL: case LAYER_FLATTEN: case LAYER_ADD:
            nn_par_run(net->par, s_forward_part, &job);
            break;
        case LAYER_DROPOUT:
            if (train && l->p > 0.0f) { /* one random stream, in order: serial */
                const float keep = 1.0f - l->p, scale = 1.0f / keep;
                for (size_t j = 0; j < sz; j++) {
                    l->mask[j] = rng_uniform(&r) < keep ? scale : 0.0f;
                    l->y[j] = in[j] * l->mask[j];
                }
            } else {
                nn_par_run(net->par, s_forward_part, &job);
            }
            break;
        case LAYER_BATCHNORM: s_bn_forward(net, l, in, n); break;
        case LAYER_SOFTMAX_XENT: break; /* logits are its input */
        default: return -EINVAL;
        }
    }
    return 0;
}

const float *net_logits(const net_t *net) {
    return net_layer_input(net, &net->layers[net->n_layers - 1]);
}

const float *net_probs(net_t *net) {
    layer_t *l = &net->layers[net->n_layers - 1];
    s_softmax(l, net_logits(net), net->batch_n);
    return l->probs;
}

float net_loss(net_t *net, const int *labels, const float *soft, int *n_correct) {
    layer_t *l = &net->layers[net->n_layers - 1];
    const int n = net->batch_n, K = l->c;
    const float *z = net_logits(net);
    s_softmax(l, z, n);
    double loss = 0.0;
    int hits = 0;
    for (int i = 0; i < n; i++) {
        const float *pi = l->probs + (size_t)i * K;
        int arg = 0;
        for (int k = 1; k < K; k++) if (pi[k] > pi[arg]) arg = k;
        if (labels) {
            const int y = labels[i];
            /* Data files are validated when read (data.c); a label out of
             * range here is a programmer error. */
            assert(y >= 0 && y < K);
            loss -= log((double)pi[y] + 1e-30);
            hits += arg == labels[i];
        } else {
            const float *t = soft + (size_t)i * K;
            for (int k = 0; k < K; k++) if (t[k] > 0.0f) loss -= t[k] * log((double)pi[k] + 1e-30);
        }
    }
    if (n_correct) *n_correct = hits;
    return (float)(loss / n);
}

/* Does layer l's input gradient have other writers (fan-out: the input feeds
 * other layers too)? Then l must add into it. */
static int s_dx_adds(const net_t *net, const layer_t *l) {
    int users = 0;
    for (int j = 0; j < net->n_layers; j++) {
        const layer_t *u = &net->layers[j];
        users += u->in == l->in;
        users += u->kind == LAYER_ADD && u->in2 == l->in;
    }
    return users > 1;
}

/* Zero every layer's dy for the examples of one part. */
static void s_zero_dy_part(void *arg, int part, int n_parts) {
    s_pass_t *job = arg;
    int i0, i1;
    nn_par_range(job->n, part, n_parts, &i0, &i1);
    for (int li = 0; li < job->net->n_layers - 1; li++) {
        layer_t *l = &job->net->layers[li];
        memset(l->dy + (size_t)i0 * l->size, 0, (size_t)(i1 - i0) * l->size * sizeof(float));
    }
}

/* Backward for one part (every kind but batch norm): the input gradient of
 * its examples; fc: its rows of the weight gradient; conv: its examples'
 * share of the weight gradient, into the layer's own arrays (part 0) or
 * the net's scratch (the others), added up by net_backward. */
static void s_backward_part(void *arg, int part, int n_parts) {
    s_pass_t *job = arg;
    net_t *net = job->net;
    layer_t *l = job->l;
    const int n = job->n;
    int i0, i1;
    nn_par_range(n, part, n_parts, &i0, &i1);
    const float *in = net_layer_input(net, l);
    float *dx = s_input_grad(net, l);
    const size_t j0 = (size_t)i0 * l->size, j1 = (size_t)i1 * l->size;
    switch (l->kind) {
    case LAYER_FC: s_fc_backward(net, l, in, n, part, n_parts); break;
    case LAYER_CONV: {
        float *dw = l->dweight, *db = l->dbias;
        if (part > 0) {
            dw = net->par_scratch + (size_t)(part - 1) * net->par_scratch_stride;
            db = l->dbias ? dw + l->n_w : NULL;
        }
        if (l->dnnl) {
            const size_t in_size = (size_t)l->in_c * l->in_h * l->in_w;
            if (i1 <= i0) {
                memset(dw, 0, l->n_w * sizeof(float));
                if (db) memset(db, 0, l->n_b * sizeof(float));
                break;
            }
            if (nn_dnnl_conv_backward(l->dnnl, part, i1 - i0, in + (size_t)i0 * in_size, l->weight,
                                      l->dy + (size_t)i0 * l->size, dx ? dx + (size_t)i0 * in_size : NULL, dw, db) == 0)
                break;
            atomic_store(&job->dnnl_failed, 1);
            /* The reference adds into dx; a failed oneDNN call may have written its slice. Only this layer
             * writes it when oneDNN overwrites (one consumer), and net_backward zeroed it. */
            if (dx && !s_dx_adds(net, l)) memset(dx + (size_t)i0 * in_size, 0, (i1 - i0) * in_size * sizeof(float));
        }
        s_conv_backward(net, l, n, i0, i1, dw, db, in, l->cols_n != n);
        break;
    }
    case LAYER_RELU:
        if (dx) for (size_t j = j0; j < j1; j++) dx[j] += in[j] > 0.0f ? l->dy[j] : 0.0f;
        break;
    case LAYER_TANH:
        if (dx) for (size_t j = j0; j < j1; j++) dx[j] += l->dy[j] * (1.0f - l->y[j] * l->y[j]);
        break;
    case LAYER_MAXPOOL: if (dx) s_maxpool_backward(l, dx, i0, i1); break;
    case LAYER_AVGPOOL: if (dx) s_avgpool(l, NULL, dx, i0, i1, 1); break;
    case LAYER_FLATTEN: if (dx) for (size_t j = j0; j < j1; j++) dx[j] += l->dy[j]; break;
    case LAYER_DROPOUT: if (dx) for (size_t j = j0; j < j1; j++) dx[j] += l->dy[j] * l->mask[j]; break;
    case LAYER_ADD: {
        float *dx2 = l->in2 < 0 ? NULL : net->layers[l->in2].dy;
        if (dx) for (size_t j = j0; j < j1; j++) dx[j] += l->dy[j];
        if (dx2) for (size_t j = j0; j < j1; j++) dx2[j] += l->dy[j];
        break;
    }
    default: break;
    }
}

float net_backward(net_t *net, const int *labels, const float *soft, int *n_correct) {
    const int n = net->batch_n;
    float loss = net_loss(net, labels, soft, n_correct);
    layer_t *ll = &net->layers[net->n_layers - 1];
    const int K = ll->c;
    memset(net->grads, 0, net->n_params * sizeof(float));
    s_pass_t zero = {net, NULL, n, 0};
    nn_par_run(net->par, s_zero_dy_part, &zero);
    /* d(mean loss)/d logits = (p - t) / n, written into the logits' producer. */
    float *dz = s_input_grad(net, ll);
    if (dz) {
        const float inv_n = 1.0f / (float)n;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < K; k++) {
                float t = labels ? (float)(labels[i] == k) : soft[(size_t)i * K + k];
                dz[(size_t)i * K + k] = (ll->probs[(size_t)i * K + k] - t) * inv_n;
            }
    }
    const int n_parts = nn_par_threads(net->par);
    for (int li = net->n_layers - 2; li >= 0; li--) {
        layer_t *l = &net->layers[li];
        s_pass_t job = {net, l, n, 0};
        if (l->kind == LAYER_BATCHNORM) {
            s_bn_backward(net, l, n);
            continue;
        }
        if (l->kind == LAYER_CONV) s_conv_prepare(net, l, n);
        nn_par_run(net->par, s_backward_part, &job);
        if (l->kind == LAYER_CONV) s_conv_check(l, &job);
        if (l->kind == LAYER_CONV)
            for (int p = 1; p < n_parts; p++) {
                /* dW += part p's share; the bias follows the weights in the scratch. */
                const float *dw = net->par_scratch + (size_t)(p - 1) * net->par_scratch_stride;
                for (size_t j = 0; j < l->n_w; j++) l->dweight[j] += dw[j];
                if (l->dbias)
                    for (size_t j = 0; j < l->n_b; j++) l->dbias[j] += dw[l->n_w + j];
            }
    }
    return loss;
}

int net_set_threads(net_t *net, int n_threads) {
    if (!net || n_threads < 1) return -EINVAL;
    if (n_threads == nn_par_threads(net->par)) return 0;
    nn_par_free(&net->par);
    free(net->par_scratch);
    net->par_scratch = NULL;
    net->par_scratch_stride = 0;
    if (n_threads == 1) return 0;
    size_t stride = 0;
    for (int li = 0; li < net->n_layers; li++) {
        const layer_t *l = &net->layers[li];
        if (l->kind == LAYER_CONV && l->n_w + l->n_b > stride) stride = l->n_w + l->n_b;
    }
    if (stride && !(net->par_scratch = malloc(stride * (size_t)(n_threads - 1) * sizeof(float)))) return -ENOMEM;
    net->par_scratch_stride = stride;
    if (!(net->par = nn_par_new(n_threads))) {
        free(net->par_scratch);
        net->par_scratch = NULL;
        net->par_scratch_stride = 0;
        return -ENOMEM;
    }
    return 0;
}

int net_threads(const net_t *net) { return net ? nn_par_threads(net->par) : 1; }

void net_evaluate(net_t *net, const float *x, const int *labels, int n, double *loss, double *acc) {
    double sl = 0.0;
    long hits = 0;
    for (int s = 0; s < n; s += net->batch_cap) {
        int m = n - s < net->batch_cap ? n - s : net->batch_cap;
        int h = 0;
        net_forward(net, x + (size_t)s * net->in_size, m, 0);
        sl += (double)net_loss(net, labels + s, NULL, &h) * m;
        hits += h;
    }
    if (loss) *loss = n ? sl / n : 0.0;
    if (acc) *acc = n ? (double)hits / n : 0.0;
}

/* ---- conv engines ----------------------------------------------------------- */

const char *nn_conv_engine_name(nn_conv_engine_t engine) {
    switch (engine) {
    case NN_CONV_ENGINE_BLAS: return "blas";
    case NN_CONV_ENGINE_ONEDNN: return "onednn";
    case NN_CONV_ENGINE_AUTO: return "auto";
    default: return NULL;
    }
}

int nn_conv_engine_parse(const char *s, nn_conv_engine_t *out) {
    if (!s || !out) return -EINVAL;
    for (int e = 0; e < NN_CONV_ENGINE_COUNT; e++)
        if (strcmp(s, nn_conv_engine_name((nn_conv_engine_t)e)) == 0) {
            *out = (nn_conv_engine_t)e;
            return 0;
        }
    return -EINVAL;
}

/* The rule, from bench_nn --engines on every conv shape of models/ (bench/RESULTS.md, "oneDNN conv engine"):
 * oneDNN's forward+backward was mostly 1.0-3.5x faster for kernels of 3x3 and more with 3 or more input
 * channels, and slower (0.1-1.05x) for one input channel (its weight gradient has no channel to vectorize over)
 * and for 1x1 kernels (a plain matrix product, where sgemm is at its best and oneDNN adds layout conversions). */
nn_conv_engine_t nn_conv_engine_pick(const layer_t *l) {
    if (l && l->kind == LAYER_CONV && l->k >= 3 && l->in_c >= 3) return NN_CONV_ENGINE_ONEDNN;
    return NN_CONV_ENGINE_BLAS;
}

int net_conv_onednn_layers(const net_t *net) {
    int n = 0;
    for (int li = 0; net && li < net->n_layers; li++) n += net->layers[li].dnnl != NULL;
    return n;
}

int net_set_conv_engine(net_t *net, nn_conv_engine_t engine, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (!net || (int)engine < 0 || engine >= NN_CONV_ENGINE_COUNT) return -EINVAL;
    for (int li = 0; li < net->n_layers; li++) nn_dnnl_conv_free(&net->layers[li].dnnl);
    if (engine == NN_CONV_ENGINE_BLAS) return 0;
    int wanted = 0;
    for (int li = 0; li < net->n_layers; li++) {
        const layer_t *l = &net->layers[li];
        wanted += l->kind == LAYER_CONV &&
                  (engine == NN_CONV_ENGINE_ONEDNN || nn_conv_engine_pick(l) == NN_CONV_ENGINE_ONEDNN);
    }
    if (!wanted) return 0;
    char why[200];
    int probe = nn_dnnl_probe(why, sizeof why);
    if (probe < 0) {
        /* a wrong convolution is a fault to report, not a machine to work around */
        if (err && err_len) snprintf(err, err_len, "oneDNN is broken here: %s", why);
        return probe;
    }
    if (!probe) {
        if (engine == NN_CONV_ENGINE_ONEDNN) {
            if (err && err_len) snprintf(err, err_len, "oneDNN cannot run here: %s", why);
            return -ENOTSUP;
        }
        log_warn("conv engine auto: oneDNN cannot run here (%s); im2col + OpenBLAS for every conv layer", why);
        return 0;
    }
    for (int li = 0; li < net->n_layers; li++) {
        layer_t *l = &net->layers[li];
        if (l->kind != LAYER_CONV) continue;
        if (engine == NN_CONV_ENGINE_AUTO && nn_conv_engine_pick(l) != NN_CONV_ENGINE_ONEDNN) continue;
        char e[200];
        if (!(l->dnnl = nn_dnnl_conv_new(l, l->in >= 0 && s_dx_adds(net, l), e, sizeof e))) {
            if (engine == NN_CONV_ENGINE_ONEDNN) {
                if (err && err_len) snprintf(err, err_len, "conv %s: %s", l->name, e);
                for (int j = 0; j < net->n_layers; j++) nn_dnnl_conv_free(&net->layers[j].dnnl);
                return -ENOTSUP;
            }
            log_warn("conv %s: %s; im2col + OpenBLAS for it", l->name, e);
            continue;
        }
        l->cols_n = 0;
        log_info("conv %s: oneDNN (%s)", l->name, nn_dnnl_conv_impl(l->dnnl));
    }
    return 0;
}

/* im2col of one part's examples. */
static void s_patches_part(void *arg, int part, int n_parts) {
    s_pass_t *job = arg;
    int i0, i1;
    nn_par_range(job->n, part, n_parts, &i0, &i1);
    const int B = s_conv_block(job->l);
    for (int b0 = i0; b0 < i1; b0 += B) s_im2col(job->l, net_layer_input(job->net, job->l), job->n, b0, b0 + B < i1 ? b0 + B : i1);
}

int net_conv_patches(net_t *net, layer_t *l) {
    if (!net || !l || l->kind != LAYER_CONV || net->batch_n < 1) return -EINVAL;
    if (l->cols_n == net->batch_n) return 0;
    s_pass_t job = {net, l, net->batch_n, 0};
    nn_par_run(net->par, s_patches_part, &job);
    l->cols_n = net->batch_n;
    return 0;
}
