/* tests/kfac/test_kfac_opt.c — the K-FAC optimizer's update (common/kfac/kfac_opt.c)
 * against a dense double-precision solve of every layer's damped Fisher block.
 *
 * What is compared. A small net that has every kind of preconditioned layer:
 *     input 2x5x5 -> conv c1 (out 3, k 3, pad 1; KFC) -> fc f0 (out 4,
 *     kfac=doubly, on the 3x5x5 map) -> batchnorm bn -> relu -> fc f1
 *     (out 5) -> fc f2 (out 3, bias=0) -> softmax_xent.
 * Fresh random symmetric PSD factors (scale X X^T / m, m = 2n + 8, so
 * eigenvalues in about [0.09, 2.9] scale, the smallest of the order of the
 * damping, so it matters; scale in [1/2, 2] per factor, so pi matters) are
 * folded once into a new optimizer (the first
 * fold sets the running average), every block is inverted
 * (kfac_opt_invert_all), and one kfac_opt_step is taken with a fresh random
 * gradient from parameters 0, with
 *     step rule FIXED, lr = 1, momentum 0, weight decay 0,
 * so that the parameters afterwards are exactly -v, v the preconditioned
 * direction (kfac_step.h: m <- 0 m + 1 v, w <- w - m). Per layer, -v is
 * compared with x solving M x = g, M built explicitly in double
 * (kfac_opt.h, kfac_precond.h for the damping by method):
 *   conv / fc standard, gradient V = [dW | db] (out, cols) vectorized column
 *     by column, vec(V)[j out + o] = V[o][j]:
 *       CHOLESKY: M = (A + pi sqrt(l) I) (x) (G + sqrt(l)/pi I),
 *                 pi = sqrt((tr A / dim A) / (tr G / dim G));
 *       EIGEN:    M = A (x) G + l I.
 *   fc doubly, weight gradient (out, C T), column c T + t, vec index
 *     (c T + t) out + o:
 *       CHOLESKY: M = (Psi + pi_P l^(1/3) I) (x) (K + pi_K l^(1/3) I)
 *                     (x) (G + pi_G l^(1/3) I), pi_i = cbrt(r_i^2 / (r_j r_k)),
 *                 r = trace / dim (Ba et al. Eq. 12);
 *       EIGEN:    M = Psi (x) K (x) G + l I;
 *     and its bias: M = Gbias + l I (both methods).
 *   batchnorm, per channel: M = [[f_gg, f_gb], [f_gb, f_bb]] + l I.
 * l = damping = 0.05. The solve is Gaussian elimination with partial
 * pivoting in double. A second pass with the KL step rule (Ba et al.
 * sec. 5) checks that the parameters move by eta x with
 * eta = min(eta_max, sqrt(c0 / x^T g)) from the oracle's x.
 *
 * Error measure and tolerance: per layer ||v - x||_2 / ||x||_2 <= 1e-4.
 * CHOLESKY: each damped factor has a condition number <~ 1e2 (its diagonal
 * gets >~ 0.1), so each float32 inverse is accurate to ~1e2 * 6e-8.
 * EIGEN: the divisors v_A v_G (+ v_Psi) + l span up to ~6^3 / 0.05 ~ 4e3,
 * and the float32 eigendecomposition's absolute error ~ u ||F|| is divided
 * by the smallest of them. Measured over 300 seeds: worst 4e-7 (CHOLESKY),
 * 3e-6 (EIGEN). Breaking the damping in kfac_opt.c (A without pi, the
 * doubly pi's dropped, Gbias or the step's lambda off by 10%) gives errors
 * from 3e-3 to 0.2, as would a wrong block-to-layer mapping or vec order.
 * A third test takes the update's tail (decoupled weight decay, momentum,
 * Polyak average, the KL-clip rule) on a larger model, on one thread and
 * on a pool, against the formulas in double (see its comment).
 * Seed printed on failure; KFAC_TEST_SEED=<n> replays.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/rng.h"
#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_stats.h"
#include "common/nn/nn.h"
#include "common/nn/nn_par.h"
#include "tests/lib/seed.h"
#include "tests/lib/testnet.h"

#define TOL 1e-4
#define LAMBDA 0.05

static const char *s_model =
    "input 2x5x5\n"
    "conv name=c1 out=3 k=3 pad=1\n"
    "fc name=f0 out=4 kfac=doubly\n"
    "batchnorm name=bn\nrelu\n"
    "fc name=f1 out=5\n"
    "fc name=f2 out=3 bias=0\n"
    "softmax_xent\n";

static void *s_alloc(size_t n_bytes) {
    void *p = calloc(n_bytes ? n_bytes : 1, 1);
    ck_assert_ptr_nonnull(p);
    return p;
}
#define NEWD(n) ((double *)s_alloc((size_t)(n) * sizeof(double)))

/* F (n, n), both triangles = scale X X^T / m, X (n, m) normal with
 * m = 2n + 8 (in double, rounded once to float): eigenvalues in about
 * [0.09, 2.9] scale (Marchenko-Pastur for n / m = 1/2). */
