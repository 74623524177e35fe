/* tests/kfac/test_kfac_precond.c — preconditioning against dense double-precision
 * solves of the explicitly built Kronecker matrices on tiny shapes, BatchNorm
 * 2x2 blocks against direct solves, and the caller's path after a failed
 * inversion. Fresh random inputs; the seed is printed on failure and
 * KFAC_TEST_SEED replays one.
 *
 * Tolerance: factors are X X^T / m with m = 2n + 8 plus damping (see
 * s_random_spd), so each damped factor has condition number <~ 1e2 and the
 * Kronecker products <~ 1e4 at worst; the float32 path computes each factor
 * inverse with relative error ~cond * eps32 (< 1e-5) and applies two to
 * six float matrix products of tiny size. Measured relative 2-norm errors
 * of the preconditioned gradient are <= ~1e-6; the bound 1e-4 leaves room
 * for a rare ill-conditioned small draw, while a wrong damping, transpose or
 * index order gives errors > 1e-1. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_linalg.h"
#include "common/kfac/kfac_precond.h"
#include "common/nn/nn_par.h"
#include "common/base/rng.h"
#include "tests/lib/seed.h"

#define TOL 1e-4

/* Random symmetric PSD (n, n), both triangles: scale * X X^T / m, X (n, m)
 * normal with m = 2n + 8. The scale makes factor magnitudes differ, so a
 * swapped pi would show. */
static float *s_random_spd(rng_t *r, int n, double scale) {
    int m = 2 * n + 8;
    double *X = malloc(sizeof(double) * (size_t)n * m);
    float *F = malloc(sizeof(float) * (size_t)n * n);
    for (int i = 0; i < n * m; i++) X[i] = rng_normal(r);
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = 0;
            for (int k = 0; k < m; k++) s += X[i * m + k] * X[j * m + k];
            F[i * n + j] = F[j * n + i] = (float)(scale * s / m);
        }
    free(X);
    return F;
}

static float *s_random_vec(rng_t *r, size_t n) {
    float *v = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) v[i] = (float)rng_normal(r);
    return v;
}

/* double (n, n) copy of F + d I */
static double *s_damped_d(const float *F, int n, double d) {
    double *D = malloc(sizeof(double) * (size_t)n * n);
    for (int i = 0; i < n * n; i++) D[i] = F[i];
    for (int i = 0; i < n; i++) D[i * n + i] += d;
    return D;
}

/* out (pq, pq) = P (p, p) (x) Q (q, q): entry ((a, b), (a2, b2)) at row
 * a*q + b, column a2*q + b2, equal to P[a][a2] Q[b][b2]. */
static double *s_kron_d(const double *P, int p, const double *Q, int q) {
    int N = p * q;
    double *K = malloc(sizeof(double) * (size_t)N * N);
    for (int a = 0; a < p; a++)
        for (int b = 0; b < q; b++)
            for (int a2 = 0; a2 < p; a2++)
                for (int b2 = 0; b2 < q; b2++)
                    K[(size_t)(a * q + b) * N + (a2 * q + b2)] = P[a * p + a2] * Q[b * q + b2];
    return K;
}

/* Solve M x = b (M (N, N), destroyed) by Gaussian elimination with partial
 * pivoting in double. */
static void s_solve_d(double *M, int N, const double *b, double *x) {
    double *rhs = malloc(sizeof(double) * N);
    memcpy(rhs, b, sizeof(double) * N);
    for (int k = 0; k < N; k++) {
        int p = k;
        for (int i = k + 1; i < N; i++)
            if (fabs(M[(size_t)i * N + k]) > fabs(M[(size_t)p * N + k])) p = i;
        if (p != k) {
            for (int j = 0; j < N; j++) {
                double t = M[(size_t)k * N + j];
                M[(size_t)k * N + j] = M[(size_t)p * N + j];
                M[(size_t)p * N + j] = t;
            }
            double t = rhs[k];
            rhs[k] = rhs[p];
            rhs[p] = t;
        }
        for (int i = k + 1; i < N; i++) {
            double f = M[(size_t)i * N + k] / M[(size_t)k * N + k];
            for (int j = k; j < N; j++) M[(size_t)i * N + j] -= f * M[(size_t)k * N + j];
            rhs[i] -= f * rhs[k];
        }
    }
    for (int i = N - 1; i >= 0; i--) {
        double s = rhs[i];
        for (int j = i + 1; j < N; j++) s -= M[(size_t)i * N + j] * x[j];
        x[i] = s / M[(size_t)i * N + i];
    }
    free(rhs);
}

