/* common/backend/backend.cuda_kernels.cu — the CUDA backend's own kernels: the
 * operations cuDNN and cuBLAS do not cover with nn.c's exact semantics
 * (bias, fan-in accumulation, dropout masks, max pooling with nn.c's argmax
 * rule, batch normalization, softmax cross-entropy) and the pieces of the
 * K-FAC factor statistics around the cuBLAS SYRKs (KFC patches, spatial
 * means, rank-1 splits of doubly-factored layers, batch-norm 2x2 blocks,
 * triangle mirroring). See backend_cuda.h for each launcher's contract; each
 * kernel's CPU twin is named in its comment, and tests/backend/test_backend.c
 * compares the two.
 *
 * Conventions: float32 row-major NCHW as nn.h; every index product in 64
 * bits; elementwise kernels are grid-stride loops of BK_THREADS threads;
 * reductions use fixed-size blocks and a fixed combination order, so every
 * result is deterministic run to run. Where nn.c's float arithmetic is
 * short, the __f*_rn intrinsics keep nvcc from contracting a*b + c into an
 * FMA, so those results match the CPU bit for bit given equal inputs.
 */
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "common/backend/backend_cuda.h"

#define BK_THREADS 256     /* elementwise kernels */
#define BK_RED 256         /* reduction blocks (power of two) */
#define BK_RANK1 128       /* rank-1 power iteration: threads per example (power of two) */
#define BK_MAX_BLOCKS (1 << 18)

static unsigned s_blocks(long long count) {
    long long b = (count + BK_THREADS - 1) / BK_THREADS;
    if (b < 1) b = 1;
    if (b > BK_MAX_BLOCKS) b = BK_MAX_BLOCKS;
    return (unsigned)b;
}

#define GRID_STRIDE(e, total) \
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < (total); \
         e += (long long)gridDim.x * blockDim.x)

/* ---- block reductions (blockDim.x a power of two, every thread calls) ---- */

/* Sum of each thread's v; every thread receives the total. red: blockDim.x doubles. */
__device__ static double s_block_sum(double v, double *red) {
    const int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (tid < w) red[tid] += red[tid + w];
        __syncthreads();
    }
    double r = red[0];
    __syncthreads();
    return r;
}

/* Two sums at once. */
__device__ static void s_block_sum2(double *a, double *b, double *ra, double *rb) {
    const int tid = threadIdx.x;
    ra[tid] = *a;
    rb[tid] = *b;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (tid < w) {
            ra[tid] += ra[tid + w];
            rb[tid] += rb[tid + w];
        }
        __syncthreads();
    }
    *a = ra[0];
    *b = rb[0];
    __syncthreads();
}

/* Largest val over the block, ties to the smallest idx; every thread
 * receives the winner. */
__device__ static void s_block_argmax(double *val, int *idx, double *rv, int *ri) {
    const int tid = threadIdx.x;
    rv[tid] = *val;
    ri[tid] = *idx;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (tid < w) {
            double ov = rv[tid + w];
            int oi = ri[tid + w];
            if (ov > rv[tid] || (ov == rv[tid] && oi < ri[tid])) {
                rv[tid] = ov;
                ri[tid] = oi;
            }
        }
        __syncthreads();
    }
    *val = rv[0];
    *idx = ri[0];
    __syncthreads();
}

/* ---- elementwise ----------------------------------------------------------- */

/* CPU twin: the bias loops of s_fc_forward / s_conv_forward. */
__global__ static void k_bias_add(float *y, const float *b, long long total, int O, int P) {
    GRID_STRIDE(e, total) {
        int o = (int)((e / P) % O);
        y[e] = __fadd_rn(y[e], b[o]);
    }
}

/* CPU twin: the dbias loops of s_fc_backward / s_conv_backward. One block per o. */
__global__ static void k_bias_grad(const float *dy, float *db, int n, int O, int P) {
    __shared__ double red[BK_RED];
    const int o = blockIdx.x;
    const long long m = (long long)n * P;
    double acc = 0.0;
    for (long long r = threadIdx.x; r < m; r += blockDim.x) {
        long long i = r / P, p = r % P;
        acc += dy[((size_t)i * O + o) * P + p];
    }
    acc = s_block_sum(acc, red);
    if (threadIdx.x == 0) db[o] = (float)acc;
}