static void s_random_psd(rng_t *r, float *F, int n, double scale) {
    const int m = 2 * n + 8;
    double *X = NEWD((size_t)n * m);
    for (int i = 0; i < n * m; i++) X[i] = rng_normal(r);
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = 0.0;
            for (int k = 0; k < m; k++) s += X[i * m + k] * X[j * m + k];
            F[(size_t)i * n + j] = F[(size_t)j * n + i] = (float)(scale * s / m);
        }
    free(X);
}

/* Fill every factor of batch with fresh random content; 1 update each. */
static void s_random_factors(rng_t *r, kfac_stats_t *batch) {
    for (int s = 0; s < batch->n_layers; s++)
        for (int f = 0; f < batch->layers[s].n_factors; f++) {
            kfac_factor_t *fa = &batch->layers[s].f[f];
            if (fa->kind == KFAC_FACTOR_SYM) {
                s_random_psd(r, fa->data, fa->dim, pow(2.0, 2.0 * rng_uniform(r) - 1.0)); /* scale in [1/2, 2] */
            } else { /* DIAG2X2: per channel the second moments of (dgamma, dbeta) over 3 samples: PSD */
                for (int c = 0; c < fa->dim; c++) {
                    double gg = 0, gb = 0, bb = 0;
                    for (int k = 0; k < 3; k++) {
                        double a = rng_normal(r), b = rng_normal(r);
                        gg += a * a / 3, gb += a * b / 3, bb += b * b / 3;
                    }
                    fa->data[3 * c] = (float)gg, fa->data[3 * c + 1] = (float)gb, fa->data[3 * c + 2] = (float)bb;
                }
            }
            fa->n_updates = 1;
            fa->n_samples = 8;
        }
}

/* Solve M x = b (n, n) in place by Gaussian elimination with partial
 * pivoting, double; x lands in b. M is destroyed. */
static void s_solve(double *M, double *b, int n) {
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int i = c + 1; i < n; i++)
            if (fabs(M[(size_t)i * n + c]) > fabs(M[(size_t)p * n + c])) p = i;
        ck_assert_msg(M[(size_t)p * n + c] != 0.0, "singular oracle matrix");
        if (p != c) {
            for (int j = 0; j < n; j++) {
                double t = M[(size_t)c * n + j];
                M[(size_t)c * n + j] = M[(size_t)p * n + j];
                M[(size_t)p * n + j] = t;
            }
            double t = b[c];
            b[c] = b[p];
            b[p] = t;
        }
        for (int i = c + 1; i < n; i++) {
            double f = M[(size_t)i * n + c] / M[(size_t)c * n + c];
            if (f == 0.0) continue;
            for (int j = c; j < n; j++) M[(size_t)i * n + j] -= f * M[(size_t)c * n + j];
            b[i] -= f * b[c];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = b[i];
        for (int j = i + 1; j < n; j++) s -= M[(size_t)i * n + j] * b[j];
        b[i] = s / M[(size_t)i * n + i];
    }
}