/* Relative 2-norm error of U (n_out, n_col) row-major against the solution
 * x of the dense system, in vec (column-stacked) order: vec[col*n_out + o]. */
static double s_err_vs_dense(double *M, const float *V, const float *U, int n_out, int n_col) {
    int N = n_out * n_col;
    double *b = calloc((size_t)N, sizeof(double)), *x = calloc((size_t)N, sizeof(double));
    for (int o = 0; o < n_out; o++)
        for (int c = 0; c < n_col; c++) b[c * n_out + o] = V[o * n_col + c];
    s_solve_d(M, N, b, x);
    double num = 0, den = 0;
    for (int o = 0; o < n_out; o++)
        for (int c = 0; c < n_col; c++) {
            double e = U[o * n_col + c] - x[c * n_out + o];
            num += e * e;
            den += x[c * n_out + o] * x[c * n_out + o];
        }
    free(b);
    free(x);
    return sqrt(num / den);
}

static kfac_inverse_t *s_inv(const float *F, int n, float d, kfac_inv_method_t m) {
    kfac_inverse_t *h = kfac_inverse_new(n);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(kfac_inverse_compute(F, n, d, m, h, NULL), 0);
    ck_assert_int_eq(h->method, m);
    return h;
}

/* Factored Tikhonov with Cholesky inverses:
 * U = ((A + pi sqrt(l) I) (x) (G + sqrt(l)/pi I))^{-1} vec(V). */
START_TEST(test_precond_kron_cholesky_matches_dense_solve) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int rep = 0; rep < 3; rep++) {
        int n_out = 1 + (int)rng_below(&r, 5), n_in = 1 + (int)rng_below(&r, 6);
        float *A = s_random_spd(&r, n_in, exp(2 * rng_normal(&r)));
        float *G = s_random_spd(&r, n_out, exp(2 * rng_normal(&r)));
        float *V = s_random_vec(&r, (size_t)n_out * n_in);
        float *U = malloc(sizeof(float) * n_out * n_in);
        float lambda = (float)(0.01 + 0.2 * rng_uniform(&r));
        float pi = kfac_pi_trace(A, n_in, G, n_out);
        float dA = pi * sqrtf(lambda), dG = sqrtf(lambda) / pi;
        kfac_inverse_t *Ai = s_inv(A, n_in, dA, KFAC_INV_CHOLESKY);
        kfac_inverse_t *Gi = s_inv(G, n_out, dG, KFAC_INV_CHOLESKY);
        float *work = malloc(sizeof(float) * kfac_precond_work_len(n_out, n_in));
        ck_assert_int_eq(kfac_precond_kron(Ai, Gi, lambda, V, n_out, n_in, U, work, NULL), 0);
        double *Ad = s_damped_d(A, n_in, dA), *Gd = s_damped_d(G, n_out, dG);
        double *M = s_kron_d(Ad, n_in, Gd, n_out); /* A (x) G: index col*n_out + o */
        double err = s_err_vs_dense(M, V, U, n_out, n_in);
        ck_assert_msg(err <= TOL, "kron cholesky %dx%d err %g seed=%llu", n_out, n_in, err,
                      (unsigned long long)seed);
        /* the same with internal work and U aliasing V */
        ck_assert_int_eq(kfac_precond_kron(Ai, Gi, lambda, V, n_out, n_in, V, NULL, NULL), 0);
        ck_assert(memcmp(U, V, sizeof(float) * n_out * n_in) == 0);
        free(A), free(G), free(V), free(U), free(work), free(Ad), free(Gd), free(M);
        kfac_inverse_free(&Ai);
        kfac_inverse_free(&Gi);
    }
}
END_TEST

