/* common/nn/nn.c — forward and backward passes of every layer kind (see nn.h
 * for the layouts). float32, row-major, NCHW. Dense work goes through
 * OpenBLAS sgemm; each call states its math and layout.
 */
#include "common/nn/nn.h"

#include <assert.h>
#include <cblas.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "common/base/rng.h"

const float *net_layer_input(const net_t *net, const layer_t *l) {
    return l->in < 0 ? net->x : net->layers[l->in].y;
}

static float *s_input_grad(net_t *net, const layer_t *l) {
    return l->in < 0 ? NULL : net->layers[l->in].dy;
}

/* ---- convolution -------------------------------------------------------- */

/* cols (C*k*k, n*oh*ow): row (c, ky, kx), column (i, oy, ox) holds
 * x[i][c][oy*s - pad + ky][ox*s - pad + kx], zero outside the image. Rows
 * are built a whole output row at a time: with stride 1 each output row is
 * one contiguous copy of an input row segment between two zero fills. */
static void s_im2col(const layer_t *l, const float *x, int n) {
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
                for (int i = 0; i < n; i++) {
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

/* dx += col2im(dcols): the adjoint of s_im2col. */
static void s_col2im_add(const layer_t *l, float *dx, int n) {
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
                for (int i = 0; i < n; i++) {
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

static void s_conv_forward(layer_t *l, const float *x, int n) {
    const int P = l->h * l->w, K = l->in_c * l->k * l->k, O = l->out;
    const int R = n * P;
    s_im2col(l, x, n);
    /* tmp (O, R) = W (O, K) * cols (K, R). */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, O, R, K, 1.0f, l->weight, K, l->cols, R, 0.0f, l->tmp, R);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < O; o++) {
            const float bo = l->bias ? l->bias[o] : 0.0f;
            float *yo = l->y + ((size_t)i * O + o) * P;
            const float *t = l->tmp + (size_t)o * R + (size_t)i * P;
            for (int p = 0; p < P; p++) yo[p] = t[p] + bo;
        }
}

static void s_conv_backward(net_t *net, layer_t *l, int n) {
    const int P = l->h * l->w, K = l->in_c * l->k * l->k, O = l->out;
    const int R = n * P;
    /* tmp (O, R) <- dy (n, O, P): block copies. */
    for (int i = 0; i < n; i++)
        for (int o = 0; o < O; o++)
            memcpy(l->tmp + (size_t)o * R + (size_t)i * P, l->dy + ((size_t)i * O + o) * P, (size_t)P * sizeof(float));
    /* dW (O, K) = tmp (O, R) * cols^T (R, K). */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, O, K, R, 1.0f, l->tmp, R, l->cols, R, 0.0f, l->dweight, K);
    if (l->dbias)
        for (int o = 0; o < O; o++) {
            const float *t = l->tmp + (size_t)o * R;
            float acc = 0.0f;
            for (int r = 0; r < R; r++) acc += t[r];
            l->dbias[o] = acc;
        }
    float *dx = s_input_grad(net, l);
    if (!dx) return;
    /* dcols (K, R) = W^T (K, O) * tmp (O, R). */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, R, O, 1.0f, l->weight, K, l->tmp, R, 0.0f, l->dcols, R);
    s_col2im_add(l, dx, n);
}

/* ---- fully connected ---------------------------------------------------- */

static void s_fc_forward(layer_t *l, const float *x, int n) {
    const int in = l->in_c * l->in_h * l->in_w, O = l->out;
    /* y (n, O) = x (n, in) * W^T; W is (O, in). */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, O, in, 1.0f, x, in, l->weight, in, 0.0f, l->y, O);
    if (l->bias)
        for (int i = 0; i < n; i++)
            for (int o = 0; o < O; o++) l->y[(size_t)i * O + o] += l->bias[o];
}

static void s_fc_backward(net_t *net, layer_t *l, const float *x, int n) {
    const int in = l->in_c * l->in_h * l->in_w, O = l->out;
    /* dW (O, in) = dy^T (O, n) * x (n, in). */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, in, n, 1.0f, l->dy, O, x, in, 0.0f, l->dweight, in);
    if (l->dbias) {
        memset(l->dbias, 0, (size_t)O * sizeof(float));
        for (int i = 0; i < n; i++)
            for (int o = 0; o < O; o++) l->dbias[o] += l->dy[(size_t)i * O + o];
    }
    float *dx = s_input_grad(net, l);
    /* dx (n, in) += dy (n, O) * W (O, in). */
    if (dx) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, O, 1.0f, l->dy, O, l->weight, in, 1.0f, dx, in);
}

/* ---- pooling ------------------------------------------------------------ */

