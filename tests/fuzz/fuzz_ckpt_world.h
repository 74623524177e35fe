/* tests/fuzz/fuzz_ckpt_world.h — the parameter-server states the checkpoint
 * harness decodes into and the seed writer encodes from: one small model
 * with every kind of factor block (conv KFC, doubly-factored fc, batch
 * norm, fc without bias), in three configurations:
 *   0  K-FAC, Cholesky inverses
 *   1  K-FAC, eigen inverses, adaptive refresh (SP-NGD history)
 *   2  SGD with its Polyak average
 * A checkpoint decodes only into the configuration that wrote it, so the
 * harness tries each. Static storage, built on first use, never freed (it
 * stays reachable: not a leak); not thread-safe (libFuzzer runs one input
 * at a time). */
#ifndef KFAC_TESTS_FUZZ_CKPT_WORLD_H
#define KFAC_TESTS_FUZZ_CKPT_WORLD_H

#include <stdint.h>

#include "ps/ckpt.h"

#define FUZZ_CKPT_N_WORLDS 3

/* World i (0..FUZZ_CKPT_N_WORLDS-1), built on the first call; NULL when it
 * cannot be built (reason on stderr). */
ps_ckpt_state_t *fuzz_ckpt_world(int i);

/* The name of world i, for seed file names ("kfac", "eigen-adaptive", "sgd"). */
const char *fuzz_ckpt_world_name(int i);

/* Random content in every field world i's checkpoint holds, from seed:
 * parameters, state, counters, norms, momentum, Polyak averages, SPD
 * factors with real inverses (a random quarter of them dropped), scheduler
 * and refresh state, member ids bound to CURVE keys. Returns 0, or -1 (reason on stderr). */
int fuzz_ckpt_world_randomize(int i, uint64_t seed);

#endif
