/* tests/lib/stats_oracle.h — double-precision oracles and checks the K-FAC
 * statistics tests share (tests/kfac/test_kfac_stats*.c): float-vs-double
 * comparisons with stated relative tolerances, dense Fisher blocks built
 * from per-example gradients, a direct convolution geometry independent of
 * nn.c, and the leading singular triple by power iteration. Every check
 * fails the calling Check test with the seed in its message. */
#ifndef KFAC_TESTS_LIB_STATS_ORACLE_H
#define KFAC_TESTS_LIB_STATS_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/rng.h"
#include "tests/lib/seed.h"

#define RTOL_EXACT 1e-5 /* identities that hold exactly in real arithmetic */
#define RTOL_SUM 2e-5   /* float32 SYRK/GEMV sums vs double */
#define RTOL_NET 1e-4   /* batched net pass vs per-example net passes */
#define SEEDED()                  \
    uint64_t seed = test_seed();     \
    rng_t rng;                    \
    rng_seed(&rng, seed)
#define NEWF(n) ((float *)oracle_alloc((size_t)(n) * sizeof(float)))
#define NEWD(n) ((double *)oracle_alloc((size_t)(n) * sizeof(double)))
typedef struct { int C, H, W, k, stride, pad, OH, OW; } oracle_geom_t;

void oracle_randn(rng_t *r, float *x, size_t n);
void *oracle_alloc(size_t n);
void oracle_check_close_floor(const char *what, const float *got, const double *ref, size_t n, double rtol,
                                double floor, uint64_t seed);
void oracle_check_close(const char *what, const float *got, const double *ref, size_t n, double rtol,
                          uint64_t seed);
double oracle_max_abs(const float *x, size_t n);
void oracle_check_kron(const char *what, const float *A, int dA, const float *G, int dG, const double *F,
                         double rtol, uint64_t seed);
void oracle_add_fisher(double *F, const double *V, int out, int dA, double w);
void oracle_add_outer(double *M, const double *x, int d, double w);
void oracle_check_symmetric(const char *what, const float *F, int d, uint64_t seed);
oracle_geom_t oracle_geom(int C, int H, int W, int k, int stride, int pad);
void oracle_patch(const oracle_geom_t *g, const float *x, int oy, int ox, int bias, double *p);
float *oracle_im2col(const oracle_geom_t *g, const float *x, int n);
void oracle_conv_refs(const oracle_geom_t *g, const float *x, const double *gs, int n, int out, int bias,
                        double *A_kfc, double *G_kfc, double *A_avg, double *G_avg);
double oracle_power_svd(const float *x, int C, int T, double *u, double *v);

#endif