/* Eigen damping (Pauloski Eq. 13-15): U = (A (x) G + lambda I)^{-1} vec(V) exactly. */
START_TEST(test_precond_kron_eigen_matches_dense_solve) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int rep = 0; rep < 3; rep++) {
        int n_out = 1 + (int)rng_below(&r, 5), n_in = 1 + (int)rng_below(&r, 6);
        float *A = s_random_spd(&r, n_in, 1.0), *G = s_random_spd(&r, n_out, 1.0);
        float *V = s_random_vec(&r, (size_t)n_out * n_in);
        float *U = malloc(sizeof(float) * n_out * n_in);
        float lambda = (float)(0.01 + 0.2 * rng_uniform(&r));
        kfac_inverse_t *Ai = s_inv(A, n_in, 0.0f, KFAC_INV_EIGEN);
        kfac_inverse_t *Gi = s_inv(G, n_out, 0.0f, KFAC_INV_EIGEN);
        ck_assert_int_eq(kfac_precond_kron(Ai, Gi, lambda, V, n_out, n_in, U, NULL, NULL), 0);
        double *Ad = s_damped_d(A, n_in, 0), *Gd = s_damped_d(G, n_out, 0);
        double *M = s_kron_d(Ad, n_in, Gd, n_out);
        for (int i = 0; i < n_out * n_in; i++) M[(size_t)i * n_out * n_in + i] += lambda;
        double err = s_err_vs_dense(M, V, U, n_out, n_in);
        ck_assert_msg(err <= TOL, "kron eigen %dx%d err %g seed=%llu", n_out, n_in, err,
                      (unsigned long long)seed);
        /* eigen damping needs lambda > 0 */
        ck_assert_int_eq(kfac_precond_kron(Ai, Gi, 0.0f, V, n_out, n_in, U, NULL, NULL), -EINVAL);
        free(A), free(G), free(V), free(U), free(Ad), free(Gd), free(M);
        kfac_inverse_free(&Ai);
        kfac_inverse_free(&Gi);
    }
}
END_TEST

/* One factor per form (after a fallback): each applied with its own damping. */
START_TEST(test_precond_kron_mixed_forms_match_dense_solve) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    int n_out = 4, n_in = 5;
    float *A = s_random_spd(&r, n_in, 3.0), *G = s_random_spd(&r, n_out, 0.5);
    float *V = s_random_vec(&r, (size_t)n_out * n_in);
    float *U = malloc(sizeof(float) * n_out * n_in);
    float dA = 0.2f, dG = 0.05f;
    for (int swap = 0; swap < 2; swap++) {
        kfac_inverse_t *Ai = s_inv(A, n_in, dA, swap ? KFAC_INV_EIGEN : KFAC_INV_CHOLESKY);
        kfac_inverse_t *Gi = s_inv(G, n_out, dG, swap ? KFAC_INV_CHOLESKY : KFAC_INV_EIGEN);
        ck_assert_int_eq(kfac_precond_kron(Ai, Gi, 123.0f, V, n_out, n_in, U, NULL, NULL), 0);
        double *Ad = s_damped_d(A, n_in, dA), *Gd = s_damped_d(G, n_out, dG);
        double *M = s_kron_d(Ad, n_in, Gd, n_out);
        double err = s_err_vs_dense(M, V, U, n_out, n_in);
        ck_assert_msg(err <= TOL, "mixed err %g seed=%llu", err, (unsigned long long)seed);
        free(Ad), free(Gd), free(M);
        kfac_inverse_free(&Ai);
        kfac_inverse_free(&Gi);
    }
    free(A), free(G), free(V), free(U);
}
END_TEST

/* Doubly-factored (Ba Eq. 9): V (n_out, C*T), column c*T + t, block
 * Psi (x) K (x) G on vec(V) (index (c*T + t)*n_out + o), inverted with the
 * factored damping of Eq. 11-12 (Cholesky) or exactly (eigen); the bias
 * block (G + lambda I)^{-1}. */
