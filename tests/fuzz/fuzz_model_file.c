/* tests/fuzz/fuzz_model_file.c — libFuzzer harness of the model-file parser:
 * the input, as model text, through net_parse() (batch capacity 2); a model
 * that parses also gets its parameters initialised and one forward pass on
 * zeros, so that shapes the parser accepts are shapes the network can run.
 * Any crash, leak or undefined behaviour is a bug; rejections are expected.
 * Seeds: models/ and the experiment models. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/nn/nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0; /* model files are small; keeps each run fast */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[1024];
    net_t *net = net_parse(text, "fuzz.model", 2, err, sizeof err);
    free(text);
    if (!net) return 0;
    if (net->n_params <= ((size_t)1 << 22) && net->in_size <= (1 << 16)) {
        float *x = calloc((size_t)2 * (size_t)net->in_size, sizeof(float));
        if (x) {
            net_init_params(net, 1);
            net_forward(net, x, 2, 0);
            free(x);
        }
    }
    net_free(&net);
    return 0;
}