__global__ static void k_add(float *y, const float *a, const float *b, long long total) {
    GRID_STRIDE(e, total) y[e] = __fadd_rn(a[e], b[e]);
}

__global__ static void k_accumulate(float *dst, const float *src, long long total) {
    GRID_STRIDE(e, total) dst[e] = __fadd_rn(dst[e], src[e]);
}

__global__ static void k_mul(float *y, const float *x, const float *mask, long long total) {
    GRID_STRIDE(e, total) y[e] = __fmul_rn(x[e], mask[e]);
}

__global__ static void k_mul_acc(float *dx, const float *dy, const float *mask, long long total) {
    GRID_STRIDE(e, total) dx[e] = __fadd_rn(dx[e], __fmul_rn(dy[e], mask[e]));
}

/* ---- max pooling (CPU twin: s_maxpool_forward / s_maxpool_backward) -------- */

__global__ static void k_maxpool_fwd(const float *x, float *y, int32_t *am, long long total, int H, int W, int OH,
                                     int OW, int k, int s, int pad) {
    GRID_STRIDE(e, total) {
        const int ox = (int)(e % OW);
        const long long r = e / OW;
        const int oy = (int)(r % OH);
        const long long nc = r / OH;
        const float *xc = x + (size_t)nc * H * W;
        float best = -FLT_MAX;
        int arg = -1;
        for (int ky = 0; ky < k; ky++) {
            int iy = oy * s - pad + ky;
            if (iy < 0 || iy >= H) continue;
            for (int kx = 0; kx < k; kx++) {
                int ix = ox * s - pad + kx;
                if (ix < 0 || ix >= W) continue;
                float v = xc[iy * W + ix];
                if (arg < 0 || v > best) {
                    best = v;
                    arg = iy * W + ix;
                }
            }
        }
        y[e] = arg < 0 ? 0.0f : best;
        am[e] = arg;
    }
}

/* One thread per input element: visit the outputs whose window holds it,
 * in ascending output order, and add the dy of those that chose it. */
__global__ static void k_maxpool_bwd(const float *dy, const int32_t *am, float *dx, long long total, int H, int W,
                                     int OH, int OW, int k, int s, int pad) {
    GRID_STRIDE(e, total) {
        const int ix = (int)(e % W);
        const long long r = e / W;
        const int iy = (int)(r % H);
        const long long nc = r / H;
        const int target = iy * W + ix;
        /* output oy's window covers rows [oy*s - pad, oy*s - pad + k - 1] */
        int num = iy + pad - k + 1;
        int oy0 = num <= 0 ? 0 : (num + s - 1) / s;
        int oy1 = (iy + pad) / s;
        if (oy1 > OH - 1) oy1 = OH - 1;
        num = ix + pad - k + 1;
        int ox0 = num <= 0 ? 0 : (num + s - 1) / s;
        int ox1 = (ix + pad) / s;
        if (ox1 > OW - 1) ox1 = OW - 1;
        const int32_t *a = am + (size_t)nc * OH * OW;
        const float *d = dy + (size_t)nc * OH * OW;
        float acc = dx[e];
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                int q = oy * OW + ox;
                if (a[q] == target) acc = __fadd_rn(acc, d[q]);
            }
        dx[e] = acc;
    }
}

/* ---- batch normalization (CPU twin: s_bn_forward / s_bn_backward) ---------- */

enum { BN_SUM_X = 0, BN_SUM_SQDEV = 1, BN_SUM_DY_DYXHAT = 2 };

/* Block (c, split): partial sums over that split's share of channel c's
 * M = n*HW elements. mode BN_SUM_X: sum a; BN_SUM_SQDEV: sum (a - mu_c)^2;
 * BN_SUM_DY_DYXHAT: sum a and sum a*b. part[(c*S + split)*2 + {0,1}]. */