START_TEST(test_precond_kron3_matches_dense_solve) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    for (int rep = 0; rep < 4; rep++) {
        int n_out = 1 + (int)rng_below(&r, 3), C = 1 + (int)rng_below(&r, 4),
            T = 1 + (int)rng_below(&r, 4);
        int ncol = C * T, N = ncol * n_out;
        float *K = s_random_spd(&r, T, exp(rng_normal(&r)));
        float *P = s_random_spd(&r, C, exp(rng_normal(&r)));
        float *G = s_random_spd(&r, n_out, exp(rng_normal(&r)));
        float *V = s_random_vec(&r, (size_t)N), *U = malloc(sizeof(float) * N);
        float *db = s_random_vec(&r, (size_t)n_out), *pdb = malloc(sizeof(float) * n_out);
        float lambda = (float)(0.01 + 0.2 * rng_uniform(&r));
        kfac_inv_method_t m = (rep % 2) ? KFAC_INV_EIGEN : KFAC_INV_CHOLESKY;
        double dK = 0, dP = 0, dG = 0;
        if (m == KFAC_INV_CHOLESKY) {
            float pi[3];
            ck_assert_int_eq(kfac_pi_trace3(K, T, P, C, G, n_out, pi), 0);
            double l3 = cbrt((double)lambda);
            dK = pi[0] * l3, dP = pi[1] * l3, dG = pi[2] * l3;
        }
        kfac_inverse_t *Ki = s_inv(K, T, (float)dK, m), *Pi = s_inv(P, C, (float)dP, m);
        kfac_inverse_t *Gi = s_inv(G, n_out, (float)dG, m);
        ck_assert_int_eq(kfac_precond_kron3(Ki, Pi, Gi, lambda, V, n_out, C, T, U, NULL, NULL), 0);
        double *Kd = s_damped_d(K, T, dK), *Pd = s_damped_d(P, C, dP);
        double *Gd = s_damped_d(G, n_out, dG);
        double *PK = s_kron_d(Pd, C, Kd, T); /* index c*T + t */
        double *M = s_kron_d(PK, ncol, Gd, n_out);
        if (m == KFAC_INV_EIGEN)
            for (int i = 0; i < N; i++) M[(size_t)i * N + i] += lambda;
        double err = s_err_vs_dense(M, V, U, n_out, ncol);
        ck_assert_msg(err <= TOL, "kron3 %s out=%d C=%d T=%d err %g seed=%llu",
                      kfac_inverse_method_name(m), n_out, C, T, err, (unsigned long long)seed);

        /* bias: its own full block (G + lambda I)^{-1} db */
        kfac_inverse_t *Bi = m == KFAC_INV_EIGEN ? Gi : s_inv(G, n_out, lambda, m);
        float *bwork = rng_below(&r, 2) ? malloc(sizeof(float) * (size_t)n_out) : NULL; /* given, or allocated inside */
        ck_assert_int_eq(kfac_precond_block(Bi, lambda, db, pdb, bwork), 0);
        free(bwork);
        double *Bd = s_damped_d(G, n_out, lambda);
        err = s_err_vs_dense(Bd, db, pdb, n_out, 1);
        ck_assert_msg(err <= TOL, "bias err %g seed=%llu", err, (unsigned long long)seed);
        if (Bi != Gi) kfac_inverse_free(&Bi);
        free(K), free(P), free(G), free(V), free(U), free(db), free(pdb);
        free(Kd), free(Pd), free(Gd), free(PK), free(M), free(Bd);
        kfac_inverse_free(&Ki);
        kfac_inverse_free(&Pi);
        kfac_inverse_free(&Gi);
    }
}
END_TEST

