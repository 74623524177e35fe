/* bench/bench_kfac_inverse.c — cost of one damped factor inverse through
 * kfac_inverse_compute (Cholesky and eigen forms) next to a bare LAPACK
 * spotrf + spotri on the same matrix, for n = 256, 1024, 2048.
 *
 * Prints figures, never fails on time. The ratios (library / bare, eigen /
 * Cholesky) are the machine-independent part; the target for the library's
 * Cholesky path is within 1.2x of the bare calls (its extra work is O(n^2):
 * the finiteness scan, one copy, mirroring the triangle and checking the
 * result, against the O(n^3) factorization).
 *
 * Usage: bench_kfac_inverse [threads]   (KFAC_BENCH_THREADS is read when no
 * argument is given; default: the online CPUs). The count is always set
 * with openblas_set_num_threads and printed. */
#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/blas.h"
#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_linalg.h"
#include "common/base/rng.h"

static int s_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double s_median(double *t, int k) {
    qsort(t, (size_t)k, sizeof(double), s_cmp);
    return k % 2 ? t[k / 2] : 0.5 * (t[k / 2 - 1] + t[k / 2]);
}

/* F (n, n) symmetric = X X^T / m, X (n, m) normal, m = 2n: a well-conditioned
 * covariance-like factor. */
static float *s_factor(int n, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    int m = 2 * n;
    float *X = malloc(sizeof(float) * (size_t)n * (size_t)m);
    float *F = calloc((size_t)n * (size_t)n, sizeof(float));
    if (!X || !F) {
        free(X);
        free(F);
        return NULL;
    }
    for (size_t i = 0; i < (size_t)n * (size_t)m; i++) X[i] = (float)rng_normal(&r);
    /* F (upper) = X X^T / m; row-major. */
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, n, m, 1.0f / (float)m, X, m, 0.0f, F, n);
    kfac_linalg_symmetrize_upper(F, n);
    free(X);
    return F;
}

static int s_bench(int n, int reps) {
    const float d = 1e-3f;
    float *F = s_factor(n, 0x5eed0000u + (uint64_t)n);
    float *a = malloc(sizeof(float) * (size_t)n * (size_t)n);
    kfac_inverse_t *h = kfac_inverse_new(n);
    double *t_bare = malloc(sizeof(double) * (size_t)reps);
    double *t_chol = malloc(sizeof(double) * (size_t)reps);
    double *t_eig = malloc(sizeof(double) * (size_t)reps);
    int rc = -1;
    if (!F || !a || !h || !t_bare || !t_chol || !t_eig) {
        fprintf(stderr, "bench_kfac_inverse: out of memory at n=%d\n", n);
        goto cleanup;
    }
    kfac_inverse_stats_t st = {0};
    /* warm-up: page in the buffers, size the eigen workspace, start threads */
    if (kfac_inverse_compute(F, n, d, KFAC_INV_CHOLESKY, h, &st) ||
        kfac_inverse_compute(F, n, d, KFAC_INV_EIGEN, h, &st)) {
        fprintf(stderr, "bench_kfac_inverse: inversion failed at n=%d\n", n);
        goto cleanup;
    }
    for (int k = 0; k < reps; k++) {
        memcpy(a, F, sizeof(float) * (size_t)n * (size_t)n); /* not timed: LAPACK overwrites */
        kfac_linalg_add_diagonal(a, n, d);
        double t0 = clock_now_s();
        /* bare: F + dI = L L^T (column-major lower = row-major upper) ... */
        lapack_int info = LAPACKE_spotrf_work(LAPACK_COL_MAJOR, 'L', n, a, n);
        /* ... and (L L^T)^{-1} over the same triangle */
        if (info == 0) info = LAPACKE_spotri_work(LAPACK_COL_MAJOR, 'L', n, a, n);
        t_bare[k] = clock_now_s() - t0;
        if (info != 0) {
            fprintf(stderr, "bench_kfac_inverse: bare spotrf/spotri info=%d\n", (int)info);
            goto cleanup;
        }
        t0 = clock_now_s();
        int e = kfac_inverse_compute(F, n, d, KFAC_INV_CHOLESKY, h, &st);
        t_chol[k] = clock_now_s() - t0;
        t0 = clock_now_s();
        e |= kfac_inverse_compute(F, n, d, KFAC_INV_EIGEN, h, &st);
        t_eig[k] = clock_now_s() - t0;
        if (e) {
            fprintf(stderr, "bench_kfac_inverse: inversion failed at n=%d\n", n);
            goto cleanup;
        }
    }
    double bare = s_median(t_bare, reps), chol = s_median(t_chol, reps),
           eig = s_median(t_eig, reps);
    double gflop = (double)n * n * n * 1e-9; /* potrf n^3/3 + potri 2n^3/3 */
    printf("%6d %5d %10.2f %10.2f %10.2f %9.3f %9.2f %9.2f %9.2f\n", n, reps, 1e3 * bare,
           1e3 * chol, 1e3 * eig, chol / bare, eig / chol, gflop / bare,
           (double)st.n_ok_first_try / (double)st.n_calls);
    rc = 0;
cleanup:
    free(F);
    free(a);
    free(t_bare);
    free(t_chol);
    free(t_eig);
    kfac_inverse_free(&h);
    return rc;
}

int main(int argc, char **argv) {
    blas_restart_if_generic(argv); /* OpenBLAS's fast kernels, as every kfac program uses */
    const char *arg = argc > 1 ? argv[1] : getenv("KFAC_BENCH_THREADS");
    long t = arg && *arg ? strtol(arg, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    if (t < 1 || t > 1024) {
        fprintf(stderr, "usage: %s [threads 1..1024]\n", argv[0]);
        return 2;
    }
    openblas_set_num_threads((int)t);
    printf("bench_kfac_inverse: damped inverse of one factor F = X X^T/(2n) + 1e-3 I\n");
    printf("openblas_set_num_threads(%ld) (%s); openblas_get_num_threads() = %d\n", t,
           arg && *arg ? "requested" : "online CPUs", openblas_get_num_threads());
    printf("median of reps; ratios: lib/bare = kfac_inverse_compute(CHOLESKY) over bare "
           "spotrf+spotri (target <= 1.2), eig/chol = EIGEN over CHOLESKY\n");
    printf("%6s %5s %10s %10s %10s %9s %9s %9s %9s\n", "n", "reps", "bare_ms", "lib_ms",
           "eigen_ms", "lib/bare", "eig/chol", "bare_GF/s", "ok_1st");
    const int sizes[] = {256, 1024, 2048};
    const int reps[] = {15, 5, 3};
    for (int i = 0; i < 3; i++)
        if (s_bench(sizes[i], reps[i])) return 1;
    return 0;
}