__global__ static void k_bn_partial(int mode, const float *a, const float *b, const double *mu, int C, int HW,
                                    long long M, int S, double *part) {
    __shared__ double ra[BK_RED], rb[BK_RED];
    const int c = blockIdx.x, sp = blockIdx.y;
    const long long chunk = (M + S - 1) / S;
    const long long e0 = (long long)sp * chunk;
    const long long e1 = e0 + chunk < M ? e0 + chunk : M;
    const double m = mode == BN_SUM_SQDEV ? mu[c] : 0.0;
    double sa = 0.0, sb = 0.0;
    for (long long e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
        const long long i = e / HW, q = e % HW;
        const size_t idx = ((size_t)i * C + c) * HW + q;
        const float va = a[idx];
        if (mode == BN_SUM_X) {
            sa += va;
        } else if (mode == BN_SUM_SQDEV) {
            double d = va - m;
            sa += d * d;
        } else {
            sa += va;
            sb += (double)va * b[idx];
        }
    }
    s_block_sum2(&sa, &sb, ra, rb);
    if (threadIdx.x == 0) {
        part[((size_t)c * S + sp) * 2] = sa;
        part[((size_t)c * S + sp) * 2 + 1] = sb;
    }
}

__global__ static void k_bn_mean(const double *part, int C, int S, double M, double *mu) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s1 = 0.0;
    for (int sp = 0; sp < S; sp++) s1 += part[((size_t)c * S + sp) * 2];
    mu[c] = s1 / M;
}

__global__ static void k_bn_var(const double *part, const double *mu, int C, int S, double M, float eps,
                                float momentum, float *run_mean, float *run_var, float *bmean, float *binvstd) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s2 = 0.0;
    for (int sp = 0; sp < S; sp++) s2 += part[((size_t)c * S + sp) * 2];
    const double var = s2 / M; /* biased: what the forward pass normalizes by */
    const float mean = (float)mu[c];
    const float invstd = (float)(1.0 / sqrt(var + (double)eps));
    const double unbiased = M > 1 ? s2 / (M - 1) : var;
    const float keep = __fsub_rn(1.0f, momentum);
    run_mean[c] = __fadd_rn(__fmul_rn(keep, run_mean[c]), __fmul_rn(momentum, mean));
    run_var[c] = __fadd_rn(__fmul_rn(keep, run_var[c]), __fmul_rn(momentum, (float)unbiased));
    bmean[c] = mean;
    binvstd[c] = invstd;
}

__global__ static void k_bn_running(const float *run_mean, const float *run_var, int C, float eps, float *bmean,
                                    float *binvstd) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    bmean[c] = run_mean[c];
    binvstd[c] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(run_var[c], eps)));
}

__global__ static void k_bn_normalize(const float *x, const float *gamma, const float *beta, const float *bmean,
                                      const float *binvstd, long long total, int C, int HW, float *xhat, float *y) {
    GRID_STRIDE(e, total) {
        const int c = (int)((e / HW) % C);
        const float xh = __fmul_rn(__fsub_rn(x[e], bmean[c]), binvstd[c]);
        xhat[e] = xh;
        y[e] = __fadd_rn(__fmul_rn(gamma[c], xh), beta[c]);
    }
}

/* dgamma, dbeta and the two channel sums the dx kernel needs. */
__global__ static void k_bn_bwd_final(const double *part, int C, int S, float *dgamma, float *dbeta,
                                      double *sums) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sdy = 0.0, sdyx = 0.0;
    for (int sp = 0; sp < S; sp++) {
        sdy += part[((size_t)c * S + sp) * 2];
        sdyx += part[((size_t)c * S + sp) * 2 + 1];
    }
    dgamma[c] = (float)sdyx;
    dbeta[c] = (float)sdy;
    sums[2 * c] = sdy;
    sums[2 * c + 1] = sdyx;
}

__global__ static void k_bn_bwd_dx(const float *dy, const float *xhat, const float *gamma, const float *binvstd,
                                   const double *sums, double M, long long total, int C, int HW, int train,
                                   float *dx) {
    GRID_STRIDE(e, total) {
        const int c = (int)((e / HW) % C);
        const float gis = __fmul_rn(gamma[c], binvstd[c]);
        float v;
        if (train) {
            const double sdy = sums[2 * c], sdyx = sums[2 * c + 1];
            const double t = (double)dy[e] - sdy / M - ((double)xhat[e] * sdyx) / M;
            v = (float)t;
        } else {
            v = dy[e];
        }
        dx[e] = __fadd_rn(dx[e], __fmul_rn(gis, v));
    }
}

