/* bench/bench_ps_verify.c — ps/verify.h's check of an inverse against the
 * factor its job was cut from: its cost at the cut and at the check, the
 * residual of honest float inverses (Cholesky and eigen forms) against the
 * tolerance, and how often an inverse with its sign flipped along
 * eigenvectors passes (the check before ps/verify.h kept a subspace: one
 * random probe x, ||H (F + d I) x - x|| / ||x|| <= ps_verify_tol(tr F, d);
 * now: the worst direction of a PS_VERIFY_PROBES-dimensional subspace).
 *
 * Factors: F = X^T X / m (n x n, float) from m Gaussian rows, "white"
 * (m = n / 4: singular, as the factors of small batches are) or "decaying"
 * (m = 2n, column j of X scaled by 1 / (1 + j / 8): a spectrum falling over
 * four orders of magnitude, as averaged factors have), damping d = r tr F / n.
 * Flips: H' = H - 2 / (v_q + d) q q^T for eigenvectors q of F (the largest,
 * the smallest, random ones), H the honest Cholesky-form inverse.
 *
 * Prints figures, never fails on time. Usage: bench_ps_verify [n ...]
 * (default 257 1025 3137: the blocks of models/ and experiments/ reach
 * 3137); KFAC_BENCH_TRIALS sets the random subspaces tried per flip
 * (default 200). One OpenBLAS thread (only the honest inverses use it). */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/blas.h"
#include "common/base/clock.h"
#include "common/base/rng.h"
#include "common/kfac/kfac_inverse.h"
#include "common/kfac/kfac_linalg.h"
#include "ps/verify.h"

static float *s_factor(rng_t *r, int n, int decaying) {
    const int m = decaying ? 2 * n : (n / 4 > 1 ? n / 4 : 1);
    float *X = malloc((size_t)m * n * sizeof(float)), *F = calloc((size_t)n * n, sizeof(float));
    if (!X || !F) {
        free(X);
        free(F);
        return NULL;
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            X[(size_t)i * n + j] = (float)(rng_normal(r) * (decaying ? 1.0 / (1.0 + j / 8.0) : 1.0));
    /* F (upper) = X^T X / m, row-major n x n */
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, n, m, 1.0f / (float)m, X, n, 0.0f, F, n);
    kfac_linalg_symmetrize_upper(F, n);
    free(X);
    return F;
}

/* The check before: one probe x, ||H (F + d I) x - x|| / ||x|| (H full, n x n). */
static double s_one_probe(rng_t *r, const float *F, const float *H, int n, float d, double *x, double *y) {
    for (int i = 0; i < n; i++) x[i] = rng_normal(r);
    for (int i = 0; i < n; i++) {
        double s = (double)d * x[i];
        for (int j = 0; j < n; j++) s += (double)F[(size_t)i * n + j] * x[j];
        y[i] = s;
    }
    double en = 0.0, xn = 0.0;
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < n; j++) s += (double)H[(size_t)i * n + j] * y[j];
        en += (s - x[i]) * (s - x[i]);
        xn += x[i] * x[i];
    }
    return sqrt(en / xn);
}

static int s_cut_check(ps_verify_t *v, uint64_t *id, const float *F, int n, float d, const kfac_inverse_t *inv,
                       float d_used, double *res, double *ms_cut, double *ms_check) {
    char why[400];
    double t0 = clock_now_ms();
    if (ps_verify_cut(v, 0, ++*id, F, n, d) != 0) return -EINVAL;
    double t1 = clock_now_ms();
    int rc = ps_verify_check(v, 0, *id, inv, d_used, res, why, sizeof why);
    double t2 = clock_now_ms();
    if (ms_cut) *ms_cut = t1 - t0;
    if (ms_check) *ms_check = t2 - t1;
    return rc;
}

