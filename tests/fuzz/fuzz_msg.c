/* tests/fuzz/fuzz_msg.c — libFuzzer harness of everything a daemon does with
 * bytes from the network: msg_decode() of the envelope and, for what
 * decodes, msg_validate() without a model and against a model that has every
 * kind of layer (standard A/G, doubly-factored K/Psi/G/G_bias, batch-norm
 * 2x2 blocks, a layer without statistics). Any crash, leak or undefined
 * behaviour is a bug (ASan + UBSan); a rejection is the expected outcome.
 * Seeds: tests/fuzz/fuzz_msg_seeds writes one real message of every type. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proto/msg.h"
#include "tests/fuzz/fuzz_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    msg_t m;
    memset(&m, 0, sizeof m);
    if (msg_decode(data, size, &m, err, sizeof err) == 0) {
        msg_limits_t lim;
        msg_limits_default(&lim);
        (void)msg_validate(&m, &lim, err, sizeof err);
        fuzz_model_limits(&lim);
        (void)msg_validate(&m, &lim, err, sizeof err);
    }
    msg_clear(&m);
    return 0;
}