/* ---- softmax cross-entropy (CPU twin: s_softmax, net_loss, net_backward) --- */

__global__ static void k_softmax(const float *z, float *probs, int n, int K) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float *zi = z + (size_t)i * K;
    float *pi = probs + (size_t)i * K;
    float m = zi[0];
    for (int k = 1; k < K; k++)
        if (zi[k] > m) m = zi[k];
    double s = 0.0;
    for (int k = 0; k < K; k++) {
        float e = expf(__fsub_rn(zi[k], m));
        pi[k] = e;
        s += e;
    }
    const float inv = (float)(1.0 / s);
    for (int k = 0; k < K; k++) pi[k] = __fmul_rn(pi[k], inv);
}

/* lg[i] = log(p[i, y] + 1e-30): the host subtracts them in example order. */
__global__ static void k_xent(const float *probs, const int *labels, int n, int K, float inv_n, float *dz,
                              double *lg, int *hit) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float *pi = probs + (size_t)i * K;
    const int lab = labels[i];
    const int y = (lab < 0 || lab >= K) ? 0 : lab; /* the host validates; never index out of range */
    lg[i] = log((double)pi[y] + 1e-30);
    int arg = 0;
    for (int k = 1; k < K; k++)
        if (pi[k] > pi[arg]) arg = k;
    hit[i] = arg == lab;
    if (dz) {
        float *d = dz + (size_t)i * K;
        for (int k = 0; k < K; k++) d[k] = __fmul_rn(__fsub_rn(pi[k], k == lab ? 1.0f : 0.0f), inv_n);
    }
}

/* ---- factor statistics (CPU twin: common/kfac/kfac_stats.c) ---------------------- */

/* CPU twin: s_im2col (nn.c), plus the homogeneous column. */
__global__ static void k_im2col(const float *x, float *cols, long long total, int C, int H, int W, int k, int s,
                                int pad, int OH, int OW, int ld) {
    const int Kc = C * k * k;
    GRID_STRIDE(e, total) {
        const int col = (int)(e % ld);
        const long long row = e / ld;
        if (col >= Kc) {
            cols[e] = 1.0f;
            continue;
        }
        const int kx = col % k, ky = (col / k) % k, c = col / (k * k);
        const int ox = (int)(row % OW);
        const long long r2 = row / OW;
        const int oy = (int)(r2 % OH);
        const long long i = r2 / OH;
        const int iy = oy * s - pad + ky, ix = ox * s - pad + kx;
        cols[e] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? x[(((size_t)i * C + c) * H + iy) * W + ix] : 0.0f;
    }
}

/* CPU twin: the per-example patch means of kfac_stats_conv_cm (AVG), reading the
 * patches straight from the input instead of materializing them. */
__global__ static void k_patch_means(const float *x, float *means, long long total, int C, int H, int W, int k,
                                     int s, int pad, int OH, int OW, int ld, float inv_p) {
    const int Kc = C * k * k;
    GRID_STRIDE(e, total) {
        const int col = (int)(e % ld);
        const long long i = e / ld;
        if (col >= Kc) {
            means[e] = 1.0f;
            continue;
        }
        const int kx = col % k, ky = (col / k) % k, c = col / (k * k);
        const float *xc = x + ((size_t)i * C + c) * H * W;
        float acc = 0.0f;
        for (int oy = 0; oy < OH; oy++) {
            const int iy = oy * s - pad + ky;
            if (iy < 0 || iy >= H) continue;
            for (int ox = 0; ox < OW; ox++) {
                const int ix = ox * s - pad + kx;
                if (ix >= 0 && ix < W) acc += xc[iy * W + ix];
            }
        }
        means[e] = acc * inv_p;
    }
}

__global__ static void k_augment(const float *a, float *out, long long total, int d) {
    GRID_STRIDE(e, total) {
        const int c = (int)(e % (d + 1));
        const long long r = e / (d + 1);
        out[e] = c == d ? 1.0f : a[(size_t)r * d + c];
    }
}

