/* tests/lib/msg_fixture.h — random wire messages for the proto tests: a
 * random model shape (up to 6 layers: none / standard / doubly / batch norm)
 * with its limits, a random message of every type that fits it, deep
 * equality of two messages, and an encode+decode pass. Draws come from the
 * context's rng, seeded by test_seed() (printed by the tests). */
#ifndef KFAC_TESTS_LIB_MSG_FIXTURE_H
#define KFAC_TESTS_LIB_MSG_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/rng.h"
#include "proto/msg.h"

/* A random model: up to 6 layers of kinds none / standard (A, G) / doubly
 * (K, Psi, G, G_bias) / batch norm (2x2 blocks). */
typedef struct msgfx_ctx {
    uint64_t seed;
    rng_t rng;
    msg_layer_shape_t layers[6];
    msg_model_shape_t model;
    msg_limits_t lim; /* with model */
} msgfx_ctx_t;

void msgfx_ctx_init(msgfx_ctx_t *c);
float *msgfx_floats(rng_t *r, size_t n);
char *msgfx_string(rng_t *r, size_t max_len);
void msgfx_factor(rng_t *r, msg_factor_t *f, msg_factor_kind_t kind, uint32_t n, uint32_t nb);
void msgfx_stats(msgfx_ctx_t *c, msg_stats_t *st);
void msgfx_job_target(msgfx_ctx_t *c, uint32_t *layer, uint32_t *factor, uint32_t *n);
msg_role_t msgfx_client_role(rng_t *r);
void msgfx_random_msg(msgfx_ctx_t *c, msg_type_t t, msg_t *m);
int msgfx_str_eq(const char *a, const char *b);
int msgfx_arr_eq(const float *a, size_t na, const float *b, size_t nb);
int msgfx_stats_eq(const msg_stats_t *a, const msg_stats_t *b);
int msgfx_msg_eq(const msg_t *a, const msg_t *b);
void msgfx_wire(const msgfx_ctx_t *c, const msg_t *m, msg_t *out);

#endif
