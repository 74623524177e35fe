/* tests/ps/ckpt_fixture.h — the checkpoint tests' world (test_ps_ckpt.c,
 * test_ps_ckpt_records.c): a model with every kind of factor and block, an
 * optimizer of one kind with its scheduler and refresh state, the tables
 * a checkpoint carries; random contents; a field-by-field comparison; and
 * a checkpoint image with one record replaced. Linked into tests/ps/'s
 * programs (ps/module.mk). */
#ifndef KFAC_TESTS_PS_CKPT_FIXTURE_H
#define KFAC_TESTS_PS_CKPT_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/rng.h"
#include "common/kfac/kfac_opt.h"
#include "common/kfac/kfac_refresh.h"
#include "ps/ckpt.h"

/* Every kind of factor and block: conv (KFC), doubly-factored fc (K, Psi,
 * G, Gbias), batch norm (2x2 blocks, state), fc without bias. */
extern const char *ckfx_model;

typedef struct {
    net_t *net;
    kfac_opt_t *kfac;
    sgd_t *sgd;
    float *sgd_polyak; /* (n_params) with sgd */
    long sgd_polyak_count;
    ps_sched_block_t *sched;
    kfac_refresh_t **refresh;
    ps_norm_hist_t norms;
    ps_owners_t owners;
    ps_idents_t idents;
    ps_ckpt_state_t st;
} ckfx_world_t;

/* A world of kind "kfac", "kfac-eigen-adaptive" or "sgd" for model. */
void ckfx_world(ckfx_world_t *w, const char *kind, const char *model);
void ckfx_world_free(ckfx_world_t *w);
/* n member ids bound to random keys. */
void ckfx_random_owners(rng_t *r, ckfx_world_t *w, int n);
/* Random contents of every field a checkpoint carries. */
void ckfx_randomize(rng_t *r, ckfx_world_t *w);
/* b holds what a holds, field by field (inverse times against inv_now_s). */
void ckfx_expect_equal(const ckfx_world_t *a, const ckfx_world_t *b, double inv_now_s);
/* A checkpoint image (buf, len) with its record `tag` replaced by body
 * (NULL: none) and format version `version` (before 3 also without IDNT
 * and HIST, before 4 without DRFT, which it did not know), CRCs
 * recomputed: a new buffer
 * (*out_len bytes). */
uint8_t *ckfx_with_rec(const uint8_t *buf, size_t len, const char *tag, const uint8_t *body, size_t body_len,
                       uint32_t version, size_t *out_len);

#endif
