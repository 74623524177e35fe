/* tests/lib/testnet.c — see testnet.h. */
#include "tests/lib/testnet.h"

#include <check.h>
#include <stdint.h>

net_t *testnet_parse(const char *text, int batch) {
    char err[512];
    net_t *net = net_parse(text, "test", batch, err, sizeof err);
    ck_assert_msg(net != NULL, "net_parse failed: %s\n%s", err, text);
    return net;
}

void testnet_randomize(net_t *net, rng_t *r) {
    net_init_params(net, rng_u64(r));
    for (int i = 0; i < net->n_layers; i++) {
        layer_t *l = &net->layers[i];
        if (l->kind == LAYER_BATCHNORM) {
            for (int c = 0; c < l->c; c++) {
                l->weight[c] = (float)(1.0 + 0.3 * rng_normal(r));
                l->bias[c] = (float)(0.3 * rng_normal(r));
                l->run_mean[c] = (float)(0.5 * rng_normal(r));
                l->run_var[c] = (float)(0.5 + rng_uniform(r));
            }
        } else if (l->bias) {
            for (size_t j = 0; j < l->n_b; j++) l->bias[j] = (float)(rng_uniform(r) - 0.5);
        }
    }
}

void testnet_fill_normal(rng_t *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(r);
}

void testnet_fill_uniform(rng_t *r, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_uniform(r);
}

void testnet_fill_labels(rng_t *r, int *y, int n, int classes) {
    for (int i = 0; i < n; i++) y[i] = (int)rng_below(r, (uint32_t)classes);
}
