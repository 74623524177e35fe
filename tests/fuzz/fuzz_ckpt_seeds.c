/* tests/fuzz/fuzz_ckpt_seeds.c — writes the checkpoint harness's seed
 * corpus: for every configuration of fuzz_ckpt_world.h, N_SEEDS states
 * with random content, encoded by ps_ckpt_encode (the encoder kfac-ps
 * writes its checkpoints with) and checked to decode again, into
 * DIR/<config>-<k>.kfc, and the same image in format version 1 (without
 * its OWNR record, the member ids bound to CURVE keys, and the IDNT record
 * after it, the members' identities), checked to decode
 * too, as DIR/<config>-<k>-v1.kfc. Usage: fuzz_ckpt_seeds DIR. Exit 0, or
 * 1 with the reason. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "tests/fuzz/fuzz_ckpt_world.h"

static void s_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* buf (len bytes, a version-2 or later image) turned into version 1 in
 * place: its OWNR record and the records after it (IDNT, version 3) cut
 * off, the header fixed. Returns the new length, or 0 when it has no OWNR
 * record. */
static size_t s_to_v1(uint8_t *buf, size_t len) {
    size_t at = PS_CKPT_HEADER_LEN;
    while (at + 16 <= len) {
        uint64_t n = 0;
        for (int i = 0; i < 8; i++) n |= (uint64_t)buf[at + 8 + (size_t)i] << (8 * i);
        if (memcmp(buf + at, "OWNR", 4) == 0) break;
        if (n > len - at - 16) return 0;
        at += 16 + (size_t)n;
    }
    if (at + 16 > len) return 0;
    uint64_t payload = at - PS_CKPT_HEADER_LEN;
    s_put32(buf + 8, 1);
    s_put32(buf + 16, (uint32_t)payload);
    s_put32(buf + 20, (uint32_t)(payload >> 32));
    s_put32(buf + 24, (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf + PS_CKPT_HEADER_LEN, (uInt)payload));
    s_put32(buf + 28, (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf, 28));
    return at;
}

/* Write len bytes of buf to path. Returns 0 or -1 (reason on stderr). */
static int s_write(const char *path, const uint8_t *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "fuzz_ckpt_seeds: %s: %s\n", path, strerror(errno));
    return ok ? 0 : -1;
}

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
            int rc = s_write(path, buf, len);
            size_t len1 = rc == 0 ? s_to_v1(buf, len) : 0;
            if (rc == 0 && (len1 == 0 || ps_ckpt_decode(st, buf, len1, 100.0, "seed-v1", err, sizeof err) != 0)) {
                fprintf(stderr, "fuzz_ckpt_seeds: the %s checkpoint in format version 1 does not decode: %s\n",
                        fuzz_ckpt_world_name(i), len1 ? err : "no OWNR record");
                rc = -1;
            }
            snprintf(path, sizeof path, "%s/%s-%d-v1.kfc", argv[1], fuzz_ckpt_world_name(i), k);
            if (rc == 0) rc = s_write(path, buf, len1);
            free(buf);
            if (rc < 0) return 1;
        }
    return 0;
}
