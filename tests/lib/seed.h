/* tests/lib/seed.h — the seed every randomized unit test starts from.
 *
 * Tests draw fresh random inputs on every run, so that a bug that only shows
 * for some inputs is found eventually; each test prints the seed it used, and
 * KFAC_TEST_SEED=N repeats that run exactly. */
#ifndef KFAC_TESTS_LIB_SEED_H
#define KFAC_TESTS_LIB_SEED_H

#include <stdint.h>

/* KFAC_TEST_SEED (decimal or 0x hex) when set and non-empty, else 8 bytes of
 * /dev/urandom, else the time mixed with the process id. */
uint64_t test_seed(void);

#endif