/* Unit-wise BatchNorm: per channel ([[f_gg, f_gb],[f_gb, f_bb]] + lambda I)^{-1}. */
START_TEST(test_precond_bn_matches_dense_2x2) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    int C = 16;
    float *f = malloc(sizeof(float) * 3 * C);
    float *dg = s_random_vec(&r, C), *dbv = s_random_vec(&r, C);
    float *pg = malloc(sizeof(float) * C), *pb = malloc(sizeof(float) * C);
    for (int i = 0; i < C; i++) { /* E[x x^T] of random (g, b) pairs: PSD */
        double gg = 0, gb = 0, bb = 0, sc = exp(2 * rng_normal(&r));
        for (int k = 0; k < 3; k++) {
            double g = rng_normal(&r), b = rng_normal(&r);
            gg += g * g, gb += g * b, bb += b * b;
        }
        f[3 * i] = (float)(sc * gg / 3), f[3 * i + 1] = (float)(sc * gb / 3);
        f[3 * i + 2] = (float)(sc * bb / 3);
    }
    float lambda = 0.03f;
    ck_assert_int_eq(kfac_precond_bn(f, C, lambda, dg, dbv, pg, pb), 0);
    for (int i = 0; i < C; i++) {
        double M[4] = {f[3 * i] + (double)lambda, f[3 * i + 1], f[3 * i + 1],
                       f[3 * i + 2] + (double)lambda};
        double b[2] = {dg[i], dbv[i]}, x[2];
        s_solve_d(M, 2, b, x);
        double e = hypot(pg[i] - x[0], pb[i] - x[1]), n = hypot(x[0], x[1]);
        /* computed in double, rounded once to float */
        ck_assert_msg(e <= 1e-6 * n, "bn channel %d err %g seed=%llu", i, e / n,
                      (unsigned long long)seed);
    }
    /* guards: a NaN block -> (lambda I)^{-1}; a singular block with lambda 0 -> identity;
     * an indefinite block is projected (|f_gb| clamped) and stays finite */
    f[0] = NAN;
    f[3] = 1, f[4] = 1, f[5] = 1;  /* singular [[1,1],[1,1]] */
    f[6] = 1, f[7] = 5, f[8] = -2; /* not PSD */
    ck_assert_int_eq(kfac_precond_bn(f, C, lambda, dg, dbv, pg, pb), 1);
    ck_assert(fabsf(pg[0] - dg[0] / lambda) <= 1e-6f * fabsf(dg[0] / lambda) + 1e-30f);
    ck_assert(fabsf(pb[0] - dbv[0] / lambda) <= 1e-6f * fabsf(dbv[0] / lambda) + 1e-30f);
    ck_assert(kfac_linalg_all_finite(pg, C) && kfac_linalg_all_finite(pb, C));
    /* projected block [[1,0],[0,0]] + lambda I */
    ck_assert(fabs(pg[2] - dg[2] / (1.0 + lambda)) <= 1e-5 * fabs(dg[2]));
    ck_assert(fabs(pb[2] - dbv[2] / lambda) <= 1e-5 * fabs(dbv[2] / lambda));
    ck_assert_int_eq(kfac_precond_bn(f, C, 0.0f, dg, dbv, pg, pb), 3);
    ck_assert(pg[1] == dg[1] && pb[1] == dbv[1]);
    ck_assert_int_eq(kfac_precond_bn(f, C, -1.0f, dg, dbv, pg, pb), -EINVAL);
    /* in place */
    float g0 = dg[5], b0 = dbv[5], pg5, pb5;
    kfac_precond_bn(f, C, lambda, dg, dbv, pg, pb);
    pg5 = pg[5], pb5 = pb[5];
    ck_assert(kfac_precond_bn(f, C, lambda, dg, dbv, dg, dbv) >= 0);
    ck_assert(dg[5] == pg5 && dbv[5] == pb5 && (g0 != dg[5] || b0 != dbv[5]));
    free(f), free(dg), free(dbv), free(pg), free(pb);
}
END_TEST

START_TEST(test_precond_identity_modes) {
    float V[5] = {1, -2, 3, 0.5f, 8}, U[5];
    ck_assert_int_eq(kfac_precond_identity(V, 5, 0.1f, KFAC_IDENTITY_SGD, U), 0);
    ck_assert(memcmp(U, V, sizeof V) == 0);
    ck_assert_int_eq(kfac_precond_identity(V, 5, 0.5f, KFAC_IDENTITY_DAMPED, U), 0);
    for (int i = 0; i < 5; i++) ck_assert(U[i] == V[i] * 2.0f);
    ck_assert_int_eq(kfac_precond_identity(V, 5, 0.0f, KFAC_IDENTITY_DAMPED, U), -EINVAL);
    ck_assert_int_eq(kfac_precond_identity(V, 5, 0.5f, (kfac_identity_mode_t)9, U), -EINVAL);
}
END_TEST

/* The caller's path: inverses held per factor; a later failed inversion
 * (NaN or indefinite-overflowing factor) leaves them in place, so the next
 * preconditioning equals the previous one bit for bit; no inverse yet ->
 * -ENODATA and the identity fallback. */
