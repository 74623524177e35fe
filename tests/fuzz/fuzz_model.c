/* tests/fuzz/fuzz_model.c — see fuzz_model.h. */
#include "tests/fuzz/fuzz_model.h"

static msg_layer_shape_t s_layers[4];
static msg_model_shape_t s_model;

void fuzz_model_limits(msg_limits_t *lim) {
    msg_limits_default(lim);
    msg_layer_shape_t *l = s_layers;
    l[0] = (msg_layer_shape_t){.n_factors = 2, .kind = {MSG_FACTOR_A, MSG_FACTOR_G}, .n = {5, 3}, .n_blocks = {1, 1}};
    l[1] = (msg_layer_shape_t){.n_factors = 4,
                               .kind = {MSG_FACTOR_K, MSG_FACTOR_PSI, MSG_FACTOR_G, MSG_FACTOR_G_BIAS},
                               .n = {4, 3, 2, 2},
                               .n_blocks = {1, 1, 1, 1}};
    l[2] = (msg_layer_shape_t){.n_factors = 1, .kind = {MSG_FACTOR_BN}, .n = {2}, .n_blocks = {3}};
    l[3] = (msg_layer_shape_t){.n_factors = 0};
    /* the fc layers' weights, for factored gradients: 4 -> 3 and 12 -> 2 */
    l[0].fc_out = 3, l[0].fc_in = 4;
    l[1].fc_out = 2, l[1].fc_in = 12;
    s_model = (msg_model_shape_t){.n_params = FUZZ_N_PARAMS, .n_state = FUZZ_N_STATE, .n_layers = 4, .layers = s_layers};
    lim->model = &s_model;
    lim->max_rows = 16;
}
