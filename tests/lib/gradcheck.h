/* tests/lib/gradcheck.h — the finite-difference oracle of the layer tests
 * (tests/nn/test_nn_grad.c explains the method, step and tolerance). Check
 * assertions fail the calling test. */
#ifndef KFAC_TESTS_GRADCHECK_H
#define KFAC_TESTS_GRADCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/rng.h"
#include "common/nn/nn.h"

#define GC_H 0x1p-7      /* finite-difference step, 0.0078 (values are O(1)) */
#define GC_TOL 2e-2      /* see the header comment */
#define GC_FLOOR 1e-2    /* gradient scale below which errors are absolute */
#define GC_KINK_PCT 65   /* most coordinates (%) skipped at kinks in deeper models */
#define GC_BN_MIN_STD 0.3 /* train-mode bn: smallest batch std of any channel */
#define GC_DRAWS 4       /* random draws (shapes, params, inputs) per test */

/* Threads of every net gc_build makes (net_set_threads): 1 by default. */
extern int gc_threads;
/* Conv engine of every net gc_build makes (net_set_conv_engine): OpenBLAS by default. */
extern nn_conv_engine_t gc_conv_engine;

/* Fills x (n, in_size) with a layer test's inputs (ctx: its own data). */
typedef void (*fill_fn)(rng_t *r, float *x, const net_t *net, int n, void *ctx);

int gc_between(rng_t *r, int lo, int hi);
__attribute__((format(printf, 3, 4))) void gc_cat(char *buf, size_t cap, const char *fmt, ...);
net_t *gc_build(const char *text, int batch);
void gc_fill_normal(rng_t *r, float *x, size_t n, double scale);
void gc_fill_away_from_zero(rng_t *r, float *x, size_t n, double margin);
void gc_fill_pool_gaps(rng_t *r, float *x, int n, int C, int H, int W, int k, int s, int pad, double gap);
void gc_random_params(net_t *net, rng_t *r);
int gc_gradcheck(net_t *net, float *x, int n, int train, int *labels, float *soft, uint64_t seed, int draw, int max_skip_pct);
int *gc_labels(rng_t *r, int n, int K);
void gc_draw(rng_t *r, net_t *net, float *x, int n, int train, fill_fn fill, void *ctx);
/* Build text, random params, inputs from fill (or normal), labels, run the
 * check, free. fill may be NULL (standard normal inputs). */
void gc_run(const char *text, rng_t *r, int n, int train, int soft_labels, fill_fn fill, void *ctx, uint64_t seed, int draw, int max_skip_pct);

#endif