START_TEST(test_precond_after_failed_inverse_uses_previous) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    int n_out = 3, n_in = 4;
    float *A = s_random_spd(&r, n_in, 1.0), *G = s_random_spd(&r, n_out, 1.0);
    float *V = s_random_vec(&r, (size_t)n_out * n_in);
    float U1[12], U2[12];
    for (int m = 0; m < 2; m++) {
        kfac_inverse_stats_t st = {0};
        kfac_inverse_t *Ai = kfac_inverse_new(n_in), *Gi = kfac_inverse_new(n_out);
        ck_assert_int_eq(kfac_precond_kron(Ai, Gi, 0.1f, V, n_out, n_in, U1, NULL, NULL), -ENODATA);
        ck_assert_int_eq(kfac_precond_identity(V, 12, 0.1f, KFAC_IDENTITY_SGD, U1), 0);
        ck_assert_int_eq(kfac_inverse_compute(A, n_in, 0.1f, m, Ai, &st), 0);
        ck_assert_int_eq(kfac_inverse_compute(G, n_out, 0.1f, m, Gi, &st), 0);
        ck_assert_int_eq(kfac_precond_kron(Ai, Gi, 0.1f, V, n_out, n_in, U1, NULL, NULL), 0);
        float *A2 = malloc(sizeof(float) * n_in * n_in);
        memcpy(A2, A, sizeof(float) * n_in * n_in);
        A2[1] = NAN; /* upper triangle */
        ck_assert_int_lt(kfac_inverse_compute(A2, n_in, 0.1f, m, Ai, &st), 0);
        for (int i = 0; i < n_in * n_in; i++) A2[i] = 3e38f; /* overflows every method */
        ck_assert_int_lt(kfac_inverse_compute(A2, n_in, 3e38f, m, Ai, &st), 0);
        ck_assert_uint_eq(st.n_failures, 2);
        ck_assert_int_eq(kfac_precond_kron(Ai, Gi, 0.1f, V, n_out, n_in, U2, NULL, NULL), 0);
        ck_assert(memcmp(U1, U2, sizeof U1) == 0);
        /* a NaN gradient is reported, not silently propagated */
        float Vbad[12];
        memcpy(Vbad, V, sizeof Vbad);
        Vbad[5] = NAN;
        ck_assert_int_eq(kfac_precond_kron(Ai, Gi, 0.1f, Vbad, n_out, n_in, U2, NULL, NULL), -ERANGE);
        /* shape mismatch */
        ck_assert_int_eq(kfac_precond_kron(Gi, Ai, 0.1f, V, n_out, n_in, U2, NULL, NULL), -EINVAL);
        free(A2);
        kfac_inverse_free(&Ai);
        kfac_inverse_free(&Gi);
    }
    free(A), free(G), free(V);
}
END_TEST

/* A pool splits each large product by output columns, rows or slabs: the
 * result must equal the one-thread result (the oracle, itself checked
 * against the dense solves above) up to float rounding. Shapes above the
 * split threshold on every Kronecker mode, odd so that the slices differ
 * in size, 3 threads; Cholesky and eigen forms. Tolerance: max |diff|
 * <= 1e-5 * max |U| (the slices run the same BLAS kernels on the same
 * operands; measured differences are 0 or a few ulps). */
static double s_max_rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

START_TEST(test_precond_pool_matches_one_thread) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    nn_par_t *par = nn_par_new(3);
    ck_assert_ptr_nonnull(par);
    for (int rep = 0; rep < 2; rep++) {
        kfac_inv_method_t m = rep ? KFAC_INV_EIGEN : KFAC_INV_CHOLESKY;
        /* kron: G 131 x 131, A 157 x 157 (>= 2^20 multiply-adds each way) */
        int n_out = 131, n_in = 157;
        float *A = s_random_spd(&r, n_in, 1.0), *G = s_random_spd(&r, n_out, 2.0);
        kfac_inverse_t *Ai = s_inv(A, n_in, 0.1f, m), *Gi = s_inv(G, n_out, 0.1f, m);
        size_t N = (size_t)n_out * n_in;
        float *V = s_random_vec(&r, N), *U1 = malloc(sizeof(float) * N), *U3 = malloc(sizeof(float) * N);
        ck_assert_int_eq(kfac_precond_kron(Ai, Gi, 0.05f, V, n_out, n_in, U1, NULL, NULL), 0);
        ck_assert_int_eq(kfac_precond_kron(Ai, Gi, 0.05f, V, n_out, n_in, U3, NULL, par), 0);
        double d = s_max_rel_diff(U3, U1, N);
        ck_assert_msg(d <= 1e-5, "kron %s: pool vs one thread %g seed=%llu", kfac_inverse_method_name(m), d,
                      (unsigned long long)seed);
        free(A), free(G), free(V), free(U1), free(U3);
        kfac_inverse_free(&Ai);
        kfac_inverse_free(&Gi);

        /* kron3: G 129, Psi 67 (slabs), K 33: every mode over the threshold */
        int no = 129, C = 67, T = 33;
        float *K = s_random_spd(&r, T, 1.0), *P = s_random_spd(&r, C, 0.5), *G3 = s_random_spd(&r, no, 2.0);
        kfac_inverse_t *Ki = s_inv(K, T, 0.1f, m), *Pi = s_inv(P, C, 0.1f, m), *G3i = s_inv(G3, no, 0.1f, m);
        size_t N3 = (size_t)no * C * T;
        float *V3 = s_random_vec(&r, N3), *W1 = malloc(sizeof(float) * N3), *W3 = malloc(sizeof(float) * N3);
        ck_assert_int_eq(kfac_precond_kron3(Ki, Pi, G3i, 0.05f, V3, no, C, T, W1, NULL, NULL), 0);
        ck_assert_int_eq(kfac_precond_kron3(Ki, Pi, G3i, 0.05f, V3, no, C, T, W3, NULL, par), 0);
        d = s_max_rel_diff(W3, W1, N3);
        ck_assert_msg(d <= 1e-5, "kron3 %s: pool vs one thread %g seed=%llu", kfac_inverse_method_name(m), d,
                      (unsigned long long)seed);
        /* and the pool did not leave the input or the result's tail alone */
        ck_assert_msg(s_max_rel_diff(W3, V3, N3) > 1e-3, "kron3: the result equals the gradient");
        free(K), free(P), free(G3), free(V3), free(W1), free(W3);
        kfac_inverse_free(&Ki);
        kfac_inverse_free(&Pi);
        kfac_inverse_free(&G3i);
    }
    nn_par_free(&par);
    ck_assert_ptr_null(par);
}
END_TEST

