/* bench/bench_kfac_stats.c — throughput of the K-FAC factor statistics
 * (common/kfac/kfac_stats.c) against raw sgemm on the same shapes, and the
 * doubly-factored vs standard approximation of a wide fc layer. Prints
 * figures; never passes or fails on time.
 *
 * Part 1: for factor sizes d = 256, 1024, 2048, the fc statistics (A from
 * a (n, d-1) with the homogeneous coordinate, G from dy (n, d)) and the conv
 * KFC statistics (kfac_stats_conv_cm, the path kfac_stats_compute takes:
 * channel-major patches (d-1, n*P) as nn's l->cols, dy (n, d, P)) are timed
 * and reported in GFLOP/s of useful work (a SYRK of an
 * m x k matrix is m k (k+1) flops; the column means 2 m k), next to sgemm
 * computing the same Gram matrices in full (2 m k^2 flops each). The ratio
 * stats/sgemm is the efficiency figure (target >= 80%).
 *
 * Part 2: an fc layer with a 7x7x64 = 3136 input feature map and 1024
 * outputs: time and memory of statistics + damped Cholesky inverses for the
 * standard (A 3137^2, G 1024^2) and the doubly-factored (K 49^2, Psi 64^2,
 * G 1024^2, Gbias 1024^2) approximations, side by side.
 *
 * Part 1 times are the best of several repetitions (at least 3, or 1 s),
 * statistics and sgemm alternating so both see the same machine load.
 * OPENBLAS_NUM_THREADS sets the BLAS thread count; it is printed.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/blas.h"
#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_linalg.h"
#include "common/kfac/kfac_stats.h"
#include "common/base/rng.h"

static float *s_rand(rng_t *r, size_t n, int nonneg) {
    float *x = malloc(n * sizeof *x);
    if (!x) {
        fprintf(stderr, "bench_kfac_stats: out of memory (%zu floats)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        double v = rng_normal(r);
        x[i] = (float)(nonneg ? fabs(v) : v);
    }
    return x;
}

typedef struct {
    const float *x, *dy;
    int n, P, K, out;
    int cm;  /* x is channel-major (K, n*P) (conv), else (n*P, K) (fc) */
    float *A, *G, *work, *C1, *C2;
} job_t;

typedef int (*fn_t)(job_t *);

static double s_time(fn_t f, job_t *j) {
    double t0 = clock_now_s();
    if (f(j) != 0) {
        fprintf(stderr, "bench_kfac_stats: call failed\n");
        exit(1);
    }
    return clock_now_s() - t0;
}

/* Best times of f and g, measured alternately so that both see the same
 * machine load (the ratio is the figure of interest). */
static void s_best_pair(fn_t f, fn_t g, job_t *j, double *tf, double *tg) {
    double start = clock_now_s();
    *tf = *tg = 1e30;
    for (int rep = 0; rep < 50; rep++) {
        double a = s_time(f, j), b = s_time(g, j);
        if (a < *tf) *tf = a;
        if (b < *tg) *tg = b;
        if (rep >= 2 && clock_now_s() - start > 1.0) break;
    }
}

static int s_fc(job_t *j) {
    return kfac_stats_fc(j->x, j->dy, j->n, j->K, j->out, 1, (float)j->n, j->A, j->G, j->work);
}

static int s_kfc(job_t *j) {
    return kfac_stats_conv_cm(KFAC_MODE_KFC, j->x, j->dy, j->n, j->P, j->K, j->out, 1, (float)j->n, j->A, j->G,
                              j->work);
}

/* The same two Gram matrices with plain sgemm (full matrices). */
static int s_gemm(job_t *j) {
    int m = j->n * j->P;
    if (!j->cm)
        /* C1 (K, K) = x^T x; x (m, K) row-major (fc: one row per example). */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j->K, j->K, m, 1.0f, j->x, j->K, j->x, j->K, 0.0f,
                    j->C1, j->K);
    else
        /* C1 (K, K) = x x^T; x (K, m) row-major (conv: channel-major patches). */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->K, j->K, m, 1.0f, j->x, m, j->x, m, 0.0f, j->C1,
                    j->K);
    /* C2 (out, out) = dy^T dy; dy viewed as (m, out) row-major. */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j->out, j->out, m, 1.0f, j->dy, j->out, j->dy, j->out,
                0.0f, j->C2, j->out);
    return 0;
}

