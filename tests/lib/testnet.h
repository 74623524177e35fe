/* tests/lib/testnet.h — small networks with fresh random content for the
 * tests that run one network on two code paths (tests/backend/: the CPU
 * backend against direct calls, the CUDA backend against the CPU one).
 *
 * float32, the layouts of common/nn/nn.h. Every helper fails the running
 * Check test (ck_assert) on error. */
#ifndef KFAC_TESTS_LIB_TESTNET_H
#define KFAC_TESTS_LIB_TESTNET_H

#include <stddef.h>

#include "common/base/rng.h"
#include "common/nn/nn.h"

/* Parse a model description for batch capacity batch; the caller owns the
 * net (net_free). */
net_t *testnet_parse(const char *text, int batch);

/* Parameters away from their trivial init, so that every term of every layer
 * is exercised: net_init_params from a draw of r, then random biases and
 * batch-norm gamma, beta and running statistics. */
void testnet_randomize(net_t *net, rng_t *r);

/* x[0..n) from N(0, 1), from U[0, 1); labels y[0..n) uniform in [0, classes). */
void testnet_fill_normal(rng_t *r, float *x, size_t n);
void testnet_fill_uniform(rng_t *r, float *x, size_t n);
void testnet_fill_labels(rng_t *r, int *y, int n, int classes);

#endif
