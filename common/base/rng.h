/* common/base/rng.h — small, seeded, reproducible random numbers (xoshiro256**
 * seeded through splitmix64). Every random choice in the project (init,
 * shuffling, augmentation, dropout, sampled labels) draws from an rng_t so a
 * run is reproducible from its seed. Not thread-safe: one rng_t per thread. */
#ifndef KFAC_RNG_H
#define KFAC_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct rng { uint64_t s[4]; } rng_t;

static inline uint64_t rng_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Seed from one 64-bit value; equal seeds give equal streams. */
static inline void rng_seed(rng_t *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = rng_splitmix64(&seed);
}

static inline uint64_t rng_u64(rng_t *r) {
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5, res = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return res;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double rng_uniform(rng_t *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }

/* Uniform integer in [0, n), n > 0 (Lemire's multiply; bias < 2^-32 for n < 2^32). */
static inline uint32_t rng_below(rng_t *r, uint32_t n) {
    return (uint32_t)(((rng_u64(r) >> 32) * (uint64_t)n) >> 32);
}

/* Standard normal (Box-Muller, one value per call). */
static inline double rng_normal(rng_t *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