static void s_part1(rng_t *r) {
    const int sizes[3] = {256, 1024, 2048};
    printf("\n== factor statistics vs sgemm (GFLOP/s of useful work; sgemm computes the full Gram)\n");
    printf("%-5s %6s %7s %10s %10s %10s %10s %7s\n", "kind", "d", "rows", "stats ms", "stats GF/s", "sgemm ms",
           "sgemm GF/s", "ratio");
    for (int q = 0; q < 3; q++) {
        int d = sizes[q];
        for (int kind = 0; kind < 2; kind++) {
            job_t j = {0};
            j.n = kind == 0 ? 1024 : 16;
            j.P = kind == 0 ? 1 : 64;
            j.cm = kind == 1;
            j.K = d - 1;
            j.out = d;
            size_t m = (size_t)j.n * j.P;
            float *x = s_rand(r, m * j.K, 1), *dy = s_rand(r, m * j.out, 0);
            j.x = x;
            j.dy = dy;
            j.A = malloc((size_t)d * d * sizeof(float));
            j.G = malloc((size_t)d * d * sizeof(float));
            j.C1 = malloc((size_t)d * d * sizeof(float));
            j.C2 = malloc((size_t)d * d * sizeof(float));
            size_t wl = kind == 0 ? (size_t)j.n : kfac_stats_conv_cm_work_len(KFAC_MODE_KFC, j.n, j.P, j.K, j.out);
            j.work = malloc(wl * sizeof(float));
            if (!j.A || !j.G || !j.C1 || !j.C2 || !j.work) {
                fprintf(stderr, "bench_kfac_stats: out of memory\n");
                exit(1);
            }
            double ts, tg;
            s_best_pair(kind == 0 ? s_fc : s_kfc, s_gemm, &j, &ts, &tg);
            double useful = (double)m * j.K * (j.K + 1) + 2.0 * m * j.K + (double)m * j.out * (j.out + 1);
            double gemm = 2.0 * m * j.K * j.K + 2.0 * m * j.out * j.out;
            double gs = useful / ts * 1e-9, gg = gemm / tg * 1e-9;
            printf("%-5s %6d %7zu %10.2f %10.1f %10.2f %10.1f %6.0f%%\n", kind == 0 ? "fc" : "kfc", d, m, ts * 1e3, gs,
                   tg * 1e3, gg, 100.0 * gs / gg);
            free(x); free(dy); free(j.A); free(j.G); free(j.C1); free(j.C2); free(j.work);
        }
    }
}

/* Damped Cholesky inverses of the given factors with factored Tikhonov
 * damping: lambda split by pi (2 factors) or pi3 (3 factors, Gbias gets
 * lambda itself). Returns seconds, adds the inverse floats to *inv_floats. */
static double s_invert(float **F, const int *dims, int nf, int doubly, double lambda, size_t *inv_floats) {
    float d[4];
    if (!doubly) {
        float pi = kfac_pi_trace(F[0], dims[0], F[1], dims[1]);
        d[0] = pi * (float)sqrt(lambda);
        d[1] = (float)sqrt(lambda) / pi;
    } else {
        float pi[3];
        kfac_pi_trace3(F[0], dims[0], F[1], dims[1], F[2], dims[2], pi);
        for (int k = 0; k < 3; k++) d[k] = pi[k] * (float)cbrt(lambda);
        d[3] = (float)lambda;
    }
    double t0 = clock_now_s();
    for (int k = 0; k < nf; k++) {
        kfac_inverse_t *inv = kfac_inverse_new(dims[k]);
        if (!inv || kfac_inverse_compute(F[k], dims[k], d[k], KFAC_INV_CHOLESKY, inv, NULL) != 0) {
            fprintf(stderr, "bench_kfac_stats: inverse of a %d x %d factor failed\n", dims[k], dims[k]);
            exit(1);
        }
        *inv_floats += (size_t)dims[k] * dims[k];
        kfac_inverse_free(&inv);
    }
    return clock_now_s() - t0;
}

