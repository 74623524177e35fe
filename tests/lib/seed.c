/* tests/lib/seed.c — see seed.h. */
#include "tests/lib/seed.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

uint64_t test_seed(void) {
    const char *env = getenv("KFAC_TEST_SEED");
    if (env && *env) return strtoull(env, NULL, 0);
    uint64_t s = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&s, sizeof s, 1, f) != 1) s = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    if (f) fclose(f);
    return s;
}