static int s_bench(int n, int trials, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    int bn[1] = {n};
    ps_verify_t *v = ps_verify_new(bn, 1, seed);
    kfac_inverse_t *chol = kfac_inverse_new(n), *eig = kfac_inverse_new(n), *flip = kfac_inverse_new(n);
    float *H = malloc((size_t)n * n * sizeof(float));
    double *x = malloc((size_t)n * sizeof(double)), *y = malloc((size_t)n * sizeof(double));
    uint64_t id = 0;
    int rc = -1;
    if (!v || !chol || !eig || !flip || !H || !x || !y) goto cleanup;
    for (int decaying = 0; decaying < 2; decaying++) {
        float *F = s_factor(&r, n, decaying);
        if (!F) goto cleanup;
        const double tr = kfac_linalg_trace(F, n);
        double fro2 = 0.0;
        for (size_t e = 0; e < (size_t)n * n; e++) fro2 += (double)F[e] * F[e];
        double t0 = clock_now_ms();
        if (kfac_inverse_compute(F, n, 1.0f, KFAC_INV_EIGEN, eig, NULL) != 0 || eig->method != KFAC_INV_EIGEN) {
            free(F);
            goto cleanup;
        }
        const double ms_eig = clock_now_ms() - t0;
        static const double ratios[] = {1e-1, 1e-2, 1e-3, 1e-4};
        for (size_t ri = 0; ri < sizeof ratios / sizeof ratios[0]; ri++) {
            const float d = (float)(ratios[ri] * tr / n);
            t0 = clock_now_ms();
            if (kfac_inverse_compute(F, n, d, KFAC_INV_CHOLESKY, chol, NULL) != 0) {
                free(F);
                goto cleanup;
            }
            const double ms_chol = clock_now_ms() - t0;
            const float du = chol->method == KFAC_INV_CHOLESKY ? chol->damping_used : d;
            eig->damping_used = d;
            double res_c = NAN, res_e = NAN, cut_ms = 0, chk_c = 0, chk_e = 0;
            int rc_c = s_cut_check(v, &id, F, n, d, chol, du, &res_c, &cut_ms, &chk_c);
            int rc_e = s_cut_check(v, &id, F, n, d, eig, d, &res_e, NULL, &chk_e);
            const double kappa = ((double)eig->v[n - 1] + d) / ((double)(eig->v[0] > 0 ? eig->v[0] : 0) + d);
            printf("%5d %-8s %6.0e %9.3g %7.3g %7.3g %9.3g%s %9.3g%s %7.1f %7.1f %7.1f %8.0f %8.0f\n", n,
                   decaying ? "decaying" : "white", ratios[ri], kappa, ps_verify_tol(tr, d),
                   ps_verify_tol(sqrt(fro2), d), res_c, rc_c ? "!" : " ", res_e, rc_e ? "!" : " ", cut_ms, chk_c,
                   chk_e, ms_chol, ms_eig);
            fflush(stdout);
            /* flips, in the Cholesky form of the honest inverse */
            static const char *kinds[] = {"top", "bottom", "random", "4 top", "4 random"};
            for (int kd = 0; kd < 5; kd++) {
                int acc_old = 0, acc_new = 0, unloadable = 0;
                double worst_new = INFINITY;
                const int tr_k = kd < 2 || kd == 3 ? (trials < 20 ? trials : 20) : trials; /* fixed q: fewer */
                for (int t = 0; t < tr_k; t++) {
                    memcpy(H, chol->inv, (size_t)n * n * sizeof(float));
                    const int nf = kd >= 3 ? 4 : 1;
                    for (int f = 0; f < nf && f < n; f++) {
                        const int q = kd == 0 || kd == 3 ? n - 1 - f : kd == 1 ? 0 : (int)rng_below(&r, (uint32_t)n);
                        const double s = -2.0 / ((double)eig->v[q] + du);
                        for (int i = 0; i < n; i++)
                            for (int j = 0; j < n; j++)
                                H[(size_t)i * n + j] +=
                                    (float)(s * eig->Q[(size_t)i * n + q] * eig->Q[(size_t)j * n + q]);
                    }
                    if (kfac_inverse_load_cholesky(flip, H, du) != 0) { /* a non-positive diagonal: the loader refuses it */
                        unloadable++;
                        continue;
                    }
                    if (s_one_probe(&r, F, H, n, du, x, y) <= ps_verify_tol(tr, du)) acc_old++;
                    double res = NAN;
                    if (s_cut_check(v, &id, F, n, d, flip, du, &res, NULL, NULL) == 0) acc_new++;
                    if (res < worst_new) worst_new = res;
                }
                printf("        flip %-8s: passed %3d of %3d before, %3d of %3d now (smallest residual now %.3g; %d not "
                       "loadable)\n", kinds[kd], acc_old, tr_k, acc_new, tr_k, worst_new, unloadable);
                fflush(stdout);
            }
        }
        free(F);
    }
    rc = 0;
cleanup:
    if (rc) fprintf(stderr, "bench_ps_verify: failed at n=%d\n", n);
    ps_verify_free(&v);
    kfac_inverse_free(&chol);
    kfac_inverse_free(&eig);
    kfac_inverse_free(&flip);
    free(H);
    free(x);
    free(y);
    return rc;
}

int main(int argc, char **argv) {
    blas_restart_if_generic(argv);
    blas_set_threads(1);
    const char *e = getenv("KFAC_BENCH_TRIALS");
    const int trials = e && atoi(e) >= 0 ? atoi(e) : 200;
    printf("bench_ps_verify: %d directions per probe (PS_VERIFY_PROBES), %d random subspaces per random flip\n",
           PS_VERIFY_PROBES, trials);
    printf("    n factor   d/mean     kappa tol(trF) tol(|F|) honest-chol honest-eig  cut-ms chk-c-ms chk-e-ms "
           "chol-ms  eig-ms\n");
    static const int def[] = {257, 1025, 3137};
    const int n_sizes = argc > 1 ? argc - 1 : 3;
    for (int k = 0; k < n_sizes; k++) {
        const int n = argc > 1 ? atoi(argv[k + 1]) : def[k];
        if (n < 2 || s_bench(n, trials, 0xbe7c0000ULL + (uint64_t)n) != 0) return 1;
    }
    return 0;
}