/* Double copy of factor F (n, n) plus d on the diagonal. */
static double *s_damped(const kfac_factor_t *F, double d) {
    int n = F->dim;
    double *D = NEWD((size_t)n * n);
    for (int i = 0; i < n * n; i++) D[i] = F->data[i];
    for (int i = 0; i < n; i++) D[(size_t)i * n + i] += d;
    return D;
}

static double s_trace_ratio(const kfac_factor_t *F) {
    double t = 0.0;
    for (int i = 0; i < F->dim; i++) t += F->data[(size_t)i * F->dim + i];
    return t / F->dim;
}

/* ||got - want|| / ||want|| over n entries. */
static double s_rel_err(const double *got, const double *want, size_t n) {
    double d = 0.0, w = 0.0;
    for (size_t i = 0; i < n; i++) {
        d += (got[i] - want[i]) * (got[i] - want[i]);
        w += want[i] * want[i];
    }
    return sqrt(d) / (w > 0.0 ? sqrt(w) : 1.0);
}

/* The oracle's update direction x (n_params) for gradient g, from the
 * factors of batch (what the optimizer's running average holds after one
 * fold), per layer of net as described in the file comment. */
static void s_oracle(const net_t *net, const kfac_stats_t *st, kfac_inv_method_t method, double lambda,
                     const float *g, double *x) {
    for (size_t j = 0; j < net->n_params; j++) x[j] = g[j];
    for (int s = 0; s < st->n_layers; s++) {
        const kfac_layer_stats_t *ls = &st->layers[s];
        const layer_t *l = &net->layers[ls->layer];
        if (ls->kind == LAYER_BATCHNORM) {
            const float *F = ls->f[0].data;
            for (int c = 0; c < ls->out; c++) {
                double M[4] = {F[3 * c] + lambda, F[3 * c + 1], F[3 * c + 1], F[3 * c + 2] + lambda};
                double b[2] = {g[l->w_off + c], g[l->b_off + c]};
                s_solve(M, b, 2);
                x[l->w_off + c] = b[0];
                x[l->b_off + c] = b[1];
            }
            continue;
        }
        const int out = ls->out;
        if (ls->mode == KFAC_MODE_DOUBLY) {
            /* factors K (T), Psi (C), G (out), Gbias (out) */
            const kfac_factor_t *K = &ls->f[0], *P = &ls->f[1], *G = &ls->f[2];
            const int C = ls->fm_c, T = ls->fm_t, N = C * T * out;
            double dK = 0, dP = 0, dG = 0;
            if (method == KFAC_INV_CHOLESKY) {
                double rK = s_trace_ratio(K), rP = s_trace_ratio(P), rG = s_trace_ratio(G), c3 = cbrt(lambda);
                dK = cbrt(rK * rK / (rP * rG)) * c3;
                dP = cbrt(rP * rP / (rK * rG)) * c3;
                dG = cbrt(rG * rG / (rK * rP)) * c3;
            }
            double *Kd = s_damped(K, dK), *Pd = s_damped(P, dP), *Gd = s_damped(G, dG);
            double *M = NEWD((size_t)N * N), *b = NEWD(N);
            for (int c = 0; c < C; c++)
                for (int t = 0; t < T; t++)
                    for (int o = 0; o < out; o++) {
                        size_t row = ((size_t)c * T + t) * out + o;
                        b[row] = g[l->w_off + (size_t)o * C * T + (size_t)c * T + t];
                        for (int c2 = 0; c2 < C; c2++)
                            for (int t2 = 0; t2 < T; t2++)
                                for (int o2 = 0; o2 < out; o2++)
                                    M[row * N + ((size_t)c2 * T + t2) * out + o2] =
                                        Pd[c * C + c2] * Kd[t * T + t2] * Gd[o * out + o2];
                        if (method == KFAC_INV_EIGEN) M[row * N + row] += lambda;
                    }
            s_solve(M, b, N);
            for (int c = 0; c < C; c++)
                for (int t = 0; t < T; t++)
                    for (int o = 0; o < out; o++)
                        x[l->w_off + (size_t)o * C * T + (size_t)c * T + t] = b[((size_t)c * T + t) * out + o];
            free(Kd); free(Pd); free(Gd); free(M); free(b);
            if (ls->has_bias) {
                double *Bd = s_damped(&ls->f[3], lambda), *bb = NEWD(out);
                for (int o = 0; o < out; o++) bb[o] = g[l->b_off + o];
                s_solve(Bd, bb, out);
                for (int o = 0; o < out; o++) x[l->b_off + o] = bb[o];
                free(Bd); free(bb);
            }
            continue;
        }
        /* conv / fc standard: A (cols), G (out) */
        const kfac_factor_t *A = &ls->f[0], *G = &ls->f[1];
        const int in = ls->in, cols = in + ls->has_bias, N = cols * out;
        ck_assert_int_eq(A->dim, cols);
        double dA = 0, dG = 0;
        if (method == KFAC_INV_CHOLESKY) {
            double pi = sqrt(s_trace_ratio(A) / s_trace_ratio(G));
            dA = pi * sqrt(lambda);
            dG = sqrt(lambda) / pi;
        }
        double *Ad = s_damped(A, dA), *Gd = s_damped(G, dG);
        double *M = NEWD((size_t)N * N), *b = NEWD(N);
        for (int j = 0; j < cols; j++)
            for (int o = 0; o < out; o++) {
                size_t row = (size_t)j * out + o;
                b[row] = j < in ? g[l->w_off + (size_t)o * in + j] : g[l->b_off + o];
                for (int j2 = 0; j2 < cols; j2++)
                    for (int o2 = 0; o2 < out; o2++)
                        M[row * N + (size_t)j2 * out + o2] = Ad[j * cols + j2] * Gd[o * out + o2];
                if (method == KFAC_INV_EIGEN) M[row * N + row] += lambda;
            }
        s_solve(M, b, N);
        for (int j = 0; j < cols; j++)
            for (int o = 0; o < out; o++) {
                double v = b[(size_t)j * out + o];
                if (j < in) x[l->w_off + (size_t)o * in + j] = v;
                else x[l->b_off + o] = v;
            }
        free(Ad); free(Gd); free(M); free(b);
    }
}

