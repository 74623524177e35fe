/* tests/fuzz/fuzz_model.h — the model shape the message harness and the
 * seed writer share: four layers (standard 5x5 A / 3x3 G; doubly K 4, Psi
 * 3, G 2, G_bias 2; batch norm with 3 units in 2x2 blocks; one without
 * statistics), 97 parameters, 6 state floats. Static storage, not
 * thread-safe (libFuzzer runs one input at a time). */
#ifndef KFAC_TESTS_FUZZ_MODEL_H
#define KFAC_TESTS_FUZZ_MODEL_H

#include "proto/msg.h"

#define FUZZ_N_PARAMS 97
#define FUZZ_N_STATE 6

/* Fill lim with the defaults and point lim->model at the shape. */
void fuzz_model_limits(msg_limits_t *lim);

#endif