static void s_maxpool_forward(layer_t *l, const float *x, int n) {
    const int C = l->c, H = l->in_h, W = l->in_w, OH = l->h, OW = l->w;
    const int k = l->k, s = l->stride, pad = l->pad;
    for (int i = 0; i < n; i++)
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

static void s_maxpool_backward(layer_t *l, float *dx, int n) {
    const int C = l->c, HW = l->in_h * l->in_w, OHW = l->h * l->w;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < C; c++) {
            float *dxc = dx + ((size_t)i * C + c) * HW;
            size_t ob = ((size_t)i * C + c) * OHW;
            for (int q = 0; q < OHW; q++)
                if (l->argmax[ob + q] >= 0) dxc[l->argmax[ob + q]] += l->dy[ob + q];
        }
}

/* Average pooling divides by the full window k*k (padding counts as zeros);
 * global pooling divides by H*W. */
static void s_avgpool(layer_t *l, const float *x, float *dx, int n, int backward) {
    const int C = l->c, H = l->in_h, W = l->in_w, OH = l->h, OW = l->w;
    const int kh = l->global ? H : l->k, kw = l->global ? W : l->k;
    const int s = l->global ? 1 : l->stride, pad = l->global ? 0 : l->pad;
    const float inv = 1.0f / (float)(kh * kw);
    for (int i = 0; i < n; i++)
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
        switch (l->kind) {
        case LAYER_FC: s_fc_forward(l, in, n); break;
        case LAYER_CONV: s_conv_forward(l, in, n); break;
        case LAYER_RELU:
            for (size_t j = 0; j < sz; j++) l->y[j] = in[j] > 0.0f ? in[j] : 0.0f;
            break;
        case LAYER_TANH:
            for (size_t j = 0; j < sz; j++) l->y[j] = tanhf(in[j]);
            break;
        case LAYER_MAXPOOL: s_maxpool_forward(l, in, n); break;
        case LAYER_AVGPOOL: s_avgpool(l, in, NULL, n, 0); break;
        case LAYER_FLATTEN: memcpy(l->y, in, sz * sizeof(float)); break;
        case LAYER_DROPOUT:
            if (train && l->p > 0.0f) {
                const float keep = 1.0f - l->p, scale = 1.0f / keep;
                for (size_t j = 0; j < sz; j++) {
                    l->mask[j] = rng_uniform(&r) < keep ? scale : 0.0f;
                    l->y[j] = in[j] * l->mask[j];
                }
            } else {
                for (size_t j = 0; j < sz; j++) l->mask[j] = 1.0f;
                memcpy(l->y, in, sz * sizeof(float));
            }
            break;
        case LAYER_BATCHNORM: s_bn_forward(net, l, in, n); break;
        case LAYER_ADD: {
            const float *in2 = l->in2 < 0 ? net->x : net->layers[l->in2].y;
            for (size_t j = 0; j < sz; j++) l->y[j] = in[j] + in2[j];
            break;
        }
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

float net_backward(net_t *net, const int *labels, const float *soft, int *n_correct) {
    const int n = net->batch_n;
    float loss = net_loss(net, labels, soft, n_correct);
    layer_t *ll = &net->layers[net->n_layers - 1];
    const int K = ll->c;
    memset(net->grads, 0, net->n_params * sizeof(float));
    for (int li = 0; li < net->n_layers - 1; li++)
        memset(net->layers[li].dy, 0, (size_t)n * net->layers[li].size * sizeof(float));
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
    for (int li = net->n_layers - 2; li >= 0; li--) {
        layer_t *l = &net->layers[li];
        const float *in = net_layer_input(net, l);
        float *dx = s_input_grad(net, l);
        const size_t sz = (size_t)n * l->size;
        switch (l->kind) {
        case LAYER_FC: s_fc_backward(net, l, in, n); break;
        case LAYER_CONV: s_conv_backward(net, l, n); break;
        case LAYER_RELU:
            if (dx) for (size_t j = 0; j < sz; j++) dx[j] += in[j] > 0.0f ? l->dy[j] : 0.0f;
            break;
        case LAYER_TANH:
            if (dx) for (size_t j = 0; j < sz; j++) dx[j] += l->dy[j] * (1.0f - l->y[j] * l->y[j]);
            break;
        case LAYER_MAXPOOL: if (dx) s_maxpool_backward(l, dx, n); break;
        case LAYER_AVGPOOL: if (dx) s_avgpool(l, NULL, dx, n, 1); break;
        case LAYER_FLATTEN: if (dx) for (size_t j = 0; j < sz; j++) dx[j] += l->dy[j]; break;
        case LAYER_DROPOUT: if (dx) for (size_t j = 0; j < sz; j++) dx[j] += l->dy[j] * l->mask[j]; break;
        case LAYER_BATCHNORM: s_bn_backward(net, l, n); break;
        case LAYER_ADD: {
            float *dx2 = l->in2 < 0 ? NULL : net->layers[l->in2].dy;
            if (dx) for (size_t j = 0; j < sz; j++) dx[j] += l->dy[j];
            if (dx2) for (size_t j = 0; j < sz; j++) dx2[j] += l->dy[j];
            break;
        }
        default: break;
        }
    }
    return loss;
}

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