/* A new optimizer for net with opts, the factors of batch folded in and
 * every block inverted. */
static kfac_opt_t *s_opt_with(const net_t *net, const kfac_opts_t *opts, const kfac_stats_t *batch) {
    char err[256];
    kfac_opt_t *k = kfac_opt_new(net, opts, err, sizeof err);
    ck_assert_msg(k != NULL, "%s", err);
    ck_assert_int_eq(kfac_opt_fold(k, batch, 0), 0);
    ck_assert_int_eq(kfac_opt_invert_all(k), 0);
    return k;
}

/* One step from parameters 0 with gradient g: the parameters afterwards,
 * in double, into d (n_params). */
static void s_step_from_zero(kfac_opt_t *k, const net_t *net, const float *g, kfac_step_info_t *info, double *d) {
    float *w = calloc(net->n_params, sizeof(float));
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(kfac_opt_step(k, w, g, 1, info), 0);
    ck_assert_int_eq(info->n_layers_identity, 0);
    ck_assert_int_eq(info->n_blocks_missing, 0);
    for (size_t j = 0; j < net->n_params; j++) d[j] = w[j];
    free(w);
}

static void s_check_method(kfac_inv_method_t method, const char *name) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    net_t *net = testnet_parse(s_model, 4);
    kfac_stats_t *batch = kfac_stats_new(net);
    ck_assert_ptr_nonnull(batch);
    ck_assert_int_eq(batch->n_layers, 5); /* c1, f0, bn, f1, f2 */
    ck_assert_int_eq(batch->layers[1].mode, KFAC_MODE_DOUBLY);
    s_random_factors(&r, batch);
    float *g = malloc(net->n_params * sizeof(float));
    double *x = NEWD(net->n_params), *d = NEWD(net->n_params);
    ck_assert_ptr_nonnull(g);
    testnet_fill_normal(&r, g, net->n_params);
    s_oracle(net, batch, method, LAMBDA, g, x);

    /* FIXED, lr 1, no momentum, no weight decay: the parameters become -v. */
    kfac_opts_t o;
    kfac_opts_default(&o);
    o.method = method;
    o.damping = LAMBDA;
    o.step_rule = KFAC_STEP_RULE_FIXED;
    o.lr = 1.0;
    o.momentum = 0.0;
    o.weight_decay = 0.0;
    kfac_opt_t *k = s_opt_with(net, &o, batch);
    kfac_step_info_t info;
    s_step_from_zero(k, net, g, &info, d);
    ck_assert(info.step == 1.0);
    for (size_t j = 0; j < net->n_params; j++) d[j] = -d[j];
    double worst = 0.0, xg = 0.0;
    for (size_t j = 0; j < net->n_params; j++) xg += x[j] * g[j];
    for (int s = 0; s < batch->n_layers; s++) {
        const layer_t *l = &net->layers[batch->layers[s].layer];
        /* weights and bias are adjacent in the arena for every layer here */
        ck_assert(l->n_b == 0 || l->b_off == l->w_off + l->n_w);
        double e = s_rel_err(d + l->w_off, x + l->w_off, l->n_w + l->n_b);
        if (e > worst) worst = e;
        ck_assert_msg(e <= TOL, "%s: layer %s: ||v - x|| / ||x|| = %.3g > %.0e (seed %llu)", name, l->name, e, TOL,
                      (unsigned long long)seed);
    }
    ck_assert_msg(fabs(info.vg - xg) <= TOL * fabs(xg), "%s: v^T g %.9g, oracle %.9g (seed %llu)", name, info.vg, xg,
                  (unsigned long long)seed);
    kfac_opt_free(&k);

    /* KL rule: the same direction scaled by eta = min(eta_max, sqrt(c0 / x^T g)). */
    o.step_rule = KFAC_STEP_RULE_KL;
    o.eta_max = 1.0;
    o.kl_c0 = 1e-2;
    o.kl_zeta = 1.0;
    k = s_opt_with(net, &o, batch);
    s_step_from_zero(k, net, g, &info, d);
    double eta = sqrt(o.kl_c0 / xg);
    if (eta > o.eta_max) eta = o.eta_max;
    ck_assert_msg(fabs(info.step - eta) <= TOL * eta, "%s: KL step %.9g, oracle %.9g (seed %llu)", name, info.step,
                  eta, (unsigned long long)seed);
    for (size_t j = 0; j < net->n_params; j++) x[j] *= -eta;
    double e = s_rel_err(d, x, net->n_params);
    ck_assert_msg(e <= TOL, "%s: KL step: ||dw - (-eta x)|| / ||eta x|| = %.3g (seed %llu)", name, e,
                  (unsigned long long)seed);
    printf("%s: worst per-layer relative error %.2g (tolerance %.0e), KL step %.4g\n", name, worst, TOL, eta);
    kfac_opt_free(&k);
    kfac_stats_free(&batch);
    free(g); free(x); free(d);
    net_free(&net);
}