/* The products split by the factor's rows (a factor larger than the
 * gradient) and the Psi side's slabs taken several per sgemm, on one and
 * three threads, against the inverses applied in double, mode by mode:
 * U[o, c, t] = sum G^-1[o, o'] Psi^-1[c, c'] K^-1[t, t'] V[o', c', t']
 * (kron: c absent, A^-1 along t). Cholesky inverses are explicit; eigen
 * ones mixed with them are applied as Q diag(1 / (v + damping)) Q^T, built
 * here in double. Tolerance 1e-5 relative to the largest value: float
 * products of at most a few hundred terms. */
static double *s_explicit_d(const kfac_inverse_t *h) {
    int n = h->n;
    double *M = calloc((size_t)n * n, sizeof(double));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (h->method == KFAC_INV_CHOLESKY) {
                M[(size_t)i * n + j] = h->inv[(size_t)i * n + j];
                continue;
            }
            double sum = 0.0;
            for (int k = 0; k < n; k++)
                sum += (double)h->Q[(size_t)i * n + k] * h->Q[(size_t)j * n + k] / ((double)h->v[k] + h->damping_used);
            M[(size_t)i * n + j] = sum;
        }
    return M;
}

/* X (d0, d1, d2) in double, M (d[m], d[m]) applied along mode m in place. */
static void s_apply_d(double *X, const int d[3], int m, const double *M) {
    size_t len = (size_t)d[0] * d[1] * d[2];
    double *Y = calloc(len, sizeof(double));
    for (int i0 = 0; i0 < d[0]; i0++)
        for (int i1 = 0; i1 < d[1]; i1++)
            for (int i2 = 0; i2 < d[2]; i2++) {
                int idx[3] = {i0, i1, i2}, i = idx[m];
                double sum = 0.0;
                for (int j = 0; j < d[m]; j++) {
                    idx[m] = j;
                    sum += M[(size_t)i * d[m] + j] * X[((size_t)idx[0] * d[1] + idx[1]) * d[2] + idx[2]];
                }
                Y[((size_t)i0 * d[1] + i1) * d[2] + i2] = sum;
            }
    memcpy(X, Y, len * sizeof(double));
    free(Y);
}

static void s_check_modes_d(const kfac_inverse_t *const fac[3], const int d[3], const float *V, const float *U,
                            const char *what, uint64_t seed) {
    size_t len = (size_t)d[0] * d[1] * d[2];
    double *X = malloc(len * sizeof(double)), scale = 1e-30, worst = 0.0;
    for (size_t i = 0; i < len; i++) X[i] = V[i];
    for (int m = 0; m < 3; m++) {
        if (!fac[m]) continue;
        double *M = s_explicit_d(fac[m]);
        s_apply_d(X, d, m, M);
        free(M);
    }
    for (size_t i = 0; i < len; i++) scale = fmax(scale, fabs(X[i]));
    for (size_t i = 0; i < len; i++) worst = fmax(worst, fabs(U[i] - X[i]) / scale);
    ck_assert_msg(worst <= 1e-5, "%s (%d, %d, %d): relative error %g seed=%llu", what, d[0], d[1], d[2], worst,
                  (unsigned long long)seed);
    free(X);
}