__global__ static void k_transpose_dy(const float *dy, float *dyt, long long total, int O, int P) {
    GRID_STRIDE(e, total) {
        const int o = (int)(e % O);
        const long long rp = e / O;
        const long long i = rp / P, t = rp % P;
        dyt[e] = dy[((size_t)i * O + o) * P + t];
    }
}

__global__ static void k_pos_sums(const float *dy, float *sums, long long total, int P) {
    GRID_STRIDE(e, total) {
        const float *d = dy + (size_t)e * P;
        float acc = 0.0f;
        for (int t = 0; t < P; t++) acc += d[t];
        sums[e] = acc;
    }
}

/* CPU twin: kfac_stats_rank1 (which takes the exact leading eigenpair with
 * LAPACK). One block per example; v, w (C) and u (T) live in work. */
__global__ static void k_rank1(const float *a, int C, int T, float *Km, float *Pm, int max_iter, double tol,
                               double *work) {
    __shared__ double red[BK_RANK1];
    __shared__ int redi[BK_RANK1];
    const int i = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    const float *x = a + (size_t)i * C * T; /* A[t][c] = x[c*T + t] */
    float *K = Km + (size_t)i * T, *P = Pm + (size_t)i * C;
    double *v = work + (size_t)i * (2 * (size_t)C + T), *w = v + C, *u = w + C;

    /* Start from the row of A (over channels) with the largest norm: it has a
     * non-zero component along the leading right singular vector unless A is 0. */
    double best = -1.0;
    int bt = 0;
    for (int t = tid; t < T; t += nt) {
        double s2 = 0.0;
        for (int c = 0; c < C; c++) {
            double e = x[(size_t)c * T + t];
            s2 += e * e;
        }
        if (s2 > best) {
            best = s2;
            bt = t;
        }
    }
    s_block_argmax(&best, &bt, red, redi);
    int zero = !(best > 0.0);
    if (!zero) {
        const double inv = 1.0 / sqrt(best);
        for (int c = tid; c < C; c += nt) v[c] = x[(size_t)c * T + bt] * inv;
        __syncthreads();
        for (int it = 0; it < max_iter; it++) {
            for (int t = tid; t < T; t += nt) { /* u = A v */
                double acc = 0.0;
                for (int c = 0; c < C; c++) acc += x[(size_t)c * T + t] * v[c];
                u[t] = acc;
            }
            __syncthreads();
            double loc = 0.0;
            for (int c = tid; c < C; c += nt) { /* w = A^T u */
                const float *xr = x + (size_t)c * T;
                double acc = 0.0;
                for (int t = 0; t < T; t++) acc += xr[t] * u[t];
                w[c] = acc;
                loc += acc * acc;
            }
            const double nrm2 = s_block_sum(loc, red);
            if (!(nrm2 > 0.0)) {
                zero = 1;
                break;
            }
            const double inv_n = 1.0 / sqrt(nrm2);
            double diff = 0.0;
            for (int c = tid; c < C; c += nt) { /* same c as above: own w[c] */
                const double nv = w[c] * inv_n, d = nv - v[c];
                diff += d * d;
                v[c] = nv;
            }
            diff = s_block_sum(diff, red); /* its barriers publish v */
            if (diff <= tol * tol) break;
        }
    }
    double sigma = 0.0;
    if (!zero) {
        double loc = 0.0;
        for (int t = tid; t < T; t += nt) {
            double acc = 0.0;
            for (int c = 0; c < C; c++) acc += x[(size_t)c * T + t] * v[c];
            u[t] = acc;
            loc += acc * acc;
        }
        const double s2 = s_block_sum(loc, red);
        sigma = sqrt(s2);
        zero = !(sigma > 0.0) || !isfinite(sigma);
    }
    if (zero) {
        for (int t = tid; t < T; t += nt) K[t] = 0.0f;
        for (int c = tid; c < C; c += nt) P[c] = 0.0f;
        return;
    }
    /* Sign: sum(psi) >= 0, ties broken by the (first) largest |psi_c| being positive. */
    double sum = 0.0, bigabs = 0.0;
    int bigc = C; /* C: none yet (ties go to the smallest index) */
    for (int c = tid; c < C; c += nt) {
        sum += v[c];
        if (fabs(v[c]) > bigabs) {
            bigabs = fabs(v[c]);
            bigc = c;
        }
    }
    sum = s_block_sum(sum, red);
    s_block_argmax(&bigabs, &bigc, red, redi);
    const double big = (bigc < C && bigabs > 0.0) ? v[bigc] : 0.0;
    const double sgn = (sum < 0.0 || (sum == 0.0 && big < 0.0)) ? -1.0 : 1.0;
    const double r = sgn * sqrt(sigma);
    for (int t = tid; t < T; t += nt) K[t] = (float)(r * (u[t] / sigma));
    for (int c = tid; c < C; c += nt) P[c] = (float)(r * v[c]);
}