START_TEST(test_kfac_opt_step_cholesky_matches_dense_solve) {
    s_check_method(KFAC_INV_CHOLESKY, "cholesky");
}
END_TEST

START_TEST(test_kfac_opt_step_eigen_matches_dense_solve) {
    s_check_method(KFAC_INV_EIGEN, "eigen");
}
END_TEST

/* The update's tail on a model large enough that kfac_opt_step splits its
 * products over a pool (its passes over the parameters stay on the
 * calling thread below 2^18 parameters; test_kfac_step.c runs them on
 * pools): with decoupled weight decay,
 * momentum, the Polyak average and the KL-clip rule (per-layer v^T g),
 * three steps on one thread and on a pool of 3 give the same parameters,
 * momentum and average (1e-5 relative: the BLAS kernels' rounding of the
 * split products), and each step against the formulas in double from the
 * step's own direction v (kfac_opt_t.v, which the tail reads and leaves):
 *   nu = min(1, sqrt(kl_clip / (lr^2 sum_l |v_l^T g_l|))), step = lr nu,
 *   m = mu m0 + step (v + wd mask w0), w = w0 - m,
 *   avg = w (first step), then decay avg0 + (1 - decay) w,
 * step to 1e-9 relative, the arrays to 1e-6 of their largest value. */