START_TEST(test_precond_split_and_batched_match_double) {
    uint64_t seed = test_seed();
    rng_t r;
    rng_seed(&r, seed);
    nn_par_t *par = nn_par_new(3);
    ck_assert_ptr_nonnull(par);
    /* kron: G larger than the gradient (split by G's rows), then A larger
     * (split by A's rows, the output's columns); each over 2^20 multiply-adds */
    const int shapes[2][2] = {{200 + (int)rng_below(&r, 20), 37}, {21, 250 + (int)rng_below(&r, 30)}};
    for (int rep = 0; rep < 4; rep++) {
        const int n_out = shapes[rep % 2][0], n_in = shapes[rep % 2][1];
        /* Cholesky, or the split factor in eigen form beside a Cholesky one:
         * op(M) = Q^T, then Q */
        kfac_inv_method_t mg = rep == 2 ? KFAC_INV_EIGEN : KFAC_INV_CHOLESKY;
        kfac_inv_method_t ma = rep == 3 ? KFAC_INV_EIGEN : KFAC_INV_CHOLESKY;
        float *A = s_random_spd(&r, n_in, 1.0), *G = s_random_spd(&r, n_out, 2.0);
        kfac_inverse_t *Ai = s_inv(A, n_in, 0.1f, ma), *Gi = s_inv(G, n_out, 0.1f, mg);
        size_t N = (size_t)n_out * n_in;
        float *V = s_random_vec(&r, N), *U = malloc(sizeof(float) * N);
        const kfac_inverse_t *fac[3] = {Gi, NULL, Ai};
        const int d[3] = {n_out, 1, n_in};
        for (int threads = 1; threads <= 3; threads += 2) {
            ck_assert_int_eq(kfac_precond_kron(Ai, Gi, 0.05f, V, n_out, n_in, U, NULL, threads > 1 ? par : NULL), 0);
            s_check_modes_d(fac, d, V, U, threads > 1 ? "kron, 3 threads" : "kron, 1 thread", seed);
        }
        free(A), free(G), free(V), free(U);
        kfac_inverse_free(&Ai);
        kfac_inverse_free(&Gi);
    }
    /* kron3 with few columns per slab (T < 32): groups of slabs, the last
     * one short; the Psi side over 2^20 multiply-adds, so split by slabs
     * too */
    for (int rep = 0; rep < 2; rep++) {
        const int no = 64 + (int)rng_below(&r, 16), C = 32 + (int)rng_below(&r, 8), T = 20 + (int)rng_below(&r, 10);
        kfac_inv_method_t mp = rep ? KFAC_INV_EIGEN : KFAC_INV_CHOLESKY;
        float *K = s_random_spd(&r, T, 1.0), *P = s_random_spd(&r, C, 0.5), *G = s_random_spd(&r, no, 2.0);
        kfac_inverse_t *Ki = s_inv(K, T, 0.1f, KFAC_INV_CHOLESKY), *Pi = s_inv(P, C, 0.1f, mp),
                       *Gi = s_inv(G, no, 0.1f, KFAC_INV_CHOLESKY);
        size_t N = (size_t)no * C * T;
        float *V = s_random_vec(&r, N), *U = malloc(sizeof(float) * N);
        const kfac_inverse_t *fac[3] = {Gi, Pi, Ki};
        const int d[3] = {no, C, T};
        for (int threads = 1; threads <= 3; threads += 2) {
            ck_assert_int_eq(kfac_precond_kron3(Ki, Pi, Gi, 0.05f, V, no, C, T, U, NULL, threads > 1 ? par : NULL),
                             0);
            s_check_modes_d(fac, d, V, U, threads > 1 ? "kron3, 3 threads" : "kron3, 1 thread", seed);
        }
        free(K), free(P), free(G), free(V), free(U);
        kfac_inverse_free(&Ki);
        kfac_inverse_free(&Pi);
        kfac_inverse_free(&Gi);
    }
    nn_par_free(&par);
}
END_TEST

Suite *make_suite(void) {
    Suite *s = suite_create("kfac_precond");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_precond_kron_cholesky_matches_dense_solve);
    tcase_add_test(tc, test_precond_kron_eigen_matches_dense_solve);
    tcase_add_test(tc, test_precond_kron_mixed_forms_match_dense_solve);
    tcase_add_test(tc, test_precond_kron3_matches_dense_solve);
    tcase_add_test(tc, test_precond_bn_matches_dense_2x2);
    tcase_add_test(tc, test_precond_identity_modes);
    tcase_add_test(tc, test_precond_after_failed_inverse_uses_previous);
    tcase_add_test(tc, test_precond_pool_matches_one_thread);
    tcase_add_test(tc, test_precond_split_and_batched_match_double);
    suite_add_tcase(s, tc);
    return s;
}