/* CPU twin: kfac_stats_bn. Block per (example, channel). */
__global__ static void k_bn_factor_partial(const float *xhat, const float *dy, int C, int P, double g_scale,
                                           double *work) {
    __shared__ double ra[BK_RED], rb[BK_RED];
    const size_t b = blockIdx.x; /* i*C + c */
    const float *d = dy + b * P, *xh = xhat + b * P;
    double dg = 0.0, db = 0.0;
    for (int t = threadIdx.x; t < P; t += blockDim.x) {
        dg += (double)d[t] * xh[t];
        db += d[t];
    }
    s_block_sum2(&dg, &db, ra, rb);
    if (threadIdx.x == 0) {
        work[2 * b] = __dmul_rn(dg, g_scale);
        work[2 * b + 1] = __dmul_rn(db, g_scale);
    }
    (void)C;
}

__global__ static void k_bn_factor_final(const double *work, int n, int C, float *F) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double gg = 0.0, gb = 0.0, bb = 0.0;
    for (int i = 0; i < n; i++) {
        const double dg = work[2 * ((size_t)i * C + c)], db = work[2 * ((size_t)i * C + c) + 1];
        gg = __dadd_rn(gg, __dmul_rn(dg, dg));
        gb = __dadd_rn(gb, __dmul_rn(dg, db));
        bb = __dadd_rn(bb, __dmul_rn(db, db));
    }
    F[3 * c + 0] = (float)(gg / n);
    F[3 * c + 1] = (float)(gb / n);
    F[3 * c + 2] = (float)(bb / n);
}

/* CPU twin: kfac_linalg_symmetrize_upper (+ s_input_factor's A[d][d] = 1). */
__global__ static void k_symmetrize(float *A, int d, int corner) {
    const long long total = (long long)d * d;
    GRID_STRIDE(e, total) {
        const int r = (int)(e / d), c = (int)(e % d);
        if (c < r) A[e] = A[(size_t)c * d + r];
        else if (corner && r == d - 1 && c == d - 1) A[e] = 1.0f;
    }
}

/* ---- launchers ------------------------------------------------------------------ */