static void s_part2(rng_t *r) {
    const int C = 64, H = 7, W = 7, T = H * W, in = C * T, out = 1024, n = 256;
    const double lambda = 1e-3;
    printf("\n== fc %dx%dx%d = %d -> %d, batch %d: standard vs doubly factored (damped Cholesky inverses)\n", C, H, W,
           in, out, n);
    float *a = s_rand(r, (size_t)n * in, 1), *dy = s_rand(r, (size_t)n * out, 0);
    for (size_t i = 0; i < (size_t)n * out; i++) dy[i] /= (float)n;

    /* standard */
    int ds[2] = {in + 1, out};
    float *Fs[2] = {malloc((size_t)ds[0] * ds[0] * sizeof(float)), malloc((size_t)out * out * sizeof(float))};
    float *work = malloc((size_t)n * sizeof(float));
    double t0 = clock_now_s();
    if (!Fs[0] || !Fs[1] || !work || kfac_stats_fc(a, dy, n, in, out, 1, (float)n, Fs[0], Fs[1], work) != 0) {
        fprintf(stderr, "bench_kfac_stats: standard statistics failed\n");
        exit(1);
    }
    double st_stats = clock_now_s() - t0;
    size_t st_inv = 0;
    double st_invt = s_invert(Fs, ds, 2, 0, lambda, &st_inv);
    size_t st_fac = (size_t)ds[0] * ds[0] + (size_t)out * out;

    /* doubly */
    int dd[4] = {T, C, out, out};
    float *Fd[4];
    for (int k = 0; k < 4; k++) Fd[k] = malloc((size_t)dd[k] * dd[k] * sizeof(float));
    float *dwork = malloc(kfac_stats_doubly_work_len(n, C, T) * sizeof(float));
    t0 = clock_now_s();
    if (!Fd[0] || !Fd[1] || !Fd[2] || !Fd[3] || !dwork ||
        kfac_stats_doubly(a, dy, n, C, T, out, (float)n, Fd[0], Fd[1], Fd[2], Fd[3], dwork) != 0) {
        fprintf(stderr, "bench_kfac_stats: doubly statistics failed\n");
        exit(1);
    }
    double db_stats = clock_now_s() - t0;
    size_t db_inv = 0;
    double db_invt = s_invert(Fd, dd, 4, 1, lambda, &db_inv);
    size_t db_fac = 0;
    for (int k = 0; k < 4; k++) db_fac += (size_t)dd[k] * dd[k];

    const double MB = 1.0 / (1024.0 * 1024.0);
    printf("%-26s %14s %14s\n", "", "standard", "doubly");
    printf("%-26s %14s %14s\n", "factors", "3137^2,1024^2", "49^2,64^2,2x1024^2");
    printf("%-26s %14.1f %14.1f\n", "statistics ms", st_stats * 1e3, db_stats * 1e3);
    printf("%-26s %14.1f %14.1f\n", "inverses ms", st_invt * 1e3, db_invt * 1e3);
    printf("%-26s %14.1f %14.1f\n", "total ms", (st_stats + st_invt) * 1e3, (db_stats + db_invt) * 1e3);
    printf("%-26s %14.1f %14.1f\n", "factor memory MiB", st_fac * 4 * MB, db_fac * 4 * MB);
    printf("%-26s %14.1f %14.1f\n", "inverse memory MiB", st_inv * 4 * MB, db_inv * 4 * MB);
    printf("%-26s %14.1f %14.1f\n", "wire (packed) MiB",
           (double)(kfac_linalg_packed_len(ds[0]) + kfac_linalg_packed_len(ds[1])) * 4 * MB,
           (double)(kfac_linalg_packed_len(T) + kfac_linalg_packed_len(C) + 2 * kfac_linalg_packed_len(out)) * 4 * MB);
    printf("(one timing each: the statistics of one batch and one inversion of every factor)\n");
    free(a); free(dy); free(work); free(dwork);
    for (int k = 0; k < 2; k++) free(Fs[k]);
    for (int k = 0; k < 4; k++) free(Fd[k]);
}

int main(int argc, char **argv) {
    (void)argc;
    blas_restart_if_generic(argv); /* OpenBLAS's fast kernels, as every kfac program uses */
    rng_t r;
    rng_seed(&r, 12345);
    printf("bench_kfac_stats: OpenBLAS %s, %d thread(s)\n", openblas_get_config(), openblas_get_num_threads());
    s_part1(&r);
    s_part2(&r);
    return 0;
}