static const char *s_model_large =
    "input 2x8x8\n"
    "conv name=c1 out=6 k=3 pad=1\n"
    "batchnorm name=bn\nrelu\n"
    "fc name=f1 out=96\n"
    "fc name=f2 out=10\n"
    "softmax_xent\n";

static double s_worst_rel(const float *got, const double *want, size_t n) {
    double scale = 1e-30, worst = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(got[i] - want[i]));
    return worst / scale;
}

START_TEST(test_kfac_opt_step_tail_on_a_pool) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    char err[256];
    net_t *net = net_parse(s_model_large, "test", 4, err, sizeof err);
    ck_assert_msg(net != NULL, "%s", err);
    const size_t n = net->n_params;
    ck_assert_uint_gt(n, 32768);
    kfac_stats_t *batch = kfac_stats_new(net);
    ck_assert_ptr_nonnull(batch);
    s_random_factors(&r, batch);
    kfac_opts_t o;
    kfac_opts_default(&o);
    o.damping = 0.03;
    o.step_rule = KFAC_STEP_RULE_KL_CLIP;
    o.lr = 0.1;
    o.kl_clip = 1e-4;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    o.wd_mode = KFAC_WD_DECOUPLED;
    o.polyak_decay = 0.95;
    kfac_opt_t *k1 = s_opt_with(net, &o, batch), *k3 = s_opt_with(net, &o, batch), *kf = s_opt_with(net, &o, batch);
    nn_par_t *par = nn_par_new(3);
    ck_assert_ptr_nonnull(par);
    kfac_opt_set_par(k3, par);
    float *w1 = s_alloc(n * sizeof(float)), *w3 = s_alloc(n * sizeof(float)), *g = s_alloc(n * sizeof(float));
    float *w0 = s_alloc(n * sizeof(float)), *m0 = s_alloc(n * sizeof(float)), *a0 = s_alloc(n * sizeof(float));
    double *rw = NEWD(n), *rm = NEWD(n), *ra = NEWD(n);
    float *wf = s_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) w1[i] = w3[i] = wf[i] = (float)rng_normal(&r);
    int clipped = 0;
    for (long t = 0; t < 3; t++) {
        for (size_t i = 0; i < n; i++) g[i] = (float)rng_normal(&r);
        memcpy(w0, w1, n * sizeof(float));
        memcpy(m0, k1->mom, n * sizeof(float));
        memcpy(a0, k1->polyak, n * sizeof(float));
        kfac_step_info_t i1, i3;
        ck_assert_int_eq(kfac_opt_step(k1, w1, g, t, &i1), 0);
        ck_assert_int_eq(kfac_opt_step(k3, w3, g, t, &i3), 0);
        /* a caller that checked g finite: no check pass, the same floats */
        kfac_step_info_t i_f;
        ck_assert_int_eq(kfac_opt_step_finite(kf, wf, g, NULL, t, &i_f), 0);
        ck_assert_msg(memcmp(wf, w1, n * sizeof(float)) == 0 && memcmp(kf->mom, k1->mom, n * sizeof(float)) == 0 &&
                          i_f.step == i1.step,
                      "step %ld: kfac_opt_step_finite differs from kfac_opt_step (seed %llu)", t,
                      (unsigned long long)seed);
        ck_assert_int_eq(i1.n_layers_identity, 0);
        /* the oracle, from k1's direction */
        double sum = 0.0;
        for (int s = 0; s < k1->avg->n_layers; s++) {
            const layer_t *l = &net->layers[k1->avg->layers[s].layer];
            double vg = 0.0;
            for (size_t j = l->w_off; j < l->w_off + l->n_w + l->n_b; j++) vg += (double)k1->v[j] * g[j];
            sum += fabs(vg);
        }
        double nu = fmin(1.0, sqrt(o.kl_clip / (o.lr * o.lr * sum))), step = o.lr * nu;
        clipped += nu < 1.0;
        ck_assert_msg(fabs(i1.step - step) <= 1e-9 * step, "step %ld: %.12g, oracle %.12g (seed %llu)", t, i1.step,
                      step, (unsigned long long)seed);
        for (size_t j = 0; j < n; j++) {
            double d = (double)k1->v[j] + o.weight_decay * k1->wd_mask[j] * w0[j];
            rm[j] = o.momentum * m0[j] + step * d;
            rw[j] = w0[j] - rm[j];
            ra[j] = t == 0 ? rw[j] : o.polyak_decay * a0[j] + (1.0 - o.polyak_decay) * rw[j];
        }
        const struct { const char *what; const float *got; const double *want; } cmp[3] = {
            {"parameters", w1, rw}, {"momentum", k1->mom, rm}, {"Polyak average", k1->polyak, ra}};
        for (int c = 0; c < 3; c++) {
            double e = s_worst_rel(cmp[c].got, cmp[c].want, n);
            ck_assert_msg(e <= 1e-6, "step %ld: %s off the formulas by %g (seed %llu)", t, cmp[c].what, e,
                          (unsigned long long)seed);
        }
        /* the pool's step against the one thread's */
        ck_assert_msg(fabs(i3.step - i1.step) <= 1e-5 * i1.step, "step %ld: %g on 3 threads, %g on one (seed %llu)", t,
                      i3.step, i1.step, (unsigned long long)seed);
        double e = 0.0, scale = 1e-30;
        for (size_t j = 0; j < n; j++) {
            e = fmax(e, fmax(fabs(w3[j] - w1[j]), fmax(fabs(k3->mom[j] - k1->mom[j]), fabs(k3->polyak[j] - k1->polyak[j]))));
            scale = fmax(scale, fabs(w1[j]));
        }
        ck_assert_msg(e <= 1e-5 * scale, "step %ld: the pool's update differs by %g (seed %llu)", t, e,
                      (unsigned long long)seed);
    }
    ck_assert_msg(clipped > 0, "the KL clip never bound: the test does not see the rule (seed %llu)",
                  (unsigned long long)seed);
    kfac_opt_set_par(k3, NULL);
    nn_par_free(&par);
    kfac_opt_free(&k1);
    kfac_opt_free(&k3);
    kfac_opt_free(&kf);
    kfac_stats_free(&batch);
    free(wf);
    free(w1), free(w3), free(g), free(w0), free(m0), free(a0), free(rw), free(rm), free(ra);
    net_free(&net);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("kfac_opt");
    TCase *tc = tcase_create("step");
    tcase_add_test(tc, test_kfac_opt_step_cholesky_matches_dense_solve);
    tcase_add_test(tc, test_kfac_opt_step_eigen_matches_dense_solve);
    tcase_add_test(tc, test_kfac_opt_step_tail_on_a_pool);
    tcase_set_timeout(tc, 30); /* dense solves of up to 300 unknowns */
    suite_add_tcase(s, tc);
    return s;
}