extern "C" {

cudaError_t backend_cuda_k_probe(void) {
    cudaFuncAttributes attr;
    return cudaFuncGetAttributes(&attr, (const void *)k_add);
}

cudaError_t backend_cuda_k_bias_add(float *y, const float *b, int n, int O, int P, cudaStream_t stream) {
    const long long total = (long long)n * O * P;
    k_bias_add<<<s_blocks(total), BK_THREADS, 0, stream>>>(y, b, total, O, P);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_bias_grad(const float *dy, float *db, int n, int O, int P, cudaStream_t stream) {
    k_bias_grad<<<(unsigned)O, BK_RED, 0, stream>>>(dy, db, n, O, P);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_add(float *y, const float *a, const float *b, size_t count, cudaStream_t stream) {
    k_add<<<s_blocks((long long)count), BK_THREADS, 0, stream>>>(y, a, b, (long long)count);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_accumulate(float *dst, const float *src, size_t count, cudaStream_t stream) {
    k_accumulate<<<s_blocks((long long)count), BK_THREADS, 0, stream>>>(dst, src, (long long)count);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_mul(float *y, const float *x, const float *mask, size_t count, cudaStream_t stream) {
    k_mul<<<s_blocks((long long)count), BK_THREADS, 0, stream>>>(y, x, mask, (long long)count);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_mul_acc(float *dx, const float *dy, const float *mask, size_t count,
                                   cudaStream_t stream) {
    k_mul_acc<<<s_blocks((long long)count), BK_THREADS, 0, stream>>>(dx, dy, mask, (long long)count);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_maxpool_fwd(const float *x, float *y, int32_t *argmax, int n, int C, int H, int W,
                                       int OH, int OW, int k, int s, int pad, cudaStream_t stream) {
    const long long total = (long long)n * C * OH * OW;
    k_maxpool_fwd<<<s_blocks(total), BK_THREADS, 0, stream>>>(x, y, argmax, total, H, W, OH, OW, k, s, pad);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_maxpool_bwd(const float *dy, const int32_t *argmax, float *dx, int n, int C, int H,
                                       int W, int OH, int OW, int k, int s, int pad, cudaStream_t stream) {
    const long long total = (long long)n * C * H * W;
    k_maxpool_bwd<<<s_blocks(total), BK_THREADS, 0, stream>>>(dy, argmax, dx, total, H, W, OH, OW, k, s, pad);
    return cudaGetLastError();
}

size_t backend_cuda_bn_work_len(int C, int splits) {
    /* partials (C*splits*2) + mean (C) + backward sums (2C) */
    return (size_t)C * splits * 2 + (size_t)C + 2 * (size_t)C;
}

int backend_cuda_bn_splits(int n, int C, int HW) {
    const long long M = (long long)n * HW;
    long long s = (264 + C - 1) / C;      /* about two blocks per SM on a 132-SM GPU */
    if (s > 64) s = 64;
    if (s > M / 2048) s = M / 2048;       /* at least ~2048 elements per block */
    if (s < 1) s = 1;
    return (int)s;
}

cudaError_t backend_cuda_k_bn_batch_stats(const float *x, int n, int C, int HW, int splits, float eps,
                                          float momentum, float *run_mean, float *run_var, float *bmean,
                                          float *binvstd, double *work, cudaStream_t stream) {
    const long long M = (long long)n * HW;
    double *part = work, *mu = work + (size_t)C * splits * 2;
    const dim3 grid((unsigned)C, (unsigned)splits);
    const unsigned cb = (unsigned)((C + 127) / 128);
    k_bn_partial<<<grid, BK_RED, 0, stream>>>(BN_SUM_X, x, NULL, NULL, C, HW, M, splits, part);
    k_bn_mean<<<cb, 128, 0, stream>>>(part, C, splits, (double)M, mu);
    k_bn_partial<<<grid, BK_RED, 0, stream>>>(BN_SUM_SQDEV, x, NULL, mu, C, HW, M, splits, part);
    k_bn_var<<<cb, 128, 0, stream>>>(part, mu, C, splits, (double)M, eps, momentum, run_mean, run_var, bmean,
                                      binvstd);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_bn_running_stats(const float *run_mean, const float *run_var, int C, float eps,
                                            float *bmean, float *binvstd, cudaStream_t stream) {
    k_bn_running<<<(unsigned)((C + 127) / 128), 128, 0, stream>>>(run_mean, run_var, C, eps, bmean, binvstd);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_bn_normalize(const float *x, const float *gamma, const float *beta,
                                        const float *bmean, const float *binvstd, int n, int C, int HW,
                                        float *xhat, float *y, cudaStream_t stream) {
    const long long total = (long long)n * C * HW;
    k_bn_normalize<<<s_blocks(total), BK_THREADS, 0, stream>>>(x, gamma, beta, bmean, binvstd, total, C, HW, xhat,
                                                               y);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_bn_backward(const float *dy, const float *xhat, const float *gamma,
                                       const float *binvstd, int n, int C, int HW, int splits, int train,
                                       float *dgamma, float *dbeta, float *dx, double *work,
                                       cudaStream_t stream) {
    const long long M = (long long)n * HW;
    double *part = work, *sums = work + (size_t)C * splits * 2 + (size_t)C;
    const dim3 grid((unsigned)C, (unsigned)splits);
    k_bn_partial<<<grid, BK_RED, 0, stream>>>(BN_SUM_DY_DYXHAT, dy, xhat, NULL, C, HW, M, splits, part);
    k_bn_bwd_final<<<(unsigned)((C + 127) / 128), 128, 0, stream>>>(part, C, splits, dgamma, dbeta, sums);
    if (dx) {
        const long long total = (long long)n * C * HW;
        k_bn_bwd_dx<<<s_blocks(total), BK_THREADS, 0, stream>>>(dy, xhat, gamma, binvstd, sums, (double)M, total,
                                                                C, HW, train, dx);
    }
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_softmax(const float *z, float *probs, int n, int K, cudaStream_t stream) {
    k_softmax<<<(unsigned)((n + 127) / 128), 128, 0, stream>>>(z, probs, n, K);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_xent(const float *probs, const int *labels, int n, int K, float inv_n, float *dz,
                                double *loss, int *hit, cudaStream_t stream) {
    k_xent<<<(unsigned)((n + 127) / 128), 128, 0, stream>>>(probs, labels, n, K, inv_n, dz, loss, hit);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_im2col(const float *x, float *cols, int n, int C, int H, int W, int k, int s,
                                  int pad, int OH, int OW, int ld, int ones, cudaStream_t stream) {
    (void)ones; /* ld = C*k*k + ones: columns past C*k*k are the homogeneous 1 */
    const long long total = (long long)n * OH * OW * ld;
    k_im2col<<<s_blocks(total), BK_THREADS, 0, stream>>>(x, cols, total, C, H, W, k, s, pad, OH, OW, ld);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_patch_means(const float *x, float *means, int n, int C, int H, int W, int k, int s,
                                       int pad, int OH, int OW, int ld, int ones, float inv_p,
                                       cudaStream_t stream) {
    (void)ones;
    const long long total = (long long)n * ld;
    k_patch_means<<<s_blocks(total), BK_THREADS, 0, stream>>>(x, means, total, C, H, W, k, s, pad, OH, OW, ld,
                                                              inv_p);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_augment(const float *a, float *out, int n, int d, cudaStream_t stream) {
    const long long total = (long long)n * (d + 1);
    k_augment<<<s_blocks(total), BK_THREADS, 0, stream>>>(a, out, total, d);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_transpose_dy(const float *dy, float *dyt, int n, int O, int P, cudaStream_t stream) {
    const long long total = (long long)n * P * O;
    k_transpose_dy<<<s_blocks(total), BK_THREADS, 0, stream>>>(dy, dyt, total, O, P);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_pos_sums(const float *dy, float *sums, int n, int O, int P, cudaStream_t stream) {
    const long long total = (long long)n * O;
    k_pos_sums<<<s_blocks(total), BK_THREADS, 0, stream>>>(dy, sums, total, P);
    return cudaGetLastError();
}

size_t backend_cuda_rank1_work_len(int n, int C, int T) {
    return (size_t)n * (2 * (size_t)C + (size_t)T);
}

cudaError_t backend_cuda_k_rank1(const float *a, int n, int C, int T, float *K, float *psi, int max_iter,
                                 double tol, double *work, cudaStream_t stream) {
    k_rank1<<<(unsigned)n, BK_RANK1, 0, stream>>>(a, C, T, K, psi, max_iter, tol, work);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_bn_factor(const float *xhat, const float *dy, int n, int C, int P, float g_scale,
                                     float *F, double *work, cudaStream_t stream) {
    k_bn_factor_partial<<<(unsigned)((long long)n * C), 128, 0, stream>>>(xhat, dy, C, P, (double)g_scale, work);
    k_bn_factor_final<<<(unsigned)((C + 127) / 128), 128, 0, stream>>>(work, n, C, F);
    return cudaGetLastError();
}

cudaError_t backend_cuda_k_symmetrize(float *A, int d, int corner, cudaStream_t stream) {
    const long long total = (long long)d * d;
    k_symmetrize<<<s_blocks(total), BK_THREADS, 0, stream>>>(A, d, corner);
    return cudaGetLastError();
}

} /* extern "C" */
