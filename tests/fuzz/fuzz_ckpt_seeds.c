/* tests/fuzz/fuzz_ckpt_seeds.c — writes the checkpoint harness's seed
 * corpus: for every configuration of fuzz_ckpt_world.h, N_SEEDS states
 * with random content, encoded by ps_ckpt_encode (the encoder kfac-ps
 * writes its checkpoints with) and checked to decode again, into
 * DIR/<config>-<k>.kfc. Usage: fuzz_ckpt_seeds DIR. Exit 0, or 1 with the
 * reason. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_ckpt_world.h"

#define N_SEEDS 3

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_ckpt_seeds DIR\n");
        return 1;
    }
    char err[1024], path[4096];
    for (int i = 0; i < FUZZ_CKPT_N_WORLDS; i++)
        for (int k = 0; k < N_SEEDS; k++) {
            if (fuzz_ckpt_world_randomize(i, 1000u * (unsigned)i + (unsigned)k + 1) < 0) return 1;
            ps_ckpt_state_t *st = fuzz_ckpt_world(i);
            uint8_t *buf = NULL;
            size_t len = 0;
            if (ps_ckpt_encode(st, &buf, &len, err, sizeof err) != 0) {
                fprintf(stderr, "fuzz_ckpt_seeds: encoding %s: %s\n", fuzz_ckpt_world_name(i), err);
                return 1;
            }
            if (ps_ckpt_decode(st, buf, len, 100.0, "seed", err, sizeof err) != 0) {
                fprintf(stderr, "fuzz_ckpt_seeds: a fresh %s checkpoint does not decode: %s\n",
                        fuzz_ckpt_world_name(i), err);
                free(buf);
                return 1;
            }
            snprintf(path, sizeof path, "%s/%s-%d.kfc", argv[1], fuzz_ckpt_world_name(i), k);
            FILE *f = fopen(path, "wb");
            int ok = f && fwrite(buf, 1, len, f) == len;
            if (f && fclose(f) != 0) ok = 0;
            free(buf);
            if (!ok) {
                fprintf(stderr, "fuzz_ckpt_seeds: %s: %s\n", path, strerror(errno));
                return 1;
            }
        }
    return 0;
}
